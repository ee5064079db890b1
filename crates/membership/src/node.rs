//! uKharon Core on a fabric (§3.1): one node's single-threaded core. It joins and leaves
//! through the coordinator leader's inbox, learns decided views from its board (where the
//! leader writes them) or, when a check finds a newer one, from a coordinator's board, keeps
//! the lease on the latest view with Algorithm 6's checks (`mu_ukharon::check`,
//! `mu_ukharon::lease`) and publishes it for lock-free `Active` in application threads, bumps
//! the heartbeat the ring reads, and runs the failure detectors ([`crate::detectors`]).
//! Where the cluster has lease caches (§6.3), a member renews through them instead
//! ([`crate::renewal`]), and a cache is a core of its own kind ([`NodeCore::new_cache`]): it
//! does not join, renews by checks with its own lease ∆, and answers members' requests.
//! No threads and no clock: [`NodeCore::poll`] is called with the time.

use crate::config::MembershipConfig;
use crate::detectors::Detectors;
use crate::layout::{
    board_channel, consensus_layout, BoardLayout, BOARD_REGION, CONSENSUS_REGION,
    FINGERPRINT_OFFSET, HEARTBEAT_OFFSET, INCARNATION_OFFSET, VIEW_BYTES, VIEW_OFFSET,
};
use crate::links::Links;
use crate::published::{Lease, PublishedLease};
use crate::renewal::{Outcome, Renewal, Step};
use mu_fabric::{
    Access, Completion, Endpoint, Fabric, FabricError, LocalRegion, LocalSlice, NodeId, RemoteAddr,
    Source, WorkRequest,
};
use mu_ukharon::cache::{CacheClient, CacheConfig};
use mu_ukharon::lease::{Durations, LeaseConfig, LeaseKeeper};
use mu_ukharon::mailbox::{self, Answer, Inbox, Kind, Outbox, Request};
use mu_ukharon::view::{Member, View};
use mu_velos::VelosLayout;
use std::sync::Arc;

/// What the core saw, for the application's streams and for tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    /// A newer decided view (each once, in epoch order, though epochs may be skipped).
    View(View),
    /// This node is a member, under this unique id (after a join).
    Joined(Member),
    /// A view without this node was learnt: it left or was removed.
    Out { epoch: u64 },
    /// A coordinator refused a request.
    Refused(Answer),
    /// A view on a board could not be read whole or is not this cluster's (torn views are
    /// read again and not reported).
    BadView(String),
}

/// What the node wants of the membership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    /// To be a member: join requests go out until a view admits this incarnation.
    Member,
    /// To leave: leave requests go out until a view excludes it.
    Out,
    /// Nothing: a lease cache, which serves the members without being one.
    Serve,
}

const SLOT_READ: u64 = 1 << 32;
const VIEW_READ: u64 = 2 << 32;
const REQUEST_WRITE: u64 = 3 << 32;
const RING_READ: u64 = 4 << 32;
const BEAT_WRITE: u64 = 5 << 32;
const CACHE_WRITE: u64 = 6 << 32;
const KIND_MASK: u64 = 0xFF << 32;

/// Frames sent to a coordinator without a sign of it at work before the next one is tried.
const UNANSWERED_MAX: u32 = 4;

/// Beats to one member posted and not yet completed, past which its next beats are skipped. A
/// member cut off from this node takes none of them, and on a fabric whose posts wait for room
/// in a full queue (ofi waits up to 2 s) more beats would stall this core, its lease and its
/// ring counter: the member at the other end of a cut link would then be removed as if it had
/// stopped.
const BEATS_IN_FLIGHT_MAX: u8 = 4;

