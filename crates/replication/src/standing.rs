//! Who stands for election under Mu, and when a replica stops taking part (Mu paper §5.1 and
//! §5.4; `docs/protocols/mu.md`): the rules the replica's planes apply around the engines, as
//! pure functions of numbers and sets (positions as bits of a `u64`).

use crate::membership;

/// Whether this replica (at position `me`) stands for election (§5.1, §5.4): it may lead
/// (`eligible`: not recovering, not waiting for entries), it is a member of its configuration
/// `members` (only members lead), it considers a majority of the members alive
/// (`alive_members`, itself included: it could not lead fewer, and asking for their logs would
/// only take them from the leader they follow; a replica that has just started, whose reads of
/// the others have not succeeded yet, would otherwise elect itself), and it is not behind a
/// change ([`claims_a_later_change`]).
pub fn stands(
    me: usize,
    eligible: bool,
    members: u64,
    alive_members: usize,
    behind_a_change: impl FnOnce() -> bool,
) -> bool {
    eligible
        && members >> me & 1 != 0
        && alive_members >= membership::majority(members)
        && !behind_a_change()
}

/// What a replica knows to be decided: everything below the higher of its log head and its FUO.
pub fn decided_below(own_head: u64, fuo: u64) -> u64 {
    own_head.max(fuo)
}

/// Whether a peer (one that stands for election, `standing`, with configuration
/// `peer_members`, 0 if unknown, and head `peer_head`) shows that our log lacks a decided
/// change (§5.4): it applied entries beyond everything we know to be decided
/// (`decided_below`), under a configuration other than ours (`members`). We do not stand
/// while a live one does: it leads and brings our log up to date, after which we stand again.
/// Standing under the configuration our log gives, we could ask for ever a majority that no
/// longer answers (`mu sim` membership sweep, seed 307494, `t99`). A leader is never behind
/// this way: it knows every decided entry, and its FUO is past them all.
pub fn claims_a_later_change(
    standing: bool,
    peer_members: u64,
    members: u64,
    peer_head: impl FnOnce() -> u64,
    decided_below: u64,
) -> bool {
    standing && peer_members != 0 && peer_members != members && peer_head() > decided_below
}

/// Whether a replica at position `me` whose applied configuration went from `was` to `members`
/// was removed by it (§5.4: "it stops executing"). Only a full member in this run (`eligible`)
/// concludes so: a replica that restarted or joined replays history until it is taken back,
/// and a removal there was of an earlier run of it.
pub fn removed_by_applied(me: usize, (was, members): (u64, u64), eligible: bool) -> bool {
    was >> me & 1 != 0 && members >> me & 1 == 0 && eligible
}

/// Whether a peer that applied further than us (up to `peer_head`, past our `own_head`) with a
/// configuration `peer_members` without us (position `me`) shows that we were removed by an
/// entry we have not applied (§5.4): the leader that decided it may never tell us (it writes
/// only to members), so we stop as if we had applied it. Only a full member in this run
/// (`eligible`, and a member of the configuration it applied, `member`) concludes so.
pub fn removed_by_peer(
    me: usize,
    (peer_head, peer_members): (u64, u64),
    own_head: u64,
    eligible: impl FnOnce() -> bool,
    member: impl FnOnce() -> bool,
) -> bool {
    peer_members != 0
        && peer_members & 1 << me == 0
        && peer_head > own_head
        && eligible()
        && member()
}

/// Whether a replica a leader leads without has moved on since the leader last asked it for
/// permission (its head now `head`, then `head_at_request`) and is within a log (`slots_count`)
/// of the leader's `fuo`: it restored a snapshot, or caught up on its own after being dropped.
/// Asked again at once rather than at the next timeout: a leader at full speed would be more
/// than a log ahead of it again by then (§5.3, §5.4).
pub fn may_join(head: u64, head_at_request: u64, fuo: u64, slots_count: u64) -> bool {
    head != head_at_request && fuo.saturating_sub(head) < slots_count
}

/// A replayer waiting for a decided entry its log does not get: once it has waited at one head
/// for longer than a timeout, only a state transfer gets past it (§5.3: recycling may have
/// overwritten the entry everywhere it could be copied from), and the replica stands aside
/// until it has applied what it knows decided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockedWatch {
    /// The head the replayer is blocked at, and since when.
    since: Option<(u64, u64)>,
}

