//! Who leads, and when a leader decides entries of its own (`docs/protocols/velos.md`, "What the
//! replica does around the engine", "Laps modulo 2048" and "Membership changes"): the rules a
//! replica's driver applies around the [`crate::Proposer`] when the background plane elects it,
//! when none is elected, when it goes idle, and when a configuration leaves it out.

/// Detector read periods without an elected leader after which a replica that installed a
/// snapshot stands for election without waiting to apply an entry ([`LeaderlessWait`]):
/// longer than a replica at the recovery threshold (6) takes to be found failed (five stale
/// reads), so that a leader being replaced is usually seen first. It only decides when such a
/// replica stands, never what is safe.
pub const LEADERLESS_READ_PERIODS: u64 = 8;

/// A leader with nothing to propose for this long after its last decision decides an empty
/// entry, so that followers learn the last one (they learn an entry from the next, §5.4).
pub const IDLE_NOOP_AFTER_NS: u64 = 200_000;

/// What a replica knows when it looks at the election's outcome, for [`Candidacy::next`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidacy {
    /// The background plane elected this replica.
    pub elected: bool,
    /// Its proposer leads.
    pub leading: bool,
    /// It stands for election (`eligible`).
    pub eligible: bool,
    /// Its proposer stopped by itself for the rest of the run (proposals exhausted, a local
    /// swap failed).
    pub stopped: bool,
    /// It restarted (or refreshes its words) and does not answer as an acceptor yet.
    pub recovering: bool,
    /// It is in the configuration of the next index it applies.
    pub member: bool,
    /// It takes part (not removed, nor refused by its peers).
    pub takes_part: bool,
    /// It holds the entry before its next index, or applied nothing yet: a new leader writes
    /// that entry again (§5.4).
    pub holds_last: bool,
    /// A stall waits for fresh heads ([`crate::guards::Resync`]).
    pub resyncing: bool,
    /// [`Candidacy::behind`]: a new leader would be too far behind a live peer.
    pub behind: bool,
}

/// What a replica does about the election's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionMove {
    /// Elected but behind a live peer: it stops standing for election and catches up by state
    /// transfer while another leads ("A replica elected a log behind stands down").
    StandDown,
    /// Elected and fit to lead: its proposer starts from the next index it applies.
    Lead,
    /// No longer elected: its proposer stops.
    StepDown,
    /// Nothing changes.
    Stay,
}

impl Candidacy {
    /// Whether a replica would lead too far behind a live peer: a whole log behind one (leading
    /// or not), or, not leading yet, more than an entry behind. A new leader would decide
    /// again, one by one, indices the others applied, each in its own configuration: one that
    /// changed since may have no live majority left (`scenarios.rs: t98`, seed 10655). The peer
    /// further on leads instead, and this one catches up by state transfer.
    pub fn behind(
        a_log_behind: bool,
        leading: bool,
        live_ahead_by_two: impl FnOnce() -> bool,
    ) -> bool {
        a_log_behind || (!leading && live_ahead_by_two())
    }

    /// Whether the replica may take up the leadership it was elected to.
    pub fn may_lead(&self) -> bool {
        !self.stopped
            && !self.recovering
            && self.member
            && self.takes_part
            && self.holds_last
            && !self.resyncing
            && !self.behind
    }

    /// What the replica does about the election's outcome.
    pub fn next(&self) -> ElectionMove {
        if self.elected && !self.leading && !self.recovering && self.eligible && self.behind {
            ElectionMove::StandDown
        } else if self.elected && !self.leading && self.may_lead() {
            ElectionMove::Lead
        } else if !self.elected && self.leading {
            ElectionMove::StepDown
        } else {
            ElectionMove::Stay
        }
    }
}

/// Whether a replica that does not stand for election (`eligible` false) stands again, holding
/// the entry before its next index. Not while recovering: elected, it could not lead, and
/// nobody would decide its rejoin entry. Nor while it abstains: a follower learns from the
/// leader's words, and a leader's own that abstain tell it nothing (a second replica restarting
/// would wait for ever in an idle cluster). "Restarting a replica", step 4.
pub fn stands_again(recovering: bool, abstaining: bool, eligible: bool) -> bool {
    !recovering && !abstaining && !eligible
}