/// See the module docs.
pub struct NodeCore<F: Fabric> {
    fabric: F,
    config: MembershipConfig,
    boards: BoardLayout,
    consensus: VelosLayout,
    me: u16,
    board: F::Region,
    endpoint: F::Endpoint,
    links: Links,
    view: Option<View>,
    member: Option<Member>,
    want: Want,
    /// A lease duration asked for and not yet in the latest view.
    lease_wanted: Option<u64>,
    /// The member this node asked to be named primary, until a view names it (or drops it).
    primary_wanted: Option<u16>,
    /// Unique ids of views decided before this incarnation first asked to join are not its.
    joined_after_epoch: Option<u64>,
    next_request_ns: u64,
    leader_hint: usize,
    /// Requests and report frames sent since the last sign of a leader at work (a new view,
    /// an answer): a stopped leader's memory still takes them, and no one answers.
    unanswered: u32,
    /// A view was learnt in this poll: no check begins on it before the next poll, whose clock
    /// reading is taken after this poll read the view.
    learnt_this_poll: bool,
    outboxes: Vec<Outbox>,
    answers: Vec<Inbox>,
    renewal: Renewal,
    /// A cache's answers to members, and a member's view of the caches' answers.
    cache_outboxes: Vec<Outbox>,
    cache_inboxes: Vec<Inbox>,
    /// Requests in this node's inbox, looked at on a cache.
    inboxes: Vec<Inbox>,
    /// A coordinator whose board holds a newer view than ours, to read it from.
    pull_from: Option<usize>,
    pulling: bool,
    /// Added to the coordinator a pull reads from, after pulls that brought nothing newer.
    pull_rotation: usize,
    published: Arc<PublishedLease>,
    heartbeat: u64,
    /// The failure detectors, while this node is a member.
    detectors: Option<Detectors>,
    /// Per node id, the beats posted to it and not completed ([`BEATS_IN_FLIGHT_MAX`]).
    beats_in_flight: Vec<u8>,
    report_payload: Vec<u8>,
    completions: Vec<Completion>,
    scratch: Vec<u8>,
    events: Vec<NodeEvent>,
}

impl<F: Fabric> NodeCore<F> {
    /// A member: registers this node's board on `fabric` and joins. `incarnation` is this
    /// process's random number (it tells a repeated join request from a restarted node's).
    /// Through caches when the configuration has some.
    pub fn new(
        fabric: F,
        config: MembershipConfig,
        lease: LeaseConfig,
        incarnation: u64,
    ) -> Result<NodeCore<F>, String> {
        let consensus = consensus_layout(&config)?;
        let renewal = if config.caches.is_empty() {
            let keeper = LeaseKeeper::new(lease, Durations::FromViews);
            let keeper = keeper.map_err(|e| e.to_string())?;
            Renewal::by_checks(keeper, config.coordinators.len(), consensus.slots_count())
        } else {
            let first = usize::from(fabric.node().0) % config.caches.len();
            let client =
                CacheClient::new(&cache_config(&config, lease), config.caches.len(), first);
            let timeout_ns = config.repeat_ns.max(4 * config.lease_ns);
            Renewal::through_caches(client.map_err(|e| e.to_string())?, timeout_ns)
        };
        NodeCore::build(fabric, config, renewal, incarnation, Want::Member)
    }

    /// A lease cache (§6.3): its node must be one of the configuration's caches. It never
    /// joins; it leases the latest view from the coordinators for ∆ and answers members.
    pub fn new_cache(
        fabric: F,
        config: MembershipConfig,
        lease: LeaseConfig,
        incarnation: u64,
    ) -> Result<NodeCore<F>, String> {
        let me = fabric.node().0;
        if !config.caches.contains(&me) {
            return Err(format!("node {me} is not one of the caches {:?}", config.caches));
        }
        let consensus = consensus_layout(&config)?;
        let durations = Durations::Fixed { lease_ns: config.cache_lease_ns };
        let keeper = LeaseKeeper::new(lease, durations).map_err(|e| e.to_string())?;
        let renewal =
            Renewal::by_checks(keeper, config.coordinators.len(), consensus.slots_count());
        NodeCore::build(fabric, config, renewal, incarnation, Want::Serve)
    }

