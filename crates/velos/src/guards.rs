//! The lap guards (`docs/protocols/velos.md`, "Laps modulo 2048", not in the paper): a slot word
//! names its lap modulo 2048, and two replicas can be further apart than that. A leader that
//! stalled resyncs before it goes on ([`Resync`], [`stall_ns`], [`resync_complete`]); a replica
//! whose words fell far behind takes new ones ([`refresh_due`]). The heads they compare are in
//! [`crate::heads`].

use crate::heads::Heads;

/// A replica that finds a live peer this many laps ahead refreshes its slot words (goes
/// through recovery as a restarted one does) before it answers as an acceptor again: words
/// left that far behind may soon be read wrongly (laps count modulo 2048, telling older from
/// newer up to 1,024 laps apart), and one left behind by fewer laps is still read rightly.
pub const REFRESH_AFTER_LAPS: u64 = crate::word::LAPS / 8;

/// Read periods between two polls of the replication thread that count as a stall, after
/// which a leader resyncs ([`Resync`]): more than one, so that ordinary preemption does not hold
/// a leader back. Capped by what the log's length allows ([`stall_ns`]).
pub const STALL_READ_PERIODS: u64 = 2;

/// Less time than any fabric takes to decide one index (a compare-and-swap on a majority's
/// words, one after another on the leader's thread: about a microsecond over RDMA, and a few
/// hundred nanoseconds on shared memory, where each is a cache miss), for the bound in
/// [`stall_ns`].
pub const DECISION_NS_MIN: u64 = 10;

/// The longest gap between two polls of the replication thread that does not count as a
/// stall: [`STALL_READ_PERIODS`] read periods, or less where the log is so short that the
/// others could go round it half the laps a slot word tells apart in that time (at one decision
/// every [`DECISION_NS_MIN`]; half of them, for a margin). "A stalled leader resyncs".
///
/// The failure detector cannot bound it: an alive replica whose score sits just above the
/// failure threshold is found failed after a single stale read, so a leader may be deposed
/// within any gap, however short. What keeps a shorter gap safe is that the others cannot have
/// decided so many entries meanwhile that a slot word's lap reads wrongly (`LAPS / 2` laps of
/// the log apart).
pub fn stall_ns(read_period_ns: u64, slots_count: u64) -> u64 {
    let laps_apart_ns =
        (crate::word::LAPS / 2).saturating_mul(slots_count).saturating_mul(DECISION_NS_MIN);
    STALL_READ_PERIODS.saturating_mul(read_period_ns).min(laps_apart_ns / 2)
}

/// Whether a stalled leader at position `me` may trust the heads it has: every peer `alive`
/// (as the failure detector says now) has one in `fresh` (read by a read posted after the
/// stall), and so do enough of the other `members`, whatever the detector says, that one of
/// them is in any majority that decided without the leader: all but `others − majority` of the
/// `others` members are in it (`n − majority` reads where the leader is a member, one more
/// where it was just removed and leads on until it steps down). "A stalled leader resyncs".
pub fn resync_complete(me: usize, alive: u64, members: u64, fresh: u64) -> bool {
    let others = |mask: u64| mask & !(1 << me);
    let n = members.count_ones();
    let needed = (others(members).count_ones() + 1).saturating_sub(n / 2 + 1);
    others(alive) & !fresh == 0 && (others(members) & fresh).count_ones() >= needed
}

/// Whether the heads can be trusted, poll after poll ("A stalled leader resyncs"). A poll that
/// comes more than [`stall_ns`] after the one before means the thread stalled (descheduled, the
/// process stopped), and the others may have gone round the log more than laps tell apart
/// meanwhile: the replica neither starts nor goes on leading until the background plane has
/// read enough peers' heads with reads posted after it ([`resync_complete`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resync {
    /// When the last poll began (`None` before the first).
    last_poll_ns: Option<u64>,
    /// When the stall not resynced yet was noticed.
    since_ns: Option<u64>,
}

impl Resync {
    /// A poll begins at `now_ns`: notes a stall if it comes more than `stall_ns` after the
    /// last one.
    pub fn on_poll(&mut self, now_ns: u64, stall_ns: u64) {
        if self.last_poll_ns.is_some_and(|last| now_ns.saturating_sub(last) > stall_ns) {
            self.since_ns = Some(now_ns);
        }
        self.last_poll_ns = Some(now_ns);
    }

    /// Since when a stall waits for fresh heads: only heads read with reads posted at or after
    /// it count. `None` when the heads can be trusted.
    pub fn since_ns(&self) -> Option<u64> {
        self.since_ns
    }

    /// Whether a stall waits for fresh heads.
    pub fn pending(&self) -> bool {
        self.since_ns.is_some()
    }

    /// Whether the heads can be trusted, given those `fresh` since [`Resync::since_ns`]
    /// (positions): ends the wait once [`resync_complete`] holds.
    pub fn settle(&mut self, me: usize, alive: u64, members: u64, fresh: u64) -> bool {
        if self.since_ns.is_none() {
            return true;
        }
        if resync_complete(me, alive, members, fresh) {
            self.since_ns = None;
            return true;
        }
        false
    }
}

