//! A coordinator on a fabric: the consensus engine (`mu_ukharon::coordinator`) with its
//! connections to the other coordinators, the requests nodes write into its inbox, and the
//! decided views it writes to every node's board (§3.1: coordinators broadcast decided views).
//! No threads and no clock: [`CoordinatorDriver::poll`] is called with the time by a thread or
//! by the simulator.
//!
//! A coordinator started without its memory ([`Memory::Forgotten`]: its host rebooted, or its
//! run directory is new) rejoins first (`mu_ukharon::restart`): every connection peers
//! initiate into it grants nothing, so that no proposer and no node's check reads or swaps its
//! zeroed words; it does not beat, so that no one elects it; it reads the slot words of
//! `n - n/2` other coordinators (and the view on their boards) over its own connections,
//! writes its abstaining words, and only then sets its connections up again with their usual
//! rights and beats.

use crate::config::MembershipConfig;
use crate::detectors::decode_reports;
use crate::layout::{
    board_channel, consensus_channel, consensus_layout, BoardLayout, BOARD_REGION,
    CONSENSUS_REGION, FINGERPRINT_OFFSET, HEARTBEAT_OFFSET, INCARNATION_OFFSET, MAILBOX_BYTES,
    VIEW_BYTES, VIEW_OFFSET,
};
use crate::links::Links;
use crate::memory::RegionMemory;
use crate::peer_watch::PeerWatch;
use mu_fabric::{
    Access, Completion, Endpoint, Fabric, FabricError, LocalRegion, LocalSlice, NodeId, OpKind,
    RemoteAddr, Source, WorkRequest,
};
use mu_ukharon::changes::{Change, Refusal};
use mu_ukharon::coordinator::{leader, Coordinator, CoordinatorConfig, Output};
use mu_ukharon::detect::graph::{Connectivity, Decision, GraphConfig};
use mu_ukharon::detect::Report;
use mu_ukharon::mailbox::{self, Answer, Inbox, Kind, Outbox, Request};
use mu_ukharon::restart::{self, Memory};
use mu_ukharon::view::{Member, View};
use mu_velos::Action;

/// What a coordinator's driver saw, for its runtime to log and for tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordinatorEvent {
    Decided(View),
    /// As the leader, it asks for a view of the largest clique with it in its connectivity
    /// graph, for these reasons (once per different set of members).
    Clique(Decision),
    /// A peer coordinator's board holds another configuration's fingerprint: no consensus
    /// with it (a configuration file edited on one machine only).
    ConfigMismatch {
        peer: u16,
    },
    BadDecision {
        index: u64,
        why: String,
    },
    /// A frame in the inbox of `from` could not be taken (torn frames are not reported).
    BadFrame {
        from: u16,
        why: String,
    },
    /// Restarted without its memory, this coordinator rejoined: it answers from the index
    /// `answers_from` on (modulo `slots_count * 2048`), and abstains below it.
    Rejoined {
        answers_from: u64,
    },
}

/// Work request ids: the proposer's own (below 2^62), its value writes, and the driver's.
const PROPOSER_WRITE: u64 = 1 << 62;
const DRIVER: u64 = 1 << 63;
const VIEW_WRITE: u64 = DRIVER | 1 << 32;
const ANSWER_WRITE: u64 = DRIVER | 2 << 32;
const FINGERPRINT_READ: u64 = DRIVER | 3 << 32;
const BEAT_READ: u64 = DRIVER | 4 << 32;
const PROBE_READ: u64 = DRIVER | 5 << 32;
const WORDS_READ: u64 = DRIVER | 6 << 32;
const REJOIN_VIEW_READ: u64 = DRIVER | 7 << 32;
const REJOINED_WRITE: u64 = DRIVER | 8 << 32;
const KIND_MASK: u64 = DRIVER | 0xFF << 32;

/// See the module docs.
pub struct CoordinatorDriver<F: Fabric> {
    fabric: F,
    config: MembershipConfig,
    boards: BoardLayout,
    position: usize,
    engine: Coordinator,
    board: F::Region,
    consensus: F::Region,
    endpoint: F::Endpoint,
    /// Board connections to every other node id; consensus ones to the other coordinators.
    board_links: Links,
    consensus_links: Links,
    inboxes: Vec<Inbox>,
    answers: Vec<Outbox>,
    /// Coordinator positions whose board showed our fingerprint, and those that did not.
    verified: u64,
    mismatched: u64,
    completions: Vec<Completion>,
    actions: Vec<Action>,
    frame: Vec<u8>,
    view_bytes: Vec<u8>,
    rng: u64,
    events: Vec<CoordinatorEvent>,
    /// The leader's connectivity graph of the latest view (§4.2, catastrophic failures).
    graph: Option<Connectivity>,
    /// The members of the last clique asked for in this view (told once as an event).
    last_clique: Vec<Member>,
    /// Each coordinator's heartbeat as this one reads it ([`crate::peer_watch`]), this
    /// coordinator's own, and who is alive as of this poll.
    watches: Vec<PeerWatch>,
    heartbeat: u64,
    alive_mask: u64,
    /// When the boards of the nodes are next probed.
    probe_due_ns: u64,
    /// While rejoining: the coordinator positions whose slot words were read, and those with a
    /// read in flight.
    words_read: u64,
    words_posted: u64,
    /// While rejoining: the read of a peer's view is in flight, or completed.
    view_posted: bool,
    view_done: bool,
}

