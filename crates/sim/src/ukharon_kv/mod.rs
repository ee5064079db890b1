//! uKharon-KV in the simulator (`mu sim --protocol ukharon-kv`): the uKharon cluster of
//! [`crate::ukharon`] (coordinators, node cores, drifting clocks, its faults and checkers) with
//! a [`mu_ukharon_kv::KvDriver`] beside each member ([`cluster`]), clients that follow the
//! primary ([`clients`]), and member faults that keep the group's state ([`faults`]).
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
pub mod clients;
pub mod cluster;
pub mod faults;

use crate::ukharon::cluster::UkCluster;
use crate::ukharon::{self, Choices, UkFaults, UkRunConfig};
use clients::KvClients;
use cluster::KvCluster;
use mu_primary_backup::Mutation;
use mu_ukharon::lease::LeaseConfig;
use std::path::PathBuf;

/// One run's setup.
#[derive(Clone, Debug)]
pub struct KvRunConfig {
    pub seed: u64,
    pub coordinators: u16,
    /// Member nodes (each a membership node and a data node).
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
    /// A deliberately broken engine every member runs.
    pub mutation: Mutation,
    /// Check the history with this `lincheck` binary (None: not checked).
    pub lincheck: Option<PathBuf>,
    /// Keep each seed's history here, as `DIR/seed-S.json`.
    pub history_dir: Option<PathBuf>,
    /// How long the healed group has to serve again and answer new requests.
    pub liveness_bound_ns: u64,
}

impl KvRunConfig {
    pub fn new(seed: u64) -> KvRunConfig {
        let uk = UkRunConfig::new(seed);
        KvRunConfig {
            seed,
            coordinators: uk.coordinators,
            nodes: uk.nodes,
            caches: uk.caches,
            faults: UkFaults::ALL,
            steps: uk.steps,
            drift_ppm: uk.drift_ppm,
            clients: 4,
            keys: 3,
            mutation: Mutation::None,
            lincheck: None,
            history_dir: None,
            liveness_bound_ns: 20_000_000,
        }
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

/// Rounds of virtual time.
const ROUND_NS: u64 = 500;

/// Runs one seed. A panic of the engines or the runtime is a finding too.
pub fn run(config: &KvRunConfig) -> KvReport {
    let mut report = KvReport { seed: config.seed, ..KvReport::default() };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut report = KvReport { seed: config.seed, ..KvReport::default() };
        run_checked(config, &mut report);
        report
    }));
    match outcome {
        Ok(r) => report = r,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into());
            report.violation = Some(("panic", message));
        }
    }
    report
}

