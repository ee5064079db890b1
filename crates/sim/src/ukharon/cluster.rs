//! A uKharon cluster on the simulated fabric: coordinators and node cores, each node with its
//! own clock (an offset and a rate within the drift bound), polled in rounds of virtual time;
//! what every round shows goes to the checkers. A crashed coordinator may start again without
//! its memory ([`UkCluster::restart_coordinator`]): a new incarnation of its fabric node, whose
//! regions are zero, rejoining by `mu_ukharon::restart`.

use super::check::active::ActiveSpans;
use super::check::views::ViewLog;
use mu_fabric::NodeId;
use mu_fabric_sim::{LinkDelay, SimConfig, SimFabric, SimWorld};
use mu_membership::{CoordinatorDriver, CoordinatorEvent, MembershipConfig, NodeCore, NodeEvent};
use mu_ukharon::lease::LeaseConfig;
use mu_ukharon::restart::{self, Memory};
use mu_ukharon::view::View;
use std::collections::BTreeMap;

/// A node's clock: `local = offset + global + global × rate_ppm / 10⁶`.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub offset_ns: u64,
    pub rate_ppm: i64,
}

impl Clock {
    pub fn local(&self, global_ns: u64) -> u64 {
        let skew = (global_ns as i128 * self.rate_ppm as i128) / 1_000_000;
        (self.offset_ns as i128 + global_ns as i128 + skew) as u64
    }
}

/// One node: its core (none while crashed), its clock, whether it is paused.
pub struct Node {
    pub core: Option<NodeCore<SimFabric>>,
    pub clock: Clock,
    pub paused: bool,
    pub incarnations: u64,
}

/// See the module docs.
pub struct UkCluster {
    pub world: SimWorld,
    pub config: MembershipConfig,
    pub lease: LeaseConfig,
    pub coordinators: Vec<Option<CoordinatorDriver<SimFabric>>>,
    pub coordinator_clocks: Vec<Clock>,
    /// Coordinators stopped (not polled; their memory still answers).
    pub coordinator_paused: Vec<bool>,
    /// Per coordinator: its restarts without memory, and the latest epoch decided when it last
    /// crashed (the rejoin's bound must be past the indices it could have answered in then).
    pub coordinator_restarts: Vec<u32>,
    coordinator_crash_epochs: Vec<Option<u64>>,
    /// Rejoins completed by restarted coordinators.
    pub rejoins: u32,
    /// A deliberately broken rejoin (`break_forgetting_on_restart`): restarted coordinators
    /// answer at once, abstaining nowhere.
    pub rejoin_forgets: bool,
    /// The cluster's first view, which a restarted coordinator is configured with.
    initial: View,
    pub nodes: BTreeMap<u16, Node>,
    /// When each view was active on the members, and apart on the caches: a cache's lease is
    /// no application's `Active`, and the two kinds are ordered each among its own (a member's
    /// lease through a cache may outlive a cache's wait, `mu_ukharon::cache`).
    pub spans: ActiveSpans,
    pub cache_spans: ActiveSpans,
    pub log: ViewLog,
    pub seed: u64,
    pub node_events: u64,
}

impl UkCluster {
    /// Coordinators 0..coordinators, member nodes after them, all joining at once, then lease
    /// caches (§6.3; with caches, members renew through them).
    pub fn new(
        seed: u64,
        counts: (u16, u16, u16),
        lease: LeaseConfig,
        clocks: &[Clock],
    ) -> Result<UkCluster, String> {
        UkCluster::with_config(seed, counts, lease, clocks, |_| {})
    }

    /// As [`UkCluster::new`], with the membership configuration adjusted by `tune` before
    /// anything starts (uKharon-KV's groups name a primary in every view).
    pub fn with_config(
        seed: u64,
        (coordinators, nodes, caches): (u16, u16, u16),
        lease: LeaseConfig,
        clocks: &[Clock],
        tune: impl FnOnce(&mut MembershipConfig),
    ) -> Result<UkCluster, String> {
        let counts = (coordinators, nodes, caches);
        UkCluster::with_fabric(seed, counts, lease, clocks, SimConfig::default(), tune)
    }

