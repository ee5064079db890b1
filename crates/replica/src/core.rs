//! One replica's two planes, built on one fabric node, with nothing that owns a thread or reads a
//! clock: what the threaded [`crate::Replica`] and the simulator both drive.

use crate::ask_ahead::AskAhead;
use crate::background::{BackgroundDriver, TransferSettings};
use crate::config::Protocol;
use crate::config::{ConfigError, ReplicaConfig};
use crate::layout::{background_channel, BACKGROUND_BYTES};
use crate::lease::{Appointment, Term};
use crate::memory::FabricMemory;
use crate::mu::ReplicationDriver;
use crate::replication::{Applier, ProposeError, Settings};
use crate::setup_trace::Poller;
use crate::shared::Shared;
use crate::velos::VelosDriver;
use mu_fabric::{Access, ConnId, Endpoint, Fabric, FabricError, LocalRegion, NodeId};
use mu_replication::membership::Change;
use mu_replication::{Leader, LeaderConfig, LOG_REGION, SCRATCH_REGION};
use std::sync::Arc;

/// Why a replica could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The configuration cannot work ([`ReplicaConfig::validate`]).
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// The fabric node given is not the replica the configuration names as `me`.
    #[error("the fabric is node {fabric} but the configuration says this replica is {config}")]
    WrongNode {
        /// The fabric node's id.
        fabric: NodeId,
        /// The configuration's `me`.
        config: NodeId,
    },
    /// The fabric refused a region or a connection.
    #[error("fabric: {0}")]
    Fabric(#[from] FabricError),
    /// Anything else that stopped the start: an engine that refused the configuration, a
    /// thread that could not be started.
    #[error("{0}")]
    Other(String),
}

/// The replication plane and the background plane of one replica, sharing its regions.
pub struct ReplicaCore<F: Fabric> {
    /// The plane that replicates: the leader engine and the replayer.
    pub replication: ReplicationPlane<F>,
    /// The plane that watches: heartbeat, failure detector, permissions, log heads.
    pub background: BackgroundDriver<F>,
}

/// The replication plane of either engine, behind one set of calls.
// One per replica, built once and never moved on the fast path: boxing would only add a
// pointer hop to every call.
#[allow(clippy::large_enum_variant)]
pub enum ReplicationPlane<F: Fabric> {
    /// Mu's engine (§4): permissions, prepare and accept over one-sided writes.
    Mu(ReplicationDriver<F>),
    /// Velos's engine: one-sided compare-and-swap into each slot.
    Velos(VelosDriver<F>),
}

impl<F: Fabric> ReplicationPlane<F> {
    /// Whether a new leadership's polls are being timed: see [`ReplicationDriver::setup_timed`]
    /// and [`VelosDriver::setup_timed`].
    pub fn setup_timed(&self) -> bool {
        match self {
            ReplicationPlane::Mu(d) => d.setup_timed(),
            ReplicationPlane::Velos(d) => d.setup_timed(),
        }
    }

    /// Counts the time the last poll took against the new leadership's set-up, and traces it:
    /// it began at `start_ns`, took `busy_ns`, did something or not (`busy`), on `poller`.
    pub fn note_setup_poll(&mut self, start_ns: u64, busy_ns: u64, busy: bool, poller: Poller) {
        match self {
            ReplicationPlane::Mu(d) => d.note_setup_poll(start_ns, busy_ns, busy, poller),
            ReplicationPlane::Velos(d) => d.note_setup_poll(start_ns, busy_ns, busy, poller),
        }
    }

    /// See [`ReplicationDriver::poll`].
    pub fn poll(&mut self, now_ns: u64, app: &mut dyn Applier) -> bool {
        match self {
            ReplicationPlane::Mu(d) => d.poll(now_ns, app),
            ReplicationPlane::Velos(d) => d.poll(now_ns, app),
        }
    }