    fn build(
        fabric: F,
        config: MembershipConfig,
        renewal: Renewal,
        incarnation: u64,
        want: Want,
    ) -> Result<NodeCore<F>, String> {
        config.check().map_err(|e| e.to_string())?;
        let me = fabric.node().0;
        if me >= config.nodes_max {
            return Err(format!("node {me} is not below nodes_max ({})", config.nodes_max));
        }
        let boards = BoardLayout::new(&config);
        let err = |e: FabricError| e.to_string();
        let board = fabric.register_region(BOARD_REGION, boards.board_bytes(), Access::ALL);
        let board = board.map_err(err)?;
        board.store_u64(INCARNATION_OFFSET as usize, incarnation).map_err(err)?;
        board.store_u64(FINGERPRINT_OFFSET as usize, config.fingerprint()).map_err(err)?;
        let endpoint = fabric.endpoint(1024).map_err(err)?;
        let peers = (0..config.nodes_max).filter(|&n| n != me).map(NodeId).collect();
        let links =
            Links::new(NodeId(me), peers, board_channel, Access::READ_WRITE, config.reconnect_ns);
        let cluster = config.cluster;
        let mailboxes = |nodes: &[u16]| nodes.iter().map(|&n| Inbox::new(cluster, n)).collect();
        Ok(NodeCore {
            consensus: consensus_layout(&config)?,
            outboxes: config
                .coordinators
                .iter()
                .map(|_| Outbox::new(cluster, me, incarnation))
                .collect(),
            answers: mailboxes(&config.coordinators),
            cache_outboxes: (0..config.nodes_max)
                .map(|_| Outbox::new(cluster, me, incarnation))
                .collect(),
            cache_inboxes: mailboxes(&config.caches),
            inboxes: (0..config.nodes_max).map(|n| Inbox::new(cluster, n)).collect(),
            view: None,
            member: None,
            want,
            lease_wanted: None,
            primary_wanted: None,
            joined_after_epoch: None,
            next_request_ns: 0,
            leader_hint: 0,
            unanswered: 0,
            learnt_this_poll: false,
            renewal,
            pull_from: None,
            pulling: false,
            pull_rotation: 0,
            published: Arc::new(PublishedLease::default()),
            heartbeat: 0,
            detectors: None,
            beats_in_flight: vec![0; usize::from(config.nodes_max)],
            report_payload: Vec::new(),
            completions: vec![Completion::EMPTY; 64],
            scratch: vec![0; VIEW_BYTES as usize],
            events: Vec::new(),
            fabric,
            boards,
            me,
            board,
            endpoint,
            links,
            config,
        })
    }

    /// This node's fabric id.
    pub fn node(&self) -> u16 {
        self.me
    }

    /// The lease application threads read.
    pub fn published(&self) -> Arc<PublishedLease> {
        self.published.clone()
    }

    /// The latest view this node learnt.
    pub fn view(&self) -> Option<&View> {
        self.view.as_ref()
    }

    /// This node as a member of the latest view, if it is one.
    pub fn member(&self) -> Option<Member> {
        self.member
    }

    /// Asks the coordinators for views with leases of `lease_ns` (§6.3 adaptive leases): the
    /// request goes out until a view carries that lease.
    pub fn ask_lease(&mut self, lease_ns: u64) {
        self.lease_wanted = Some(lease_ns);
        self.next_request_ns = 0;
    }

    /// Asks the coordinators to name `node` the application's primary in this node's place:
    /// the request goes out while the views name this node, and `node` is a member.
    pub fn ask_primary(&mut self, node: u16) {
        self.primary_wanted = Some(node);
        self.next_request_ns = 0;
    }

    /// Asks to leave: leave requests go out until a view excludes this node.
    pub fn leave(&mut self) {
        self.want = Want::Out;
        self.next_request_ns = 0;
    }

    /// A one-line account of the core's state, for status output and failed tests.
    pub fn describe(&self) -> String {
        let links: Vec<u16> = (0..self.links.peers().len())
            .filter(|&i| self.links.is_up(i))
            .map(|i| self.links.peers()[i].0)
            .collect();
        format!(
            "node {} view {:?} member {:?} lease {:?} renewal {} pull {:?}/{} leader hint {} links up {links:?}",
            self.me,
            self.view.as_ref().map(|v| v.epoch),
            self.member,
            self.published.load(),
            self.renewal.describe(),
            self.pull_from,
            self.pulling,
            self.leader_hint,
        )
    }

