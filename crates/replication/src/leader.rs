//! The leader's replicator (Mu paper §4.1 Listing 2, §4.2 Listings 3 and 4).

use crate::membership::{self, Change};
use crate::mutation::Mutation;
use crate::{Action, Area, Memory, RemoteOp, ReplicaSet, OUTSTANDING_MAX};
use mu_fabric::{Completion, NodeId, Status};
use mu_log::{
    EntryKind, LogLayout, Slot, ADMITTED_OFFSET, FUO_OFFSET, HEAD_OFFSET, MIN_PROPOSAL_OFFSET,
};
use std::collections::VecDeque;

/// How a leader is set up.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub me: NodeId,
    pub replicas: ReplicaSet,
    pub layout: LogLayout,
    /// After a majority granted permission, how long to wait for the others before going on
    /// ("briefly waiting for responses from all replicas", §4.2).
    pub permission_grace_ns: u64,
    /// How many entries may be in the accept phase at once (§7.4, "multiple outstanding
    /// requests"), 1 to [`OUTSTANDING_MAX`]; also how many proposals may wait at once.
    pub outstanding_max: usize,
}

/// Where the leader is in its work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not leading.
    Follower,
    /// Asking every replica for write permission (Listing 2, lines 9–12).
    Permissions,
    /// Reading the confirmed followers' FUOs (Listing 3, lines 1–3).
    ReadFuos,
    /// Copying the most advanced follower's log into ours (Listing 3, lines 5–8).
    CatchUp,
    /// Copying our log into the followers that lag (Listing 4).
    UpdateFollowers,
    /// Up to date, nothing to propose.
    Ready,
    /// Prepare: reading minProposals (Listing 2, line 19).
    PrepareRead,
    /// Prepare: writing the proposal number and reading the slot at FUO (lines 21–23).
    PrepareWrite,
    /// Accept: writing values to the confirmed followers (lines 30–32), up to
    /// `outstanding_max` entries in flight once prepare is omitted.
    Accept,
}

impl Phase {
    /// Every phase, in the order of the enum (`phase as usize` indexes it).
    pub const ALL: [Phase; 9] = [
        Phase::Follower,
        Phase::Permissions,
        Phase::ReadFuos,
        Phase::CatchUp,
        Phase::UpdateFollowers,
        Phase::Ready,
        Phase::PrepareRead,
        Phase::PrepareWrite,
        Phase::Accept,
    ];
}

/// What a permission manager granted along with write access to its log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// A member in good standing: its log holds everything it ever accepted.
    Member,
    /// A replica that restarted with an empty log, or fell too far behind: it may have forgotten
    /// values it accepted, so it must not count in the majority a leader prepares with (that
    /// could decide a different value where the forgotten one was chosen). It is written to as
    /// a follower only once this leader has prepared without it.
    Recovering,
}

/// Why an attempt was aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortReason {
    /// A confirmed follower refused an operation: another leader has its write permission.
    PermissionLost { peer: NodeId },
    /// Too many confirmed followers became unreachable to keep a majority.
    LostMajority,
    /// An operation failed in a way that points at a bug or a misconfiguration.
    Fabric { peer: NodeId, status: Status },
    /// The most advanced follower, which we were catching up from, became unreachable.
    CatchUpSourceLost { peer: NodeId },
    /// We lag the most advanced follower by more than the log holds: catching up needs a state
    /// transfer (a snapshot), not a log copy. The leader steps down.
    NeedsStateTransfer { behind: u64 },
    /// A proposal of ours written into the logs at `exposed_at` may have been decided there by
    /// another leader, and our log has moved on by more than a lap since (another leader wrote
    /// it while we tried to lead): the slot now holds a later entry, so whether the proposal
    /// was decided can no longer be read. Proposed again, it could be decided twice. The
    /// leader steps down, the application learns that the outcome is unknown, and the leader
    /// starts over with nothing queued.
    OutcomeUnknown { exposed_at: u64 },
    /// A decided membership entry removed this replica (§5.4): it stops leading for good.
    Removed,
}

/// Why a value could not be proposed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    #[error("this replica is not the leader")]
    NotLeader,
    #[error("as many proposals as allowed are already in progress")]
    Busy,
    #[error("value of {len} bytes is larger than a log slot holds ({max})")]
    TooLarge { len: usize, max: usize },
    /// A membership change that cannot be proposed (see [`Change::check`]), or one while another
    /// is waiting: one at a time.
    #[error("membership change refused: {0}")]
    Membership(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// Not part of the current step.
    Idle,
    Pending,
    Done,
}

/// A value the leader is trying to get decided.
struct Proposal {
    kind: EntryKind,
    value: Vec<u8>,
    /// An empty entry of the engine's own (see [`Leader::start_replicating`]), not the
    /// application's: committed as not ours, and never counted among the application's.
    internal: bool,
    /// Written into a log at least once ([`Action::Exposed`] told).
    exposed: bool,
    /// The lowest and highest indices it was written at (meaningful once `exposed`).
    exposed_span: (u64, u64),
    /// Found decided at this index by another leader's hand (see
    /// [`Leader::note_decided_elsewhere`]): committed as ours once it is the oldest, never
    /// proposed again.
    decided_at: Option<u64>,
}

/// An entry in the accept phase.
struct InFlight {
    index: u64,
    /// It holds a proposal of ours (the oldest not yet committed), not a value adopted in prepare.
    mine: bool,
    /// A membership entry: the configuration once it is decided.
    members_after: Option<u64>,
    /// Followers whose write of it completed, by position.
    acks: u64,
}

/// Accept writes carry this bit in the step field of their work-request id, and the index's low
/// bits below it; other steps count within the bits below it.
const ACCEPT_STEP: u16 = 0x8000;
const STEP_MASK: u16 = 0x7fff;
/// The step field of fences (see [`Leader::fence_pending`]); ordinary steps skip it.
const FENCE_STEP: u16 = STEP_MASK;
const _: () = assert!(OUTSTANDING_MAX < STEP_MASK as usize);

/// Rounds of proposal numbers: a number is its round above the low 16 bits (our position), and
/// it stays below 2^63.
const ROUNDS: u64 = 1 << 47;

/// Whether a leader can pick a proposal number above `min_proposal`.
fn exceedable(min_proposal: u64) -> bool {
    (min_proposal >> 16) + 1 < ROUNDS
}