    /// See [`ReplicationDriver::submit`].
    pub fn submit<'a>(
        &mut self,
        requests: impl IntoIterator<Item = &'a [u8]>,
        now_ns: u64,
    ) -> Result<(), ProposeError> {
        match self {
            ReplicationPlane::Mu(d) => d.submit(requests, now_ns),
            ReplicationPlane::Velos(d) => d.submit(requests, now_ns),
        }
    }

    /// See [`ReplicationDriver::submit_change`] and [`VelosDriver::submit_change`].
    pub fn submit_change(&mut self, change: Change, now_ns: u64) -> Result<(), ProposeError> {
        match self {
            ReplicationPlane::Mu(d) => d.submit_change(change, now_ns),
            ReplicationPlane::Velos(d) => d.submit_change(change, now_ns),
        }
    }

    /// See [`ReplicationDriver::outcomes_ready`].
    pub fn outcomes_ready(&self) -> bool {
        match self {
            ReplicationPlane::Mu(d) => d.outcomes_ready(),
            ReplicationPlane::Velos(d) => d.outcomes_ready(),
        }
    }

    /// See [`ReplicationDriver::take_outcomes`].
    pub fn take_outcomes(&mut self, into: &mut Vec<Result<u64, ProposeError>>) -> bool {
        match self {
            ReplicationPlane::Mu(d) => d.take_outcomes(into),
            ReplicationPlane::Velos(d) => d.take_outcomes(into),
        }
    }

    /// See [`ReplicationDriver::shut_down`].
    pub fn shut_down(&mut self) {
        match self {
            ReplicationPlane::Mu(d) => d.shut_down(),
            ReplicationPlane::Velos(d) => d.shut_down(),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        match self {
            ReplicationPlane::Mu(d) => d.shared(),
            ReplicationPlane::Velos(d) => d.shared(),
        }
    }

    /// Mu's driver, when this replica runs Mu.
    pub fn mu(&self) -> Option<&ReplicationDriver<F>> {
        match self {
            ReplicationPlane::Mu(d) => Some(d),
            ReplicationPlane::Velos(_) => None,
        }
    }

    /// Velos's driver, when this replica runs Velos.
    pub fn velos(&self) -> Option<&VelosDriver<F>> {
        match self {
            ReplicationPlane::Velos(d) => Some(d),
            ReplicationPlane::Mu(_) => None,
        }
    }

    /// A line about the engine's state, for traces.
    pub fn phase_text(&self) -> String {
        match self {
            ReplicationPlane::Mu(d) => format!("{:?}", d.engine().phase()),
            ReplicationPlane::Velos(d) => match d.proposer().phase() {
                Some(p) => format!("velos {p:?} at {}", d.proposer().next_index()),
                None => format!("velos follower at {}", d.applied()),
            },
        }
    }
}

/// The background plane's region, the snapshot region, and the state both planes share.
type BackgroundState<F> = (<F as Fabric>::Region, <F as Fabric>::Region, Arc<Shared>);

/// Completion queue depth: the most completions one step of the engine can produce (a write per
/// slot to each follower being updated, each of which completes if it fails), bounded.
fn queue_depth(config: &ReplicaConfig) -> usize {
    let per_step = config.slots_count.saturating_mul(config.replicas.len() as u64);
    per_step.clamp(1024, 1 << 16) as usize
}

/// What tells this run of a replica from its earlier runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Boot {
    /// Not 0. Published with the heartbeat: permission managers rebind their connections when
    /// a peer's changes.
    pub id: u32,
    /// 64 bits that differ between runs of a replica but for a chance in 2^64. Velos makes its
    /// rejoin requests from them (`mu_velos::recovery::request`): a request equal to one of an
    /// earlier run could take that run's rejoin entry for this one's.
    pub nonce: u64,
}

