//! The steps of taking back a replica that restarted without its memory, or that takes new slot
//! words (`docs/protocols/velos.md`, "Restarting a replica" and "A replica far behind takes new
//! words"): the replica's side as a state machine ([`Rejoin`]), and the leader's choice of the
//! rejoin entry it decides next ([`entry_to_decide`]). Which indices it then abstains in is
//! [`crate::recovery`].

use crate::recovery::RejoinEntry;

/// A recovery whose rejoin entry has not come after this long says so.
pub const REJOIN_WARN_AFTER_NS: u64 = 1_000_000_000;

/// How moving a side of a connection peers initiate on to error went (the fence of step 1:
/// it waits for the peer's operations in flight, so nothing of theirs lands after).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence {
    /// The side is down.
    Done,
    /// Not finished: tried again on the next poll.
    InProgress,
    /// Refused: a side never up may refuse it, and nothing lands through that.
    Refused,
}

/// A replica restarted without its memory (or taking new slot words, its own too far behind),
/// before it answers as an acceptor again: with the sides peers reach its memory through down,
/// it asks the leader for a rejoin entry, catches up from the others' memories until it applies
/// that entry, then abstains below one lap past it and lets peers in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejoin {
    /// Positions whose side of the connection they initiate on is not yet known closed, for a
    /// replica refreshing its words (a restarted one never opened them). Nothing is asked
    /// before every such side is down, as a barrier.
    unfenced: u64,
    /// Of those, the ones we had up.
    was_up: u64,
    /// The rejoin request published ([`crate::recovery::request`]), 0 until the barrier is
    /// passed, and again after a state transfer (whose snapshot may hold the entry that
    /// answered the request before it, which would then never be applied here).
    request: u64,
    /// The index of the rejoin entry that answered `request`, once applied here.
    rejoined_at: Option<u64>,
    /// When recovery started, and whether it said it is taking long.
    since_ns: Option<u64>,
    warned: bool,
    /// A restarted (or new) replica, applying history before its rejoin entry: a removal it
    /// applies there was of an earlier run of it. Not so for a refresh, in the same run.
    restarted: bool,
}

impl Rejoin {
    /// A recovery that fences the sides in `unfenced` first (of which `was_up` were up): none
    /// for a restarted replica (`restarted`), whose sides never opened; every peer's for a
    /// refresh.
    pub fn new((unfenced, was_up): (u64, u64), restarted: bool) -> Rejoin {
        Rejoin {
            unfenced,
            was_up,
            request: 0,
            rejoined_at: None,
            since_ns: None,
            warned: false,
            restarted,
        }
    }

    /// A poll of the recovery at `now_ns`: it counts from the first.
    pub fn start_at(&mut self, now_ns: u64) {
        self.since_ns.get_or_insert(now_ns);
    }

    /// The sides still to fence (positions).
    pub fn unfenced(&self) -> u64 {
        self.unfenced
    }

    /// How fencing `pos`'s side went: a side down, or one never up that refuses, is fenced.
    pub fn fenced(&mut self, pos: usize, fence: Fence) {
        let was_up = self.was_up >> pos & 1 != 0;
        match fence {
            Fence::Done => self.unfenced &= !(1 << pos),
            Fence::InProgress => {}
            Fence::Refused if !was_up => self.unfenced &= !(1 << pos),
            Fence::Refused => {}
        }
    }

    /// Whether a request is to be made now: the barrier passed, none made (or the last one
    /// dropped), and not a log behind (the state transfer comes first: its snapshot would
    /// likely hold the entry, and it would have to ask again).
    pub fn asks(&self, a_log_behind: bool) -> bool {
        self.unfenced == 0 && self.request == 0 && !a_log_behind
    }

    /// The request made, to be published.
    pub fn ask(&mut self, request: u64) {
        self.request = request;
    }

    /// The request published, 0 if none.
    pub fn request(&self) -> u64 {
        self.request
    }

    /// A snapshot was installed: it may hold the entry that answered the request, which would
    /// then never be applied here; the next poll asks again.
    pub fn ask_again(&mut self) {
        self.request = 0;
    }

    /// Whether to say, once, that the rejoin entry is long in coming ([`REJOIN_WARN_AFTER_NS`]).
    pub fn warns(&mut self, now_ns: u64) -> bool {
        let since = self.since_ns.unwrap_or(now_ns);
        if !self.warned && now_ns.saturating_sub(since) > REJOIN_WARN_AFTER_NS {
            self.warned = true;
            return true;
        }
        false
    }