impl<F: Fabric> CoordinatorDriver<F> {
    /// Registers the board and the consensus region on `fabric`, whose node must be one of
    /// the configured coordinators. `initial` is the cluster's first view. Its memory is the
    /// one its earlier run left, or it never ran ([`Memory::Remembered`]).
    pub fn new(
        fabric: F,
        config: MembershipConfig,
        initial: View,
        seed: u64,
    ) -> Result<CoordinatorDriver<F>, String> {
        CoordinatorDriver::with_memory(fabric, config, initial, seed, Memory::Remembered)
    }

    /// [`CoordinatorDriver::new`] for a coordinator that starts with `memory`. One whose
    /// consensus region was lost must start [`Memory::Forgotten`]; that is safe for one whose
    /// region survived too (it then abstains a little longer than needed), but not when every
    /// coordinator starts so (each waits to read the others): a cluster's first start is
    /// [`Memory::Remembered`] everywhere.
    pub fn with_memory(
        fabric: F,
        config: MembershipConfig,
        initial: View,
        seed: u64,
        memory: Memory,
    ) -> Result<CoordinatorDriver<F>, String> {
        config.check().map_err(|e| e.to_string())?;
        let me = fabric.node().0;
        let position =
            config.position(me).ok_or(format!("node {me} is not one of the coordinators"))?;
        let consensus_layout = consensus_layout(&config)?;
        let engine = Coordinator::with_memory(
            CoordinatorConfig {
                me: position,
                layout: consensus_layout,
                prepare_ahead: 1,
                initial,
                backoff_max_ns: config.backoff_max_ns,
                name_primary: config.name_primary,
            },
            memory,
        )?;
        let rejoining = engine.is_rejoining();
        let boards = BoardLayout::new(&config);
        let err = |e: FabricError| e.to_string();
        let board = fabric.register_region(BOARD_REGION, boards.board_bytes(), Access::ALL);
        let board = board.map_err(err)?;
        board.store_u64(FINGERPRINT_OFFSET as usize, config.fingerprint()).map_err(err)?;
        let consensus =
            fabric.register_region(CONSENSUS_REGION, consensus_layout.region_bytes(), Access::ALL);
        let consensus = consensus.map_err(err)?;
        let endpoint = fabric.endpoint(4096).map_err(err)?;
        let others = |nodes: &mut dyn Iterator<Item = u16>| -> Vec<NodeId> {
            nodes.filter(|&n| n != me).map(NodeId).collect()
        };
        // While rejoining, peers get no rights through the connections they initiate.
        let grant = |access: Access| if rejoining { Access::NONE } else { access };
        let board_links = Links::new(
            NodeId(me),
            others(&mut (0..config.nodes_max)),
            board_channel,
            grant(Access::READ_WRITE),
            config.reconnect_ns,
        );
        let consensus_links = Links::new(
            NodeId(me),
            others(&mut config.coordinators.iter().copied()),
            consensus_channel,
            grant(Access::ALL),
            config.reconnect_ns,
        );
        let cluster = config.cluster;
        Ok(CoordinatorDriver {
            inboxes: (0..config.nodes_max).map(|n| Inbox::new(cluster, n)).collect(),
            answers: (0..config.nodes_max).map(|_| Outbox::new(cluster, me, seed)).collect(),
            verified: 1 << position,
            mismatched: 0,
            completions: vec![Completion::EMPTY; 64],
            actions: Vec::new(),
            frame: vec![0; MAILBOX_BYTES as usize],
            view_bytes: Vec::new(),
            rng: seed | 1,
            events: Vec::new(),
            graph: None,
            last_clique: Vec::new(),
            watches: Vec::new(),
            heartbeat: 0,
            alive_mask: 1 << position,
            probe_due_ns: 0,
            words_read: 0,
            words_posted: 0,
            view_posted: false,
            view_done: false,
            fabric,
            boards,
            position,
            engine,
            board,
            consensus,
            endpoint,
            board_links,
            consensus_links,
            config,
        })
    }

