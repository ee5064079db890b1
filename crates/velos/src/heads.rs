//! What a Velos replica decides from its peers' log heads (`docs/protocols/velos.md`, "Laps
//! modulo 2048" and "What the replica does around the engine"). A head is the next index a
//! replica applies, counted in 64 bits: unlike a slot word's lap (modulo 2048), it tells how far
//! apart two replicas are however far that is. The replica's background plane reads them; the
//! rules here only compare numbers.

/// The heads this replica last read of its peers, beside its own progress: the view the rules
/// below take. `head(pos)` is peer `pos`'s head as last read (never asked for `me`).
#[derive(Clone, Copy)]
pub struct Heads<H> {
    /// This replica's position.
    pub me: usize,
    /// The replicas' count: positions `0..count`.
    pub count: usize,
    /// The next index this replica applies.
    pub applied: u64,
    /// The log's length in slots.
    pub slots_count: u64,
    /// A peer's head as last read, by position.
    pub head: H,
}

impl<H: Fn(usize) -> u64> Heads<H> {
    /// The other positions, in order.
    fn others(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.count).filter(move |&pos| pos != self.me)
    }

    /// The other positions in `mask`, in order.
    fn others_in(&self, mask: u64) -> impl Iterator<Item = usize> + '_ {
        self.others().filter(move |&pos| mask >> pos & 1 != 0)
    }

    /// The highest of `applied` and every peer's head as last read.
    pub fn highest(&self) -> u64 {
        self.others().map(|pos| (self.head)(pos)).fold(self.applied, u64::max)
    }

    /// Whether a peer applied at least `entries` past `from`, by any head read of it (alive now
    /// or not: the log went that far round either way; a replica just back reads heads before
    /// its detector trusts the peers again).
    pub fn ahead_by(&self, from: u64, entries: u64) -> bool {
        self.highest() >= from.saturating_add(entries)
    }

    /// Whether any peer's head read, alive now or not, is a whole log ahead of this replica:
    /// a leader that finds one once resynced steps down for a state transfer ("A stalled leader
    /// resyncs": the detector may have dropped the very peer whose head shows the log went on
    /// without it).
    pub fn any_a_log_ahead(&self) -> bool {
        self.ahead_by(self.applied, self.slots_count)
    }

    /// Whether a peer in `alive` applied at least `entries` more than this replica.
    pub fn live_ahead_by(&self, alive: u64, entries: u64) -> bool {
        let far = self.applied.saturating_add(entries);
        self.others_in(alive).any(|pos| (self.head)(pos) >= far)
    }

    /// Whether a peer in `alive` applied a whole log more than this replica (a restarted one,
    /// or one cut off for long): it catches up by state transfer ("A log behind"). Heads count
    /// entries, not laps, so this holds however far it is.
    pub fn a_log_behind(&self, alive: u64) -> bool {
        self.live_ahead_by(alive, self.slots_count)
    }

    /// Whether a peer in `alive` has applied the entry before `index`: for a leaving leader,
    /// `index` is the one after the entry that removed it ("Membership changes": a peer that
    /// applied the removal tells the others, and the leader steps down).
    pub fn reached_by_live(&self, alive: u64, index: u64) -> bool {
        self.others_in(alive).any(|pos| (self.head)(pos) >= index)
    }

    /// Whether peer `pos`'s head (as last read) is two logs or more behind this replica. The
    /// floor keeps a live peer within a log of the leader's proposals, so only a peer that was
    /// away (cut off, down, restarted) falls this far; it catches up by state transfer, and the
    /// floor leaves it out meanwhile ("A leader keeps away from a peer two logs behind").
    pub fn two_logs_behind(&self, pos: usize) -> bool {
        let far = self.applied.saturating_sub(2 * self.slots_count);
        (self.head)(pos) < far
    }

    /// Whether the proposer is kept from peer `pos` ([`crate::Proposer::exclude`]): its head is
    /// two logs or more behind and it does not say it abstains (`abstaining`, a mask of
    /// positions: its words are then new markers of the current laps), or it was refused as
    /// restarted without rejoining (`refused`: its words are those of an empty memory, not an
    /// acceptor's). Such a peer's slot words are as old as its absence, and past 1,024 laps
    /// they read as newer than the index a proposer works on ("A leader keeps away from a peer
    /// two logs behind").
    pub fn keeps_away(&self, pos: usize, abstaining: u64, refused: u64) -> bool {
        let bit = 1u64 << pos;
        (self.two_logs_behind(pos) && abstaining & bit == 0) || refused & bit != 0
    }

    /// The recycling floor: every live acceptor (`live_members`, the peers the failure detector
    /// considers alive in the configuration) has applied the indices below it, but for those
    /// two logs behind, which catch up by state transfer ("Recycling": a leader prepares index
    /// `i` only once every live acceptor applied `i - slots_count`). Members only: nobody asks
    /// a replica outside the configuration to accept anything.
    pub fn floor(&self, live_members: u64) -> u64 {
        self.others_in(live_members)
            .filter(|&pos| !self.two_logs_behind(pos))
            .map(|pos| (self.head)(pos))
            .fold(self.applied, u64::min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heads(
        me: usize,
        applied: u64,
        slots_count: u64,
        of: &[u64],
    ) -> Heads<impl Fn(usize) -> u64 + '_> {
        Heads { me, count: of.len(), applied, slots_count, head: move |pos| of[pos] }
    }

    /// A peer counts as ahead by any head read, alive or not; as a log ahead of a live peer
    /// only when alive.
    #[test]
    fn ahead_and_behind_compare_entries_not_laps() {
        // Position 1 is at 100, position 2 at 5_000; we applied 50, in an 8-slot log.
        let h = heads(0, 50, 8, &[0, 100, 5_000]);
        assert_eq!(h.highest(), 5_000);
        assert!(h.ahead_by(4_992, 8));
        assert!(!h.ahead_by(4_993, 8));
        assert!(h.any_a_log_ahead());
        assert!(h.a_log_behind(0b110));
        assert!(h.a_log_behind(0b010), "100 is 50 past us, more than 8 slots");
        assert!(!h.a_log_behind(0b000), "nobody alive");
        assert!(!h.live_ahead_by(0b010, 51));
        assert!(h.live_ahead_by(0b010, 50));
        // Our own position never counts, whatever it holds.
        let h = heads(1, 50, 8, &[0, 9_999, 0]);
        assert_eq!(h.highest(), 50);
        assert!(!h.a_log_behind(0b111));
        // Far out: the sum saturates rather than wraps.
        assert!(heads(0, u64::MAX - 1, 8, &[0, u64::MAX]).ahead_by(u64::MAX - 1, 8));
        assert!(!heads(0, u64::MAX - 1, 8, &[0, u64::MAX - 1]).ahead_by(u64::MAX - 1, 8));
    }

    /// The floor is the lowest head of the live members, ours included, without those two logs
    /// behind, which are kept away from the proposer unless they abstain; a refused peer is
    /// kept away whatever its head.
    #[test]
    fn floor_and_exclusions_leave_out_peers_two_logs_behind() {
        // 8 slots, we applied 100: two logs behind is below 84.
        let h = heads(0, 100, 8, &[0, 90, 83, 84]);
        assert!(!h.two_logs_behind(1));
        assert!(h.two_logs_behind(2));
        assert!(!h.two_logs_behind(3));
        assert_eq!(h.floor(0b1111), 84);
        assert_eq!(h.floor(0b0011), 90);
        assert_eq!(h.floor(0b0101), 100, "only a peer two logs behind: our own progress");
        assert!(h.keeps_away(2, 0, 0));
        assert!(!h.keeps_away(2, 0b100, 0), "abstaining: its words are new markers");
        assert!(h.keeps_away(1, 0, 0b010), "refused as restarted without rejoining");
        assert!(!h.keeps_away(3, 0, 0));
        // Early in the log nobody is two logs behind.
        assert!(!heads(0, 10, 8, &[0, 0]).two_logs_behind(1));
    }

    /// A leaving leader learns that a live peer applied its removal.
    #[test]
    fn a_removal_reached_by_a_live_peer() {
        let h = heads(0, 10, 8, &[0, 11, 12]);
        assert!(h.reached_by_live(0b100, 12));
        assert!(!h.reached_by_live(0b010, 12));
        assert!(!h.reached_by_live(0b001, 0), "not by our own head");
    }
}