    /// As [`UkCluster::with_config`], on a fabric with the costs of `fabric` (a hardware
    /// profile's, `crate::profile::Profile::fabric`).
    pub fn with_fabric(
        seed: u64,
        (coordinators, nodes, caches): (u16, u16, u16),
        lease: LeaseConfig,
        clocks: &[Clock],
        fabric: SimConfig,
        tune: impl FnOnce(&mut MembershipConfig),
    ) -> Result<UkCluster, String> {
        let total = coordinators + nodes + caches;
        assert_eq!(clocks.len(), usize::from(total), "a clock per node");
        let world = SimWorld::new(fabric, seed);
        let ids = (0..coordinators).collect();
        let mut config = MembershipConfig::new(0x5EED ^ seed, ids, total);
        config.caches = (coordinators + nodes..total).collect();
        tune(&mut config);
        let initial = View::initial(config.cluster, Vec::new(), None, config.lease_ns);
        let mut cs = Vec::new();
        let mut coordinator_clocks = Vec::new();
        for c in 0..coordinators {
            let fabric = world.node(NodeId(c));
            let driver = CoordinatorDriver::new(
                fabric,
                config.clone(),
                initial.clone(),
                coordinator_seed(seed, c, 0),
            );
            cs.push(Some(driver?));
            coordinator_clocks.push(clocks[usize::from(c)]);
        }
        let mut cluster = UkCluster {
            world,
            config,
            lease,
            coordinator_paused: vec![false; cs.len()],
            coordinator_restarts: vec![0; cs.len()],
            coordinator_crash_epochs: vec![None; cs.len()],
            rejoins: 0,
            rejoin_forgets: false,
            initial,
            coordinators: cs,
            coordinator_clocks,
            nodes: BTreeMap::new(),
            spans: ActiveSpans::default(),
            cache_spans: ActiveSpans::default(),
            log: ViewLog::default(),
            seed,
            node_events: 0,
        };
        for n in coordinators..total {
            let core = cluster.start_core(n, 0)?;
            let clock = clocks[usize::from(n)];
            cluster
                .nodes
                .insert(n, Node { core: Some(core), clock, paused: false, incarnations: 1 });
        }
        Ok(cluster)
    }

    fn start_core(&self, node: u16, incarnation: u64) -> Result<NodeCore<SimFabric>, String> {
        let fabric = self.world.node(NodeId(node));
        let random = self.seed.rotate_left(17) ^ (u64::from(node) << 32) ^ incarnation;
        if self.config.caches.contains(&node) {
            NodeCore::new_cache(fabric, self.config.clone(), self.lease, random)
        } else {
            NodeCore::new(fabric, self.config.clone(), self.lease, random)
        }
    }

    /// Crashes `node`'s process (a member or a cache): the fabric tells its peers at once.
    pub fn crash_node(&mut self, node: u16) -> Result<(), String> {
        self.world.crash(NodeId(node)).map_err(|e| e.to_string())?;
        self.nodes.get_mut(&node).expect("a node of the cluster").core = None;
        Ok(())
    }

    /// Stops `node`'s process (its memory stays readable) or lets it run again.
    pub fn set_paused(&mut self, node: u16, paused: bool) -> Result<(), String> {
        let id = NodeId(node);
        let result = if paused { self.world.pause(id) } else { self.world.resume(id) };
        result.map_err(|e| e.to_string())?;
        self.nodes.get_mut(&node).expect("a node of the cluster").paused = paused;
        Ok(())
    }

    /// Restarts a crashed node as a new process.
    pub fn restart(&mut self, node: u16) -> Result<(), String> {
        self.world.restart(NodeId(node)).map_err(|e| e.to_string())?;
        let incarnation = self.nodes[&node].incarnations;
        let core = self.start_core(node, incarnation)?;
        let slot = self.nodes.get_mut(&node).expect("a node of the cluster");
        slot.core = Some(core);
        slot.incarnations += 1;
        Ok(())
    }

    /// Crashes coordinator `c`: its process and its memory are gone.
    pub fn crash_coordinator(&mut self, c: usize) -> Result<(), String> {
        self.world.crash(NodeId(c as u16)).map_err(|e| e.to_string())?;
        self.coordinators[c] = None;
        self.coordinator_crash_epochs[c] = Some(self.log.latest().map_or(0, |v| v.epoch));
        Ok(())
    }

