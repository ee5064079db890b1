//! The phases of a run (see the module docs of [`crate::ukharon_kv`] and
//! [`crate::lease_reads`]): everyone joins; a safety phase of fault steps while clients use the
//! store; then the group heals and must serve again, answer new requests, every client and a
//! final read of every key within the liveness bound; then it settles ([`KvGroup::settle`]).

use super::clients::KvClients;
use super::{Found, KvGroup, Setup};
use crate::ukharon::Choices;

/// Rounds of virtual time.
pub const ROUND_NS: u64 = 500;

/// A run under way: the group, its clients and the run's choices.
pub struct Run<'a, G> {
    pub setup: &'a Setup,
    pub group: &'a mut G,
    pub clients: &'a mut KvClients,
    pub choices: Choices,
}

impl<G: KvGroup> Run<'_, G> {
    /// One round: the membership polls, clients send, the members serve, clients take what
    /// they were told, then time passes.
    fn round(&mut self, start_new: bool, stall_reads: bool) -> Result<(), Found> {
        let now = self.group.uk().world.now_ns();
        self.group.uk_mut().poll_all().map_err(|e| ("ukharon", e))?;
        self.clients.send(self.group, start_new);
        let events = self.group.serve(&mut self.choices, stall_reads);
        let events = events.map_err(|e| ("stale-answer", e))?;
        self.clients.take(events, now).map_err(|e| ("refused", e))?;
        self.group.uk().world.run_until(now + ROUND_NS);
        Ok(())
    }

    /// Rounds for `ns`, then the uKharon sim's check of active spans. Local reads may stall
    /// their process only in the safety phase, with the pause fault.
    pub fn run_for(&mut self, ns: u64, start_new: bool, safety: bool) -> Result<(), Found> {
        let end = self.group.uk().world.now_ns() + ns;
        let stall_reads = safety && self.setup.faults.pause;
        while self.group.uk().world.now_ns() < end {
            self.round(start_new, stall_reads)?;
        }
        let uk = self.group.uk();
        uk.spans.check(&uk.log.views).map_err(|e| ("active", e))?;
        uk.cache_spans.check(&uk.log.views).map_err(|e| ("active", format!("caches: {e}")))
    }

    /// The whole run, counting the faults injected; the places of the final reads in the
    /// history.
    pub fn phases(&mut self, faults_injected: &mut u32) -> Result<Vec<usize>, Found> {
        // Everyone joins, and clients start, before the faults.
        self.run_for(3_000_000, true, false)?;
        for _ in 0..self.setup.steps {
            let injected = self.group.inject(self.setup.faults, &mut self.choices);
            if injected.map_err(|e| ("fault", e))?.is_some() {
                *faults_injected += 1;
            }
            let ns = 50_000 + self.choices.below(250_000);
            self.run_for(ns, true, true)?;
            self.not_ended()?;
        }
        self.group.heal().map_err(|e| ("fault", e))?;
        let deadline = self.group.uk().world.now_ns() + self.setup.liveness_bound_ns;
        self.until(deadline, true, "serve again", |run| {
            run.group.uk().converged().and_then(|()| run.group.serving().map(|_| ()))
        })?;
        let wanted = self.clients.returned + 3 * self.setup.clients;
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
        let now = self.group.uk().world.now_ns();
        let finals = self.clients.final_reads(now);
        self.until(deadline, false, "answer the final reads", |run| {
            match run.clients.waiting_count() {
                0 => Ok(()),
                n => Err(format!("{n} final reads wait")),
            }
        })?;
        G::settle(self, deadline)?;
        Ok(finals)
    }

    /// Rounds of 20 µs until `done` holds, within `deadline`.
    pub fn until(
        &mut self,
        deadline: u64,
        start_new: bool,
        what: &str,
        done: impl Fn(&Run<G>) -> Result<(), String>,
    ) -> Result<(), Found> {
        loop {
            let state = done(self);
            if state.is_ok() {
                return Ok(());
            }
            self.not_ended()?;
            if self.group.uk().world.now_ns() >= deadline {
                let why = state.err().unwrap_or_default();
                if let Some(found) = self.group.stuck(what, &why) {
                    return Err(found);
                }
                let bound_ms = self.setup.liveness_bound_ns / 1_000_000;
                return Err((
                    "liveness",
                    format!("the healed group did not {what} within {bound_ms} ms: {why}"),
                ));
            }
            self.run_for(20_000, start_new, false)?;
        }
    }

    /// Stops the run where the group says it ends ([`KvGroup::ended`]).
    fn not_ended(&self) -> Result<(), Found> {
        match self.group.ended() {
            Some(found) => Err(found),
            None => Ok(()),
        }
    }
}