    /// The latest decided view this coordinator knows.
    pub fn latest(&self) -> Option<&View> {
        self.engine.latest()
    }

    pub fn is_leading(&self) -> bool {
        self.engine.is_leading()
    }

    /// A one-line account of the driver's state, for status output and failed tests.
    pub fn describe(&self) -> String {
        let l = &self.consensus_links;
        let up: Vec<u16> =
            (0..l.peers().len()).filter(|&i| l.is_up(i)).map(|i| l.peers()[i].0).collect();
        let rejoin = if self.engine.is_rejoining() {
            let needed = restart::words_needed(self.config.coordinators.len());
            format!("; slot words read from {} of the {needed} peers needed", {
                self.words_read.count_ones()
            })
        } else {
            String::new()
        };
        format!(
            "{}; consensus links up {up:?}; alive {:#x}{rejoin}",
            self.engine.describe(),
            self.alive_mask
        )
    }

    /// What happened since the last call.
    pub fn drain_events(&mut self) -> std::vec::Drain<'_, CoordinatorEvent> {
        self.events.drain(..)
    }

    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Whether this coordinator restarted without its memory and has not rejoined yet.
    pub fn is_rejoining(&self) -> bool {
        self.engine.is_rejoining()
    }

    /// Whether it is still short of taking part after a restart without its memory: rejoining,
    /// or still abstaining in the index after the latest view it knows. Until then, losing
    /// another coordinator may leave no majority anywhere (`mu_ukharon::restart`: one at a
    /// time).
    pub fn still_abstains(&self) -> bool {
        if self.is_rejoining() {
            return true;
        }
        let next = self.latest().map_or(0, |v| v.epoch + 1);
        let slots_count = self.config.slots_count;
        self.answers_from().is_some_and(|b| restart::is_before(next, b, slots_count))
    }

    /// Once rejoined after a restart without its memory: the first index it answers in
    /// (modulo `slots_count * 2048`).
    pub fn answers_from(&self) -> Option<u64> {
        self.engine.answers_from()
    }

    /// Breaks this coordinator on purpose, for the simulator's check that it catches it
    /// ([`Coordinator::break_forgetting_on_restart`]): restarted without its memory, it rejoins
    /// without abstaining. Call before the first poll.
    #[doc(hidden)]
    pub fn break_forgetting_on_restart(&mut self) {
        self.engine.break_forgetting_on_restart();
    }

    /// One round of work at `now_ns`.
    pub fn poll(&mut self, now_ns: u64) {
        if !self.engine.is_rejoining() {
            // A rejoining coordinator does not beat: no one elects it.
            self.heartbeat += 1;
            let _ = self.board.store_u64(HEARTBEAT_OFFSET as usize, self.heartbeat);
        }
        if self.watches.is_empty() {
            // Watching starts at the first poll: every peer has a timeout to show itself.
            self.watches = vec![PeerWatch::new(now_ns); self.config.coordinators.len()];
        }
        self.upkeep(now_ns);
        self.take_completions(now_ns);
        self.rejoin(now_ns);
        self.take_rejoined();
        self.watch_peers(now_ns);
        self.probe_boards(now_ns);
        self.alive_mask = self.alive_now(now_ns);
        self.learn_from_board();
        self.take_requests(now_ns);
        self.engine.set_alive(self.alive());
        let random = self.random();
        self.engine.poll(now_ns, random, &mut RegionMemory(&self.consensus));
        self.post_actions(now_ns);
        self.take_outputs(now_ns);
    }

    /// The coordinators this one believes alive, as of this poll.
    fn alive(&self) -> u64 {
        self.alive_mask
    }

    /// Itself, and the coordinators whose board showed our configuration, of whose crash the
    /// fabric has not told, and whose heartbeat moved within the beat timeout.
    fn alive_now(&self, now_ns: u64) -> u64 {
        let mut alive = 1 << self.position;
        for (p, &node) in self.config.coordinators.iter().enumerate() {
            let ok = self.verified >> p & 1 == 1 && self.mismatched >> p & 1 == 0;
            let silent = self.watches[p].silent(now_ns, self.config.beat_timeout_ns);
            if p != self.position && ok && !silent && !self.fabric.crash_notified(NodeId(node)) {
                alive |= 1 << p;
            }
        }
        alive
    }

    /// Reads a word of the board of every node but the coordinators once a beat period, where
    /// the connection is up. A node that restarted while this coordinator was stopped is bound
    /// here to its dead process, and everything it initiates into this node is dropped; only a
    /// failed operation from this side tells (followers post nothing to members otherwise),
    /// and the link is then set up again, bound to the running process. Not only members: a
    /// restarted node is no member until its join, which it sends into this node.
    fn probe_boards(&mut self, now_ns: u64) {
        if now_ns < self.probe_due_ns {
            return;
        }
        self.probe_due_ns = now_ns.saturating_add(self.config.beat_period_ns);
        let links = &self.board_links;
        let nodes: Vec<u16> = (0..links.peers().len())
            .filter(|&i| links.is_up(i))
            .map(|i| links.peers()[i].0)
            .filter(|n| !self.config.coordinators.contains(n))
            .collect();
        let offset = self.boards.ring_read_offset(); // a word no coordinator reads otherwise
        for node in nodes {
            let local = LocalSlice { region: BOARD_REGION, offset, len: 8 };
            let remote = RemoteAddr { region: BOARD_REGION, offset: INCARNATION_OFFSET };
            let wr = WorkRequest::read(PROBE_READ | u64::from(node), local, remote);
            self.post_board(node, &wr, now_ns);
        }
    }

    /// Reads the peer coordinators' heartbeats when due.
    fn watch_peers(&mut self, now_ns: u64) {
        for p in 0..self.config.coordinators.len() {
            if p == self.position || !self.watches[p].read_due(now_ns) {
                continue;
            }
            let peer = self.config.coordinators[p];
            let offset = self.boards.peer_beat_read_offset(p);
            let local = LocalSlice { region: BOARD_REGION, offset, len: 8 };
            let remote = RemoteAddr { region: BOARD_REGION, offset: HEARTBEAT_OFFSET };
            let wr = WorkRequest::read(BEAT_READ | p as u64, local, remote);
            if !self.post_board(peer, &wr, now_ns) {
                self.watches[p].on_read(None, now_ns, self.config.ring_read_gap_ns);
            }
        }
    }

    fn upkeep(&mut self, now_ns: u64) {
        for i in self.consensus_links.upkeep(&self.fabric, &mut self.endpoint, now_ns) {
            let peer = self.consensus_links.peers()[i].0;
            let p = self.config.position(peer).expect("consensus links go to coordinators");
            self.engine.reconnected(p);
        }
        for i in self.board_links.upkeep(&self.fabric, &mut self.endpoint, now_ns) {
            let peer = self.board_links.peers()[i].0;
            if let Some(p) = self.config.position(peer) {
                self.read_fingerprint(peer, p, now_ns);
                self.write_rejoined(peer, now_ns);
            }
        }
    }

    fn read_fingerprint(&mut self, peer: u16, position: usize, now_ns: u64) {
        let local = LocalSlice {
            region: BOARD_REGION,
            offset: self.boards.fingerprint_read_offset(position),
            len: 8,
        };
        let remote = RemoteAddr { region: BOARD_REGION, offset: FINGERPRINT_OFFSET };
        let wr = WorkRequest::read(FINGERPRINT_READ | position as u64, local, remote);
        self.post_board(peer, &wr, now_ns);
    }

    /// Posts on the board connection to `peer`; a post that fails marks it down. Whether it
    /// was posted.
    fn post_board(&mut self, peer: u16, wr: &WorkRequest<'_>, now_ns: u64) -> bool {
        let Some(i) = self.board_links.index_of(NodeId(peer)) else { return false };
        if !self.board_links.is_up(i) {
            return false;
        }
        let conn = self.board_links.conn(NodeId(peer));
        let posted = self.endpoint.post(conn, wr).is_ok();
        if !posted {
            self.board_links.down(i, now_ns);
        }
        posted
    }
}

