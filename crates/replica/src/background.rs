//! The background plane's driver (Mu paper §5): heartbeat, pull-score failure detector, leader
//! election, fate sharing, permission management, and reading the log heads for recycling. Its
//! own connections (the background channel) and its own region; no threads and no clock of its
//! own, like the replication driver.

use crate::config::Leaders;
use crate::layout::{
    ack_boot_offset, ack_offset, background_channel, fetched_body_offset, replication_channel,
    request_offset, snapshot_digest, snapshot_request_offset, snapshot_ticket, view_offset,
    BACKGROUND_REGION, FETCHED_HEADER_OFFSET, FLAGS_CONFIG_SHIFT, FLAGS_OFFSET, FLAG_ABSTAINING,
    FLAG_ELIGIBLE, FLAG_FOUNDING, HEAD_COPY_OFFSET, HEARTBEAT_OFFSET, MEMBERS_COPY_OFFSET,
    REFUSED_OFFSET, REJOIN_OFFSET, SNAPSHOT_DIGEST, SNAPSHOT_ERROR, SNAPSHOT_HEADER_BYTES,
    SNAPSHOT_INDEX, SNAPSHOT_LAST_KIND, SNAPSHOT_LAST_LEN, SNAPSHOT_LEN, SNAPSHOT_MEMBERS,
    SNAPSHOT_OK, SNAPSHOT_REGION, SNAPSHOT_TICKET, SNAPSHOT_TOO_LARGE, SNAPSHOT_UNSUPPORTED,
    STATUS_BYTES, UNHEARD_OFFSET,
};
use crate::lease::Appointment;
use crate::shared::Shared;
use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, FabricError, LocalRegion, LocalSlice, NodeId, Op,
    PermError, QpState, RemoteAddr, Source, WorkRequest,
};
use mu_log::HEAD_OFFSET;
use mu_replication::standing;
use mu_replication::{
    split_request, Detector, DetectorConfig, FateSharing, PermStep, PermissionManager, ReplicaSet,
    ACK_RECOVERING,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tracing::{debug, error, info, warn};

/// The longest wait before fetching another snapshot after the application refused to restore
/// the last ones.
const RESTORE_RETRY_NS_MAX: u64 = 1_000_000_000;

/// The longest wait before asking for another snapshot after a donor could not serve one (its
/// application's snapshot hook failed, or the snapshot was larger than `snapshot_bytes_max`).
/// Longer than after a refused restore: every request has the donor's replication plane call
/// its application, and an application that never takes snapshots refuses every time.
const SERVE_RETRY_NS_MAX: u64 = 10_000_000_000;

/// What a background work request was, in the bits above the peer's position.
const KIND_HEARTBEAT: u64 = 1 << 16;
const KIND_REQUEST: u64 = 2 << 16;
const KIND_ACK: u64 = 3 << 16;
const KIND_SNAPSHOT_REQUEST: u64 = 4 << 16;
const KIND_SNAPSHOT_HEADER: u64 = 5 << 16;
const KIND_SNAPSHOT_BODY: u64 = 6 << 16;

/// A state transfer in progress, receiving side: asked `donor` with `ticket`; reading its
/// snapshot header until it answers the ticket, then the snapshot itself.
#[derive(Clone, Copy, Debug)]
struct Fetch {
    /// Its `fetch_seq`.
    seq: u32,
    donor: usize,
    ticket: u64,
    /// Once the header answered: the index, the length, the digest, the members and the last
    /// entry's kind and length (`layout::snapshot_digest`'s `last`).
    body: Option<(u64, u64, u64, u64, u64)>,
    reading: bool,
    since_ns: u64,
}

/// How a replica that lost its log, or fell too far behind, gets the others' state.
pub(crate) struct TransferSettings {
    pub slots_count: u64,
    pub snapshot_bytes_max: usize,
    /// A fetch that takes longer is given up (the donor may have died) and tried again.
    pub timeout_ns: u64,
}
const POS_BITS: u64 = 0xffff;
/// A state-transfer read's work request id also carries its fetch's sequence number, above these
/// bits: a read of a fetch given up may complete after the next fetch started, and must not be
/// taken for one of its reads.
const FETCH_SEQ_SHIFT: u32 = 32;
/// Where a work request id says what it is.
const KIND_BITS: u64 = 0xffff_0000;

/// Heartbeat reads in a row that say a peer does not hear us before our side of its connection
/// is bound again ([`UNHEARD_OFFSET`]): three times what a peer that reaches us needs to judge
/// us alive again from a score of 0.
fn unheard_rebind_reads(config: &DetectorConfig) -> u32 {
    3 * (u32::from(config.recovery_threshold) + 1)
}

/// One peer as the background plane sees it.
#[derive(Clone, Copy, Debug, Default)]
struct PeerView {
    /// Our side of the connection we initiate on is up (bound to the peer's current
    /// incarnation).
    connected: bool,
    /// Our side of the connection the peer initiates on is up.
    target_connected: bool,
    /// The peer's boot id as its heartbeat last said when that side was bound (0: none read
    /// yet). The fabric binds the side to the peer's current incarnation, which for a peer that
    /// is down is its last, dead one; a heartbeat from a later boot says so.
    target_boot: u32,
    /// Heartbeats read in a row in which the peer said it does not hear us
    /// ([`UNHEARD_OFFSET`]).
    unheard_reads: u32,
    /// A heartbeat read is in flight.
    reading: bool,
    /// The last heartbeat counter read (reported again when a read is late: a slow peer loses
    /// score like a stopped one).
    last_counter: Option<u64>,
    /// The request word last posted to the peer.
    request_sent: u64,
    /// When the heartbeat read in flight (or the last one) was posted.
    read_posted_ns: u64,
    /// What the peer's last heartbeat said (its head is in `PeerSignals::heads`): its configuration
    /// (by position, 0 before any read), and whether it stood for election.
    members: u64,
    standing: bool,
    /// The boot id its last heartbeat read gave, whether that run was accepted or not (0: none
    /// yet).
    last_read_boot: u32,
}

/// How a permission step went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StepOutcome {
    Done,
    Failed,
    /// The fabric's call returned while the operation goes on (`FabricError::InProgress`):
    /// the step is made again on the next poll, so that the heartbeat, which this thread
    /// beats, goes on meanwhile.
    UnderWay,
}

impl StepOutcome {
    fn of(result: &Result<(), FabricError>) -> StepOutcome {
        match result {
            Ok(()) => StepOutcome::Done,
            Err(FabricError::InProgress(..)) => StepOutcome::UnderWay,
            Err(_) => StepOutcome::Failed,
        }
    }
}

/// A permission plan taken up again on the next poll (`BackgroundDriver::handle_one_request`).
#[derive(Clone, Copy, Debug)]
struct PlanUnderWay {
    requester: NodeId,
    /// The step to make again.
    step: usize,
    holder_before: Option<NodeId>,
    slow_before: u64,
}

