//! What the two simulators of key-value groups under uKharon's views share: uKharon-KV
//! ([`crate::ukharon_kv`], a primary-backup data plane beside each member) and Mu or Velos with
//! leased reads ([`crate::lease_reads`], a replica beside each member). Both put a second plane
//! beside the uKharon cluster of [`crate::ukharon`] (member `m`'s node there is `m + offset`,
//! `links`), let clients follow the primary (`clients`) and run the same phases
//! (`phases`); what differs (how a member serves, its faults, how the group heals and
//! settles) is the group's, behind `KvGroup`.
//!
//! A run (`run_seed`): the uKharon cluster of the seed, every view naming a primary; the
//! group the simulator builds on it; the phases; then the checks both share on the history
//! (no acknowledged write lost, linearizable through `lincheck`).

pub(crate) mod clients;
pub(crate) mod links;
pub(crate) mod lost_writes;
pub(crate) mod phases;

use crate::ukharon::cluster::UkCluster;
use crate::ukharon::{self, Choices, UkFaults, UkRunConfig};
use clients::KvClients;
use mu_kv::Request;
use mu_ukharon::lease::LeaseConfig;
use mu_ukharon_kv::KvEvent;
use phases::Run;
use std::path::PathBuf;

/// What a client puts on a request: its slot, and which of its attempts this is.
pub type Token = (usize, u64);

/// A checker that failed, and why.
pub type Found = (&'static str, String);

/// A key-value group beside a uKharon cluster, as the shared clients and phases drive it.
pub(crate) trait KvGroup: Sized {
    /// Salts of the seed: for the run's choices and for the clients' operations.
    const CHOICES_SALT: u64;
    const CLIENTS_SALT: u64;
    /// How long a client waits for an answer before it asks elsewhere.
    const CLIENT_TIMEOUT_NS: u64;
    /// Whether a client numbers its attempts afresh for each operation (uKharon-KV, as it
    /// always did) rather than over all its operations (leased reads): numbered per operation,
    /// an answer to an earlier operation's attempt may be taken for the current one's.
    const ATTEMPTS_PER_OPERATION: bool;

    fn uk(&self) -> &UkCluster;
    fn uk_mut(&mut self) -> &mut UkCluster;
    /// The member node ids clients may send to.
    fn member_ids(&self) -> Vec<u16>;
    /// The incarnation of `member`'s process; none while it is down.
    fn incarnation(&self, member: u16) -> Option<u64>;
    /// Puts a client's request in `member`'s inbox (its process is up).
    fn deliver(&mut self, member: u16, request: Request, token: Token);
    /// The group's part of a round, after the membership polled and clients sent: the events
    /// for clients, with the member that gave each; a stale answer is an error. A member may
    /// stop in the middle of a local read when `stall_reads`.
    fn serve(
        &mut self,
        choices: &mut Choices,
        stall_reads: bool,
    ) -> Result<Vec<(u16, KvEvent<Token>)>, String>;
    /// One fault step; the fault injected, if any.
    fn inject(
        &mut self,
        faults: UkFaults,
        choices: &mut Choices,
    ) -> Result<Option<&'static str>, String>;
    /// The primary of the latest view, once the group serves it; `Err` says what is not so yet.
    fn serving(&self) -> Result<u16, String>;
    /// The liveness phase's start: links heal, stopped processes run again.
    fn heal(&mut self) -> Result<(), String>;
    /// Answers given, and the primaries seen answering in order (a failover adds one).
    fn answers(&self) -> u64;
    fn primaries(&self) -> &[(u16, u64)];
    /// Why the run ends here, as an outcome to count rather than a failure, if it does:
    /// asked after each fault step and each wait of the liveness phase.
    fn ended(&self) -> Option<Found> {
        None
    }
    /// What to report in place of `liveness` when the healed group did not `what` in time
    /// (`why`), if the group knows why it cannot.
    fn stuck(&self, _what: &str, _why: &str) -> Option<Found> {
        None
    }
    /// The end of a run, after the final reads were answered: the group settles (within
    /// `deadline`, global time) and its end checks pass.
    fn settle(run: &mut Run<'_, Self>, deadline: u64) -> Result<(), Found>;
}

/// What both simulators' configurations hold: the uKharon cluster, its faults, the clients,
/// the checks.
#[derive(Clone, Debug)]
pub struct Setup {
    pub seed: u64,
    pub coordinators: u16,
    /// Member nodes, each a membership node and a node of the second plane.
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
    /// Check the history with this `lincheck` binary (None: not checked).
    pub lincheck: Option<PathBuf>,
    /// Keep each seed's history here, as `DIR/seed-S.json`.
    pub history_dir: Option<PathBuf>,
    /// How long the healed group has to serve again and answer new requests.
    pub liveness_bound_ns: u64,
}

impl Setup {
    /// The uKharon sim's cluster for `seed`, every fault, four clients on three keys.
    pub fn new(seed: u64) -> Setup {
        let uk = UkRunConfig::new(seed);
        Setup {
            seed,
            coordinators: uk.coordinators,
            nodes: uk.nodes,
            caches: uk.caches,
            faults: UkFaults::ALL,
            steps: uk.steps,
            drift_ppm: uk.drift_ppm,
            clients: 4,
            keys: 3,
            lincheck: None,
            history_dir: None,
            liveness_bound_ns: 20_000_000,
        }
    }
}

/// What a run counted, for either simulator's report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    pub views: u64,
    pub faults_injected: u32,
    pub answers: u64,
    /// Primaries that answered, one per (member, view) in turn.
    pub primaries: usize,
    /// Answers from a member other than the one that answered before.
    pub failovers: usize,
    pub ops_returned: usize,
    pub ops_unknown: usize,
    pub virtual_ns: u64,
    pub trace_hash: u64,
}

/// A run's end: the group (none if it was not built, or a panic took it), what was counted,
/// and the checker that failed.
pub(crate) struct Finished<G> {
    pub group: Option<G>,
    pub counts: Counts,
    pub violation: Option<Found>,
}

/// Runs one seed of `setup` on the group `build` makes of the uKharon cluster; `command` is
/// the command that replays it, less `--seed` and `--faults` (the history's source). A panic
/// of the engines or the runtime is a finding too.
pub(crate) fn run_seed<G: KvGroup>(
    setup: &Setup,
    command: &str,
    build: impl FnOnce(UkCluster) -> Result<G, String>,
) -> Finished<G> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_checked(setup, command, build)
    }));
    outcome.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into());
        Finished { group: None, counts: Counts::default(), violation: Some(("panic", message)) }
    })
}

