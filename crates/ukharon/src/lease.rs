//! Leases and `Active` (§6.2, Algorithm 2, Appendices B.3 and C): the lease keeper of a node's
//! core, as a state machine. The core starts a check of a view (Algorithm 6, [`crate::check`])
//! with a timestamp `t` taken BEFORE the reads, and hands the outcome back with `t`; the keeper
//! turns an empty outcome into a lease and says what to publish for lock-free readers.
//!
//! The rule, with `ρ = drift_ppm / 10⁶` the bound on how far any clock's rate is from the true
//! rate, `ε = cross_core_ns` the skew between two cores' clocks of one node (Appendix C), and
//! `drift(d) = ⌈d·ρ⌉`:
//!
//! * **Extension** (line 11): a check of view `V` with timestamp `t` that found index
//!   `V.epoch + 1` empty sets the lease's end to `t + L − drift(L) − 2ε`, `L` the lease length
//!   (the view's `lease_ns`). The end never moves back.
//! * **First lease** (line 7) on a view `W`: the lease starts at `t + w + drift(w) + ε`, `w` the
//!   wait ([`View::wait_ns`]: the longest lease of older views that may still be held), and
//!   ends as an extension would. Algorithm 2 starts with an empty lease (`tend = tstart`); ours
//!   ends at `t + L − …` at once, since the end's bound does not depend on the start.
//! * **Compatible successor** (§6.3): a node that holds a lease on `V` and checks `W`, the next
//!   view and a compatible successor of `V` (same membership, only the lease length differs;
//!   checked with [`View::is_compatible_successor`] and [`View::follows`] against the view it
//!   holds), moves to `W` without waiting: its lease on `W` keeps the start of its lease on `V`,
//!   which already waited for everything before `V`'s run. A node that holds no lease on the
//!   predecessor waits `W.wait_ns`, which a view of a compatible run carries from the run's
//!   first view ([`View::successor`]).
//! * **`Active(V)` at `now`**: `V` is the view leased, and `start ≤ now < end`. A reading that is
//!   older than a reading the keeper already saw is refused (false, or an error), never a true.
//! * **Without a valid lease** (line 12, and δ = 0): a check that started at `t` and found the
//!   index empty makes `Active(V)` true at `t` when `start ≤ t` ([`CheckOutcome::active_at_t`]).
//!
//! Why no two incompatible views are active at overlapping times (Appendix B.3 with drift):
//! every lease on a view `V` comes from a check whose reads began after `t` and found a majority
//! of empty slot words for `V.epoch + 1`; so the successor of `V` was not decided at `t` (a
//! decided value is accepted by a majority, which meets the readers' majority). The lease ends
//! `L − drift(L) − 2ε` later on the node's clock, at most `L` later in true time (a clock runs at
//! least `1 − ρ` as fast) even seen from another core. A first lease on a later, incompatible
//! `W` is taken from a check with timestamp `t'` after `W` was decided (the node knows `W`), and
//! starts `w + drift(w) + ε` later, at least `w` later in true time (a clock runs at most
//! `1 + ρ` as fast). With `w` covering every lease of a view before `W` that may still be held,
//! every such lease ended before any lease on `W` starts. Leases moved to compatible successors
//! keep their start, so the bound carries to the whole run.
//!
//! What this assumes of the views: `W.wait_ns` covers every lease of an older view that may
//! still be held when `W` is decided. [`View::successor`] sets it to the longest lease of every
//! earlier run (the module docs of [`crate::view`] say why the previous run alone is not
//! enough; the randomized test `waits_of_the_previous_run_only_are_caught` shows the overlap).

use crate::view::View;
use thiserror::Error;

/// Parts per million.
pub const PPM: u64 = 1_000_000;

/// Broken variants of the engine, chosen at run time, that the randomized test must catch.
/// `None` everywhere outside tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LeaseMutation {
    #[default]
    None,
    /// A first lease starts at `t`: no wait for older leases (Algorithm 2 with `t` for `t + δ`).
    StartAtT,
    /// The timestamp is taken after the reads (at the outcome) instead of before them.
    TimestampAfterReads,
    /// Neither the wait nor the lease accounts for clock drift.
    NoDriftMargin,
    /// The next view is moved to without waiting even when it is not a compatible successor.
    CompatibleShortcutOnIncompatible,
    /// An application's first lease through a cache starts δ after it sent its request rather
    /// than δ after the cache's answer arrived ([`crate::cache`]).
    FirstLeaseFromRequest,
}

