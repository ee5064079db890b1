//! Mu and Velos with leased local reads in the simulator (`mu sim --protocol mu|velos --reads
//! lease`, `docs/protocols/lease-reads.md`): the uKharon cluster of [`crate::ukharon`]
//! (coordinators, node cores with drifting clocks, views naming a primary) with a Mu or Velos
//! replica beside each member, appointed by the views (rule 1), and a key-value service on each
//! that gates its answers (rule 2) and answers reads from its store under two checks (rule 3)
//! ([`cluster`], [`server`]); clients that follow the primary (`crate::kv_run::clients`);
//! uKharon's faults on whole member processes, and local reads stopped between their checks
//! ([`faults`]); the phases are uKharon-KV's, shared in [`crate::kv_run`] (`group`).
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
pub mod cluster;
pub mod faults;
mod group;
pub mod primary;
pub mod server;

use crate::kv_run::{self, Setup};
use cluster::LeaseCluster;
use mu_replica::Protocol;

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
    /// The cluster, its faults, the clients and the checks (member nodes are each a
    /// membership node and a replica).
    pub setup: Setup,
    pub protocol: Protocol,
    pub mutation: LeaseMutation,
    /// Whether answers are checked against the views active when they were given
    /// (`stale-answer`); off, only what clients saw is checked.
    pub check_answers: bool,
}

impl LeaseRunConfig {
    pub fn new(seed: u64, protocol: Protocol) -> LeaseRunConfig {
        // Five replicas: two may be out at once.
        let setup = Setup { nodes: 5, ..Setup::new(seed) };
        LeaseRunConfig { setup, protocol, mutation: LeaseMutation::None, check_answers: true }
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

/// Runs one seed. A panic of the engines or the runtime is a finding too.
pub fn run(config: &LeaseRunConfig) -> LeaseReport {
    let command = format!("mu sim --protocol {} --reads lease", protocol_name(config.protocol));
    let finished = kv_run::run_seed(&config.setup, &command, |uk| {
        let mut cluster = LeaseCluster::new(uk, config.protocol, config.mutation)?;
        cluster.check_answers = config.check_answers;
        Ok(cluster)
    });
    let c = finished.counts;
    let group = finished.group.as_ref();
    LeaseReport {
        seed: config.setup.seed,
        views: c.views,
        faults_injected: c.faults_injected,
        answers: c.answers,
        local_answers: group.map_or(0, |g| g.local_answers),
        stalls: group.map_or(0, |g| g.stalls_begun),
        handoffs: group.map_or(0, |g| g.handoffs),
        failovers: c.failovers,
        ops_returned: c.ops_returned,
        ops_unknown: c.ops_unknown,
        virtual_ns: c.virtual_ns,
        violation: finished.violation,
        trace_hash: c.trace_hash,
    }
}

/// `mu` or `velos`.
pub fn protocol_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Mu => "mu",
        Protocol::Velos => "velos",
    }
}
