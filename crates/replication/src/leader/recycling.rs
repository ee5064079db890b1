//! Log recycling (§5.3): the log heads of the confirmed replicas, and the room they leave.

use super::steps::Wait;
use super::{Leader, Phase};
use crate::{Action, Area, Memory};
use mu_fabric::NodeId;
use mu_log::HEAD_OFFSET;

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
            .map(|pos| self.heads[pos])
            .min()
            .unwrap_or(0)
            .saturating_add(self.layout.slots_count() - 1)
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
        if head > self.heads[pos] {
            self.heads[pos] = head;
            self.room_changed(mem, out);
        }
    }

    /// Every replica has applied the entries below `min_head` ([`Leader::set_head`] for all).
    pub fn set_min_head(&mut self, min_head: u64, mem: &mut impl Memory, out: &mut Vec<Action>) {
        for pos in 0..self.replicas.len() {
            self.heads[pos] = self.heads[pos].max(min_head);
        }
        self.room_changed(mem, out);
    }

    /// Log heads moved: proposals waiting for room may go on.
    fn room_changed(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        if self.waiting_for_room() {
            self.start_replicating(mem, out);
        } else if self.phase == Phase::Accept && self.prepared {
            self.pump(mem, out);
        }
    }

    /// Whether `index` may be written (§5.3). If the slowest confirmed follower is what holds
    /// the log back and a majority remains without it, it stops being written to (it is dropped
    /// from the confirmed set, with its log intact) rather than stalling everyone: it joins
    /// again when it asks, if it is still within a log of us.
    pub(super) fn make_room(&mut self, index: u64, mem: &impl Memory) -> bool {
        if index < self.room_below {
            debug_assert!(index < self.log_limit(), "the cached room is a bound");
            return true;
        }
        self.heads[self.me_pos] = self.heads[self.me_pos].max(mem.load_u64(Area::Log, HEAD_OFFSET));
        while index >= self.log_limit() {
            let slowest = self
                .confirmed
                .iter()
                .filter(|&pos| pos != self.me_pos)
                .min_by_key(|&pos| self.heads[pos]);
            match slowest {
                Some(pos)
                    if self.heads[pos] < self.heads[self.me_pos]
                        && self.confirmed.count() > self.majority() =>
                {
                    self.confirmed.remove(pos);
                    self.waits[pos] = Wait::Idle;
                }
                _ => return false,
            }
        }
        self.room_below = self.log_limit();
        true
    }
}
