//! The application's proposals: queued, exposed once written, and found decided by another
//! leader's hand (Listing 2, line 34).

use super::{Leader, Phase, ProposeError};
use crate::{Action, Area, Memory};
use mu_log::{EntryKind, Slot};
use std::collections::VecDeque;

/// The values the leader was asked to get decided.
pub(super) struct Proposals {
    /// The application's values not yet committed, oldest first; the first `mine_in_flight` are
    /// in the accept phase.
    pub(super) queue: VecDeque<Proposal>,
    pub(super) mine_in_flight: usize,
    /// Value buffers of committed proposals, for reuse: the accept path does not allocate.
    pub(super) spare: Vec<Vec<u8>>,
}

impl Proposals {
    /// Room for `outstanding_max` proposals of up to `slot_bytes`, allocated now.
    pub(super) fn new(outstanding_max: usize, slot_bytes: usize) -> Proposals {
        Proposals {
            queue: VecDeque::with_capacity(outstanding_max),
            mine_in_flight: 0,
            spare: (0..outstanding_max).map(|_| mu_log::written_room(slot_bytes)).collect(),
        }
    }
}

/// A value the leader is trying to get decided.
pub(super) struct Proposal {
    pub(super) kind: EntryKind,
    pub(super) value: Vec<u8>,
    /// An empty entry of the engine's own (see [`Leader::start_replicating`]), not the
    /// application's: committed as not ours, and never counted among the application's.
    pub(super) internal: bool,
    /// Written into a log at least once ([`Action::Exposed`] told).
    pub(super) exposed: bool,
    /// The lowest and highest indices it was written at (meaningful once `exposed`).
    pub(super) exposed_span: (u64, u64),
    /// Found decided at this index by another leader's hand (see
    /// [`Leader::note_decided_elsewhere`]): committed as ours once it is the oldest, never
    /// proposed again.
    pub(super) decided_at: Option<u64>,
}

impl Leader {
    /// The application's proposals not committed yet (in flight or waiting), not the engine's
    /// own empty entries.
    pub fn proposals_count(&self) -> usize {
        self.proposals.queue.iter().filter(|p| !p.internal).count()
    }

    /// Proposes `value`. Its decision arrives as `Action::Committed { mine: true, .. }`; the
    /// values of one leadership are decided in the order they were proposed.
    pub fn propose(
        &mut self,
        kind: EntryKind,
        value: &[u8],
        mem: &mut impl Memory,
        out: &mut Vec<Action>,
    ) -> Result<(), ProposeError> {
        if self.phase == Phase::Follower {
            return Err(ProposeError::NotLeader);
        }
        if self.proposals_count() >= self.outstanding_max {
            return Err(ProposeError::Busy);
        }
        let max = self.layout.max_value_bytes();
        if value.len() > max {
            return Err(ProposeError::TooLarge { len: value.len(), max });
        }
        if kind == EntryKind::Membership {
            self.check_change(value)?;
        }
        let mut buf = self.proposals.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(value);
        self.proposals.queue.push_back(Proposal {
            kind,
            value: buf,
            internal: false,
            exposed: false,
            exposed_span: (0, 0),
            decided_at: None,
        });
        match self.phase {
            Phase::Ready => self.start_replicating(mem, out),
            // Not while prepare's own values are in flight (it found slots taken, so it must run
            // again before ours): they go out once those commit (`start_replicating`).
            Phase::Accept if self.prepare.prepared => self.pump(mem, out),
            _ => {}
        }
        Ok(())
    }

    pub(super) fn drop_proposals(&mut self) {
        for p in self.proposals.queue.drain(..) {
            self.proposals.spare.push(p.value);
        }
        self.in_flight.clear();
        self.proposals.mine_in_flight = 0;
    }

