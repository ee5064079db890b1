//! Leader catch-up (Listing 3): read the confirmed followers' FUOs and copy the most advanced
//! one's log into ours, in batches through the scratch area and the own-log guard.

use super::scratch::{CATCH_UP_BATCH_SLOTS, SCRATCH_FUO, SCRATCH_HEAD};
use super::steps::Wait;
use super::{AbortReason, Leader, Phase};
use crate::{Action, Area, Memory, RemoteOp};
use mu_log::{Slot, FUO_OFFSET, HEAD_OFFSET};

/// The catch-up in progress: from which follower, up to where, and the batch being read.
pub(super) struct CatchUp {
    /// Which confirmed follower is the most advanced (catch-up source).
    pub(super) source: usize,
    /// The index being caught up to.
    pub(super) target: u64,
    /// The first index of the batch being read.
    pub(super) next: u64,
    /// How many slots the batch being read holds.
    pub(super) count: u64,
}

impl CatchUp {
    pub(super) fn new(me_pos: usize) -> CatchUp {
        CatchUp { source: me_pos, target: 0, next: 0, count: 0 }
    }
}

impl Leader {
    /// Listing 3, lines 1–3: read every confirmed follower's FUO (and its log head, see
    /// [`Leader::decided_below`]).
    pub(super) fn begin_read_fuos(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        mem.store_u64(Area::Scratch, self.scratch(self.me_pos, SCRATCH_HEAD), 0);
        let len = (HEAD_OFFSET + 8 - FUO_OFFSET) as u32;
        self.begin_word_read(Phase::ReadFuos, FUO_OFFSET, len, SCRATCH_FUO, self.fuo, mem, out);
    }

    /// Where a log's decided prefix ends, as far as its own words tell: its FUO, or its head if
    /// that is further. Followers learn commits by piggybacking (§4.2) and a stable leader never
    /// writes their FUO, so after many entries a follower's FUO lags far behind what it has
    /// applied; but its replayer applies only decided entries, and the slots below its head hold
    /// them — unless it installed a snapshot, whose entries its log never received: catch-up
    /// checks every slot it copies for that. Without this, a new leader would think itself (or a
    /// follower) more than a log behind and ask for a state transfer it does not need.
    pub(super) fn decided_below(fuo: u64, head: u64) -> u64 {
        fuo.max(head)
    }

    pub(super) fn read_fuo(&self, mem: &impl Memory, pos: usize) -> u64 {
        Leader::decided_below(
            mem.load_u64(Area::Scratch, self.scratch(pos, SCRATCH_FUO)),
            mem.load_u64(Area::Scratch, self.scratch(pos, SCRATCH_HEAD)),
        )
    }

    /// Takes the log heads the FUO step read (a newly confirmed follower's head counts for
    /// recycling from now on).
    fn note_heads_read(&mut self, mem: &impl Memory) {
        for pos in self.followers() {
            // As read now, not the largest ever seen: a replica that restarted applies again
            // from its snapshot or from 0.
            self.recycling.heads[pos] =
                mem.load_u64(Area::Scratch, self.scratch(pos, SCRATCH_HEAD));
            self.recycling.moved_at_ns[pos] = self.now_ns;
            self.recycling.room_below = 0;
        }
    }

    /// Listing 3, lines 4–8: copy the most advanced follower's log into ours.
    pub(super) fn begin_catch_up(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        self.note_heads_read(mem);
        let (source, fuo) = self
            .confirmed
            .iter()
            .map(|pos| (pos, self.read_fuo(mem, pos)))
            .max_by_key(|&(pos, fuo)| (fuo, pos == self.me_pos))
            .expect("we are confirmed");
        if fuo <= self.fuo || source == self.me_pos {
            return self.begin_update_followers(mem, out);
        }
        if fuo - self.fuo > self.layout.slots_count() {
            out.push(Action::Aborted {
                reason: AbortReason::NeedsStateTransfer { behind: fuo - self.fuo },
            });
            self.step_down();
            return;
        }
        self.catch_up.source = source;
        self.catch_up.target = fuo;
        self.catch_up.next = self.fuo;
        self.read_catch_up_batch(out);
    }

    /// Reads the next batch of the source's slots into the staging area.
    fn read_catch_up_batch(&mut self, out: &mut Vec<Action>) {
        let wr = self.next_step(Phase::CatchUp);
        // Only the source is waited for in this step.
        for (pos, w) in self.waits.iter_mut().enumerate() {
            if pos != self.catch_up.source {
                *w = Wait::Idle;
            }
        }
        self.catch_up.count = (self.catch_up.target - self.catch_up.next).min(CATCH_UP_BATCH_SLOTS);
        let slot_bytes = self.layout.slot_bytes();
        let source = self.catch_up.source;
        for k in 0..self.catch_up.count {
            let op = RemoteOp::ReadIntoScratch {
                offset: self.layout.slot_offset(self.catch_up.next + k),
                scratch_offset: self.staging_slot(k),
                len: slot_bytes,
            };
            let last = k + 1 == self.catch_up.count;
            self.post(out, source, wr, op, last);
        }
    }

    /// A catch-up batch arrived: copy it into our log (guarded), then read the next one or, at
    /// the end, adopt the source's FUO.
    ///
    /// A slot of the source that does not hold a complete entry for its index ends the catch-up
    /// and our leadership: the entry is decided (below the source's FUO or head) but this log
    /// cannot give it, and no step of ours can find it again. The source skipped it by
    /// installing a snapshot (its head, which counts as decided, moved past entries its log
    /// never received), or the slot already holds an entry of a later lap (the source applied
    /// this one long ago). Preparing at that index instead would be unsafe: prepare reads a
    /// majority's slots, and where every copy of a decided entry was recycled, it finds none
    /// and decides another value (simulator seed 5302: a leader a log behind prepared at a
    /// decided index whose only copy had been overwritten by the next lap). So we step down
    /// as a leader that needs a state transfer; a replica further on leads and brings us up to
    /// date, by the log or by a snapshot. (Seed 1685 found the hole case first: copying the hole
    /// left our replayer waiting for ever.)
    pub(super) fn end_catch_up_batch(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        let mut slot = std::mem::take(&mut self.slot_buf);
        let mut copied = 0;
        let mut missing = None;
        for k in 0..self.catch_up.count {
            let index = self.catch_up.next + k;
            mem.read(Area::Scratch, self.staging_slot(k), &mut slot);
            match self.layout.decode(index, &slot) {
                Slot::Entry(e) => self.note_decided_elsewhere(index, e.kind, e.value),
                _ => {
                    missing = Some(index);
                    break;
                }
            }
            if !self.write_own_log(mem, self.layout.slot_offset(index), &slot, out) {
                self.slot_buf = slot;
                return;
            }
            copied += 1;
        }
        self.slot_buf = slot;
        if let Some(index) = missing {
            out.push(Action::Aborted {
                reason: AbortReason::NeedsStateTransfer { behind: self.catch_up.target - index },
            });
            self.step_down();
            return;
        }
        self.catch_up.next += copied;
        if self.catch_up.next < self.catch_up.target {
            return self.read_catch_up_batch(out);
        }
        if self.write_own_log(mem, FUO_OFFSET, &self.catch_up.target.to_le_bytes(), out) {
            self.fuo = self.catch_up.target;
            let members = self.members_at_fuo(mem);
            if members != self.config.members {
                // The entries we caught up on changed the configuration (§5.4): our permissions
                // and confirmed set belong to the old one.
                return self.restart(mem, out);
            }
            self.begin_update_followers(mem, out);
        }
    }
}
