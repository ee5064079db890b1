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

/// What the leader knows of its permission requests and grants.
pub(super) struct Permissions {
    /// After a majority granted, how long to wait for the others ([`super::LeaderConfig`]).
    pub(super) grace_ns: u64,
    /// Positions the runtime's failure detector considers failed ([`Leader::set_suspected`]):
    /// the grace period of the permission phase does not wait for them.
    pub(super) suspected: PositionSet,
    /// Positions that granted in this attempt's permission phase.
    pub(super) granted: PositionSet,
    /// When the grants of this attempt first made a majority.
    pub(super) majority_granted_at_ns: Option<u64>,
    /// Bumped on every round of permission requests (a new attempt, or asking the replicas we
    /// lead without again).
    pub(super) round: u32,
    /// Positions asked for permission in this round: grants from others are not counted.
    pub(super) asked: PositionSet,
    /// Positions we posted to since the last fence: our operations may still be on the way.
    pub(super) unfenced: PositionSet,
    /// Positions with a fence in flight.
    pub(super) fencing: PositionSet,
    /// Positions to ask for permission once their fence completes.
    pub(super) ask_after_fence: PositionSet,
    /// Replicas that granted permission after the confirmed set was formed, or while
    /// recovering: they join it once brought up to date ("growing the confirmed set later",
    /// §4.2).
    pub(super) late: PositionSet,
    /// Replicas whose last grant said they are recovering ([`Grant::Recovering`]).
    pub(super) recovering: PositionSet,
}

