//! One seed, one whole run: a safety phase with the chosen faults striking at random while
//! clients use the key-value store, then a liveness phase in which everything is healed and
//! the cluster must commit new requests within a bound. Every checker runs along the way and at
//! the end. Everything is drawn from the seed, so a run is reproduced exactly by its seed and
//! configuration.

use crate::check;
use crate::cluster::SimCluster;
use crate::faults::Faults;
use crate::membership::Changes;
use crate::workload::Workload;
use mu_fabric::NodeId;
use mu_fabric_sim::{LinkDelay, SimRng};
use mu_log::Integrity;
use mu_replica::Change;
use mu_replication::mutation::Mutation;
use serde::Serialize;
use std::path::PathBuf;

/// The protocols `mu sim` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Mu,
    Velos,
}

impl Protocol {
    pub fn parse(name: &str) -> Result<Protocol, String> {
        match name {
            "mu" => Ok(Protocol::Mu),
            "velos" => Ok(Protocol::Velos),
            other => Err(format!("unknown protocol {other:?}: the simulator runs mu and velos")),
        }
    }

    pub fn name(self) -> &'static str {
        self.replica().name()
    }

    /// The replica's setting.
    pub fn replica(self) -> mu_replica::Protocol {
        match self {
            Protocol::Mu => mu_replica::Protocol::Mu,
            Protocol::Velos => mu_replica::Protocol::Velos,
        }
    }
}

/// What one run does.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub seed: u64,
    pub protocol: Protocol,
    /// Replicas in the cluster: 3 or 5 (any count from 1 to 9 runs; 3 and 5 are the ones swept).
    /// With the `membership` fault, the replicas there may be: the run starts with some of
    /// them as members (at least 3, or all when fewer).
    pub replicas: u16,
    pub faults: Faults,
    /// Steps of the safety phase: each injects a fault or starts client operations, then lets
    /// up to 200 µs of virtual time pass.
    pub steps: u32,
    pub clients: usize,
    pub keys: u64,
    /// How long the healed cluster has, in virtual time, to commit new requests.
    pub liveness_bound_ns: u64,
    /// Check the client history with this `lincheck` binary (None: the history is not checked).
    pub lincheck: Option<PathBuf>,
    /// Where to write the history (`DIR/seed-S.json`); a temporary file is used otherwise when
    /// it is checked.
    pub history_dir: Option<PathBuf>,
    /// A deliberately broken engine variant (builds with the `mutations` feature only).
    pub mutation: Option<Mutation>,
    /// Trace every change of each replica's engine (phase, FUO, confirmed followers, prepare
    /// omitted) and applied count, round by round: long, for reading one seed closely.
    pub watch: bool,
    /// Requests a connection holds before posts on it are refused as a full queue
    /// (`SimConfig::connection_depth`, as an RDMA send queue); `None`: no limit.
    pub connection_depth: Option<usize>,
}

impl RunConfig {
    pub fn new(seed: u64) -> RunConfig {
        RunConfig {
            seed,
            protocol: Protocol::Mu,
            replicas: if seed % 2 == 0 { 3 } else { 5 },
            faults: Faults::ALL,
            steps: 60,
            clients: 4,
            keys: 3,
            liveness_bound_ns: 200_000_000,
            lincheck: None,
            history_dir: None,
            mutation: None,
            watch: false,
            connection_depth: None,
        }
    }

    /// Refuses what cannot run, saying why.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=9).contains(&self.replicas) {
            return Err(format!("{} replicas: the simulator runs 1 to 9", self.replicas));
        }
        if self.clients == 0 || self.clients > 64 {
            return Err(format!("{} clients: choose 1 to 64", self.clients));
        }
        if self.keys == 0 {
            return Err("0 keys: the workload needs at least one".into());
        }
        if self.faults.membership && self.replicas < 3 {
            return Err(format!(
                "{} replicas with membership changes: a run starts with at least 3 members, so \
                 choose 3 to 9",
                self.replicas
            ));
        }
        let least = CONNECTION_DEPTH_MIN;
        if let Some(depth) = self.connection_depth.filter(|&d| d < least) {
            return Err(format!(
                "a connection depth of {depth}: a Mu leader bringing a follower up to date \
                 writes {least} requests to it at once ({} slots, its FUO and its admission), \
                 so choose at least {least}",
                mu_replication::UPDATE_CHUNK_SLOTS
            ));
        }
        if self.mutation.is_some() && !cfg!(feature = "mutations") {
            return Err(
                "this build has no engine mutations (build with the `mutations` feature)".into()
            );
        }
        Ok(())
    }
}

