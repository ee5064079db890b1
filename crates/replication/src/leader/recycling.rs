//! Log recycling (§5.3): the log heads of the confirmed replicas, and the room they leave.

use super::steps::Wait;
use super::{Leader, Phase};
use crate::{Action, Area, Memory};
use mu_fabric::NodeId;
use mu_log::HEAD_OFFSET;

/// What the leader knows of the replicas' log heads.
pub(super) struct Recycling {
    /// The log head of each replica as last read (first index not applied there; only grows).
    /// The leader writes index `i` into a confirmed log only once that replica applied
    /// `i - slots_count`, the entry whose slot `i` reuses (log recycling, §5.3).
    pub(super) heads: Vec<u64>,
    /// When each head last moved, or was first read (the leader's clock, [`Leader::tick`]).
    pub(super) moved_at_ns: Vec<u64>,
    /// [`Leader::set_drop_stalled_after_ns`].
    pub(super) drop_stalled_after_ns: u64,
    /// Indices below this have room in the log ([`Leader::log_limit`] when
    /// [`Leader::make_room`] last computed it; 0: not known). The limit only falls when a
    /// replica joins the confirmed set or a head is read lower, and those reset it; heads
    /// that rise and replicas that leave the set only raise the limit, so the value stays a
    /// safe bound meanwhile, and a proposal is spared computing the minimum head (about 100
    /// instructions, `scripts/propose-instructions.sh`).
    pub(super) room_below: u64,
}

impl Recycling {
    pub(super) fn new(replicas_count: usize) -> Recycling {
        Recycling {
            heads: vec![0; replicas_count],
            moved_at_ns: vec![0; replicas_count],
            drop_stalled_after_ns: 0,
            room_below: 0,
        }
    }
}

impl Leader {
    /// The first index the leader may not accept at yet (log recycling, §5.3): every confirmed
    /// replica, ourselves included, must have applied the entry whose slot it reuses, and one
    /// slot always stays free so that the log is never completely full.
    ///
    /// Only confirmed replicas count because only their logs are written. Leaving one out while
    /// still writing to it would be unsafe, not just wasteful: its log would lose entries it has
    /// not applied while its FUO and head still claim it holds everything above them, and a
    /// later leader catching up from it, or preparing with it, could take an overwritten slot for
    /// an empty one and decide a different value at a decided index.
    pub fn log_limit(&self) -> u64 {
        self.confirmed
            .iter()
            .map(|pos| self.recycling.heads[pos])
            .min()
            .unwrap_or(0)
            .saturating_add(self.layout.slots_count() - 1)
    }

    /// The confirmed replica whose log head the room waits for (the lowest head; a follower
    /// rather than ourselves when level), and that head: the first entry it has not applied, as
    /// last read. Once [`Leader::make_room`] could drop no one, proposals waiting for room wait
    /// for this replica to apply. `None` with no replica confirmed.
    pub fn room_holder(&self) -> Option<(NodeId, u64)> {
        let pos = self
            .confirmed
            .iter()
            .min_by_key(|&pos| (self.recycling.heads[pos], pos == self.me_pos))?;
        Some((self.replicas.ids()[pos], self.recycling.heads[pos]))
    }

    /// How long the slowest confirmed follower's head must have stood still before the leader,
    /// out of room, drops it rather than waits for it ([`Leader::make_room`]); 0 (the default):
    /// at once. The runtime sets half its log-full timeout. A follower that applies, however
    /// slowly, is then waited for (back-pressure): dropped, it fell further behind with every
    /// entry the leader went on with, a whole log behind under sustained load, and came back
    /// only by a state transfer, while the follower left became the only one the room waited
    /// for (under sustained overload the followers took turns at that, and one taken back by a
    /// transfer held the room for over 100 ms: "log full"). Set it well above the gaps between
    /// the heads read of a follower that applies (a heartbeat read period, plus a scheduler's
    /// time slice or two on a loaded machine).
    pub fn set_drop_stalled_after_ns(&mut self, ns: u64) {
        self.recycling.drop_stalled_after_ns = ns;
    }

    /// Whether proposals wait for room in the log, none in flight: replicas must apply more
    /// entries before the slot the next index reuses is free.
    pub fn waiting_for_room(&self) -> bool {
        self.phase == Phase::Ready && self.proposals_count() > 0
    }

    /// `peer`'s log head was read (§5.3): it has applied every entry below `head`. A proposal
    /// waiting for room may go on.
    pub fn set_head(
        &mut self,
        peer: NodeId,
        head: u64,
        mem: &mut impl Memory,
        out: &mut Vec<Action>,
    ) {
        let Some(pos) = self.replicas.position(peer) else { return };
        if head > self.recycling.heads[pos] {
            self.recycling.heads[pos] = head;
            self.recycling.moved_at_ns[pos] = self.now_ns;
            self.room_changed(mem, out);
        }
    }

    /// Every replica has applied the entries below `min_head` ([`Leader::set_head`] for all).
    pub fn set_min_head(&mut self, min_head: u64, mem: &mut impl Memory, out: &mut Vec<Action>) {
        for pos in 0..self.replicas.len() {
            if min_head > self.recycling.heads[pos] {
                self.recycling.heads[pos] = min_head;
                self.recycling.moved_at_ns[pos] = self.now_ns;
            }
        }
        self.room_changed(mem, out);
    }

    /// Time passed ([`Leader::tick`]): proposals waiting for room may go on without the
    /// slowest follower now, if it stood still long enough
    /// ([`Leader::set_drop_stalled_after_ns`]).
    pub(super) fn room_tick(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        if self.waiting_for_room() {
            self.start_replicating(mem, out);
        }
    }

    /// Log heads moved: proposals waiting for room may go on.
    fn room_changed(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        if self.waiting_for_room() {
            self.start_replicating(mem, out);
        } else if self.phase == Phase::Accept && self.prepare.prepared {
            self.pump(mem, out);
        }
    }

    /// Whether `index` may be written (§5.3). If the slowest confirmed follower is what holds
    /// the log back, its head has stood still long enough ([`Leader::set_drop_stalled_after_ns`])
    /// and a majority
    /// remains without it, it stops being written to (it is dropped from the confirmed set,
    /// with its log intact) rather than stalling everyone: it joins again when it asks, if it is
    /// still within a log of us. One whose head moves is waited for: back-pressure, the leader
    /// at the pace of the followers it counts on.
    pub(super) fn make_room(&mut self, index: u64, mem: &impl Memory) -> bool {
        if index < self.recycling.room_below {
            debug_assert!(index < self.log_limit(), "the cached room is a bound");
            return true;
        }
        self.recycling.heads[self.me_pos] =
            self.recycling.heads[self.me_pos].max(mem.load_u64(Area::Log, HEAD_OFFSET));
        while index >= self.log_limit() {
            let slowest = self
                .confirmed
                .iter()
                .filter(|&pos| pos != self.me_pos)
                .min_by_key(|&pos| self.recycling.heads[pos]);
            match slowest {
                Some(pos)
                    if self.recycling.heads[pos] < self.recycling.heads[self.me_pos]
                        && self.confirmed.count() > self.majority()
                        && self.now_ns.saturating_sub(self.recycling.moved_at_ns[pos])
                            >= self.recycling.drop_stalled_after_ns =>
                {
                    self.confirmed.remove(pos);
                    self.waits[pos] = Wait::Idle;
                }
                _ => return false,
            }
        }
        self.recycling.room_below = self.log_limit();
        true
    }
}