/// The lease engine's parameters; the same on every node of a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Bound on any clock's rate error, in parts per million. The paper waits 1.01·δ (10 000
    /// ppm) for a measured drift of 0.001 % (10 ppm).
    pub drift_ppm: u64,
    /// The skew between two cores' clocks of one node (the paper's ε, 64 ns).
    pub cross_core_ns: u64,
    /// A lease is renewed in the background once it ends within this margin.
    pub renew_margin_ns: u64,
    /// The longest lease or wait a view may carry: views with longer ones are refused (a
    /// corrupted or misconfigured view would otherwise keep `Active` false for that long).
    pub lease_max_ns: u64,
    pub mutation: LeaseMutation,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            drift_ppm: 10_000,
            cross_core_ns: 64,
            renew_margin_ns: 5_000,
            lease_max_ns: 1_000_000,
            mutation: LeaseMutation::None,
        }
    }
}

/// A parameter out of range, by its key.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("lease config `{key}`: {why}")]
pub struct ConfigError {
    pub key: &'static str,
    pub why: String,
}

impl LeaseConfig {
    /// Checks every parameter; the error names the first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key, why: String| Err(ConfigError { key, why });
        if self.drift_ppm >= PPM / 2 {
            return bad("drift_ppm", format!("{} ppm, must be below {}", self.drift_ppm, PPM / 2));
        }
        if self.cross_core_ns > 1_000_000 {
            return bad("cross_core_ns", format!("{} ns, at most 1 ms", self.cross_core_ns));
        }
        if self.lease_max_ns == 0 || self.lease_max_ns > 60_000_000_000 {
            return bad("lease_max_ns", format!("{} ns, from 1 ns to 60 s", self.lease_max_ns));
        }
        if self.renew_margin_ns > self.lease_max_ns {
            return bad(
                "renew_margin_ns",
                format!("{} ns, above lease_max_ns {}", self.renew_margin_ns, self.lease_max_ns),
            );
        }
        Ok(())
    }

    /// The drift margin of a duration: `⌈duration·ρ⌉` (0 under `NoDriftMargin`).
    pub fn drift_ns(&self, duration_ns: u64) -> u64 {
        if self.mutation == LeaseMutation::NoDriftMargin {
            return 0;
        }
        let scaled = u128::from(duration_ns) * u128::from(self.drift_ppm);
        scaled.div_ceil(u128::from(PPM)) as u64
    }

    /// How long, on the node's clock, a first lease waits to be sure `wait_ns` of true time
    /// passed, seen from any core.
    pub fn wait_local_ns(&self, wait_ns: u64) -> u64 {
        wait_ns.saturating_add(self.drift_ns(wait_ns)).saturating_add(self.cross_core_ns)
    }

    /// How long, on the node's clock, a lease of `lease_ns` lasts so that it ends within
    /// `lease_ns` of true time, seen from any core (Appendix C: shortened by the drift and 2ε).
    pub fn lease_local_ns(&self, lease_ns: u64) -> u64 {
        let margin = self.drift_ns(lease_ns).saturating_add(2 * self.cross_core_ns);
        lease_ns.saturating_sub(margin)
    }
}

/// Where lease lengths and waits come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durations {
    /// Each view's own lease and wait (a node that checks with the coordinators).
    FromViews,
    /// Every lease lasts `lease_ns` whatever the view, and a first lease that is not moved from
    /// a compatible predecessor waits `lease_ns` (a lease cache's ∆, or an application's δ
    /// through caches: the same on every cache or application).
    Fixed { lease_ns: u64 },
}

/// Bad input to the keeper.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LeaseError {
    #[error("clock reading {now_ns} ns is older than {seen_ns} ns already seen")]
    ClockBackwards { now_ns: u64, seen_ns: u64 },
    #[error("view {epoch} is older than the leased view {held}")]
    StaleView { epoch: u64, held: u64 },
    #[error("view {epoch}: lease {lease_ns} ns or wait {wait_ns} ns above lease_max_ns {max_ns}")]
    LeaseTooLong { epoch: u64, lease_ns: u64, wait_ns: u64, max_ns: u64 },
    #[error("outcome for view {outcome} handed back for view {view}")]
    TicketMismatch { outcome: u64, view: u64 },
    #[error("view {epoch} differs from the view of the same epoch leased")]
    ConflictingView { epoch: u64 },
}