    /// Drops the proposals waiting for room in the log (the runtime gave up on them: "log
    /// full") and returns how many. Drops nothing while some are being replicated: then their
    /// outcome must be awaited.
    pub fn cancel_waiting_proposals(&mut self) -> usize {
        if !self.waiting_for_room() {
            return 0;
        }
        let count = self.proposals_count();
        self.drop_proposals();
        count
    }

    /// Listing 2, line 34 ("if value == myValue") for any index, not only the one being
    /// prepared: an entry decided at `index` other than by our own accept (copied from a more
    /// advanced follower in catch-up, or adopted in prepare) may hold one of our proposals
    /// waiting behind it, written by an attempt that aborted and then taken over by another
    /// leader. Proposed again, it would be decided twice, and a request acknowledged once would
    /// take effect twice (simulator seed 120028, two leaders at once). It is marked decided at
    /// `index` instead, and committed as ours once the proposals before it are.
    pub(super) fn note_decided_elsewhere(&mut self, index: u64, kind: EntryKind, value: &[u8]) {
        let waiting = self.proposals.queue.iter_mut();
        let mut mine = waiting.filter(|p| p.exposed && !p.internal && p.decided_at.is_none());
        if let Some(p) = mine.find(|p| p.kind == kind && p.value[..] == *value) {
            p.decided_at = Some(index);
        }
    }

    /// [`Leader::note_decided_elsewhere`] for the entries our own log holds at `from..to`,
    /// decided by another leader that wrote them there (simulator seed 120018: a leader paused
    /// with two entries in flight found, once resumed, that the next leader had decided both
    /// and written them into its log). Slots of an earlier or later lap, and holes a snapshot
    /// left, hold nothing for their index and are passed over.
    ///
    /// Returns the index of an exposure of a proposal still waiting that falls in `from..to`
    /// but before the lap the log still holds, if there is one: whether that proposal was
    /// decided there cannot be read any more (see [`super::AbortReason::OutcomeUnknown`]).
    /// Exposures below `from` were looked at when the FUO passed them. The check takes the span
    /// from a proposal's lowest to its highest exposure, so it may report one that skipped those
    /// indices: a needless step-down, never a missed one.
    pub(super) fn note_log_decided(
        &mut self,
        mem: &impl Memory,
        from: u64,
        to: u64,
    ) -> Option<u64> {
        if !self.proposals.queue.iter().any(|p| p.exposed && !p.internal && p.decided_at.is_none())
        {
            return None;
        }
        let readable = from.max(to.saturating_sub(self.layout.slots_count()));
        let unread = self
            .proposals
            .queue
            .iter()
            .filter(|p| p.exposed && !p.internal && p.decided_at.is_none())
            .find(|p| p.exposed_span.1 >= from && p.exposed_span.0 < readable)
            .map(|p| p.exposed_span.0.max(from));
        if unread.is_some() {
            return unread;
        }
        let from = readable;
        // `scan_buf`: this runs in aborts, while `slot_buf` may be taken.
        let mut slot = std::mem::take(&mut self.scan_buf);
        slot.resize(self.layout.slot_bytes() as usize, 0);
        for index in from..to {
            mem.read(Area::Log, self.layout.slot_offset(index), &mut slot);
            if let Slot::Entry(e) = self.layout.decode(index, &slot) {
                self.note_decided_elsewhere(index, e.kind, e.value);
            }
        }
        self.scan_buf = slot;
        None
    }

    /// Commits, as ours, the oldest proposals already decided elsewhere
    /// ([`Leader::note_decided_elsewhere`]).
    pub(super) fn commit_decided_elsewhere(&mut self, out: &mut Vec<Action>) {
        while self.proposals.mine_in_flight == 0 {
            let Some(index) = self.proposals.queue.front().and_then(|p| p.decided_at) else {
                break;
            };
            let p = self.proposals.queue.pop_front().expect("a front");
            self.proposals.spare.push(p.value);
            out.push(Action::Committed { index, mine: true });
        }
    }
}
