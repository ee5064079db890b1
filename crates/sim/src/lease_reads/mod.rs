//! Mu and Velos with leased local reads in the simulator (`mu sim --protocol mu|velos --reads
//! lease`, `docs/protocols/lease-reads.md`): the uKharon cluster of [`crate::ukharon`]
//! (coordinators, node cores with drifting clocks, views naming a primary) with a Mu or Velos
//! replica beside each member, appointed by the views (rule 1), and a key-value service on each
//! that gates its answers (rule 2) and answers reads from its store under two checks (rule 3)
//! ([`cluster`], [`server`]); clients that follow the primary ([`clients`]); uKharon's faults
//! on whole member processes, and local reads stopped between their checks ([`faults`]).
//!
//! A run: everyone joins; a safety phase of fault steps while clients use the store; then
//! every link heals and every stopped process runs again (crashed ones stay down), and the
//! group must serve again and answer new requests within a bound; the clients' last operations
//! are answered, then a final read of every key. Checks: the uKharon sim's all along (one
//! active view at a time, agreement on views), no answer given for a view after a newer view
//! of another run became active anywhere (`stale-answer`), agreement of the replicas' applied
//! entries, the history linearizable (porcupine, through `lincheck`), no acknowledged write
//! lost, every live replica's store equal at the end ([`check`]).

pub mod check;
pub mod clients;
pub mod cluster;
pub mod faults;
mod phases;
pub mod primary;
pub mod server;

use crate::ukharon::cluster::UkCluster;
use crate::ukharon::{self, Choices, UkFaults, UkRunConfig};
use clients::LeaseClients;
use cluster::LeaseCluster;
use mu_replica::Protocol;
use mu_ukharon::lease::LeaseConfig;
use std::path::PathBuf;

/// A deliberately broken service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseMutation {
    None,
    /// A local read is answered without its second check (rule 3 halved).
    LeaseReadWithoutSecondCheck,
    /// Applied requests are answered without rule 2's check.
    UngatedAnswer,
}

/// The names of `--mutation` under `--reads lease`.
pub fn parse_mutation(name: &str) -> Result<LeaseMutation, String> {
    match name {
        "lease-read-without-second-check" => Ok(LeaseMutation::LeaseReadWithoutSecondCheck),
        "ungated-answer" => Ok(LeaseMutation::UngatedAnswer),
        other => Err(format!(
            "unknown mutation {other:?} for --reads lease: lease-read-without-second-check or \
             ungated-answer"
        )),
    }
}

/// One run's setup.
#[derive(Clone, Debug)]
pub struct LeaseRunConfig {
    pub seed: u64,
    pub protocol: Protocol,
    pub coordinators: u16,
    /// Member nodes, each a membership node and a replica.
    pub nodes: u16,
    /// Lease caches (§6.3), as in the uKharon sim: every third seed has two.
    pub caches: u16,
    pub faults: UkFaults,
    /// Fault steps of the safety phase, each followed by 50 to 300 µs of virtual time.
    pub steps: u32,
    /// Clock drift bound (ppm) when `faults.drift`, as in the uKharon sim.
    pub drift_ppm: i64,
    pub clients: usize,
    pub keys: u64,
    pub mutation: LeaseMutation,
    /// Whether answers are checked against the views active when they were given
    /// (`stale-answer`); off, only what clients saw is checked.
    pub check_answers: bool,
    /// Check the history with this `lincheck` binary (None: not checked).
    pub lincheck: Option<PathBuf>,
    /// Keep each seed's history here, as `DIR/seed-S.json`.
    pub history_dir: Option<PathBuf>,
    /// How long the healed group has to serve again and answer new requests.
    pub liveness_bound_ns: u64,
}

impl LeaseRunConfig {
    pub fn new(seed: u64, protocol: Protocol) -> LeaseRunConfig {
        let uk = UkRunConfig::new(seed);
        LeaseRunConfig {
            seed,
            protocol,
            coordinators: uk.coordinators,
            // Five replicas: two may be out at once.
            nodes: 5,
            caches: uk.caches,
            faults: UkFaults::ALL,
            steps: uk.steps,
            drift_ppm: uk.drift_ppm,
            clients: 4,
            keys: 3,
            mutation: LeaseMutation::None,
            check_answers: true,
            lincheck: None,
            history_dir: None,
            liveness_bound_ns: 20_000_000,
        }
    }
}

