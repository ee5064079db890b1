//! The replication plane's driver (Mu paper §4): runs the leader engine and the replayer of one
//! replica against its fabric. No threads and no clock of its own: whoever drives it calls
//! [`ReplicationDriver::poll`] with the time, a thread on real fabrics, the simulator's loop on the
//! simulated one.

use crate::group::Group;
use crate::layout::{ack_boot_offset, ack_offset, replication_channel, BACKGROUND_REGION};
use crate::lease::Term;
use crate::memory::FabricMemory;
use crate::probe::DateOnce;
use crate::replication::{Applier, ProposeError, Settings, INLINE_WRITE_BYTES_MAX};
use crate::setup_trace::Poller;
use crate::shared::{ids_text, Shared};
use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, FabricError, LocalRegion, LocalSlice, NodeId, Op,
    PostError, RemoteAddr, Source, Status, WorkRequest,
};
use mu_log::{EntryKind, LogLayout, ADMITTED_OFFSET, HEAD_OFFSET};
use mu_replication::membership::{self, Change};
use mu_replication::standing::{self, BlockedWatch};
use mu_replication::{
    AbortReason, Action, Area, Grant, Leader, Memory, Phase, RemoteOp, Replayer, ReplicaSet,
    ACK_RECOVERING, LOG_REGION, SCRATCH_REGION,
};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tracing::{error, info, warn};

/// What was read from a completion's `wr_id`: the engine's id in the high bits, the peer's
/// position in the low 16 (the engine leaves them zero).
const PEER_BITS: u64 = 0xffff;