/// A replica that installed a snapshot, with the entry below its index, stays out of elections
/// until it applies an entry the usual way, so that a leader already there goes on first: one
/// that removed itself publishes the new configuration only when it steps down, and a replica
/// standing meanwhile under the configuration the snapshot gave would compete with it for its
/// last entry, for good (`scenarios.rs: t98`, seed 302432). But if no leader is elected for
/// [`LEADERLESS_READ_PERIODS`], it stands: every live member may be waiting so, and none would
/// lead to decide an entry (seed 302768, `t101`). "Recycling", in "What the replica does around
/// the engine".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaderlessWait {
    /// Since when a replica waiting to stand has seen no leader elected.
    since_ns: Option<u64>,
}

impl LeaderlessWait {
    /// Whether a replica that does not stand (`eligible` false), holds the entry before its
    /// next index (`holds_last`), has not stopped for good, and sees no leader elected
    /// (`leaderless`) waits to stand.
    pub fn waiting(eligible: bool, holds_last: bool, stopped: bool, leaderless: bool) -> bool {
        !eligible && holds_last && !stopped && leaderless
    }

    /// A poll at `now_ns`, `waiting` or not: whether the replica stands for election now.
    pub fn poll(&mut self, waiting: bool, now_ns: u64, read_period_ns: u64) -> bool {
        if !waiting {
            self.since_ns = None;
            return false;
        }
        let since = *self.since_ns.get_or_insert(now_ns);
        if now_ns.saturating_sub(since) >= LEADERLESS_READ_PERIODS * read_period_ns {
            self.since_ns = None;
            return true;
        }
        false
    }

    /// Starts the wait over (a snapshot was just installed).
    pub fn reset(&mut self) {
        self.since_ns = None;
    }
}

/// Whether an idle leader (no entry of the application's or its own in the proposer) decides
/// an empty entry now: followers learn an entry only from the next one (§5.4), so without it
/// they would stay one entry behind for as long as no request comes; once
/// [`IDLE_NOOP_AFTER_NS`] passed since its last decision at `decided_at_ns`, if that was not
/// already an empty one. And back to back while a live peer abstains (`abstaining_alive`: it
/// restarted without its memory, [`crate::recovery`]; it counts in majorities again only once
/// the log has passed the indices it abstains in, and an idle cluster would never get there),
/// or while this leader leaves (it decides one entry more after its removal, from which the
/// others learn it).
pub fn noop_due(
    abstaining_alive: bool,
    leaving: bool,
    (decided_at_ns, was_noop): (u64, bool),
    now_ns: u64,
) -> bool {
    abstaining_alive
        || leaving
        || (!was_noop && now_ns.saturating_sub(decided_at_ns) >= IDLE_NOOP_AFTER_NS)
}

/// What a replica does when the configuration of its next index changes ("Membership
/// changes").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// It is still a member, or was not one, or the removal was of an earlier run of it.
    None,
    /// A leader removed: it decides one entry more, from whose word the others learn that the
    /// removal was decided, then steps down; a live peer whose head reaches `left_at` (the
    /// index after the removing entry) applied the removal itself.
    Leave {
        /// The index after the entry that removed it.
        left_at: u64,
    },
    /// A follower removed: it stops taking part at once.
    Stop,
}

/// How a replica at position `me` takes a change of configuration from `was` to `members`
/// (masks of positions), applied by the entry at `applied` (the next index to apply, before it
/// moves past the entry). A replica restarted or new applies history before its rejoin entry
/// (`earlier_run`): a removal there was of an earlier run of it.
pub fn removal(
    me: usize,
    (was, members): (u64, u64),
    leading: bool,
    earlier_run: bool,
    applied: u64,
) -> Removal {
    let was_member = was >> me & 1 != 0;
    let member = members >> me & 1 != 0;
    if !was_member || member || earlier_run {
        Removal::None
    } else if leading {
        Removal::Leave { left_at: applied + 1 }
    } else {
        Removal::Stop
    }
}