impl Permissions {
    pub(super) fn new(grace_ns: u64) -> Permissions {
        Permissions {
            grace_ns,
            suspected: PositionSet::EMPTY,
            granted: PositionSet::EMPTY,
            majority_granted_at_ns: None,
            round: 0,
            asked: PositionSet::EMPTY,
            unfenced: PositionSet::EMPTY,
            fencing: PositionSet::EMPTY,
            ask_after_fence: PositionSet::EMPTY,
            late: PositionSet::EMPTY,
            recovering: PositionSet::EMPTY,
        }
    }
}

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
        if !self.permissions.asked.contains(pos) {
            return; // not asked in this round (maybe waiting for a fence): not a grant to use
        }
        self.permissions.recovering.set(pos, grant == Grant::Recovering);
        if self.phase != Phase::Permissions || self.permissions.recovering.contains(pos) {
            // Too late for the confirmed set being used, or not to be counted in it: it joins
            // at the next quiet moment it may.
            if !self.confirmed.contains(pos) {
                self.permissions.late.insert(pos);
                let quiet = self.phase == Phase::Ready && self.proposals.queue.is_empty();
                if quiet && (self.any_admissible() || self.recovering_waits()) {
                    self.start_replicating(mem, out);
                }
            }
            return;
        }
        self.now_ns = self.now_ns.max(now_ns);
        self.permissions.granted.insert(pos);
        if self.permissions.granted.count() >= self.majority()
            && self.permissions.majority_granted_at_ns.is_none()
        {
            self.permissions.majority_granted_at_ns = Some(now_ns);
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
        self.permissions.suspected = PositionSet::from_bits(mask);
    }

    /// A new attempt under the configuration `refresh` found: asks its members for permission.
    pub(super) fn ask_permissions(&mut self, out: &mut Vec<Action>) {
        self.attempt = self.attempt.wrapping_add(1);
        self.phase = Phase::Permissions;
        self.prepare.prepared = false;
        // Proposals stay queued, to be proposed again from the oldest: an entry that was in
        // flight may have been accepted somewhere, and prepare finds it if it matters.
        self.in_flight.clear();
        self.proposals.mine_in_flight = 0;
        self.permissions.granted = PositionSet::EMPTY;
        self.confirmed = PositionSet::EMPTY;
        self.recycling.room_below = 0;
        self.permissions.late = PositionSet::EMPTY;
        self.waits.fill(Wait::Idle);
        self.permissions.majority_granted_at_ns = None;
        self.permissions.round = self.permissions.round.wrapping_add(1);
        self.permissions.asked = PositionSet::EMPTY;
        self.permissions.ask_after_fence = PositionSet::EMPTY;
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
        self.permissions.round = self.permissions.round.wrapping_add(1);
        for pos in 0..self.replicas.len() {
            if self.is_member(pos) && !self.confirmed.contains(pos) {
                self.permissions.asked.remove(pos);
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
        if pos != self.me_pos
            && self.permissions.unfenced.union(self.permissions.fencing).contains(pos)
        {
            self.permissions.ask_after_fence.insert(pos);
            if !self.permissions.fencing.contains(pos) {
                self.post_fence(pos, out);
            }
            return;
        }
        self.permissions.ask_after_fence.remove(pos);
        self.permissions.asked.insert(pos);
        out.push(Action::RequestPermission {
            peer: self.replicas.ids()[pos],
            round: self.permissions.round,
        });
    }

    /// A signaled read behind everything we posted to `pos`: operations on one connection land
    /// in order (RC queue pairs are FIFO), so its completion, success or failure, means every
    /// earlier operation has landed or never will (after a failure the connection flushes what
    /// follows).
    fn post_fence(&mut self, pos: usize, out: &mut Vec<Action>) {
        let wr = wr_id::fence(self.permissions.round);
        let op = RemoteOp::ReadIntoScratch {
            offset: FUO_OFFSET,
            scratch_offset: self.scratch(pos, SCRATCH_FENCE),
            len: 8,
        };
        out.push(Action::Post { peer: self.replicas.ids()[pos], wr_id: wr, op, signaled: true });
        self.permissions.unfenced.remove(pos);
        self.permissions.fencing.insert(pos);
    }

    /// A fence to `pos` completed: ask it now if that was waiting.
    pub(super) fn on_fence(&mut self, pos: usize, out: &mut Vec<Action>) {
        self.permissions.fencing.remove(pos);
        if self.permissions.ask_after_fence.contains(pos) {
            self.ask(pos, out);
        }
    }

    /// Whether a request for permission waits for a fence (operations we posted to that replica
    /// may still land); for status and tests.
    pub fn fence_pending(&self) -> bool {
        !self.permissions.ask_after_fence.is_empty()
    }

    /// The replicas (a mask of positions) that may be asked for permission before this replica
    /// leads again: a runtime may send a new leadership's first requests the moment its
    /// election picks it, before the engine hears of it (one thread hand-off fewer in a
    /// failover). Those with nothing of ours possibly on the way to them, ourselves always;
    /// none while we lead. The others must be fenced first ([`Leader::ask`] says why); their
    /// requests go out with the engine's.
    pub fn askable_ahead(&self) -> u64 {
        if self.phase != Phase::Follower {
            return 0;
        }
        let everyone = PositionSet::first(self.replicas.len());
        let in_doubt = self.permissions.unfenced.union(self.permissions.fencing);
        everyone.difference(in_doubt).bits() | PositionSet::single(self.me_pos).bits()
    }

    /// As a follower, fences every replica we posted to in a past leadership, so that a later
    /// election may ask it at once ([`Leader::askable_ahead`]). A fence only reads: it changes
    /// nothing on the replica, and its completion, success or failure, clears the doubt.
    pub fn fence_past_posts(&mut self, out: &mut Vec<Action>) {
        if self.phase != Phase::Follower {
            return;
        }
        let mut unfenced = self.permissions.unfenced.difference(self.permissions.fencing);
        unfenced.remove(self.me_pos);
        for pos in unfenced {
            self.post_fence(pos, out);
        }
    }

    pub(super) fn maybe_confirm(
        &mut self,
        now_ns: u64,
        mem: &mut impl Memory,
        out: &mut Vec<Action>,
    ) {
        let Some(since) = self.permissions.majority_granted_at_ns else { return };
        let everyone = (0..self.replicas.len()).all(|pos| {
            self.permissions.granted.contains(pos)
                || !self.is_member(pos)
                || self.permissions.suspected.contains(pos)
        });
        let grace_over = now_ns.saturating_sub(since) >= self.permissions.grace_ns;
        // We must own our own log before touching it.
        if !self.permissions.granted.contains(self.me_pos) || !(everyone || grace_over) {
            return;
        }
        self.confirmed = self.permissions.granted;
        self.recycling.room_below = 0;
        self.begin_read_fuos(mem, out);
    }

    /// Grows the confirmed set with the replicas that granted permission late (§4.2): they
    /// join it, and the leader-change steps run again for the new set (read FUOs, catch up if
    /// a newcomer knows more decided entries, bring every lagging follower up to date), after
    /// which replication goes on. Prepare omission stays: the newcomers hold no decided value the
    /// old majority did not.
    pub(super) fn admit_late(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        for pos in self.permissions.late {
            if self.admissible(pos) {
                self.confirmed.insert(pos);
                self.recycling.room_below = 0;
                self.permissions.late.remove(pos);
            }
        }
        self.begin_read_fuos(mem, out);
    }

    /// Whether the late replica at `pos` may join now. A recovering one waits until we have
    /// prepared without it: prepare found nothing accepted at our FUO or after it in a majority
    /// that did not include it, so every value ever chosen is below our FUO, in our log, and
    /// update-followers gives it to the newcomer; what it forgot no longer matters.
    fn admissible(&self, pos: usize) -> bool {
        self.permissions.late.contains(pos)
            && (!self.permissions.recovering.contains(pos) || self.prepare.prepared)
    }

    pub(super) fn any_admissible(&self) -> bool {
        self.permissions.late.iter().any(|pos| self.admissible(pos))
    }

    /// Whether a late, recovering replica waits for us to prepare before it may join.
    pub(super) fn recovering_waits(&self) -> bool {
        !self.prepare.prepared
            && !self.permissions.late.intersection(self.permissions.recovering).is_empty()
    }
}