    /// What happened since the last call.
    pub fn drain_events(&mut self) -> std::vec::Drain<'_, NodeEvent> {
        self.events.drain(..)
    }

    /// One round of work at `now_ns` (a reading of the clock application threads compare
    /// leases with).
    pub fn poll(&mut self, now_ns: u64) {
        self.learnt_this_poll = false;
        self.heartbeat = match &mut self.detectors {
            Some(d) => d.heartbeat(),
            None => self.heartbeat + 1,
        };
        let _ = self.board.store_u64(HEARTBEAT_OFFSET as usize, self.heartbeat);
        self.take_completions(now_ns);
        self.read_own_board(now_ns);
        self.take_answers();
        self.request(now_ns);
        self.renew(now_ns);
        self.serve(now_ns);
        self.pull(now_ns);
        self.detect(now_ns);
        // Last: setting a link up may wait on the network (on ofi, up to the fabric's call
        // wait per connection, milliseconds for a few peers), which would leave the rest of
        // the poll with a clock reading that old. A view read after such a wait was learnt
        // "at" a time before it was decided, and its first lease began too early: Active of
        // two views overlapped by milliseconds on ofi (`crates/cli/tests/ukharon_ofi_netns.rs`).
        // No first lease counts from this poll's reading any more (`renew`), and timeouts
        // should not either.
        for i in self.links.upkeep(&self.fabric, &mut self.endpoint, now_ns) {
            // A link set up again: what was posted on the old one is gone, completed or not.
            let node = usize::from(self.links.peers()[i].0);
            self.beats_in_flight[node] = 0;
        }
    }

    /// A lease or primary this member asked for and the latest view does not have yet.
    fn change_wanted(&mut self) -> Option<Request> {
        let view = self.view.as_ref()?;
        // A member asks for another primary in its own place: once a view names another one
        // (whoever), or no longer has the one asked for, it stops asking (members passing the
        // role on in turn would otherwise fight over it).
        if let Some(p) = self.primary_wanted {
            if view.primary != Some(self.me) || view.uid_of(p).is_none() {
                self.primary_wanted = None;
            }
        }
        match (self.lease_wanted, self.primary_wanted) {
            (Some(lease_ns), _) if view.lease_ns != lease_ns => Some(Request::Lease { lease_ns }),
            (_, Some(node)) => Some(Request::Primary { node }),
            _ => None,
        }
    }

    fn post(&mut self, peer: u16, wr: &WorkRequest<'_>, now_ns: u64) -> bool {
        let Some(i) = self.links.index_of(NodeId(peer)) else { return false };
        if !self.links.is_up(i) {
            return false;
        }
        let ok = self.endpoint.post(self.links.conn(NodeId(peer)), wr).is_ok();
        if !ok {
            self.links.down(i, now_ns);
        }
        ok
    }
}

impl<F: Fabric> NodeCore<F> {
    fn take_completions(&mut self, now_ns: u64) {
        loop {
            let n = self.endpoint.poll(&mut self.completions);
            if n == 0 {
                return;
            }
            for i in 0..n {
                self.completion(self.completions[i], now_ns);
            }
        }
    }

    fn completion(&mut self, c: Completion, now_ns: u64) {
        let position = (c.wr_id & 0xFFFF) as usize;
        let failed = !c.status.is_success();
        if failed {
            let peer = match c.wr_id & KIND_MASK {
                SLOT_READ | VIEW_READ => self.config.coordinators[position],
                // A beat that did not land: the beat detector at the other end notices.
                _ => position as u16,
            };
            if let Some(i) = self.links.index_of(NodeId(peer)) {
                self.links.down(i, now_ns);
            }
        }
        match c.wr_id & KIND_MASK {
            SLOT_READ => {
                // A read of an earlier check (abandoned, or finished by a majority before it
                // completed) says nothing about this one: it began before this check's
                // timestamp. Counting it made a slow node extend a lease on a view already
                // superseded (found by the simulation with a slow link): `Renewal` counts a
                // read only for the check of its serial.
                let serial = (c.wr_id >> 16) & 0xFFFF;
                self.slot_read(serial, position, failed, now_ns);
            }
            VIEW_READ => {
                self.pulling = false;
                let before = self.view.as_ref().map(|v| v.epoch);
                if !failed {
                    self.read_pulled_view(now_ns);
                }
                if self.view.as_ref().map(|v| v.epoch) == before {
                    // That coordinator's board lags (it missed a broadcast while its link was
                    // down): the next pull reads the next coordinator's.
                    self.pull_rotation += 1;
                }
            }
            BEAT_WRITE => {
                if let Some(n) = self.beats_in_flight.get_mut(position) {
                    *n = n.saturating_sub(1);
                }
            }
            RING_READ => {
                let offset = self.boards.ring_read_offset() as usize;
                let value = (!failed).then(|| self.board.load_u64(offset).unwrap_or(0));
                if let Some(d) = &mut self.detectors {
                    d.on_ring_read(value, now_ns);
                }
            }
            _ => {}
        }
    }

    /// A coordinator's slot word for the checked view's next index arrived (or its read failed).
    fn slot_read(&mut self, serial: u64, position: usize, failed: bool, now_ns: u64) {
        let offset = self.boards.slot_read_offset(position) as usize;
        let word = (!failed).then(|| self.board.load_u64(offset).unwrap_or(0));
        let outcome = self.renewal.on_slot_word(serial, position, word, now_ns);
        self.apply(outcome);
    }