/// What a run found.
#[derive(Clone, Debug, Default)]
pub struct LeaseReport {
    pub seed: u64,
    pub views: u64,
    pub faults_injected: u32,
    /// Answers given, and how many of them were local reads.
    pub answers: u64,
    pub local_answers: u64,
    /// Local reads whose process stopped between the two checks.
    pub stalls: u64,
    /// Primaries that handed their role on, their replica standing aside.
    pub handoffs: u64,
    /// Answers from a member other than the one that answered before.
    pub failovers: usize,
    pub ops_returned: usize,
    pub ops_unknown: usize,
    pub virtual_ns: u64,
    /// The checker that failed, and why.
    pub violation: Option<(&'static str, String)>,
    pub trace_hash: u64,
}

impl LeaseReport {
    /// Whether the run stopped at a view appointing a replica that stands aside: a liveness
    /// gap of appointed leaders (`docs/protocols/lease-reads.md`, "Simulator"), not a safety
    /// finding.
    pub fn stands_aside(&self) -> bool {
        self.violation.as_ref().is_some_and(|(checker, _)| *checker == STANDS_ASIDE)
    }
}

/// The checker name of a run stopped at an appointed replica that stands aside.
pub const STANDS_ASIDE: &str = "appointed-stands-aside";

/// Rounds of virtual time.
const ROUND_NS: u64 = 500;

/// Runs one seed. A panic of the engines or the runtime is a finding too.
pub fn run(config: &LeaseRunConfig) -> LeaseReport {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut report = LeaseReport { seed: config.seed, ..LeaseReport::default() };
        run_checked(config, &mut report);
        report
    }));
    outcome.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into());
        LeaseReport { seed: config.seed, violation: Some(("panic", message)), ..Default::default() }
    })
}

fn run_checked(config: &LeaseRunConfig, report: &mut LeaseReport) {
    let uk_config = UkRunConfig {
        coordinators: config.coordinators,
        nodes: config.nodes,
        caches: config.caches,
        faults: config.faults,
        drift_ppm: config.drift_ppm,
        ..UkRunConfig::new(config.seed)
    };
    let mut choices = Choices(config.seed ^ 0x6c65_6173_6573_696d);
    let lease =
        LeaseConfig { drift_ppm: config.drift_ppm.unsigned_abs(), ..LeaseConfig::default() };
    let clocks = ukharon::clocks(&uk_config, &mut choices);
    let counts = (config.coordinators, config.nodes, config.caches);
    let uk = UkCluster::with_config(config.seed, counts, lease, &clocks, |c| c.name_primary = true);
    let cluster = uk.and_then(|uk| LeaseCluster::new(uk, config.protocol, config.mutation));
    let mut cluster = match cluster {
        Ok(c) => c,
        Err(e) => {
            report.violation = Some(("setup", e));
            return;
        }
    };
    cluster.check_answers = config.check_answers;
    let members = cluster.member_ids();
    let mut clients = LeaseClients::new(config.clients, config.keys, members, config.seed);
    let mut run = phases::Run { config, cluster: &mut cluster, clients: &mut clients, choices };
    let result = run.phases(report);
    report.views = cluster.uk.log.views.len() as u64;
    report.answers = cluster.answers;
    report.local_answers = cluster.local_answers;
    report.stalls = cluster.stalls_begun;
    report.handoffs = cluster.handoffs;
    report.failovers = cluster.primaries.windows(2).filter(|w| w[0].0 != w[1].0).count();
    report.virtual_ns = cluster.uk.world.now_ns();
    report.trace_hash = cluster.uk.world.trace_hash();
    report.ops_returned = clients.history.returned_count();
    report.ops_unknown = clients.history.unknown_count();
    clients.history.source = format!(
        "mu sim --protocol {} --reads lease --seed {} --faults {}",
        protocol_name(config.protocol),
        config.seed,
        crate::ukharon_kv::describe_faults(config.faults)
    );
    let checked = result.and_then(|finals| {
        crate::ukharon_kv::check::no_acknowledged_write_lost(&clients.history, &finals)
            .map_err(|e| ("lost-write", e))?;
        crate::check::linearizability::check_history(
            &clients.history,
            config.lincheck.as_deref(),
            config.history_dir.as_deref(),
            config.seed,
        )
    });
    report.violation = checked.err();
}

/// `mu` or `velos`.
pub fn protocol_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Mu => "mu",
        Protocol::Velos => "velos",
    }
}
