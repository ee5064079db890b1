//! Asking the members for write permission to their logs (Listing 2, lines 9–12; §5.2), fencing
//! what we may still have on the way to them first, forming the confirmed set, and growing it
//! with late grants (§4.2).

use super::scratch::SCRATCH_FENCE;
use super::steps::Wait;
use super::wr_id;
use super::{Grant, Leader, Phase};
use crate::{Action, Memory, PositionSet, RemoteOp};
use mu_fabric::NodeId;
use mu_log::FUO_OFFSET;

impl Leader {
    /// Asks every replica for permission again, keeping a pending proposal: the runtime calls
    /// this when a majority has not answered in time (requests or answers lost with a
    /// connection). Does nothing outside the permission phase.
    pub fn retry_permissions(&mut self, mem: &impl Memory, out: &mut Vec<Action>) {
        if self.phase == Phase::Permissions {
            self.restart(mem, out);
        }
    }

    /// `peer`'s permission manager granted us write access to its log.
    pub fn on_permission(
        &mut self,
        peer: NodeId,
        grant: Grant,
        now_ns: u64,
        mem: &mut impl Memory,
        out: &mut Vec<Action>,
    ) {
        let Some(pos) = self.replicas.position(peer) else { return };
        if self.phase == Phase::Follower || !self.is_member(pos) {
            return; // not leading, or not a replica of the configuration we lead
        }
        if !self.asked.contains(pos) {
            return; // not asked in this round (maybe waiting for a fence): not a grant to use
        }
        self.recovering.set(pos, grant == Grant::Recovering);
        if self.phase != Phase::Permissions || self.recovering.contains(pos) {
            // Too late for the confirmed set being used, or not to be counted in it: it joins
            // at the next quiet moment it may.
            if !self.confirmed.contains(pos) {
                self.late.insert(pos);
                let quiet = self.phase == Phase::Ready && self.queue.is_empty();
                if quiet && (self.any_admissible() || self.recovering_waits()) {
                    self.start_replicating(mem, out);
                }
            }
            return;
        }
        self.now_ns = self.now_ns.max(now_ns);
        self.granted.insert(pos);
        if self.granted.count() >= self.majority() && self.majority_granted_at_ns.is_none() {
            self.majority_granted_at_ns = Some(now_ns);
        }
        self.maybe_confirm(now_ns, mem, out);
    }

    /// The replicas the failure detector considers failed now, as a mask of positions in the
    /// replica set. §4.2 waits "briefly" for the replicas beyond a majority so that they join
    /// the confirmed set; a replica thought failed would not answer within the grace period,
    /// so waiting for it only delays the new leader (by the whole grace period, in every
    /// failover: the old leader is always among the missing). Safety does not depend on this:
    /// the confirmed set is still formed of replicas that granted, a majority at least, and a
    /// suspected replica that grants later joins it as a late one.
    pub fn set_suspected(&mut self, mask: u64) {
        self.suspected = PositionSet::from_bits(mask);
    }

    /// A new attempt under the configuration `refresh` found: asks its members for permission.
    pub(super) fn ask_permissions(&mut self, out: &mut Vec<Action>) {
        self.attempt = self.attempt.wrapping_add(1);
        self.phase = Phase::Permissions;
        self.prepared = false;
        // Proposals stay queued, to be proposed again from the oldest: an entry that was in
        // flight may have been accepted somewhere, and prepare finds it if it matters.
        self.in_flight.clear();
        self.mine_in_flight = 0;
        self.granted = PositionSet::EMPTY;
        self.confirmed = PositionSet::EMPTY;
        self.room_below = 0;
        self.late = PositionSet::EMPTY;
        self.waits.fill(Wait::Idle);
        self.majority_granted_at_ns = None;
        self.round = self.round.wrapping_add(1);
        self.asked = PositionSet::EMPTY;
        self.ask_after_fence = PositionSet::EMPTY;
        for pos in 0..self.replicas.len() {
            if self.is_member(pos) {
                self.ask(pos, out);
            }
        }
    }

    /// Asks the members we lead without (not confirmed) for permission again, in a new round:
    /// the runtime calls this now and then while leading (a request or its answer may have been
    /// lost with a connection, or the replica was dropped as unreachable and is back). A grant
    /// that arrives grows the confirmed set (§4.2). The confirmed ones are not asked: a
    /// permission manager that gave its log to another leader in the meantime would give it back
    /// without a sign, under a leader that omits prepare.
    pub fn ask_missing(&mut self, out: &mut Vec<Action>) {
        if matches!(self.phase, Phase::Follower | Phase::Permissions) {
            return;
        }
        self.round = self.round.wrapping_add(1);
        for pos in 0..self.replicas.len() {
            if self.is_member(pos) && !self.confirmed.contains(pos) {
                self.asked.remove(pos);
                self.ask(pos, out);
            }
        }
    }

