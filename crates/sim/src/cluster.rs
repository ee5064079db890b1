//! A cluster of replica cores on the simulated fabric, driven in virtual time from one thread.
//!
//! Every replica is the production runtime ([`ReplicaCore`]: both planes, the real engines) on
//! its own node of one [`SimWorld`]. A round polls every running, unpaused replica once and then
//! lets virtual time move on by [`SimCluster::poll_period_ns`] ([`QUANTUM_NS`] unless a hardware
//! profile sets it); nothing else runs, so a run is a function of the seed and the calls made.
//!
//! The state machine of each replica records the entries it applied (what the checkers compare)
//! and applies their requests to a key-value [`Store`] (what clients read their replies from).

use crate::check;
use mu_fabric::NodeId;
use mu_fabric_sim::{SimConfig, SimFabric, SimWorld};
use mu_kv::Store;
use mu_log::EntryKind;
use mu_replica::Change;
use mu_replica::{Applier, Boot, ProposeError, ReplicaConfig, ReplicaCore};
use std::collections::BTreeSet;

/// Virtual time between two rounds of polling every replica, by default.
pub const QUANTUM_NS: u64 = 250;

pub struct SimCluster {
    pub world: SimWorld,
    pub configs: Vec<ReplicaConfig>,
    pub cores: Vec<Option<ReplicaCore<SimFabric>>>,
    /// What each replica applied, entry by entry in order: (index, its requests).
    pub applied: Vec<Vec<(u64, Vec<Vec<u8>>)>>,
    /// Paused replicas are not polled (their threads are descheduled).
    pub paused: Vec<bool>,
    /// Every acknowledged proposal: (index, value).
    pub acked: Vec<(u64, Vec<u8>)>,
    /// The requests each replica is proposing, until their outcomes arrive.
    pub outstanding: Vec<Option<Vec<Vec<u8>>>>,
    /// The last outcomes of each replica's proposals, one per request.
    pub outcomes: Vec<Option<Vec<Result<u64, ProposeError>>>>,
    boots: u32,
    /// Whether each replica was ever started.
    pub ran: Vec<bool>,
    /// Links cut by [`SimCluster::partition_random`], until [`SimCluster::heal_all`].
    pub partitions: Vec<(NodeId, NodeId)>,
    /// Each replica's key-value store: its requests applied in log order.
    pub stores: Vec<Store>,
    /// Every request handed to a replica to propose (membership changes as their label): what
    /// the validity checker accepts.
    pub proposed: BTreeSet<Vec<u8>>,
    /// Requests whose only attempt failed with an error that says they can never take effect
    /// ([`ProposeError::never_applied`]): no replica may apply them.
    pub refused: BTreeSet<Vec<u8>>,
    /// Requests handed over more than once (a client's retry): each attempt may be decided,
    /// so only these may be applied at two indices.
    pub retried: BTreeSet<Vec<u8>>,
    /// Every request (membership changes as their label) any replica applied, in any of its
    /// processes. A restart empties a replica's `applied` and a state transfer replaces it, so
    /// without this a refused request applied only by replicas that restarted before the next
    /// check would go unseen.
    pub applied_ever: BTreeSet<Vec<u8>>,
    /// The boot number of each replica's current process (0: never started): tells a restarted
    /// replica from the process a client handed its request to.
    pub boot_of: Vec<u32>,
    /// Virtual time between two rounds: how often each replica's threads poll.
    pub poll_period_ns: u64,
    /// Whether a replica is not polled while its node's CPU is busy with a control-plane call
    /// that costs time on RDMA ([`SimWorld::node_busy_until`]: `ibv_modify_qp` blocks the
    /// thread that calls it). The replica's threads are not told apart: none is polled.
    /// Default false (control calls cost no time), as before hardware profiles.
    pub block_on_control: bool,
}

pub fn config(n: u16, me: u16) -> ReplicaConfig {
    let mut c = ReplicaConfig::new(NodeId(me), (0..n).map(NodeId).collect());
    c.slots_count = 64;
    c.slot_bytes = 128;
    c.detector.read_period_ns = 20_000;
    c.permission_timeout_ns = 2_000_000;
    c.log_full_timeout_ns = 5_000_000;
    c
}

