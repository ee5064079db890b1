//! The steps of an attempt: which confirmed followers each waits for, posting, finishing a step,
//! and failures and aborts.

use super::wr_id;
use super::{AbortReason, Leader, Phase};
use crate::{Action, Area, Memory, PositionSet, RemoteOp};
use mu_fabric::Status;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wait {
    /// Not part of the current step.
    Idle,
    Pending,
    Done,
}

impl Leader {
    pub(super) fn next_step(&mut self, phase: Phase) -> u64 {
        self.phase = phase;
        self.step = wr_id::next_step(self.step);
        let followers = self.followers();
        for (pos, w) in self.waits.iter_mut().enumerate() {
            *w = if followers.contains(pos) { Wait::Pending } else { Wait::Idle };
        }
        self.step_wr_id()
    }

    /// The work-request id of the current step's posts.
    pub(super) fn step_wr_id(&self) -> u64 {
        wr_id::wr_id(self.attempt, self.step)
    }

    /// Posts `op` to the replica at `pos`; it may be on the way until a fence says otherwise.
    pub(super) fn post(
        &mut self,
        out: &mut Vec<Action>,
        pos: usize,
        wr_id: u64,
        op: RemoteOp,
        signaled: bool,
    ) {
        self.permissions.unfenced.insert(pos);
        out.push(Action::Post { peer: self.replicas.ids()[pos], wr_id, op, signaled });
    }

    /// A step that gathers one word of every confirmed log into the scratch area: ours (`own`)
    /// at once, the followers' by one-sided reads.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn begin_word_read(
        &mut self,
        phase: Phase,
        offset: u64,
        len: u32,
        field: u64,
        own: u64,
        mem: &mut impl Memory,
        out: &mut Vec<Action>,
    ) {
        let wr = self.next_step(phase);
        mem.store_u64(Area::Scratch, self.scratch(self.me_pos, field), own);
        for pos in self.followers() {
            let op =
                RemoteOp::ReadIntoScratch { offset, scratch_offset: self.scratch(pos, field), len };
            self.post(out, pos, wr, op, true);
        }
        self.maybe_finish_step(mem, out);
    }

    /// Finishes the current step once enough peers answered: every confirmed follower for the
    /// update steps, a majority (ourselves included) for prepare and accept (§4.2, "the leader
    /// waits for just a majority").
    pub(super) fn maybe_finish_step(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        if self.phase == Phase::Accept {
            return self.try_commit(mem, out); // counted per entry
        }
        let done = self.waits.iter().filter(|&&w| w == Wait::Done).count() + 1; // + ourselves
        let pending = self.waits.contains(&Wait::Pending);
        let enough = match self.phase {
            Phase::PrepareRead | Phase::PrepareWrite => done >= self.majority(),
            Phase::Accept => unreachable!("handled above"),
            Phase::CatchUp => self.waits[self.catch_up.source] == Wait::Done,
            Phase::ReadFuos | Phase::UpdateFollowers => !pending,
            Phase::Follower | Phase::Permissions | Phase::Ready => return,
        };
        if !enough {
            return;
        }
        match self.phase {
            Phase::ReadFuos => self.begin_catch_up(mem, out),
            Phase::CatchUp => self.end_catch_up_batch(mem, out),
            Phase::UpdateFollowers => self.start_replicating(mem, out),
            Phase::PrepareRead => self.begin_prepare_write(mem, out),
            Phase::PrepareWrite => self.end_prepare(mem, out),
            Phase::Follower | Phase::Accept | Phase::Permissions | Phase::Ready => {}
        }
    }

    /// A confirmed follower's operation failed.
    pub(super) fn fail(
        &mut self,
        pos: usize,
        status: Status,
        mem: &mut impl Memory,
        out: &mut Vec<Action>,
    ) {
        let peer = self.replicas.ids()[pos];
        match status {
            Status::PeerUnreachable if !self.confirmed.contains(pos) => {} // dropped already
            Status::PeerUnreachable => {
                // A dead follower: drop it, and go on while a majority remains.
                self.confirmed.remove(pos);
                self.waits[pos] = Wait::Idle;
                if self.confirmed.count() < self.majority() {
                    self.abort(AbortReason::LostMajority, mem, out);
                } else if self.phase == Phase::CatchUp && pos == self.catch_up.source {
                    self.abort(AbortReason::CatchUpSourceLost { peer }, mem, out);
                } else {
                    self.maybe_finish_step(mem, out);
                }
            }
            Status::RemoteAccessDenied | Status::Flushed => {
                self.abort(AbortReason::PermissionLost { peer }, mem, out)
            }
            _ => self.abort(AbortReason::Fabric { peer, status }, mem, out),
        }
    }

    /// Writes our own log as its leader; if our permission manager gave the log to another
    /// leader meanwhile, aborts instead and returns false.
    pub(super) fn write_own_log(
        &mut self,
        mem: &mut impl Memory,
        offset: u64,
        data: &[u8],
        out: &mut Vec<Action>,
    ) -> bool {
        if mem.write_guarded(offset, data).is_ok() {
            return true;
        }
        self.abort(AbortReason::PermissionLost { peer: self.me }, mem, out);
        false
    }

    pub(super) fn abort(&mut self, reason: AbortReason, mem: &impl Memory, out: &mut Vec<Action>) {
        out.push(Action::Aborted { reason });
        // "If it still thinks it is the leader, it calls propose again": start over from
        // permissions; the proposal stays pending.
        self.restart(mem, out);
    }

    /// Confirmed followers other than ourselves.
    pub(super) fn followers(&self) -> PositionSet {
        self.confirmed.difference(PositionSet::single(self.me_pos))
    }

    /// Whether `pos` answered the current step (we always have).
    pub(super) fn has_answered(&self, pos: usize) -> bool {
        pos == self.me_pos || (self.confirmed.contains(pos) && self.waits[pos] == Wait::Done)
    }

    pub(super) fn answered(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.replicas.len()).filter(|&pos| self.has_answered(pos))
    }
}