impl BlockedWatch {
    /// A poll at `now_ns`: the replayer at `head` is `blocked` or not. Returns whether it is
    /// stuck: blocked at this head for longer than `timeout_ns`.
    pub fn poll(&mut self, blocked: bool, head: u64, now_ns: u64, timeout_ns: u64) -> bool {
        if !blocked {
            self.since = None;
        } else if self.since.is_none_or(|(at, _)| at != head) {
            self.since = Some((head, now_ns));
        }
        self.since.is_some_and(|(_, since)| now_ns.saturating_sub(since) > timeout_ns)
    }
}

/// Where a replica that does not stand for election stands again: once its replayer applied up
/// to this index. A recovering replica (restarted with its log lost) is admitted by a leader
/// that prepared without it and wrote `admitted` (that leader's FUO plus one, 0 before any) into
/// its log: whatever it forgot no longer matters once it applied what that leader had decided.
pub fn eligible_again_at(admitted: u64) -> Option<u64> {
    admitted.checked_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a member that sees a live majority of its configuration and is not behind stands.
    #[test]
    fn standing_for_election() {
        assert!(stands(0, true, 0b111, 2, || false));
        assert!(!stands(0, false, 0b111, 3, || false));
        assert!(!stands(0, true, 0b110, 3, || false), "not a member");
        assert!(!stands(0, true, 0b111, 1, || false), "no live majority");
        assert!(!stands(0, true, 0b111, 3, || true), "behind a change");
        assert!(!stands(0, false, 0b111, 3, || unreachable!("not asked")));
    }

    /// A standing peer further on than what we know decided, in another configuration.
    #[test]
    fn behind_a_change() {
        assert_eq!(decided_below(10, 12), 12);
        assert!(claims_a_later_change(true, 0b011, 0b111, || 13, 12));
        assert!(!claims_a_later_change(true, 0b011, 0b111, || 12, 12));
        assert!(!claims_a_later_change(true, 0b111, 0b111, || 13, 12), "our configuration");
        assert!(!claims_a_later_change(true, 0, 0b111, || 13, 12), "unknown");
        assert!(!claims_a_later_change(false, 0b011, 0b111, || 13, 12), "not standing");
    }

    /// A removal counts for a full member only, from its own log or a peer's.
    #[test]
    fn removals() {
        assert!(removed_by_applied(2, (0b111, 0b011), true));
        assert!(!removed_by_applied(2, (0b111, 0b011), false), "history of an earlier run");
        assert!(!removed_by_applied(2, (0b011, 0b001), true), "was not a member");
        assert!(!removed_by_applied(1, (0b111, 0b011), true), "still a member");
        assert!(removed_by_peer(2, (20, 0b011), 10, || true, || true));
        assert!(!removed_by_peer(2, (10, 0b011), 10, || true, || true), "not further on");
        assert!(!removed_by_peer(2, (20, 0b111), 10, || true, || true));
        assert!(!removed_by_peer(2, (20, 0), 10, || true, || true));
        assert!(!removed_by_peer(2, (20, 0b011), 10, || false, || true));
        assert!(!removed_by_peer(2, (20, 0b011), 10, || true, || false));
    }

    /// A dropped replica is asked again once it moved and is within a log.
    #[test]
    fn joining_again() {
        assert!(may_join(90, 50, 100, 16));
        assert!(!may_join(50, 50, 60, 16), "has not moved");
        assert!(!may_join(84, 50, 100, 16), "a whole log behind");
        assert!(may_join(120, 50, 100, 16), "ahead of our FUO");
    }

    /// Stuck once blocked at one head for longer than the timeout; moving starts over.
    #[test]
    fn a_blocked_replayer() {
        let mut w = BlockedWatch::default();
        assert!(!w.poll(true, 5, 100, 50));
        assert!(!w.poll(true, 5, 150, 50));
        assert!(w.poll(true, 5, 151, 50));
        assert!(!w.poll(true, 6, 300, 50), "moved on: a new wait");
        assert!(!w.poll(false, 6, 400, 50));
        assert!(!w.poll(true, 6, 420, 50), "unblocked in between: a new wait");
        assert!(w.poll(true, 6, 471, 50));
        assert_eq!(eligible_again_at(0), None);
        assert_eq!(eligible_again_at(8), Some(7));
    }
}
