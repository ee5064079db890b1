//! The leader's replicator (Mu paper §4.1 Listing 2, §4.2 Listings 3 and 4).
//!
//! [`Leader`] holds the state of each mechanism in that mechanism's module, and its events
//! (`become_leader`, `on_permission`, `on_completion`, `tick`, `propose`) run them in turn:
//!
//! * `permissions`: asking the members for write permission, fences before asking again, the
//!   confirmed set and late grants (Listing 2, lines 9–12; §4.2, §5.2).
//! * `catch_up`: reading the followers' FUOs and copying the most advanced log (Listing 3).
//! * `update_followers`: copying our log into the followers that lag (Listing 4).
//! * `prepare`: proposal numbers, and adopting the highest accepted value (lines 18–28).
//! * `accept`: writing entries, several in flight, and committing them in order (lines 29–36).
//! * `proposals`: the application's values, and those found decided by another leader.
//! * `recycling`: log heads and the room they leave (§5.3).
//! * `membership`: the configuration that decides our FUO (§5.4).
//! * `steps`: the steps of an attempt (waiting for answers, failures, aborts); `scratch`: where
//!   reads of the followers' logs land; `wr_id`: the work-request ids of our posts.

mod accept;
mod catch_up;
mod membership;
mod permissions;
mod prepare;
mod proposals;
mod recycling;
mod scratch;
mod steps;
mod update_followers;
mod wr_id;

pub use accept::FUO_PUBLISH_AFTER_NS;
pub use scratch::CATCH_UP_BATCH_SLOTS;
pub use update_followers::UPDATE_CHUNK_SLOTS;

use accept::InFlight;
use catch_up::CatchUp;
use membership::Configuration;
use permissions::Permissions;
use prepare::Prepare;
use proposals::Proposals;
use recycling::Recycling;
use steps::Wait;
use update_followers::UPDATE_DONE;

use crate::{Action, Area, Memory, PositionSet, ReplicaSet, OUTSTANDING_MAX};
use mu_fabric::{Completion, NodeId, Status};
use mu_log::{LogLayout, FUO_OFFSET, HEAD_OFFSET};
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

/// Why the engine refused a value at once: the engine's layer of errors. Nothing of the value
/// reached a log. The runtime's own error (`mu_replica::ProposeError`) is what an application
/// sees: it adds what only the runtime knows (which replica leads, aborts after a value was
/// handed over, a full log, shutdown) and takes these over unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    #[error("this replica is not the leader")]
    NotLeader,
    #[error("as many proposals as allowed are already in progress")]
    Busy,
    #[error("value of {len} bytes is larger than a log slot holds ({max})")]
    TooLarge { len: usize, max: usize },
    /// A membership change that cannot be proposed (see [`crate::membership::Change::check`]),
    /// or one while another is waiting: one at a time.
    #[error("membership change refused: {0}")]
    Membership(String),
}

/// The leader engine. See the crate docs.
pub struct Leader {
    me: NodeId,
    me_pos: usize,
    /// Every replica that may be a member (§5.4): positions index the per-replica vectors and
    /// sets.
    replicas: ReplicaSet,
    layout: LogLayout,
    scratch_block: u64,
    /// The configuration we lead (§5.4).
    config: Configuration,
    /// Asking for permission, fences, and grants (§5.2, §4.2).
    permissions: Permissions,
    /// The catch-up in progress (Listing 3).
    catch_up: CatchUp,
    /// Proposal numbers and prepare omission (Listing 2, lines 18–28; §4.2).
    prepare: Prepare,
    /// The application's proposals (and the engine's own empty entries).
    proposals: Proposals,
    /// Log heads and the room they leave (§5.3).
    recycling: Recycling,

    phase: Phase,
    /// Bumped on every abort and every new leadership: completions of older attempts are stale.
    attempt: u32,
    /// Bumped on every step: completions of older steps of this attempt are only checked for
    /// failures.
    step: u16,
    /// The confirmed followers, ourselves included: the replicas whose logs this attempt
    /// writes (§4.2).
    confirmed: PositionSet,
    /// Per position, whether the current step waits for that replica's answer.
    waits: Vec<Wait>,

    /// Our first undecided offset: the entries below it are decided and in our log.
    fuo: u64,
    outstanding_max: usize,
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

impl Leader {
    pub fn new(config: LeaderConfig) -> Result<Leader, String> {
        let me_pos = config
            .replicas
            .position(config.me)
            .ok_or_else(|| format!("replica {} is not in the replica set", config.me))?;
        // At most `REPLICAS_MAX` (`ReplicaSet::new`): one bit of a `PositionSet` each.
        let n = config.replicas.len();
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
            config: Configuration::new(&config.replicas),
            permissions: Permissions::new(config.permission_grace_ns),
            catch_up: CatchUp::new(me_pos),
            prepare: Prepare::default(),
            proposals: Proposals::new(config.outstanding_max, slot_bytes),
            recycling: Recycling::new(n),
            layout: config.layout,
            replicas: config.replicas,
            phase: Phase::Follower,
            attempt: 0,
            step: 0,
            confirmed: PositionSet::EMPTY,
            waits: vec![Wait::Idle; n],
            fuo: 0,
            outstanding_max: config.outstanding_max,
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
        self.prepare.proposal_number
    }

    /// Whether prepare is being omitted (§4.2).
    pub fn prepared(&self) -> bool {
        self.prepare.prepared
    }

    /// The confirmed followers, ourselves included.
    pub fn confirmed(&self) -> Vec<NodeId> {
        self.confirmed.ids(self.replicas.ids())
    }

    /// The confirmed followers, ourselves included, as a bit mask of positions (no allocation).
    pub fn confirmed_mask(&self) -> u64 {
        self.confirmed.bits()
    }

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
        self.prepare.corrupt_reported = PositionSet::EMPTY;
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
        self.permissions.ask_after_fence = PositionSet::EMPTY;
        self.drop_proposals();
        self.prepare.prepared = false;
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
        self.room_tick(mem, out);
    }

    /// A work request posted to `peer` completed.
    pub fn on_completion(
        &mut self,
        peer: NodeId,
        c: Completion,
        mem: &mut impl Memory,
        out: &mut Vec<Action>,
    ) {
        let (attempt, step) = wr_id::split(c.wr_id);
        let Some(pos) = self.replicas.position(peer) else { return };
        if wr_id::is_fence(step) {
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
        if let Some(low) = wr_id::accepted_index_bits(step) {
            let entry = self.in_flight.iter_mut().find(|e| wr_id::index_bits(e.index) == low);
            if let Some(entry) = entry {
                entry.acks.insert(pos);
                self.try_commit(mem, out);
            }
            return; // or a straggler of an entry committed already
        }
        if step != self.step || self.waits[pos] != Wait::Pending {
            return; // a straggler of a step we already left, or an unsignaled success
        }
        if self.phase == Phase::UpdateFollowers && self.update_next[pos] != UPDATE_DONE {
            // A chunk of its slots landed: the next one, or its FUO.
            return self.post_update_chunk(pos, self.step_wr_id(), out);
        }
        self.waits[pos] = Wait::Done;
        self.maybe_finish_step(mem, out);
    }

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
        self.config.members = self.members_at_fuo(mem);
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
}