fn run_checked<G: KvGroup>(
    setup: &Setup,
    command: &str,
    build: impl FnOnce(UkCluster) -> Result<G, String>,
) -> Finished<G> {
    let uk_config = UkRunConfig {
        coordinators: setup.coordinators,
        nodes: setup.nodes,
        caches: setup.caches,
        faults: setup.faults,
        drift_ppm: setup.drift_ppm,
        ..UkRunConfig::new(setup.seed)
    };
    let mut choices = Choices(setup.seed ^ G::CHOICES_SALT);
    let lease = LeaseConfig { drift_ppm: setup.drift_ppm.unsigned_abs(), ..LeaseConfig::default() };
    let clocks = ukharon::clocks(&uk_config, &mut choices);
    let counts = (setup.coordinators, setup.nodes, setup.caches);
    let uk = UkCluster::with_config(setup.seed, counts, lease, &clocks, |c| c.name_primary = true);
    let mut group = match uk.and_then(build) {
        Ok(g) => g,
        Err(e) => {
            let violation = Some(("setup", e));
            return Finished { group: None, counts: Counts::default(), violation };
        }
    };
    let members = group.member_ids();
    let salted = setup.seed ^ G::CLIENTS_SALT;
    let mut clients = KvClients::new(setup.clients, setup.keys, members, salted);
    let mut counts = Counts::default();
    let mut run = Run { setup, group: &mut group, clients: &mut clients, choices };
    let result = run.phases(&mut counts.faults_injected);
    counts.views = group.uk().log.views.len() as u64;
    counts.answers = group.answers();
    counts.primaries = group.primaries().len();
    counts.failovers = group.primaries().windows(2).filter(|w| w[0].0 != w[1].0).count();
    counts.virtual_ns = group.uk().world.now_ns();
    counts.trace_hash = group.uk().world.trace_hash();
    counts.ops_returned = clients.history.returned_count();
    counts.ops_unknown = clients.history.unknown_count();
    let (seed, faults) = (setup.seed, crate::ukharon::faults::describe_faults(setup.faults));
    clients.history.source = format!("{} --seed {seed} --faults {faults}", command);
    let checked = result.and_then(|finals| {
        lost_writes::no_acknowledged_write_lost(&clients.history, &finals)
            .map_err(|e| ("lost-write", e))?;
        crate::check::linearizability::check_history(
            &clients.history,
            setup.lincheck.as_deref(),
            setup.history_dir.as_deref(),
            setup.seed,
        )
    });
    Finished { group: Some(group), counts, violation: checked.err() }
}
