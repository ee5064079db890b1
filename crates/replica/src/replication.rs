//! The replication plane's driver (Mu paper §4): runs the leader engine and the replayer of one
//! replica against its fabric. No threads and no clock of its own: whoever drives it calls
//! [`ReplicationDriver::poll`] with the time, a thread on real fabrics, the simulator's loop on the
//! simulated one.

use crate::layout::{ack_offset, replication_channel, BACKGROUND_REGION};
use crate::memory::FabricMemory;
use crate::shared::Shared;
use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, LocalRegion, LocalSlice, NodeId, Op, PostError,
    RemoteAddr, Source, Status, WorkRequest,
};
use mu_log::{EntryKind, LogLayout};
use mu_replication::{
    request_word, AbortReason, Action, Leader, Phase, RemoteOp, Replayer, ReplicaSet, LOG_REGION,
    SCRATCH_REGION,
};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Why a proposal failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// Only the leader proposes; `leader` is the replica this one believes leads, if any.
    #[error("this replica is not the leader{}", leader_hint(.leader))]
    NotLeader { leader: Option<NodeId> },
    /// This replica stopped leading while the value was being replicated: it may or may not be
    /// committed (the next leader decides). Retry with the same client sequence number so that
    /// the state machine applies it once.
    #[error("leadership was lost while replicating; the value may or may not be committed")]
    Aborted,
    #[error("value of {len} bytes is larger than an entry holds ({max} bytes)")]
    TooLarge { len: usize, max: usize },
    /// A live replica has not applied the entry whose slot the next index reuses, and did not
    /// catch up within the configured timeout. Nothing was overwritten.
    #[error(
        "the log is full: a live replica has not applied entry {oldest} (log of {slots_count} \
         slots); it is too slow or stuck"
    )]
    LogFull { oldest: u64, slots_count: u64 },
    /// Another proposal is in progress on this replica.
    #[error("another proposal is in progress")]
    Busy,
    #[error("the replica is shutting down")]
    ShuttingDown,
}

fn leader_hint(leader: &Option<NodeId>) -> String {
    match leader {
        Some(l) => format!(" (replica {l} is)"),
        None => " (no leader is known)".into(),
    }
}

/// The proposal being replicated.
struct Pending {
    /// The engine reached the accept phase while this proposal was pending: it may have been
    /// accepted somewhere.
    maybe_accepted: bool,
    /// Since when it waits for room in the log.
    room_wait_since_ns: Option<u64>,
}

/// Timeouts the driver enforces.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    pub permission_timeout_ns: u64,
    pub log_full_timeout_ns: u64,
}

/// What was read from a completion's `wr_id`: the engine's id in the high bits, the peer's
/// position in the low 16 (the engine leaves them zero).
const PEER_BITS: u64 = 0xffff;

/// See the module docs.
pub struct ReplicationDriver<F: Fabric> {
    fabric: F,
    me: NodeId,
    replicas: ReplicaSet,
    layout: LogLayout,
    boot_id: u32,
    timeouts: Timeouts,
    leader: Leader,
    replayer: Replayer,
    mem: FabricMemory<F::Region>,
    background: F::Region,
    ep: F::Endpoint,
    shared: Arc<Shared>,
    actions: Vec<Action>,
    completions: Vec<Completion>,
    /// Completions polled while posting (the queue was full), fed to the engine afterwards.
    deferred: VecDeque<Completion>,
    /// Whether our initiator side towards each position is connected to the peer's current
    /// incarnation, as far as we know (a failed operation clears it).
    connected: Vec<bool>,
    request_seq: u32,
    request_word: u64,
    acked: Vec<bool>,
    permissions_since_ns: u64,
    pending: Option<Pending>,
    outcome: Option<Result<u64, ProposeError>>,
    /// The log heads last given to the engine, by position.
    heads_seen: Vec<u64>,
    /// After finding itself too far behind to lead (it needs a state transfer), this replica
    /// is eligible again once its replayer has applied up to here: following a leader brought
    /// it up to date.
    eligible_again_at: Option<u64>,
}

