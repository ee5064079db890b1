//! The replication plane's driver for Velos (`docs/protocols/velos.md`): runs the
//! `mu_velos::Proposer` when this replica is elected and learns decided entries from its own
//! slot words otherwise, on the replication connections. Like [`crate::ReplicationDriver`] it
//! owns no thread and reads no clock.
//!
//! Every replica is an acceptor: peers write values into its Velos region and compare-and-swap
//! its slot words through the replication connections they initiate, whose side here allows
//! everything. No permission is ever switched: safety comes from the CAS words alone.

use crate::group::Group;
use crate::layout::replication_channel;
use crate::lease::Term;
use crate::replication::{Applier, ProposeError, Settings, INLINE_WRITE_BYTES_MAX};
use crate::setup_trace::Poller;
use crate::shared::{ids_text, Shared};
use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, FabricError, LocalRegion, LocalSlice, NodeId, Op,
    OpKind, PostError, QpState, RemoteAddr, Source, Status, WorkRequest,
};
use mu_log::{Entry, EntryKind, Slot, HEAD_OFFSET};
use mu_replication::membership::{self, Change};
use mu_replication::ReplicaSet;
use mu_velos::guards::{self, Resync};
use mu_velos::heads::Heads;
use mu_velos::rejoin::{self, Fence, Rejoin};
use mu_velos::standing::{self, Candidacy, ElectionMove, LeaderlessWait, Removal};
use mu_velos::{learner, Action, Event, Proposer, StopReason, VelosLayout, OP_BITS, VELOS_REGION};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tracing::{error, info, warn};

/// Operation ids of the driver's own operations (the proposer's leave the top two bits 0).
const DRIVER_OP: u64 = 1 << OP_BITS;
const KIND_WRITE: u64 = DRIVER_OP;
const KIND_LEARN_WORD: u64 = DRIVER_OP | 1 << 16;
const KIND_LEARN_ENTRY: u64 = DRIVER_OP | 2 << 16;
const POS_MASK: u64 = 0xffff;

/// How often a broken connection is set up again, and how long a follower waits with no
/// progress before it reads the leader's memory to catch up.
const RECONNECT_PERIOD_NS: u64 = 1_000_000;
const CATCH_UP_AFTER_NS: u64 = 2_000_000;

/// The replication endpoint's depth: a write and a CAS per acceptor for the accept and for each
/// prepare of the window, and at least 256.
pub(crate) fn queue_depth(prepare_ahead: usize, replicas: usize) -> usize {
    (4 * (prepare_ahead + 2) * replicas).clamp(256, 1 << 16)
}

/// The most signaled operations one peer may have in flight. An acceptor that stopped answering
/// (dead, or cut off) fails them only when the fabric gives up, after its retry time (1 ms in
/// the simulator, up to seconds on RDMA), and meanwhile each takes room in the completion queue
/// shared with the other peers. Bounded so, every peer's operations fit together, with each
/// signaled one's unsignaled value write (an accept writes the value, then CASes the word):
/// a live majority is never refused for lack of room. It is at least twice the window's CASes
/// per peer ([`queue_depth`]), so a peer that keeps pace is never near it.
fn in_flight_max(queue_depth: usize, replicas: usize) -> u32 {
    let peers = replicas.saturating_sub(1).max(1);
    let max = (queue_depth / peers).saturating_sub(1) / 2;
    u32::try_from(max.max(1)).unwrap_or(u32::MAX)
}

/// Whose operation a completion's `wr_id` names, and to which peer (a position).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpOf {
    /// The proposer's (a CAS or a read; its op id keeps the position in its low 6 bits).
    Proposer(usize),
    /// A value write the proposer asked for, posted unsignaled.
    Write(usize),
    /// A follower's read of the leader's word or entry (`CatchUp`).
    Learn(usize),
}

fn op_of(wr_id: u64) -> OpOf {
    if wr_id & DRIVER_OP == 0 {
        OpOf::Proposer((wr_id & 63) as usize)
    } else if wr_id & !POS_MASK == KIND_WRITE {
        OpOf::Write((wr_id & POS_MASK) as usize)
    } else {
        OpOf::Learn((wr_id & POS_MASK) as usize)
    }
}

/// A completion taken from the endpoint: one signaled operation fewer in flight to its peer.
/// (An unsignaled write completes only when it fails, and was not counted.)
fn count_completed(in_flight: &mut [u32], c: &Completion) {
    let pos = match op_of(c.wr_id) {
        OpOf::Proposer(pos) | OpOf::Learn(pos) => pos,
        OpOf::Write(_) => return,
    };
    if let Some(count) = in_flight.get_mut(pos) {
        *count = count.saturating_sub(1);
    }
}

/// This replica's own Velos region, for the proposer.
struct RegionMemory<'a, R: LocalRegion>(&'a R);

impl<R: LocalRegion> mu_velos::Memory for RegionMemory<'_, R> {
    fn load_word(&self, offset: u64) -> u64 {
        self.0.load_u64(offset as usize).expect("Velos region layout")
    }

    fn cas_word(&mut self, offset: u64, expected: u64, desired: u64) -> Option<u64> {
        // The offsets are the layout's. A fabric that cannot swap on local memory at all is
        // refused at start (`ReplicaCore::new_velos`); one whose local swap fails later (verbs'
        // loopback timing out) stops the proposer (`StopReason::LocalSwapFailed`).
        match self.0.compare_swap_u64(offset as usize, expected, desired) {
            Ok(old) => Some(old),
            Err(error) => {
                warn!(offset, %error, "compare-and-swap on this replica's own Velos word failed");
                None
            }
        }
    }

    fn read(&self, offset: u64, out: &mut [u8]) {
        self.0.read(offset as usize, out).expect("Velos region layout")
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        self.0.write(offset as usize, data).expect("Velos region layout")
    }
}

/// A follower reading the leader's memory for an index it cannot learn from its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CatchUp {
    Idle,
    Word { from: usize, index: u64 },
    Entry { from: usize, index: u64 },
}

/// Steps of a new Velos leader between its start ([`crate::ReplicaStatus::ready_at_ns`]) and
/// its first commit, dated for failover timing as Mu's phases are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VelosStep {
    /// The index proposed next is prepared at a majority (or past it): the re-prepare round
    /// of the indices the old leader may have prepared is done.
    Prepared,
    /// The first index was decided, whoever's value it holds (usually the old leader's last
    /// entry, decided again).
    Decided,
    /// The application's first value was handed to the proposer.
    Submitted,
}

impl VelosStep {
    /// Every step, in the order of the enum.
    pub const ALL: [VelosStep; 3] = [VelosStep::Prepared, VelosStep::Decided, VelosStep::Submitted];
}