    fn apply(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Publish(p) => self.published.store(Lease {
                epoch: p.epoch,
                start_ns: p.start_ns,
                end_ns: p.end_ns,
            }),
            Outcome::Newer { coordinator } => self.pull_from = Some(coordinator),
            Outcome::Pending | Outcome::Done => {}
        }
    }

    /// The view the coordinator leader wrote to this node's board.
    fn read_own_board(&mut self, now_ns: u64) {
        let at = VIEW_OFFSET as usize + 16; // the epoch word of a view's bytes
        let epoch = self.board.load_u64(at).unwrap_or(0);
        let known = self.view.as_ref().map(|v| v.epoch);
        if known.is_some_and(|k| epoch <= k) {
            return;
        }
        if self.board.read(VIEW_OFFSET as usize, &mut self.scratch).is_ok() {
            self.decode_and_learn(now_ns);
        }
    }

    fn read_pulled_view(&mut self, now_ns: u64) {
        let at = self.boards.view_read_offset() as usize;
        if self.board.read(at, &mut self.scratch).is_ok() {
            self.decode_and_learn(now_ns);
        }
    }

    fn decode_and_learn(&mut self, now_ns: u64) {
        match View::decode(&self.scratch) {
            Ok(view) if view.cluster == self.config.cluster => self.learn(view, now_ns),
            Ok(view) => self.events.push(NodeEvent::BadView(format!(
                "a view of cluster {:#x}, this is {:#x}",
                view.cluster, self.config.cluster
            ))),
            // Torn (being written) or not written yet: read again at the next poll.
            Err(_) => {}
        }
    }

    /// A decided view, newer than the latest known.
    fn learn(&mut self, view: View, now_ns: u64) {
        if let Some(latest) = &self.view {
            if view.epoch <= latest.epoch {
                return;
            }
            if view.epoch == latest.epoch + 1 && !view.follows(latest) {
                let why = format!("view {} does not follow view {}", view.epoch, latest.epoch);
                return self.events.push(NodeEvent::BadView(why));
            }
        }
        let mine = view.uid_of(self.me).map(|uid| Member { node: self.me, uid });
        let mine = mine.filter(|m| self.is_this_incarnation(m.uid));
        match (self.member, mine) {
            (None, Some(m)) if self.want == Want::Member => {
                self.member = Some(m);
                self.detectors = Some(Detectors::new(&self.config, m, &view, now_ns));
                self.events.push(NodeEvent::Joined(m));
            }
            (Some(old), m) if m != Some(old) => {
                self.member = None;
                self.detectors = None;
                self.events.push(NodeEvent::Out { epoch: view.epoch });
            }
            _ => {
                if let Some(d) = &mut self.detectors {
                    d.on_view(&view, now_ns);
                }
            }
        }
        self.renewal.on_view(&view);
        self.learnt_this_poll = true;
        self.unanswered = 0;
        self.events.push(NodeEvent::View(view.clone()));
        self.view = Some(view);
    }

    /// Whether unique id `uid` was given to this incarnation's join (module `changes`: the id
    /// names the epoch of the view that admitted the node).
    fn is_this_incarnation(&self, uid: u64) -> bool {
        let admitted_by = (uid >> 16).saturating_sub(1);
        self.joined_after_epoch.is_some_and(|e| admitted_by > e)
    }

    fn take_answers(&mut self) {
        for p in 0..self.answers.len() {
            let offset = self.boards.answer_offset(p) as usize;
            let seq = self.board.load_u64(offset + mailbox::SEQ_OFFSET).unwrap_or(0);
            let incarnation =
                self.board.load_u64(offset + mailbox::INCARNATION_OFFSET).unwrap_or(0);
            if !self.answers[p].is_new(seq, incarnation) {
                continue;
            }
            let mut frame = vec![0u8; crate::layout::MAILBOX_BYTES as usize];
            if self.board.read(offset, &mut frame).is_err() {
                continue;
            }
            let answer = match self.answers[p].take(&frame) {
                Ok(Some(f)) => Answer::from_frame(&f),
                _ => None,
            };
            self.unanswered = 0;
            match answer {
                Some(Answer::NotLeader { leader: Some(l) }) => {
                    if let Some(pos) = self.config.position(l) {
                        self.leader_hint = pos;
                        self.next_request_ns = 0;
                    }
                }
                Some(Answer::NotLeader { leader: None }) | None => {}
                Some(refusal) => self.events.push(NodeEvent::Refused(refusal)),
            }
        }
    }
}