/// See the module docs.
pub struct BackgroundDriver<F: Fabric> {
    fabric: F,
    me: NodeId,
    me_pos: usize,
    /// This run started as a member in good standing ([`FLAG_FOUNDING`]).
    founding: bool,
    replicas: ReplicaSet,
    config: DetectorConfig,
    log: F::Region,
    background: F::Region,
    ep: F::Endpoint,
    shared: Arc<Shared>,
    detector: Detector,
    fate: FateSharing,
    permissions: PermissionManager,
    peers: Vec<PeerView>,
    heartbeat: u64,
    next_read_ns: u64,
    next_fate_check_ns: u64,
    requests: Vec<u64>,
    steps: Vec<PermStep>,
    /// Why the last permission step that failed did (for the log).
    step_failure: Option<String>,
    /// The plan whose step was still under way on the fabric when last tried (a backend that
    /// keeps its calls short): the next poll takes it up at that step.
    plan_under_way: Option<PlanUnderWay>,
    completions: Vec<Completion>,
    snapshot: F::Region,
    transfer: TransferSettings,
    /// Donor side: the last state-transfer ticket taken from each requester.
    tickets_taken: Vec<u64>,
    /// Receiving side.
    fetch: Option<Fetch>,
    fetch_seq: u32,
    next_fetch_ns: u64,
    /// Restore failures seen so far, and the wait before the next fetch after the last one:
    /// an application that cannot restore a snapshot would otherwise have a donor take one
    /// again and again, as fast as they go.
    restore_failures_seen: u64,
    restore_backoff_ns: u64,
    /// A donor could not serve the last snapshot asked for, and the wait before asking again
    /// after the last such refusal: the hook's failure may pass (an application busy, a state
    /// that shrinks below `snapshot_bytes_max`), and a replica that gave up for good would stay
    /// out of the cluster until restarted.
    serve_refused: bool,
    serve_backoff_ns: u64,
    /// Snapshots installed so far: one more starts the waits again from a read period.
    installs_seen: u64,
    /// By position, whether the failure detector judged the peer alive when last looked at:
    /// its changes are logged. Peers start alive, as in the detector.
    alive_seen: Vec<bool>,
}