/// The leader engine. See the crate docs.
pub struct Leader {
    me: NodeId,
    me_pos: usize,
    /// Every replica that may be a member (§5.4): positions index the per-replica vectors.
    replicas: ReplicaSet,
    /// The configuration that decides our FUO, as a mask of positions: only members are asked
    /// for permission and counted.
    members: u64,
    /// The configuration after the entries our replayer applied (below our log head), as the
    /// runtime tells it: where working out `members` starts.
    applied_members: u64,
    layout: LogLayout,
    permission_grace_ns: u64,
    /// Positions the runtime's failure detector considers failed ([`Leader::set_suspected`]):
    /// the grace period of the permission phase does not wait for them.
    suspected: u64,
    scratch_block: u64,

    phase: Phase,
    /// Bumped on every abort and every new leadership: completions of older attempts are stale.
    attempt: u32,
    /// Bumped on every step: completions of older steps of this attempt are only checked for
    /// failures.
    step: u16,
    granted: Vec<bool>,
    confirmed: Vec<bool>,
    /// Indices below this have room in the log ([`Leader::log_limit`] when
    /// [`Leader::make_room`] last computed it; 0: not known). The limit only falls when a
    /// replica joins the confirmed set or a head is read lower, and those reset it; heads
    /// that rise and replicas that leave the set only raise the limit, so the value stays a
    /// safe bound meanwhile, and a proposal is spared computing the minimum head (about 100
    /// instructions, `scripts/propose-instructions.sh`).
    room_below: u64,
    /// Replicas that granted permission after the confirmed set was formed, or while
    /// recovering: they join it once brought up to date ("growing the confirmed set later",
    /// §4.2).
    late: Vec<bool>,
    /// Replicas whose last grant said they are recovering ([`Grant::Recovering`]).
    recovering: Vec<bool>,
    waits: Vec<Wait>,
    majority_granted_at_ns: Option<u64>,

    /// Bumped on every round of permission requests (a new attempt, or asking the replicas we
    /// lead without again).
    round: u32,
    /// Positions asked for permission in this round: grants from others are not counted.
    asked: u64,
    /// Positions we posted to since the last fence: our operations may still be on the way.
    unfenced: u64,
    /// Positions with a fence in flight.
    fencing: u64,
    /// Followers reported corrupt ([`Action::CorruptPeer`]) since we became leader: their
    /// minProposal is never rewritten (they take no part in prepare), so every prepare after a
    /// late grant let them back would find it again, and once a leadership says enough.
    corrupt_reported: u64,
    /// Positions to ask for permission once their fence completes.
    ask_after_fence: u64,

    fuo: u64,
    proposal_number: u64,
    /// Prepare found only empty slots: later indexes may skip it until the next abort (§4.2).
    prepared: bool,
    /// The index being caught up to.
    target: u64,
    /// Catch-up: the first index of the batch being read.
    catch_up_next: u64,
    /// Catch-up: how many slots the batch being read holds.
    catch_up_count: u64,
    /// The log head of each replica as last read (first index not applied there; only grows).
    /// The leader writes index `i` into a confirmed log only once that replica applied
    /// `i - slots_count`, the entry whose slot `i` reuses (log recycling, §5.3).
    heads: Vec<u64>,
    /// Which confirmed follower is the most advanced (catch-up source).
    source: usize,
    outstanding_max: usize,
    /// The application's values not yet committed, oldest first; the first `mine_in_flight` are
    /// in the accept phase.
    queue: VecDeque<Proposal>,
    mine_in_flight: usize,
    /// Value buffers of committed proposals, for reuse: the accept path does not allocate.
    spare: Vec<Vec<u8>>,
    /// The FUO last written to the followers when going idle.
    fuo_published: u64,
    /// When the FUO is due to be written to the followers, the leader having gone idle (see
    /// [`FUO_PUBLISH_AFTER_NS`]); `None` while busy or once written.
    fuo_due_at_ns: Option<u64>,
    /// The latest time the runtime gave (ticks, grants).
    now_ns: u64,
    /// Entries in the accept phase, by index from `fuo` on.
    in_flight: VecDeque<InFlight>,
    /// A value prepare adopted.
    entry: Vec<u8>,
    /// Room for one slot: encoded entries and slot copies. Preallocated: the accept path does
    /// not allocate.
    slot_buf: Vec<u8>,
    /// Room for one slot, for looking for membership entries (which may happen while
    /// `slot_buf` is in use, in an abort).
    scan_buf: Vec<u8>,
    /// Per position, while updating followers: the next slot to copy to the follower, or
    /// [`UPDATE_DONE`] once its FUO is on the way.
    update_next: Vec<u64>,
}

/// Slots copied to one follower before the leader waits for them to land (Listing 4, in
/// chunks). A fabric's connection may hold only so many requests (an RDMA send queue: verbs'
/// `send_queue_depth`, 128 by default), and a follower far behind needs up to a log's worth.
/// Posted at once, those past the connection's room were refused and the follower dropped; a
/// new leader whose followers were all that far behind never got past this step (simulator
/// with `--connection-depth 16`, seed 170032). A chunk costs a round trip, small beside
/// sending it: 32 slots of 4 KiB take about 10 µs on a 100 Gbit/s link.
pub const UPDATE_CHUNK_SLOTS: u64 = 32;

/// [`Leader::update_next`] once the follower's FUO is on the way.
const UPDATE_DONE: u64 = u64::MAX;

/// How long a leader stays idle before it writes its FUO to the followers, so that they apply
/// the last entries without waiting for another (commit piggybacking alone leaves the entries
/// of the last round waiting). Writing it as soon as the queue emptied cost every proposal of
/// a leader proposing back to back an extra write to each follower, and on shared memory a
/// cache line taken from each follower's core (Mu p50 at 64 B on two vCPUs about 740 ns with it,
/// 620 ns without, five alternating runs of each). A next entry within this time tells the
/// followers the same thing; an idle leader's followers learn it this much later.
pub const FUO_PUBLISH_AFTER_NS: u64 = 20_000;

const SCRATCH_MIN_PROPOSAL: u64 = 0;
/// Where a fence's read lands (nobody looks at it).
const SCRATCH_FENCE: u64 = 8;
/// A follower's log words from FUO to the log head land here (one read of both).
const SCRATCH_FUO: u64 = 64;
const SCRATCH_HEAD: u64 = SCRATCH_FUO + (HEAD_OFFSET - FUO_OFFSET);
const SCRATCH_SLOT: u64 = (SCRATCH_HEAD + 8).next_multiple_of(64);
/// Catch-up reads this many slots at a time into the scratch area, then copies them into our log
/// with guarded writes. Reading straight into the log would bypass the guard: a read posted
/// before our permission manager gave our log to another leader could land after it, over that
/// leader's entries.
pub const CATCH_UP_BATCH_SLOTS: u64 = 16;

