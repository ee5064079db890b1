//! uKharon in the simulator (`mu sim --protocol ukharon`): coordinators and node cores on the
//! simulated fabric, with crashes, restarts (as new unique ids), pauses, delays, partitions,
//! coordinator crashes, coordinators restarted without their memory, adaptive lease requests, and per-node clock drift and offset within
//! the bound. A safety phase injects faults; a liveness phase heals everything and requires
//! convergence: every live node a member of the latest view and active in it. The drift-edge
//! scenario ([`scenario`]) replaces the random faults with a schedule that brings a slow
//! node's lease and a fast node's next first lease as close as the drift margin allows.
//!
//! Checkers ([`check`]): one active view at a time on the simulator's one clock, view
//! agreement (every coordinator's decisions, across its restarts, and every node's views) and
//! the wait rule, no readmitted unique id, a restarted coordinator's rejoin bound past the
//! indices it could have answered in, convergence.

pub mod check;
pub mod cluster;
pub mod failover;
pub mod faults;
pub mod scenario;
pub(crate) mod victims;

use cluster::{Clock, UkCluster};
pub use faults::{UkFaults, UK_FAULT_NAMES};
use mu_fabric::NodeId;
use mu_fabric_sim::LinkDelay;
use mu_ukharon::lease::{LeaseConfig, LeaseMutation};
pub use scenario::{UkScenario, UK_SCENARIO_NAMES};
pub(crate) use victims::pick;

/// One run's setup.
#[derive(Clone, Debug)]
pub struct UkRunConfig {
    pub seed: u64,
    pub coordinators: u16,
    pub nodes: u16,
    /// Lease caches (§6.3): with some, every member renews through them.
    pub caches: u16,
    /// What the safety phase does: [`UkScenario::Faults`] injects `faults`; the drift edge
    /// ([`scenario`]) has its own schedule and ignores them.
    pub scenario: UkScenario,
    pub faults: UkFaults,
    /// Fault steps of the safety phase, each followed by 50 to 300 µs of virtual time (60 to
    /// 200 µs in the drift-edge scenario).
    pub steps: u32,
    /// Clocks drift by up to this (parts per million), when `faults.drift`; the nodes' lease
    /// engines allow for it. 20 %: far above real clocks (the paper measured 0.001 %), so that
    /// a lease engine without its drift margin overlaps views within a few seeds.
    pub drift_ppm: i64,
    /// A deliberately broken lease engine every node runs.
    pub mutation: LeaseMutation,
    /// A deliberately broken rejoin: a coordinator restarted without its memory abstains
    /// nowhere (`Coordinator::break_forgetting_on_restart`).
    pub rejoin_forgets: bool,
    /// How long the healed cluster has to converge.
    pub liveness_bound_ns: u64,
}

impl UkRunConfig {
    pub fn new(seed: u64) -> UkRunConfig {
        UkRunConfig {
            seed,
            coordinators: 3,
            nodes: 4,
            // Every third seed runs with two caches.
            caches: if seed % 3 == 2 { 2 } else { 0 },
            scenario: UkScenario::Faults,
            faults: UkFaults::ALL,
            steps: 40,
            drift_ppm: 200_000,
            mutation: LeaseMutation::None,
            rejoin_forgets: false,
            liveness_bound_ns: 20_000_000,
        }
    }

    /// The drift-edge scenario ([`scenario`]): six members, half of them slow, no caches.
    pub fn drift_edge(seed: u64) -> UkRunConfig {
        UkRunConfig {
            nodes: 6,
            caches: 0,
            scenario: UkScenario::DriftEdge,
            faults: UkFaults { drift: true, ..UkFaults::NONE },
            ..UkRunConfig::new(seed)
        }
    }
}

/// What a run found.
#[derive(Clone, Debug)]
pub struct UkReport {
    pub seed: u64,
    /// Views decided.
    pub views: u64,
    /// Views active somewhere at some time.
    pub active_views: usize,
    pub faults_injected: u32,
    /// Rejoins completed by coordinators restarted without their memory.
    pub coordinator_rejoins: u32,
    /// The checker that failed, and why.
    pub violation: Option<String>,
    /// How close the run came to two views active at once: the smallest gap between one
    /// view's last active instant and a later incompatible view's first.
    pub slack_ns: Option<i64>,
    pub trace_hash: u64,
}