/// See the module docs.
pub struct VelosDriver<F: Fabric> {
    fabric: F,
    me: NodeId,
    me_pos: usize,
    replicas: ReplicaSet,
    layout: VelosLayout,
    settings: Settings,
    proposer: Proposer,
    region: F::Region,
    /// The Mu log region's header: the head word the background plane publishes to peers.
    log: F::Region,
    /// The state-transfer region, where the snapshot we serve goes.
    snapshot: F::Region,
    snapshot_buf: Vec<u8>,
    ep: F::Endpoint,
    shared: Arc<Shared>,
    group: Group,
    /// The [`VelosStep`]s dated in this leadership (bit `step as u32`).
    steps_stamped: u8,
    /// Idle polls since the last busy one, for the set-up trace.
    idle_polls: crate::setup_trace::IdlePolls,
    /// Whether this leadership answered the application's first value (set-up timing ends).
    first_answered: bool,
    /// Entries of `group` handed to the proposer (0 or 1: one at a time).
    handed: bool,
    /// The next index to apply here.
    applied: u64,
    /// The entry applied last, as a new leader republishes it.
    last: Option<(EntryKind, Vec<u8>)>,
    /// Our side of the connection we initiate on, per position, is up.
    connected: Vec<bool>,
    /// Per position: signaled operations posted to the peer whose completions have not come
    /// back, and the most allowed before the peer is set aside ([`VelosDriver::set_aside`]).
    in_flight: Vec<u32>,
    in_flight_max: u32,
    /// Peers set aside because `in_flight_max` of their operations were out: nothing more
    /// goes to them until all have come back ([`VelosDriver::readmit_drained`]).
    backlogged: u64,
    /// Operations of the proposer not posted because their peer was set aside, to fail on the
    /// next poll as if posted and failed (their connection is not at fault).
    unposted: VecDeque<u64>,
    /// Whether a post refused for a full connection was logged (once per run).
    connection_full_noted: bool,
    /// Our side of the connection the peer initiates on is up, allowing everything.
    target_connected: Vec<bool>,
    /// When the side a peer initiates on may be bound again, and when ours may be connected
    /// again: apart, so that a bind does not hold back a reconnection, nor the other way.
    next_bind_ns: Vec<u64>,
    next_connect_ns: Vec<u64>,
    completions: Vec<Completion>,
    /// Completions met while posting (the queue was full, or a post was refused), handled on
    /// the next poll.
    deferred: VecDeque<Completion>,
    /// The proposer's actions and events being handled, kept between polls so that a poll
    /// allocates nothing.
    actions_buf: Vec<Action>,
    events_buf: Vec<Event>,
    slot_buf: Vec<u8>,
    catch_up: CatchUp,
    last_progress_ns: u64,
    /// The proposer stopped by itself: this replica does not lead again in this run.
    stopped: Option<StopReason>,
    /// The kind of the entry of ours in the proposer, if one is (empty or a rejoin entry; not
    /// a request's).
    own_pending: Option<EntryKind>,
    /// When this leader last decided an entry, and whether it was an empty one.
    last_decision: (u64, bool),
    /// A leadership taken up in this poll (the index it starts at, and the count), logged at the
    /// poll's end.
    leading_to_log: Option<(u64, u64)>,
    /// The leadership under way, as published in `shared` (for leased reads).
    term: Option<Term>,
    /// Set while this replica, restarted, is not an acceptor yet.
    recovery: Option<Rejoin>,
    /// A replica waiting to stand after a snapshot, while no leader is elected.
    leaderless: LeaderlessWait,
    /// Rejoin requests made in this run (each one a new request id), and the run's nonce they
    /// are made from ([`crate::core::Boot::nonce`]).
    rejoin_attempts: u32,
    run_nonce: u64,
    /// Per position: the request the last rejoin entry applied here answered, so that a leader
    /// decides one entry per request.
    rejoined: Vec<u64>,
    /// This leader applied its own removal: it decides one entry more, from whose word the
    /// others learn that the removal was decided, then steps down and stops taking part.
    leaving: bool,
    /// While `leaving`: the index after the entry that removed this replica. A live peer whose
    /// head reaches it applied the removal itself.
    left_at: u64,
    /// Per position: the peer's boot id when our side it initiates on was bound.
    bound_boots: Vec<u32>,
    /// Per position, while our side to the peer is down: the count of its accepted heartbeat
    /// reads (`PeerSignals::reads_accepted`) when we found it down. It is bound again only
    /// once that count moved on: the peer's current run is then one our background plane
    /// read and counted, not one restarted without rejoining that it has yet to refuse.
    down_at_reads: Vec<Option<u64>>,
    /// When to look again whether this replica, restarted, still abstains where it matters.
    next_abstention_check_ns: u64,
    /// Whether the heads can be trusted after a stall ([`Resync`]): this replica neither starts
    /// nor goes on leading until the background plane has read enough peers' heads with reads
    /// posted after it ([`VelosDriver::resynced`]).
    resync: Resync,
    /// Peers the proposer is kept from ([`Proposer::exclude`]): their heads are two logs or
    /// more behind ours, so their slot words may be too old to read rightly.
    excluded: u64,
    /// Where the log was (the highest of `applied` and every peer's head) when this replica
    /// last took new slot words (restarted or refreshed): its words are as new as that, so it
    /// refreshes again only once a peer is [`guards::REFRESH_AFTER_LAPS`] past it.
    words_taken_at: u64,
}