impl SimCluster {
    pub fn new(n: u16, seed: u64) -> SimCluster {
        SimCluster::with(n, seed, |_| {})
    }

    pub fn with(n: u16, seed: u64, tweak: impl Fn(&mut ReplicaConfig)) -> SimCluster {
        SimCluster::with_members(n, &(0..n).collect::<Vec<_>>(), seed, tweak)
    }

    /// A cluster of `n` possible replicas whose initial configuration is `members` (§5.4). The
    /// others are not started: [`SimCluster::start`] starts one, to be added.
    pub fn with_members(
        n: u16,
        members: &[u16],
        seed: u64,
        tweak: impl Fn(&mut ReplicaConfig),
    ) -> SimCluster {
        SimCluster::with_fabric(n, members, seed, SimConfig::default(), tweak)
    }

    /// A cluster as [`SimCluster::with_members`] makes, on a simulated fabric set up as
    /// `fabric` says.
    pub fn with_fabric(
        n: u16,
        members: &[u16],
        seed: u64,
        fabric: SimConfig,
        tweak: impl Fn(&mut ReplicaConfig),
    ) -> SimCluster {
        let world = SimWorld::new(fabric, seed);
        let configs: Vec<ReplicaConfig> = (0..n)
            .map(|me| {
                let mut c = config(n, me);
                c.members = Some(members.iter().copied().map(NodeId).collect());
                c.eligible = members.contains(&me);
                tweak(&mut c);
                c
            })
            .collect();
        let mut cluster = SimCluster {
            world,
            configs,
            cores: Vec::new(),
            applied: vec![Vec::new(); n as usize],
            paused: vec![false; n as usize],
            acked: Vec::new(),
            outstanding: vec![None; n as usize],
            outcomes: vec![None; n as usize],
            boots: 0,
            ran: vec![false; n as usize],
            partitions: Vec::new(),
            stores: vec![Store::new(); n as usize],
            proposed: BTreeSet::new(),
            refused: BTreeSet::new(),
            applied_ever: BTreeSet::new(),
            retried: BTreeSet::new(),
            boot_of: vec![0; n as usize],
            poll_period_ns: QUANTUM_NS,
            block_on_control: false,
        };
        for me in 0..n {
            let core = members.contains(&me).then(|| cluster.boot(me));
            cluster.cores.push(core);
        }
        cluster
    }

    /// Starts replica `pos`, which never ran, outside the configuration: it joins once added.
    pub fn start(&mut self, pos: usize) {
        assert!(self.cores[pos].is_none(), "start a replica that is not running");
        let core = self.boot(pos as u16);
        self.cores[pos] = Some(core);
    }

    /// Whether replica `pos` runs, has not been removed, and has not stopped (refused as
    /// restarted without rejoining: [`SimCluster::restart_as_new`]).
    pub fn in_cluster(&self, pos: usize) -> bool {
        self.cores[pos].as_ref().is_some_and(|c| {
            let status = c.status();
            !status.removed && status.failure.is_none()
        })
    }

    fn boot(&mut self, me: u16) -> ReplicaCore<SimFabric> {
        self.boots += 1;
        self.ran[me as usize] = true;
        self.boot_of[me as usize] = self.boots;
        let fabric = self.world.node(NodeId(me));
        // The nonce from the seed: a run replays exactly (boots are numbered within the world,
        // so each has its own).
        let mut rng =
            mu_fabric_sim::SimRng::new(self.world.seed() ^ u64::from(self.boots).rotate_left(40));
        let boot = Boot { id: self.boots, nonce: rng.next_u64() };
        ReplicaCore::new(&self.configs[me as usize], fabric, boot).expect("replica starts")
    }

    /// One round: every live, running replica polls both planes; then time moves on.
    pub fn round(&mut self) {
        let now = self.world.now_ns();
        for (pos, core) in self.cores.iter_mut().enumerate() {
            let Some(core) = core else { continue };
            if self.paused[pos] {
                continue;
            }
            if self.block_on_control && self.world.node_busy_until(NodeId(pos as u16)) > now {
                continue;
            }
            core.background.poll(now);
            let mut recorder = Recorder {
                applied: &mut self.applied[pos],
                store: &mut self.stores[pos],
                ever: &mut self.applied_ever,
            };
            core.replication.poll(now, &mut recorder);
            let mut outcomes = Vec::new();
            if core.replication.take_outcomes(&mut outcomes) {
                let values = self.outstanding[pos].take().expect("outcomes of a proposal");
                assert_eq!(values.len(), outcomes.len(), "one outcome per request");
                for (value, outcome) in values.into_iter().zip(&outcomes) {
                    if let Ok(index) = outcome {
                        self.acked.push((*index, value));
                    }
                }
                self.outcomes[pos] = Some(outcomes);
            }
        }
        self.world.run_until(now + self.poll_period_ns.max(1));
    }