/// What lock-free readers need: `Active(view of epoch)` is true at a reading `now` of a clock of
/// this node when `start_ns ≤ now < end_ns` (an empty window when `end_ns ≤ start_ns`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    pub epoch: u64,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Published {
    pub fn active_at(&self, epoch: u64, now_ns: u64) -> bool {
        self.epoch == epoch && self.start_ns <= now_ns && now_ns < self.end_ns
    }
}

/// One reader (one application thread) of the published lease: refuses readings of its clock
/// that go backwards.
#[derive(Clone, Copy, Debug, Default)]
pub struct ActiveReader {
    seen_ns: u64,
}

impl ActiveReader {
    pub fn active(&mut self, published: Option<&Published>, epoch: u64, now_ns: u64) -> bool {
        if now_ns < self.seen_ns {
            return false;
        }
        self.seen_ns = now_ns;
        published.is_some_and(|p| p.active_at(epoch, now_ns))
    }
}

/// A started check: the view's epoch and the timestamp taken before its reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    pub epoch: u64,
    pub t_ns: u64,
}

/// What a finished check did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckOutcome {
    /// The check's timestamp, handed back.
    pub t_ns: u64,
    /// Algorithm 2 line 12: `Active(view)` is true at `t` (what a caller that waited for this
    /// check returns). Always false unless the check found the index empty.
    pub active_at_t: bool,
    /// The lease to publish, when it changed.
    pub publish: Option<Published>,
}

#[derive(Clone, Debug)]
struct Held {
    view: View,
    start_ns: u64,
    end_ns: u64,
}

/// Leases on views (Algorithm 2) for one node's core; see the module docs.
#[derive(Clone, Debug)]
pub struct LeaseKeeper {
    config: LeaseConfig,
    durations: Durations,
    held: Option<Held>,
    seen_ns: u64,
}