impl<F: Fabric> ReplicationDriver<F> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        fabric: F,
        replicas: ReplicaSet,
        layout: LogLayout,
        leader: Leader,
        mem: FabricMemory<F::Region>,
        background: F::Region,
        ep: F::Endpoint,
        boot_id: u32,
        timeouts: Timeouts,
    ) -> ReplicationDriver<F> {
        let n = replicas.len();
        let shared = mem.shared.clone();
        ReplicationDriver {
            me: fabric.node(),
            fabric,
            replayer: Replayer::new(layout, 0),
            replicas,
            layout,
            boot_id,
            timeouts,
            leader,
            mem,
            background,
            ep,
            shared,
            actions: Vec::with_capacity(64),
            completions: vec![Completion::EMPTY; 64],
            deferred: VecDeque::new(),
            connected: vec![false; n],
            request_seq: 0,
            request_word: 0,
            acked: vec![false; n],
            permissions_since_ns: 0,
            pending: None,
            outcome: None,
            heads_seen: vec![0; n],
            eligible_again_at: None,
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The leader engine, for status.
    pub fn engine(&self) -> &Leader {
        &self.leader
    }

    /// Hands `value` to the leader engine. Its outcome comes out of
    /// [`ReplicationDriver::take_outcome`] after later polls.
    pub fn submit(&mut self, value: &[u8], now_ns: u64) -> Result<(), ProposeError> {
        if self.pending.is_some() || self.outcome.is_some() {
            // One at a time, and the last outcome must be taken first: it belongs to the
            // caller of the last proposal.
            return Err(ProposeError::Busy);
        }
        let result =
            self.leader.propose(EntryKind::Request, value, &mut self.mem, &mut self.actions);
        match result {
            Ok(()) => {
                self.pending = Some(Pending { maybe_accepted: false, room_wait_since_ns: None });
                self.shared.in_propose.store(true, Ordering::Release);
                self.run_actions(now_ns);
                Ok(())
            }
            Err(mu_replication::ProposeError::NotLeader) => {
                Err(ProposeError::NotLeader { leader: self.shared.leader() })
            }
            Err(mu_replication::ProposeError::Busy) => Err(ProposeError::Busy),
            Err(mu_replication::ProposeError::TooLarge { len, max }) => {
                Err(ProposeError::TooLarge { len, max })
            }
        }
    }

    /// The outcome of the submitted proposal, once there is one.
    pub fn take_outcome(&mut self) -> Option<Result<u64, ProposeError>> {
        self.outcome.take()
    }

    /// Fails the pending proposal, if any, because the replica stops.
    pub fn shut_down(&mut self) {
        if self.pending.take().is_some() {
            self.outcome = Some(Err(ProposeError::ShuttingDown));
        }
        self.shared.in_propose.store(false, Ordering::Release);
    }

    /// Does whatever is due: follows the elected leader, collects permission acknowledgements,
    /// feeds completions to the engine, posts what it asks for, and applies decided entries with
    /// `apply(index, kind, value)`. Returns whether anything happened.
    pub fn poll(&mut self, now_ns: u64, apply: &mut dyn FnMut(u64, EntryKind, &[u8])) -> bool {
        self.shared.loop_count.fetch_add(1, Ordering::Relaxed);
        let mut busy = self.follow_election();
        if self.leader.phase() != Phase::Follower {
            // Acknowledgements that arrive after the confirmed set was formed grow it.
            busy |= self.collect_acks(now_ns);
        }
        for pos in 0..self.replicas.len() {
            let head = self.shared.heads[pos].load(Ordering::Acquire);
            if head > self.heads_seen[pos] {
                self.heads_seen[pos] = head;
                let peer = self.replicas.ids()[pos];
                self.leader.set_head(peer, head, &mut self.mem, &mut self.actions);
            }
        }
        busy |= self.poll_completions();
        self.leader.tick(now_ns, &mut self.mem, &mut self.actions);
        busy |= self.run_actions(now_ns);
        self.check_log_full(now_ns);
        let mut applied = 0;
        self.replayer.poll(&mut self.mem, |index, kind, value| {
            applied += 1;
            apply(index, kind, value)
        });
        self.shared.fuo.store(self.leader.fuo(), Ordering::Release);
        self.note_ready(now_ns);
        if self.eligible_again_at.is_some_and(|at| self.replayer.head() >= at) {
            self.eligible_again_at = None;
            self.shared.eligible.store(true, Ordering::Release);
        }
        busy || applied > 0
    }

    /// Dates the moment the engine is set up as leader, for status (failover timing).
    fn note_ready(&self, now_ns: u64) {
        let setting_up = matches!(
            self.leader.phase(),
            Phase::Follower
                | Phase::Permissions
                | Phase::ReadFuos
                | Phase::CatchUp
                | Phase::UpdateFollowers
        );
        let ready_at = &self.shared.ready_at_ns;
        if setting_up {
            if ready_at.load(Ordering::Relaxed) != 0 {
                ready_at.store(0, Ordering::Release);
            }
        } else if ready_at.load(Ordering::Relaxed) == 0 {
            ready_at.store(now_ns + 1, Ordering::Release);
        }
    }

    /// Becomes leader or steps down as the background plane's election says (§5.1).
    fn follow_election(&mut self) -> bool {
        let elected = self.shared.leader();
        let leading = self.leader.phase() != Phase::Follower;
        if elected == Some(self.me) && !leading && self.shared.eligible.load(Ordering::Acquire) {
            self.leader.become_leader(&self.mem, &mut self.actions);
            return true;
        }
        if elected != Some(self.me) && leading {
            self.leader.step_down();
            self.fail_pending(elected);
            return true;
        }
        false
    }

    /// The engine dropped the pending proposal (it stopped leading).
    fn fail_pending(&mut self, leader: Option<NodeId>) {
        if let Some(p) = self.pending.take() {
            self.outcome = Some(Err(if p.maybe_accepted {
                ProposeError::Aborted
            } else {
                ProposeError::NotLeader { leader }
            }));
        }
        self.shared.in_propose.store(false, Ordering::Release);
    }

    /// Reads the acknowledgements permission managers wrote into our background region.
    fn collect_acks(&mut self, now_ns: u64) -> bool {
        let mut busy = false;
        for pos in 0..self.replicas.len() {
            if self.acked[pos] {
                continue;
            }
            let word = self.background.load_u64(ack_offset(pos) as usize).unwrap_or(0);
            if word == self.request_word {
                self.acked[pos] = true;
                busy = true;
                let peer = self.replicas.ids()[pos];
                self.leader.on_permission(peer, true, now_ns, &mut self.mem, &mut self.actions);
            }
        }
        let waited_ns = now_ns.saturating_sub(self.permissions_since_ns);
        if busy || waited_ns <= self.timeouts.permission_timeout_ns {
            return busy;
        }
        if self.leader.phase() == Phase::Permissions {
            self.leader.retry_permissions(&mut self.actions);
        } else if self.acked.contains(&false) {
            // Leading without some replica: ask it again now and then (its request or our
            // connection to it may have been lost, or it was dropped as unreachable and is
            // back). A grant that arrives grows the confirmed set; the others' permission
            // managers just acknowledge again (no revoke: we hold their logs).
            self.request_permissions(now_ns);
        } else {
            return false;
        }
        true
    }

    fn poll_completions(&mut self) -> bool {
        let mut busy = false;
        while let Some(c) = self.deferred.pop_front() {
            self.feed(c);
            busy = true;
        }
        loop {
            let n = self.ep.poll(&mut self.completions);
            for i in 0..n {
                let c = self.completions[i];
                self.feed(c);
            }
            busy |= n > 0;
            if n < self.completions.len() {
                return busy;
            }
        }
    }

    fn feed(&mut self, c: Completion) {
        let pos = (c.wr_id & PEER_BITS) as usize;
        let Some(&peer) = self.replicas.ids().get(pos) else {
            panic!("completion with wr_id {:#x} names no replica", c.wr_id);
        };
        if !c.status.is_success() {
            self.connected[pos] = false;
        }
        let c = Completion { wr_id: c.wr_id & !PEER_BITS, ..c };
        self.leader.on_completion(peer, c, &mut self.mem, &mut self.actions);
    }

    /// Carries out what the engine asked for, including what it asks for while doing so.
    fn run_actions(&mut self, now_ns: u64) -> bool {
        let mut i = 0;
        let mut requested = false;
        while i < self.actions.len() {
            let action = self.actions[i];
            i += 1;
            match action {
                Action::RequestPermission { .. } => {
                    // The engine asks every replica at once; one request word serves them all.
                    if !requested {
                        requested = true;
                        self.request_permissions(now_ns);
                    }
                }
                Action::Post { peer, wr_id, op, signaled } => self.post(peer, wr_id, op, signaled),
                Action::Committed { index, mine } => {
                    self.shared.commits.fetch_add(1, Ordering::Relaxed);
                    if mine && self.pending.take().is_some() {
                        self.outcome = Some(Ok(index));
                        self.shared.in_propose.store(false, Ordering::Release);
                    }
                }
                Action::Aborted { reason } => {
                    self.shared.aborts.fetch_add(1, Ordering::Relaxed);
                    *self.shared.last_abort.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(reason);
                    if let AbortReason::NeedsStateTransfer { behind } = reason {
                        // The engine stepped down; stay out of elections until this replica
                        // has the entries it lacked (as a follower of another leader).
                        self.shared.eligible.store(false, Ordering::Release);
                        self.eligible_again_at = Some(self.leader.fuo() + behind);
                        self.fail_pending(None);
                    }
                }
            }
        }
        let any = !self.actions.is_empty();
        self.actions.clear();
        if self.leader.phase() == Phase::Accept {
            if let Some(p) = &mut self.pending {
                p.maybe_accepted = true;
            }
        }
        any
    }

    /// A new round of permission requests (§5.2): reconnect our own sides that broke, then
    /// publish a new request word for the background plane to deliver.
    fn request_permissions(&mut self, now_ns: u64) {
        for pos in 0..self.replicas.len() {
            let peer = self.replicas.ids()[pos];
            if peer == self.me || self.connected[pos] {
                continue;
            }
            // Our side of the connection we write the peer's log through: the peer never
            // initiates on it, so it grants nothing. Connecting binds it to the peer's current
            // incarnation. A peer that is not there yet stays unconnected: posts to it fail as
            // unreachable and the engine goes on without it.
            let conn = ConnId::new(peer, replication_channel(self.me, peer));
            self.connected[pos] = self.fabric.connect(conn, Access::NONE).is_ok();
        }
        self.request_seq = self.request_seq.wrapping_add(1).max(1);
        self.request_word = request_word(self.boot_id, self.request_seq);
        self.acked.fill(false);
        self.permissions_since_ns = now_ns;
        self.shared.request_word.store(self.request_word, Ordering::Release);
    }

    fn post(&mut self, peer: NodeId, wr_id: u64, op: RemoteOp, signaled: bool) {
        let pos = self.replicas.position(peer).expect("the engine posts to replicas only");
        debug_assert_eq!(wr_id & PEER_BITS, 0, "the engine leaves the low bits of wr_id free");
        let word;
        let op = match op {
            RemoteOp::WriteFromLog { offset, len } => Op::Write {
                source: Source::Local(LocalSlice { region: LOG_REGION, offset, len }),
                remote: RemoteAddr { region: LOG_REGION, offset },
            },
            RemoteOp::WriteWord { offset, value } => {
                word = value.to_le_bytes();
                Op::Write {
                    source: Source::Inline(&word),
                    remote: RemoteAddr { region: LOG_REGION, offset },
                }
            }
            RemoteOp::ReadIntoScratch { offset, scratch_offset, len } => Op::Read {
                local: LocalSlice { region: SCRATCH_REGION, offset: scratch_offset, len },
                remote: RemoteAddr { region: LOG_REGION, offset },
            },
        };
        let wr = WorkRequest { wr_id: wr_id | pos as u64, op, signaled };
        let conn = ConnId::new(peer, replication_channel(self.me, peer));
        let mut result = self.ep.post(conn, &wr);
        if matches!(result, Err(PostError::QueueFull)) {
            // Make room without feeding the engine in the middle of carrying out its actions.
            loop {
                let n = self.ep.poll(&mut self.completions);
                self.deferred.extend(self.completions[..n].iter().copied());
                if n < self.completions.len() {
                    break;
                }
            }
            result = self.ep.post(conn, &wr);
        }
        if let Err(e) = result {
            // Not connected, or the fabric refused: to the engine this peer is unreachable.
            // (A full queue right after draining it would be a bug in sizing the queue.)
            assert!(!matches!(e, PostError::QueueFull), "completion queue sized too small: {e}");
            self.connected[pos] = false;
            let status = match e {
                PostError::InlineTooLarge { .. } => Status::RemoteInvalidRequest,
                _ => Status::PeerUnreachable,
            };
            let kind = op.kind();
            self.deferred.push_back(Completion { wr_id: wr.wr_id, kind, status, value: 0 });
        }
    }

    /// A proposal that waited for room longer than the timeout fails with "log full".
    fn check_log_full(&mut self, now_ns: u64) {
        let Some(p) = &mut self.pending else { return };
        if !self.leader.waiting_for_room() {
            p.room_wait_since_ns = None;
            return;
        }
        let since = *p.room_wait_since_ns.get_or_insert(now_ns);
        if now_ns.saturating_sub(since) > self.timeouts.log_full_timeout_ns
            && self.leader.cancel_waiting_proposal()
        {
            self.pending = None;
            self.shared.in_propose.store(false, Ordering::Release);
            let slots_count = self.layout.slots_count();
            let oldest = self.leader.fuo().saturating_sub(slots_count - 1);
            self.outcome = Some(Err(ProposeError::LogFull { oldest, slots_count }));
        }
    }
}

// The three regions of a replica have distinct ids.
const _: () = assert!(LOG_REGION.0 != SCRATCH_REGION.0 && SCRATCH_REGION.0 != BACKGROUND_REGION.0);