    /// Asks `pos` for permission in the current round, or, while operations we posted to it may
    /// still be on the way, once a fence says they are not.
    ///
    /// Why: a write of an aborted attempt can still be on the wire when we ask again. If the
    /// replica revoked us for another leader in between (which then decided entries in its
    /// log), and now grants us again, that late write lands over a decided entry — with a lower
    /// proposal number, as an acceptor would never accept it — and a later catch-up copies it as
    /// decided. Revocation stops writes while it holds; only we know what we left in flight.
    /// (Found by the simulator, seed 6985: the old leader's accept to a slow follower landed
    /// after that follower granted it permission again, and the old leader caught up from that
    /// follower's log, taking back its own never-chosen value as decided.)
    fn ask(&mut self, pos: usize, out: &mut Vec<Action>) {
        if pos != self.me_pos && self.unfenced.union(self.fencing).contains(pos) {
            self.ask_after_fence.insert(pos);
            if !self.fencing.contains(pos) {
                self.post_fence(pos, out);
            }
            return;
        }
        self.ask_after_fence.remove(pos);
        self.asked.insert(pos);
        out.push(Action::RequestPermission { peer: self.replicas.ids()[pos], round: self.round });
    }

    /// A signaled read behind everything we posted to `pos`: operations on one connection land
    /// in order (RC queue pairs are FIFO), so its completion, success or failure, means every
    /// earlier operation has landed or never will (after a failure the connection flushes what
    /// follows).
    fn post_fence(&mut self, pos: usize, out: &mut Vec<Action>) {
        let wr = wr_id::fence(self.round);
        let op = RemoteOp::ReadIntoScratch {
            offset: FUO_OFFSET,
            scratch_offset: self.scratch(pos, SCRATCH_FENCE),
            len: 8,
        };
        out.push(Action::Post { peer: self.replicas.ids()[pos], wr_id: wr, op, signaled: true });
        self.unfenced.remove(pos);
        self.fencing.insert(pos);
    }

    /// A fence to `pos` completed: ask it now if that was waiting.
    pub(super) fn on_fence(&mut self, pos: usize, out: &mut Vec<Action>) {
        self.fencing.remove(pos);
        if self.ask_after_fence.contains(pos) {
            self.ask(pos, out);
        }
    }

    /// Whether a request for permission waits for a fence (operations we posted to that replica
    /// may still land); for status and tests.
    pub fn fence_pending(&self) -> bool {
        !self.ask_after_fence.is_empty()
    }

    pub(super) fn maybe_confirm(
        &mut self,
        now_ns: u64,
        mem: &mut impl Memory,
        out: &mut Vec<Action>,
    ) {
        let Some(since) = self.majority_granted_at_ns else { return };
        let everyone = (0..self.replicas.len()).all(|pos| {
            self.granted.contains(pos) || !self.is_member(pos) || self.suspected.contains(pos)
        });
        let grace_over = now_ns.saturating_sub(since) >= self.permission_grace_ns;
        // We must own our own log before touching it.
        if !self.granted.contains(self.me_pos) || !(everyone || grace_over) {
            return;
        }
        self.confirmed = self.granted;
        self.room_below = 0;
        self.begin_read_fuos(mem, out);
    }

    /// Grows the confirmed set with the replicas that granted permission late (§4.2): they
    /// join it, and the leader-change steps run again for the new set (read FUOs, catch up if
    /// a newcomer knows more decided entries, bring every lagging follower up to date), after
    /// which replication goes on. Prepare omission stays: the newcomers hold no decided value the
    /// old majority did not.
    pub(super) fn admit_late(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        for pos in self.late {
            if self.admissible(pos) {
                self.confirmed.insert(pos);
                self.room_below = 0;
                self.late.remove(pos);
            }
        }
        self.begin_read_fuos(mem, out);
    }

    /// Whether the late replica at `pos` may join now. A recovering one waits until we have
    /// prepared without it: prepare found nothing accepted at our FUO or after it in a majority
    /// that did not include it, so every value ever chosen is below our FUO, in our log, and
    /// update-followers gives it to the newcomer; what it forgot no longer matters.
    fn admissible(&self, pos: usize) -> bool {
        self.late.contains(pos) && (!self.recovering.contains(pos) || self.prepared)
    }

    pub(super) fn any_admissible(&self) -> bool {
        self.late.iter().any(|pos| self.admissible(pos))
    }

    /// Whether a late, recovering replica waits for us to prepare before it may join.
    pub(super) fn recovering_waits(&self) -> bool {
        !self.prepared && !self.late.intersection(self.recovering).is_empty()
    }
}