impl Leader {
    pub fn new(config: LeaderConfig) -> Result<Leader, String> {
        let me_pos = config
            .replicas
            .position(config.me)
            .ok_or_else(|| format!("replica {} is not in the replica set", config.me))?;
        let n = config.replicas.len();
        if n > 64 {
            return Err(format!("{n} replicas: a leader tracks at most 64"));
        }
        if !(1..=OUTSTANDING_MAX).contains(&config.outstanding_max) {
            return Err(format!(
                "outstanding_max {} is out of range (1 to {OUTSTANDING_MAX})",
                config.outstanding_max
            ));
        }
        let slot_bytes = config.layout.slot_bytes() as usize;
        Ok(Leader {
            me: config.me,
            me_pos,
            scratch_block: Leader::scratch_block(&config.layout),
            layout: config.layout,
            permission_grace_ns: config.permission_grace_ns,
            suspected: 0,
            members: membership::all(&config.replicas),
            applied_members: membership::all(&config.replicas),
            replicas: config.replicas,
            phase: Phase::Follower,
            attempt: 0,
            step: 0,
            granted: vec![false; n],
            confirmed: vec![false; n],
            room_below: 0,
            late: vec![false; n],
            recovering: vec![false; n],
            waits: vec![Wait::Idle; n],
            majority_granted_at_ns: None,
            round: 0,
            asked: 0,
            unfenced: 0,
            fencing: 0,
            corrupt_reported: 0,
            ask_after_fence: 0,
            fuo: 0,
            proposal_number: 0,
            prepared: false,
            target: 0,
            catch_up_next: 0,
            catch_up_count: 0,
            heads: vec![0; n],
            source: me_pos,
            outstanding_max: config.outstanding_max,
            queue: VecDeque::with_capacity(config.outstanding_max),
            mine_in_flight: 0,
            spare: (0..config.outstanding_max).map(|_| mu_log::written_room(slot_bytes)).collect(),
            fuo_published: 0,
            fuo_due_at_ns: None,
            now_ns: 0,
            in_flight: VecDeque::with_capacity(config.outstanding_max),
            // Written now: a new leader fills them first (see `mu_log::written_buffer`).
            entry: mu_log::written_buffer(slot_bytes),
            slot_buf: mu_log::written_buffer(slot_bytes),
            scan_buf: mu_log::written_buffer(slot_bytes),
            update_next: vec![UPDATE_DONE; n],
        })
    }

    fn scratch_block(layout: &LogLayout) -> u64 {
        (SCRATCH_SLOT + u64::from(layout.slot_bytes())).next_multiple_of(64)
    }

    /// Bytes of scratch memory a leader of `replicas` with `layout` needs: one block per replica
    /// for what prepare reads, then the catch-up staging slots.
    pub fn scratch_bytes(replicas: &ReplicaSet, layout: &LogLayout) -> usize {
        (Leader::staging_offset(replicas, layout)
            + CATCH_UP_BATCH_SLOTS * u64::from(layout.slot_bytes())) as usize
    }

    fn staging_offset(replicas: &ReplicaSet, layout: &LogLayout) -> u64 {
        Leader::scratch_block(layout) * replicas.len() as u64
    }

    fn staging_slot(&self, k: u64) -> u64 {
        Leader::staging_offset(&self.replicas, &self.layout)
            + k * u64::from(self.layout.slot_bytes())
    }

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
        self.confirmed_positions()
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

    /// The application's proposals not committed yet (in flight or waiting), not the engine's
    /// own empty entries.
    pub fn proposals_count(&self) -> usize {
        self.queue.iter().filter(|p| !p.internal).count()
    }

    /// Entries in the accept phase.
    pub fn in_flight_count(&self) -> usize {
        self.in_flight.len()
    }

