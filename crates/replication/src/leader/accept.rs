//! Accept and commit (Listing 2, lines 29–36): write entries into our log and the confirmed
//! followers', several in flight once prepare is omitted (§4.2, §7.4), and commit them in index
//! order once a majority holds them.

use super::proposals::Proposal;
use super::wr_id;
use super::{Leader, Phase};
use crate::{Action, Area, Memory, PositionSet, RemoteOp};
use mu_log::{EntryKind, Slot, FUO_OFFSET};

/// An entry in the accept phase.
pub(super) struct InFlight {
    pub(super) index: u64,
    /// It holds a proposal of ours (the oldest not yet committed), not a value adopted in prepare.
    pub(super) mine: bool,
    /// A membership entry: the configuration once it is decided.
    pub(super) members_after: Option<PositionSet>,
    /// Followers whose write of it completed, by position.
    pub(super) acks: PositionSet,
}

/// How long a leader stays idle before it writes its FUO to the followers, so that they apply
/// the last entries without waiting for another (commit piggybacking alone leaves the entries
/// of the last round waiting). Writing it as soon as the queue emptied cost every proposal of
/// a leader proposing back to back an extra write to each follower, and on shared memory a
/// cache line taken from each follower's core (Mu p50 at 64 B on two vCPUs about 740 ns with it,
/// 620 ns without, five alternating runs of each). A next entry within this time tells the
/// followers the same thing; an idle leader's followers learn it this much later.
pub const FUO_PUBLISH_AFTER_NS: u64 = 20_000;

impl Leader {
    /// Entries in the accept phase.
    pub fn in_flight_count(&self) -> usize {
        self.in_flight.len()
    }

    /// Up to date, nothing in flight: replicate the pending values, if any.
    pub(super) fn start_replicating(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        debug_assert!(self.in_flight.is_empty());
        self.commit_decided_elsewhere(out);
        if self.any_admissible() {
            return self.admit_late(mem, out);
        }
        if self.proposals.queue.is_empty() && self.recovering_waits() {
            // A recovering replica joins only once we have prepared without it (`admissible`),
            // and prepare runs for a value: with none of the application's, decide an empty
            // entry of our own. Waiting for the next request instead left such a replica out
            // for as long as none came, and with it every client it answers (membership sweep,
            // seed 1120: it still believed a configuration whose members were gone).
            let mut value = self.proposals.spare.pop().unwrap_or_default();
            value.clear();
            let noop = Proposal {
                kind: EntryKind::Noop,
                value,
                internal: true,
                exposed: false,
                exposed_span: (0, 0),
                decided_at: None,
            };
            self.proposals.queue.push_back(noop);
        }
        if self.proposals.queue.is_empty() {
            self.phase = Phase::Ready;
            // Idle: the followers learn the last entries from our FUO, soon (a tick writes it),
            // unless a next entry tells them first (commit piggybacking).
            if self.fuo_due_at_ns.is_none() && self.fuo > self.fuo_published {
                self.fuo_due_at_ns = Some(self.now_ns.saturating_add(FUO_PUBLISH_AFTER_NS));
            }
            return;
        }
        if !self.make_room(self.fuo, mem) {
            // No room until the log heads move on (§5.3): never overwrite an entry a confirmed
            // replica has not applied.
            self.phase = Phase::Ready;
            return;
        }
        if self.prepare.prepared {
            self.next_step(Phase::Accept);
            self.pump(mem, out);
        } else {
            self.begin_prepare_read(mem, out);
        }
    }

    /// Nothing more to replicate for now: tell the confirmed followers our FUO, so that they
    /// apply the last entries at once instead of when the next entry arrives (commit
    /// piggybacking alone leaves the last entries, as many as were in flight, waiting). The
    /// write goes after every slot we wrote them on the same connection, as in Listing 4, and
    /// is unsignaled: off the path of any proposal. A failure still comes back and aborts.
    pub(super) fn publish_fuo(&mut self, out: &mut Vec<Action>) {
        if self.fuo <= self.fuo_published {
            return;
        }
        self.fuo_published = self.fuo;
        let wr = self.step_wr_id();
        for pos in self.followers() {
            let op = RemoteOp::WriteWord { offset: FUO_OFFSET, value: self.fuo };
            self.post(out, pos, wr, op, false);
        }
    }

    /// With prepare omitted (§4.2), puts queued proposals in flight, one index after the other,
    /// while fewer than `outstanding_max` are (§7.4) and the log has room. Replicas joining
    /// late wait until nothing is in flight.
    pub(super) fn pump(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        debug_assert!(self.phase == Phase::Accept && self.prepare.prepared);
        while self.proposals.mine_in_flight < self.proposals.queue.len()
            && self.in_flight.len() < self.outstanding_max
            && !self.any_admissible()
        {
            // A membership entry travels alone (§5.4): the entries after it are decided by the
            // configuration it makes, which this leader has not prepared with yet.
            if self.proposals.queue[self.proposals.mine_in_flight].decided_at.is_some() {
                break; // committed as ours once the ones before it are
            }
            let change_next =
                self.proposals.queue[self.proposals.mine_in_flight].kind == EntryKind::Membership;
            let change_in_flight = self.in_flight.back().is_some_and(|e| e.members_after.is_some());
            if change_in_flight || (change_next && !self.in_flight.is_empty()) {
                break;
            }
            let index = self.fuo + self.in_flight.len() as u64;
            if !self.make_room(index, mem) {
                break;
            }
            if !self.accept(index, None, mem, out) {
                return; // aborted
            }
        }
        self.try_commit(mem, out);
    }