impl<F: Fabric> CoordinatorDriver<F> {
    fn take_completions(&mut self, now_ns: u64) {
        loop {
            let n = self.endpoint.poll(&mut self.completions);
            if n == 0 {
                return;
            }
            for i in 0..n {
                let c = self.completions[i];
                if c.wr_id & DRIVER != 0 {
                    self.driver_completion(c, now_ns);
                } else {
                    self.proposer_completion(c, now_ns);
                }
            }
        }
    }

    fn proposer_completion(&mut self, c: Completion, now_ns: u64) {
        let mem = &mut RegionMemory(&self.consensus);
        if c.wr_id & PROPOSER_WRITE != 0 {
            // Value writes are unsignaled: this one failed.
            let p = (c.wr_id & 0xFF) as usize;
            self.consensus_down(p, now_ns);
            return self.engine.on_write_error(p);
        }
        let random = self.rng;
        match (c.status.is_success(), c.kind) {
            (true, OpKind::CompareSwap) => {
                self.engine.on_cas(c.wr_id, c.value, now_ns, random, mem)
            }
            (true, _) => self.engine.on_read(c.wr_id, now_ns, random, mem),
            (false, _) => {
                let p = (c.wr_id & 63) as usize; // the proposer's op ids end with the peer
                self.consensus_down(p, now_ns);
                self.engine.on_error(c.wr_id);
            }
        }
    }