impl<F: Fabric> VelosDriver<F> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        fabric: F,
        replicas: ReplicaSet,
        layout: VelosLayout,
        proposer: Proposer,
        region: F::Region,
        log: F::Region,
        snapshot: F::Region,
        (ep, queue_depth): (F::Endpoint, usize),
        shared: Arc<Shared>,
        (settings, run_nonce): (Settings, u64),
    ) -> VelosDriver<F> {
        let me = fabric.node();
        let n = replicas.len();
        let me_pos = replicas.position(me).expect("validated");
        let round = proposer.actions_per_round();
        let window = proposer.window();
        // A replica that starts ineligible restarted: what it promised and accepted is lost.
        let recovery =
            (!shared.eligible.load(Ordering::Acquire)).then(|| Rejoin::new((0, 0), true));
        debug_assert_eq!(proposer.members(), shared.members.load(Ordering::Acquire));
        VelosDriver {
            fabric,
            me,
            me_pos,
            replicas,
            layout,
            settings,
            proposer,
            region,
            log,
            snapshot,
            snapshot_buf: Vec::new(),
            ep,
            shared,
            group: Group::with_room(layout.max_value_bytes(), settings.batch_requests_max),
            steps_stamped: 0,
            idle_polls: Default::default(),
            first_answered: false,
            handed: false,
            applied: 0,
            last: None,
            connected: vec![false; n],
            in_flight: vec![0; n],
            in_flight_max: in_flight_max(queue_depth, n),
            backlogged: 0,
            unposted: VecDeque::new(),
            connection_full_noted: false,
            target_connected: vec![false; n],
            next_bind_ns: vec![0; n],
            next_connect_ns: vec![0; n],
            completions: vec![Completion::EMPTY; 256],
            // Sized as the proposer's own buffers, so that a new leader's first rounds do not
            // allocate.
            deferred: VecDeque::with_capacity(round),
            actions_buf: Vec::with_capacity(round),
            events_buf: Vec::with_capacity(window + 1),
            slot_buf: vec![0; layout.slot_bytes() as usize],
            catch_up: CatchUp::Idle,
            last_progress_ns: 0,
            stopped: None,
            own_pending: None,
            last_decision: (0, true),
            leading_to_log: None,
            term: None,
            recovery,
            leaderless: LeaderlessWait::default(),
            rejoin_attempts: 0,
            run_nonce,
            rejoined: vec![0; n],
            leaving: false,
            left_at: 0,
            bound_boots: vec![0; n],
            down_at_reads: vec![None; n],
            next_abstention_check_ns: 0,
            resync: Resync::default(),
            excluded: 0,
            words_taken_at: 0,
        }
    }

    /// Whether this replica restarted and does not answer as an acceptor yet.
    pub fn recovering(&self) -> bool {
        self.recovery.is_some()
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The proposer, for status.
    pub fn proposer(&self) -> &Proposer {
        &self.proposer
    }

    /// The next index this replica applies.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// Hands the proposer a membership change (the Mu paper's §5.4, as Velos runs it:
    /// `docs/protocols/velos.md`, "Membership changes"): one entry, alone in the proposer, for
    /// the indices after it. Its outcome comes out of [`VelosDriver::take_outcomes`] like a
    /// request's. Refused at once if it is not a change of the current configuration. (`now_ns`
    /// keeps the signature of Mu's driver; Velos times nothing here.)
    pub fn submit_change(&mut self, change: Change, _now_ns: u64) -> Result<(), ProposeError> {
        if self.group.busy() {
            return Err(ProposeError::Busy);
        }
        if !self.proposer.is_leading() || self.leaving {
            return Err(self.not_leader());
        }
        // One entry in flight at a time: every entry before this one is applied here, so the
        // configuration it changes is the current one.
        change.check(&self.replicas, self.members_applied()).map_err(ProposeError::Membership)?;
        let value = change.encode();
        self.stage(std::iter::once(&value[..]), true)
    }

    /// Hands `requests` to the proposer, packed into entries; their outcomes come out of
    /// [`VelosDriver::take_outcomes`] after later polls, as with Mu (whose signature `now_ns`
    /// keeps).
    pub fn submit<'a>(
        &mut self,
        requests: impl IntoIterator<Item = &'a [u8]>,
        now_ns: u64,
    ) -> Result<(), ProposeError> {
        if self.group.busy() {
            return Err(ProposeError::Busy);
        }
        if !self.proposer.is_leading() || self.leaving {
            return Err(self.not_leader());
        }
        self.stage(requests, false)?;
        if self.handed {
            self.stamp(VelosStep::Submitted, now_ns);
        }
        Ok(())
    }

    /// Not leading, with the elected leader as a hint; none while this leader is leaving (it
    /// is still the one elected, but takes no more requests).
    fn not_leader(&self) -> ProposeError {
        let leader = if self.leaving { None } else { self.shared.leader() };
        ProposeError::NotLeader { leader }
    }

    /// Plans the entries of a call (a membership change with `change`) and hands the first
    /// one over.
    fn stage<'a>(
        &mut self,
        requests: impl IntoIterator<Item = &'a [u8]>,
        change: bool,
    ) -> Result<(), ProposeError> {
        self.group.change = change;
        self.group.plan(
            requests,
            self.layout.max_value_bytes(),
            self.settings.batch_requests_max,
        )?;
        self.group.pending = true;
        self.shared.progress.in_propose.store(true, Ordering::Release);
        self.hand_over();
        Ok(())
    }

    /// Dates `step` if it is the first of its kind in this leadership (failover timing).
    fn stamp(&mut self, step: VelosStep, now_ns: u64) {
        if self.steps_stamped & 1 << step as u32 == 0 {
            self.steps_stamped |= 1 << step as u32;
            self.shared.probe.velos_step_at_ns[step as usize].store(now_ns + 1, Ordering::Release);
        }
    }

    /// Forgets the steps dated and the polls timed: a new leadership dates and times its own.
    fn clear_steps(&mut self) {
        self.steps_stamped = 0;
        self.first_answered = false;
        for at in &self.shared.probe.velos_step_at_ns {
            at.store(0, Ordering::Release);
        }
        self.shared.probe.velos_busy_ns.store(0, Ordering::Relaxed);
        self.shared.probe.velos_polls.store(0, Ordering::Relaxed);
        self.shared.probe.setup_trace.clear();
        self.idle_polls.reset();
    }

    /// Whether a new leadership's polls are being timed ([`Self::note_setup_poll`]): from the
    /// poll that takes up the leadership to the one that answers the application's first
    /// value. The caller times a poll if this held before it or holds after it.
    pub fn setup_timed(&self) -> bool {
        self.proposer.is_leading() && !self.first_answered
    }

    /// Counts `busy_ns`, the time the last poll took, for status
    /// ([`crate::ReplicaStatus::velos_busy_ns`]): a new leader's time until its first commit
    /// splits into time inside its polls and time between them. Not counted once the
    /// leadership ended in that poll.
    /// The poll is also traced (`ReplicaStatus::setup_polls`), as under Mu.
    pub fn note_setup_poll(&mut self, start_ns: u64, busy_ns: u64, busy: bool, poller: Poller) {
        if self.proposer.is_leading() {
            self.shared.probe.velos_busy_ns.fetch_add(busy_ns, Ordering::Relaxed);
            self.shared.probe.velos_polls.fetch_add(1, Ordering::Relaxed);
            let trace = &self.shared.probe.setup_trace;
            self.idle_polls.note(trace, start_ns, busy_ns, busy, None, poller);
        }
    }

    fn hand_over(&mut self) {
        if self.handed || self.group.entries.is_empty() || self.proposer.has_pending() {
            return; // an empty entry of ours goes first
        }
        let (kind, value) = self.group.entry_value(0);
        match self.proposer.submit(kind, value) {
            Ok(()) => self.handed = true,
            Err(e) => unreachable!("checked before handing over: {e}"),
        }
    }

    /// Whether the submitted requests all have outcomes, to be taken.
    pub fn outcomes_ready(&self) -> bool {
        self.group.answered
    }

    /// The outcomes of the submitted requests, once all are known, into `into`.
    pub fn take_outcomes(&mut self, into: &mut Vec<Result<u64, ProposeError>>) -> bool {
        self.group.take_outcomes(into)
    }

    /// Fails the requests in progress, if any, because the replica stops.
    pub fn shut_down(&mut self) {
        if self.group.pending {
            self.group.answer_rest(|_| ProposeError::ShuttingDown);
            self.finish_group();
            // The proposer stops with them: its decision of the value it holds would otherwise
            // be taken for another call's (one that got in just before the stop).
            if self.proposer.is_leading() {
                self.step_down(self.shared.leader());
            }
        }
    }

    fn finish_group(&mut self) {
        self.group.finish();
        self.handed = false;
        self.shared.progress.in_propose.store(false, Ordering::Release);
    }

    /// Does whatever is due: connections, leadership, completions, the proposer's actions,
    /// applying decided entries with `app`. Returns whether anything happened.
    pub fn poll(&mut self, now_ns: u64, app: &mut dyn Applier) -> bool {
        self.shared.progress.bump_loop();
        let stall_ns = guards::stall_ns(self.settings.read_period_ns, self.layout.slots_count());
        self.resync.on_poll(now_ns, stall_ns);
        let answered_before = self.group.answered;
        self.update_exclusions();
        self.connect(now_ns);
        if self.recovery.is_some() {
            let busy = self.poll_completions(app) | self.recover(now_ns, app);
            // It serves snapshots while it recovers: what it applied was decided, and with its
            // head caught up it may be the peer others ask first.
            self.serve_and_publish(app);
            return busy;
        }
        let mut busy = false;
        if !self.proposer.is_leading() && self.shared.leader() == Some(self.me) {
            // About to lead: first apply what our memory already shows decided. A follower's
            // learning can trail the old leader by many entries, and the proposer would decide
            // each of them again, with a round of CAS each (measured: dozens of entries after
            // a leader was killed under load).
            busy |= self.learn(app);
        }
        self.stand_if_leaderless(now_ns);
        busy |= self.follow_election(now_ns);
        busy |= self.poll_completions(app);
        // Decisions first: what the proposer decided frees it for the next entry.
        busy |= self.take_events(app, now_ns);
        busy |= self.step_down_if_removal_applied();
        let resynced = self.resynced_or_stale();
        if self.proposer.is_leading() && !resynced {
            // Stalled: nothing goes out until we know how far the others went. What the
            // proposer decides meanwhile from completions is sound (each a CAS that found the
            // word it expected); what it would post next may rest on words it misreads.
        } else if self.proposer.is_leading() {
            busy |= self.lead(now_ns, app, answered_before);
        } else {
            busy |= self.follow(now_ns, app);
        }
        self.check_abstention(now_ns);
        self.serve_and_publish(app);
        if let Some((first, leaderships)) = self.leading_to_log.take() {
            // After the first moves of the leadership taken up in this poll: formatting the
            // event takes microseconds, which they need not wait for.
            info!(replica = self.me.0, first, leaderships, "leading (velos)");
        }
        busy
    }

    /// A leaving leader steps down once a live peer applied its removal. The others can learn
    /// the removal from that peer: no entry of ours is needed, and the members of the new
    /// configuration, electing by it, compete with us for it (`mu sim --protocol velos --seed
    /// 22664 --replicas 3 --faults all,membership`: elected under the old configuration by the
    /// replica that had not applied the removal, we decided it again, then duelled for ever
    /// with the leader that had decided it first for the index after it).
    fn step_down_if_removal_applied(&mut self) -> bool {
        if !(self.leaving && self.removal_applied_elsewhere()) {
            return false;
        }
        info!(
            replica = self.me.0,
            "stepping down: removed, and a live peer has applied the removal"
        );
        self.step_down(None);
        true
    }

    /// Whether the heads can be trusted ([`VelosDriver::resynced`]); a leader that can trust
    /// them and finds a peer a whole log ahead steps down for a state transfer.
    fn resynced_or_stale(&mut self) -> bool {
        let resynced = self.resynced();
        // Any head read, of a peer alive now or not: the detector may have dropped the very
        // peer whose head shows the log went on without us.
        let log_behind = self.heads().any_a_log_ahead();
        if self.proposer.is_leading() && resynced && log_behind {
            warn!(
                replica = self.me.0,
                applied = self.applied,
                "a live peer is a whole log ahead of this leader: stepping down for a state \
                 transfer"
            );
            self.stop_stale();
        }
        resynced
    }

    /// A leader's turn: rejoin and empty entries of its own, the application's next entry, the
    /// proposer's moves and what they decided. `answered_before`: outcomes were waiting to be
    /// taken before this poll.
    fn lead(&mut self, now_ns: u64, app: &mut dyn Applier, answered_before: bool) -> bool {
        // Before the next group's entry: a restarted peer waits for nothing else.
        self.propose_rejoin();
        self.hand_over();
        if self.handed {
            self.stamp(VelosStep::Submitted, now_ns);
        }
        self.propose_noop_if_idle(now_ns);
        self.proposer.set_applied_floor(self.floor());
        // Outcomes answered in this poll: their caller goes first, and the proposer's next
        // moves (preparing the indices ahead, §5.1) wait for the next poll, off their path.
        if !self.group.answered || answered_before {
            self.proposer.poll(&mut RegionMemory(&self.region));
        }
        let mut busy = self.run_actions();
        busy |= self.take_events(app, now_ns);
        if matches!(
            self.proposer.phase(),
            Some(mu_velos::Phase::Prepared | mu_velos::Phase::Reading | mu_velos::Phase::Accepting)
        ) {
            self.stamp(VelosStep::Prepared, now_ns);
        }
        self.check_log_full(now_ns);
        busy
    }

    /// A follower's turn: new slot words if a peer is far ahead, else what it can learn, from
    /// its own words, a snapshot, or the leader's memory.
    fn follow(&mut self, now_ns: u64, app: &mut dyn Applier) -> bool {
        if guards::refresh_due(&self.heads(), self.proposer.is_member(), self.words_taken_at) {
            // New words first: the state transfer comes while it waits for its rejoin entry.
            self.shared.set_replayer_stuck(true);
            self.refresh_words();
            return false;
        }
        let learned = self.learn(app) | self.install_snapshot(app);
        self.catch_up_or_transfer(learned, now_ns);
        learned
    }

    /// Serves a peer's request for a snapshot, if one waits, and publishes how far this
    /// replica applied.
    fn serve_and_publish(&mut self, app: &mut dyn Applier) {
        crate::transfer::serve(
            &self.shared,
            &self.snapshot,
            &mut self.snapshot_buf,
            self.settings.snapshot_bytes_max,
            (self.me, &self.replicas),
            (self.applied, self.proposer.members()),
            // The entry at `applied - 1`, when this replica applied it (not when it installed
            // a snapshot since, which may have come without one).
            self.last.as_ref().map(|(kind, value)| (*kind, &value[..])),
            app,
        );
        self.shared.progress.set_fuo(self.applied);
    }

    /// State transfer, receiving side (a follower a whole log behind, or one whose entries
    /// are gone from every memory it can read): restores the snapshot the background plane
    /// fetched and goes on from its index. A new leader writes the entry before its next index
    /// again (§5.4): the donor sends that entry with the snapshot when it holds it. The replica
    /// stands for election again once it has applied an entry the usual way, or, holding that
    /// entry, once no leader has been elected for a while ([`VelosDriver::stand_if_leaderless`]).
    fn install_snapshot(&mut self, app: &mut dyn Applier) -> bool {
        let Some((index, members, last)) = crate::transfer::install(
            &self.shared,
            self.layout.max_value_bytes(),
            self.me,
            self.applied,
            self.proposer.is_leading(),
            app,
        ) else {
            return false;
        };
        self.applied = index;
        self.last = last;
        self.catch_up = CatchUp::Idle;
        self.note_members(members);
        self.log.store_u64(HEAD_OFFSET as usize, index).expect("log header");
        self.shared.eligible.store(false, Ordering::Release);
        self.leaderless.reset();
        true
    }

    /// A replica that installed a snapshot, with the entry below its index, stands for
    /// election once no leader was elected for a while ([`LeaderlessWait`]).
    fn stand_if_leaderless(&mut self, now_ns: u64) {
        let waiting = LeaderlessWait::waiting(
            self.shared.eligible.load(Ordering::Relaxed),
            self.last.is_some(),
            self.stopped.is_some(),
            self.shared.leader().is_none(),
        );
        if self.leaderless.poll(waiting, now_ns, self.settings.read_period_ns) {
            info!(
                replica = self.me.0,
                applied = self.applied,
                "no leader elected: standing for election with the snapshot's last entry"
            );
            self.stand_again();
        }
    }

    /// Brings our sides of the replication connections up: the one peers initiate on with
    /// every right (they write values and CAS words here), the one we initiate on.
    ///
    /// Not to a peer the failure detector considers failed: an attempt that fails costs
    /// microseconds (on shm the fabric reads the peer's control file; on ofi it tries the
    /// network) on this thread, which is a leader's
    /// proposing thread, once per period for as long as the peer stays down. It is tried again
    /// once the detector sees it alive.
    fn connect(&mut self, now_ns: u64) {
        let suspected = self.shared.suspected(1 << self.me_pos);
        for pos in 0..self.replicas.len() {
            let reads = self.shared.peers.reads_accepted[pos].load(Ordering::Acquire);
            if !self.connected[pos] && self.down_at_reads[pos].is_none() {
                self.down_at_reads[pos] = Some(reads);
            }
            let boot = self.shared.peers.boots[pos].load(Ordering::Acquire);
            if self.target_connected[pos] && boot != self.bound_boots[pos] {
                // The peer restarted (or we bound before we knew its run): the side it
                // initiates on is bound again, to its current run. Ours it reaches it through
                // fails by itself if so.
                self.target_connected[pos] = false;
                self.next_bind_ns[pos] = 0;
            }
            // A restarted replica lets no one in before it knows where it abstains. The side
            // is bound once the peer's run is known (from its heartbeat), and that run is
            // noted, so that a restart after it is noticed.
            // Nor a peer whose heartbeat has not shown our configuration: it would write its
            // values and words into our memory at its own offsets.
            let same_config = self.shared.peers.config_same.load(Ordering::Acquire) >> pos & 1 != 0;
            let bind_target = !self.target_connected[pos]
                && self.recovery.is_none()
                && boot != 0
                && same_config
                && now_ns >= self.next_bind_ns[pos];
            // Once the detector read the peer's heartbeat again since the side went down.
            let reconnect = !self.connected[pos]
                && self.down_at_reads[pos].is_some_and(|at| reads > at)
                && now_ns >= self.next_connect_ns[pos];
            if pos == self.me_pos || suspected >> pos & 1 != 0 {
                continue;
            }
            let peer = self.replicas.ids()[pos];
            if bind_target {
                self.next_bind_ns[pos] = now_ns + RECONNECT_PERIOD_NS;
                let conn = ConnId::new(peer, replication_channel(peer, self.me));
                self.bound_boots[pos] = boot;
                self.target_connected[pos] = self.fabric.connect(conn, Access::ALL).is_ok();
            }
            if reconnect {
                self.next_connect_ns[pos] = now_ns + RECONNECT_PERIOD_NS;
                let conn = ConnId::new(peer, replication_channel(self.me, peer));
                if self.fabric.connect(conn, Access::NONE).is_ok() {
                    self.connected[pos] = true;
                    self.down_at_reads[pos] = None;
                    // What was out on the side before is flushed or dropped with it.
                    self.in_flight[pos] = 0;
                    self.backlogged &= !(1 << pos);
                    if self.excluded >> pos & 1 == 0 {
                        self.proposer.reconnected(pos);
                    }
                }
            }
        }
    }

    /// Starts leading when elected, stops when not ([`Candidacy`]).
    fn follow_election(&mut self, now_ns: u64) -> bool {
        let elected = self.shared.leader();
        let leading = self.proposer.is_leading();
        if !leading && self.term.take().is_some() {
            self.shared.set_term(None);
        }
        let (appointed, appointment) = self.shared.may_lead_appointed(self.me, self.term);
        let behind = Candidacy::behind(self.a_log_behind(), leading, || {
            self.heads().live_ahead_by(self.shared.peers.alive_mask.load(Ordering::Acquire), 2)
        });
        let candidacy = Candidacy {
            elected: elected == Some(self.me) && appointed,
            leading,
            eligible: self.shared.eligible.load(Ordering::Relaxed),
            stopped: self.stopped.is_some(),
            recovering: self.recovery.is_some(),
            member: self.proposer.is_member(),
            takes_part: self.shared.takes_part(),
            holds_last: self.applied == 0 || self.last.is_some(),
            resyncing: self.resync.pending(),
            behind,
        };
        match candidacy.next() {
            ElectionMove::StandDown => self.stand_down_behind(),
            ElectionMove::Lead => self.take_up_leadership(now_ns, appointment),
            ElectionMove::StepDown => {
                info!(
                    replica = self.me.0,
                    leader = elected.map(|l| l.0),
                    "stepping down: this replica is no longer elected"
                );
                self.step_down(elected);
            }
            ElectionMove::Stay => return false,
        }
        true
    }

    /// Elected (it came back before the others noticed how far they went), but behind a live
    /// peer: it does not lead, so it stops standing for election, and another leads while it
    /// catches up.
    fn stand_down_behind(&mut self) {
        info!(
            replica = self.me.0,
            applied = self.applied,
            "elected behind a live peer: not leading, catching up by state transfer"
        );
        self.shared.eligible.store(false, Ordering::Release);
        self.need_state_transfer();
    }

    /// Elected and fit to lead: the proposer starts from the next index to apply.
    fn take_up_leadership(&mut self, now_ns: u64, appointment: u64) {
        let last = self.last.as_ref().map(|(k, v)| (*k, &v[..]));
        self.proposer.start(self.applied, last, &mut RegionMemory(&self.region));
        let leaderships = self.shared.stats.leaderships.fetch_add(1, Ordering::Relaxed) + 1;
        self.term = Some(self.shared.start_term(leaderships, appointment));
        self.shared.probe.ready_at_ns.store(now_ns + 1, Ordering::Release);
        self.clear_steps();
        // Idle, it decides an empty entry soon: followers learn the last one from it.
        self.last_decision = (now_ns, false);
        self.leading_to_log = Some((self.applied, leaderships));
        self.catch_up = CatchUp::Idle;
    }

    fn step_down(&mut self, leader: Option<NodeId>) {
        self.proposer.stop();
        if self.term.take().is_some() {
            self.shared.set_term(None);
        }
        self.own_pending = None;
        if std::mem::take(&mut self.leaving) {
            self.shared.set_members(self.members_applied());
            self.stop_taking_part();
        }
        self.last_decision = (0, true);
        self.shared.probe.ready_at_ns.store(0, Ordering::Release);
        self.clear_steps();
        if self.group.pending {
            // The entry in the proposer may have been accepted somewhere: its outcome is
            // unknown. The ones behind it were never proposed.
            if self.handed {
                if let Some(e) = self.group.entries.front_mut() {
                    e.maybe_accepted = true;
                }
            }
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

    /// Stops leading because a live peer is a whole log ahead: as the proposer's own
    /// [`StopReason::Stale`] does.
    fn stop_stale(&mut self) {
        let leader = self.shared.leader();
        self.step_down(leader);
        self.shared.eligible.store(false, Ordering::Release);
        self.need_state_transfer();
    }

    /// Asks for a state transfer; until this replica has applied an entry the usual way after
    /// it, it does not lead.
    fn need_state_transfer(&mut self) {
        self.last = None;
        self.shared.set_replayer_stuck(true);
    }

    /// Whether the peers' heads can be trusted: no stall was noticed, or, with reads posted
    /// after it, the background plane has read the head of every peer the failure detector
    /// considers alive and of enough members that any majority that decided without this
    /// replica has one among them ([`guards::resync_complete`]). Laps count modulo 2048 in the
    /// slot words, so a leader that stalled while the others went round the log 1,024 times or
    /// more would misread their words (as older than its index, and CAS them back a lap); a
    /// head counts entries and tells how far they went.
    ///
    /// The count of members does not rest on the detector, which may drop a peer at once (one
    /// stale read at a score just above the failure threshold, or a connection that failed):
    /// reading only the peers it still trusts could miss every replica of that majority. It
    /// never waits for more than a leader needs to decide anything: `n − majority` peers, fewer
    /// than the `majority − 1` it decides with.
    fn resynced(&mut self) -> bool {
        let Some(since) = self.resync.since_ns() else {
            return true;
        };
        let fresh = (0..self.replicas.len())
            .filter(|&pos| self.shared.peers.heads_read_ns[pos].load(Ordering::Acquire) >= since)
            .fold(0u64, |mask, pos| mask | 1 << pos);
        let alive = self.shared.peers.alive_mask.load(Ordering::Acquire);
        self.resync.settle(self.me_pos, alive, self.members_applied(), fresh)
    }

    /// The peers' heads as the background plane last read them, beside this replica's
    /// progress: what the rules of [`mu_velos::heads`] and [`mu_velos::guards`] look at.
    fn heads(&self) -> Heads<impl Fn(usize) -> u64 + '_> {
        Heads {
            me: self.me_pos,
            count: self.replicas.len(),
            applied: self.applied,
            slots_count: self.layout.slots_count(),
            head: |pos: usize| self.shared.peers.heads[pos].load(Ordering::Acquire),
        }
    }

    /// Every live acceptor has applied the indices below this one (heads as the background
    /// plane last read them, of the peers its failure detector considers alive; see
    /// [`Heads::floor`]). A peer that comes back after the log went round without it needs a
    /// state transfer.
    fn floor(&self) -> u64 {
        let alive = self.shared.peers.alive_mask.load(Ordering::Acquire) & self.members_applied();
        self.heads().floor(alive)
    }

    /// Keeps the proposer from the peers [`Heads::keeps_away`] names (two logs or more behind
    /// this replica and not abstaining, or refused as restarted without rejoining) and gives
    /// them back once it does not. A peer that came back this far behind takes new words
    /// ([`VelosDriver::refresh_words`]) and says so, as a restarted one does, by abstaining
    /// (`FLAG_ABSTAINING`): it is used again at once, before its state transfer.
    fn update_exclusions(&mut self) {
        let abstaining = self.shared.peers.abstaining.load(Ordering::Acquire);
        let refused = self.shared.peers.refused.load(Ordering::Acquire);
        for pos in (0..self.replicas.len()).filter(|&pos| pos != self.me_pos) {
            let bit = 1u64 << pos;
            let behind = self.heads().keeps_away(pos, abstaining, refused);
            if behind && self.excluded & bit == 0 {
                self.excluded |= bit;
                self.proposer.exclude(pos);
            } else if !behind && self.excluded & bit != 0 {
                self.excluded &= !bit;
                if self.connected[pos] && self.backlogged & bit == 0 {
                    self.proposer.reconnected(pos);
                }
            }
        }
    }

    /// Gives this replica new slot words, as a restarted one gets: it closes the sides peers
    /// reach its memory through (a barrier: nothing of theirs lands after), asks for a rejoin
    /// entry and abstains below one lap past it (`mu_velos::recovery`). Its own words were
    /// left behind while the log went round without it ([`guards::refresh_due`]); the new ones
    /// are read rightly by every proposer. Its state transfer is installed meanwhile: a leader
    /// that uses it again once its head moves ([`VelosDriver::update_exclusions`]) finds its
    /// sides down, as for any replica that is down, until the new words are in.
    fn refresh_words(&mut self) {
        // Every other replica's side, not only those we believe up: a binding that failed
        // half-way (on ofi, opened at ready-to-receive, refused at ready-to-send) may still let
        // a peer in.
        let (mut unfenced, mut was_up) = (0, 0);
        for pos in (0..self.replicas.len()).filter(|&pos| pos != self.me_pos) {
            unfenced |= 1 << pos;
            if self.target_connected[pos] {
                was_up |= 1 << pos;
            }
            self.target_connected[pos] = false;
        }
        info!(
            replica = self.me.0,
            applied = self.applied,
            "a live peer is far ahead: taking new slot words before answering as an acceptor"
        );
        self.recovery = Some(Rejoin::new((unfenced, was_up), false));
        self.shared.recovering.store(true, Ordering::Release);
        self.shared.eligible.store(false, Ordering::Release);
    }

    /// Whether a live peer has applied the entry that removed this (leaving) leader.
    fn removal_applied_elsewhere(&self) -> bool {
        let alive = self.shared.peers.alive_mask.load(Ordering::Acquire);
        self.heads().reached_by_live(alive, self.left_at)
    }

    /// Whether a live peer applied a whole log more than this replica
    /// ([`Heads::a_log_behind`]).
    fn a_log_behind(&self) -> bool {
        self.heads().a_log_behind(self.shared.peers.alive_mask.load(Ordering::Acquire))
    }

    /// Posts what the proposer asks for.
    fn run_actions(&mut self) -> bool {
        let mut actions = std::mem::take(&mut self.actions_buf);
        self.proposer.take_actions(&mut actions);
        let busy = !actions.is_empty();
        let inline_max = self.fabric.max_inline_bytes().min(INLINE_WRITE_BYTES_MAX);
        for a in actions.drain(..) {
            let mut inline = [0u8; INLINE_WRITE_BYTES_MAX];
            let (pos, wr) = match a {
                Action::Write { peer, offset, len } => {
                    // A short value goes inline, as Mu's entries do: no DMA read before the
                    // CAS that follows it on the same connection.
                    let source = if len as usize <= inline_max {
                        let bytes = &mut inline[..len as usize];
                        self.region.read(offset as usize, bytes).expect("Velos region layout");
                        Source::Inline(bytes)
                    } else {
                        Source::Local(LocalSlice { region: VELOS_REGION, offset, len })
                    };
                    let remote = RemoteAddr { region: VELOS_REGION, offset };
                    let op = Op::Write { source, remote };
                    (peer, WorkRequest { wr_id: KIND_WRITE | peer as u64, op, signaled: false })
                }
                Action::Cas { peer, offset, expected, desired, op } => (
                    peer,
                    WorkRequest::compare_swap(
                        op,
                        RemoteAddr { region: VELOS_REGION, offset },
                        expected,
                        desired,
                    ),
                ),
                Action::Read { peer, remote, local, len, op } => (
                    peer,
                    WorkRequest::read(
                        op,
                        LocalSlice { region: VELOS_REGION, offset: local, len },
                        RemoteAddr { region: VELOS_REGION, offset: remote },
                    ),
                ),
            };
            if self.set_aside(pos) {
                // The proposer learns that an operation it waits for failed, as if posted. A
                // value write not posted is as one that failed: the peer is excluded.
                if wr.signaled {
                    self.unposted.push_back(wr.wr_id);
                }
                continue;
            }
            self.post(pos, &wr);
        }
        self.actions_buf = actions;
        busy
    }

    /// Whether the proposer's operations to `pos` are held back because `in_flight_max` of
    /// them are out; holds them back from the moment they are. The proposer goes on without
    /// the peer (as when its connection fails) until every one has come back
    /// ([`VelosDriver::readmit_drained`]). The connection is left as it is: the peer may only
    /// be slow, and connecting again would flush what is on its way.
    fn set_aside(&mut self, pos: usize) -> bool {
        let bit = 1u64 << pos;
        if self.backlogged & bit == 0 && self.in_flight[pos] >= self.in_flight_max {
            self.hold_back(pos);
            info!(
                replica = self.me.0,
                peer = self.replicas.ids()[pos].0,
                in_flight = self.in_flight[pos],
                "an acceptor answers none of our latest operations: going on without it until \
                 they have all come back"
            );
        }
        self.backlogged & bit != 0
    }

    /// Holds the proposer's operations to `pos` back until those out have all come back
    /// ([`VelosDriver::readmit_drained`]); the proposer goes on without the peer meanwhile.
    fn hold_back(&mut self, pos: usize) {
        self.backlogged |= 1 << pos;
        self.proposer.exclude(pos);
    }

    /// Takes back the peers set aside whose operations have all come back (answered, or failed:
    /// then their connection is down, and taken back when connected again).
    fn readmit_drained(&mut self) {
        let mut aside = self.backlogged;
        while aside != 0 {
            let pos = aside.trailing_zeros() as usize;
            aside &= aside - 1;
            if self.in_flight[pos] == 0 {
                self.backlogged &= !(1 << pos);
                if self.connected[pos] && self.excluded >> pos & 1 == 0 {
                    self.proposer.reconnected(pos);
                }
            }
        }
    }

    /// Posts on the connection to `pos`; a post the fabric refuses is a failed operation, and
    /// so is every later one until the side is connected again: a value write refused before
    /// a compare-and-swap that went through would leave the acceptor accepting a value it
    /// does not hold.
    fn post(&mut self, pos: usize, wr: &WorkRequest<'_>) {
        let peer = self.replicas.ids()[pos];
        let conn = ConnId::new(peer, replication_channel(self.me, peer));
        let mut result = if self.connected[pos] {
            self.ep.post(conn, wr)
        } else {
            Err(PostError::NotReadyToSend { conn, state: mu_fabric::QpState::Error })
        };
        if matches!(result, Err(PostError::QueueFull)) {
            // Make room; what comes out is handled on the next poll, in order.
            loop {
                let n = self.ep.poll(&mut self.completions);
                for c in &self.completions[..n] {
                    count_completed(&mut self.in_flight, c);
                }
                self.deferred.extend(self.completions[..n].iter().copied());
                if n < self.completions.len() {
                    break;
                }
            }
            result = self.ep.post(conn, wr);
            if matches!(result, Err(PostError::QueueFull))
                && !matches!(op_of(wr.wr_id), OpOf::Learn(_))
            {
                // The connection holds as many requests as it may (an RDMA send queue smaller
                // than `in_flight_max` allows for): a slow peer, not a broken connection. Set
                // aside as `set_aside` does; connecting again would flush what is on its way.
                // This one, and every later one until taken back, fails as if posted.
                self.hold_back(pos);
                if !self.connection_full_noted {
                    self.connection_full_noted = true;
                    info!(
                        replica = self.me.0,
                        peer = peer.0,
                        in_flight = self.in_flight[pos],
                        "the connection to an acceptor is full: going on without it until our \
                         operations to it have come back (noted once per run)"
                    );
                }
                if wr.signaled {
                    self.unposted.push_back(wr.wr_id);
                }
                return;
            }
        }
        if result.is_ok() && wr.signaled {
            self.in_flight[pos] += 1;
        }
        if result.is_err() {
            self.connected[pos] = false;
            let c = Completion {
                wr_id: wr.wr_id,
                kind: wr.op.kind(),
                status: Status::PeerUnreachable,
                value: 0,
            };
            self.deferred.push_back(c);
        }
    }

    fn poll_completions(&mut self, app: &mut dyn Applier) -> bool {
        let mut busy = false;
        while let Some(c) = self.deferred.pop_front() {
            self.handle(c, app);
            busy = true;
        }
        while let Some(op) = self.unposted.pop_front() {
            self.proposer.on_error(op);
            busy = true;
        }
        loop {
            let n = self.ep.poll(&mut self.completions);
            for i in 0..n {
                let c = self.completions[i];
                count_completed(&mut self.in_flight, &c);
                self.handle(c, app);
            }
            busy |= n > 0;
            if n < self.completions.len() {
                break;
            }
        }
        if self.backlogged != 0 {
            self.readmit_drained();
        }
        busy
    }

    fn handle(&mut self, c: Completion, app: &mut dyn Applier) {
        match op_of(c.wr_id) {
            OpOf::Proposer(pos) => self.feed(pos, c),
            OpOf::Write(pos) => {
                if !c.status.is_success() {
                    self.connected[pos] = false;
                    self.proposer.on_write_error(pos);
                }
            }
            OpOf::Learn(pos) => self.on_learn(pos, c, app),
        }
    }

    /// Hands a completion of the proposer's operations (to `pos`) to it.
    fn feed(&mut self, pos: usize, c: Completion) {
        if !c.status.is_success() {
            self.connected[pos] = false;
            self.proposer.on_error(c.wr_id);
            return;
        }
        match c.kind {
            OpKind::CompareSwap => self.proposer.on_cas(c.wr_id, c.value),
            OpKind::Read => self.proposer.on_read(c.wr_id, &mut RegionMemory(&self.region)),
            OpKind::Write => {}
        }
    }

    /// Decides an empty entry when the leader went idle after deciding requests, or back to
    /// back while a live peer abstains ([`standing::noop_due`]).
    fn propose_noop_if_idle(&mut self, now_ns: u64) {
        if self.group.pending || self.proposer.has_pending() {
            return;
        }
        let alive = self.shared.peers.alive_mask.load(Ordering::Acquire);
        let abstaining = self.shared.peers.abstaining.load(Ordering::Acquire) & alive != 0;
        if !standing::noop_due(abstaining, self.leaving, self.last_decision, now_ns) {
            return;
        }
        if self.proposer.submit(EntryKind::Noop, &[]).is_ok() {
            self.own_pending = Some(EntryKind::Noop);
        }
    }

    /// Decides a rejoin entry for a live peer that asks for one and has none answering its
    /// request in our log yet ([`rejoin::entry_to_decide`]): a replica restarted without its
    /// memory answers as an acceptor only after one.
    fn propose_rejoin(&mut self) {
        if self.own_pending.is_some() || self.handed || self.proposer.has_pending() {
            return;
        }
        // One word on the hot path; the requests only when a peer asks.
        let asking = self.shared.peers.rejoining.load(Ordering::Acquire)
            & self.shared.peers.alive_mask.load(Ordering::Acquire);
        if asking == 0 {
            return;
        }
        let Some(entry) = rejoin::entry_to_decide(
            self.me_pos,
            self.replicas.len(),
            asking,
            |pos| self.shared.peers.rejoin_requests[pos].load(Ordering::Acquire),
            &self.rejoined,
            |pos| self.replicas.ids()[pos],
        ) else {
            return;
        };
        if self.proposer.submit(EntryKind::Rejoin, &entry.encode()).is_ok() {
            self.own_pending = Some(EntryKind::Rejoin);
            let (peer, request) = (entry.replica.0, entry.request);
            info!(replica = self.me.0, peer, request, "deciding a rejoin entry");
        }
    }

    /// Applies what the proposer decided; hands it the next entry.
    fn take_events(&mut self, app: &mut dyn Applier, now_ns: u64) -> bool {
        let mut events = std::mem::take(&mut self.events_buf);
        self.proposer.take_events(&mut events);
        let busy = !events.is_empty();
        for e in events.drain(..) {
            match e {
                Event::Decided { index, submitted } => {
                    self.stamp(VelosStep::Decided, now_ns);
                    assert_eq!(index, self.applied, "the proposer decides in index order");
                    let was_leaving = self.leaving;
                    let q = self.me_pos;
                    self.apply_from(q, index, app).unwrap_or_else(|| {
                        panic!("decided entry {index} is not in this replica's own value log")
                    });
                    self.shared.progress.count_commit();
                    let own = if submitted { self.own_pending.take() } else { None };
                    // A rejoin entry is learned from the next one like any: an empty one
                    // follows if nothing else does.
                    self.last_decision = (now_ns, own == Some(EntryKind::Noop));
                    if own.is_some() {
                        self.hand_over();
                    } else if submitted {
                        let e = self.group.entries.pop_front().expect("a submitted entry");
                        self.group.answer(e, Ok(index));
                        self.first_answered = true;
                        self.handed = false;
                        if self.group.unanswered == 0 {
                            self.finish_group();
                        } else {
                            self.hand_over();
                        }
                    }
                    if was_leaving {
                        // The entry after our removal: the others learn the removal from it.
                        info!(
                            replica = self.me.0,
                            index, "stepping down: a decided membership entry removed this replica"
                        );
                        self.step_down(None);
                    }
                }
                Event::MalformedWord { index, acceptor } => error!(
                    replica = self.me.0,
                    peer = self.replicas.ids()[acceptor].0,
                    index,
                    "a slot word no proposer writes (corrupted memory or a faulty replica): \
                     that acceptor takes no part in the index"
                ),
                Event::Stopped(reason) => {
                    warn!(replica = self.me.0, %reason, "the velos proposer stopped");
                    let leader = self.shared.leader();
                    self.step_down(leader);
                    // Others lead meanwhile: this replica does not stand for election.
                    self.shared.eligible.store(false, Ordering::Release);
                    match reason {
                        // Behind by a whole log: a state transfer brings it back, and it may
                        // lead again once it applied an entry the usual way.
                        StopReason::Stale { .. } => self.need_state_transfer(),
                        StopReason::ProposalsExhausted { .. }
                        | StopReason::LocalSwapFailed { .. } => self.stopped = Some(reason),
                    }
                }
            }
        }
        self.events_buf = events;
        busy
    }

    /// Applies the entry for `index` found in position `q`'s value log in our own region.
    /// `None` if it is not a complete entry for that index.
    fn apply_from(&mut self, q: usize, index: u64, app: &mut dyn Applier) -> Option<()> {
        let offset = self.layout.value_slot_offset(q, index) as usize;
        // Taken out for the call (not reallocated): the entry borrows it while `self` changes.
        let mut buf = std::mem::take(&mut self.slot_buf);
        let region = &self.region;
        let slot = self.layout.log().read_slot(index, &mut buf, |out| {
            region.read(offset, out).expect("Velos region layout");
        });
        let applied = self.apply_entry(index, slot, app);
        self.slot_buf = buf;
        applied
    }

    /// Applies the entry for `index` in `slot_buf`, if it is one.
    fn apply_slot(&mut self, index: u64, app: &mut dyn Applier) -> Option<()> {
        let buf = std::mem::take(&mut self.slot_buf);
        let slot = self.layout.log().decode(index, &buf);
        let applied = self.apply_entry(index, slot, app);
        self.slot_buf = buf;
        applied
    }

    /// Applies `slot` as the entry for `index`, if it is one.
    fn apply_entry(&mut self, index: u64, slot: Slot<'_>, app: &mut dyn Applier) -> Option<()> {
        let Slot::Entry(Entry { kind, value, .. }) = slot else { return None };
        match kind {
            EntryKind::Rejoin => self.note_rejoin(index, value),
            EntryKind::Membership => {
                let members = membership::apply(&self.replicas, self.members_applied(), value);
                self.note_members(members);
            }
            _ => {}
        }
        app.apply(index, kind, value);
        self.applied = index + 1;
        // Kept for a new leader to republish; its buffer is reused from entry to entry.
        match &mut self.last {
            Some((k, v)) => {
                *k = kind;
                v.clear();
                v.extend_from_slice(value);
            }
            None => self.last = Some((kind, value.to_vec())),
        }
        self.log.store_u64(HEAD_OFFSET as usize, self.applied).expect("log header");
        self.stand_again();
        Some(())
    }

    /// Holding the entry before its next index, this replica may stand for election again
    /// ([`standing::stands_again`]).
    fn stand_again(&self) {
        if standing::stands_again(
            self.recovery.is_some(),
            self.shared.abstaining.load(Ordering::Relaxed),
            self.shared.eligible.load(Ordering::Relaxed),
        ) {
            self.shared.eligible.store(true, Ordering::Release);
        }
    }

    /// The configuration of the next index to apply (the Mu paper's §5.4): the initial one
    /// changed by every membership entry applied here, or the one a snapshot carried. The
    /// proposer holds it ([`VelosDriver::note_members`] keeps it there).
    fn members_applied(&self) -> u64 {
        self.proposer.members()
    }

    /// The configuration of the indices after the last one applied changed (a membership
    /// entry, or a snapshot's configuration): the proposer works in it from the next index on,
    /// and the background plane elects by it. A member it leaves out was removed and stops
    /// taking part; a leader removed steps down once the entry's caller has its answer
    /// ([`VelosDriver::take_events`]). (A replica restarted or new applies history before its
    /// rejoin entry: a removal there was of an earlier run of it.)
    fn note_members(&mut self, members: u64) {
        if members == self.members_applied() {
            return;
        }
        let was = self.members_applied();
        self.proposer.set_members(members);
        let leading = self.proposer.is_leading();
        if standing::publishes_members_now(self.me_pos, members, leading) {
            self.shared.set_members(members);
        }
        info!(
            replica = self.me.0,
            members = ids_text(self.replicas.ids(), members).as_str(),
            applied = self.applied,
            "membership changed"
        );
        let earlier_run = self.recovery.as_ref().is_some_and(|r| r.restarted());
        // Called before `applied` moves past the entry.
        match standing::removal(self.me_pos, (was, members), leading, earlier_run, self.applied) {
            Removal::Leave { left_at } => {
                info!(
                    replica = self.me.0,
                    "removed: deciding one entry more, from which the others learn it, before \
                     stepping down"
                );
                self.leaving = true;
                self.left_at = left_at;
            }
            Removal::Stop => self.stop_taking_part(),
            Removal::None => {}
        }
    }

    /// Removed: no heartbeat, no election, no leading again in this run (the background plane
    /// stops once it sees the flag).
    fn stop_taking_part(&mut self) {
        if !self.shared.removed.swap(true, Ordering::AcqRel) {
            warn!(
                replica = self.me.0,
                "removed: this replica applied a configuration without it; it stops taking part"
            );
        }
    }

    /// A rejoin entry applied at `index`: a leader proposes none again for that request, and
    /// the replica it answers, recovering, learns where it rejoined.
    fn note_rejoin(&mut self, index: u64, value: &[u8]) {
        let Some(e) = mu_velos::recovery::RejoinEntry::decode(value) else { return };
        if let Some(pos) = self.replicas.position(e.replica) {
            self.rejoined[pos] = e.request;
        }
        if let Some(r) = self.recovery.as_mut().filter(|_| e.replica == self.me) {
            r.on_entry(e.request, index);
        }
    }

    /// A follower applies what its own words say is decided (§5.4).
    fn learn(&mut self, app: &mut dyn Applier) -> bool {
        let mut applied = false;
        loop {
            let index = self.applied;
            let word = self
                .region
                .load_u64(self.layout.word_offset(index + 1) as usize)
                .expect("Velos region layout");
            if learner::recycled(&self.layout, index + 1, word) {
                // A whole log behind: only a state transfer gets past it.
                self.shared.set_replayer_stuck(true);
                break;
            }
            let Some(q) = learner::decided_by(&self.layout, index, word) else { break };
            if self.apply_from(q, index, app).is_none() {
                break; // not here (the leader could not write it to us): caught up below
            }
            applied = true;
        }
        applied
    }

    /// A follower's next step after it `learned` (or not) what it could by itself: on with its
    /// own words, a state transfer if a live peer is a whole log ahead, or a read of the
    /// leader's memory after a while.
    fn catch_up_or_transfer(&mut self, learned: bool, now_ns: u64) {
        if learned {
            self.last_progress_ns = now_ns;
            self.shared.set_replayer_stuck(false);
        } else if self.a_log_behind() {
            // Nothing here or at the leader can tell the entry any more (and laps, counted
            // modulo 2048, could not even say it was recycled): a state transfer can.
            self.shared.set_replayer_stuck(true);
        } else {
            self.catch_up(now_ns);
        }
    }

    /// A follower that made no progress for a while reads the leader's word and entry.
    fn catch_up(&mut self, now_ns: u64) {
        if self.catch_up != CatchUp::Idle
            || now_ns.saturating_sub(self.last_progress_ns) < CATCH_UP_AFTER_NS
        {
            return;
        }
        let Some(leader) = self.shared.leader().filter(|&l| l != self.me) else { return };
        let Some(from) = self.replicas.position(leader) else { return };
        if !self.connected[from] {
            return;
        }
        self.last_progress_ns = now_ns;
        let index = self.applied;
        let wr = WorkRequest::read(
            KIND_LEARN_WORD | from as u64,
            LocalSlice { region: VELOS_REGION, offset: self.layout.learner_word_offset(), len: 8 },
            RemoteAddr { region: VELOS_REGION, offset: self.layout.word_offset(index + 1) },
        );
        self.catch_up = CatchUp::Word { from, index };
        self.post(from, &wr);
    }

    fn on_learn(&mut self, pos: usize, c: Completion, app: &mut dyn Applier) {
        if !c.status.is_success() {
            self.connected[pos] = false;
            self.catch_up = CatchUp::Idle;
            return;
        }
        match self.catch_up {
            CatchUp::Word { from, index } if index == self.applied => {
                let word = self
                    .region
                    .load_u64(self.layout.learner_word_offset() as usize)
                    .expect("Velos region layout");
                let Some(q) = learner::decided_by(&self.layout, index, word) else {
                    // Not decided there either (then nothing to catch up), or recycled: the
                    // entry is gone from the leader's memory, and a state transfer is needed.
                    if learner::recycled(&self.layout, index + 1, word) {
                        self.shared.set_replayer_stuck(true);
                    }
                    self.catch_up = CatchUp::Idle;
                    return;
                };
                let wr = WorkRequest::read(
                    KIND_LEARN_ENTRY | from as u64,
                    LocalSlice {
                        region: VELOS_REGION,
                        offset: self.layout.learner_scratch_offset(),
                        len: self.layout.slot_bytes(),
                    },
                    RemoteAddr {
                        region: VELOS_REGION,
                        offset: self.layout.value_slot_offset(q, index),
                    },
                );
                self.catch_up = CatchUp::Entry { from, index };
                self.post(from, &wr);
            }
            CatchUp::Entry { index, .. } if index == self.applied => {
                self.catch_up = CatchUp::Idle;
                self.region
                    .read(self.layout.learner_scratch_offset() as usize, &mut self.slot_buf)
                    .expect("Velos region layout");
                if self.apply_slot(index, app).is_some() {
                    // More may follow the same way at once.
                    self.last_progress_ns = 0;
                    self.shared.set_replayer_stuck(false);
                } else {
                    // The leader's entry was overwritten by a later lap.
                    self.shared.set_replayer_stuck(true);
                }
            }
            _ => self.catch_up = CatchUp::Idle,
        }
    }

    /// Recovery of a restarted replica (`mu_velos::recovery`): once nobody can reach its
    /// memory, asks for a rejoin entry and catches up as a follower does, from the others'
    /// memories, until it applies the entry; then takes the abstaining words it gives and lets
    /// peers in. Returns whether anything happened.
    fn recover(&mut self, now_ns: u64, app: &mut dyn Applier) -> bool {
        let behind = self.a_log_behind();
        let Some(r) = &mut self.recovery else { return false };
        r.start_at(now_ns);
        let unfenced = r.unfenced();
        for pos in (0..self.replicas.len()).filter(|&pos| unfenced >> pos & 1 != 0) {
            let peer = self.replicas.ids()[pos];
            let conn = ConnId::new(peer, replication_channel(peer, self.me));
            // Moving to error waits for the peer's operations in flight (fencing a stuck
            // peer): a barrier. One that has not finished is tried again on the next poll; a
            // side we never had up may refuse it, and nothing lands through that.
            let fence = match self.fabric.modify_qp(conn, QpState::Error, Access::NONE) {
                Ok(()) => Fence::Done,
                Err(FabricError::InProgress(..)) => Fence::InProgress,
                Err(_) => Fence::Refused,
            };
            r.fenced(pos, fence);
        }
        if r.unfenced() != 0 {
            return false;
        }
        if r.asks(behind) {
            self.rejoin_attempts += 1;
            r.ask(mu_velos::recovery::request(self.run_nonce, self.rejoin_attempts));
            self.shared.rejoin_request.store(r.request(), Ordering::Release);
            info!(
                replica = self.me.0,
                request = r.request(),
                applied = self.applied,
                "asking for a rejoin entry before answering as an acceptor again"
            );
        }
        if r.warns(now_ns) {
            warn!(
                replica = self.me.0,
                applied = self.applied,
                "restarted without its memory, this replica still waits for its rejoin entry \
                 (a leader and a majority of the others must be up to decide it)"
            );
        }
        if let Some(rejoined_at) = r.rejoined_at() {
            let slots_count = self.layout.slots_count();
            let words = self.layout.word_offset(0) as usize;
            for (k, marker) in mu_velos::recovery::markers(rejoined_at, slots_count).enumerate() {
                self.region.store_u64(words + 8 * k, marker).expect("Velos region layout");
            }
            info!(
                replica = self.me.0,
                rejoined_at,
                fresh_from = mu_velos::recovery::fresh_from(rejoined_at, slots_count),
                "rejoined: abstaining as an acceptor below one lap past the rejoin entry"
            );
            self.recovery = None;
            self.shared.rejoin_request.store(0, Ordering::Release);
            let highest = self.heads().highest();
            self.words_taken_at = highest;
            self.shared.abstaining.store(true, Ordering::Release);
            // Let peers in at once.
            self.next_bind_ns.fill(0);
            return true;
        }
        // Catching up from the leader's memory, or by state transfer. Not from its own words:
        // nobody writes them until it rejoined (a restarted replica's are zero), and a
        // refreshing replica's are so old that their laps may read as newer than the index.
        let installed = self.install_snapshot(app);
        if installed {
            // The snapshot may hold the entry that answered the request: ask again.
            if let Some(r) = self.recovery.as_mut() {
                r.ask_again();
            }
        }
        self.catch_up_or_transfer(installed, now_ns);
        installed
    }

    /// A restarted replica counts as failed (`ReplicaStatus::recovering`) while it abstains
    /// in an index some live replica has not applied (a new leader may have to decide it again,
    /// without this replica). Looked at once a millisecond, until it is over for good.
    fn check_abstention(&mut self, now_ns: u64) {
        if self.recovery.is_some()
            || now_ns < self.next_abstention_check_ns
            || !self.shared.recovering.load(Ordering::Relaxed)
            || self.a_log_behind()
        {
            // A log behind (before its state transfer), its own position says nothing of where
            // the words' laps are.
            return;
        }
        self.next_abstention_check_ns = now_ns + RECONNECT_PERIOD_NS;
        let from = self.floor();
        let abstains =
            mu_velos::recovery::abstains_from(from, self.layout.slots_count(), |index| {
                self.region
                    .load_u64(self.layout.word_offset(index) as usize)
                    .expect("Velos region layout")
            });
        if !abstains {
            info!(replica = self.me.0, from, "an acceptor again in every index from here on");
            self.shared.recovering.store(false, Ordering::Release);
            self.shared.abstaining.store(false, Ordering::Release);
            // It applied entries since it rejoined (the rejoin entry, at least): it may lead.
            if self.last.is_some() {
                self.shared.eligible.store(true, Ordering::Release);
            }
        }
    }

    /// Requests waiting for room in the log fail with "log full" once the live acceptors have
    /// applied nothing for the timeout: as in Mu's driver, a replica that applies slowly slows
    /// the proposer down, and only one that stopped applying ends the wait, named in the error.
    fn check_log_full(&mut self, now_ns: u64) {
        if !self.group.pending || !self.proposer.waits_for_room() {
            self.group.room_wait = None;
            return;
        }
        let floor = self.floor();
        let stalled_ns = self.group.room_stalled_ns(now_ns, floor);
        if stalled_ns <= self.settings.log_full_timeout_ns || !self.proposer.withdraw() {
            return;
        }
        // What was withdrawn is our empty entry if the requests wait behind it.
        if !self.handed {
            self.own_pending = None;
        }
        let replica = self.floor_holder(floor);
        let (oldest, slots_count) = (floor, self.layout.slots_count());
        self.group.answer_rest(|_| ProposeError::LogFull { replica, oldest, slots_count });
        self.finish_group();
    }

    /// The replica whose head is `floor` ([`VelosDriver::floor`]): a live member other than
    /// ourselves if one is that far behind, else ourselves.
    fn floor_holder(&self, floor: u64) -> NodeId {
        let alive = self.shared.peers.alive_mask.load(Ordering::Acquire) & self.members_applied();
        (0..self.replicas.len())
            .filter(|&pos| pos != self.me_pos && alive >> pos & 1 != 0)
            .find(|&pos| self.shared.peers.heads[pos].load(Ordering::Acquire) == floor)
            .map_or(self.me, |pos| self.replicas.ids()[pos])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind of operation id names its peer, and only signaled operations count as in
    /// flight.
    #[test]
    fn op_ids_name_their_peer_and_kind() {
        // The proposer's ids keep the acceptor's position in the low 6 bits.
        assert_eq!(op_of((0x2345 << 8) | 5), OpOf::Proposer(5));
        assert_eq!(op_of(KIND_WRITE | 3), OpOf::Write(3));
        assert_eq!(op_of(KIND_LEARN_WORD | 2), OpOf::Learn(2));
        assert_eq!(op_of(KIND_LEARN_ENTRY | 7), OpOf::Learn(7));
        let mut in_flight = [4u32; 8];
        for wr_id in [(0x2345 << 8) | 5, KIND_WRITE | 3, KIND_LEARN_ENTRY | 7] {
            count_completed(&mut in_flight, &Completion { wr_id, ..Completion::EMPTY });
        }
        assert_eq!(in_flight, [4, 4, 4, 4, 4, 3, 4, 3]);
    }
}
