//! One replica's two planes, built on one fabric node, with nothing that owns a thread or reads a
//! clock: what the threaded [`crate::Replica`] and the simulator both drive.

use crate::background::{BackgroundDriver, TransferSettings};
use crate::config::{ConfigError, ReplicaConfig};
use crate::layout::{background_channel, BACKGROUND_BYTES};
use crate::memory::FabricMemory;
use crate::replication::{ReplicationDriver, Settings};
use crate::shared::Shared;
use mu_fabric::{Access, ConnId, Endpoint, Fabric, FabricError, NodeId};
use mu_replication::{Leader, LeaderConfig, LOG_REGION, SCRATCH_REGION};
use std::sync::Arc;

/// Why a replica could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("the fabric is node {fabric} but the configuration says this replica is {config}")]
    WrongNode { fabric: NodeId, config: NodeId },
    #[error("fabric: {0}")]
    Fabric(#[from] FabricError),
    #[error("{0}")]
    Other(String),
}

/// The replication plane and the background plane of one replica, sharing its regions.
pub struct ReplicaCore<F: Fabric> {
    pub replication: ReplicationDriver<F>,
    pub background: BackgroundDriver<F>,
}

/// Completion queue depth: the most completions one step of the engine can produce (a write per
/// slot to each follower being updated, each of which completes if it fails), bounded.
fn queue_depth(config: &ReplicaConfig) -> usize {
    let per_step = config.slots_count.saturating_mul(config.replicas.len() as u64);
    per_step.clamp(1024, 1 << 16) as usize
}

impl<F: Fabric> ReplicaCore<F> {
    /// Registers the replica's regions on `fabric` and builds both planes. `boot_id` (not 0)
    /// tells this run of the replica from earlier ones: permission managers rebind their
    /// connections when it changes.
    pub fn new(
        config: &ReplicaConfig,
        fabric: F,
        boot_id: u32,
    ) -> Result<ReplicaCore<F>, StartError> {
        let (replicas, layout) = config.validate()?;
        let members = config.initial_members(&replicas)?;
        if fabric.node() != config.me {
            return Err(StartError::WrongNode { fabric: fabric.node(), config: config.me });
        }
        if boot_id == 0 {
            return Err(StartError::Other("boot id 0 is reserved".into()));
        }
        let rw = Access::READ_WRITE;
        let log = fabric.register_region(LOG_REGION, layout.region_bytes(), rw)?;
        let scratch = fabric.register_region(
            SCRATCH_REGION,
            Leader::scratch_bytes(&replicas, &layout),
            Access::NONE,
        )?;
        let background =
            fabric.register_region(crate::layout::BACKGROUND_REGION, BACKGROUND_BYTES, rw)?;
        // Peers read snapshots from it; nobody else writes it.
        let snapshot = fabric.register_region(
            crate::layout::SNAPSHOT_REGION,
            crate::layout::snapshot_region_bytes(config.snapshot_bytes_max),
            Access::READ,
        )?;
        let shared = Arc::new(Shared::new(config.eligible, replicas.ids().to_vec(), members));

        let mut leader = Leader::new(LeaderConfig {
            me: config.me,
            replicas: replicas.clone(),
            layout,
            permission_grace_ns: config.permission_grace_ns,
            outstanding_max: config.outstanding_max,
        })
        .map_err(StartError::Other)?;
        leader.set_applied_members(members);
        let depth = queue_depth(config);
        let mut replication_ep = fabric.endpoint(depth)?;
        let mut background_ep = fabric.endpoint(depth)?;
        for &peer in replicas.ids().iter().filter(|&&p| p != config.me) {
            replication_ep
                .attach(ConnId::new(peer, crate::layout::replication_channel(config.me, peer)))?;
            background_ep.attach(ConnId::new(peer, background_channel(config.me, peer)))?;
        }
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
            boot_id,
            Settings {
                permission_timeout_ns: config.permission_timeout_ns,
                log_full_timeout_ns: config.log_full_timeout_ns,
                batch_requests_max: config.batch_requests_max,
                snapshot_bytes_max: config.snapshot_bytes_max,
            },
        );
        let background = BackgroundDriver::new(
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
        .map_err(StartError::Other)?;
        Ok(ReplicaCore { replication, background })
    }

    /// The leader this replica's failure detector elected.
    pub fn leader(&self) -> Option<NodeId> {
        self.replication.shared().leader()
    }

    pub fn status(&self) -> crate::ReplicaStatus {
        self.replication.shared().status(self.replication.engine().me())
    }
}