impl<F: Fabric> NodeCore<F> {
    /// Sends the pending request again when it is due: a join until a view admits this
    /// incarnation, a leave until a view excludes it. A join waits until some view is known
    /// (pulled from a coordinator), so that the ids of earlier incarnations are told apart.
    fn request(&mut self, now_ns: u64) {
        let request = match (self.want, self.member) {
            (Want::Member, None) => {
                let Some(view) = &self.view else {
                    self.pull_from.get_or_insert(self.leader_hint);
                    return;
                };
                self.joined_after_epoch.get_or_insert(view.epoch);
                Request::Join { incarnation: self.incarnation() }
            }
            (Want::Out, Some(member)) => Request::Leave { member },
            (Want::Serve, _) => {
                if self.view.is_none() {
                    self.pull_from.get_or_insert(self.leader_hint);
                }
                return;
            }
            (Want::Member, Some(_)) => match self.change_wanted() {
                Some(request) => request,
                None => return,
            },
            _ => return,
        };
        if now_ns < self.next_request_ns {
            return;
        }
        self.next_request_ns = now_ns + self.config.repeat_ns;
        let position = self.leader();
        let frame = self.outboxes[position].next(request.kind(), &request.payload()).to_vec();
        let remote = RemoteAddr { region: BOARD_REGION, offset: self.boards.inbox_offset(self.me) };
        let leader = self.config.coordinators[position];
        let wr =
            WorkRequest::write(REQUEST_WRITE | u64::from(leader), Source::Inline(&frame), remote);
        if !self.post(leader, &wr.unsignaled(), now_ns) {
            // That coordinator is out of reach: ask the next one, which redirects if need be.
            self.leader_hint = (position + 1) % self.config.coordinators.len();
        }
    }

    fn incarnation(&self) -> u64 {
        self.board.load_u64(INCARNATION_OFFSET as usize).unwrap_or(0)
    }

    /// Renews the lease on the latest view when it is due (Algorithm 2 line 10): the timestamp
    /// first, then a read of every coordinator's slot word for the next index, or a request to
    /// a cache.
    ///
    /// Not in the poll that learnt the view: `now_ns` was read before the poll began, maybe
    /// before the view was decided (the thread preempted in between, or a slow connect), and a
    /// first lease counted from it would end its wait early (Algorithm 2 line 7 needs the
    /// timestamp taken after the view was learnt). The next poll's reading is.
    fn renew(&mut self, now_ns: u64) {
        if self.learnt_this_poll {
            return;
        }
        let Some(view) = &self.view else { return };
        let view = view.clone();
        match self.renewal.due(&view, now_ns) {
            None => {}
            Some(Step::ReadSlots { index, serial }) => self.read_slots(index, serial, now_ns),
            Some(Step::AskCache { cache, id, epoch }) => {
                let payload = cache_payload(id, Some(epoch));
                let frame = self.cache_outboxes[usize::from(self.me)].next(Kind::Renew, &payload);
                let frame = frame.to_vec();
                let node = self.config.caches[cache];
                let remote =
                    RemoteAddr { region: BOARD_REGION, offset: self.boards.inbox_offset(self.me) };
                let wr = WorkRequest::write(
                    CACHE_WRITE | u64::from(node),
                    Source::Inline(&frame),
                    remote,
                );
                if !self.post(node, &wr.unsignaled(), now_ns) {
                    let outcome = self.renewal.on_cache_answer(id, None, now_ns);
                    self.apply(outcome);
                }
            }
        }
    }

    fn read_slots(&mut self, index: u64, serial: u64, now_ns: u64) {
        let remote_offset = self.consensus.word_offset(index);
        for p in 0..self.config.coordinators.len() {
            let offset = self.boards.slot_read_offset(p);
            let local = LocalSlice { region: BOARD_REGION, offset, len: 8 };
            let remote = RemoteAddr { region: CONSENSUS_REGION, offset: remote_offset };
            let wr = WorkRequest::read(SLOT_READ | serial << 16 | p as u64, local, remote);
            let coordinator = self.config.coordinators[p];
            if !self.post(coordinator, &wr, now_ns) {
                self.slot_read(serial, p, true, now_ns);
            }
        }
    }