    fn consensus_down(&mut self, position: usize, now_ns: u64) {
        let peer = NodeId(self.config.coordinators[position]);
        if let Some(i) = self.consensus_links.index_of(peer) {
            self.consensus_links.down(i, now_ns);
        }
    }

    fn driver_completion(&mut self, c: Completion, now_ns: u64) {
        let low = (c.wr_id & 0xFFFF_FFFF) as usize;
        if matches!(c.wr_id & KIND_MASK, WORDS_READ | REJOIN_VIEW_READ) {
            return self.rejoin_completion(c, low, now_ns);
        }
        if c.wr_id & KIND_MASK == BEAT_READ {
            let offset = self.boards.peer_beat_read_offset(low) as usize;
            let value = c.status.is_success().then(|| self.board.load_u64(offset).unwrap_or(0));
            self.watches[low].on_read(value, now_ns, self.config.ring_read_gap_ns);
        }
        if !c.status.is_success() {
            let peer = match c.wr_id & KIND_MASK {
                FINGERPRINT_READ | BEAT_READ => self.config.coordinators[low],
                _ => low as u16,
            };
            if let Some(i) = self.board_links.index_of(NodeId(peer)) {
                self.board_links.down(i, now_ns);
            }
            return;
        }
        if c.wr_id & KIND_MASK == FINGERPRINT_READ {
            let offset = self.boards.fingerprint_read_offset(low) as usize;
            let found = self.board.load_u64(offset).unwrap_or(0);
            if found == self.config.fingerprint() {
                self.verified |= 1 << low;
            } else if found != 0 {
                self.mismatched |= 1 << low;
                let peer = self.config.coordinators[low];
                self.events.push(CoordinatorEvent::ConfigMismatch { peer });
            } else {
                // Not set up yet: read again once the board connection is set up again.
                let i = self.board_links.index_of(NodeId(self.config.coordinators[low]));
                self.board_links.down(i.expect("a coordinator's board link"), now_ns);
            }
        }
    }

    /// Requests and reports in the inbox: each node's mailbox is looked at when its sequence
    /// word moved.
    fn take_requests(&mut self, now_ns: u64) {
        for from in 0..self.config.nodes_max {
            let offset = self.boards.inbox_offset(from) as usize;
            let seq = self.board.load_u64(offset + mailbox::SEQ_OFFSET).unwrap_or(0);
            let incarnation =
                self.board.load_u64(offset + mailbox::INCARNATION_OFFSET).unwrap_or(0);
            if !self.inboxes[usize::from(from)].is_new(seq, incarnation) {
                continue;
            }
            if self.board.read(offset, &mut self.frame).is_err() {
                continue;
            }
            let (kind, change, reports) = match self.inboxes[usize::from(from)].take(&self.frame) {
                Ok(Some(frame)) => {
                    (frame.kind, Request::from_frame(&frame), decode_reports(frame.payload))
                }
                Ok(None) | Err(mailbox::FrameError::Torn) => continue,
                Err(e) => {
                    let why = e.to_string();
                    self.events.push(CoordinatorEvent::BadFrame { from, why });
                    continue;
                }
            };
            match (kind, change) {
                (Kind::Report, _) => self.take_reports(from, &reports, now_ns),
                (_, Some(Request::Join { incarnation })) => {
                    self.engine.request(Change::Join { node: from, incarnation })
                }
                (_, Some(Request::Leave { member })) => {
                    self.engine.request(Change::Leave { member })
                }
                (_, Some(Request::Primary { node })) => {
                    self.engine.request(Change::Primary { node })
                }
                _ => {}
            }
        }
        self.decide_from_graph(now_ns);
    }

    /// Failure reports (§4.2) go into the leader's connectivity graph; a coordinator that does
    /// not lead tells the reporter who does.
    fn take_reports(&mut self, from: u16, reports: &[Report], now_ns: u64) {
        let Some(graph) = self.graph.as_mut().filter(|_| self.engine.is_leading()) else {
            let leader = leader(self.alive()).map(|p| self.config.coordinators[p]);
            return self.answer_node(from, Answer::NotLeader { leader }, now_ns);
        };
        for report in reports {
            // Reports about another view, or from or about non-members, are ignored: the
            // reporters repeat theirs once they have the current view.
            let _ = graph.on_report(report, now_ns);
        }
    }