    pub fn run_for(&mut self, ns: u64) {
        let end = self.world.now_ns() + ns;
        while self.world.now_ns() < end {
            self.round();
        }
    }

    /// The leader every live, running replica agrees on, if they do and it is one of them.
    /// Only the members of the configuration the most advanced replica applied need agree (a
    /// replica started to join, whose addition was never decided, knows nothing better).
    pub fn agreed_leader(&self) -> Option<NodeId> {
        let members = self.members_now();
        let mut leaders = self
            .cores
            .iter()
            .enumerate()
            .filter(|(pos, _)| self.in_cluster(*pos) && !self.paused[*pos])
            .filter(|(pos, _)| members.contains(&NodeId(*pos as u16)))
            .map(|(_, c)| c.as_ref().unwrap().leader());
        let first = leaders.next()??;
        let live = self.in_cluster(first.0 as usize) && !self.paused[first.0 as usize];
        (live && leaders.all(|l| l == Some(first))).then_some(first)
    }

    /// The configuration as the running replica that applied the most applied it.
    pub fn members_now(&self) -> Vec<NodeId> {
        (0..self.cores.len())
            .filter(|&p| self.in_cluster(p))
            .max_by_key(|&p| self.applied[p].len())
            .map_or(Vec::new(), |p| self.cores[p].as_ref().unwrap().status().members)
    }

    /// Runs until the live replicas agree on a leader, for at most `limit_ns`.
    pub fn await_leader(&mut self, limit_ns: u64) -> NodeId {
        let end = self.world.now_ns() + limit_ns;
        while self.world.now_ns() < end {
            if let Some(l) = self.agreed_leader() {
                return l;
            }
            self.round();
        }
        panic!("no agreed leader after {limit_ns} ns: {}", self.describe());
    }

    /// What every replica thinks, for failure messages.
    pub fn describe(&self) -> String {
        let views: Vec<_> = self
            .cores
            .iter()
            .enumerate()
            .map(|(pos, c)| {
                let scores: Vec<_> = c.as_ref().map_or(Vec::new(), |c| {
                    (0..self.cores.len())
                        .map(|p| c.background.detector().score(NodeId(p as u16)))
                        .collect()
                });
                let view = c.as_ref().map(|c| {
                    (
                        c.leader(),
                        c.replication.phase_text(),
                        c.status(),
                        c.background.permission_holder(),
                    )
                });
                format!(
                    "\n  replica {pos} paused {} applied {}: {view:?} scores {scores:?}",
                    self.paused[pos],
                    self.applied[pos].len()
                )
            })
            .collect();
        format!("t = {} ns, seed {}:{}", self.world.now_ns(), self.world.seed(), views.concat())
    }

    /// Proposes at replica `pos` and runs until it has an outcome, for at most `limit_ns`.
    pub fn propose(
        &mut self,
        pos: usize,
        value: &[u8],
        limit_ns: u64,
    ) -> Option<Result<u64, ProposeError>> {
        self.propose_many(pos, &[value], limit_ns)?.pop()
    }

    /// Proposes several requests at once at replica `pos` and runs until they have outcomes,
    /// for at most `limit_ns`.
    pub fn propose_many(
        &mut self,
        pos: usize,
        values: &[&[u8]],
        limit_ns: u64,
    ) -> Option<Vec<Result<u64, ProposeError>>> {
        let now = self.world.now_ns();
        if let Err(e) = self.submit_many(pos, values) {
            return Some(values.iter().map(|_| Err(e.clone())).collect());
        }
        let end = now + limit_ns;
        while self.world.now_ns() < end {
            self.round();
            self.cores[pos].as_ref()?;
            if let Some(outcomes) = self.outcomes[pos].take() {
                return Some(outcomes);
            }
        }
        None
    }