impl<F: Fabric> BackgroundDriver<F> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        fabric: F,
        replicas: ReplicaSet,
        config: DetectorConfig,
        log: F::Region,
        background: F::Region,
        snapshot: F::Region,
        transfer: TransferSettings,
        ep: F::Endpoint,
        shared: Arc<Shared>,
    ) -> Result<BackgroundDriver<F>, String> {
        let me = fabric.node();
        let me_pos = replicas.position(me).ok_or("this replica is not in the set")?;
        let mut detector = Detector::new(config.clone(), &replicas, me)?;
        // Until the first election poll, we stand if our log may lead.
        let founding = shared.eligible.load(Ordering::Acquire);
        detector.set_self_eligible(founding);
        let permissions = PermissionManager::new(me, &replicas)?;
        // Our own requests are served: we run with our configuration.
        shared.peers.config_same.fetch_or(1 << me_pos, Ordering::AcqRel);
        let n = replicas.len();
        Ok(BackgroundDriver {
            fabric,
            me,
            me_pos,
            founding,
            config,
            log,
            background,
            ep,
            shared,
            detector,
            fate: FateSharing::new(),
            permissions,
            peers: vec![PeerView::default(); n],
            heartbeat: 0,
            next_read_ns: 0,
            next_fate_check_ns: 0,
            requests: vec![0; n],
            steps: Vec::with_capacity(8),
            step_failure: None,
            plan_under_way: None,
            completions: vec![Completion::EMPTY; 64],
            snapshot,
            transfer,
            tickets_taken: vec![0; n],
            fetch: None,
            fetch_seq: 0,
            next_fetch_ns: 0,
            restore_failures_seen: 0,
            restore_backoff_ns: 0,
            serve_refused: false,
            serve_backoff_ns: 0,
            installs_seen: 0,
            alive_seen: vec![true; n],
            replicas,
        })
    }

    /// The failure detector, for status.
    pub fn detector(&self) -> &Detector {
        &self.detector
    }

    /// Who holds write access to our log, for status.
    pub fn permission_holder(&self) -> Option<NodeId> {
        self.permissions.holder()
    }

    /// Scores, the detector's view and the log's holder, for status and the replication plane.
    ///
    /// Each word is stored only when it changed: this runs on every loop of the background
    /// thread, and a store takes the cache line from every core that reads it — the replication
    /// thread reads the detector's view on each of its polls.
    fn publish_status(&self) {
        let mut alive = 0u64;
        for (pos, &peer) in self.replicas.ids().iter().enumerate() {
            if let Some(score) = self.detector.score(peer) {
                let word = &self.shared.peers.scores[pos];
                if word.load(Ordering::Relaxed) != score {
                    word.store(score, Ordering::Relaxed);
                }
            }
            if self.detector.is_alive(peer) {
                alive |= 1 << pos;
            }
        }
        if self.shared.peers.alive_mask.load(Ordering::Relaxed) != alive {
            self.shared.peers.alive_mask.store(alive, Ordering::Release);
        }
        let holder = self.permissions.holder().map_or(0, |h| u64::from(h.0) + 1);
        if self.shared.log_holder.load(Ordering::Relaxed) != holder {
            self.shared.log_holder.store(holder, Ordering::Release);
        }
    }

    /// Who may write our log at this moment, as the fabric and the own-log guard say (not as the
    /// permission manager believes): the replicas whose replication connection to us is up and
    /// grants remote write, and ourselves if our own leader's access is granted. Mu's permissions
    /// keep this to at most one (§5.2, revoke before grant); the simulator's single-writer
    /// checker reads it between polls. A connection that is up with write access counts even if
    /// its peer crashed: the flags alone say what a write arriving now would be allowed to do.
    pub fn log_writers(&self) -> Vec<NodeId> {
        let mut writers = Vec::new();
        if self.shared.guard.is_granted() {
            writers.push(self.me);
        }
        for &peer in self.replicas.ids().iter().filter(|&&p| p != self.me) {
            let conn = ConnId::new(peer, replication_channel(peer, self.me));
            let up = matches!(
                self.fabric.qp_state(conn),
                Ok(QpState::ReadyToReceive | QpState::ReadyToSend)
            );
            if up && self.fabric.qp_access(conn).is_ok_and(|a| a.contains(Access::WRITE)) {
                writers.push(peer);
            }
        }
        writers
    }

    /// This replica's id.
    pub fn me(&self) -> NodeId {
        self.me
    }

    /// The fabric it polls through (its doorbell is what the thread waits on when idle).
    pub fn fabric(&self) -> &F {
        &self.fabric
    }

    /// When the next poll has something to do at the latest (the next heartbeat read).
    pub fn next_deadline_ns(&self) -> u64 {
        self.next_read_ns.min(self.next_fate_check_ns)
    }

    /// Does whatever is due. Returns whether anything happened besides the heartbeat.
    pub fn poll(&mut self, now_ns: u64) -> bool {
        if !self.shared.takes_part() {
            // Removed from the cluster (§5.4): "it stops executing". No heartbeat, no grants,
            // and it follows no leader. So does a replica refused as restarted without
            // rejoining.
            self.shared.set_leader(None, self.me, now_ns);
            return false;
        }
        self.beat(now_ns);
        let mut busy = self.poll_completions();
        busy |= self.notice_crashes();
        if now_ns >= self.next_read_ns {
            self.next_read_ns = now_ns + self.config.read_period_ns;
            self.read_heartbeats(now_ns);
            busy = true;
        }
        // Only members lead (§5.4): to the election, a non-member is not eligible. Nor is a
        // replica that does not consider a majority of the members alive: it could not lead
        // them, and asking for their logs would only take them from the leader they follow (a
        // replica that has just started, whose reads of the others have not succeeded yet,
        // would otherwise elect itself).
        let members = self.shared.members.load(Ordering::Acquire);
        let alive = (0..self.replicas.len())
            .filter(|&pos| {
                members >> pos & 1 != 0 && self.detector.is_alive(self.replicas.ids()[pos])
            })
            .count();
        let eligible = standing::stands(
            self.me_pos,
            self.shared.eligible.load(Ordering::Acquire),
            members,
            alive,
            || self.behind_a_change(members),
        );
        self.detector.set_self_eligible(eligible);
        let leader = self.choose_leader();
        let before = self.shared.leader();
        let changed = self.shared.set_leader(leader, self.me, now_ns);
        if changed {
            busy |= self.ask_ahead(leader == Some(self.me) && self.succeeds_a_crash(before));
        }
        // Logged once the leader is published: formatting an event takes microseconds, and a
        // failover need not wait for them. (The replication plane logs its taking up of the
        // leadership after its first requests are out, later still as a rule.)
        self.note_liveness();
        if changed {
            self.note_leader_change(leader, alive, eligible);
        }
        busy |= changed;
        busy |= self.send_requests();
        busy |= self.handle_one_request();
        self.publish_status();
        self.take_snapshot_request();
        busy |= self.fetch_state(now_ns);
        busy
    }

    /// The detector's choice (§5.1), or the application's appointment where leaders are
    /// appointed (a replica outside the set appointed is no leader of ours).
    fn choose_leader(&self) -> Option<NodeId> {
        match self.shared.leaders {
            Leaders::Elected => self.detector.leader(),
            Leaders::Appointed => {
                let word = self.shared.appointment.load(Ordering::Acquire);
                Appointment::from_word(word)
                    .map(|a| a.leader)
                    .filter(|&l| self.replicas.position(l).is_some())
            }
        }
    }

    /// Logs the failure detector's verdicts as they change (§5.1). Only the changes: a
    /// comparison per peer and poll, on the background plane.
    fn note_liveness(&mut self) {
        for pos in 0..self.replicas.len() {
            let peer = self.replicas.ids()[pos];
            let alive = self.detector.is_alive(peer);
            if pos == self.me_pos || alive == self.alive_seen[pos] {
                continue;
            }
            self.alive_seen[pos] = alive;
            let (replica, score) = (self.me.0, self.detector.score(peer).unwrap_or(0));
            if alive {
                info!(replica, peer = peer.0, score, "peer recovered: its heartbeat moves again");
            } else {
                let why = if self.peers[pos].connected {
                    "its heartbeat stopped moving"
                } else {
                    "it is unreachable"
                };
                info!(replica, peer = peer.0, score, why, "peer judged failed");
            }
        }
    }

    /// Logs a change of the leader this replica's election picked (§5.1), just published:
    /// `leader_changes` counts it.
    fn note_leader_change(&self, leader: Option<NodeId>, alive: usize, eligible: bool) {
        let replica = self.me.0;
        let leader_changes = self.shared.stats.leader_changes.load(Ordering::Relaxed);
        if self.shared.leaders == Leaders::Appointed {
            let admission = Appointment::from_word(self.shared.appointment.load(Ordering::Acquire))
                .map(|a| a.admission);
            return match leader {
                Some(l) => info!(replica, leader = l.0, admission, leader_changes, "appointed"),
                None => info!(replica, leader_changes, "no leader: nobody appointed"),
            };
        }
        match leader {
            Some(l) if l == self.me => info!(
                replica,
                leader = l.0,
                leader_changes,
                alive,
                "elected: this replica is the lowest live eligible id"
            ),
            Some(l) => info!(replica, leader = l.0, leader_changes, alive, "leader changed"),
            None => info!(
                replica,
                leader_changes,
                alive,
                eligible,
                "no leader: no eligible replica is alive to this one"
            ),
        }
    }

    /// Crash notifications from the fabric (the connection-level failure of §5.1, known without
    /// waiting for the next heartbeat read to fail): the peer's score drops at once.
    fn notice_crashes(&mut self) -> bool {
        let mut any = false;
        for pos in 0..self.replicas.len() {
            let peer = self.replicas.ids()[pos];
            if pos != self.me_pos && self.peers[pos].connected && self.fabric.crash_notified(peer) {
                self.lost(pos);
                any = true;
            }
        }
        any
    }

    /// State transfer, donor side: hands the next peer's request to our replication plane,
    /// which takes the snapshot between two entries. One at a time, lowest position first.
    fn take_snapshot_request(&mut self) {
        if self.shared.transfer.snapshot_wanted.load(Ordering::Acquire) != 0 {
            return;
        }
        for pos in 0..self.replicas.len() {
            let ticket = self.load(snapshot_request_offset(pos));
            if pos != self.me_pos && ticket != 0 && ticket != self.tickets_taken[pos] {
                self.tickets_taken[pos] = ticket;
                self.shared.transfer.snapshot_wanted.store(ticket, Ordering::Release);
                return;
            }
        }
    }

    /// State transfer, receiving side. A replica whose log head is a whole log behind a peer's
    /// cannot be brought up to date from the logs (the entries it lacks were overwritten), so
    /// it asks the most advanced peer for a snapshot, reads it with one-sided reads, checks it,
    /// and leaves it to the replication plane to install. Returns whether it did anything.
    fn fetch_state(&mut self, now_ns: u64) -> bool {
        if self.shared.transfer.snapshot_fetched.load(Ordering::Acquire) {
            return false; // the last one is not installed yet
        }
        match self.fetch {
            None => self.start_fetch(now_ns),
            Some(fetch) => self.go_on_fetching(fetch, now_ns),
        }
    }

    /// Waits longer after each snapshot the application refused to restore and after each
    /// refusal to serve one; an installed snapshot starts the waits again.
    fn note_fetch_backoff(&mut self, now_ns: u64) {
        let failures = self.shared.transfer.restore_failures.load(Ordering::Acquire);
        if failures != self.restore_failures_seen {
            // Each refused snapshot doubles the wait, from a read period up to
            // RESTORE_RETRY_NS_MAX; one installed starts the count again.
            self.restore_failures_seen = failures;
            self.restore_backoff_ns = (self.restore_backoff_ns * 2)
                .max(self.config.read_period_ns)
                .min(RESTORE_RETRY_NS_MAX);
            self.next_fetch_ns = now_ns + self.restore_backoff_ns;
        }
        if std::mem::take(&mut self.serve_refused) {
            self.serve_backoff_ns =
                (self.serve_backoff_ns * 2).max(self.config.read_period_ns).min(SERVE_RETRY_NS_MAX);
            self.next_fetch_ns = now_ns + self.serve_backoff_ns;
        }
        let installed = self.shared.transfer.snapshots_installed.load(Ordering::Relaxed);
        if installed != self.installs_seen {
            self.installs_seen = installed;
            self.restore_backoff_ns = 0;
            self.serve_backoff_ns = 0;
        }
    }

    /// Asks the most advanced live peer for a snapshot if this replica is a whole log behind
    /// it (or its replayer is stuck and the peer is further on), once the backoff allows.
    fn start_fetch(&mut self, now_ns: u64) -> bool {
        self.note_fetch_backoff(now_ns);
        if now_ns < self.next_fetch_ns {
            return false;
        }
        let own = self.log.load_u64(HEAD_OFFSET as usize).expect("log header");
        // Among the peers alive to the failure detector: a removed replica stops (no
        // heartbeat, and it serves no snapshot), but its connection stays up and the head
        // it last published stays the highest; asked, it never answered, and the fetch
        // timed out and was asked of it again, for good (Velos, `scenarios.rs: t98`, seed
        // 300927).
        let donor = (0..self.replicas.len())
            .filter(|&pos| {
                pos != self.me_pos
                    && self.peers[pos].connected
                    && self.detector.is_alive(self.replicas.ids()[pos])
            })
            .max_by_key(|&pos| self.shared.peers.heads[pos].load(Ordering::Acquire));
        let Some(donor) = donor else { return false };
        let donor_head = self.shared.peers.heads[donor].load(Ordering::Acquire);
        // A whole log behind: the entries we lack were overwritten. Or our replayer waits
        // for a decided entry our log will never get (it was skipped): any peer further on
        // has what we need.
        let stuck = self.shared.transfer.replayer_stuck.load(Ordering::Acquire) && donor_head > own;
        if donor_head < own + self.transfer.slots_count && !stuck {
            return false;
        }
        self.fetch_seq = self.fetch_seq.wrapping_add(1).max(1);
        let ticket = snapshot_ticket(self.me_pos, self.fetch_seq);
        let at = snapshot_request_offset(self.me_pos);
        if !self.write_word(donor, KIND_SNAPSHOT_REQUEST, at, ticket) {
            return false;
        }
        self.fetch = Some(Fetch {
            seq: self.fetch_seq,
            donor,
            ticket,
            body: None,
            reading: false,
            since_ns: now_ns,
        });
        info!(
            replica = self.me.0,
            donor = self.replicas.ids()[donor].0,
            own_head = own,
            donor_head,
            stuck,
            "state transfer: asking for a snapshot"
        );
        true
    }

    /// A fetch under way: gives up after the transfer timeout, or posts its next read (the
    /// header, then the body) once the last one came back.
    fn go_on_fetching(&mut self, mut fetch: Fetch, now_ns: u64) -> bool {
        if now_ns.saturating_sub(fetch.since_ns) > self.transfer.timeout_ns {
            self.give_up_fetch(now_ns, "timed out");
            return false;
        }
        if fetch.reading {
            return false;
        }
        let (kind, local, remote) = match fetch.body {
            None => (
                KIND_SNAPSHOT_HEADER,
                LocalSlice {
                    region: BACKGROUND_REGION,
                    offset: FETCHED_HEADER_OFFSET,
                    len: SNAPSHOT_HEADER_BYTES as u32,
                },
                RemoteAddr { region: SNAPSHOT_REGION, offset: 0 },
            ),
            Some((_, len, ..)) => (
                KIND_SNAPSHOT_BODY,
                LocalSlice {
                    region: SNAPSHOT_REGION,
                    offset: fetched_body_offset(self.transfer.snapshot_bytes_max),
                    len: len as u32,
                },
                RemoteAddr { region: SNAPSHOT_REGION, offset: SNAPSHOT_HEADER_BYTES },
            ),
        };
        let peer = self.replicas.ids()[fetch.donor];
        let wr = WorkRequest {
            wr_id: kind | u64::from(fetch.seq) << FETCH_SEQ_SHIFT | fetch.donor as u64,
            op: Op::Read { local, remote },
            signaled: true,
        };
        if self.ep.post(ConnId::new(peer, background_channel(self.me, peer)), &wr).is_err() {
            self.give_up_fetch(now_ns, "a read could not be posted");
            return false;
        }
        fetch.reading = true;
        self.fetch = Some(fetch);
        true
    }

    /// Drops the fetch in progress; a new one may start after a read period.
    fn give_up_fetch(&mut self, now_ns: u64, why: &'static str) {
        if let Some(fetch) = self.fetch {
            warn!(
                replica = self.me.0,
                donor = self.replicas.ids()[fetch.donor].0,
                waited_ms = now_ns.saturating_sub(fetch.since_ns) / 1_000_000,
                why,
                "state transfer: giving up on this donor; asking again"
            );
        }
        self.fetch = None;
        self.next_fetch_ns = now_ns + self.config.read_period_ns;
    }

    /// A state-transfer read of the current fetch completed (successfully).
    fn on_fetch_read(&mut self, kind: u64) {
        let Some(mut fetch) = self.fetch else { return };
        fetch.reading = false;
        if kind == KIND_SNAPSHOT_HEADER {
            self.on_fetch_header(fetch);
        } else {
            self.on_fetch_body(fetch);
        }
    }

    /// The header of the donor's snapshot was read: the body is read next if the donor served
    /// our ticket and could.
    fn on_fetch_header(&mut self, mut fetch: Fetch) {
        let header = |field: u64| self.load(FETCHED_HEADER_OFFSET + field);
        if header(SNAPSHOT_TICKET) != fetch.ticket {
            self.fetch = Some(fetch); // not served yet: read the header again
            return;
        }
        let (index, len) = (header(SNAPSHOT_INDEX), header(SNAPSHOT_LEN));
        let error = header(SNAPSHOT_ERROR);
        if error != SNAPSHOT_OK || len > self.transfer.snapshot_bytes_max as u64 {
            self.donor_cannot_serve(fetch.donor, error, len);
            return;
        }
        let last = header(SNAPSHOT_LAST_KIND) << 32 | header(SNAPSHOT_LAST_LEN);
        let members = header(SNAPSHOT_MEMBERS);
        fetch.body = Some((index, len, header(SNAPSHOT_DIGEST), members, last));
        self.fetch = Some(fetch);
    }

    /// The donor (a position) says it cannot serve (`error`), or its snapshot (`len` bytes) is
    /// larger than ours may be: the fetch ends, and the next waits longer.
    fn donor_cannot_serve(&mut self, donor: usize, error: u64, len: u64) {
        // The donor's own status has the hook's message; what its header says is the
        // kind of failure alone.
        let bytes_max = self.transfer.snapshot_bytes_max;
        let why = match error {
            SNAPSHOT_TOO_LARGE => "its snapshot is larger than its snapshot_bytes_max \
                                           (its status says how large)"
                .to_string(),
            SNAPSHOT_UNSUPPORTED => "its application's snapshot hook failed (its \
                                             status says why)"
                .to_string(),
            SNAPSHOT_OK => format!(
                "its snapshot of {len} bytes is larger than this replica's \
                         snapshot_bytes_max ({bytes_max})"
            ),
            _ => format!("unknown error code {error}"),
        };
        let donor = self.replicas.ids()[donor];
        if self.serve_backoff_ns < SERVE_RETRY_NS_MAX {
            warn!(
                replica = self.me.0,
                donor = donor.0,
                why = why.as_str(),
                "state transfer failed: the donor cannot serve; asking again later"
            );
        } else {
            // Asked every 10 s by now: the status keeps the reason, the log a trace.
            debug!(
                replica = self.me.0,
                donor = donor.0,
                why = why.as_str(),
                "state transfer failed again: the donor cannot serve"
            );
        }
        self.shared.transfer_failed(format!("replica {donor} could not serve: {why}"));
        self.fetch = None;
        self.serve_refused = true;
    }

    /// The body of the donor's snapshot was read: checked against the digest its header gave,
    /// it waits for the replication plane to install it.
    fn on_fetch_body(&mut self, fetch: Fetch) {
        let (index, len, digest, members, last) =
            fetch.body.expect("the body is read after the header");
        let mut bytes = vec![0; len as usize];
        let at = fetched_body_offset(self.transfer.snapshot_bytes_max) as usize;
        self.snapshot.read(at, &mut bytes).expect("fetched snapshot in the region");
        self.fetch = None;
        let donor = self.replicas.ids()[fetch.donor].0;
        if snapshot_digest(index, members, last, &bytes) != digest {
            debug!(replica = self.me.0, donor, "state transfer: the snapshot changed while read");
            return; // the donor served someone else meanwhile: ask again
        }
        // What the donor published, whole; but only a faulty donor publishes an index the log
        // can never reach or a configuration outside the cluster, and installed they would stop
        // this replica's planes.
        let universe = mu_replication::membership::all(&self.replicas);
        if index > u64::MAX / 2 || members == 0 || members & !universe != 0 {
            warn!(
                replica = self.me.0,
                donor,
                index,
                members,
                "state transfer failed: the donor's snapshot header is malformed; not retried \
                 until restarted"
            );
            self.shared.transfer_failed(format!(
                "replica {donor} served a malformed snapshot (index {index}, members {members:#x})"
            ));
            self.next_fetch_ns = u64::MAX;
            return;
        }
        info!(
            replica = self.me.0,
            donor,
            index,
            bytes = len,
            "state transfer: snapshot fetched and checked"
        );
        // The checked copy is what is installed: a late read of an earlier fetch, given up,
        // may still land in the regions it came through.
        let fetched = crate::signals::FetchedSnapshot { index, members, last_word: last, bytes };
        *self.shared.transfer.fetched_snapshot.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(fetched);
        self.shared.transfer.snapshot_fetched.store(true, Ordering::Release);
    }

    /// A peer that applied further than us (up to `head`) has a configuration without us: we
    /// were removed by an entry we have not applied (§5.4), and the leader that decided it may
    /// never tell us (it writes only to members). We stop as if we had applied it. Only a full
    /// member in this run concludes so: a replica that restarted or joined replays history
    /// until it is taken back, and what history says of an earlier run of it does not count.
    fn notice_removal(&self, head: u64, members: u64) {
        let own_head = self.log.load_u64(HEAD_OFFSET as usize).expect("log header");
        if standing::removed_by_peer(
            self.me_pos,
            (head, members),
            own_head,
            || self.shared.eligible.load(Ordering::Acquire),
            || self.shared.is_member(self.me_pos),
        ) {
            if !self.shared.removed.load(Ordering::Acquire) {
                warn!(
                    replica = self.me.0,
                    own_head,
                    peer_head = head,
                    "removed: a peer applied a configuration without this replica; it stops \
                     taking part"
                );
            }
            self.shared.removed.store(true, Ordering::Release);
        }
    }

    /// Whether a live peer that stands for election has applied entries beyond everything we
    /// know to be decided, under a configuration other than ours (`members`): our log lacks a
    /// decided change, and we do not stand while it does ([`standing::claims_a_later_change`]).
    /// Standing under the configuration our log gives, we could ask for ever a majority that no
    /// longer answers: members since removed, which stopped, and restarted ones that count in
    /// no majority until a leader takes them back, while the peer that could lead the new
    /// configuration followed us.
    fn behind_a_change(&self, members: u64) -> bool {
        let own_head = self.log.load_u64(HEAD_OFFSET as usize).expect("log header");
        let fuo = self.shared.progress.fuo.load(Ordering::Acquire);
        let decided_below = standing::decided_below(own_head, fuo);
        (0..self.replicas.len()).any(|pos| {
            let peer = &self.peers[pos];
            pos != self.me_pos
                && standing::claims_a_later_change(
                    peer.standing,
                    peer.members,
                    members,
                    || self.shared.peers.heads[pos].load(Ordering::Acquire),
                    decided_below,
                )
                && self.detector.is_alive(self.replicas.ids()[pos])
        })
    }

    /// Heartbeat, head and flags, where peers read them; fate sharing (§5.1).
    fn beat(&mut self, now_ns: u64) {
        if now_ns >= self.next_fate_check_ns {
            self.next_fate_check_ns = now_ns + self.config.fate_check_period_ns;
            let on = self.fate.check(
                self.shared.progress.loop_count.load(Ordering::Relaxed),
                self.shared.progress.in_propose.load(Ordering::Acquire),
            );
            let was_on = self.shared.heartbeat_on.load(Ordering::Acquire);
            if was_on && !on {
                warn!(
                    replica = self.me.0,
                    "fate sharing: heartbeat stopped, the replication plane is stuck inside propose"
                );
            } else if on && !was_on {
                info!(replica = self.me.0, "fate sharing: heartbeat resumed");
            }
            self.shared.heartbeat_on.store(on, Ordering::Release);
        }
        if self.shared.heartbeat_on.load(Ordering::Acquire) {
            self.heartbeat += 1;
            self.store(HEARTBEAT_OFFSET, self.heartbeat);
        }
        let head = self.log.load_u64(HEAD_OFFSET as usize).expect("log header");
        self.store(HEAD_COPY_OFFSET, head);
        // Whether we stood for election at the last poll, not merely whether our log may lead:
        // a replica whose own configuration has no live majority (it missed changes that
        // removed most of it) must not be picked by peers that know a newer one; under it,
        // they bring it up to date.
        let standing = self.detector.self_eligible();
        let abstaining = self.shared.abstaining.load(Ordering::Acquire);
        let flags = if standing { FLAG_ELIGIBLE } else { 0 }
            | if abstaining { FLAG_ABSTAINING } else { 0 }
            | if self.founding { FLAG_FOUNDING } else { 0 };
        let fingerprint = u64::from(self.shared.config_fingerprint) << FLAGS_CONFIG_SHIFT;
        self.store(FLAGS_OFFSET, flags | fingerprint | u64::from(self.shared.boot_id) << 32);
        self.store(MEMBERS_COPY_OFFSET, self.shared.members.load(Ordering::Acquire));
        let others = mu_replication::membership::all(&self.replicas) & !(1u64 << self.me_pos);
        self.store(UNHEARD_OFFSET, others & !self.shared.peers.alive_mask.load(Ordering::Acquire));
        self.store(REJOIN_OFFSET, self.shared.rejoin_request.load(Ordering::Acquire));
        self.store(REFUSED_OFFSET, self.shared.peers.refused.load(Ordering::Acquire));
    }

    fn store(&self, offset: u64, value: u64) {
        self.background.store_u64(offset as usize, value).expect("background region layout");
    }

    fn load(&self, offset: u64) -> u64 {
        self.background.load_u64(offset as usize).expect("background region layout")
    }

    /// Pull-score: read every peer's heartbeat once per read period (§5.1).
    fn read_heartbeats(&mut self, now_ns: u64) {
        for pos in 0..self.replicas.len() {
            if pos == self.me_pos {
                continue;
            }
            let peer = self.replicas.ids()[pos];
            if !self.peers[pos].target_connected {
                // The side the peer reads and writes us through: (re)bound to its current
                // incarnation, so a restarted peer can reach us again.
                let conn = ConnId::new(peer, background_channel(peer, self.me));
                self.peers[pos].target_connected =
                    self.fabric.connect(conn, Access::READ_WRITE).is_ok();
                self.peers[pos].target_boot = self.peers[pos].last_read_boot;
            }
            if !self.peers[pos].connected {
                let conn = ConnId::new(peer, background_channel(self.me, peer));
                match self.fabric.connect(conn, Access::NONE) {
                    Ok(()) => {}
                    // Binding goes on in the fabric: no verdict yet, as while a read is out.
                    Err(FabricError::InProgress(..)) => continue,
                    Err(_) => {
                        // Not there (yet): the connection-level failure of §5.1. Our side it
                        // initiates on is bound again too: if it was bound before the peer went
                        // down, it names an incarnation that will never call again, and a
                        // restarted peer could never read our heartbeat (found by `mu sim`, seed
                        // 5444: a replica that crashed before any read of it failed came back
                        // judging the leader failed for good).
                        self.peers[pos].target_connected = false;
                        self.detector.on_unreachable(peer);
                        continue;
                    }
                }
                self.peers[pos] = PeerView {
                    connected: true,
                    target_connected: self.peers[pos].target_connected,
                    target_boot: self.peers[pos].target_boot,
                    last_read_boot: self.peers[pos].last_read_boot,
                    ..PeerView::default()
                };
            }
            if self.peers[pos].reading {
                // Late: the peer did not answer within a period; its counter did not move.
                if let Some(counter) = self.peers[pos].last_counter {
                    self.detector.on_heartbeat(peer, counter, true);
                }
                continue;
            }
            let wr = WorkRequest {
                wr_id: KIND_HEARTBEAT | pos as u64,
                op: Op::Read {
                    local: LocalSlice {
                        region: BACKGROUND_REGION,
                        offset: view_offset(pos),
                        len: STATUS_BYTES,
                    },
                    remote: RemoteAddr { region: BACKGROUND_REGION, offset: HEARTBEAT_OFFSET },
                },
                signaled: true,
            };
            if self.ep.post(ConnId::new(peer, background_channel(self.me, peer)), &wr).is_ok() {
                self.peers[pos].reading = true;
                self.peers[pos].read_posted_ns = now_ns;
            } else {
                self.lost(pos);
            }
        }
    }

    /// The background connection to `pos` failed: the peer is unreachable until reconnected.
    /// Both our sides are reconnected: the peer may have restarted, and then the side it
    /// initiates on is bound to its old incarnation.
    fn lost(&mut self, pos: usize) {
        self.peers[pos].connected = false;
        self.peers[pos].target_connected = false;
        self.peers[pos].reading = false;
        self.peers[pos].request_sent = 0;
        self.detector.on_unreachable(self.replicas.ids()[pos]);
    }

    fn poll_completions(&mut self) -> bool {
        let mut busy = false;
        loop {
            let n = self.ep.poll(&mut self.completions);
            for i in 0..n {
                let c = self.completions[i];
                self.on_completion(c);
            }
            busy |= n > 0;
            if n < self.completions.len() {
                return busy;
            }
        }
    }

    fn on_completion(&mut self, c: Completion) {
        let pos = (c.wr_id & POS_BITS) as usize;
        if pos >= self.replicas.len() || pos == self.me_pos {
            panic!("background completion with wr_id {:#x} names no peer", c.wr_id);
        }
        if !c.status.is_success() {
            self.on_failed(pos);
            return;
        }
        let kind = c.wr_id & KIND_BITS;
        if matches!(kind, KIND_SNAPSHOT_HEADER | KIND_SNAPSHOT_BODY) {
            // A read of a fetch given up (timed out) completes after the next one began: not
            // one of its reads (`mu sim --protocol velos --seed 10632 --replicas 3 --faults
            // all,membership` took a late body read for the next fetch's, which had no header
            // yet).
            let seq = c.wr_id >> FETCH_SEQ_SHIFT;
            if self.fetch.is_some_and(|f| f.donor == pos && u64::from(f.seq) == seq) {
                self.on_fetch_read(kind);
            }
            return;
        }
        if c.wr_id & !POS_BITS == KIND_HEARTBEAT {
            self.on_heartbeat_read(pos);
            return;
        }
        // Requests and acknowledgements are posted unsignaled: only their failures arrive.
        debug_assert!(matches!(
            c.wr_id & !POS_BITS,
            KIND_HEARTBEAT | KIND_REQUEST | KIND_ACK | KIND_SNAPSHOT_REQUEST
        ));
    }

    /// An operation to `pos` failed: the peer is lost, and a fetch from it is asked again.
    fn on_failed(&mut self, pos: usize) {
        self.lost(pos);
        if self.fetch.is_some_and(|f| f.donor == pos) {
            warn!(
                replica = self.me.0,
                donor = self.replicas.ids()[pos].0,
                "state transfer: the donor became unreachable; asking again"
            );
            self.fetch = None; // asked again of whoever is most advanced then
        }
    }

    /// A read of `pos`'s heartbeat, head and flags came back (in its view in our region): the
    /// failure detector hears it, and what the peer publishes is passed on to the replication
    /// plane, unless the peer is refused.
    fn on_heartbeat_read(&mut self, pos: usize) {
        self.peers[pos].reading = false;
        let view = view_offset(pos);
        let counter = self.load(view + HEARTBEAT_OFFSET);
        let head = self.load(view + HEAD_COPY_OFFSET);
        let flags = self.load(view + FLAGS_OFFSET);
        if flags >> FLAGS_CONFIG_SHIFT & 0xffff == 0 {
            // The peer has not published its flags yet (its first beat is under way): a
            // heartbeat of a replica that does not stand, as before it beats. Its
            // configuration is not known, so its requests wait.
            self.peers[pos].last_counter = Some(counter);
            self.detector.on_heartbeat(self.replicas.ids()[pos], counter, false);
            return;
        }
        let boot = (flags >> 32) as u32;
        self.note_peer_boot(pos, boot);
        if self.refuse_if_restarted(pos, flags) || !self.config_agrees(pos, flags) {
            // A peer with another log shape or protocol never counts as alive, nor as
            // eligible; nor does one that restarted without rejoining.
            self.detector.on_unreachable(self.replicas.ids()[pos]);
            return;
        }
        let eligible = flags & FLAG_ELIGIBLE != 0;
        if self.founding && self.load(view + REFUSED_OFFSET) & (1 << self.me_pos) != 0 {
            self.stop_refused(pos);
            return;
        }
        if self.shared.peers.boots[pos].load(Ordering::Relaxed) != boot {
            self.shared.peers.boots[pos].store(boot, Ordering::Release);
        }
        self.shared.peers.reads_accepted[pos].fetch_add(1, Ordering::AcqRel);
        self.count_unheard(pos, view);
        self.publish_peer_requests(pos, flags, view);
        let members = self.load(view + MEMBERS_COPY_OFFSET);
        self.notice_removal(head, members);
        self.peers[pos].last_counter = Some(counter);
        // For log recycling (§5.3): the leader engine limits itself by its confirmed
        // followers' heads.
        // A restarted peer's head starts again from its snapshot or from 0. Stored only
        // when it moved: the replication thread reads it on every poll.
        let word = &self.shared.peers.heads[pos];
        if word.load(Ordering::Relaxed) != head {
            word.store(head, Ordering::Release);
        }
        let posted_ns = self.peers[pos].read_posted_ns;
        self.shared.peers.heads_read_ns[pos].store(posted_ns, Ordering::Release);
        let eligible = eligible && self.shared.is_member(pos);
        (self.peers[pos].members, self.peers[pos].standing) = (members, eligible);
        self.detector.on_heartbeat(self.replicas.ids()[pos], counter, eligible);
    }

    /// Our side of the peer's connection is kept bound to its current run (`boot`), whether
    /// that run is counted or not: a run refused must still read our refusal.
    fn note_peer_boot(&mut self, pos: usize, boot: u32) {
        self.peers[pos].last_read_boot = boot;
        let peer_view = &mut self.peers[pos];
        if peer_view.target_connected && peer_view.target_boot != boot {
            if peer_view.target_boot == 0 {
                peer_view.target_boot = boot;
            } else {
                // Our side the peer initiates on was bound to an earlier run of it (while
                // it was down, between its crash and its restart): the restarted peer could
                // never read our heartbeat, and would judge us failed for good while we
                // read it fine (`mu sim` seed 21361, a 3,000-seed sweep). Bound again at
                // the next read.
                peer_view.target_connected = false;
            }
        }
    }

    /// The peer reads, we hear it, yet it has not heard us for many reads in a row (its
    /// heartbeat view at `view` says so): nothing on our side failed, so nothing else would
    /// ever bind our side again. The case the boot id misses: our side was bound before we
    /// read any boot of the peer, and the peer crashed and restarted before that first read
    /// (`mu sim --seed 50301 --replicas 4`). The count is far above what a peer that reaches
    /// us needs to hear us again, so a slow start or a pause does not cycle a working side;
    /// and after a rebind it starts again from 0, so the peer has that many reads to recover
    /// before the next one.
    fn count_unheard(&mut self, pos: usize, view: u64) {
        let unheard = self.load(view + UNHEARD_OFFSET) & (1u64 << self.me_pos) != 0;
        let peer_view = &mut self.peers[pos];
        // Saturating: a peer that never hears us (a one-way partition) counts for ever.
        peer_view.unheard_reads =
            if unheard { peer_view.unheard_reads.saturating_add(1) } else { 0 };
        if peer_view.unheard_reads >= unheard_rebind_reads(&self.config)
            && peer_view.target_connected
        {
            debug!(
                replica = self.me.0,
                peer = self.replicas.ids()[pos].0,
                reads = peer_view.unheard_reads,
                "the peer has not heard us for many reads: binding its side of us again"
            );
            peer_view.unheard_reads = 0;
            peer_view.target_connected = false;
        }
    }

    /// Velos: publishes for the replication plane whether the peer abstains (`flags`) and its
    /// rejoin request (at `view`).
    fn publish_peer_requests(&mut self, pos: usize, flags: u64, view: u64) {
        let bit = 1u64 << pos;
        if flags & FLAG_ABSTAINING != 0 {
            self.shared.peers.abstaining.fetch_or(bit, Ordering::Release);
        } else if self.shared.peers.abstaining.load(Ordering::Relaxed) & bit != 0 {
            self.shared.peers.abstaining.fetch_and(!bit, Ordering::Release);
        }
        let rejoin = self.load(view + REJOIN_OFFSET);
        if self.shared.peers.rejoin_requests[pos].load(Ordering::Relaxed) != rejoin {
            // The request first, then the mask that sends a leader to read it.
            self.shared.peers.rejoin_requests[pos].store(rejoin, Ordering::Release);
            if rejoin != 0 {
                self.shared.peers.rejoining.fetch_or(1 << pos, Ordering::Release);
            } else {
                self.shared.peers.rejoining.fetch_and(!(1 << pos), Ordering::Release);
            }
        }
    }

    /// Delivers our replication plane's permission request to every permission manager,
    /// ours included (§5.2: "a simple RDMA Write to a permission request array").
    fn send_requests(&mut self) -> bool {
        let mut busy = false;
        for pos in 0..self.replicas.len() {
            let word = self.shared.requests[pos].load(Ordering::Acquire);
            if word == 0 || self.peers[pos].request_sent == word {
                continue;
            }
            if pos == self.me_pos {
                self.store(request_offset(pos), word);
                self.peers[pos].request_sent = word;
                busy = true;
                continue;
            }
            if !self.peers[pos].connected {
                continue; // sent once the connection is back
            }
            if self.write_word(pos, KIND_REQUEST, request_offset(self.me_pos), word) {
                // The peer's background thread serves it: wake it if it sleeps (behind the
                // write on shm, where a post has landed when it returns; a hint either way).
                self.fabric.ring_doorbell(self.replicas.ids()[pos]);
                self.peers[pos].request_sent = word;
                busy = true;
            }
        }
        busy
    }

    /// Whether the leader we followed before, `before`, is known crashed (the fabric's notice,
    /// not a suspicion). Only then are requests sent ahead: an election that follows a mere
    /// suspicion may be undone a moment later (scores near their thresholds while a cluster
    /// settles, or while a permission switch holds up a heartbeat), and requests sent at each
    /// such election took the logs from the leader that was still there, whose permission
    /// switches held up heartbeats in turn: in the simulator, on the uKharon profile (30 µs
    /// reads, control calls that stop a node), clusters stopped settling at two seeds of three.
    /// The replication plane asks a moment later, after the election has held that long.
    fn succeeds_a_crash(&self, before: Option<NodeId>) -> bool {
        before.is_some_and(|leader| leader != self.me && self.fabric.crash_notified(leader))
    }

    /// At a change of our election: sends a new leadership's first permission requests at once
    /// if we are elected (`crate::ask_ahead` says when that is safe): to the askable members
    /// connected now; the others get the engine's requests, sent by [`Self::send_requests`].
    fn ask_ahead(&mut self, elected: bool) -> bool {
        let shared = Arc::clone(&self.shared);
        let members = shared.members.load(Ordering::Acquire);
        shared.ask_ahead.on_election(elected, |askable, word| {
            for pos in (0..self.replicas.len()).filter(|&pos| (askable & members) >> pos & 1 != 0) {
                let sent = pos == self.me_pos
                    || self.peers[pos].connected
                        && self.write_word(pos, KIND_REQUEST, request_offset(self.me_pos), word);
                if !sent {
                    continue;
                }
                if pos == self.me_pos {
                    self.store(request_offset(pos), word);
                } else {
                    self.fabric.ring_doorbell(self.replicas.ids()[pos]);
                }
                // As if the replication plane had asked: `send_requests` sends it no more.
                shared.requests[pos].store(word, Ordering::Release);
                self.peers[pos].request_sent = word;
            }
        })
    }

    /// Whether the peer at `pos`, as its heartbeat `flags` say, is a run that started founding
    /// ([`FLAG_FOUNDING`]) after we saw an earlier run of it: that run's log was lost, and this
    /// one's must not count as a member's. Refused ([`REFUSED_OFFSET`]) until a run of it
    /// comes back rejoining. What the mechanism cannot see: a peer that restarted before we
    /// read any run of it, or while every replica that had seen it was down too.
    fn refuse_if_restarted(&mut self, pos: usize, flags: u64) -> bool {
        let boot = (flags >> 32) as u32;
        // The run we last accepted (`peer_boots` is set only for accepted heartbeats).
        let seen = self.shared.peers.boots[pos].load(Ordering::Relaxed);
        let refuse = flags & FLAG_FOUNDING != 0 && seen != 0 && seen != boot;
        let bit = 1u64 << pos;
        let refused = &self.shared.peers.refused;
        let was_refused = refused.load(Ordering::Relaxed) & bit != 0;
        if refuse {
            if !was_refused {
                error!(
                    replica = self.me.0,
                    peer = self.replicas.ids()[pos].0,
                    "the peer restarted as a member in good standing (eligible), but its earlier \
                     run's log is lost: refused (not counted alive, its permission requests not \
                     served) until it restarts rejoining (eligible: false; `mu replica --rejoin`)"
                );
                refused.fetch_or(bit, Ordering::AcqRel);
            }
            // Its requests are not served, and Velos does not bind its side.
            self.shared.peers.config_same.fetch_and(!bit, Ordering::AcqRel);
        } else if was_refused {
            refused.fetch_and(!bit, Ordering::AcqRel);
        }
        refuse
    }

    /// The peer at `pos` refuses us: we started founding after it saw an earlier run of us,
    /// whose log is lost. We stop taking part, as a removed replica does, and say why.
    fn stop_refused(&mut self, pos: usize) {
        if self.shared.refused.swap(true, Ordering::AcqRel) {
            return;
        }
        let text = format!(
            "replica {} started as a member in good standing (eligible: true), but replica {} \
             had seen an earlier run of it: that run's log is lost, and this one's empty log \
             could help decide a second value where the lost one helped choose a first. It \
             stopped; start it with eligible: false (`mu replica --rejoin`) to rejoin as \
             recovering",
            self.me.0,
            self.replicas.ids()[pos].0
        );
        error!(replica = self.me.0, "{text}");
        let mut failure = self.shared.failure.lock().unwrap_or_else(|p| p.into_inner());
        failure.get_or_insert(text);
    }

    /// Whether peer `pos`, whose heartbeat gave `flags`, runs with our configuration
    /// ([`crate::ReplicaConfig::fingerprint`]); notes the answer for the permission manager and
    /// the status, and says once (per change) when it does not.
    fn config_agrees(&mut self, pos: usize, flags: u64) -> bool {
        let theirs = (flags >> FLAGS_CONFIG_SHIFT) as u16;
        let same = theirs == self.shared.config_fingerprint;
        let bit = 1u64 << pos;
        let (agreeing, other) = if same { (bit, 0) } else { (0, bit) };
        let was_other = self.shared.peers.config_other.load(Ordering::Relaxed) & bit != 0;
        if !same && !was_other {
            error!(
                replica = self.me.0,
                peer = self.replicas.ids()[pos].0,
                ours = self.shared.config_fingerprint,
                theirs,
                "the peer runs with another configuration (protocol, log shape, replica list or \
                 application): it is not counted alive and its permission requests are not served \
                 until it runs with ours"
            );
        }
        let same_mask = &self.shared.peers.config_same;
        same_mask.store((same_mask.load(Ordering::Relaxed) & !bit) | agreeing, Ordering::Release);
        let other_mask = &self.shared.peers.config_other;
        other_mask.store((other_mask.load(Ordering::Relaxed) & !bit) | other, Ordering::Release);
        same
    }

    /// Posts an unsignaled inline write of `word` at `offset` of peer `pos`'s background region.
    fn write_word(&mut self, pos: usize, kind: u64, offset: u64, word: u64) -> bool {
        let peer = self.replicas.ids()[pos];
        let bytes = word.to_le_bytes();
        let wr = WorkRequest {
            wr_id: kind | pos as u64,
            op: Op::Write {
                source: Source::Inline(&bytes),
                remote: RemoteAddr { region: BACKGROUND_REGION, offset },
            },
            signaled: false,
        };
        if self.ep.post(ConnId::new(peer, background_channel(self.me, peer)), &wr).is_ok() {
            return true;
        }
        self.lost(pos);
        false
    }

    /// Handles the lowest-id pending permission request, if any (§5.2): revoke the holder,
    /// grant the requester, acknowledge.
    ///
    /// A step the fabric has under way ends the poll; the next one makes it again and goes on
    /// from there, before any other request.
    fn handle_one_request(&mut self) -> bool {
        let plan = match self.plan_under_way.take() {
            Some(plan) => plan,
            None => {
                for pos in 0..self.replicas.len() {
                    // Requests of removed replicas are ignored (§5.4): one that missed its
                    // removal must not take logs away from the leader. (A replica this one does
                    // not know as a member yet is served: it may have been added by entries this
                    // one has not applied, and refusing it could leave a leader without the
                    // majority that would tell us.)
                    // Nor are those of a replica whose heartbeat has not shown our
                    // configuration (yet): granted, it would write entries of another shape
                    // into our log, and count our acknowledgements.
                    // The request must come from the run of the peer whose heartbeat showed it
                    // (a peer restarted with another configuration, not read since, still has
                    // the bit of its earlier run).
                    let same_config =
                        self.shared.peers.config_same.load(Ordering::Acquire) & 1 << pos != 0;
                    let word = self.load(request_offset(pos));
                    let (boot, _) = split_request(word);
                    let this_run = pos == self.me_pos
                        || boot == self.shared.peers.boots[pos].load(Ordering::Acquire);
                    self.requests[pos] = if self.shared.is_removed(pos) || !same_config || !this_run
                    {
                        0
                    } else {
                        word
                    };
                }
                let Some(requester) = self.permissions.next(&self.requests, &mut self.steps) else {
                    return false;
                };
                PlanUnderWay {
                    requester,
                    step: 0,
                    holder_before: self.permissions.holder(),
                    slow_before: self.shared.stats.slow_permission_switches.load(Ordering::Relaxed),
                }
            }
        };
        let PlanUnderWay { requester, holder_before, slow_before, .. } = plan;
        let mut ok = true;
        for i in plan.step..self.steps.len() {
            match self.execute(self.steps[i]) {
                StepOutcome::Done => {}
                StepOutcome::Failed => {
                    ok = false;
                    break;
                }
                StepOutcome::UnderWay => {
                    self.plan_under_way = Some(PlanUnderWay { step: i, ..plan });
                    return true;
                }
            }
        }
        self.permissions.done(requester, ok);
        if ok {
            self.shared.stats.permission_switches.fetch_add(1, Ordering::Relaxed);
        }
        let slow =
            self.shared.stats.slow_permission_switches.load(Ordering::Relaxed) != slow_before;
        self.note_permission_switch(requester, holder_before, ok, slow);
        true
    }

    /// Logs a permission request served (§5.2): granted at debug level, granted on the slow
    /// path (a connection cycled through reset) and failed at info.
    fn note_permission_switch(
        &self,
        requester: NodeId,
        holder_before: Option<NodeId>,
        ok: bool,
        slow: bool,
    ) {
        let (replica, to, from) = (self.me.0, requester.0, holder_before.map(|h| h.0));
        match (ok, slow) {
            (true, false) => debug!(replica, to, from, "write access to this log switched"),
            (true, true) => info!(
                replica,
                to, from, "write access to this log switched on the slow path (connection cycled)"
            ),
            (false, _) => {
                let why = self.step_failure.as_deref().unwrap_or("");
                info!(
                    replica,
                    to, from, why, "permission switch failed; a live requester asks again"
                )
            }
        }
    }

    /// Carries out one step of a permission plan.
    fn execute(&mut self, step: PermStep) -> StepOutcome {
        match step {
            PermStep::RevokeOwn => {
                self.shared.guard.revoke();
                StepOutcome::Done
            }
            PermStep::GrantOwn => {
                self.shared.guard.grant();
                StepOutcome::Done
            }
            PermStep::Revoke { peer } => {
                let conn = ConnId::new(peer, replication_channel(peer, self.me));
                match self.fabric.qp_state(conn) {
                    // Never brought up: nothing was ever granted through it.
                    Ok(QpState::Reset | QpState::Init) => StepOutcome::Done,
                    Ok(QpState::ReadyToReceive | QpState::ReadyToSend) => {
                        self.change_access(conn, Access::READ)
                    }
                    Ok(QpState::Error) => self.slow_change(conn, Access::READ),
                    Err(_) => StepOutcome::Failed,
                }
            }
            PermStep::Grant { peer, rebind, .. } => {
                let conn = ConnId::new(peer, replication_channel(peer, self.me));
                let ready = matches!(self.fabric.qp_state(conn), Ok(QpState::ReadyToSend));
                if rebind || !ready {
                    // A full cycle binds the side to the peer's current incarnation.
                    let connected = self.fabric.connect(conn, Access::READ_WRITE);
                    self.step_failure = connected.as_ref().err().map(|e| e.to_string());
                    self.slow_step(StepOutcome::of(&connected))
                } else {
                    self.change_access(conn, Access::READ_WRITE)
                }
            }
            PermStep::Ack { peer, word } => {
                let pos = self.replicas.position(peer).expect("acks go to replicas");
                // A recovering replica says so with its grant: the leader must not count it in
                // the majority it prepares with.
                let word = if self.shared.recovering.load(Ordering::Acquire) {
                    word | ACK_RECOVERING
                } else {
                    word
                };
                // Our run's boot first, on the same connection: the requester counts the grant
                // only if it is the run whose heartbeat it accepted.
                let boot = u64::from(self.shared.boot_id);
                if pos == self.me_pos {
                    self.store(ack_boot_offset(pos), boot);
                    self.store(ack_offset(pos), word);
                } else if self.peers[pos].connected {
                    // Lost with the connection if it breaks: the requester asks again.
                    if self.write_word(pos, KIND_ACK, ack_boot_offset(self.me_pos), boot)
                        && self.write_word(pos, KIND_ACK, ack_offset(self.me_pos), word)
                    {
                        // The requester's replication thread counts it: wake it if it sleeps.
                        self.fabric.ring_doorbell(peer);
                    }
                }
                StepOutcome::Done
            }
        }
    }

    /// Mu's fast-slow path (§5.2): change the access flags; if that breaks the connection
    /// (operations in flight), cycle it through reset with the new flags.
    fn change_access(&mut self, conn: ConnId, access: Access) -> StepOutcome {
        match self.fabric.set_access_fast(conn, access) {
            Ok(()) => StepOutcome::Done,
            Err(PermError::Busy(_)) => self.slow_change(conn, access),
            Err(PermError::Fabric(_)) => self.slow_change(conn, access),
        }
    }

    fn slow_change(&mut self, conn: ConnId, access: Access) -> StepOutcome {
        let changed = self.fabric.set_access_slow(conn, access);
        self.step_failure = changed.as_ref().err().map(|e| e.to_string());
        self.slow_step(StepOutcome::of(&changed))
    }

    /// Counts a step that cycled a connection once it is over (a step under way is made again).
    fn slow_step(&self, outcome: StepOutcome) -> StepOutcome {
        if outcome != StepOutcome::UnderWay {
            self.shared.stats.slow_permission_switches.fetch_add(1, Ordering::Relaxed);
        }
        outcome
    }
}