    /// Reads the view on a coordinator's board, when a check found a newer one there (or no
    /// view is known yet).
    fn pull(&mut self, now_ns: u64) {
        if self.pulling {
            return;
        }
        let Some(asked) = self.pull_from.take() else { return };
        let p = (asked + self.pull_rotation) % self.config.coordinators.len();
        let wr = self.boards.view_read(VIEW_READ | p as u64);
        let coordinator = self.config.coordinators[p];
        self.pulling = self.post(coordinator, &wr, now_ns);
        if !self.pulling {
            self.pull_rotation += 1; // out of reach: the next one
            self.pull_from = Some(asked);
        }
    }
}

impl<F: Fabric> NodeCore<F> {
    /// The failure detectors' reads, writes and reports (§4.2).
    fn detect(&mut self, now_ns: u64) {
        let (Some(detectors), Some(view)) = (&mut self.detectors, &self.view) else { return };
        let me = self.me;
        let mut beats = Vec::new();
        for m in view.members.iter().filter(|m| m.node != me) {
            let offset = self.boards.beat_offset(m.node) as usize;
            beats.push((m.node, self.board.load_u64(offset).unwrap_or(0)));
        }
        for (node, value) in beats {
            detectors.on_beat(node, value, now_ns);
        }
        for m in detectors.watched() {
            if self.fabric.crash_notified(NodeId(m.node)) {
                detectors.on_death(m, now_ns);
            }
        }
        let ring = detectors.ring_read_due(now_ns);
        let beat = detectors.beat_due(now_ns);
        let reports = detectors.reports_due(now_ns, &mut self.report_payload);
        let members: Vec<u16> = view.nodes().filter(|&n| n != me).collect();
        if let Some(target) = ring {
            self.read_heartbeat(target.node, now_ns);
        }
        if let Some(value) = beat {
            let remote = RemoteAddr { region: BOARD_REGION, offset: self.boards.beat_offset(me) };
            let bytes = value.to_le_bytes();
            for node in members {
                let in_flight = self.beats_in_flight[usize::from(node)];
                if in_flight >= BEATS_IN_FLIGHT_MAX {
                    continue;
                }
                let wr = WorkRequest::write(
                    BEAT_WRITE | u64::from(node),
                    Source::Inline(&bytes),
                    remote,
                );
                if self.post(node, &wr, now_ns) {
                    self.beats_in_flight[usize::from(node)] = in_flight + 1;
                }
            }
        }
        if reports {
            self.send_reports(now_ns);
        }
    }

    fn read_heartbeat(&mut self, node: u16, now_ns: u64) {
        let local =
            LocalSlice { region: BOARD_REGION, offset: self.boards.ring_read_offset(), len: 8 };
        let remote = RemoteAddr { region: BOARD_REGION, offset: HEARTBEAT_OFFSET };
        let wr = WorkRequest::read(RING_READ | u64::from(node), local, remote);
        let up = self.links.index_of(NodeId(node)).is_some_and(|i| self.links.is_up(i));
        if !up {
            // A successor that just joined may not be connected yet: reading nothing is not
            // reading the same value twice (it was reported at once, and removed, before).
            if let Some(d) = &mut self.detectors {
                d.ring_read_not_posted(now_ns);
            }
            return;
        }
        if !self.post(node, &wr, now_ns) {
            if let Some(d) = &mut self.detectors {
                d.on_ring_read(None, now_ns);
            }
        }
    }

    /// Writes the due reports into this node's mailbox at the coordinator it believes leads.
    fn send_reports(&mut self, now_ns: u64) {
        let position = self.leader();
        let frame = self.outboxes[position].next(Kind::Report, &self.report_payload);
        // Ten reports do not fit inline: the frame is written from the board's send area (a
        // later frame put there before this one landed tears it; the checksum refuses it and
        // the reports are repeated).
        let send = self.boards.send_offset();
        if self.board.write(send as usize, frame).is_err() {
            return;
        }
        let len = frame.len() as u32;
        let source = Source::Local(LocalSlice { region: BOARD_REGION, offset: send, len });
        let remote = RemoteAddr { region: BOARD_REGION, offset: self.boards.inbox_offset(self.me) };
        let leader = self.config.coordinators[position];
        let wr = WorkRequest::write(REQUEST_WRITE | u64::from(leader), source, remote);
        if !self.post(leader, &wr.unsignaled(), now_ns) {
            // Out of reach: the reports go to the next coordinator, which redirects if need be.
            self.leader_hint = (position + 1) % self.config.coordinators.len();
        }
    }

