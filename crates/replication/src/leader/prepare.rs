//! Prepare (Listing 2, lines 18–28): read the minProposals, pick a higher proposal number,
//! write it, read the slot at our FUO, and adopt the highest-numbered value found.

use super::scratch::{SCRATCH_MIN_PROPOSAL, SCRATCH_SLOT};
use super::steps::Wait;
use super::{AbortReason, Leader, Phase};
use crate::mutation::Mutation;
use crate::{Action, Area, Memory, PositionSet, RemoteOp};
use mu_log::{EntryKind, Slot, MIN_PROPOSAL_OFFSET};

/// What prepare decided.
#[derive(Default)]
pub(super) struct Prepare {
    /// The proposal number of our accepts, picked by the last prepare.
    pub(super) proposal_number: u64,
    /// Prepare found only empty slots: later indexes may skip it until the next abort (§4.2).
    pub(super) prepared: bool,
    /// Followers reported corrupt ([`Action::CorruptPeer`]) since we became leader: their
    /// minProposal is never rewritten (they take no part in prepare), so every prepare after a
    /// late grant let them back would find it again, and once a leadership says enough.
    pub(super) corrupt_reported: PositionSet,
}

/// Rounds of proposal numbers: a number is its round above the low 16 bits (our position), and
/// it stays below 2^63.
const ROUNDS: u64 = 1 << 47;

/// Whether a leader can pick a proposal number above `min_proposal`.
fn exceedable(min_proposal: u64) -> bool {
    (min_proposal >> 16) + 1 < ROUNDS
}

impl Leader {
    /// Listing 2, line 19: read the confirmed followers' minProposals.
    pub(super) fn begin_prepare_read(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        // Prepare runs at or above every confirmed replica's decided prefix, as catch-up made
        // sure (Listing 3): below it a slot may hold an entry of a later lap, which prepare
        // would take for a free slot at an index long decided.
        for pos in self.confirmed.iter() {
            let decided = self.read_fuo(mem, pos);
            assert!(
                decided <= self.fuo,
                "prepare at {} below replica {}'s decided prefix {decided}",
                self.fuo,
                self.replicas.ids()[pos]
            );
        }
        let own = mem.load_u64(Area::Log, MIN_PROPOSAL_OFFSET);
        self.begin_word_read(
            Phase::PrepareRead,
            MIN_PROPOSAL_OFFSET,
            8,
            SCRATCH_MIN_PROPOSAL,
            own,
            mem,
            out,
        );
    }

    /// The minProposal read from position `pos`'s log in the prepare step (ours included).
    fn min_proposal_read(&self, mem: &impl Memory, pos: usize) -> u64 {
        mem.load_u64(Area::Scratch, self.scratch(pos, SCRATCH_MIN_PROPOSAL))
    }

    /// Listing 2, lines 20–23: pick a higher proposal number, write it, read the slot at FUO.
    pub(super) fn begin_prepare_write(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        if self.drop_corrupt_followers(mem, out) {
            return;
        }
        self.pick_proposal_number(mem, out);
        let wr = self.next_step(Phase::PrepareWrite);
        let slot_offset = self.layout.slot_offset(self.fuo);
        let slot_bytes = self.layout.slot_bytes();
        if !self.write_own_log(
            mem,
            MIN_PROPOSAL_OFFSET,
            &self.prepare.proposal_number.to_le_bytes(),
            out,
        ) {
            return;
        }
        mem.read(Area::Log, slot_offset, &mut self.slot_buf);
        mem.write(Area::Scratch, self.scratch(self.me_pos, SCRATCH_SLOT), &self.slot_buf);
        for pos in self.followers() {
            let write = RemoteOp::WriteWord {
                offset: MIN_PROPOSAL_OFFSET,
                value: self.prepare.proposal_number,
            };
            // FIFO: the read lands after the write, so its completion vouches for both.
            self.post(out, pos, wr, write, false);
            let read = RemoteOp::ReadIntoScratch {
                offset: slot_offset,
                scratch_offset: self.scratch(pos, SCRATCH_SLOT),
                len: slot_bytes,
            };
            self.post(out, pos, wr, read, true);
        }
        self.maybe_finish_step(mem, out);
    }