    /// The next view's members when the graph wants a change: the largest clique that contains
    /// this leader (crash and ring reports cut every link of their suspect).
    fn decide_from_graph(&mut self, now_ns: u64) {
        if !self.engine.is_leading() {
            return;
        }
        let Some(decision) = self.graph.as_ref().and_then(|g| g.decide(now_ns)) else {
            return;
        };
        if decision.members != self.last_clique {
            self.last_clique = decision.members.clone();
            self.events.push(CoordinatorEvent::Clique(decision.clone()));
        }
        self.engine.request(Change::KeepOnly { keep: decision.members });
    }

    /// Posts the proposer's operations; one that cannot go out fails as if posted.
    fn post_actions(&mut self, now_ns: u64) {
        let mut actions = std::mem::take(&mut self.actions);
        self.engine.take_actions(&mut actions);
        for a in actions.drain(..) {
            let (p, wr) = consensus_request(a);
            let peer = NodeId(self.config.coordinators[p]);
            let i = self.consensus_links.index_of(peer).expect("actions go to other coordinators");
            let posted = self.consensus_links.is_up(i)
                && self.endpoint.post(self.consensus_links.conn(peer), &wr).is_ok();
            if !posted {
                self.consensus_links.down(i, now_ns);
                match a {
                    Action::Write { peer, .. } => self.engine.on_write_error(peer),
                    Action::Cas { op, .. } | Action::Read { op, .. } => self.engine.on_error(op),
                }
            }
        }
        self.actions = actions;
    }

    fn take_outputs(&mut self, now_ns: u64) {
        let outputs: Vec<Output> = self.engine.drain_outputs().collect();
        for out in outputs {
            match out {
                Output::Decided(view) => self.broadcast(view, now_ns),
                Output::Refused { change, why } => {
                    let answer = match why {
                        Refusal::Full => Answer::Full,
                        Refusal::ReservedNode(_) => Answer::ReservedNode,
                        Refusal::StaleUid { epoch, .. } => Answer::StaleUid { epoch },
                    };
                    self.answer(&change, answer, now_ns);
                }
                Output::NotLeader { change } => {
                    let leader = leader(self.alive()).map(|p| self.config.coordinators[p]);
                    self.answer(&change, Answer::NotLeader { leader }, now_ns);
                }
                Output::BadDecision { index, why } => {
                    self.events.push(CoordinatorEvent::BadDecision { index, why })
                }
                Output::Stopped(_) => {}
            }
        }
    }

    /// Writes a decided view to this node's board, then to the boards of the coordinators, the
    /// lease caches, its members and the members of the view before it (so that a removed
    /// node learns it is out).
    fn broadcast(&mut self, view: View, now_ns: u64) {
        self.view_bytes.clear();
        view.encode(&mut self.view_bytes);
        let len = self.view_bytes.len() as u32;
        if self.board.write(VIEW_OFFSET as usize, &self.view_bytes).is_err() {
            return;
        }
        let mut targets: Vec<u16> = self.config.coordinators.clone();
        targets.extend(&self.config.caches);
        targets.extend(view.nodes());
        if let Some(before) = self.engine.previous() {
            targets.extend(before.nodes());
        }
        targets.sort_unstable();
        targets.dedup();
        let source = Source::Local(LocalSlice { region: BOARD_REGION, offset: VIEW_OFFSET, len });
        let remote = RemoteAddr { region: BOARD_REGION, offset: VIEW_OFFSET };
        for node in targets {
            if node != self.fabric.node().0 {
                let wr = WorkRequest::write(VIEW_WRITE | u64::from(node), source, remote);
                self.post_board(node, &wr.unsignaled(), now_ns);
            }
        }
        self.graph_on_view(&view);
        self.events.push(CoordinatorEvent::Decided(view));
    }

    /// Decided views from this coordinator's board, where the leader writes them: how a
    /// follower keeps up, and how a leader finds it is stale.
    fn learn_from_board(&mut self) {
        let epoch = self.board.load_u64(VIEW_OFFSET as usize + 16).unwrap_or(0);
        if self.engine.latest().is_some_and(|v| v.epoch >= epoch) {
            return;
        }
        self.view_bytes.resize(VIEW_BYTES as usize, 0);
        if self.board.read(VIEW_OFFSET as usize, &mut self.view_bytes).is_err() {
            return;
        }
        // A torn view (being written) is read again at the next poll.
        if let Ok(view) = View::decode(&self.view_bytes) {
            self.engine.learned(view.clone());
            if self.engine.latest() == Some(&view) {
                self.graph_on_view(&view);
            }
        }
    }