    /// A rejoin entry naming this replica, for `request`, was applied at `index`: if it answers
    /// the request published, the replica rejoined there.
    pub fn on_entry(&mut self, request: u64, index: u64) {
        if self.request == request && self.rejoined_at.is_none() {
            self.rejoined_at = Some(index);
        }
    }

    /// Where the rejoin entry answering the request was applied, once it was.
    pub fn rejoined_at(&self) -> Option<u64> {
        self.rejoined_at
    }

    /// Whether entries applied now are history of an earlier run of the replica (it restarted).
    pub fn restarted(&self) -> bool {
        self.restarted
    }
}

/// The rejoin entry a leader at position `me` decides next, if any: for the first live peer in
/// `asking` (positions, as their heartbeats say) whose request, `request_of(pos)`, is not 0 nor
/// the one the last rejoin entry applied here for it answered (`rejoined[pos]`): a leader
/// decides one entry per request. One at a time, each alone in the proposer like an empty
/// entry; several peers asking are answered in turn. "Restarting a replica", step 2.
pub fn entry_to_decide(
    me: usize,
    count: usize,
    asking: u64,
    request_of: impl Fn(usize) -> u64,
    rejoined: &[u64],
    replica_of: impl Fn(usize) -> mu_fabric::NodeId,
) -> Option<RejoinEntry> {
    (0..count).filter(|&pos| pos != me && asking >> pos & 1 != 0).find_map(|pos| {
        let request = request_of(pos);
        (request != 0 && rejoined[pos] != request)
            .then(|| RejoinEntry { replica: replica_of(pos), request })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mu_fabric::NodeId;

    /// A refresh fences every side first; a side never up that refuses counts as fenced, one
    /// that was up must really go down.
    #[test]
    fn nothing_is_asked_before_the_barrier() {
        let mut r = Rejoin::new((0b110, 0b010), false);
        assert!(!r.asks(false));
        r.fenced(1, Fence::Refused);
        r.fenced(2, Fence::InProgress);
        assert_eq!(r.unfenced(), 0b110);
        r.fenced(2, Fence::Refused);
        assert_eq!(r.unfenced(), 0b010);
        r.fenced(1, Fence::Done);
        assert!(r.asks(false));
        assert!(!r.asks(true), "a log behind: the state transfer first");
        assert!(!r.restarted());
    }

    /// The request is made once, answered by the entry that names it, and made again after a
    /// snapshot.
    #[test]
    fn a_request_and_its_answer() {
        let mut r = Rejoin::new((0, 0), true);
        assert!(r.asks(false));
        r.ask(77);
        assert!(!r.asks(false));
        assert_eq!(r.request(), 77);
        r.on_entry(76, 10);
        assert_eq!(r.rejoined_at(), None, "an earlier request's entry");
        r.ask_again();
        assert!(r.asks(false));
        r.ask(78);
        r.on_entry(78, 12);
        r.on_entry(78, 13);
        assert_eq!(r.rejoined_at(), Some(12));
        assert!(r.restarted());
    }

    /// The warning comes once, a second after the recovery's first poll.
    #[test]
    fn a_long_recovery_says_so_once() {
        let mut r = Rejoin::new((0, 0), true);
        r.start_at(5);
        r.start_at(1_000);
        assert!(!r.warns(5 + REJOIN_WARN_AFTER_NS));
        assert!(r.warns(6 + REJOIN_WARN_AFTER_NS));
        assert!(!r.warns(7 + REJOIN_WARN_AFTER_NS));
    }

    /// The first peer asking with a request not answered yet; never ourselves.
    #[test]
    fn the_rejoin_entry_to_decide() {
        let requests = [9, 0, 5, 6];
        let node = |pos: usize| NodeId(pos as u16 + 10);
        let pick = |asking, rejoined: &[u64]| {
            entry_to_decide(0, 4, asking, |pos| requests[pos], rejoined, node)
        };
        assert_eq!(pick(0b1111, &[0; 4]), Some(RejoinEntry { replica: NodeId(12), request: 5 }));
        assert_eq!(
            pick(0b1111, &[0, 0, 5, 0]),
            Some(RejoinEntry { replica: NodeId(13), request: 6 })
        );
        assert_eq!(pick(0b1011, &[0; 4]), Some(RejoinEntry { replica: NodeId(13), request: 6 }));
        assert_eq!(pick(0b0011, &[0; 4]), None, "ourselves, and a peer without a request");
        assert_eq!(pick(0b1100, &[0, 0, 5, 6]), None, "both answered");
    }
}