/// The smallest [`RunConfig::connection_depth`]: what a Mu leader writes to one follower at once
/// when bringing it up to date.
pub const CONNECTION_DEPTH_MIN: usize = mu_replication::UPDATE_CHUNK_SLOTS as usize + 2;

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Which checker found it: agreement, validity, durability, single-writer,
    /// linearizability, liveness, or panic (an assertion of the engines or the runtime); or
    /// history-io, where the client history could not be written for lincheck (the run was
    /// not checked).
    pub checker: &'static str,
    pub message: String,
}

/// What one run did and found.
#[derive(Clone, Debug, Serialize)]
pub struct SeedReport {
    pub seed: u64,
    pub protocol: Protocol,
    pub replicas: u16,
    pub faults: String,
    pub integrity: String,
    /// Virtual time the run took.
    pub virtual_ns: u64,
    /// Simulator events executed.
    pub events: u64,
    /// A hash of every simulator event and every trace line: equal for two runs of one seed.
    pub trace_hash: u64,
    /// Proposals acknowledged.
    pub acked: usize,
    pub ops_returned: usize,
    pub ops_unknown: usize,
    /// Client operations refused for good after they were handed over (left out of the
    /// history; the validity checker makes sure no replica applied one).
    pub ops_refused: usize,
    pub leader_changes: usize,
    /// Membership changes acknowledged (the `membership` fault).
    pub membership_changes: usize,
    pub violation: Option<Violation>,
    /// The readable trace: faults, client groups, leader changes, with virtual times.
    #[serde(skip)]
    pub trace: Vec<String>,
    #[serde(skip)]
    pub history: crate::history::History,
}

/// Runs one seed. Never panics for a bug it finds: panics of the engines and runtime are caught
/// and reported as violations.
pub fn run(config: &RunConfig) -> SeedReport {
    let mut trace = Vec::new();
    let mut report = SeedReport {
        seed: config.seed,
        protocol: config.protocol,
        replicas: config.replicas,
        faults: config.faults.describe(),
        integrity: String::new(),
        virtual_ns: 0,
        events: 0,
        trace_hash: 0,
        acked: 0,
        ops_returned: 0,
        ops_unknown: 0,
        ops_refused: 0,
        leader_changes: 0,
        membership_changes: 0,
        violation: None,
        trace: Vec::new(),
        history: Default::default(),
    };
    #[cfg(feature = "mutations")]
    mu_replication::mutation::set(config.mutation);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Runner::new(config, &mut trace).run(&mut report)
    }));
    #[cfg(feature = "mutations")]
    mu_replication::mutation::set(None);
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(v)) => report.violation = Some(v),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into());
            report.violation = Some(Violation { checker: "panic", message });
        }
    }
    let mut h = report.trace_hash;
    for line in &trace {
        h = mu_log::digest(h, line.as_bytes());
    }
    report.trace_hash = h;
    report.trace = trace;
    report
}

/// In each round, clients may start operations with this chance in one (about every 10 µs of
/// virtual time, or as fast as the leader answers when it is slower).
const CLIENT_START_ONE_IN: u64 = 40;

struct Runner<'a> {
    config: &'a RunConfig,
    rng: SimRng,
    c: SimCluster,
    workload: Workload,
    trace: &'a mut Vec<String>,
    leader: Option<NodeId>,
    leader_changes: usize,
    /// The membership change in doubt (the `membership` fault).
    changes: Changes,
    /// A membership change is due: asked of the agreed leader as soon as it is free (clients
    /// keep it busy most of the time).
    change_due: bool,
    /// What `watch` last traced of each replica.
    watched: Vec<String>,
}

fn violation(checker: &'static str, message: String) -> Violation {
    Violation { checker, message }
}