fn run_checked(config: &KvRunConfig, report: &mut KvReport) {
    let uk_config = UkRunConfig {
        coordinators: config.coordinators,
        nodes: config.nodes,
        caches: config.caches,
        faults: config.faults,
        drift_ppm: config.drift_ppm,
        ..UkRunConfig::new(config.seed)
    };
    let mut choices = Choices(config.seed ^ 0x6b76_5f73_696d);
    let lease =
        LeaseConfig { drift_ppm: config.drift_ppm.unsigned_abs(), ..LeaseConfig::default() };
    let clocks = ukharon::clocks(&uk_config, &mut choices);
    let counts = (config.coordinators, config.nodes, config.caches);
    let uk = UkCluster::with_config(config.seed, counts, lease, &clocks, |c| c.name_primary = true);
    let cluster = uk.and_then(|uk| KvCluster::new(uk, config.mutation));
    let mut cluster = match cluster {
        Ok(c) => c,
        Err(e) => {
            report.violation = Some(("setup", e));
            return;
        }
    };
    let members = cluster.member_ids();
    let mut clients = KvClients::new(config.clients, config.keys, members, config.seed);
    let mut run = Run { config, cluster: &mut cluster, clients: &mut clients, choices };
    let result = run.phases(report);
    report.views = cluster.uk.log.views.len() as u64;
    report.answers = cluster.answers;
    report.primaries = cluster.primaries.len();
    report.failovers = cluster.primaries.windows(2).filter(|w| w[0].0 != w[1].0).count();
    report.virtual_ns = cluster.uk.world.now_ns();
    report.trace_hash = cluster.uk.world.trace_hash();
    report.ops_returned = clients.history.returned_count();
    report.ops_unknown = clients.history.unknown_count();
    clients.history.source = format!(
        "mu sim --protocol ukharon-kv --seed {} --faults {}",
        config.seed,
        describe_faults(config.faults)
    );
    let checked = result.and_then(|finals| {
        check::no_acknowledged_write_lost(&clients.history, &finals)
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

/// The faults as `--faults` names them.
pub fn describe_faults(f: UkFaults) -> String {
    let on = [
        f.crash,
        f.restart,
        f.pause,
        f.delay,
        f.partition,
        f.drift,
        f.lease,
        f.coordinator,
        f.coordinator_restart,
    ];
    let names: Vec<&str> = ukharon::UK_FAULT_NAMES
        .iter()
        .zip(on)
        .filter_map(|(name, on)| on.then_some(*name))
        .collect();
    match names.len() {
        0 => "none".into(),
        n if n == on.len() => "all".into(),
        _ => names.join(","),
    }
}

struct Run<'a> {
    config: &'a KvRunConfig,
    cluster: &'a mut KvCluster,
    clients: &'a mut KvClients,
    choices: Choices,
}

type Found = (&'static str, String);

impl Run<'_> {
    /// One round: the membership polls, clients send, the drivers poll, clients take what
    /// they were told, then time passes.
    fn round(&mut self, start_new: bool) -> Result<(), Found> {
        let now = self.cluster.uk.world.now_ns();
        self.cluster.uk.poll_all().map_err(|e| ("ukharon", e))?;
        self.clients.send(self.cluster, start_new);
        let events = self.cluster.poll_drivers().map_err(|e| ("stale-answer", e))?;
        self.clients.take(events, now).map_err(|e| ("refused", e))?;
        self.cluster.uk.world.run_until(now + ROUND_NS);
        Ok(())
    }

    /// Rounds for `ns`, then the uKharon sim's check of active spans.
    fn run_for(&mut self, ns: u64, start_new: bool) -> Result<(), Found> {
        let end = self.cluster.uk.world.now_ns() + ns;
        while self.cluster.uk.world.now_ns() < end {
            self.round(start_new)?;
        }
        let uk = &self.cluster.uk;
        uk.spans.check(&uk.log.views).map_err(|e| ("active", e))?;
        uk.cache_spans.check(&uk.log.views).map_err(|e| ("active", format!("caches: {e}")))
    }

    /// The whole run; the places of the final reads in the history.
    fn phases(&mut self, report: &mut KvReport) -> Result<Vec<usize>, Found> {
        // Everyone joins, and clients start, before the faults.
        self.run_for(3_000_000, true)?;
        for _ in 0..self.config.steps {
            let injected = faults::inject(self.cluster, self.config.faults, &mut self.choices)
                .map_err(|e| ("fault", e))?;
            if injected.is_some() {
                report.faults_injected += 1;
            }
            let ns = 50_000 + self.choices.below(250_000);
            self.run_for(ns, true)?;
            self.state_kept()?;
        }
        self.heal()?;
        let deadline = self.cluster.uk.world.now_ns() + self.config.liveness_bound_ns;
        self.until(deadline, true, "serve again", |run| {
            run.cluster.uk.converged().and_then(|()| run.cluster.serving().map(|_| ()))
        })?;
        let wanted = self.clients.returned + 3 * self.config.clients;
        self.until(deadline, true, "answer new requests", |run| {
            match run.clients.returned >= wanted {
                true => Ok(()),
                false => Err(format!("{} of the {wanted} answers", run.clients.returned)),
            }
        })?;
        self.until(deadline, false, "answer every client", |run| {
            match run.clients.waiting_count() {
                0 => Ok(()),
                n => Err(format!("{n} clients wait")),
            }
        })?;
        let now = self.cluster.uk.world.now_ns();
        let finals = self.clients.final_reads(now);
        self.until(deadline, false, "answer the final reads", |run| {
            match run.clients.waiting_count() {
                0 => Ok(()),
                n => Err(format!("{n} final reads wait")),
            }
        })?;
        // The primary tells its backups what is committed once idle.
        self.run_for(1_000_000, false)?;
        self.until(deadline + 1_000_000, false, "serve after the final reads", |run| {
            run.cluster.serving().map(|_| ())
        })?;
        check::digests_equal(self.cluster).map_err(|e| ("digests", e))?;
        Ok(finals)
    }

    /// Rounds of 20 µs until `done` holds, within `deadline`.
    fn until(
        &mut self,
        deadline: u64,
        start_new: bool,
        what: &str,
        done: impl Fn(&Run) -> Result<(), String>,
    ) -> Result<(), Found> {
        loop {
            let state = done(self);
            if state.is_ok() {
                return Ok(());
            }
            self.state_kept()?;
            if self.cluster.uk.world.now_ns() >= deadline {
                let why = state.err().unwrap_or_default();
                let bound_ms = self.config.liveness_bound_ns / 1_000_000;
                return Err((
                    "liveness",
                    format!("the healed group did not {what} within {bound_ms} ms: {why}"),
                ));
            }
            self.run_for(20_000, start_new)?;
        }
    }

    /// Ends the run once the group has lost its state: nothing it does later can serve.
    fn state_kept(&self) -> Result<(), Found> {
        match self.cluster.state_lost() {
            Some(why) => Err((STATE_LOST, why)),
            None => Ok(()),
        }
    }

    /// The liveness phase's start: links heal, stopped processes run again (crashed ones stay
    /// down).
    fn heal(&mut self) -> Result<(), Found> {
        ukharon::heal(&mut self.cluster.uk).map_err(|e| ("fault", e))?;
        self.cluster.heal_data_links();
        self.cluster.sync_data_plane().map_err(|e| ("fault", e))
    }
}