    fn graph_on_view(&mut self, view: &View) {
        let me = self.fabric.node().0;
        self.last_clique.clear();
        match &mut self.graph {
            Some(graph) => {
                let _ = graph.on_view(view);
            }
            None => self.graph = Connectivity::new(GraphConfig::default(), view, me).ok(),
        }
    }

    fn answer(&mut self, change: &Change, answer: Answer, now_ns: u64) {
        match *change {
            Change::Join { node, .. } => self.answer_node(node, answer, now_ns),
            Change::Leave { member } | Change::Remove { member } => {
                self.answer_node(member.node, answer, now_ns)
            }
            _ => {}
        }
    }

    fn answer_node(&mut self, node: u16, answer: Answer, now_ns: u64) {
        let frame = self.answers[usize::from(node)].next(Kind::Answer, &answer.payload()).to_vec();
        let remote =
            RemoteAddr { region: BOARD_REGION, offset: self.boards.answer_offset(self.position) };
        let wr = WorkRequest::write(ANSWER_WRITE | u64::from(node), Source::Inline(&frame), remote);
        self.post_board(node, &wr.unsignaled(), now_ns);
    }
}

/// The work request for one of the proposer's operations, and the coordinator position it
/// goes to.
fn consensus_request(a: Action) -> (usize, WorkRequest<'static>) {
    let remote = |offset| RemoteAddr { region: CONSENSUS_REGION, offset };
    match a {
        Action::Write { peer, offset, len } => {
            let source = Source::Local(LocalSlice { region: CONSENSUS_REGION, offset, len });
            let wr = WorkRequest::write(PROPOSER_WRITE | peer as u64, source, remote(offset));
            (peer, wr.unsignaled())
        }
        Action::Cas { peer, offset, expected, desired, op } => {
            (peer, WorkRequest::compare_swap(op, remote(offset), expected, desired))
        }
        Action::Read { peer, remote: at, local, len, op } => {
            let local = LocalSlice { region: CONSENSUS_REGION, offset: local, len };
            (peer, WorkRequest::read(op, local, remote(at)))
        }
    }
}

/// Rejoining after a restart without memory (module docs, `mu_ukharon::restart`).
impl<F: Fabric> CoordinatorDriver<F> {
    /// Where the slot words read from coordinator `position` land: its value log here, which
    /// holds nothing while this coordinator rejoins, and is zeroed again after.
    fn words_landing(&self, position: usize) -> u64 {
        self.engine_layout().values_offset(position)
    }

    fn engine_layout(&self) -> mu_velos::VelosLayout {
        consensus_layout(&self.config).expect("checked when the driver was made")
    }

    /// Posts the reads a rejoin needs, and rejoins once enough words are in.
    fn rejoin(&mut self, now_ns: u64) {
        if !self.engine.is_rejoining() {
            return;
        }
        let n = self.config.coordinators.len();
        if (self.words_read.count_ones() as usize) >= restart::words_needed(n) && self.view_done {
            return self.finish_rejoin(now_ns);
        }
        let layout = self.engine_layout();
        let len = (layout.slots_count() * 8) as u32;
        for p in (0..n).filter(|&p| p != self.position) {
            let bit = 1u64 << p;
            if (self.words_read | self.words_posted) & bit != 0 {
                continue;
            }
            let peer = NodeId(self.config.coordinators[p]);
            let Some(i) = self.consensus_links.index_of(peer) else { continue };
            if !self.consensus_links.is_up(i) {
                continue;
            }
            let local = LocalSlice { region: CONSENSUS_REGION, offset: self.words_landing(p), len };
            let remote = RemoteAddr { region: CONSENSUS_REGION, offset: layout.word_offset(0) };
            let wr = WorkRequest::read(WORDS_READ | p as u64, local, remote);
            if self.endpoint.post(self.consensus_links.conn(peer), &wr).is_ok() {
                self.words_posted |= bit;
            } else {
                self.consensus_links.down(i, now_ns);
            }
        }
        if !self.view_posted && self.words_read != 0 {
            // The latest view on a coordinator whose words came in, so that this one does not
            // lead from the first view (a torn or missing view is not read again: the next
            // decided view is broadcast to this one too).
            let p = self.words_read.trailing_zeros() as usize;
            let wr = self.boards.view_read(REJOIN_VIEW_READ | p as u64);
            self.view_posted = self.post_board(self.config.coordinators[p], &wr, now_ns);
        }
    }