    /// The coordinator this node believes leads: its hint, moved past coordinators whose death
    /// the fabric reported (their successor leads, §5.3.1), and past one that let
    /// [`UNANSWERED_MAX`] frames go without a sign of work (stopped, or no longer leading and
    /// not answering).
    fn leader(&mut self) -> usize {
        let n = self.config.coordinators.len();
        self.unanswered += 1;
        if self.unanswered > UNANSWERED_MAX {
            self.unanswered = 0;
            self.leader_hint = (self.leader_hint + 1) % n;
        }
        for _ in 0..n {
            let node = NodeId(self.config.coordinators[self.leader_hint]);
            if !self.fabric.crash_notified(node) {
                break;
            }
            self.leader_hint = (self.leader_hint + 1) % n;
        }
        self.leader_hint
    }
}

/// The 16 bytes of a request to a cache and of its answer: the request's id, and the epoch
/// asked about or answered (all ones: no answer).
fn cache_payload(id: u64, epoch: Option<u64>) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&id.to_le_bytes());
    out[8..].copy_from_slice(&epoch.unwrap_or(u64::MAX).to_le_bytes());
    out
}

fn parse_cache_payload(payload: &[u8]) -> Option<(u64, Option<u64>)> {
    let p: &[u8; 16] = payload.try_into().ok()?;
    let id = u64::from_le_bytes(p[..8].try_into().expect("8"));
    let epoch = u64::from_le_bytes(p[8..].try_into().expect("8"));
    Some((id, (epoch != u64::MAX).then_some(epoch)))
}

/// The lease caches' parameters of a configuration.
fn cache_config(config: &MembershipConfig, lease: LeaseConfig) -> CacheConfig {
    CacheConfig { cache_lease_ns: config.cache_lease_ns, app_lease_ns: config.lease_ns, lease }
}

impl<F: Fabric> NodeCore<F> {
    /// On a cache: answers every new request in the inbox with the view it holds a valid lease
    /// on, if any. On a member: takes the caches' answers.
    fn serve(&mut self, now_ns: u64) {
        if self.want == Want::Serve {
            for from in 0..self.config.nodes_max {
                let Some(payload) = self.new_frame(self.boards.inbox_offset(from), from) else {
                    continue;
                };
                let Some((id, _)) = parse_cache_payload(&payload) else { continue };
                let answer = cache_payload(id, self.renewal.answer(now_ns));
                let frame =
                    self.cache_outboxes[usize::from(from)].next(Kind::Renew, &answer).to_vec();
                let offset = self.boards.cache_answer_offset();
                let remote = RemoteAddr { region: BOARD_REGION, offset };
                let wr = WorkRequest::write(
                    CACHE_WRITE | u64::from(from),
                    Source::Inline(&frame),
                    remote,
                );
                self.post(from, &wr.unsignaled(), now_ns);
            }
        } else if !self.config.caches.is_empty() {
            let offset = self.boards.cache_answer_offset();
            let mut header = [0u8; 26];
            if self.board.read(offset as usize, &mut header).is_err() {
                return;
            }
            let from = u16::from_le_bytes([header[24], header[25]]);
            let Some(payload) = self.new_frame(offset, from) else { return };
            if let Some((id, epoch)) = parse_cache_payload(&payload) {
                let outcome = self.renewal.on_cache_answer(id, epoch, now_ns);
                self.apply(outcome);
            }
        }
    }

    /// The payload of a new frame in the mailbox at `offset` from `from`, if there is one
    /// (mailboxes of caches' answers keep one inbox per cache).
    fn new_frame(&mut self, offset: u64, from: u16) -> Option<Vec<u8>> {
        let inbox = if offset == self.boards.cache_answer_offset() {
            let i = self.config.caches.iter().position(|&c| c == from)?;
            &mut self.cache_inboxes[i]
        } else {
            &mut self.inboxes[usize::from(from)]
        };
        let seq = self.board.load_u64(offset as usize + mailbox::SEQ_OFFSET).unwrap_or(0);
        let incarnation =
            self.board.load_u64(offset as usize + mailbox::INCARNATION_OFFSET).unwrap_or(0);
        if !inbox.is_new(seq, incarnation) {
            return None;
        }
        let mut frame = vec![0u8; crate::layout::MAILBOX_BYTES as usize];
        self.board.read(offset as usize, &mut frame).ok()?;
        match inbox.take(&frame) {
            Ok(Some(f)) if f.kind == Kind::Renew => Some(f.payload.to_vec()),
            _ => None,
        }
    }
}