    /// Hands `value` to replica `pos` without waiting. Its outcome lands in `outcomes[pos]`
    /// (and `acked`) during later rounds.
    pub fn submit(&mut self, pos: usize, value: &[u8]) -> Result<(), ProposeError> {
        self.submit_many(pos, &[value])
    }

    /// Hands several requests to replica `pos` at once (batched, several entries outstanding).
    pub fn submit_many(&mut self, pos: usize, values: &[&[u8]]) -> Result<(), ProposeError> {
        let now = self.world.now_ns();
        let core = self.cores[pos].as_mut().expect("a live replica");
        core.replication.submit(values.iter().copied(), now)?;
        for v in values {
            if !self.proposed.insert(v.to_vec()) {
                self.retried.insert(v.to_vec());
            }
        }
        self.outstanding[pos] = Some(values.iter().map(|v| v.to_vec()).collect());
        self.outcomes[pos] = None;
        Ok(())
    }

    /// Hands replica `pos` a membership change (§5.4). Its outcome lands in `outcomes[pos]`,
    /// and in `acked` as the label [`Recorder`] applies it with.
    pub fn submit_change(&mut self, pos: usize, change: Change) -> Result<(), ProposeError> {
        let now = self.world.now_ns();
        let core = self.cores[pos].as_mut().expect("a live replica");
        core.replication.submit_change(change, now)?;
        let label = change_label(&change.encode());
        if !self.proposed.insert(label.clone()) {
            // The same change again (changes have no identity of their own): an earlier
            // submission refused for good no longer says that no replica may apply it.
            self.refused.remove(&label);
            self.retried.insert(label.clone());
        }
        self.outstanding[pos] = Some(vec![label]);
        self.outcomes[pos] = None;
        Ok(())
    }

    /// Makes a membership change at whoever leads, for at most `limit_ns`; returns its index.
    pub fn change_anywhere(&mut self, change: Change, limit_ns: u64) -> u64 {
        let end = self.world.now_ns() + limit_ns;
        while self.world.now_ns() < end {
            let pos = self.await_leader(end - self.world.now_ns()).0 as usize;
            if self.outstanding[pos].is_some() {
                self.round();
                continue;
            }
            self.submit_change(pos, change).unwrap_or_else(|e| panic!("{change:?}: {e}"));
            while self.world.now_ns() < end && self.cores[pos].is_some() {
                self.round();
                if let Some(mut outcomes) = self.outcomes[pos].take() {
                    match outcomes.pop().expect("one outcome") {
                        Ok(index) => return index,
                        Err(e) => panic!("{change:?} failed: {e}: {}", self.describe()),
                    }
                }
            }
        }
        panic!("{change:?} not decided within {limit_ns} ns: {}", self.describe());
    }

    /// Proposes at whoever leads until it commits, for at most `limit_ns` in all.
    pub fn propose_anywhere(&mut self, value: &[u8], limit_ns: u64) -> u64 {
        let end = self.world.now_ns() + limit_ns;
        while self.world.now_ns() < end {
            let leader = self.await_leader(end - self.world.now_ns());
            let pos = leader.0 as usize;
            if self.outstanding[pos].is_some() {
                self.round(); // an earlier proposal there has not finished yet
                continue;
            }
            match self.propose(pos, value, end - self.world.now_ns()) {
                Some(Ok(index)) => return index,
                Some(Err(_)) | None => self.run_for(10_000),
            }
        }
        panic!(
            "{:?} not committed within {limit_ns} ns: {}",
            String::from_utf8_lossy(value),
            self.describe()
        );
    }

    pub fn crash(&mut self, pos: usize) {
        self.world.crash(NodeId(pos as u16)).unwrap();
        self.cores[pos] = None;
    }

    /// Restarts crashed replica `pos` as a new process: its log and its state machine are
    /// gone, so it starts recovering (not eligible) and applies everything again from index 0.
    pub fn restart(&mut self, pos: usize) {
        self.restart_with(pos, false);
    }

    /// Restarts crashed replica `pos` as [`SimCluster::restart`] does, but told it is a member
    /// in good standing (`eligible: true`), as an operator who forgot that its log was lost
    /// would: the others must refuse it.
    pub fn restart_as_new(&mut self, pos: usize) {
        self.restart_with(pos, true);
    }