    fn rejoin_completion(&mut self, c: Completion, position: usize, now_ns: u64) {
        let bit = 1u64 << position;
        let peer = NodeId(self.config.coordinators[position]);
        if c.wr_id & KIND_MASK == REJOIN_VIEW_READ {
            if !c.status.is_success() {
                self.view_posted = false;
                if let Some(i) = self.board_links.index_of(peer) {
                    self.board_links.down(i, now_ns);
                }
                return;
            }
            self.view_done = true;
            self.view_bytes.resize(VIEW_BYTES as usize, 0);
            let offset = self.boards.view_read_offset() as usize;
            if self.board.read(offset, &mut self.view_bytes).is_ok() {
                if let Ok(view) = View::decode(&self.view_bytes) {
                    self.engine.learned(view);
                }
            }
            return;
        }
        self.words_posted &= !bit;
        if c.status.is_success() {
            self.words_read |= bit;
        } else if let Some(i) = self.consensus_links.index_of(peer) {
            self.consensus_links.down(i, now_ns);
        }
    }

    /// Writes the abstaining words, clears where the words landed, and sets every connection
    /// up again with its usual rights.
    fn finish_rejoin(&mut self, now_ns: u64) {
        let layout = self.engine_layout();
        let slots = layout.slots_count() as usize;
        let read: Vec<(usize, Vec<u64>)> = (0..self.config.coordinators.len())
            .filter(|&p| self.words_read >> p & 1 == 1)
            .map(|p| {
                let mut bytes = vec![0u8; slots * 8];
                let at = self.words_landing(p) as usize;
                // Never guessed: zero words would name no index, and the bound would be short.
                self.consensus.read(at, &mut bytes).expect("the landing lies inside the region");
                let words = bytes
                    .chunks_exact(8)
                    .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")));
                (p, words.collect())
            })
            .collect();
        let words: Vec<(usize, &[u64])> = read.iter().map(|(p, w)| (*p, &w[..])).collect();
        let answers_from = match self.engine.rejoin(&words, &mut RegionMemory(&self.consensus)) {
            Ok(b) => b,
            Err(e) => unreachable!("a rejoin from the words of distinct peers, all slots: {e}"),
        };
        for &(p, _) in &words {
            let _ = self.consensus.write(self.words_landing(p) as usize, &vec![0u8; slots * 8]);
        }
        let me = self.fabric.node();
        let others: Vec<NodeId> =
            (0..self.config.nodes_max).filter(|&n| n != me.0).map(NodeId).collect();
        self.board_links =
            Links::new(me, others, board_channel, Access::READ_WRITE, self.config.reconnect_ns);
        let coordinators: Vec<NodeId> =
            self.config.coordinators.iter().copied().filter(|&n| n != me.0).map(NodeId).collect();
        self.consensus_links =
            Links::new(me, coordinators, consensus_channel, Access::ALL, self.config.reconnect_ns);
        self.upkeep(now_ns);
        self.events.push(CoordinatorEvent::Rejoined { answers_from });
    }

    /// Tells coordinator `peer` (when the board connection to it comes up) where this one
    /// answers from, while it still abstains in the index after its latest view: its leader
    /// then decides views that change nothing until it is past it. Nothing is posted by a
    /// coordinator that never restarted without its memory.
    fn write_rejoined(&mut self, peer: u16, now_ns: u64) {
        let Some(b) = self.engine.answers_from() else { return };
        let next = self.engine.latest().map_or(0, |v| v.epoch + 1);
        if !restart::is_before(next, b, self.config.slots_count) {
            return;
        }
        let value = (b + 1).to_le_bytes();
        let offset = self.boards.rejoined_offset(self.position);
        let remote = RemoteAddr { region: BOARD_REGION, offset };
        let wr =
            WorkRequest::write(REJOINED_WRITE | u64::from(peer), Source::Inline(&value), remote);
        self.post_board(peer, &wr.unsignaled(), now_ns);
    }

    /// What rejoined peers wrote into this board ([`Self::write_rejoined`]), for the engine;
    /// a bound this coordinator's latest view is past is cleared (an old bound would read as
    /// ahead again after half the laps went round).
    fn take_rejoined(&mut self) {
        let next = self.engine.latest().map_or(0, |v| v.epoch + 1);
        for p in (0..self.config.coordinators.len()).filter(|&p| p != self.position) {
            let offset = self.boards.rejoined_offset(p) as usize;
            let Some(b) = self.board.load_u64(offset).unwrap_or(0).checked_sub(1) else {
                continue;
            };
            if restart::is_before(next, b, self.config.slots_count) {
                self.engine.set_answers_from(p, b);
            } else {
                let _ = self.board.store_u64(offset, 0);
            }
        }
    }
}