/// Whether a replica that does not lead takes new slot words ("A replica far behind takes new
/// words"): a peer's head is [`REFRESH_AFTER_LAPS`] laps of entries ahead of where its words
/// were last new. A member's words are as new as what it applied, or as when it last took new
/// ones (`words_taken_at`); a non-member's are never written (proposers ask members only),
/// however well it keeps up by catching up, so their age is when it last took them.
pub fn refresh_due<H: Fn(usize) -> u64>(
    heads: &Heads<H>,
    member: bool,
    words_taken_at: u64,
) -> bool {
    let words_new_at = if member { heads.applied.max(words_taken_at) } else { words_taken_at };
    heads.ahead_by(words_new_at, REFRESH_AFTER_LAPS * heads.slots_count)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stalled leader waits for the heads of every peer alive and of `n − majority` members
    /// whatever the detector says: with the detector's live set alone (all it used to wait
    /// for), a peer dropped at once could leave only peers outside the majority that decided.
    #[test]
    fn a_resync_needs_enough_members_whatever_the_detector_says() {
        let all = |n: u32| (1u64 << n) - 1;
        // Three replicas, leader 0: one other member read is enough, and it must be one.
        assert!(!resync_complete(0, 0b001, all(3), 0b000), "no head read at all");
        assert!(resync_complete(0, 0b001, all(3), 0b010));
        // Every peer alive must be read, as before.
        assert!(!resync_complete(0, 0b111, all(3), 0b010));
        assert!(resync_complete(0, 0b111, all(3), 0b110));
        // Five: two others, whichever they are; our own read does not count.
        assert!(!resync_complete(0, 0b00001, all(5), 0b00011));
        assert!(resync_complete(0, 0b00001, all(5), 0b10100));
        // Seven: three others.
        assert!(!resync_complete(3, 0b0001000, all(7), 0b0000011));
        assert!(resync_complete(3, 0b0001000, all(7), 0b1000011));
        // Replicas outside the configuration do not count towards the members read.
        assert!(!resync_complete(0, 0b00001, 0b00111, 0b11000));
        assert!(resync_complete(0, 0b00001, 0b00111, 0b11100));
        // A leader just removed (not a member, leading on until it steps down): one more, as
        // a majority of {1, 2, 3} may leave out any one of them.
        assert!(!resync_complete(0, 0b0001, 0b1110, 0b0010));
        assert!(resync_complete(0, 0b0001, 0b1110, 0b0110));
        // Never more than a leader decides with: majority − 1 others, for n = 1 to 9.
        for n in 1..=9u32 {
            let fresh = all(n / 2 + 1) & !1;
            assert!(resync_complete(0, 1, all(n), fresh), "{n} members");
        }
    }

    /// A gap shorter than the stall bound leaves the others too little time to go round the log
    /// half the laps a word tells apart, even at one decision every `DECISION_NS_MIN`, whatever
    /// the read period; with the default log it is the two read periods.
    #[test]
    fn the_stall_bound_is_below_the_time_laps_take() {
        for slots_count in [2, 8, 64, 4096, 1 << 20] {
            for read_period_ns in [1_000, 20_000, 1_000_000, 1_000_000_000] {
                let bound_ns = stall_ns(read_period_ns, slots_count);
                let decisions = bound_ns / DECISION_NS_MIN;
                let laps = decisions / slots_count;
                assert!(laps < crate::word::LAPS / 2, "{slots_count} slots: {laps} laps");
                assert!(bound_ns <= STALL_READ_PERIODS * read_period_ns);
                assert!(bound_ns > 0);
            }
        }
        assert_eq!(stall_ns(1_000_000, 4096), 2_000_000, "the defaults: two read periods");
        assert_eq!(stall_ns(1_000_000, 8), 40_960, "8 slots: 1,024 laps at 10 ns, halved");
        assert_eq!(stall_ns(1_000_000_000, 4096), 20_971_520, "a 1 s read period, capped");
    }

    /// A gap longer than the bound starts a wait that only enough fresh heads end; the first
    /// poll and gaps within the bound start none.
    #[test]
    fn a_stall_waits_for_fresh_heads() {
        let mut r = Resync::default();
        r.on_poll(1_000_000, 100);
        assert!(!r.pending(), "the first poll is no stall");
        r.on_poll(1_000_100, 100);
        assert!(!r.pending(), "exactly the bound is no stall");
        assert!(r.settle(0, 0b111, 0b111, 0));
        r.on_poll(1_000_201, 100);
        assert_eq!(r.since_ns(), Some(1_000_201));
        assert!(!r.settle(0, 0b111, 0b111, 0b010), "peer 2 is alive and not read");
        assert!(r.pending());
        r.on_poll(1_000_250, 100);
        assert_eq!(r.since_ns(), Some(1_000_201), "a later poll keeps the wait's start");
        assert!(r.settle(0, 0b111, 0b111, 0b110));
        assert!(!r.pending());
    }

    /// A member's words are as new as what it applied; a non-member's as when it took them.
    #[test]
    fn a_refresh_is_due_256_laps_past_new_words() {
        let laps = REFRESH_AFTER_LAPS * 8;
        let of = [0, laps + 100];
        let heads = |applied| Heads { me: 0, count: 2, applied, slots_count: 8, head: |p| of[p] };
        assert!(refresh_due(&heads(100), true, 0), "a peer exactly that far ahead");
        assert!(!refresh_due(&heads(101), true, 0));
        assert!(!refresh_due(&heads(0), true, 101), "new words taken at 101");
        assert!(refresh_due(&heads(101), false, 0), "a non-member's words age from when taken");
        assert!(!refresh_due(&heads(101), false, 101));
    }
}