    fn restart_with(&mut self, pos: usize, eligible: bool) {
        assert!(self.cores[pos].is_none(), "restart a crashed replica");
        self.world.restart(NodeId(pos as u16)).unwrap();
        self.configs[pos].eligible = eligible;
        self.applied[pos].clear();
        self.stores[pos] = Store::new();
        self.outstanding[pos] = None;
        self.outcomes[pos] = None;
        self.paused[pos] = false;
        let core = self.boot(pos as u16);
        self.cores[pos] = Some(core);
    }

    /// Pauses a running replica picked by `rng`, if the one picked runs.
    pub fn pause_random(&mut self, rng: &mut mu_fabric_sim::SimRng) {
        let pos = rng.below(self.cores.len() as u64) as usize;
        if self.cores[pos].is_some() && !self.paused[pos] {
            self.pause(pos);
        }
    }

    pub fn resume_all(&mut self) {
        for pos in 0..self.cores.len() {
            if self.paused[pos] {
                self.resume(pos);
            }
        }
    }

    /// Cuts the link between two replicas picked by `rng`, if they differ.
    pub fn partition_random(&mut self, rng: &mut mu_fabric_sim::SimRng) {
        let n = self.cores.len() as u64;
        let a = NodeId(rng.below(n) as u16);
        let b = NodeId(rng.below(n) as u16);
        if a != b {
            self.world.partition(a, b);
            self.partitions.push((a, b));
        }
    }

    pub fn heal_all(&mut self) {
        for (a, b) in std::mem::take(&mut self.partitions) {
            self.world.heal(a, b);
        }
    }

    pub fn pause(&mut self, pos: usize) {
        self.world.pause(NodeId(pos as u16)).unwrap();
        self.paused[pos] = true;
    }

    pub fn resume(&mut self, pos: usize) {
        self.world.resume(NodeId(pos as u16)).unwrap();
        self.paused[pos] = false;
    }

    /// Who may write each running replica's log now, as the fabric says (None: not running).
    pub fn log_writers(&self) -> Vec<Option<Vec<NodeId>>> {
        self.cores.iter().map(|c| c.as_ref().map(|c| c.background.log_writers())).collect()
    }

    /// At most one writer per log now (the single-writer checker), as `Err((checker, what))`
    /// with every replica's view appended.
    pub fn single_writer(&self) -> Result<(), (&'static str, String)> {
        if self.configs[0].protocol == mu_replica::Protocol::Velos {
            // Velos lets every replica write every acceptor: CAS words keep it safe.
            return Ok(());
        }
        check::single_writer::check(&self.log_writers())
            .map_err(|e| ("single-writer", format!("{e}: {}", self.describe())))
    }

    /// The safety checkers that hold at any moment: agreement (every two replicas applied the
    /// same entry at every index both applied, each in order with no gaps), validity and single
    /// writer, as `Err((checker, what))` with every replica's view appended.
    pub fn safety(&self) -> Result<(), (&'static str, String)> {
        check::agreement::check(&self.applied)
            .map_err(|e| ("agreement", format!("{e}: {}", self.describe())))?;
        check::validity::check(
            &self.applied,
            &self.applied_ever,
            &self.proposed,
            &self.refused,
            &self.retried,
        )
        .map_err(|e| ("validity", format!("{e}: {}", self.describe())))?;
        check::decided_prefix::check(&self.logs_below_decided(), &self.applied)
            .map_err(|e| ("decided prefix", format!("{e}: {}", self.describe())))?;
        self.single_writer()
    }

    /// What each running Mu replica's log holds below its decided prefix
    /// ([`check::decided_prefix`]).
    fn logs_below_decided(&self) -> Vec<Option<check::decided_prefix::LogBelow>> {
        let word = |driver: &mu_replica::ReplicationDriver<SimFabric>, offset: u64| {
            let mut b = [0u8; 8];
            driver.read_log(offset, &mut b);
            u64::from_le_bytes(b)
        };
        let logs = self.cores.iter().map(|core| {
            let driver = core.as_ref()?.replication.mu()?;
            let layout = driver.log_layout();
            let decided_below =
                word(driver, mu_log::FUO_OFFSET).max(word(driver, mu_log::HEAD_OFFSET));
            let mut slot = vec![0u8; layout.slot_bytes() as usize];
            let mut entries = Vec::new();
            for index in decided_below.saturating_sub(layout.slots_count())..decided_below {
                driver.read_log(layout.slot_offset(index), &mut slot);
                if let mu_log::Slot::Entry(e) = layout.decode(index, &slot) {
                    entries.push((index, requests_of(e.kind, e.value)));
                }
            }
            Some(check::decided_prefix::LogBelow { decided_below, entries })
        });
        logs.collect()
    }

