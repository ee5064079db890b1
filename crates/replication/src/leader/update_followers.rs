//! Update followers (Listing 4): copy our log into the confirmed followers that lag, in chunks,
//! then write their FUO.

use super::steps::Wait;
use super::{AbortReason, Leader, Phase};
use crate::{Action, Memory, RemoteOp};
use mu_log::{ADMITTED_OFFSET, FUO_OFFSET};

/// Slots copied to one follower before the leader waits for them to land (Listing 4, in
/// chunks). A fabric's connection may hold only so many requests (an RDMA send queue: verbs'
/// `send_queue_depth`, 128 by default), and a follower far behind needs up to a log's worth.
/// Posted at once, those past the connection's room were refused and the follower dropped; a
/// new leader whose followers were all that far behind never got past this step (simulator
/// with `--connection-depth 16`, seed 170032). A chunk costs a round trip, small beside
/// sending it: 32 slots of 4 KiB take about 10 µs on a 100 Gbit/s link.
pub const UPDATE_CHUNK_SLOTS: u64 = 32;

/// [`Leader::update_next`] once the follower's FUO is on the way.
pub(super) const UPDATE_DONE: u64 = u64::MAX;

impl Leader {
    /// Listing 4: bring every lagging confirmed follower up to our FUO.
    pub(super) fn begin_update_followers(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        let wr = self.next_step(Phase::UpdateFollowers);
        for pos in self.followers() {
            let first = self.read_fuo(mem, pos).min(self.fuo);
            if self.fuo - first > self.layout.slots_count() {
                // Our log no longer holds what it misses: it needs a state transfer, and cannot
                // be a confirmed follower until it had one.
                self.confirmed.remove(pos);
                self.waits[pos] = Wait::Idle;
                continue;
            }
            self.update_next[pos] = first;
            self.post_update_chunk(pos, wr, out);
        }
        if self.confirmed.count() < self.majority() {
            return self.abort(AbortReason::LostMajority, mem, out);
        }
        self.maybe_finish_step(mem, out);
    }

    /// Copies the next [`UPDATE_CHUNK_SLOTS`] slots a follower misses, the last of them
    /// signaled; once none is left, writes its FUO and then its admission.
    pub(super) fn post_update_chunk(&mut self, pos: usize, wr: u64, out: &mut Vec<Action>) {
        let slot_bytes = self.layout.slot_bytes();
        let from = self.update_next[pos];
        let to = self.fuo.min(from.saturating_add(UPDATE_CHUNK_SLOTS));
        self.update_next[pos] = to;
        for index in from..to {
            // Every slot, also one our log lacks (we installed a snapshot over it): the follower
            // may hold there a complete entry for this index that was never decided (its own
            // accept as an earlier leader), and the FUO we write next would make its replayer
            // apply it (simulator, seed 180023 with 7 replicas). Given our hole instead, its
            // replayer waits there and fetches a snapshot; a follower that held the decided
            // entry loses it the same way, at the price of a transfer.
            // A write per slot, not one per range: the replayer learns that a slot is decided
            // from a later entry and then reads it, which is right only if the slot landed
            // before the later one. Writes on a connection land in order; the bytes of one
            // write may not (checksum mode is for such fabrics).
            let op =
                RemoteOp::WriteFromLog { offset: self.layout.slot_offset(index), len: slot_bytes };
            // The last of a chunk that is not the last one says when the chunk landed.
            let signaled = index + 1 == to && to < self.fuo;
            self.post(out, pos, wr, op, signaled);
        }
        if to < self.fuo {
            return;
        }
        self.update_next[pos] = UPDATE_DONE;
        let fuo = RemoteOp::WriteWord { offset: FUO_OFFSET, value: self.fuo };
        self.post(out, pos, wr, fuo, true);
        // Then, after everything else on the same connection: taken back up to here.
        let admitted = RemoteOp::WriteWord { offset: ADMITTED_OFFSET, value: self.fuo + 1 };
        self.post(out, pos, wr, admitted, false);
    }
}