    /// Starts crashed coordinator `c` again without its memory: a new incarnation of its node
    /// (zeroed regions, earlier connections dead), rejoining before it takes part.
    pub fn restart_coordinator(&mut self, c: usize) -> Result<(), String> {
        assert!(self.coordinators[c].is_none(), "coordinator {c} is running");
        self.world.restart(NodeId(c as u16)).map_err(|e| e.to_string())?;
        self.coordinator_restarts[c] += 1;
        let fabric = self.world.node(NodeId(c as u16));
        let seed = coordinator_seed(self.seed, c as u16, self.coordinator_restarts[c]);
        let config = self.config.clone();
        let initial = self.initial.clone();
        let mut driver =
            CoordinatorDriver::with_memory(fabric, config, initial, seed, Memory::Forgotten)?;
        if self.rejoin_forgets {
            driver.break_forgetting_on_restart();
        }
        self.coordinators[c] = Some(driver);
        Ok(())
    }

    /// Whether coordinator `c` runs, restarted without its memory, and is still rejoining or
    /// abstains in the index after the latest view it knows (what its `describe()` says):
    /// another coordinator lost now could leave no majority there (the one-at-a-time limit of
    /// `mu_ukharon::restart`). Its own latest view, not the cluster's: a leader that got past
    /// its bound and crashed before it learnt so leaves it leading from an index it abstains
    /// in, for good.
    pub fn coordinator_still_rejoining(&self, c: usize) -> bool {
        self.coordinators[c].as_ref().is_some_and(|driver| driver.still_abstains())
    }

    /// Checks a rejoined coordinator's bound: past every index it could have answered in
    /// before its crash, the one after the latest decided then and `prepare_ahead` (1) more.
    fn check_rejoin(&mut self, c: usize, answers_from: u64) -> Result<(), String> {
        self.rejoins += 1;
        let crashed_at = self.coordinator_crash_epochs[c].unwrap_or(0);
        let last_touched = crashed_at + 2;
        if !restart::is_before(last_touched, answers_from, self.config.slots_count) {
            return Err(format!(
                "{}: rejoined answering from index {answers_from}, but view {crashed_at} was \
                 decided when it crashed: it may have answered in index {last_touched}",
                self.coordinator_name(c)
            ));
        }
        Ok(())
    }

    /// "coordinator c", with its restarts without memory.
    fn coordinator_name(&self, c: usize) -> String {
        match self.coordinator_restarts[c] {
            0 => format!("coordinator {c}"),
            r => format!("coordinator {c} (restarted without its memory, {r}×)"),
        }
    }