    /// This replica's id.
    pub fn me(&self) -> NodeId {
        self.me
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// This leader's first undecided offset.
    pub fn fuo(&self) -> u64 {
        self.fuo
    }

    pub fn proposal_number(&self) -> u64 {
        self.proposal_number
    }

    /// Whether prepare is being omitted (§4.2).
    pub fn prepared(&self) -> bool {
        self.prepared
    }

    /// The confirmed followers, ourselves included.
    pub fn confirmed(&self) -> Vec<NodeId> {
        self.positions(&self.confirmed)
    }

    /// The confirmed followers, ourselves included, as a bit mask of positions (no allocation).
    pub fn confirmed_mask(&self) -> u64 {
        self.confirmed_positions().fold(0, |mask, pos| mask | (1 << pos))
    }

    fn positions(&self, set: &[bool]) -> Vec<NodeId> {
        set.iter().enumerate().filter(|(_, &c)| c).map(|(i, _)| self.replicas.ids()[i]).collect()
    }

    fn confirmed_count(&self) -> usize {
        self.confirmed.iter().filter(|&&c| c).count()
    }

    /// The configuration that decides our FUO (§5.4), as a mask of positions in the replica set.
    pub fn members_mask(&self) -> u64 {
        self.members
    }

    fn is_member(&self, pos: usize) -> bool {
        self.members >> pos & 1 != 0
    }

    /// More than half of the current configuration's members.
    fn majority(&self) -> usize {
        membership::majority(self.members)
    }

    /// The runtime's replayer applied entries up to our log head, and the configuration after
    /// them is `members` (the initial one at first; after a snapshot is installed, the one it
    /// carries).
    pub fn set_applied_members(&mut self, members: u64) {
        self.applied_members = members;
    }

    /// The configuration that decides our FUO: the applied one, changed by the membership
    /// entries between our log head and our FUO (decided entries, still in our log: a slot is
    /// reused only once we applied its entry). Only headers are read, and whole slots where a
    /// header says membership.
    fn members_at_fuo(&mut self, mem: &impl Memory) -> u64 {
        let head = mem.load_u64(Area::Log, HEAD_OFFSET);
        let mut members = self.applied_members;
        let mut slot = std::mem::take(&mut self.scan_buf);
        // Not past a lap from the head: no slot there holds an entry we have not applied (a
        // leader writes no further), and an FUO word a faulty leader wrote far on would keep
        // this loop going for ever.
        for index in head..self.fuo.min(head.saturating_add(self.layout.slots_count())) {
            let offset = self.layout.slot_offset(index);
            mem.read(Area::Log, offset, &mut slot[..16]);
            if EntryKind::from_u8(slot[12]) != Some(EntryKind::Membership) {
                continue;
            }
            mem.read(Area::Log, offset, &mut slot);
            if let Slot::Entry(e) = self.layout.decode(index, &slot) {
                if e.kind == EntryKind::Membership {
                    members = membership::apply(&self.replicas, members, e.value);
                }
            }
        }
        self.scan_buf = slot;
        members
    }

    // ---- events --------------------------------------------------------------------------------

    /// This replica now believes it leads (leader election, §5.1): start from permissions.
    /// Returns whether it leads now: not if the configuration at its FUO leaves it out (§5.4).
    pub fn become_leader(&mut self, mem: &impl Memory, out: &mut Vec<Action>) -> bool {
        if self.phase != Phase::Follower {
            return true;
        }
        // A follower queues nothing (`step_down` dropped it all), so no proposal's fate can be
        // unknown here.
        if !self.refresh(mem).0 {
            return false;
        }
        self.corrupt_reported = 0;
        self.ask_permissions(out);
        true
    }

    /// This replica no longer believes it leads. Proposals in progress are dropped: the caller
    /// tells the application ([`ProposeError::NotLeader`]).
    pub fn step_down(&mut self) {
        self.phase = Phase::Follower;
        self.attempt = self.attempt.wrapping_add(1);
        // A fence completing later must not send a request: a follower asking for a log would
        // take it from the leader that has it. (What we posted stays marked: if we lead again,
        // those replicas are fenced before they are asked.)
        self.ask_after_fence = 0;
        self.drop_proposals();
        self.prepared = false;
    }

    fn drop_proposals(&mut self) {
        for p in self.queue.drain(..) {
            self.spare.push(p.value);
        }
        self.in_flight.clear();
        self.mine_in_flight = 0;
    }

    /// Asks every replica for permission again, keeping a pending proposal: the runtime calls
    /// this when a majority has not answered in time (requests or answers lost with a
    /// connection). Does nothing outside the permission phase.
    pub fn retry_permissions(&mut self, mem: &impl Memory, out: &mut Vec<Action>) {
        if self.phase == Phase::Permissions {
            self.restart(mem, out);
        }
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
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(value);
        self.queue.push_back(Proposal {
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
            Phase::Accept if self.prepared => self.pump(mem, out),
            _ => {}
        }
        Ok(())
    }

    /// Whether a membership change with `value` may be proposed now: well formed, a change of the
    /// current configuration, and no other one waiting (one at a time, so that each is checked
    /// against the configuration it will change). It is applied relative to the configuration
    /// at its index, whatever was decided in between (see [`membership`]).
    pub fn check_change(&self, value: &[u8]) -> Result<(), ProposeError> {
        let change = Change::decode(value)
            .ok_or_else(|| ProposeError::Membership("malformed membership entry".into()))?;
        if self.queue.iter().any(|p| p.kind == EntryKind::Membership) {
            return Err(ProposeError::Membership("another change is in progress".into()));
        }
        change.check(&self.replicas, self.members).map(|_| ()).map_err(ProposeError::Membership)
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
        if self.asked & (1 << pos) == 0 {
            return; // not asked in this round (maybe waiting for a fence): not a grant to use
        }
        self.recovering[pos] = grant == Grant::Recovering;
        if self.phase != Phase::Permissions || self.recovering[pos] {
            // Too late for the confirmed set being used, or not to be counted in it: it joins
            // at the next quiet moment it may.
            if !self.confirmed[pos] {
                self.late[pos] = true;
                let quiet = self.phase == Phase::Ready && self.queue.is_empty();
                if quiet && (self.any_admissible() || self.recovering_waits()) {
                    self.start_replicating(mem, out);
                }
            }
            return;
        }
        self.now_ns = self.now_ns.max(now_ns);
        self.granted[pos] = true;
        let count = self.granted.iter().filter(|&&g| g).count();
        if count >= self.majority() && self.majority_granted_at_ns.is_none() {
            self.majority_granted_at_ns = Some(now_ns);
        }
        self.maybe_confirm(now_ns, mem, out);
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

    /// The replicas the failure detector considers failed now, as a mask of positions in the
    /// replica set. §4.2 waits "briefly" for the replicas beyond a majority so that they join
    /// the confirmed set; a replica thought failed would not answer within the grace period,
    /// so waiting for it only delays the new leader (by the whole grace period, in every
    /// failover: the old leader is always among the missing). Safety does not depend on this:
    /// the confirmed set is still formed of replicas that granted, a majority at least, and a
    /// suspected replica that grants later joins it as a late one.
    pub fn set_suspected(&mut self, mask: u64) {
        self.suspected = mask;
    }

    /// Time passes: ends the grace period of the permission phase; tells the followers our FUO
    /// once we have been idle for [`FUO_PUBLISH_AFTER_NS`].
    pub fn tick(&mut self, now_ns: u64, mem: &mut impl Memory, out: &mut Vec<Action>) {
        self.now_ns = self.now_ns.max(now_ns);
        if self.phase == Phase::Permissions {
            self.maybe_confirm(now_ns, mem, out);
        }
        if self.fuo_due_at_ns.is_some_and(|at| now_ns >= at) {
            self.fuo_due_at_ns = None;
            if self.phase == Phase::Ready && self.in_flight.is_empty() {
                self.publish_fuo(out);
            }
        }
    }

    /// A work request posted to `peer` completed.
    pub fn on_completion(
        &mut self,
        peer: NodeId,
        c: Completion,
        mem: &mut impl Memory,
        out: &mut Vec<Action>,
    ) {
        let (attempt, step) = ((c.wr_id >> 32) as u32, (c.wr_id >> 16) as u16);
        let Some(pos) = self.replicas.position(peer) else { return };
        if step == FENCE_STEP {
            // Whatever the attempt, and whether or not we lead: the fence only orders.
            return self.on_fence(pos, out);
        }
        if attempt != self.attempt || self.phase == Phase::Follower {
            return; // from an attempt that was aborted: its failures are moot
        }
        if !c.status.is_success() {
            self.fail(pos, c.status, mem, out);
            return;
        }
        if step & ACCEPT_STEP != 0 {
            let low = u64::from(step & STEP_MASK);
            let entry = self.in_flight.iter_mut().find(|e| e.index & u64::from(STEP_MASK) == low);
            if let Some(entry) = entry {
                entry.acks |= 1 << pos;
                self.try_commit(mem, out);
            }
            return; // or a straggler of an entry committed already
        }
        if step != self.step || self.waits[pos] != Wait::Pending {
            return; // a straggler of a step we already left, or an unsignaled success
        }
        if self.phase == Phase::UpdateFollowers && self.update_next[pos] != UPDATE_DONE {
            // A chunk of its slots landed: the next one, or its FUO.
            let wr = (u64::from(self.attempt) << 32) | (u64::from(self.step) << 16);
            return self.post_update_chunk(pos, wr, out);
        }
        self.waits[pos] = Wait::Done;
        self.maybe_finish_step(mem, out);
    }

    // ---- the steps -----------------------------------------------------------------------------

    /// Where our log says we are: the decided prefix it holds (another leader may have written
    /// it while we were not leading, or while we tried), and the configuration that decides
    /// our FUO (§5.4). Returns whether that configuration includes us, and an index where a
    /// waiting proposal was written whose fate the log no longer shows, if there is one
    /// ([`Leader::note_log_decided`]).
    fn refresh(&mut self, mem: &impl Memory) -> (bool, Option<u64>) {
        let before = self.fuo;
        self.fuo = self.fuo.max(Leader::decided_below(
            mem.load_u64(Area::Log, FUO_OFFSET),
            mem.load_u64(Area::Log, HEAD_OFFSET),
        ));
        let unknown_outcome = self.note_log_decided(mem, before, self.fuo);
        self.members = self.members_at_fuo(mem);
        (self.is_member(self.me_pos), unknown_outcome)
    }

    /// Starts over from permissions, under the configuration of our FUO as the log now says
    /// (after an abort, a retry, or a membership change); if that configuration leaves us out,
    /// stops leading instead, and if a waiting proposal's outcome can no longer be known,
    /// steps down so that it is answered as unknown rather than proposed again.
    fn restart(&mut self, mem: &impl Memory, out: &mut Vec<Action>) {
        let (member, unknown_outcome) = self.refresh(mem);
        if !member {
            out.push(Action::Aborted { reason: AbortReason::Removed });
            self.step_down();
        } else if let Some(exposed_at) = unknown_outcome {
            out.push(Action::Aborted { reason: AbortReason::OutcomeUnknown { exposed_at } });
            self.step_down();
        } else {
            self.ask_permissions(out);
        }
    }

    /// A new attempt under the configuration `refresh` found: asks its members for permission.
    fn ask_permissions(&mut self, out: &mut Vec<Action>) {
        self.attempt = self.attempt.wrapping_add(1);
        self.phase = Phase::Permissions;
        self.prepared = false;
        // Proposals stay queued, to be proposed again from the oldest: an entry that was in
        // flight may have been accepted somewhere, and prepare finds it if it matters.
        self.in_flight.clear();
        self.mine_in_flight = 0;
        self.granted.fill(false);
        self.confirmed.fill(false);
        self.room_below = 0;
        self.late.fill(false);
        self.waits.fill(Wait::Idle);
        self.majority_granted_at_ns = None;
        self.round = self.round.wrapping_add(1);
        self.asked = 0;
        self.ask_after_fence = 0;
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
            if self.is_member(pos) && !self.confirmed[pos] {
                self.asked &= !(1 << pos);
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
        let bit = 1u64 << pos;
        if pos != self.me_pos && (self.unfenced | self.fencing) & bit != 0 {
            self.ask_after_fence |= bit;
            if self.fencing & bit == 0 {
                self.post_fence(pos, out);
            }
            return;
        }
        self.ask_after_fence &= !bit;
        self.asked |= bit;
        out.push(Action::RequestPermission { peer: self.replicas.ids()[pos], round: self.round });
    }

    /// A signaled read behind everything we posted to `pos`: operations on one connection land
    /// in order (RC queue pairs are FIFO), so its completion, success or failure, means every
    /// earlier operation has landed or never will (after a failure the connection flushes what
    /// follows).
    fn post_fence(&mut self, pos: usize, out: &mut Vec<Action>) {
        let wr = (u64::from(self.round) << 32) | (u64::from(FENCE_STEP) << 16);
        let op = RemoteOp::ReadIntoScratch {
            offset: FUO_OFFSET,
            scratch_offset: self.scratch(pos, SCRATCH_FENCE),
            len: 8,
        };
        out.push(Action::Post { peer: self.replicas.ids()[pos], wr_id: wr, op, signaled: true });
        self.unfenced &= !(1 << pos);
        self.fencing |= 1 << pos;
    }

    /// A fence to `pos` completed: ask it now if that was waiting.
    fn on_fence(&mut self, pos: usize, out: &mut Vec<Action>) {
        let bit = 1u64 << pos;
        self.fencing &= !bit;
        if self.ask_after_fence & bit != 0 {
            self.ask(pos, out);
        }
    }

    /// Whether a request for permission waits for a fence (operations we posted to that replica
    /// may still land); for status and tests.
    pub fn fence_pending(&self) -> bool {
        self.ask_after_fence != 0
    }

    fn maybe_confirm(&mut self, now_ns: u64, mem: &mut impl Memory, out: &mut Vec<Action>) {
        let Some(since) = self.majority_granted_at_ns else { return };
        let everyone = (0..self.replicas.len())
            .all(|pos| self.granted[pos] || !self.is_member(pos) || self.suspected >> pos & 1 != 0);
        let grace_over = now_ns.saturating_sub(since) >= self.permission_grace_ns;
        // We must own our own log before touching it.
        if !self.granted[self.me_pos] || !(everyone || grace_over) {
            return;
        }
        self.confirmed.copy_from_slice(&self.granted);
        self.room_below = 0;
        self.begin_read_fuos(mem, out);
    }

    fn next_step(&mut self, phase: Phase) -> u64 {
        self.phase = phase;
        self.step = self.step.wrapping_add(1) & STEP_MASK;
        if self.step == FENCE_STEP {
            self.step = 0;
        }
        for (pos, w) in self.waits.iter_mut().enumerate() {
            *w = if self.confirmed[pos] && pos != self.me_pos { Wait::Pending } else { Wait::Idle };
        }
        (u64::from(self.attempt) << 32) | (u64::from(self.step) << 16)
    }

    fn scratch(&self, pos: usize, field: u64) -> u64 {
        pos as u64 * self.scratch_block + field
    }

    /// Posts `op` to the replica at `pos`; it may be on the way until a fence says otherwise.
    fn post(
        &mut self,
        out: &mut Vec<Action>,
        pos: usize,
        wr_id: u64,
        op: RemoteOp,
        signaled: bool,
    ) {
        self.unfenced |= 1 << pos;
        out.push(Action::Post { peer: self.replicas.ids()[pos], wr_id, op, signaled });
    }

    /// Listing 3, lines 1–3: read every confirmed follower's FUO (and its log head, see
    /// [`Leader::decided_below`]).
    fn begin_read_fuos(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
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
    fn decided_below(fuo: u64, head: u64) -> u64 {
        fuo.max(head)
    }

    fn read_fuo(&self, mem: &impl Memory, pos: usize) -> u64 {
        Leader::decided_below(
            mem.load_u64(Area::Scratch, self.scratch(pos, SCRATCH_FUO)),
            mem.load_u64(Area::Scratch, self.scratch(pos, SCRATCH_HEAD)),
        )
    }

    /// Takes the log heads the FUO step read (a newly confirmed follower's head counts for
    /// recycling from now on).
    fn note_heads_read(&mut self, mem: &impl Memory) {
        for pos in 0..self.replicas.len() {
            if self.is_follower(pos) {
                // As read now, not the largest ever seen: a replica that restarted applies
                // again from its snapshot or from 0.
                self.heads[pos] = mem.load_u64(Area::Scratch, self.scratch(pos, SCRATCH_HEAD));
                self.room_below = 0;
            }
        }
    }

    /// A step that gathers one word of every confirmed log into the scratch area: ours (`own`)
    /// at once, the followers' by one-sided reads.
    #[allow(clippy::too_many_arguments)]
    fn begin_word_read(
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

    /// Listing 3, lines 4–8: copy the most advanced follower's log into ours.
    fn begin_catch_up(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        self.note_heads_read(mem);
        let (source, fuo) = self
            .confirmed_positions()
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
        self.source = source;
        self.target = fuo;
        self.catch_up_next = self.fuo;
        self.read_catch_up_batch(out);
    }

    /// Reads the next batch of the source's slots into the staging area.
    fn read_catch_up_batch(&mut self, out: &mut Vec<Action>) {
        let wr = self.next_step(Phase::CatchUp);
        // Only the source is waited for in this step.
        for (pos, w) in self.waits.iter_mut().enumerate() {
            if pos != self.source {
                *w = Wait::Idle;
            }
        }
        self.catch_up_count = (self.target - self.catch_up_next).min(CATCH_UP_BATCH_SLOTS);
        let slot_bytes = self.layout.slot_bytes();
        let source = self.source;
        for k in 0..self.catch_up_count {
            let op = RemoteOp::ReadIntoScratch {
                offset: self.layout.slot_offset(self.catch_up_next + k),
                scratch_offset: self.staging_slot(k),
                len: slot_bytes,
            };
            let last = k + 1 == self.catch_up_count;
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
    fn end_catch_up_batch(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        let mut slot = std::mem::take(&mut self.slot_buf);
        let mut copied = 0;
        let mut missing = None;
        for k in 0..self.catch_up_count {
            let index = self.catch_up_next + k;
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
                reason: AbortReason::NeedsStateTransfer { behind: self.target - index },
            });
            self.step_down();
            return;
        }
        self.catch_up_next += copied;
        if self.catch_up_next < self.target {
            return self.read_catch_up_batch(out);
        }
        if self.write_own_log(mem, FUO_OFFSET, &self.target.to_le_bytes(), out) {
            self.fuo = self.target;
            let members = self.members_at_fuo(mem);
            if members != self.members {
                // The entries we caught up on changed the configuration (§5.4): our permissions
                // and confirmed set belong to the old one.
                return self.restart(mem, out);
            }
            self.begin_update_followers(mem, out);
        }
    }

    /// Listing 4: bring every lagging confirmed follower up to our FUO.
    fn begin_update_followers(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        let wr = self.next_step(Phase::UpdateFollowers);
        for pos in self.followers() {
            let first = self.read_fuo(mem, pos).min(self.fuo);
            if self.fuo - first > self.layout.slots_count() {
                // Our log no longer holds what it misses: it needs a state transfer, and cannot
                // be a confirmed follower until it had one.
                self.confirmed[pos] = false;
                self.waits[pos] = Wait::Idle;
                continue;
            }
            self.update_next[pos] = first;
            self.post_update_chunk(pos, wr, out);
        }
        if self.confirmed_count() < self.majority() {
            return self.abort(AbortReason::LostMajority, mem, out);
        }
        self.maybe_finish_step(mem, out);
    }

    /// Copies the next [`UPDATE_CHUNK_SLOTS`] slots a follower misses, the last of them
    /// signaled; once none is left, writes its FUO and then its admission.
    fn post_update_chunk(&mut self, pos: usize, wr: u64, out: &mut Vec<Action>) {
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

    /// Whether `index` may be written (§5.3). If the slowest confirmed follower is what holds
    /// the log back and a majority remains without it, it stops being written to (it is dropped
    /// from the confirmed set, with its log intact) rather than stalling everyone: it joins
    /// again when it asks, if it is still within a log of us.
    fn make_room(&mut self, index: u64, mem: &impl Memory) -> bool {
        if index < self.room_below {
            debug_assert!(index < self.log_limit(), "the cached room is a bound");
            return true;
        }
        self.heads[self.me_pos] = self.heads[self.me_pos].max(mem.load_u64(Area::Log, HEAD_OFFSET));
        while index >= self.log_limit() {
            let slowest = self
                .confirmed_positions()
                .filter(|&pos| pos != self.me_pos)
                .min_by_key(|&pos| self.heads[pos]);
            match slowest {
                Some(pos)
                    if self.heads[pos] < self.heads[self.me_pos]
                        && self.confirmed_count() > self.majority() =>
                {
                    self.confirmed[pos] = false;
                    self.waits[pos] = Wait::Idle;
                }
                _ => return false,
            }
        }
        self.room_below = self.log_limit();
        true
    }

    /// Grows the confirmed set with the replicas that granted permission late (§4.2): they
    /// join it, and the leader-change steps run again for the new set (read FUOs, catch up if
    /// a newcomer knows more decided entries, bring every lagging follower up to date), after
    /// which replication goes on. Prepare omission stays: the newcomers hold no decided value the
    /// old majority did not.
    fn admit_late(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        for pos in 0..self.replicas.len() {
            if self.admissible(pos) {
                self.confirmed[pos] = true;
                self.room_below = 0;
                self.late[pos] = false;
            }
        }
        self.begin_read_fuos(mem, out);
    }

    /// Whether the late replica at `pos` may join now. A recovering one waits until we have
    /// prepared without it: prepare found nothing accepted at our FUO or after it in a majority
    /// that did not include it, so every value ever chosen is below our FUO, in our log, and
    /// update-followers gives it to the newcomer; what it forgot no longer matters.
    fn admissible(&self, pos: usize) -> bool {
        self.late[pos] && (!self.recovering[pos] || self.prepared)
    }

    fn any_admissible(&self) -> bool {
        (0..self.replicas.len()).any(|pos| self.admissible(pos))
    }

    /// Whether a late, recovering replica waits for us to prepare before it may join.
    fn recovering_waits(&self) -> bool {
        !self.prepared && (0..self.replicas.len()).any(|pos| self.late[pos] && self.recovering[pos])
    }

    /// Up to date, nothing in flight: replicate the pending values, if any.
    fn start_replicating(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        debug_assert!(self.in_flight.is_empty());
        self.commit_decided_elsewhere(out);
        if self.any_admissible() {
            return self.admit_late(mem, out);
        }
        if self.queue.is_empty() && self.recovering_waits() {
            // A recovering replica joins only once we have prepared without it (`admissible`),
            // and prepare runs for a value: with none of the application's, decide an empty
            // entry of our own. Waiting for the next request instead left such a replica out
            // for as long as none came, and with it every client it answers (membership sweep,
            // seed 1120: it still believed a configuration whose members were gone).
            let mut value = self.spare.pop().unwrap_or_default();
            value.clear();
            let noop = Proposal {
                kind: EntryKind::Noop,
                value,
                internal: true,
                exposed: false,
                exposed_span: (0, 0),
                decided_at: None,
            };
            self.queue.push_back(noop);
        }
        if self.queue.is_empty() {
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
        if self.prepared {
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
    fn publish_fuo(&mut self, out: &mut Vec<Action>) {
        if self.fuo <= self.fuo_published {
            return;
        }
        self.fuo_published = self.fuo;
        let wr = (u64::from(self.attempt) << 32) | (u64::from(self.step) << 16);
        for pos in 0..self.replicas.len() {
            if self.is_follower(pos) {
                let op = RemoteOp::WriteWord { offset: FUO_OFFSET, value: self.fuo };
                self.post(out, pos, wr, op, false);
            }
        }
    }

    /// With prepare omitted (§4.2), puts queued proposals in flight, one index after the other,
    /// while fewer than `outstanding_max` are (§7.4) and the log has room. Replicas joining
    /// late wait until nothing is in flight.
    fn pump(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        debug_assert!(self.phase == Phase::Accept && self.prepared);
        while self.mine_in_flight < self.queue.len()
            && self.in_flight.len() < self.outstanding_max
            && !self.any_admissible()
        {
            // A membership entry travels alone (§5.4): the entries after it are decided by the
            // configuration it makes, which this leader has not prepared with yet.
            if self.queue[self.mine_in_flight].decided_at.is_some() {
                break; // committed as ours once the ones before it are
            }
            let change_next = self.queue[self.mine_in_flight].kind == EntryKind::Membership;
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

    /// Listing 2, line 19: read the confirmed followers' minProposals.
    fn begin_prepare_read(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        // Prepare runs at or above every confirmed replica's decided prefix, as catch-up made
        // sure (Listing 3): below it a slot may hold an entry of a later lap, which prepare
        // would take for a free slot at an index long decided.
        for pos in self.confirmed_positions() {
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
    fn begin_prepare_write(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        // A minProposal no number of ours can exceed was written by no leader: 2^47 rounds of
        // prepare are out of reach. Only corrupted memory or a faulty peer holds one. Such a
        // follower is dropped, as an unreachable one would be, rather than stopping every
        // leader in turn; our own is about to be overwritten.
        let corrupt: Vec<usize> = self
            .followers()
            .into_iter()
            .filter(|&pos| self.has_answered(pos) && !exceedable(self.min_proposal_read(mem, pos)))
            .collect();
        if !corrupt.is_empty() {
            for pos in corrupt {
                self.confirmed[pos] = false;
                self.waits[pos] = Wait::Idle;
                if self.corrupt_reported & (1 << pos) == 0 {
                    self.corrupt_reported |= 1 << pos;
                    out.push(Action::CorruptPeer { peer: self.replicas.ids()[pos] });
                }
            }
            if self.confirmed_count() < self.majority() {
                return self.abort(AbortReason::LostMajority, mem, out);
            }
            // Without them, a majority may not have answered yet: wait for it (this step
            // comes back here once it has).
            return self.maybe_finish_step(mem, out);
        }
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
            .max(self.proposal_number);
        // Rounds in the high bits, our position in the low ones: numbers of different leaders
        // never collide, and every number we pick is above every one seen.
        let round = (highest >> 16) + 1;
        assert!(round < ROUNDS, "proposal numbers exhausted");
        self.proposal_number = (round << 16) | (self.me_pos as u64 + 1);
        assert!(self.proposal_number > highest);

        let wr = self.next_step(Phase::PrepareWrite);
        let slot_offset = self.layout.slot_offset(self.fuo);
        let slot_bytes = self.layout.slot_bytes();
        if !self.write_own_log(mem, MIN_PROPOSAL_OFFSET, &self.proposal_number.to_le_bytes(), out) {
            return;
        }
        mem.read(Area::Log, slot_offset, &mut self.slot_buf);
        mem.write(Area::Scratch, self.scratch(self.me_pos, SCRATCH_SLOT), &self.slot_buf);
        for pos in self.followers() {
            let write =
                RemoteOp::WriteWord { offset: MIN_PROPOSAL_OFFSET, value: self.proposal_number };
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

    /// Listing 2, lines 24–28: adopt the highest-numbered value found, or ours.
    fn end_prepare(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
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
                self.prepared = all_empty;
                self.next_step(Phase::Accept);
                if self.accept(self.fuo, None, mem, out) {
                    if self.prepared {
                        self.pump(mem, out); // more of ours, right behind it
                    } else {
                        self.try_commit(mem, out);
                    }
                }
            }
        }
    }

    /// Listing 2, lines 29–36: write an entry at `index` (our log first, then the confirmed
    /// followers') and put it in flight: the oldest proposal not in flight yet, or the value
    /// prepare `adopted` (in `self.entry`). Returns false if it aborted instead (our log was
    /// given to another leader).
    fn accept(
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
                let p = &self.queue[self.mine_in_flight];
                (p.kind, &p.value[..])
            }
        };
        let members_after = (kind == EntryKind::Membership)
            .then(|| membership::apply(&self.replicas, self.members, value));
        let bytes = self
            .layout
            .encode_pipelined(
                index,
                self.proposal_number,
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
            let p = &mut self.queue[self.mine_in_flight];
            if !p.exposed {
                p.exposed = true;
                p.exposed_span = (index, index);
                if !p.internal {
                    out.push(Action::Exposed);
                }
            } else {
                p.exposed_span = (p.exposed_span.0.min(index), p.exposed_span.1.max(index));
            }
            self.mine_in_flight += 1;
        }
        self.in_flight.push_back(InFlight { index, mine, members_after, acks: 0 });
        let step = ACCEPT_STEP | (index as u16 & STEP_MASK);
        let wr = (u64::from(self.attempt) << 32) | (u64::from(step) << 16);
        for pos in 0..self.replicas.len() {
            if self.is_follower(pos) {
                let op = RemoteOp::WriteFromLog { offset, len: bytes as u32 };
                self.post(out, pos, wr, op, true);
            }
        }
        true
    }

    /// Listing 2, line 34 ("if value == myValue") for any index, not only the one being
    /// prepared: an entry decided at `index` other than by our own accept (copied from a more
    /// advanced follower in catch-up, or adopted in prepare) may hold one of our proposals
    /// waiting behind it, written by an attempt that aborted and then taken over by another
    /// leader. Proposed again, it would be decided twice, and a request acknowledged once would
    /// take effect twice (simulator seed 120028, two leaders at once). It is marked decided at
    /// `index` instead, and committed as ours once the proposals before it are.
    fn note_decided_elsewhere(&mut self, index: u64, kind: EntryKind, value: &[u8]) {
        let waiting = self.queue.iter_mut();
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
    /// decided there cannot be read any more (see [`AbortReason::OutcomeUnknown`]). Exposures
    /// below `from` were looked at when the FUO passed them. The check takes the span from a
    /// proposal's lowest to its highest exposure, so it may report one that skipped those
    /// indices: a needless step-down, never a missed one.
    fn note_log_decided(&mut self, mem: &impl Memory, from: u64, to: u64) -> Option<u64> {
        if !self.queue.iter().any(|p| p.exposed && !p.internal && p.decided_at.is_none()) {
            return None;
        }
        let readable = from.max(to.saturating_sub(self.layout.slots_count()));
        let unread = self
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
    fn commit_decided_elsewhere(&mut self, out: &mut Vec<Action>) {
        while self.mine_in_flight == 0 {
            let Some(index) = self.queue.front().and_then(|p| p.decided_at) else { break };
            let p = self.queue.pop_front().expect("a front");
            self.spare.push(p.value);
            out.push(Action::Committed { index, mine: true });
        }
    }

    /// Commits the entries in flight that a majority (ourselves included) holds, in index order
    /// (§4.2, "the leader waits for just a majority"), then puts more in flight or, with none
    /// left, goes on with what is queued.
    fn try_commit(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        let mut committed = false;
        while let Some(front) = self.in_flight.front() {
            if front.acks.count_ones() as usize + 1 < self.majority() {
                break;
            }
            let (index, mine, members_after) = (front.index, front.mine, front.members_after);
            debug_assert_eq!(index, self.fuo);
            if !self.write_own_log(mem, FUO_OFFSET, &(index + 1).to_le_bytes(), out) {
                return;
            }
            self.in_flight.pop_front();
            self.fuo = index + 1;
            let internal = mine && self.queue.front().is_some_and(|p| p.internal);
            out.push(Action::Committed { index, mine: mine && !internal });
            if mine {
                let p = self.queue.pop_front().expect("a proposal of ours was in flight");
                self.spare.push(p.value);
                self.mine_in_flight -= 1;
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
            if members_after.is_some_and(|m| m != self.members) {
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
        } else if committed && self.prepared {
            self.pump(mem, out);
        }
    }

    /// Finishes the current step once enough peers answered: every confirmed follower for the
    /// update steps, a majority (ourselves included) for prepare and accept (§4.2, "the leader
    /// waits for just a majority").
    fn maybe_finish_step(&mut self, mem: &mut impl Memory, out: &mut Vec<Action>) {
        if self.phase == Phase::Accept {
            return self.try_commit(mem, out); // counted per entry
        }
        let done = self.waits.iter().filter(|&&w| w == Wait::Done).count() + 1; // + ourselves
        let pending = self.waits.contains(&Wait::Pending);
        let enough = match self.phase {
            Phase::PrepareRead | Phase::PrepareWrite => done >= self.majority(),
            Phase::Accept => unreachable!("handled above"),
            Phase::CatchUp => self.waits[self.source] == Wait::Done,
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
    fn fail(&mut self, pos: usize, status: Status, mem: &mut impl Memory, out: &mut Vec<Action>) {
        let peer = self.replicas.ids()[pos];
        match status {
            Status::PeerUnreachable if !self.confirmed[pos] => {} // dropped already
            Status::PeerUnreachable => {
                // A dead follower: drop it, and go on while a majority remains.
                self.confirmed[pos] = false;
                self.waits[pos] = Wait::Idle;
                if self.confirmed_count() < self.majority() {
                    self.abort(AbortReason::LostMajority, mem, out);
                } else if self.phase == Phase::CatchUp && pos == self.source {
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
    fn write_own_log(
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

    fn abort(&mut self, reason: AbortReason, mem: &impl Memory, out: &mut Vec<Action>) {
        out.push(Action::Aborted { reason });
        // "If it still thinks it is the leader, it calls propose again": start over from
        // permissions; the proposal stays pending.
        self.restart(mem, out);
    }

    fn confirmed_positions(&self) -> impl Iterator<Item = usize> + '_ {
        self.confirmed.iter().enumerate().filter(|(_, &c)| c).map(|(i, _)| i)
    }

    /// Confirmed followers other than ourselves (the update steps only: it allocates).
    fn followers(&self) -> Vec<usize> {
        (0..self.replicas.len()).filter(|&p| self.is_follower(p)).collect()
    }

    fn is_follower(&self, pos: usize) -> bool {
        self.confirmed[pos] && pos != self.me_pos
    }

    /// Whether `pos` answered the current step (we always have).
    fn has_answered(&self, pos: usize) -> bool {
        pos == self.me_pos || (self.confirmed[pos] && self.waits[pos] == Wait::Done)
    }

    fn answered(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.replicas.len()).filter(|&pos| self.has_answered(pos))
    }
}
