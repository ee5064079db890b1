//! The phases of a leased-reads run (see the module docs of [`super`]).

use super::check;
use super::clients::LeaseClients;
use super::cluster::LeaseCluster;
use super::{faults, LeaseReport, LeaseRunConfig, ROUND_NS};
use crate::ukharon::{self, Choices};

pub(super) struct Run<'a> {
    pub config: &'a LeaseRunConfig,
    pub cluster: &'a mut LeaseCluster,
    pub clients: &'a mut LeaseClients,
    pub choices: Choices,
}

type Found = (&'static str, String);

impl Run<'_> {
    /// One round: the membership polls, clients send, the members serve, clients take what
    /// they were told, then time passes.
    fn round(&mut self, start_new: bool, stall_reads: bool) -> Result<(), Found> {
        let now = self.cluster.uk.world.now_ns();
        self.cluster.uk.poll_all().map_err(|e| ("ukharon", e))?;
        self.clients.send(self.cluster, start_new);
        let events = self.cluster.serve(&mut self.choices, stall_reads);
        let events = events.map_err(|e| ("stale-answer", e))?;
        self.clients.take(events, now).map_err(|e| ("refused", e))?;
        self.cluster.uk.world.run_until(now + ROUND_NS);
        Ok(())
    }

    /// Rounds for `ns`, then the uKharon sim's check of active spans. Local reads stall their
    /// process only in the safety phase, with the pause fault.
    fn run_for(&mut self, ns: u64, start_new: bool, safety: bool) -> Result<(), Found> {
        let end = self.cluster.uk.world.now_ns() + ns;
        let stall_reads = safety && self.config.faults.pause;
        while self.cluster.uk.world.now_ns() < end {
            self.round(start_new, stall_reads)?;
        }
        let uk = &self.cluster.uk;
        uk.spans.check(&uk.log.views).map_err(|e| ("active", e))?;
        uk.cache_spans.check(&uk.log.views).map_err(|e| ("active", format!("caches: {e}")))
    }

    /// The whole run; the places of the final reads in the history.
    pub fn phases(&mut self, report: &mut LeaseReport) -> Result<Vec<usize>, Found> {
        self.run_for(3_000_000, true, false)?;
        for _ in 0..self.config.steps {
            let injected = faults::inject(self.cluster, self.config.faults, &mut self.choices)
                .map_err(|e| ("fault", e))?;
            if injected.is_some() {
                report.faults_injected += 1;
            }
            let ns = 50_000 + self.choices.below(250_000);
            self.run_for(ns, true, true)?;
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
        self.settle(deadline + 2_000_000)?;
        Ok(finals)
    }

    /// The end: the primary proposes a marker, so that followers learn that everything before
    /// it is decided and apply it, until every live replica holds the same store.
    fn settle(&mut self, deadline: u64) -> Result<(), Found> {
        check::agreement(self.cluster).map_err(|e| ("agreement", e))?;
        loop {
            if let Ok(primary) = self.cluster.serving() {
                let member = self.cluster.members.get_mut(&primary).expect("a member");
                member.server.propose_marker();
            }
            self.run_for(200_000, false, false)?;
            check::agreement(self.cluster).map_err(|e| ("agreement", e))?;
            let equal = check::digests_equal(self.cluster);
            match equal {
                Ok(()) => return Ok(()),
                Err(e) if self.cluster.uk.world.now_ns() >= deadline => return Err(("digests", e)),
                Err(_) => {}
            }
        }
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
            if self.cluster.uk.world.now_ns() >= deadline {
                let why = state.err().unwrap_or_default();
                if let Some(p) = self.cluster.primary_standing_aside() {
                    return Err((
                        super::STANDS_ASIDE,
                        format!(
                            "the healed group did not {what}: the latest view appoints member \
                             {p}, whose replica stands aside (not eligible: it waits for entries \
                             it lacks from another leader, and under appointed leaders no other \
                             replica may lead); member {p}: {}; {why}",
                            self.cluster.describe_member(p)
                        ),
                    ));
                }
                let bound_ms = self.config.liveness_bound_ns / 1_000_000;
                return Err((
                    "liveness",
                    format!("the healed group did not {what} within {bound_ms} ms: {why}"),
                ));
            }
            self.run_for(20_000, start_new, false)?;
        }
    }

    /// The liveness phase's start: links heal, stopped processes run again (crashed ones stay
    /// down).
    fn heal(&mut self) -> Result<(), Found> {
        self.cluster.stalls.clear();
        faults::heal_transient(self.cluster);
        ukharon::heal(&mut self.cluster.uk).map_err(|e| ("fault", e))?;
        self.cluster.heal_replica_links();
        self.cluster.sync_replicas().map_err(|e| ("fault", e))
    }
}