    /// A minProposal no number of ours can exceed was written by no leader: 2^47 rounds of
    /// prepare are out of reach. Only corrupted memory or a faulty peer holds one. Such a
    /// follower is dropped, as an unreachable one would be, rather than stopping every leader
    /// in turn; our own is about to be overwritten. Returns whether it dropped any: then the
    /// step goes on without them, or aborts.
    fn drop_corrupt_followers(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) -> bool {
        let corrupt: PositionSet = self
            .followers()
            .iter()
            .filter(|&pos| self.has_answered(pos) && !exceedable(self.min_proposal_read(mem, pos)))
            .collect();
        if corrupt.is_empty() {
            return false;
        }
        for pos in corrupt {
            self.confirmed.remove(pos);
            self.waits[pos] = Wait::Idle;
            if !self.prepare.corrupt_reported.contains(pos) {
                self.prepare.corrupt_reported.insert(pos);
                out.push(Action::CorruptPeer { peer: self.replicas.ids()[pos] });
            }
        }
        if self.confirmed.count() < self.majority() {
            self.abort(AbortReason::LostMajority, mem, out);
        } else {
            // Without them, a majority may not have answered yet: wait for it (this step
            // comes back here once it has).
            self.maybe_finish_step(mem, out);
        }
        true
    }

    /// Listing 2, line 20: a proposal number above every minProposal read (the valid ones) and
    /// every number we used before.
    fn pick_proposal_number(&mut self, mem: &impl Memory, out: &mut Vec<Action>) {
        if !exceedable(self.min_proposal_read(mem, self.me_pos)) {
            // Reported too, once; overwritten just below.
            out.push(Action::CorruptPeer { peer: self.me });
        }
        let highest = self
            .answered()
            .map(|pos| self.min_proposal_read(mem, pos))
            .filter(|&min| exceedable(min))
            .max()
            .unwrap_or(0)
            .max(self.prepare.proposal_number);
        // Rounds in the high bits, our position in the low ones: numbers of different leaders
        // never collide, and every number we pick is above every one seen.
        let round = (highest >> 16) + 1;
        assert!(round < ROUNDS, "proposal numbers exhausted");
        self.prepare.proposal_number = (round << 16) | (self.me_pos as u64 + 1);
        assert!(self.prepare.proposal_number > highest);
    }

    /// Listing 2, lines 24–28: adopt the highest-numbered value found, or ours.
    pub(super) fn end_prepare(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        let mut best: Option<(u64, EntryKind, usize)> = None;
        let mut all_empty = true;
        let mut slot = std::mem::take(&mut self.slot_buf);
        for pos in 0..self.replicas.len() {
            if !self.has_answered(pos) {
                continue; // a majority answered; the others are not consulted
            }
            mem.read(Area::Scratch, self.scratch(pos, SCRATCH_SLOT), &mut slot);
            match self.layout.decode(self.fuo, &slot) {
                // Nothing accepted for this index here (a stale slot holds the previous lap).
                Slot::Empty | Slot::Stale => {}
                // A torn entry was never accepted there; any value that could have been decided
                // is complete at some replica of every majority, ours included.
                Slot::Incomplete => all_empty = false,
                Slot::Entry(_) if crate::mutation::active(Mutation::SkipPrepareAdopt) => {
                    all_empty = false;
                }
                Slot::Entry(e) => {
                    all_empty = false;
                    if best.is_none_or(|(p, _, _)| e.proposal > p) {
                        self.entry[..e.value.len()].copy_from_slice(e.value);
                        best = Some((e.proposal, e.kind, e.value.len()));
                    }
                }
            }
        }
        self.slot_buf = slot;
        match best {
            Some((_, kind, len)) => {
                // Listing 2, line 34, "If value == myValue": the value found may be our own,
                // accepted by some replicas before an abort; it must not be proposed twice.
                let mine = self
                    .proposals
                    .queue
                    .front()
                    .is_some_and(|p| p.kind == kind && p.value[..] == self.entry[..len]);
                self.next_step(Phase::Accept);
                let adopted = if mine { None } else { Some((kind, len)) };
                if self.accept(self.fuo, adopted, mem, out) {
                    self.try_commit(mem, out);
                }
            }
            None => {
                // §4.2 "Omitting the prepare phase": nothing accepted here or above.
                self.prepare.prepared = all_empty;
                self.next_step(Phase::Accept);
                if self.accept(self.fuo, None, mem, out) {
                    if self.prepare.prepared {
                        self.pump(mem, out); // more of ours, right behind it
                    } else {
                        self.try_commit(mem, out);
                    }
                }
            }
        }
    }
}