impl LeaseKeeper {
    pub fn new(config: LeaseConfig, durations: Durations) -> Result<LeaseKeeper, ConfigError> {
        config.validate()?;
        if let Durations::Fixed { lease_ns } = durations {
            if lease_ns > config.lease_max_ns {
                let why = format!("{lease_ns} ns, above lease_max_ns {}", config.lease_max_ns);
                return Err(ConfigError { key: "lease_ns", why });
            }
        }
        Ok(LeaseKeeper { config, durations, held: None, seen_ns: 0 })
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// The view leased (valid or not), if any.
    pub fn view(&self) -> Option<&View> {
        self.held.as_ref().map(|h| &h.view)
    }

    /// What readers should see now.
    pub fn published(&self) -> Option<Published> {
        self.held.as_ref().map(|h| Published {
            epoch: h.view.epoch,
            start_ns: h.start_ns,
            end_ns: h.end_ns,
        })
    }

    /// Records a reading of the clock; refuses one older than a reading already seen.
    pub(crate) fn observe(&mut self, now_ns: u64) -> Result<(), LeaseError> {
        if now_ns < self.seen_ns {
            return Err(LeaseError::ClockBackwards { now_ns, seen_ns: self.seen_ns });
        }
        self.seen_ns = now_ns;
        Ok(())
    }

    /// `Active(view of epoch)` at `now_ns`, from the lease alone (Algorithm 2 line 9). A reading
    /// older than one already seen is false.
    pub fn active_at(&mut self, epoch: u64, now_ns: u64) -> bool {
        self.observe(now_ns).is_ok() && self.published().is_some_and(|p| p.active_at(epoch, now_ns))
    }

    /// Whether the core should check `epoch` (the latest view it knows) now: no lease on it, or
    /// the lease ends within the renewal margin. Always true with δ = 0.
    pub fn wants_check(&self, epoch: u64, now_ns: u64) -> bool {
        match &self.held {
            Some(h) if h.view.epoch == epoch => {
                now_ns.saturating_add(self.config.renew_margin_ns) >= h.end_ns
            }
            _ => true,
        }
    }

    /// Starts a check of `view`; `t_ns` is read before any of its reads is posted.
    pub fn start_check(&mut self, view: &View, t_ns: u64) -> Result<Ticket, LeaseError> {
        self.admit(view)?;
        self.observe(t_ns)?;
        Ok(Ticket { epoch: view.epoch, t_ns })
    }

    /// Refuses views this keeper must not lease: older than the held one, or too long.
    fn admit(&self, view: &View) -> Result<(), LeaseError> {
        if let Some(h) = &self.held {
            if view.epoch < h.view.epoch {
                return Err(LeaseError::StaleView { epoch: view.epoch, held: h.view.epoch });
            }
            if view.epoch == h.view.epoch && *view != h.view {
                return Err(LeaseError::ConflictingView { epoch: view.epoch });
            }
        }
        let max_ns = self.config.lease_max_ns;
        if self.durations == Durations::FromViews
            && (view.lease_ns > max_ns || view.wait_ns > max_ns)
        {
            let (lease_ns, wait_ns) = (view.lease_ns, view.wait_ns);
            return Err(LeaseError::LeaseTooLong { epoch: view.epoch, lease_ns, wait_ns, max_ns });
        }
        Ok(())
    }

    /// The check of `ticket` on `view` found index `view.epoch + 1` empty at a majority, at
    /// `now_ns`: take or extend the lease. Other outcomes change nothing (a lease already held
    /// stays valid until its end).
    pub fn on_empty(
        &mut self,
        view: &View,
        ticket: Ticket,
        now_ns: u64,
    ) -> Result<CheckOutcome, LeaseError> {
        if ticket.epoch != view.epoch {
            return Err(LeaseError::TicketMismatch { outcome: ticket.epoch, view: view.epoch });
        }
        let t_ns = if self.config.mutation == LeaseMutation::TimestampAfterReads {
            now_ns
        } else {
            ticket.t_ns
        };
        self.grant(view, t_ns, t_ns, now_ns)
    }

    /// Takes or extends the lease on `view` from a positive answer: its end counts from `t_ns`
    /// (before the answer was asked for), a first lease's start from `start_from_ns` (no earlier
    /// than when the view was known to be decided and the latest).
    pub(crate) fn grant(
        &mut self,
        view: &View,
        t_ns: u64,
        start_from_ns: u64,
        now_ns: u64,
    ) -> Result<CheckOutcome, LeaseError> {
        self.observe(now_ns)?;
        let stale = self.held.as_ref().is_some_and(|h| view.epoch < h.view.epoch);
        if stale {
            // A late outcome of a check started before the lease moved on.
            return Ok(CheckOutcome { t_ns, active_at_t: false, publish: None });
        }
        self.admit(view)?;
        let before = self.published();
        let end_ns = t_ns.saturating_add(self.config.lease_local_ns(self.lease_ns(view)));
        let held = match self.held.take() {
            Some(mut h) if h.view.epoch == view.epoch => {
                h.end_ns = h.end_ns.max(end_ns);
                h
            }
            Some(h) if self.inherits(&h.view, view) => {
                Held { view: view.clone(), start_ns: h.start_ns, end_ns }
            }
            _ => {
                let wait_ns = self.wait_ns(view);
                let start_ns = if self.config.mutation == LeaseMutation::StartAtT {
                    start_from_ns
                } else {
                    start_from_ns.saturating_add(self.config.wait_local_ns(wait_ns))
                };
                Held { view: view.clone(), start_ns, end_ns }
            }
        };
        let active_at_t = held.start_ns <= t_ns;
        self.held = Some(held);
        let after = self.published();
        Ok(CheckOutcome {
            t_ns,
            active_at_t,
            publish: (after != before).then_some(after).flatten(),
        })
    }

    fn lease_ns(&self, view: &View) -> u64 {
        match self.durations {
            Durations::FromViews => view.lease_ns,
            Durations::Fixed { lease_ns } => lease_ns,
        }
    }

    /// The wait of a first lease on `view` that is not moved from its predecessor: the view's
    /// own (a cache's or an application's through caches: its fixed lease, every run alike).
    fn wait_ns(&self, view: &View) -> u64 {
        match self.durations {
            Durations::FromViews => view.wait_ns,
            Durations::Fixed { .. } if view.epoch == 0 => 0,
            Durations::Fixed { lease_ns } => lease_ns,
        }
    }

    /// Whether a lease on `held` moves to `next` keeping its start (§6.3).
    fn inherits(&self, held: &View, next: &View) -> bool {
        if next.epoch != held.epoch.wrapping_add(1) || next.cluster != held.cluster {
            return false;
        }
        self.config.mutation == LeaseMutation::CompatibleShortcutOnIncompatible
            || (next.is_compatible_successor(held) && next.follows(held))
    }

    /// Drops the lease (the node leaves): nothing is active any more.
    pub fn release(&mut self) {
        self.held = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::Member;

    const US: u64 = 1_000;

    fn members(n: u16) -> Vec<Member> {
        (0..n).map(|i| Member { node: i, uid: u64::from(i) + 1 }).collect()
    }

    fn keeper(config: LeaseConfig) -> LeaseKeeper {
        LeaseKeeper::new(config, Durations::FromViews).unwrap()
    }

    fn checked(k: &mut LeaseKeeper, view: &View, t_ns: u64, now_ns: u64) -> CheckOutcome {
        let ticket = k.start_check(view, t_ns).unwrap();
        k.on_empty(view, ticket, now_ns).unwrap()
    }

    /// Appendix C: a lease of δ from `t` ends at `t + δ − drift − 2ε`; a first lease on a view
    /// that waits `w` starts at `t + w + drift + ε` (the paper's 1.01·δ with 10 000 ppm).
    #[test]
    fn margins_follow_appendix_c() {
        let c = LeaseConfig::default();
        assert_eq!(c.drift_ns(20 * US), 200);
        assert_eq!(c.drift_ns(1), 1, "rounded up");
        assert_eq!(c.lease_local_ns(20 * US), 20 * US - 200 - 128);
        assert_eq!(c.wait_local_ns(20 * US), 20 * US + 200 + 64);
        assert_eq!(c.lease_local_ns(100), 0, "a lease shorter than its margins is empty");
        let v0 = View::initial(1, members(3), Some(0), 20 * US);
        let v1 = v0.successor(members(2), Some(0), 20 * US);
        let mut k = keeper(c);
        let out = checked(&mut k, &v1, 1_000 * US, 1_003 * US);
        let expect = Published { epoch: 1, start_ns: 1_020_264, end_ns: 1_019_672 };
        assert_eq!(out.publish, Some(expect));
        assert!(!out.active_at_t && !expect.active_at(1, 1_020_263));
        let out = checked(&mut k, &v1, 1_010 * US, 1_012 * US);
        assert_eq!(out.publish.unwrap().end_ns, 1_029_672, "extension from the new t");
        assert!(k.active_at(1, 1_020_264) && k.active_at(1, 1_029_671));
        assert!(!k.active_at(1, 1_029_672), "expired");
        assert!(!k.active_at(0, 1_029_680), "another view");
    }

    /// Algorithm 2 line 4: the timestamp is the one taken before the reads, handed back with
    /// the outcome; the outcome's arrival time does not move the lease.
    #[test]
    fn the_lease_counts_from_the_timestamp_before_the_reads() {
        let v0 = View::initial(1, members(3), Some(0), 20 * US);
        let mut k = keeper(LeaseConfig::default());
        let out = checked(&mut k, &v0, 100 * US, 150 * US);
        assert_eq!(out.t_ns, 100 * US);
        let p = out.publish.unwrap();
        assert_eq!((p.start_ns, p.end_ns), (100 * US + 64, 120 * US - 328));
        assert!(!k.active_at(0, 150 * US), "reads slower than the lease give no lease");
        let mut late = keeper(LeaseConfig {
            mutation: LeaseMutation::TimestampAfterReads,
            ..Default::default()
        });
        let p = checked(&mut late, &v0, 100 * US, 150 * US).publish.unwrap();
        assert_eq!(p.end_ns, 170 * US - 328, "the mutation counts from the outcome");
    }

    /// Algorithm 2 line 12, "Active must be correct with δ = 0": without any lease duration
    /// every call needs a fresh check, and a check is true at its own timestamp once the
    /// first lease has started.
    #[test]
    fn zero_leases_answer_through_fresh_checks() {
        let v0 = View::initial(1, members(3), Some(0), 0);
        let v1 = v0.successor(members(2), Some(0), 0);
        let v2 = v1.successor(members(1), Some(0), 0);
        assert_eq!(v2.wait_ns, 0, "zero leases before it");
        let mut k = keeper(LeaseConfig::default());
        checked(&mut k, &v1, 0, US);
        assert!(!checked(&mut k, &v2, 10 * US, 11 * US).active_at_t, "first check: waits ε");
        assert!(!k.active_at(2, 12 * US), "no lease is ever valid");
        assert!(k.wants_check(2, 12 * US));
        assert!(checked(&mut k, &v2, 12 * US, 13 * US).active_at_t);
        let long = View::initial(1, members(3), Some(0), 20 * US);
        let v1 = long.successor(members(2), Some(0), 0);
        let v2 = v1.successor(members(1), Some(0), 0);
        assert_eq!((v1.wait_ns, v2.wait_ns), (20 * US, 20 * US), "the 20 µs lease of view 0");
        let mut k = keeper(LeaseConfig::default());
        assert!(!checked(&mut k, &v2, 10 * US, 11 * US).active_at_t);
        assert!(!checked(&mut k, &v2, 20 * US, 21 * US).active_at_t, "v2 waits v0's 20 µs");
        assert!(checked(&mut k, &v2, 31 * US, 32 * US).active_at_t);
    }

    /// §6.3 adaptive leases: a compatible successor of the leased view is moved to without
    /// waiting; an incompatible one, or a compatible one whose predecessor is not leased here,
    /// waits.
    #[test]
    fn compatible_successors_keep_the_start() {
        let v0 = View::initial(1, members(3), Some(0), 20 * US);
        let v1 = v0.successor(members(3), Some(0), 50 * US);
        let v2 = v1.successor(members(2), Some(0), 20 * US);
        let mut k = keeper(LeaseConfig::default());
        let start = checked(&mut k, &v0, 0, US).publish.unwrap().start_ns;
        let p = checked(&mut k, &v1, 30 * US, 31 * US).publish.unwrap();
        assert_eq!((p.epoch, p.start_ns), (1, start), "moved without waiting");
        assert!(checked(&mut k, &v1, 35 * US, 36 * US).active_at_t);
        let p = checked(&mut k, &v2, 40 * US, 41 * US).publish.unwrap();
        assert_eq!(p.start_ns, 40 * US + 50 * US + 500 + 64, "waits the run's longest lease");
        let mut fresh = keeper(LeaseConfig::default());
        let p = checked(&mut fresh, &v1, 40 * US, 41 * US).publish.unwrap();
        assert_eq!(p.start_ns, 40 * US + 64, "no run before v1's: nothing to wait for");
        let v3 = v2.successor(v2.members.clone(), Some(0), 10 * US);
        assert!(v3.is_compatible_successor(&v2));
        let mut fresh = keeper(LeaseConfig::default());
        let p = checked(&mut fresh, &v3, 40 * US, 41 * US).publish.unwrap();
        assert_eq!(p.start_ns, 40 * US + 50 * US + 500 + 64, "v3 carries its run's wait");
        let mut shortcut = keeper(LeaseConfig {
            mutation: LeaseMutation::CompatibleShortcutOnIncompatible,
            ..Default::default()
        });
        checked(&mut shortcut, &v0, 0, US);
        checked(&mut shortcut, &v1, 10 * US, 11 * US);
        let p = checked(&mut shortcut, &v2, 40 * US, 41 * US).publish.unwrap();
        assert!(p.start_ns < 40 * US, "the mutation moves to an incompatible view at once");
    }

    /// A view with forged waiting fields (the members of a compatible successor, a run lease
    /// that does not follow) is no shortcut: `View::follows` is checked against the leased view.
    #[test]
    fn a_view_that_does_not_follow_is_no_shortcut() {
        let v0 = View::initial(1, members(3), Some(0), 20 * US);
        let mut forged = v0.successor(members(3), Some(0), 10 * US);
        forged.run_lease_ns = 10 * US;
        assert!(forged.is_compatible_successor(&v0) && !forged.follows(&v0));
        let mut k = keeper(LeaseConfig::default());
        checked(&mut k, &v0, 0, US);
        let p = checked(&mut k, &forged, 30 * US, 31 * US).publish.unwrap();
        assert!(p.start_ns > 30 * US, "not followed: waits");
    }

    /// "Clock readings that go backwards: a clear error or refusal, never a wrong Active."
    #[test]
    fn clocks_going_backwards_are_refused() {
        let v0 = View::initial(1, members(3), Some(0), 20 * US);
        let mut k = keeper(LeaseConfig::default());
        checked(&mut k, &v0, 10 * US, 11 * US);
        assert!(k.active_at(0, 12 * US));
        assert!(!k.active_at(0, 11 * US), "a reading before one already seen");
        let err = k.start_check(&v0, 5 * US).unwrap_err();
        assert_eq!(err, LeaseError::ClockBackwards { now_ns: 5 * US, seen_ns: 12 * US });
        let ticket = k.start_check(&v0, 13 * US).unwrap();
        assert!(matches!(k.on_empty(&v0, ticket, 12 * US), Err(LeaseError::ClockBackwards { .. })));
        let mut reader = ActiveReader::default();
        let p = k.published();
        assert!(reader.active(p.as_ref(), 0, 14 * US));
        assert!(!reader.active(p.as_ref(), 0, 13 * US));
    }

    /// Appendix B.1 monotonicity on one node: once a newer view is leased, older ones are
    /// refused, and late outcomes of their checks change nothing.
    #[test]
    fn older_views_never_come_back() {
        let v0 = View::initial(1, members(3), Some(0), 20 * US);
        let v1 = v0.successor(members(2), Some(0), 20 * US);
        let mut k = keeper(LeaseConfig::default());
        let old = k.start_check(&v0, US).unwrap();
        checked(&mut k, &v1, 2 * US, 3 * US);
        let out = k.on_empty(&v0, old, 4 * US).unwrap();
        assert_eq!((out.active_at_t, out.publish), (false, None));
        assert_eq!(k.published().unwrap().epoch, 1);
        assert_eq!(
            k.start_check(&v0, 5 * US).unwrap_err(),
            LeaseError::StaleView { epoch: 0, held: 1 }
        );
        let mut other = v1.clone();
        other.primary = Some(1);
        assert_eq!(
            k.start_check(&other, 6 * US).unwrap_err(),
            LeaseError::ConflictingView { epoch: 1 }
        );
    }

    /// Background renewal (§6.2, "uKharon Core renews leases in the background").
    #[test]
    fn renewal_is_wanted_within_the_margin() {
        let v0 = View::initial(1, members(3), Some(0), 20 * US);
        let mut k = keeper(LeaseConfig::default());
        assert!(k.wants_check(0, 0));
        let end = checked(&mut k, &v0, 0, US).publish.unwrap().end_ns;
        assert!(!k.wants_check(0, end - 5_001));
        assert!(k.wants_check(0, end - 5_000));
        assert!(k.wants_check(1, US), "a newer view is always checked");
    }

    #[test]
    fn bad_config_names_the_key() {
        let key = |c: LeaseConfig| c.validate().unwrap_err().key;
        assert_eq!(key(LeaseConfig { drift_ppm: PPM, ..Default::default() }), "drift_ppm");
        assert_eq!(
            key(LeaseConfig { cross_core_ns: u64::MAX, ..Default::default() }),
            "cross_core_ns"
        );
        assert_eq!(key(LeaseConfig { lease_max_ns: 0, ..Default::default() }), "lease_max_ns");
        let c = LeaseConfig { renew_margin_ns: 2_000_000, ..Default::default() };
        assert!(c.validate().unwrap_err().to_string().contains("renew_margin_ns"));
        let err = LeaseKeeper::new(LeaseConfig::default(), Durations::Fixed { lease_ns: u64::MAX });
        assert_eq!(err.unwrap_err().key, "lease_ns");
        let long = View::initial(1, members(3), Some(0), 2_000_000);
        let mut k = keeper(LeaseConfig::default());
        assert!(matches!(k.start_check(&long, 0), Err(LeaseError::LeaseTooLong { .. })));
    }
}