    /// Every live coordinator polls at its clock's reading; what it decided goes to the log.
    fn poll_coordinators(&mut self, now: u64) -> Result<(), String> {
        for c in 0..self.coordinators.len() {
            if self.coordinator_paused[c] {
                continue;
            }
            let Some(driver) = self.coordinators[c].as_mut() else { continue };
            driver.poll(self.coordinator_clocks[c].local(now));
            let events: Vec<CoordinatorEvent> = driver.drain_events().collect();
            for event in events {
                match event {
                    CoordinatorEvent::Decided(view) => {
                        self.log.saw(&self.coordinator_name(c), &view)?
                    }
                    CoordinatorEvent::BadDecision { index, why } => {
                        let name = self.coordinator_name(c);
                        return Err(format!("{name}: bad decision at {index}: {why}"));
                    }
                    CoordinatorEvent::Rejoined { answers_from } => {
                        self.check_rejoin(c, answers_from)?
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// One round: every live coordinator and node polls at its clock's reading, then the
    /// fabric runs for `step_ns`. An error is a checker's finding.
    pub fn round(&mut self, step_ns: u64) -> Result<(), String> {
        let now = self.world.now_ns();
        self.poll_all()?;
        self.world.run_until(now + step_ns);
        Ok(())
    }

    /// A round without the time that passes after it: every live coordinator and node polls
    /// at its clock's reading, and what each shows goes to the checkers (what runs beside the
    /// membership, uKharon-KV's data plane, polls after it, at the same instant).
    pub fn poll_all(&mut self) -> Result<(), String> {
        let now = self.world.now_ns();
        self.poll_coordinators(now)?;
        for (&n, node) in self.nodes.iter_mut() {
            let Some(core) = node.core.as_mut().filter(|_| !node.paused) else { continue };
            let local = node.clock.local(now);
            core.poll(local);
            for event in core.drain_events() {
                self.node_events += 1;
                if let NodeEvent::View(view) = event {
                    self.log.saw(&format!("node {n}"), &view)?;
                }
            }
            if let Some(lease) = core.published().load() {
                if lease.start_ns <= local && local < lease.end_ns {
                    match self.config.caches.contains(&n) {
                        true => self.cache_spans.record(n, lease.epoch, now),
                        false => self.spans.record(n, lease.epoch, now),
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs rounds of `step_ns` for `ns`.
    pub fn run_for(&mut self, ns: u64, step_ns: u64) -> Result<(), String> {
        let end = self.world.now_ns() + ns;
        while self.world.now_ns() < end {
            self.round(step_ns)?;
        }
        self.spans.check(&self.log.views)?;
        self.cache_spans.check(&self.log.views).map_err(|e| format!("caches: {e}"))
    }

    /// Removes every link delay and partition among `nodes`.
    pub fn heal_links(&mut self) {
        let all: Vec<u16> = (0..self.config.nodes_max).collect();
        for &a in &all {
            for &b in all.iter().filter(|&&b| b > a) {
                self.world.heal(NodeId(a), NodeId(b));
                self.world.set_link_delay(NodeId(a), NodeId(b), LinkDelay::default());
            }
        }
    }

    /// Member nodes whose process runs (not crashed; caches are not members).
    pub fn live_nodes(&self) -> Vec<u16> {
        let members = self.nodes.iter().filter(|(id, _)| !self.config.caches.contains(id));
        members.filter(|(_, n)| n.core.is_some()).map(|(&id, _)| id).collect()
    }

    /// Caches whose process runs.
    pub fn live_caches(&self) -> Vec<u16> {
        let caches = self.config.caches.iter().filter(|id| self.nodes[id].core.is_some());
        caches.copied().collect()
    }

    /// The coordinators' state, for messages.
    fn describe_coordinators(&self) -> String {
        let one = |c: usize| match &self.coordinators[c] {
            None => format!("{c}: crashed"),
            Some(d) => format!(
                "{}: {}{}",
                self.coordinator_name(c),
                if self.coordinator_paused[c] { "paused, " } else { "" },
                d.describe()
            ),
        };
        (0..self.coordinators.len()).map(one).collect::<Vec<_>>().join("; ")
    }

    /// Whether every live node holds a lease on the latest decided view, and that view's
    /// members are exactly the live nodes.
    pub fn converged(&self) -> Result<(), String> {
        let latest = self.log.latest().ok_or("no view decided")?;
        let now = self.world.now_ns();
        let live = self.live_nodes();
        let members: Vec<u16> = latest.nodes().collect();
        if members != live {
            let outside: Vec<String> = live
                .iter()
                .filter(|n| !members.contains(n))
                .filter_map(|n| self.nodes[n].core.as_ref().map(|c| c.describe()))
                .collect();
            return Err(format!(
                "view {} has members {members:?}, live nodes {live:?} ({outside:?}); coordinators {}",
                latest.epoch,
                self.describe_coordinators()
            ));
        }
        for n in live {
            let node = &self.nodes[&n];
            let core = node.core.as_ref().expect("live");
            if !core.published().active_at(latest.epoch, node.clock.local(now)) {
                let at = node.clock.local(now);
                let caches: Vec<String> = self
                    .live_caches()
                    .iter()
                    .filter_map(|c| self.nodes[c].core.as_ref().map(|core| core.describe()))
                    .collect();
                return Err(format!(
                    "node {n} is not active in view {} at {at} ns: {}; caches: {caches:?}; \
                     coordinators {}",
                    latest.epoch,
                    core.describe(),
                    self.describe_coordinators()
                ));
            }
        }
        Ok(())
    }
}

/// The random seed of coordinator `c`'s driver in its `restarts`-th restart.
fn coordinator_seed(seed: u64, c: u16, restarts: u32) -> u64 {
    seed + 7 * u64::from(c) + 1_000_003 * u64::from(restarts)
}