/// The lease names of `--mutation`.
pub fn parse_mutation(name: &str) -> Result<LeaseMutation, String> {
    Ok(match name {
        "start-at-t" => LeaseMutation::StartAtT,
        "timestamp-after-reads" => LeaseMutation::TimestampAfterReads,
        "no-drift-margin" => LeaseMutation::NoDriftMargin,
        "compatible-shortcut" => LeaseMutation::CompatibleShortcutOnIncompatible,
        other => {
            return Err(format!(
                "unknown mutation {other:?}: start-at-t, timestamp-after-reads, \
                 no-drift-margin or compatible-shortcut"
            ))
        }
    })
}

/// A small generator of the run's choices (the fabric has its own, from the same seed).
pub(crate) struct Choices(pub(crate) u64);

impl Choices {
    pub(crate) fn next(&mut self) -> u64 {
        // SplitMix64.
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Runs one seed.
pub fn run(config: &UkRunConfig) -> UkReport {
    let mut choices = Choices(config.seed ^ 0x0075_6b68_6172_6f6e);
    let lease = LeaseConfig {
        drift_ppm: config.drift_ppm.unsigned_abs(),
        mutation: config.mutation,
        ..LeaseConfig::default()
    };
    let clocks = clocks(config, &mut choices);
    let mut report = UkReport {
        seed: config.seed,
        views: 0,
        active_views: 0,
        faults_injected: 0,
        coordinator_rejoins: 0,
        violation: None,
        slack_ns: None,
        trace_hash: 0,
    };
    let result = UkCluster::new(
        config.seed,
        (config.coordinators, config.nodes, config.caches),
        lease,
        &clocks,
    )
    .and_then(|mut cluster| {
        cluster.rejoin_forgets = config.rejoin_forgets;
        let r = phases(&mut cluster, config, &mut choices, &mut report);
        report.coordinator_rejoins = cluster.rejoins;
        report.views = cluster.log.views.len() as u64;
        report.active_views = cluster.spans.epochs();
        report.slack_ns = cluster.spans.slack_ns(&cluster.log.views);
        report.trace_hash = cluster.world.trace_hash();
        r
    });
    report.violation = result.err();
    report
}

/// A clock per node: coordinators, members, caches. Drawn within the bound (mostly at it) with
/// drift faults; in the drift-edge scenario, the slow members' at `−bound` and the fast ones' at
/// `+bound`.
pub(crate) fn clocks(config: &UkRunConfig, choices: &mut Choices) -> Vec<Clock> {
    let bound = config.drift_ppm;
    let (c, n) = (config.coordinators, config.nodes);
    let edge = config.scenario == UkScenario::DriftEdge;
    (0..c + n + config.caches)
        .map(|node| match config.faults.drift || edge {
            false => Clock { offset_ns: 0, rate_ppm: 0 },
            true => {
                let offset_ns = choices.below(1_000_000_000);
                let at_edge = edge.then(|| scenario::edge_rate_ppm(c, n, node, bound));
                // Elsewhere at the bound or near it, mostly: the margins matter where clocks
                // differ most.
                let rate_ppm = at_edge.flatten().unwrap_or_else(|| match choices.below(4) {
                    0 => bound,
                    1 => -bound,
                    _ => choices.below(2 * bound.unsigned_abs() + 1) as i64 - bound,
                });
                Clock { offset_ns, rate_ppm }
            }
        })
        .collect()
}

fn phases(
    cluster: &mut UkCluster,
    config: &UkRunConfig,
    choices: &mut Choices,
    report: &mut UkReport,
) -> Result<(), String> {
    // Everyone joins before the faults start.
    cluster.run_for(3_000_000, 500)?;
    match config.scenario {
        UkScenario::Faults => {
            for _ in 0..config.steps {
                if inject(cluster, config, choices)? {
                    report.faults_injected += 1;
                }
                cluster.run_for(50_000 + choices.below(250_000), 500)?;
            }
        }
        UkScenario::DriftEdge => drift_edge(cluster, config, choices, report)?,
    }
    heal(cluster)?;
    let deadline = cluster.world.now_ns() + config.liveness_bound_ns;
    let mut last = Err(String::new());
    while cluster.world.now_ns() < deadline {
        cluster.run_for(500_000, 500)?;
        last = cluster.converged();
        if last.is_ok() {
            return Ok(());
        }
    }
    last.map_err(|e| format!("no convergence within the liveness bound: {e}"))
}

/// The drift-edge scenario's safety phase ([`scenario`]): the leader's links to the slow
/// members slowed, then a fast member crashed and restarted in turn, at random intervals.
fn drift_edge(
    cluster: &mut UkCluster,
    config: &UkRunConfig,
    choices: &mut Choices,
    report: &mut UkReport,
) -> Result<(), String> {
    let (c, n) = (config.coordinators, config.nodes);
    // No coordinator faults: the lowest position leads throughout.
    let leader = NodeId(cluster.config.coordinators[0]);
    let slow = LinkDelay { extra_ns: scenario::BROADCAST_DELAY_NS, jitter_ns: 0 };
    for node in scenario::slow_members(c, n) {
        cluster.world.set_link_delay(leader, NodeId(node), slow);
    }
    let fast: Vec<u16> = scenario::fast_members(c, n).collect();
    if fast.is_empty() {
        return Err("the drift-edge scenario needs at least one member".into());
    }
    for _ in 0..config.steps {
        let crashed = fast.iter().copied().find(|f| cluster.nodes[f].core.is_none());
        match crashed {
            Some(node) => cluster.restart(node)?,
            None => {
                cluster.crash_node(pick(choices, &fast))?;
            }
        }
        report.faults_injected += 1;
        // Long enough for the slow members to learn the new view and lease it again; the
        // decision of the next change falls anywhere in their renewal period.
        cluster.run_for(60_000 + choices.below(140_000), 500)?;
    }
    Ok(())
}

/// The liveness phase's start: every paused node and coordinator resumes, links heal, crashed
/// nodes stay down.
pub(crate) fn heal(cluster: &mut UkCluster) -> Result<(), String> {
    cluster.heal_links();
    for c in 0..cluster.coordinators.len() {
        if std::mem::take(&mut cluster.coordinator_paused[c]) {
            cluster.world.resume(NodeId(c as u16)).map_err(|e| e.to_string())?;
        }
    }
    for (&n, node) in cluster.nodes.iter_mut() {
        if node.paused {
            node.paused = false;
            cluster.world.resume(NodeId(n)).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// One fault step: picks an enabled fault and where it strikes. Whether one was injected.
fn inject(
    cluster: &mut UkCluster,
    config: &UkRunConfig,
    choices: &mut Choices,
) -> Result<bool, String> {
    let kinds = victims::kinds(config.faults);
    if kinds.is_empty() {
        return Ok(false);
    }
    match kinds[choices.below(kinds.len() as u64) as usize] {
        "crash" => crash(cluster, choices),
        "restart" => victims::restart_crashed(cluster, choices),
        "pause" => pause(cluster, choices),
        "delay" => {
            let count = u64::from(config.coordinators + config.nodes + config.caches);
            let (a, b) = (choices.below(count) as u16, choices.below(count) as u16);
            let delay =
                LinkDelay { extra_ns: choices.below(20_000), jitter_ns: choices.below(5_000) };
            cluster.world.set_link_delay(NodeId(a), NodeId(b), delay);
            Ok(true)
        }
        "partition" => Ok(partition(cluster, choices)),
        "lease" => {
            let running = running(cluster);
            Ok(victims::ask_lease(cluster, choices, &running).is_some())
        }
        "coordinator" => crash_coordinator(cluster, choices),
        _ => restart_coordinator(cluster, choices),
    }
}

/// Member nodes that run (not crashed, not paused).
fn running(cluster: &UkCluster) -> Vec<u16> {
    cluster.live_nodes().into_iter().filter(|n| !cluster.nodes[n].paused).collect()
}

/// Members that may stop: any running one while two others stay running.
fn stoppable(cluster: &UkCluster) -> Vec<u16> {
    let running = running(cluster);
    if running.len() > 2 {
        running
    } else {
        Vec::new()
    }
}

/// Crashes a member (at least two stay running) or, now and then, a cache (one stays up).
fn crash(cluster: &mut UkCluster, choices: &mut Choices) -> Result<bool, String> {
    let members = stoppable(cluster);
    let Some(n) = victims::crash_victim(cluster, choices, |_| members) else { return Ok(false) };
    cluster.crash_node(n)?;
    Ok(true)
}

/// Pauses a running member (at least two stay running), or resumes a paused one.
fn pause(cluster: &mut UkCluster, choices: &mut Choices) -> Result<bool, String> {
    let members = stoppable(cluster);
    let Some((n, pause)) = victims::pause_victim(cluster, choices, |_| members) else {
        return Ok(false);
    };
    cluster.set_paused(n, pause)?;
    Ok(true)
}

/// Cuts the link between two live members, or heals it if it is cut.
fn partition(cluster: &mut UkCluster, choices: &mut Choices) -> bool {
    let Some((a, b)) = victims::pick_two(choices, &cluster.live_nodes()) else { return false };
    if cluster.world.is_partitioned(NodeId(a), NodeId(b)) {
        cluster.world.heal(NodeId(a), NodeId(b));
    } else {
        cluster.world.partition(NodeId(a), NodeId(b));
    }
    true
}

/// Crashes or stops a coordinator, the leader maybe, while a majority stays up; or resumes a
/// stopped one. A restarted coordinator still rejoining counts as down; while one rejoins or
/// abstains in the next index, no other crashes (it would stay down and leave no majority
/// there), but one may stop.
pub(crate) fn crash_coordinator(
    cluster: &mut UkCluster,
    choices: &mut Choices,
) -> Result<bool, String> {
    let count = cluster.coordinators.len();
    let c = choices.below(count as u64) as usize;
    let err = |e: mu_fabric::FabricError| e.to_string();
    if cluster.coordinator_paused[c] {
        cluster.coordinator_paused[c] = false;
        cluster.world.resume(NodeId(c as u16)).map_err(err)?;
        return Ok(true);
    }
    if !may_stop_coordinator(cluster, c) {
        return Ok(false);
    }
    let crash = choices.below(2) != 0;
    let rejoining_other = (0..count).any(|i| i != c && cluster.coordinator_still_rejoining(i));
    if crash && rejoining_other {
        return Ok(false);
    }
    if crash {
        cluster.crash_coordinator(c)?;
    } else {
        cluster.coordinator_paused[c] = true;
        cluster.world.pause(NodeId(c as u16)).map_err(err)?;
    }
    Ok(true)
}

/// Whether coordinator `c` runs and a majority stays up without it: the others not crashed,
/// stopped or still rejoining.
pub(crate) fn may_stop_coordinator(cluster: &UkCluster, c: usize) -> bool {
    let count = cluster.coordinators.len();
    let down = (0..count)
        .filter(|&i| match &cluster.coordinators[i] {
            None => true,
            Some(d) => cluster.coordinator_paused[i] || d.is_rejoining(),
        })
        .count();
    cluster.coordinators[c].is_some() && 2 * (down + 1) < count
}

/// Restarts the crashed coordinator without its memory (`mu_ukharon::restart`) or, with none
/// crashed, crashes one, the leader maybe: while a majority stays up and no other coordinator
/// rejoins or abstains in the next index (one restart at a time).
pub(crate) fn restart_coordinator(
    cluster: &mut UkCluster,
    choices: &mut Choices,
) -> Result<bool, String> {
    let count = cluster.coordinators.len();
    let crashed: Vec<u16> =
        (0..count as u16).filter(|&i| cluster.coordinators[usize::from(i)].is_none()).collect();
    if !crashed.is_empty() {
        let c = pick(choices, &crashed);
        return cluster.restart_coordinator(usize::from(c)).map(|()| true);
    }
    let c = choices.below(count as u64) as usize;
    let rejoining_other = (0..count).any(|i| i != c && cluster.coordinator_still_rejoining(i));
    if !may_stop_coordinator(cluster, c) || rejoining_other {
        return Ok(false);
    }
    cluster.crash_coordinator(c).map(|()| true)
}