/// Whether a replica publishes a new configuration to its background plane (which elects by
/// it) at once: not a leader removed, which publishes it once it steps down; the background
/// plane would elect another before the entry that tells the others.
pub fn publishes_members_now(me: usize, members: u64, leading: bool) -> bool {
    members >> me & 1 != 0 || !leading
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit() -> Candidacy {
        Candidacy {
            elected: true,
            leading: false,
            eligible: true,
            stopped: false,
            recovering: false,
            member: true,
            takes_part: true,
            holds_last: true,
            resyncing: false,
            behind: false,
        }
    }

    /// An elected replica leads only when fit; elected but behind, it stands down; no longer
    /// elected, it steps down.
    #[test]
    fn the_election_move() {
        assert_eq!(fit().next(), ElectionMove::Lead);
        assert_eq!(Candidacy { behind: true, ..fit() }.next(), ElectionMove::StandDown);
        assert_eq!(
            Candidacy { behind: true, eligible: false, ..fit() }.next(),
            ElectionMove::Stay,
            "already stood down"
        );
        assert_eq!(
            Candidacy { behind: true, recovering: true, ..fit() }.next(),
            ElectionMove::Stay
        );
        for unfit in [
            Candidacy { stopped: true, ..fit() },
            Candidacy { recovering: true, ..fit() },
            Candidacy { member: false, ..fit() },
            Candidacy { takes_part: false, ..fit() },
            Candidacy { holds_last: false, ..fit() },
            Candidacy { resyncing: true, ..fit() },
        ] {
            assert!(!unfit.may_lead());
            assert_eq!(unfit.next(), ElectionMove::Stay, "{unfit:?}");
        }
        assert_eq!(Candidacy { leading: true, ..fit() }.next(), ElectionMove::Stay);
        assert_eq!(
            Candidacy { elected: false, leading: true, ..fit() }.next(),
            ElectionMove::StepDown
        );
        assert_eq!(Candidacy { elected: false, ..fit() }.next(), ElectionMove::Stay);
    }

    /// More than an entry behind a live peer counts only before leading; a log behind, always.
    #[test]
    fn behind_before_and_while_leading() {
        assert!(Candidacy::behind(true, true, || false));
        assert!(Candidacy::behind(false, false, || true));
        assert!(!Candidacy::behind(false, true, || unreachable!("not asked while leading")));
        assert!(!Candidacy::behind(false, false, || false));
    }

    /// Standing again waits for the end of recovery and of abstention.
    #[test]
    fn standing_again() {
        assert!(stands_again(false, false, false));
        assert!(!stands_again(true, false, false));
        assert!(!stands_again(false, true, false));
        assert!(!stands_again(false, false, true), "already standing");
    }

    /// A waiting replica stands after eight read periods without a leader, and the wait starts
    /// over whenever it stops waiting.
    #[test]
    fn standing_after_eight_leaderless_read_periods() {
        assert!(LeaderlessWait::waiting(false, true, false, true));
        assert!(!LeaderlessWait::waiting(true, true, false, true));
        assert!(!LeaderlessWait::waiting(false, false, false, true));
        assert!(!LeaderlessWait::waiting(false, true, true, true));
        assert!(!LeaderlessWait::waiting(false, true, false, false));
        let mut w = LeaderlessWait::default();
        assert!(!w.poll(true, 1_000, 100));
        assert!(!w.poll(true, 1_799, 100));
        assert!(!w.poll(false, 1_800, 100), "a leader was seen: the wait starts over");
        assert!(!w.poll(true, 2_000, 100));
        assert!(w.poll(true, 2_800, 100));
        assert!(!w.poll(true, 2_900, 100), "standing ended the wait; a new one starts");
        w.reset();
        assert!(!w.poll(true, 3_600, 100));
        assert!(w.poll(true, 4_400, 100));
    }

    /// An idle leader decides one empty entry 200 µs after a real one; back to back while a
    /// live peer abstains or it leaves.
    #[test]
    fn idle_empty_entries() {
        assert!(!noop_due(false, false, (1_000, false), 1_000 + IDLE_NOOP_AFTER_NS - 1));
        assert!(noop_due(false, false, (1_000, false), 1_000 + IDLE_NOOP_AFTER_NS));
        assert!(!noop_due(false, false, (1_000, true), u64::MAX), "after an empty one");
        assert!(noop_due(true, false, (1_000, true), 1_000));
        assert!(noop_due(false, true, (1_000, true), 1_000));
    }

    /// A member removed leaves if it leads and stops if not, but not for a removal of an
    /// earlier run; a leader removed publishes the new configuration only on stepping down.
    #[test]
    fn removals() {
        assert_eq!(removal(1, (0b111, 0b101), true, false, 40), Removal::Leave { left_at: 41 });
        assert_eq!(removal(1, (0b111, 0b101), false, false, 40), Removal::Stop);
        assert_eq!(removal(1, (0b111, 0b101), false, true, 40), Removal::None);
        assert_eq!(removal(1, (0b101, 0b100), true, false, 40), Removal::None, "not a member");
        assert_eq!(removal(1, (0b101, 0b111), false, false, 40), Removal::None, "added");
        assert!(publishes_members_now(1, 0b111, true));
        assert!(!publishes_members_now(1, 0b101, true));
        assert!(publishes_members_now(1, 0b101, false));
    }
}