    /// Listing 2, lines 29–36: write an entry at `index` (our log first, then the confirmed
    /// followers') and put it in flight: the oldest proposal not in flight yet, or the value
    /// prepare `adopted` (in `self.entry`). Returns false if it aborted instead (our log was
    /// given to another leader).
    pub(super) fn accept(
        &mut self,
        index: u64,
        adopted: Option<(EntryKind, usize)>,
        mem: &mut impl Memory,
        out: &mut Vec<Action>,
    ) -> bool {
        debug_assert_eq!(index, self.fuo + self.in_flight.len() as u64);
        // Commit piggybacking (§4.2): the entries below `index` not yet decided as far as we know.
        // This entry tells the followers what a pending FUO write would have.
        let in_flight_before = (index - self.fuo) as u16;
        self.fuo_due_at_ns = None;
        let (kind, value) = match adopted {
            Some((kind, len)) => (kind, &self.entry[..len]),
            None => {
                let p = &self.proposals.queue[self.proposals.mine_in_flight];
                (p.kind, &p.value[..])
            }
        };
        let members_after = (kind == EntryKind::Membership).then(|| self.apply_change(value));
        let bytes = self
            .layout
            .encode_pipelined(
                index,
                self.prepare.proposal_number,
                kind,
                value,
                in_flight_before,
                &mut self.slot_buf,
            )
            .expect("value size checked at propose");
        let offset = self.layout.slot_offset(index);
        let slot_buf = std::mem::take(&mut self.slot_buf);
        let written = self.write_own_log(mem, offset, &slot_buf[..bytes], out);
        self.slot_buf = slot_buf;
        if !written {
            return false;
        }
        let mine = adopted.is_none();
        if mine {
            let p = &mut self.proposals.queue[self.proposals.mine_in_flight];
            if !p.exposed {
                p.exposed = true;
                p.exposed_span = (index, index);
                if !p.internal {
                    out.push(Action::Exposed);
                }
            } else {
                p.exposed_span = (p.exposed_span.0.min(index), p.exposed_span.1.max(index));
            }
            self.proposals.mine_in_flight += 1;
        }
        self.in_flight.push_back(InFlight { index, mine, members_after, acks: PositionSet::EMPTY });
        let wr = wr_id::wr_id(self.attempt, wr_id::accept_step(index));
        for pos in self.followers() {
            let op = RemoteOp::WriteFromLog { offset, len: bytes as u32 };
            self.post(out, pos, wr, op, true);
        }
        true
    }

    /// Commits the entries in flight that a majority (ourselves included) holds, in index order
    /// (§4.2, "the leader waits for just a majority"), then puts more in flight or, with none
    /// left, goes on with what is queued.
    pub(super) fn try_commit(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        let mut committed = false;
        while let Some(front) = self.in_flight.front() {
            if front.acks.count() + 1 < self.majority() {
                break;
            }
            let (index, mine, members_after) = (front.index, front.mine, front.members_after);
            debug_assert_eq!(index, self.fuo);
            if !self.write_own_log(mem, FUO_OFFSET, &(index + 1).to_le_bytes(), out) {
                return;
            }
            self.in_flight.pop_front();
            self.fuo = index + 1;
            let internal = mine && self.proposals.queue.front().is_some_and(|p| p.internal);
            out.push(Action::Committed { index, mine: mine && !internal });
            if mine {
                let p = self.proposals.queue.pop_front().expect("a proposal of ours was in flight");
                self.proposals.spare.push(p.value);
                self.proposals.mine_in_flight -= 1;
            } else {
                // A value adopted in prepare: it may be one of ours, not the oldest.
                let mut slot = std::mem::take(&mut self.scan_buf);
                slot.resize(self.layout.slot_bytes() as usize, 0);
                mem.read(Area::Log, self.layout.slot_offset(index), &mut slot);
                if let Slot::Entry(e) = self.layout.decode(index, &slot) {
                    self.note_decided_elsewhere(index, e.kind, e.value);
                }
                self.scan_buf = slot;
            }
            committed = true;
            if members_after.is_some_and(|m| m != self.config.members) {
                assert!(self.in_flight.is_empty(), "a membership entry is alone in flight");
                // Tell the followers at once that it is decided: a replica it removes gets no
                // later entry to learn it from. Then start over under the new configuration
                // (our log now holds the entry below our FUO).
                self.publish_fuo(out);
                return self.restart(mem, out);
            }
        }
        if self.in_flight.is_empty() {
            // Go on with what is queued. We may have committed someone else's value, found in
            // prepare: ours goes to the next index.
            self.start_replicating(mem, out);
        } else if committed && self.prepare.prepared {
            self.pump(mem, out);
        }
    }
}