/// See the module docs.
pub struct ReplicationDriver<F: Fabric> {
    fabric: F,
    me: NodeId,
    /// Our bit in masks of positions in `replicas`.
    me_bit: u64,
    replicas: ReplicaSet,
    layout: LogLayout,
    settings: Settings,
    leader: Leader,
    replayer: Replayer,
    mem: FabricMemory<F::Region>,
    background: F::Region,
    /// The state-transfer region: the snapshot we serve, and one fetched for us.
    snapshot: F::Region,
    snapshot_buf: Vec<u8>,
    ep: F::Endpoint,
    shared: Arc<Shared>,
    actions: Vec<Action>,
    completions: Vec<Completion>,
    /// Completions polled while posting (the queue was full), fed to the engine afterwards.
    deferred: VecDeque<Completion>,
    /// Whether our initiator side towards each position is connected to the peer's current
    /// incarnation, as far as we know (a failed operation clears it, and so does the detector
    /// suspecting the peer: see `note_suspected`).
    connected: Vec<bool>,
    /// Whether a post refused for lack of room was logged ([`ReplicationDriver::post`]).
    queue_full_said: bool,
    /// Positions to which a post was refused since our side was last connected: every later
    /// post to them is refused too ([`ReplicationDriver::post`]).
    post_refused: u64,
    /// The detector's suspected set as last seen (a bit per position).
    suspected_seen: u64,
    /// By position: our side's binding was still under way in the fabric when last tried
    /// (`FabricError::InProgress`). A grant from that peer waits until it is bound: handed to
    /// the engine unbound, it would fail the first write as unreachable and abort the attempt.
    binding: Vec<bool>,
    request_word: u64,
    /// The word the background plane sent ahead for this leadership's first round, until that
    /// round takes it (`crate::ask_ahead`).
    word_ahead: u64,
    /// What this plane last armed sending ahead with (`crate::ask_ahead`).
    askable_armed: u64,
    /// The engine's round of permission requests that `request_word` serves.
    request_round: Option<u32>,
    /// By position: false while a request carrying `request_word` waits for its answer.
    acked: Vec<bool>,
    permissions_since_ns: u64,
    /// The application's requests in progress (`Group::pending`), then their outcomes until
    /// taken (`Group::answered`).
    group: Group,
    /// The log heads last given to the engine, by position.
    heads_seen: Vec<u64>,
    /// A leadership taken up in this poll, logged once the poll's requests are out.
    leading_to_log: Option<u64>,
    /// The leadership under way, as published in `shared` (for leased reads).
    term: Option<Term>,
    /// The phases whose first entry in this leadership is stamped in `Shared::probe`, by bit.
    phases_stamped: u16,
    /// Whether `probe.permitted_at_ns` and `probe.ready_at_ns` are dated (this driver is their
    /// one writer).
    permitted_date: DateOnce,
    ready_date: DateOnce,
    /// The engine's phase when the current (or last) poll began, for [`Self::note_setup_poll`].
    poll_started_in: Phase,
    /// Idle polls since the last busy one, for the set-up trace.
    idle_polls: crate::setup_trace::IdlePolls,
    /// The log heads when we last asked for permission, by position.
    heads_at_request: Vec<u64>,
    /// After finding itself too far behind to lead (it needs a state transfer), this replica
    /// is eligible again once its replayer has applied up to here: following a leader brought
    /// it up to date.
    eligible_again_at: Option<u64>,
    /// The configuration after the entries the replayer applied (§5.4), by position.
    members_applied: u64,
    /// Whether the replayer has been blocked at one head for too long.
    blocked: BlockedWatch,
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
        snapshot: F::Region,
        ep: F::Endpoint,
        settings: Settings,
    ) -> ReplicationDriver<F> {
        let n = replicas.len();
        let shared = mem.shared.clone();
        let members_applied = shared.members.load(Ordering::Acquire);
        ReplicationDriver {
            members_applied,
            me: fabric.node(),
            me_bit: 1 << replicas.position(fabric.node()).expect("we are a replica"),
            fabric,
            replayer: Replayer::new(layout, 0),
            replicas,
            layout,
            settings,
            leader,
            mem,
            background,
            snapshot,
            snapshot_buf: Vec::new(),
            ep,
            shared,
            actions: Vec::with_capacity(64),
            completions: vec![Completion::EMPTY; 64],
            deferred: VecDeque::new(),
            connected: vec![false; n],
            queue_full_said: false,
            post_refused: 0,
            suspected_seen: 0,
            binding: vec![false; n],
            request_word: 0,
            word_ahead: 0,
            askable_armed: 0,
            request_round: None,
            acked: vec![true; n],
            permissions_since_ns: 0,
            group: Group::with_room(layout.max_value_bytes(), settings.batch_requests_max),
            heads_seen: vec![0; n],
            phases_stamped: 0,
            permitted_date: DateOnce::default(),
            ready_date: DateOnce::default(),
            poll_started_in: Phase::Follower,
            idle_polls: Default::default(),
            leading_to_log: None,
            term: None,
            heads_at_request: vec![0; n],
            eligible_again_at: None,
            blocked: BlockedWatch::default(),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The leader engine, for status.
    pub fn engine(&self) -> &Leader {
        &self.leader
    }

    /// This replica's own log, as a checker reads it: its layout, then its bytes at `offset`.
    pub fn log_layout(&self) -> LogLayout {
        self.layout
    }

    /// See [`ReplicationDriver::log_layout`].
    pub fn read_log(&self, offset: u64, out: &mut [u8]) {
        self.mem.read(Area::Log, offset, out);
    }

    /// Hands the leader engine a membership change (§5.4): one entry, alone in flight. Its
    /// outcome comes out of [`ReplicationDriver::take_outcomes`] like a request's: the index of
    /// the entry once it is decided. Refused at once if it is not a change of the current
    /// configuration, or while another change is in progress.
    pub fn submit_change(&mut self, change: Change, now_ns: u64) -> Result<(), ProposeError> {
        if self.group.busy() {
            return Err(ProposeError::Busy);
        }
        if self.leader.phase() == Phase::Follower {
            return Err(ProposeError::NotLeader { leader: self.shared.leader() });
        }
        let value = change.encode();
        self.leader.check_change(&value)?;
        self.group.change = true;
        self.stage(std::iter::once(&value[..]), now_ns)
    }

    /// Hands `requests` to the leader engine, packed into entries (§7.4). Their outcomes come
    /// out of [`ReplicationDriver::take_outcomes`] after later polls, one per request, in order:
    /// the log index each was committed at (requests packed together share one), or why not.
    /// Fails as a whole, with nothing handed over, if another call's requests are in progress
    /// or not taken yet, if there are none, or if one is too large for an entry.
    pub fn submit<'a>(
        &mut self,
        requests: impl IntoIterator<Item = &'a [u8]>,
        now_ns: u64,
    ) -> Result<(), ProposeError> {
        if self.group.busy() {
            // The last outcomes must be taken first: they belong to the caller of the last call.
            return Err(ProposeError::Busy);
        }
        if self.leader.phase() == Phase::Follower {
            return Err(ProposeError::NotLeader { leader: self.shared.leader() });
        }
        self.group.change = false;
        self.stage(requests, now_ns)
    }

    /// Plans the entries of a call and hands the first ones over.
    fn stage<'a>(
        &mut self,
        requests: impl IntoIterator<Item = &'a [u8]>,
        now_ns: u64,
    ) -> Result<(), ProposeError> {
        let max = self.layout.max_value_bytes();
        self.group.plan(requests, max, self.settings.batch_requests_max)?;
        self.group.pending = true;
        self.shared.progress.in_propose.store(true, Ordering::Release);
        self.hand_over();
        self.run_actions(now_ns);
        Ok(())
    }

    /// Hands the engine the next planned entries while it takes them.
    fn hand_over(&mut self) {
        let g = &mut self.group;
        while g.handed < g.entries.len() {
            let (kind, value) = g.entry_value(g.handed);
            match self.leader.propose(kind, value, &mut self.mem, &mut self.actions) {
                Ok(()) => g.handed += 1,
                Err(mu_replication::ProposeError::Busy) => return, // as many as allowed
                Err(refused @ mu_replication::ProposeError::Membership(_)) => {
                    // The configuration changed between the check and now (a new leadership
                    // adopted another change): nothing was proposed.
                    let e = g.entries.pop_front().expect("the entry being handed over");
                    g.answer(e, Err(refused.into()));
                    if g.unanswered == 0 {
                        self.finish_group();
                    }
                    return;
                }
                Err(e) => unreachable!("checked before handing over: {e}"),
            }
        }
    }

    /// Whether the submitted requests all have outcomes, to be taken.
    pub fn outcomes_ready(&self) -> bool {
        self.group.answered
    }

    /// The outcomes of the submitted requests, once all are known, into `into` (cleared first).
    pub fn take_outcomes(&mut self, into: &mut Vec<Result<u64, ProposeError>>) -> bool {
        self.group.take_outcomes(into)
    }

    /// Fails the requests in progress, if any, because the replica stops. The engine steps
    /// down with them: left queued there, their later commits would be taken for another
    /// call's (one that got in just before the stop). Stepping down, not just dropping them:
    /// a leader that skipped prepare must not write new values over indices its dropped
    /// entries may have been decided at.
    pub fn shut_down(&mut self) {
        if self.group.pending {
            self.group.answer_rest(|_| ProposeError::ShuttingDown);
            self.finish_group();
            if self.leader.phase() != Phase::Follower {
                self.leader.step_down();
            }
        }
    }

    fn finish_group(&mut self) {
        self.group.finish();
        self.shared.progress.in_propose.store(false, Ordering::Release);
    }

    /// Does whatever is due: follows the elected leader, collects permission acknowledgements,
    /// feeds completions to the engine, posts what it asks for, and applies decided entries with
    /// `app`; takes and installs snapshots for state transfer. Returns whether anything
    /// happened.
    pub fn poll(&mut self, now_ns: u64, app: &mut dyn Applier) -> bool {
        self.poll_started_in = self.leader.phase();
        self.shared.progress.bump_loop();
        let mut busy = self.follow_election();
        if self.leader.phase() != Phase::Follower {
            // Acknowledgements that arrive after the confirmed set was formed grow it.
            busy |= self.collect_acks(now_ns);
        }
        for pos in 0..self.replicas.len() {
            let head = self.shared.peers.heads[pos].load(Ordering::Acquire);
            if head != self.heads_seen[pos] {
                self.heads_seen[pos] = head;
                let peer = self.replicas.ids()[pos];
                self.leader.set_head(peer, head, &mut self.mem, &mut self.actions);
            }
        }
        busy |= self.poll_completions();
        let suspected = self.shared.suspected(self.me_bit);
        if suspected & !self.suspected_seen != 0 {
            self.note_suspected(suspected);
        }
        self.suspected_seen = suspected;
        self.leader.set_suspected(suspected);
        self.leader.tick(now_ns, &mut self.mem, &mut self.actions);
        self.arm_ask_ahead();
        busy |= self.run_actions(now_ns);
        self.log_leading();
        self.check_log_full(now_ns);
        let mut applied = 0;
        let (replicas, mut members) = (&self.replicas, self.members_applied);
        // A leader past catch-up has its FUO word up to date with every commit it knows of,
        // as long as its log is its own: once its permission manager granted the log to another
        // leader (it may not have noticed yet, idle), that leader's entries say what is decided.
        let replicating = matches!(
            self.leader.phase(),
            Phase::Ready | Phase::PrepareRead | Phase::PrepareWrite | Phase::Accept
        );
        let holds_own_log =
            self.shared.log_holder.load(Ordering::Acquire) == u64::from(self.me.0) + 1;
        self.replayer.scan_entries(!(replicating && holds_own_log));
        self.replayer.poll(&mut self.mem, |index, kind, value| {
            applied += 1;
            if kind == EntryKind::Membership {
                members = membership::apply(replicas, members, value);
            }
            app.apply(index, kind, value)
        });
        self.note_members(members);
        self.note_blocked(now_ns);
        self.serve_snapshot(app);
        applied += usize::from(self.install_snapshot(app));
        self.shared.progress.set_fuo(self.leader.fuo());
        self.note_ready(now_ns);
        self.publish_confirmed();
        if self.eligible_again_at.is_none() && !self.shared.eligible.load(Ordering::Acquire) {
            // Recovering (restarted with its log lost): eligible once a leader took it back and
            // it applied what that leader had decided then.
            let admitted = self.mem.load_u64(Area::Log, ADMITTED_OFFSET);
            self.eligible_again_at = standing::eligible_again_at(admitted);
        }
        if self.eligible_again_at.is_some_and(|at| self.replayer.head() >= at) {
            self.eligible_again_at = None;
            // A leader prepared without us and gave us what it had decided: whatever we
            // forgot no longer matters.
            self.shared.recovering.store(false, Ordering::Release);
            self.shared.eligible.store(true, Ordering::Release);
            info!(
                replica = self.me.0,
                head = self.replayer.head(),
                "eligible to lead again: this replica has applied what a leader decided"
            );
        }
        busy || applied > 0
    }

    /// Tells the background plane when the replayer has waited too long for a decided entry
    /// (see [`mu_replication::Replayer::blocked`]): only a state transfer gets past it.
    fn note_blocked(&mut self, now_ns: u64) {
        let head = self.replayer.head();
        let timeout_ns = self.settings.permission_timeout_ns;
        let stuck = self.blocked.poll(self.replayer.blocked(), head, now_ns, timeout_ns);
        if self.shared.transfer.replayer_stuck.load(Ordering::Relaxed) != stuck {
            if stuck {
                warn!(
                    replica = self.me.0,
                    head,
                    "the replayer waits for a decided entry this log does not get; a state \
                     transfer will get past it"
                );
            } else {
                info!(replica = self.me.0, head, "the replayer moves again");
            }
            self.shared.transfer.replayer_stuck.store(stuck, Ordering::Release);
            if stuck {
                self.stand_aside_until_applied();
            }
        }
    }

    /// Our log lacks a decided entry below what it knows decided: such a replica must not
    /// lead. As leader it could never apply its own log, so its log head, and with it the room
    /// it may write into (§5.3), would stay put for ever; nor does a leader install snapshots
    /// (`transfer::install`). It stays out of elections until its replayer has applied what
    /// it knows decided (after the snapshot it now fetches as a follower). Seen (`mu sim` seed
    /// 845, five replicas): replica 0, paused while 1 led, was brought back by 1's
    /// update-followers, which copies only the complete entries of 1's own log; the slot of
    /// one of them already held an entry 1 had put in flight past its FUO a lap later, so 0's
    /// log got the FUO and the entries after the hole. Elected as the lowest id, 0 never
    /// answered a request again.
    #[cold]
    fn stand_aside_until_applied(&mut self) {
        if !self.shared.eligible.load(Ordering::Acquire) {
            return; // recovering, or already waiting for entries
        }
        let until = self.replayer.decided_below();
        warn!(
            replica = self.me.0,
            head = self.replayer.head(),
            until,
            "not standing for election until this log's decided entries are applied"
        );
        self.shared.eligible.store(false, Ordering::Release);
        self.eligible_again_at = Some(until);
        if self.leader.phase() != Phase::Follower {
            self.leader.step_down();
            self.fail_pending(None);
        }
    }

    /// The replayer applied up to a configuration (§5.4): the engine works out later ones from
    /// it, and the background plane elects and grants by it. A full member it leaves out has
    /// been removed, and stops taking part. (A replica that restarted or joined replays history
    /// until it is eligible: a removal there was of an earlier run of it.)
    fn note_members(&mut self, members: u64) {
        if members == self.members_applied {
            return;
        }
        let me_pos = self.replicas.position(self.me).expect("we are a replica");
        let was = self.members_applied;
        self.members_applied = members;
        self.leader.set_applied_members(members);
        self.shared.set_members(members);
        info!(
            replica = self.me.0,
            members = ids_text(self.replicas.ids(), members).as_str(),
            head = self.replayer.head(),
            "membership changed"
        );
        let eligible = self.shared.eligible.load(Ordering::Acquire);
        if standing::removed_by_applied(me_pos, (was, members), eligible) {
            if !self.shared.removed.load(Ordering::Acquire) {
                warn!(
                    replica = self.me.0,
                    "removed: this replica applied a configuration without it; it stops taking \
                     part"
                );
            }
            self.shared.removed.store(true, Ordering::Release);
            if self.leader.phase() != Phase::Follower {
                self.leader.step_down();
            }
            self.fail_pending(None);
        }
    }

    /// State transfer, serving side: see [`crate::transfer::serve`].
    fn serve_snapshot(&mut self, app: &mut dyn Applier) {
        let index = self.replayer.head();
        crate::transfer::serve(
            &self.shared,
            &self.snapshot,
            &mut self.snapshot_buf,
            self.settings.snapshot_bytes_max,
            (self.me, &self.replicas),
            (index, self.members_applied),
            None, // Mu's leader republishes nothing: it catches up from its followers' logs
            app,
        );
    }

    /// State transfer, receiving side: the background plane fetched and checked a snapshot
    /// ahead of our replayer. Restores it and goes on applying from its index; a leader's update
    /// of followers (Listing 4) then brings the log from there. Returns whether it installed one.
    fn install_snapshot(&mut self, app: &mut dyn Applier) -> bool {
        let head = self.replayer.head();
        let max_value = self.layout.max_value_bytes();
        let leading = self.leader.phase() != Phase::Follower;
        let Some((index, members, _)) =
            crate::transfer::install(&self.shared, max_value, self.me, head, leading, app)
        else {
            return false;
        };
        self.forget_skipped_slots(head, index);
        self.replayer = Replayer::new(self.layout, index);
        self.mem.store_u64(Area::Log, HEAD_OFFSET, index);
        self.note_members(members);
        true
    }

    /// Empties the slots of the entries a snapshot skipped (`from` to `to`, the replayer's
    /// head before and after it), at most the last lap of them: up to the whole log, a few
    /// milliseconds for a default 16 MB one, once per state transfer.
    ///
    /// Below its head a log counts as decided (`Leader::decided_below`): a leader catches up
    /// from such a log, or copies its own to followers, taking every complete entry there as
    /// the decided one. But the slots a snapshot jumped over hold whatever this replica had
    /// accepted there, which may be a value that was never decided (an accept that did not
    /// reach a majority, from a leader that then lost), under the right index and checksum.
    /// Empty, they are holes, which catch-up and a follower's replayer already take for
    /// missing entries (step down, or a state transfer), never for decided values.
    ///
    /// Safe against the leader's writes into this log meanwhile: into these indices a leader
    /// writes only decided values (update of followers, or an accept that its prepare made the
    /// decided one), and losing one is a hole again; indices past `to` use other slots, since
    /// a leader never writes a lap past our old head. And no leader prepares below `to` with
    /// us in its majority: it catches up from us (and stops at the holes) first.
    fn forget_skipped_slots(&mut self, from: u64, to: u64) {
        let first = from.max(to.saturating_sub(self.layout.slots_count()));
        let zeros = vec![0u8; self.layout.slot_bytes() as usize];
        for index in first..to {
            self.mem.write(Area::Log, self.layout.slot_offset(index), &zeros);
        }
    }

    /// The confirmed set, for status.
    fn publish_confirmed(&self) {
        let leading = self.leader.phase() != Phase::Follower;
        let mask = if leading { self.leader.confirmed_mask() } else { 0 };
        if self.shared.confirmed_mask.load(Ordering::Relaxed) != mask {
            self.shared.confirmed_mask.store(mask, Ordering::Release);
        }
    }

    /// Whether a new leadership's polls are being timed ([`Self::note_setup_poll`]): from the
    /// poll that takes up the leadership to the one in which the first of its own proposals
    /// commits. Not to the first `Ready`: a leader set up with nothing to propose is `Ready`
    /// before its first proposal, and the polls that carry that proposal are part of the
    /// failover too. The caller times a poll if this held before it or holds after it, reading
    /// its clock only then.
    pub fn setup_timed(&self) -> bool {
        self.leader.phase() != Phase::Follower && self.phases_stamped & FIRST_COMMIT_STAMP == 0
    }

    /// Counts `busy_ns`, the time the last poll took, against the phase the engine was in when
    /// that poll began (`Follower` for the poll that took up the leadership), for status
    /// ([`crate::ReplicaStatus::phases_busy_ns`]). Failover timing: a new leader's set-up
    /// splits into time spent inside polls and time between them (its thread elsewhere, or
    /// waiting for other threads). Not counted once the leadership ended in that poll, whose
    /// counters were reset with the phase stamps.
    /// The poll is also traced (`ReplicaStatus::setup_polls`): `start_ns` is when it began,
    /// `busy` whether it did anything, `poller` the thread that made it.
    pub fn note_setup_poll(&mut self, start_ns: u64, busy_ns: u64, busy: bool, poller: Poller) {
        if self.leader.phase() == Phase::Follower {
            return;
        }
        let phase = self.poll_started_in;
        self.shared.probe.phase_busy_ns[phase as usize].fetch_add(busy_ns, Ordering::Relaxed);
        self.shared.probe.phase_polls[phase as usize].fetch_add(1, Ordering::Relaxed);
        let trace = &self.shared.probe.setup_trace;
        self.idle_polls.note(trace, start_ns, busy_ns, busy, Some(phase), poller);
    }

    /// Dates the moment the engine holds a majority's permission and the moment it is set up as
    /// leader, for status (failover timing).
    fn note_ready(&mut self, now_ns: u64) {
        let phase = self.leader.phase();
        if phase == Phase::Follower {
            if self.phases_stamped != 0 {
                self.phases_stamped = 0;
                for at in &self.shared.probe.phase_entered_at_ns {
                    at.store(0, Ordering::Release);
                }
                for counter in
                    self.shared.probe.phase_busy_ns.iter().chain(&self.shared.probe.phase_polls)
                {
                    counter.store(0, Ordering::Relaxed);
                }
                self.shared.probe.setup_trace.clear();
                self.idle_polls.reset();
            }
        } else if self.phases_stamped & 1 << phase as u32 == 0 {
            self.phases_stamped |= 1 << phase as u32;
            self.shared.probe.phase_entered_at_ns[phase as usize]
                .store(now_ns + 1, Ordering::Release);
        }
        let asking = matches!(phase, Phase::Follower | Phase::Permissions);
        self.permitted_date.update(&self.shared.probe.permitted_at_ns, !asking, now_ns);
        let setting_up = matches!(
            phase,
            Phase::Follower
                | Phase::Permissions
                | Phase::ReadFuos
                | Phase::CatchUp
                | Phase::UpdateFollowers
        );
        if self.ready_date.update(&self.shared.probe.ready_at_ns, !setting_up, now_ns) {
            let elected_at = self.shared.probe.elected_at_ns.load(Ordering::Acquire);
            info!(
                replica = self.me.0,
                fuo = self.leader.fuo(),
                confirmed = ids_text(self.replicas.ids(), self.leader.confirmed_mask()).as_str(),
                setup_us =
                    (elected_at != 0).then(|| (now_ns + 1).saturating_sub(elected_at) / 1000),
                "ready: leading with write access to a majority's logs"
            );
        }
    }

    /// Logs the leadership taken up in this poll, once its permission requests are out: the
    /// formatting takes microseconds, which they need not wait for.
    fn log_leading(&mut self) {
        if let Some(leaderships) = self.leading_to_log.take() {
            info!(
                replica = self.me.0,
                fuo = self.leader.fuo(),
                leaderships,
                "leading: asking the replicas for write permission"
            );
        }
    }

    /// Becomes leader or steps down as the background plane's election says (§5.1).
    fn follow_election(&mut self) -> bool {
        let elected = self.shared.leader();
        let leading = self.leader.phase() != Phase::Follower;
        self.end_term_if_over(leading);
        let (appointed, appointment) = self.shared.may_lead_appointed(self.me, self.term);
        let may_lead = self.shared.eligible.load(Ordering::Acquire) && self.shared.takes_part();
        if elected == Some(self.me) && !leading && may_lead && appointed {
            // Nothing is asked until the engine's requests go out (`request_permission`, after
            // this poll's `collect_acks`): an answer to the request word of an earlier
            // leadership (one that came after we stepped down, or the zero words of a replica
            // that never asked) is not a grant to this one. Taken as one, it confirmed a peer
            // that had since taken its log back, or a dead one, and the first operation
            // aborted the new leader's attempt.
            self.acked.fill(true);
            // Disarmed before the engine may post anything (`crate::ask_ahead`).
            self.word_ahead = self.shared.ask_ahead.take();
            self.askable_armed = 0;
            // Refused if the configuration at our FUO leaves us out (§5.4).
            if self.leader.become_leader(&self.mem, &mut self.actions) {
                let leaderships = self.shared.stats.leaderships.fetch_add(1, Ordering::Relaxed) + 1;
                self.leading_to_log = Some(leaderships);
                self.term = Some(self.shared.start_term(leaderships, appointment));
                return true;
            }
            self.word_ahead = 0;
            return false;
        }
        if (elected != Some(self.me) || !appointed) && leading {
            info!(
                replica = self.me.0,
                leader = elected.map(|l| l.0),
                fuo = self.leader.fuo(),
                "stepping down: this replica is no longer elected"
            );
            self.leader.step_down();
            self.end_term_if_over(false);
            self.fail_pending(elected);
            return true;
        }
        false
    }

    /// While following: fences the replicas we wrote to in a past leadership, and tells the
    /// background plane whom it may ask at our next election (`crate::ask_ahead`).
    fn arm_ask_ahead(&mut self) {
        if self.leader.phase() != Phase::Follower {
            return;
        }
        self.leader.fence_past_posts(&mut self.actions);
        let askable = self.leader.askable_ahead();
        if askable != self.askable_armed {
            self.askable_armed = askable;
            self.shared.ask_ahead.arm(askable);
        }
    }

    /// Publishes the end of the leadership under way once the engine no longer leads (it
    /// stepped down here, or on its own).
    fn end_term_if_over(&mut self, leading: bool) {
        if !leading && self.term.take().is_some() {
            self.shared.set_term(None);
        }
    }

    /// The engine dropped the pending requests (it stopped leading).
    fn fail_pending(&mut self, leader: Option<NodeId>) {
        if self.group.pending {
            self.group.answer_rest(|maybe_accepted| {
                if maybe_accepted {
                    ProposeError::Aborted
                } else {
                    ProposeError::NotLeader { leader }
                }
            });
            self.finish_group();
        }
    }

    /// Reads the acknowledgements permission managers wrote into our background region.
    fn collect_acks(&mut self, now_ns: u64) -> bool {
        let mut busy = false;
        for pos in 0..self.replicas.len() {
            if self.acked[pos] {
                continue;
            }
            let word = self.background.load_u64(ack_offset(pos) as usize).unwrap_or(0);
            if word & !ACK_RECOVERING == self.request_word {
                let peer = self.replicas.ids()[pos];
                // From the granter's run whose heartbeat the background plane accepted, or not
                // yet: a run it has not read may be one restarted without rejoining, whose empty
                // log must not count (`layout::FLAG_FOUNDING`); it is refused once read. A
                // granter restarted as it should be is counted once its heartbeat is read.
                let granter_boot = self.background.load_u64(ack_boot_offset(pos) as usize);
                let accepted_boot = self.shared.peers.boots[pos].load(Ordering::Acquire);
                if peer != self.me && granter_boot != Ok(u64::from(accepted_boot)) {
                    continue;
                }
                if peer != self.me && (self.binding[pos] || !self.connected[pos]) {
                    // Taken once our side is bound, or its binding failed (then the engine
                    // finds the peer unreachable, as before). A peer the detector still
                    // suspected when we asked was not connected (`request_permission`), yet it
                    // answered, so it is back: connect now, or the first operation through
                    // the side would fail and abort the attempt the grant joins (a restarted
                    // replica's grants did so again and again until the detector trusted it).
                    self.connect_initiator(pos);
                    if self.binding[pos] {
                        continue;
                    }
                }
                self.acked[pos] = true;
                busy = true;
                let grant =
                    if word & ACK_RECOVERING == 0 { Grant::Member } else { Grant::Recovering };
                self.leader.on_permission(peer, grant, now_ns, &mut self.mem, &mut self.actions);
                let round = self.request_round;
                let new_round = |a: &Action| matches!(a, Action::RequestPermission { round: r, .. } if Some(*r) != round);
                if self.actions.iter().any(new_round) {
                    // The grant started the engine over (an abort): the other words answer
                    // the old round, and the new one's requests are not out yet.
                    break;
                }
            }
        }
        let waited_ns = now_ns.saturating_sub(self.permissions_since_ns);
        let early = self.leader.phase() != Phase::Permissions && self.missing_may_join();
        if busy || (waited_ns <= self.settings.permission_timeout_ns && !early) {
            return busy;
        }
        if self.leader.phase() == Phase::Permissions {
            self.leader.retry_permissions(&self.mem, &mut self.actions);
        } else if self.leader.members_mask() & !self.leader.confirmed_mask() != 0 {
            // Leading without some replica: ask it again now and then (see
            // `Leader::ask_missing`).
            self.leader.ask_missing(&mut self.actions);
        } else {
            return false;
        }
        // Timed from now, whether the requests go out at once or after their fences.
        self.note_asked(now_ns);
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
        while i < self.actions.len() {
            let action = self.actions[i];
            i += 1;
            match action {
                Action::RequestPermission { peer, round } => {
                    self.request_permission(now_ns, peer, round)
                }
                Action::Post { peer, wr_id, op, signaled } => self.post(peer, wr_id, op, signaled),
                Action::Committed { index, mine } => {
                    self.shared.progress.count_commit();
                    if mine {
                        if self.leader.phase() != Phase::Follower {
                            self.phases_stamped |= FIRST_COMMIT_STAMP;
                        }
                        self.committed(index);
                    }
                }
                Action::Exposed => {
                    // Proposals are written in the order they were handed over (the engine
                    // holds none of an answered call: `shut_down` steps it down).
                    let g = &mut self.group;
                    let e = g.entries.iter_mut().take(g.handed).find(|e| !e.maybe_accepted);
                    e.expect("an exposed proposal was handed over").maybe_accepted = true;
                }
                Action::CorruptPeer { peer } => error!(
                    replica = self.me.0,
                    peer = peer.0,
                    "a log holds a minProposal no leader writes (corrupted memory or a faulty \
                     replica): a follower's is left out of the confirmed set (restarting it \
                     gives it a fresh log), this replica's own is overwritten"
                ),
                Action::Aborted { reason } => {
                    self.note_abort(reason);
                    self.shared.stats.aborts.fetch_add(1, Ordering::Relaxed);
                    *self.shared.stats.last_abort.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(reason);
                    if matches!(reason, AbortReason::Removed | AbortReason::OutcomeUnknown { .. }) {
                        // The engine stepped down; with `OutcomeUnknown` it leads again from
                        // the next poll, with nothing queued.
                        self.fail_pending(None);
                    }
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
        any
    }

    /// Logs why the leader engine aborted (rare; kept out of the loop running the actions).
    #[cold]
    fn note_abort(&self, reason: AbortReason) {
        let (replica, fuo) = (self.me.0, self.leader.fuo());
        match reason {
            AbortReason::NeedsStateTransfer { behind } => warn!(
                replica,
                fuo,
                behind,
                "stepping down: this replica's log is more than a log behind; it needs a state \
                 transfer"
            ),
            AbortReason::OutcomeUnknown { exposed_at } => warn!(
                replica,
                fuo,
                exposed_at,
                "stepping down for a moment: a proposal written at {exposed_at} may have been \
                 decided by another leader, and the log has moved on by more than its length \
                 since; it is answered as of unknown outcome, not proposed again"
            ),
            AbortReason::Removed => {
                warn!(
                    replica,
                    fuo, "stepping down: a decided membership entry removed this replica"
                )
            }
            reason => info!(
                replica,
                fuo,
                reason = ?reason,
                "leader attempt aborted; asking for write permission again"
            ),
        }
    }

    /// The engine committed the oldest entry it was handed (they commit in order).
    fn committed(&mut self, index: u64) {
        assert!(
            self.group.pending && self.group.handed > 0,
            "a commit of ours with nothing handed over"
        );
        let g = &mut self.group;
        let e = g.entries.pop_front().expect("handed over");
        g.handed -= 1;
        g.answer(e, Ok(index));
        if g.unanswered == 0 {
            self.finish_group();
        } else {
            // Room in the engine for the next entry; what it asks for is carried out by the
            // loop running the actions.
            self.hand_over();
        }
    }

    /// Whether a replica we lead without has moved on since we last asked it, and is now within
    /// a log of us: it restored a snapshot, or caught up on its own after being dropped. Asked
    /// again at once rather than at the next timeout: a leader at full speed would be more than
    /// a log ahead of it again by then.
    fn missing_may_join(&self) -> bool {
        let missing = self.leader.members_mask() & !self.leader.confirmed_mask();
        // Asked on every poll of a leader: with every member confirmed, as usual, nothing to do.
        missing != 0
            && (0..self.replicas.len()).any(|pos| {
                missing >> pos & 1 != 0 && {
                    let head = self.shared.peers.heads[pos].load(Ordering::Acquire);
                    let (fuo, slots_count) = (self.leader.fuo(), self.layout.slots_count());
                    standing::may_join(head, self.heads_at_request[pos], fuo, slots_count)
                }
            })
    }

    /// Delivers the engine's permission request to `peer` (§5.2): publishes the request word of
    /// `round` (a new one for a new round) for the background plane to deliver, after
    /// reconnecting our side of the connection we write the peer's log through if it broke.
    fn request_permission(&mut self, now_ns: u64, peer: NodeId, round: u32) {
        if self.request_round != Some(round) {
            self.request_round = Some(round);
            // The background plane may have sent this leadership's first round already.
            self.request_word = match std::mem::take(&mut self.word_ahead) {
                0 => self.shared.ask_ahead.next_word(),
                word => word,
            };
            self.note_asked(now_ns);
        }
        let pos = self.replicas.position(peer).expect("the engine asks replicas only");
        let suspected = self.shared.suspected(self.me_bit) >> pos & 1 != 0;
        if peer != self.me && !self.connected[pos] && !suspected {
            // The peer never initiates on this connection, so our side grants nothing.
            // Connecting binds it to the peer's current incarnation. A peer that is not there
            // yet stays unconnected: posts to it fail as unreachable and the engine goes on
            // without it. Nor is a peer the detector considers failed tried: a failed attempt
            // costs microseconds (on shm the fabric reads the peer's control file; on ofi it
            // tries the network), right in a new leader's permission switch, and the peer is
            // asked again once it is back
            // (`Leader::ask_missing`).
            self.connect_initiator(pos);
        }
        self.acked[pos] = false;
        self.shared.requests[pos].store(self.request_word, Ordering::Release);
        // Our background thread sends it: wake it if it sleeps.
        self.fabric.ring_doorbell(self.me);
    }

    /// The detector newly suspects some peers. Each may have died and come back as a new
    /// incarnation before we write to it again, and our side would still be bound to the dead
    /// one: connect again when we next ask it for permission (`request_permission`,
    /// `collect_acks`). Otherwise the first operation after a restart fails, and if that is in
    /// a new leader's permission round (a follower that never wrote to the restarted replica)
    /// it can cost the round its majority and a retry. Forgetting a live peer's side costs one
    /// connect, at the next round only: operations in flight are not disturbed.
    #[cold]
    fn note_suspected(&mut self, suspected: u64) {
        for pos in 0..self.replicas.len() {
            if (suspected & !self.suspected_seen) >> pos & 1 != 0 {
                self.connected[pos] = false;
            }
        }
    }

    /// Connects our side of the connection we write `pos`'s log through, and notes whether it
    /// is up (`connected`) or its binding still under way (`binding`).
    fn connect_initiator(&mut self, pos: usize) {
        let peer = self.replicas.ids()[pos];
        let conn = ConnId::new(peer, replication_channel(self.me, peer));
        let result = self.fabric.connect(conn, Access::NONE);
        self.binding[pos] = matches!(result, Err(FabricError::InProgress(..)));
        self.connected[pos] = result.is_ok();
        if result.is_ok() {
            // Bound anew: what was posted before is gone with the old binding.
            self.post_refused &= !(1 << pos);
        }
    }

    /// Permission requests went out (or will, after their fences) now: the timeout runs from
    /// here, and a missing replica whose head moves from here may be asked again early.
    fn note_asked(&mut self, now_ns: u64) {
        self.permissions_since_ns = now_ns;
        for (seen, head) in self.heads_at_request.iter_mut().zip(&self.shared.peers.heads) {
            *seen = head.load(Ordering::Acquire);
        }
    }

    fn post(&mut self, peer: NodeId, wr_id: u64, op: RemoteOp, signaled: bool) {
        let pos = self.replicas.position(peer).expect("the engine posts to replicas only");
        debug_assert_eq!(wr_id & PEER_BITS, 0, "the engine leaves the low bits of wr_id free");
        let word;
        let mut entry = [0u8; INLINE_WRITE_BYTES_MAX];
        let inline_max = self.fabric.max_inline_bytes().min(INLINE_WRITE_BYTES_MAX);
        let op = match op {
            RemoteOp::WriteFromLog { offset, len } if len as usize <= inline_max => {
                let bytes = &mut entry[..len as usize];
                self.mem.read(Area::Log, offset, bytes);
                Op::Write {
                    source: Source::Inline(bytes),
                    remote: RemoteAddr { region: LOG_REGION, offset },
                }
            }
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
        if self.post_refused >> pos & 1 != 0 {
            // One post to this peer was refused: the ones after it would land without it (a
            // slot missing under the FUO written next, which the follower would take as
            // decided), so they are refused as well, until our side is connected again.
            let c = Completion {
                wr_id: wr.wr_id,
                kind: op.kind(),
                status: Status::PeerUnreachable,
                value: 0,
            };
            self.deferred.push_back(c);
            return;
        }
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
            // Not connected, or the fabric refused: to the engine this peer is unreachable, and
            // a follower is dropped (it asks to be taken back).
            if matches!(e, PostError::QueueFull) && !self.queue_full_said {
                // Still full right after draining: the endpoint holds every write a step can
                // post, so it is the connection that is full (one that holds fewer requests than
                // its endpoint: verbs' `send_queue_depth`), with writes to a follower that
                // stopped answering waiting out the fabric's retry time. Said once per run: it
                // comes back with every follower that dies under load.
                self.queue_full_said = true;
                warn!(
                    replica = self.me.0,
                    peer = peer.0,
                    "the fabric refused a post for lack of room on this connection after the \
                     completion queue was drained: the follower is dropped as unreachable and \
                     taken back when it asks (said once per run)"
                );
            }
            self.connected[pos] = false;
            self.post_refused |= 1 << pos;
            let status = match e {
                PostError::InlineTooLarge { .. } => Status::RemoteInvalidRequest,
                _ => Status::PeerUnreachable,
            };
            let kind = op.kind();
            self.deferred.push_back(Completion { wr_id: wr.wr_id, kind, status, value: 0 });
        }
    }

    /// Requests waiting for room in the log (§5.3) fail with "log full" once the replica the
    /// room waits for has applied nothing for the timeout.
    ///
    /// Back-pressure, not errors: while that replica applies, however slowly (a follower whose
    /// threads other processes keep from the CPU), each head the background plane reads frees
    /// room ([`mu_replication::Leader::set_head`]) and the leader goes on at the pace of the
    /// replicas it counts on; the time runs from the last time the room grew, not from the
    /// first wait. Only a replica that stopped applying altogether (a commit handler that never
    /// returns) ends the wait, named in the error. Nothing is held meanwhile: the proposals
    /// wait in the engine, and this thread goes on polling, so completions, leader changes and
    /// the replayer are served as usual; a leadership lost while waiting answers the requests
    /// as it always does (`NotLeader` or `Aborted`), and the wait ends with it.
    fn check_log_full(&mut self, now_ns: u64) {
        if !self.group.pending {
            return;
        }
        if !self.leader.waiting_for_room() {
            self.group.room_wait = None;
            return;
        }
        let stalled_ns = self.group.room_stalled_ns(now_ns, self.leader.log_limit());
        if stalled_ns <= self.settings.log_full_timeout_ns {
            return;
        }
        let Some((replica, oldest)) = self.leader.room_holder() else { return };
        if self.leader.cancel_waiting_proposals() == 0 {
            return;
        }
        let slots_count = self.layout.slots_count();
        warn!(
            replica = self.me.0,
            behind = replica.0,
            oldest,
            slots_count,
            stalled_ms = stalled_ns / 1_000_000,
            "log full: the replica the leader waits for has applied nothing for \
             log_full_timeout_ns; proposals fail"
        );
        // One written by an attempt that aborted since may still be decided by a later
        // prepare (ours or another leader's): its outcome is unknown.
        self.group.answer_rest(|maybe_accepted| {
            if maybe_accepted {
                ProposeError::Aborted
            } else {
                ProposeError::LogFull { replica, oldest, slots_count }
            }
        });
        self.finish_group();
    }
}

// The three regions of a replica have distinct ids.
const _: () = assert!(LOG_REGION.0 != SCRATCH_REGION.0 && SCRATCH_REGION.0 != BACKGROUND_REGION.0);

/// The bit of `phases_stamped` past the phases': the leadership committed a proposal of its own.
const FIRST_COMMIT_STAMP: u16 = 1 << Phase::ALL.len();