impl Boot {
    /// A boot for a new process: the id from the clock and the process id, the nonce from
    /// those hashed under the process's random hash keys (128 bits the standard library draws
    /// from the operating system). A simulator gives its own, drawn from its seed, so that a
    /// run replays exactly.
    pub fn fresh() -> Boot {
        use std::hash::BuildHasher;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let pid = std::process::id();
        let mixed = (nanos ^ (u64::from(pid) << 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let id = ((mixed >> 32) as u32).max(1);
        let nonce = std::collections::hash_map::RandomState::new().hash_one((id, pid, nanos));
        Boot { id, nonce }
    }
}

impl<F: Fabric> ReplicaCore<F> {
    /// Registers the replica's regions on `fabric` and builds both planes; `boot` tells this
    /// run of the replica from earlier ones.
    pub fn new(
        config: &ReplicaConfig,
        fabric: F,
        boot: Boot,
    ) -> Result<ReplicaCore<F>, StartError> {
        let Boot { id: boot_id, nonce: run_nonce } = boot;
        let (replicas, layout) = config.validate()?;
        let members = config.initial_members(&replicas)?;
        if fabric.node() != config.me {
            return Err(StartError::WrongNode { fabric: fabric.node(), config: config.me });
        }
        if boot_id == 0 {
            return Err(StartError::Other("boot id 0 is reserved".into()));
        }
        let rw = Access::READ_WRITE;
        if config.protocol == Protocol::Velos {
            return ReplicaCore::new_velos(
                config,
                fabric,
                &replicas,
                (layout, members, boot_id),
                run_nonce,
            );
        }
        let log = fabric.register_region(LOG_REGION, layout.region_bytes(), rw)?;
        let scratch = fabric.register_region(
            SCRATCH_REGION,
            Leader::scratch_bytes(&replicas, &layout),
            Access::NONE,
        )?;
        let (background, snapshot, shared) =
            ReplicaCore::background_state(config, &fabric, replicas.ids(), (members, boot_id))?;

        let mut leader = Leader::new(LeaderConfig {
            me: config.me,
            replicas: replicas.clone(),
            layout,
            permission_grace_ns: config.permission_grace_ns,
            outstanding_max: config.outstanding_max,
        })
        .map_err(StartError::Other)?;
        leader.set_applied_members(members);
        // Back-pressure: a follower whose head moves is waited for, not dropped to fall a log
        // behind; one that stood still this long is dropped while a majority remains, well
        // before the proposals waiting for it fail with "log full".
        leader.set_drop_stalled_after_ns(config.log_full_timeout_ns / 2);
        let (replication_ep, background_ep) =
            ReplicaCore::endpoints(config, &fabric, &replicas, queue_depth(config))?;
        let mem = FabricMemory { log: log.clone(), scratch, shared: shared.clone() };
        let replication = ReplicationDriver::new(
            fabric.clone(),
            replicas.clone(),
            layout,
            leader,
            mem,
            background.clone(),
            snapshot.clone(),
            replication_ep,
            Settings::of(config),
        );
        let background = ReplicaCore::background_driver(
            config,
            fabric,
            replicas,
            (log, background, snapshot),
            background_ep,
            shared,
        )?;
        Ok(ReplicaCore { replication: ReplicationPlane::Mu(replication), background })
    }

    /// Velos: the Velos region (slot words, value logs) instead of Mu's log, whose header
    /// alone is kept for the head word the background plane publishes.
    fn new_velos(
        config: &ReplicaConfig,
        fabric: F,
        replicas: &mu_replication::ReplicaSet,
        (layout, members, boot_id): (mu_log::LogLayout, u64, u32),
        run_nonce: u64,
    ) -> Result<ReplicaCore<F>, StartError> {
        let velos_layout =
            mu_velos::VelosLayout::new(layout, replicas.len()).map_err(StartError::Other)?;
        let head_only = mu_log::LogLayout::new(2, mu_log::MIN_SLOT_BYTES, layout.integrity())
            .expect("the smallest log layout");
        let log = fabric.register_region(LOG_REGION, head_only.region_bytes(), Access::READ)?;
        let region = fabric.register_region(
            mu_velos::VELOS_REGION,
            velos_layout.region_bytes(),
            Access::ALL,
        )?;
        // The proposer compare-and-swaps this replica's own words through the region on every
        // prepare and accept, and cannot go on without it: a fabric that cannot (verbs whose
        // loopback for local atomics could not be set up) is refused here, not once elected.
        // A swap of 0 for 0 on the fresh region changes nothing.
        region.compare_swap_u64(velos_layout.word_offset(0) as usize, 0, 0).map_err(|e| {
            StartError::Other(format!(
                "Velos needs compare-and-swap on the replica's own memory, and this fabric \
                 refused it: {e}"
            ))
        })?;
        let (background, snapshot, shared) =
            ReplicaCore::background_state(config, &fabric, replicas.ids(), (members, boot_id))?;
        let me_pos = replicas.position(config.me).expect("validated");
        let proposer = mu_velos::Proposer::new(mu_velos::ProposerConfig {
            me: me_pos,
            layout: velos_layout,
            members,
            prepare_ahead: config.prepare_ahead,
        })
        .map_err(StartError::Other)?;
        let depth = crate::velos::queue_depth(config.prepare_ahead, replicas.len());
        let (replication_ep, background_ep) =
            ReplicaCore::endpoints(config, &fabric, replicas, depth)?;
        let settings = Settings::of(config);
        let replication = VelosDriver::new(
            fabric.clone(),
            replicas.clone(),
            velos_layout,
            proposer,
            region,
            log.clone(),
            snapshot.clone(),
            (replication_ep, depth),
            shared.clone(),
            (settings, run_nonce),
        );
        let background = ReplicaCore::background_driver(
            config,
            fabric,
            replicas.clone(),
            (log, background, snapshot),
            background_ep,
            shared,
        )?;
        Ok(ReplicaCore { replication: ReplicationPlane::Velos(replication), background })
    }

    /// The background plane's region, the snapshot region and the state both planes share,
    /// the same under both engines.
    fn background_state(
        config: &ReplicaConfig,
        fabric: &F,
        ids: &[NodeId],
        (members, boot_id): (u64, u32),
    ) -> Result<BackgroundState<F>, StartError> {
        let background = fabric.register_region(
            crate::layout::BACKGROUND_REGION,
            BACKGROUND_BYTES,
            Access::READ_WRITE,
        )?;
        // Peers read snapshots from it; nobody else writes it.
        let snapshot = fabric.register_region(
            crate::layout::SNAPSHOT_REGION,
            crate::layout::snapshot_region_bytes(config.snapshot_bytes_max),
            Access::READ,
        )?;
        let mut shared =
            Shared::new(config.eligible, ids.to_vec(), members, boot_id, config.fingerprint());
        shared.leaders = config.leaders;
        shared.ask_ahead = AskAhead::new(boot_id, config.protocol == Protocol::Mu);
        Ok((background, snapshot, Arc::new(shared)))
    }

    /// The replication plane's endpoint (of `replication_depth` entries) and the background
    /// plane's, each with its connection to every peer attached.
    fn endpoints(
        config: &ReplicaConfig,
        fabric: &F,
        replicas: &mu_replication::ReplicaSet,
        replication_depth: usize,
    ) -> Result<(F::Endpoint, F::Endpoint), StartError> {
        let mut replication_ep = fabric.endpoint(replication_depth)?;
        let mut background_ep = fabric.endpoint(queue_depth(config))?;
        for &peer in replicas.ids().iter().filter(|&&p| p != config.me) {
            replication_ep
                .attach(ConnId::new(peer, crate::layout::replication_channel(config.me, peer)))?;
            background_ep.attach(ConnId::new(peer, background_channel(config.me, peer)))?;
        }
        Ok((replication_ep, background_ep))
    }

    /// The background plane's driver, the same under both engines: `regions` are the log (whose
    /// head it publishes), the background region and the snapshot region.
    fn background_driver(
        config: &ReplicaConfig,
        fabric: F,
        replicas: mu_replication::ReplicaSet,
        (log, background, snapshot): (F::Region, F::Region, F::Region),
        background_ep: F::Endpoint,
        shared: Arc<Shared>,
    ) -> Result<BackgroundDriver<F>, StartError> {
        BackgroundDriver::new(
            fabric,
            replicas,
            config.detector.clone(),
            log,
            background,
            snapshot,
            TransferSettings {
                slots_count: config.slots_count,
                snapshot_bytes_max: config.snapshot_bytes_max,
                timeout_ns: config.permission_timeout_ns,
            },
            background_ep,
            shared,
        )
        .map_err(StartError::Other)
    }

    /// The leader this replica's failure detector elected.
    pub fn leader(&self) -> Option<NodeId> {
        self.replication.shared().leader()
    }

    /// Appoints the leader, where [`crate::ReplicaConfig::leaders`] is `Appointed` (ignored
    /// otherwise): the primary the membership's latest view names, `None` for nobody. Rule 1
    /// of leased reads (`docs/protocols/lease-reads.md`) is the caller's: appoint this replica
    /// only once `Active(view)` held here for the view that names it.
    pub fn appoint(&self, appointment: Option<Appointment>) {
        self.replication.shared().appoint(appointment)
    }

    /// The leadership under way on this replica, if any: the appointment it started under and
    /// its serial number (for [`crate::LeaseGate`]).
    pub fn term(&self) -> Option<Term> {
        self.replication.shared().term()
    }

    /// What the replica reports about itself (as [`crate::Replica::status`]).
    pub fn status(&self) -> crate::ReplicaStatus {
        let me = self.background.me();
        self.replication.shared().status(me)
    }
}