    /// [`SimCluster::safety`], panicking with what broke (for scenario tests).
    pub fn check_agreement(&self) {
        if let Err((checker, e)) = self.safety() {
            panic!("{checker} violated: {e}");
        }
    }

    /// No acknowledged proposal was lost: replica `pos` applied each at its index.
    pub fn check_acked_applied(&self, pos: usize) {
        if let Err(e) = check::durability::check(&self.applied, pos, &self.acked) {
            panic!("{e}: {}", self.describe());
        }
    }
}

/// A replica's state machine in the simulator: the entries it applied, each with its requests,
/// and the key-value store those requests built. Its snapshot is the list of entries, so a
/// replica restored from one has the same applied sequence as its donor up to there (and the
/// checks hold for it too); the store is rebuilt by applying their requests again.
pub struct Recorder<'a> {
    pub applied: &'a mut Vec<(u64, Vec<Vec<u8>>)>,
    pub store: &'a mut Store,
    /// The cluster's record of everything ever applied ([`SimCluster::applied_ever`]).
    pub ever: &'a mut BTreeSet<Vec<u8>>,
}

impl Applier for Recorder<'_> {
    fn apply(&mut self, index: u64, kind: EntryKind, value: &[u8]) {
        let requests = requests_of(kind, value);
        if kind == EntryKind::Membership {
            self.ever.extend(requests.iter().cloned());
            self.applied.push((index, requests));
            return;
        }
        for r in &requests {
            // Requests that are not key-value requests (the scenario tests propose plain text)
            // change nothing in the store.
            self.store.apply_bytes(r);
            if !self.ever.contains(r) {
                self.ever.insert(r.clone());
            }
        }
        self.applied.push((index, requests));
    }

    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        for (index, requests) in self.applied.iter() {
            out.extend_from_slice(&index.to_le_bytes());
            out.extend_from_slice(&(requests.len() as u32).to_le_bytes());
            for r in requests {
                mu_log::batch::push(out, r);
            }
        }
        Ok(())
    }

    fn restore(&mut self, mut snapshot: &[u8]) -> Result<(), String> {
        let mut entries = Vec::new();
        while !snapshot.is_empty() {
            let index = u64::from_le_bytes(snapshot[..8].try_into().unwrap());
            let count = u32::from_le_bytes(snapshot[8..12].try_into().unwrap());
            snapshot = &snapshot[12..];
            let mut requests = Vec::new();
            for _ in 0..count {
                let len = u32::from_le_bytes(snapshot[..4].try_into().unwrap()) as usize;
                requests.push(snapshot[4..4 + len].to_vec());
                snapshot = &snapshot[4 + len..];
            }
            entries.push((index, requests));
        }
        let mut store = Store::new();
        for (_, requests) in &entries {
            for r in requests {
                store.apply_bytes(r);
            }
        }
        *self.applied = entries;
        *self.store = store;
        Ok(())
    }
}

/// What an entry records in the applied sequence: its requests; a membership entry's label;
/// nothing for an empty entry or a rejoin (they take their index like any entry).
pub fn requests_of(kind: EntryKind, value: &[u8]) -> Vec<Vec<u8>> {
    match kind {
        EntryKind::Request => vec![value.to_vec()],
        EntryKind::Batch => {
            let requests = mu_log::batch::requests(value).expect("a well-formed batch");
            requests.map(<[u8]>::to_vec).collect()
        }
        EntryKind::Membership => vec![change_label(value)],
        EntryKind::Noop | EntryKind::Rejoin => Vec::new(),
    }
}

/// How a membership entry reads in the applied sequence.
pub fn change_label(value: &[u8]) -> Vec<u8> {
    format!("membership {:?}", Change::decode(value)).into_bytes()
}