impl<'a> Runner<'a> {
    fn new(config: &'a RunConfig, trace: &'a mut Vec<String>) -> Runner<'a> {
        let mut rng = SimRng::new(config.seed ^ 0x6d75_5f73_696d);
        let faults = config.faults;
        // Checksums wherever writes may land out of order; elsewhere the seed picks, so that
        // both integrity modes run.
        let integrity = if faults.out_of_order || rng.below(2) == 0 {
            Integrity::Checksum
        } else {
            Integrity::Canary
        };
        // With membership changes, the first members: at least 3 (all when fewer), drawn.
        let members_count = if faults.membership {
            let least = config.replicas.min(3);
            least + rng.below(u64::from(config.replicas - least) + 1) as u16
        } else {
            config.replicas
        };
        let members: Vec<u16> = (0..members_count).collect();
        let fabric = mu_fabric_sim::SimConfig {
            connection_depth: config.connection_depth.unwrap_or(usize::MAX),
            ..mu_fabric_sim::SimConfig::default()
        };
        let c = SimCluster::with_fabric(config.replicas, &members, config.seed, fabric, |rc| {
            rc.protocol = config.protocol.replica();
            rc.integrity = integrity;
            rc.batch_requests_max = 3;
            rc.outstanding_max = 3;
        });
        let mut world_faults = c.world.faults();
        world_faults.out_of_order_landing = faults.out_of_order;
        if faults.perm_failure {
            world_faults.fast_perm_failure_probability = 0.2;
            world_faults.fast_perm_busy_in_flight_probability = 1.0;
            world_faults.control_under_way_probability = 0.1;
        }
        c.world.set_faults(world_faults);
        trace.push(format!(
            "seed {} protocol {} replicas {} faults {} integrity {integrity:?}",
            config.seed,
            config.protocol.name(),
            config.replicas,
            config.faults.describe(),
        ));
        if faults.membership {
            trace.push(format!("first members {members:?}"));
        }
        let workload = Workload::new(config.clients, config.keys, config.replicas as usize);
        let watched = vec![String::new(); config.replicas as usize];
        Runner {
            config,
            rng,
            c,
            workload,
            trace,
            leader: None,
            leader_changes: 0,
            changes: Changes::default(),
            change_due: false,
            watched,
        }
    }

    fn note(&mut self, what: impl std::fmt::Display) {
        let t = self.c.world.now_ns();
        self.trace.push(format!("{:>7}.{:03} us  {what}", t / 1000, t % 1000));
    }

    fn run(mut self, report: &mut SeedReport) -> Result<(), Violation> {
        report.integrity = format!("{:?}", self.c.configs[0].integrity).to_lowercase();
        let result = self.phases();
        report.virtual_ns = self.c.world.now_ns();
        report.events = self.c.world.events_run();
        report.trace_hash = self.c.world.trace_hash();
        report.acked = self.c.acked.len();
        report.leader_changes = self.leader_changes;
        report.membership_changes =
            self.c.acked.iter().filter(|(_, v)| v.starts_with(b"membership")).count();
        self.workload.finish();
        report.ops_returned = self.workload.history.returned_count();
        report.ops_unknown = self.workload.history.unknown_count();
        report.ops_refused = self.c.refused.len();
        report.history = std::mem::take(&mut self.workload.history);
        report.history.source = format!(
            "mu sim --protocol {} --seed {} --replicas {} --faults {}{}",
            self.config.protocol.name(),
            self.config.seed,
            self.config.replicas,
            self.config.faults.describe(),
            self.config
                .connection_depth
                .map_or(String::new(), |depth| format!(" --connection-depth {depth}"))
        );
        result?;
        self.check_history(report)
    }

    fn phases(&mut self) -> Result<(), Violation> {
        self.note("safety phase");
        for _ in 0..self.config.steps {
            self.step();
            let ns = self.rng.below(200_000);
            self.run_for(ns)?;
            self.check_step()?;
        }
        self.note("liveness phase: resume, heal links, remove delays, restart the crashed");
        self.heal();
        let returned_before = self.workload.history.returned_count();
        let wanted = 3 * self.config.clients;
        let end = self.c.world.now_ns() + self.config.liveness_bound_ns;
        while self.workload.history.returned_count() < returned_before + wanted {
            if self.c.world.now_ns() >= end {
                return Err(violation(
                    "liveness",
                    format!(
                        "the healed cluster answered {} of {wanted} new requests within {} ms: {}",
                        self.workload.history.returned_count() - returned_before,
                        self.config.liveness_bound_ns / 1_000_000,
                        self.c.describe()
                    ),
                ));
            }
            if let Some(line) = self.workload.start_some(&mut self.c, &mut self.rng, true) {
                self.note(line);
            }
            self.run_for(20_000)?;
        }
        // Let the clients still waiting have their answers, and followers learn the last
        // commits (they learn an entry is decided only from the next one or the FUO).
        let drain_end = self.c.world.now_ns() + 10_000_000;
        while self.workload.waiting_count() > 0 && self.c.world.now_ns() < drain_end {
            if let Some(line) = self.workload.start_some(&mut self.c, &mut self.rng, false) {
                self.note(line);
            }
            self.run_for(20_000)?;
        }
        self.run_for(1_000_000)?;
        // Converged: every running replica follows one leader (a replica restarted by the
        // healing may still be learning who leads), and that leader answers a client: it holds
        // every decided entry then (an idle leader may not have noticed yet that another took its
        // followers and decided more; its next write tells it).
        let since = self.c.world.now_ns();
        while !self.workload.last_answer.is_some_and(|(pos, at)| {
            at >= since && Some(NodeId(pos as u16)) == self.c.agreed_leader()
        }) {
            if self.c.world.now_ns() >= end {
                return Err(violation(
                    "liveness",
                    format!(
                        "the healed replicas agreed on no leader that answers clients within {} ms: {}",
                        self.config.liveness_bound_ns / 1_000_000,
                        self.c.describe()
                    ),
                ));
            }
            if let Some(line) = self.workload.start_some(&mut self.c, &mut self.rng, true) {
                self.note(line);
            }
            self.run_for(20_000)?;
        }
        let leader = self.c.agreed_leader().expect("checked in the loop");
        self.check_step()?;
        self.note(format!(
            "liveness reached: {wanted} requests answered after healing, leader {leader} answers"
        ));
        check::durability::check(&self.c.applied, leader.0 as usize, &self.c.acked)
            .map_err(|e| violation("durability", format!("{e}: {}", self.c.describe())))
    }

    /// One step of the safety phase: a fault, or clients starting operations.
    fn step(&mut self) {
        let f = self.config.faults;
        let n = self.config.replicas as u64;
        // Without membership changes, every replica, in id order.
        let members = self.changes.members(&self.c);
        let pick = |rng: &mut SimRng| members[rng.below(members.len() as u64) as usize];
        match self.rng.below(16) {
            // Never more than a minority out (crashed, unable to lead, or restarted and not
            // counted in majorities yet), also in the configuration a change in doubt makes.
            0 if f.crash && !members.is_empty() && self.changes.may_lose_one(&self.c, &members) => {
                let pos = pick(&mut self.rng);
                if self.c.cores[pos].is_some() {
                    self.c.crash(pos);
                    self.note(format!("crash {pos}"));
                }
            }
            1 if f.restart && !members.is_empty() => {
                let pos = pick(&mut self.rng);
                if self.c.cores[pos].is_none() {
                    self.c.restart(pos);
                    self.note(format!("restart {pos} (log lost)"));
                }
            }
            2 if f.pause => {
                let pos = self.rng.below(n) as usize;
                if self.c.cores[pos].is_some() && !self.c.paused[pos] {
                    self.c.pause(pos);
                    self.note(format!("pause {pos}"));
                }
            }
            3 if f.pause => {
                if self.c.paused.iter().any(|&p| p) {
                    self.c.resume_all();
                    self.note("resume all");
                }
            }
            4 if f.partition => {
                let before = self.c.partitions.len();
                self.c.partition_random(&mut self.rng);
                if let Some((a, b)) = self.c.partitions.get(before) {
                    let line = format!("partition {a} | {b}");
                    self.note(line);
                }
            }
            5 if f.partition => {
                if !self.c.partitions.is_empty() {
                    self.c.heal_all();
                    self.note("heal all links");
                }
            }
            6 if f.delay => {
                let a = NodeId(self.rng.below(n) as u16);
                let b = NodeId(self.rng.below(n) as u16);
                if a != b {
                    let delay = LinkDelay {
                        extra_ns: self.rng.below(20_000),
                        jitter_ns: self.rng.below(5_000),
                    };
                    self.c.world.set_link_delay(a, b, delay);
                    self.note(format!(
                        "delay {a} - {b}: +{} ns, jitter {} ns",
                        delay.extra_ns, delay.jitter_ns
                    ));
                }
            }
            7 if f.membership => {
                self.change_due = true;
                self.try_change();
            }
            _ => {
                if let Some(line) = self.workload.start_some(&mut self.c, &mut self.rng, true) {
                    self.note(line);
                }
            }
        }
    }

    /// Asks the agreed leader for a membership change, if one is due and the leader is free.
    fn try_change(&mut self) {
        if !self.change_due {
            return;
        }
        let members = self.changes.members(&self.c);
        match self.changes.try_change(&mut self.c, &mut self.rng, &members) {
            Some(Ok((change, leader))) => {
                self.note(format!("membership: {change:?} asked of {leader} (members {members:?})"))
            }
            Some(Err(e)) => self.note(format!("membership: change refused at once: {e}")),
            None => return,
        }
        self.change_due = false;
    }

    fn heal(&mut self) {
        self.c.resume_all();
        self.c.heal_all();
        let n = self.config.replicas;
        for a in 0..n {
            for b in a + 1..n {
                self.c.world.set_link_delay(NodeId(a), NodeId(b), LinkDelay::default());
            }
        }
        let mut faults = self.c.world.faults();
        faults.fast_perm_failure_probability = 0.0;
        faults.fast_perm_busy_in_flight_probability = 0.0;
        faults.control_under_way_probability = 0.0;
        self.c.world.set_faults(faults);
        // The crashed members restart, those of the last configuration decided if some live
        // member has not reached it, and a replica whose addition is in doubt (a removed one
        // stays down). Without membership changes: every crashed replica.
        let mut members = self.changes.members(&self.c);
        let decided = self.changes.latest_decided().unwrap_or_default().to_vec();
        let added = match self.changes.in_doubt() {
            Some(Change::Add(id)) => Some(id.0 as usize),
            _ => None,
        };
        for pos in decided.into_iter().chain(added) {
            if !members.contains(&pos) {
                members.push(pos);
            }
        }
        for pos in members {
            if self.c.cores[pos].is_none() && self.c.ran[pos] {
                self.c.restart(pos);
            }
        }
    }

    /// Runs rounds for `ns` of virtual time; after each, clients take their answers and the
    /// single-writer checker looks at every log.
    fn run_for(&mut self, ns: u64) -> Result<(), Violation> {
        let end = self.c.world.now_ns() + ns;
        while self.c.world.now_ns() < end {
            self.c.round();
            self.workload.poll(&mut self.c);
            if self.config.faults.membership {
                if let Some(outcome) = self.changes.poll(&mut self.c) {
                    self.note(format!("membership: change outcome {outcome:?}"));
                }
                self.try_change();
            }
            if self.config.watch {
                self.watch();
            }
            // Clients keep coming while time passes, so that faults strike with proposals in
            // every phase of their replication.
            if self.rng.below(CLIENT_START_ONE_IN) == 0 {
                if let Some(line) = self.workload.start_some(&mut self.c, &mut self.rng, true) {
                    self.note(line);
                }
            }
            self.c.single_writer().map_err(|(checker, e)| violation(checker, e))?;
        }
        let leader = self.c.agreed_leader();
        if let Some(l) = leader.filter(|_| leader != self.leader) {
            self.leader = leader;
            self.leader_changes += 1;
            self.note(format!("leader {l}"));
        }
        Ok(())
    }

    fn watch(&mut self) {
        for pos in 0..self.watched.len() {
            let now = match &self.c.cores[pos] {
                None => "down".to_string(),
                Some(core) => {
                    let Some(e) = core.replication.mu() else {
                        let now = format!(
                            "{} applied {} leader {:?}{}",
                            core.replication.phase_text(),
                            self.c.applied[pos].len(),
                            core.leader().map(|l| l.0),
                            if self.c.paused[pos] { " PAUSED" } else { "" }
                        );
                        if now != self.watched[pos] {
                            self.note(format!("  replica {pos}: {now}"));
                            self.watched[pos] = now;
                        }
                        continue;
                    };
                    let e = e.engine();
                    let confirmed: Vec<u16> =
                        (0..64).filter(|b| e.confirmed_mask() >> b & 1 != 0).collect();
                    format!(
                        "{:?} fuo {} confirmed {confirmed:?} prepared {} applied {} leader {:?} \
                         writers {:?}{}",
                        e.phase(),
                        e.fuo(),
                        e.prepared(),
                        self.c.applied[pos].len(),
                        core.leader().map(|l| l.0),
                        core.background.log_writers().iter().map(|w| w.0).collect::<Vec<_>>(),
                        if self.c.paused[pos] { " PAUSED" } else { "" }
                    )
                }
            };
            if now != self.watched[pos] {
                self.note(format!("  replica {pos}: {now}"));
                self.watched[pos] = now;
            }
        }
    }

    fn check_step(&self) -> Result<(), Violation> {
        self.c.safety().map_err(|(checker, e)| violation(checker, e))?;
        // Nothing here restarts a replica as new (`SimCluster::restart_as_new`), so none may be
        // refused as one, nor stop for any other reason.
        for (pos, core) in self.c.cores.iter().enumerate() {
            if let Some(failure) = core.as_ref().and_then(|c| c.status().failure) {
                return Err(violation(
                    "stopped",
                    format!("replica {pos} stopped: {failure}: {}", self.c.describe()),
                ));
            }
        }
        Ok(())
    }

    fn check_history(&self, report: &SeedReport) -> Result<(), Violation> {
        let c = self.config;
        check::linearizability::check_history(
            &report.history,
            c.lincheck.as_deref(),
            c.history_dir.as_deref(),
            c.seed,
        )
        .map_err(|(checker, message)| violation(checker, message))
    }
}
