//! uKharon-KV in the simulator (`mu sim --protocol ukharon-kv`): the uKharon cluster of
//! [`crate::ukharon`] (coordinators, node cores, drifting clocks, its faults and checkers) with
//! a [`mu_ukharon_kv::KvDriver`] beside each member ([`cluster`]), clients that follow the
//! primary (`crate::kv_run::clients`), and member faults that keep the group's state
//! ([`faults`]); the phases are those of [`crate::kv_run`], which the leased-reads sim shares
//! (`group`).
//!
//! A run: everyone joins; a safety phase of fault steps while clients use the store; then
//! every link heals and every stopped process runs again (crashed ones stay down), and the
//! group must serve again (one primary, whole backups, in the latest view, every live node
//! active in it) and answer new requests within a bound; the clients' last operations are
//! answered, then a final read of every key. Checks: the uKharon sim's all along (one active
//! view at a time, agreement on views), no answer given for a view after a newer view of
//! another run became active anywhere ([`cluster::KvCluster::poll_drivers`]), the history
//! linearizable (porcupine, through `lincheck`), no acknowledged write lost and every member's
//! store equal at the end ([`check`]).
//!
//! A member named primary without a whole state asks its core for another primary in its
//! place, as the runtime's `KvNode` does ([`cluster::KvCluster::poll_drivers`]). A run in which
//! no member holds the state any more stops there, as `state-lost`
//! ([`cluster::KvCluster::state_lost`]): counted, not a failure.

pub mod check;
pub mod cluster;
pub mod faults;
mod group;

use crate::kv_run::{self, Setup};
use cluster::KvCluster;
use mu_primary_backup::Mutation;

/// One run's setup.
#[derive(Clone, Debug)]
pub struct KvRunConfig {
    /// The cluster, its faults, the clients and the checks (member nodes are each a
    /// membership node and a data node).
    pub setup: Setup,
    /// A deliberately broken engine every member runs.
    pub mutation: Mutation,
}

impl KvRunConfig {
    pub fn new(seed: u64) -> KvRunConfig {
        KvRunConfig { setup: Setup::new(seed), mutation: Mutation::None }
    }
}

/// What a run found.
#[derive(Clone, Debug, Default)]
pub struct KvReport {
    pub seed: u64,
    pub views: u64,
    pub faults_injected: u32,
    /// Primaries that answered, one per (member, view) in turn: more than the views of one
    /// primary's run means a failover.
    pub primaries: usize,
    /// Failovers: answers from a member other than the one that answered before.
    pub failovers: usize,
    pub answers: u64,
    pub ops_returned: usize,
    pub ops_unknown: usize,
    pub virtual_ns: u64,
    /// The checker that failed, and why.
    pub violation: Option<(&'static str, String)>,
    pub trace_hash: u64,
}

impl KvReport {
    /// Whether the run stopped because no member held the group's state any more
    /// ([`KvCluster::state_lost`]): the faults and the removals they caused took every member
    /// that held it, which primary-backup does not survive. An outcome to count, not a safety
    /// finding (`docs/protocols/ukharon-kv.md`).
    pub fn state_lost(&self) -> bool {
        self.violation.as_ref().is_some_and(|(checker, _)| *checker == STATE_LOST)
    }
}

/// The checker name of a run that stopped because the group lost its state.
pub const STATE_LOST: &str = "state-lost";

/// The names of `--mutation` for uKharon-KV.
pub fn parse_mutation(name: &str) -> Result<Mutation, String> {
    Ok(match name {
        "answer-before-complete" => Mutation::AnswerBeforeComplete,
        "answer-without-active" => Mutation::AnswerWithoutActive,
        "get-from-speculative-state" => Mutation::GetFromSpeculativeState,
        "follow-before-revoke" => Mutation::FollowBeforeRevoke,
        "serve-before-scan" => Mutation::ServeBeforeScan,
        other => {
            return Err(format!(
                "unknown mutation {other:?}: answer-before-complete, answer-without-active, \
                 get-from-speculative-state, follow-before-revoke or serve-before-scan"
            ))
        }
    })
}

/// Runs one seed. A panic of the engines or the runtime is a finding too.
pub fn run(config: &KvRunConfig) -> KvReport {
    let command = "mu sim --protocol ukharon-kv";
    let build = |uk| KvCluster::new(uk, config.mutation);
    let finished = kv_run::run_seed(&config.setup, command, build);
    let c = finished.counts;
    KvReport {
        seed: config.setup.seed,
        views: c.views,
        faults_injected: c.faults_injected,
        primaries: c.primaries,
        failovers: c.failovers,
        answers: c.answers,
        ops_returned: c.ops_returned,
        ops_unknown: c.ops_unknown,
        virtual_ns: c.virtual_ns,
        violation: finished.violation,
        trace_hash: c.trace_hash,
    }
}
