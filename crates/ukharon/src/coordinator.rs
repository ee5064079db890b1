//! The coordinators' consensus on views (§5, Appendix A): Velos's proposer (Algorithm 5:
//! predicted states, prepare and accept as one CAS per acceptor, the view written to the
//! proposer's own value log before the accept CAS on the same FIFO connection, one slot
//! prepared ahead, a new leader's one-round re-preparation from predictions), driven for views.
//!
//! Why a driver of its own rather than a Velos replica group: a replica group writes idle and
//! rejoin entries into the next index, and anything accepted at index `k + 1` makes
//! `Active(view k)` false. Here index `k` holds view `k` and nothing else: a leader submits
//! view `k + 1` only once view `k` is decided, and a view is never decided at an index other
//! than its epoch — when another leader's view wins the index this one was submitted for, the
//! submission is withdrawn, or, if it was already written somewhere, the proposer is started
//! again one index further on, which drops it (an index where it was written is decided with
//! another value and never offered again).
//!
//! Leader election (§5.3.1): the coordinator with the lowest position among those the runtime
//! says are alive leads. Several may believe they lead (a partial partition): safety holds
//! (Paxos), and a leader whose proposer stopped backs off for a random time before it starts
//! again, so that dueling leaders end.
//!
//! A coordinator restarted without its memory ([`restart::Memory::Forgotten`]) neither leads nor lets
//! anyone into its memory until [`Coordinator::rejoin`] gave it words that abstain wherever it
//! may have answered before (`crate::restart`).

use crate::changes::{Change, Changes, Refusal};
use crate::restart::{self, RejoinError};
use crate::view::{View, ViewError, MEMBERS_MAX};
use mu_log::{EntryKind, Integrity, LogLayout, Slot};
use mu_velos::{Action, Event, Memory, Proposer, ProposerConfig, StopReason, VelosLayout};

/// Setup of one coordinator.
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    /// This coordinator's position (0 to `layout.positions() - 1`); lower positions lead first.
    pub me: usize,
    /// The consensus region of every coordinator ([`CoordinatorConfig::layout_for`]).
    pub layout: VelosLayout,
    /// Indices prepared ahead of the one being accepted (§5.3.1: one).
    pub prepare_ahead: usize,
    /// The cluster's first view (epoch 0), the same on every coordinator.
    pub initial: View,
    /// A leader whose proposer stopped waits a random time below this before it leads again.
    pub backoff_max_ns: u64,
    /// Every view with members names a primary ([`crate::changes::Changes::new`]).
    pub name_primary: bool,
}

impl CoordinatorConfig {
    /// A region for `coordinators` coordinators with `slots_count` slot words (a view's index
    /// is its epoch modulo `slots_count`), each value slot large enough for a view of
    /// [`MEMBERS_MAX`] members.
    pub fn layout_for(coordinators: usize, slots_count: u64) -> Result<VelosLayout, String> {
        let entry = mu_log::ENTRY_HEADER_BYTES + View::encoded_len_of(MEMBERS_MAX);
        let slot_bytes = (entry + mu_log::TRAILER_BYTES).next_multiple_of(64) as u32;
        let log = LogLayout::new(slots_count, slot_bytes, Integrity::Checksum)
            .map_err(|e| format!("consensus log: {e}"))?;
        VelosLayout::new(log, coordinators)
    }
}

/// What the runtime is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// A view was decided; they come in epoch order, each once. The runtime writes it to
    /// every member, to the nodes it admitted and to those it removed (§3.1: coordinators
    /// broadcast decided views).
    Decided(View),
    /// A change was refused; the runtime tells its requester.
    Refused { change: Change, why: Refusal },
    /// The change was sent to a coordinator that does not lead; the requester asks the leader.
    NotLeader { change: Change },
    /// A value decided at `index` is not a well-formed view that follows the latest one:
    /// corrupted memory or a faulty coordinator. This coordinator stops leading.
    BadDecision { index: u64, why: String },
    /// The proposer stopped (a later index was already in use, or proposal numbers ran out);
    /// this coordinator backs off before it leads again.
    Stopped(StopReason),
}

/// See the module docs.
pub struct Coordinator {
    config: CoordinatorConfig,
    proposer: Proposer,
    /// The latest decided view this coordinator knows, and its bytes.
    latest: Option<View>,
    latest_bytes: Vec<u8>,
    /// The view right before the latest, when this coordinator knows it.
    previous: Option<View>,
    changes: Changes,
    /// The epoch of the view submitted and not decided yet.
    proposed: Option<u64>,
    alive: u64,
    leading: bool,
    backoff_until_ns: u64,
    outputs: Vec<Output>,
    events: Vec<Event>,
    value: Vec<u8>,
    slot: Vec<u8>,
    /// A deliberately broken variant for tests ([`Coordinator::break_keeping_lost_views`]).
    keeps_lost_views: bool,
    /// Restarted without its memory and not rejoined yet: it neither leads nor answers.
    rejoining: bool,
    /// Once rejoined: the first index it answers in (modulo `slots_count * LAPS`).
    fresh_from: Option<u64>,
    /// A deliberately broken variant for tests ([`Coordinator::break_forgetting_on_restart`]).
    forgets: bool,
    /// Per position: the first index a coordinator that rejoined answers in, as its runtime
    /// read it ([`Coordinator::set_answers_from`]).
    peers_answer_from: Vec<Option<u64>>,
}

/// The leader among the coordinators `alive` says are alive (a mask of positions): the lowest.
pub fn leader(alive: u64) -> Option<usize> {
    (alive != 0).then(|| alive.trailing_zeros() as usize)
}

impl Coordinator {
    /// A coordinator whose memory is as its earlier run left it, or that never ran.
    pub fn new(config: CoordinatorConfig) -> Result<Coordinator, String> {
        Coordinator::with_memory(config, restart::Memory::Remembered)
    }

    /// A coordinator that starts with `memory`: one that lost it waits for
    /// [`Coordinator::rejoin`] before it takes part (`crate::restart`).
    pub fn with_memory(
        config: CoordinatorConfig,
        memory: restart::Memory,
    ) -> Result<Coordinator, String> {
        let n = config.layout.positions();
        config.initial.check().map_err(|e| format!("initial view: {e}"))?;
        if config.initial.epoch != 0 {
            return Err(format!("the initial view has epoch {}, not 0", config.initial.epoch));
        }
        let needed = View::encoded_len_of(MEMBERS_MAX);
        if config.layout.max_value_bytes() < needed {
            return Err(format!(
                "value slots hold {} bytes, a view needs up to {needed}",
                config.layout.max_value_bytes()
            ));
        }
        if memory == restart::Memory::Forgotten && n - 1 < restart::words_needed(n) {
            return Err(format!(
                "{n} coordinator(s): one that lost its memory has no others to rejoin from"
            ));
        }
        let all = if n == 64 { u64::MAX } else { (1 << n) - 1 };
        let proposer = Proposer::new(ProposerConfig {
            me: config.me,
            layout: config.layout,
            members: all,
            prepare_ahead: config.prepare_ahead,
        })?;
        let slot_bytes = config.layout.slot_bytes() as usize;
        Ok(Coordinator {
            proposer,
            latest: None,
            latest_bytes: Vec::new(),
            previous: None,
            changes: Changes::new(config.name_primary),
            proposed: None,
            alive: all,
            leading: false,
            backoff_until_ns: 0,
            outputs: Vec::new(),
            events: Vec::new(),
            value: Vec::with_capacity(needed),
            slot: vec![0; slot_bytes],
            keeps_lost_views: false,
            rejoining: memory == restart::Memory::Forgotten,
            fresh_from: None,
            forgets: false,
            peers_answer_from: vec![None; n],
            config,
        })
    }

    /// Whether this coordinator restarted without its memory and has not rejoined yet: its
    /// runtime keeps every connection into its consensus region closed, and reads the slot
    /// words of [`restart::words_needed`] other coordinators for [`Coordinator::rejoin`].
    pub fn is_rejoining(&self) -> bool {
        self.rejoining
    }

    /// Once rejoined after a restart without its memory: the first index this coordinator
    /// answers in, modulo `slots_count * LAPS` ([`Coordinator::rejoin`]).
    pub fn answers_from(&self) -> Option<u64> {
        self.fresh_from
    }

    /// Coordinator `position` rejoined after a restart without its memory and answers from
    /// index `answers_from` on (modulo `slots_count * LAPS`; its runtime publishes it). While
    /// an alive one still abstains in the next index, a leader with nothing to change decides
    /// views that change nothing (compatible successors: nodes move their leases to them
    /// without waiting), so that the cluster is soon past the indices it abstains in and
    /// tolerates another failure again.
    pub fn set_answers_from(&mut self, position: usize, answers_from: u64) {
        if let Some(slot) = self.peers_answer_from.get_mut(position) {
            *slot = Some(answers_from);
        }
    }

    /// A view that changes nothing, when an alive coordinator abstains in the next index
    /// ([`Coordinator::set_answers_from`]), this one included: a restarted coordinator that
    /// leads may have missed views decided while it rejoined, and one that submits nothing
    /// never adopts them from the index it prepared.
    fn rejoin_view(&self, latest: &View) -> Option<View> {
        let next = latest.epoch + 1;
        let slots = self.config.layout.slots_count();
        let own = self.fresh_from.is_some_and(|b| restart::is_before(next, b, slots));
        let abstains = own
            || self.peers_answer_from.iter().enumerate().any(|(p, from)| {
                let alive = self.alive >> p & 1 == 1;
                alive && from.is_some_and(|b| restart::is_before(next, b, slots))
            });
        abstains.then(|| latest.successor(latest.members.clone(), latest.primary, latest.lease_ns))
    }

    /// Rejoins from the slot words (one per slot, all of them) of other coordinators, read
    /// after this one restarted: writes into its own region words that abstain in every index
    /// it may have taken part in before (`crate::restart`). The runtime opens the connections
    /// into its consensus region only after this returned `Ok`. Returns the first index it
    /// answers in (modulo `slots_count * LAPS`).
    pub fn rejoin(
        &mut self,
        words: &[(usize, &[u64])],
        mem: &mut dyn Memory,
    ) -> Result<u64, RejoinError> {
        if !self.rejoining {
            return Err(RejoinError::NotRejoining);
        }
        let n = self.config.layout.positions();
        let slots = self.config.layout.slots_count();
        let needed = restart::words_needed(n);
        if words.len() < needed {
            return Err(RejoinError::TooFew { got: words.len(), needed });
        }
        for (i, &(position, peer)) in words.iter().enumerate() {
            let twice = words[..i].iter().any(|&(p, _)| p == position);
            if position >= n || position == self.config.me || twice {
                return Err(RejoinError::BadPosition { position, count: n });
            }
            if peer.len() as u64 != slots {
                return Err(RejoinError::WrongLength {
                    position,
                    got: peer.len(),
                    expected: slots,
                });
            }
        }
        let fresh =
            restart::fresh_from(words.iter().map(|&(_, w)| w), slots, self.config.prepare_ahead);
        if !self.forgets {
            for (slot, word) in restart::markers(fresh, slots).enumerate() {
                mem.write(self.config.layout.word_offset(slot as u64), &word.to_le_bytes());
            }
        }
        self.rejoining = false;
        self.fresh_from = Some(fresh);
        Ok(fresh)
    }

    /// Breaks this coordinator on purpose, for tests that show their checks catch it: a
    /// rejoin that writes no abstaining words, so that it answers at once with zero words as if
    /// it had never taken part.
    #[doc(hidden)]
    pub fn break_forgetting_on_restart(&mut self) {
        self.forgets = true;
    }

    /// The latest decided view this coordinator knows.
    pub fn latest(&self) -> Option<&View> {
        self.latest.as_ref()
    }

    /// The view right before the latest, when this coordinator knows it (its members are
    /// told of the latest view too, so that a removed node learns it is out).
    pub fn previous(&self) -> Option<&View> {
        self.previous.as_ref()
    }

    pub fn is_leading(&self) -> bool {
        self.leading
    }

    /// A one-line account of the engine's state, for status output and failed tests.
    pub fn describe(&self) -> String {
        let memory = match (self.rejoining, self.fresh_from) {
            (true, _) => "restarted without its memory: rejoining, takes no part yet; ".to_string(),
            (false, Some(b)) => {
                let next = self.latest.as_ref().map_or(0, |v| v.epoch + 1);
                if restart::is_before(next, b, self.config.layout.slots_count()) {
                    format!(
                        "restarted without its memory: abstains below index {b} (mod laps), the \
                         next one among them; "
                    )
                } else {
                    format!("restarted without its memory: answers again from index {b}; ")
                }
            }
            (false, None) => String::new(),
        };
        format!(
            "{memory}leading {} (proposer {}), latest {:?}, proposed {:?}, alive {:#x}, back-off \
             until {} ns, next index {}, phase {:?}, down {:#x}",
            self.leading,
            self.proposer.is_leading(),
            self.latest.as_ref().map(|v| v.epoch),
            self.proposed,
            self.alive,
            self.backoff_until_ns,
            self.proposer.next_index(),
            self.proposer.phase(),
            self.proposer.down()
        )
    }

    /// The coordinators the runtime believes alive (a mask of positions, from the failure
    /// detectors): the lowest leads.
    pub fn set_alive(&mut self, alive: u64) {
        self.alive = alive;
    }

    /// A decided view learnt from another coordinator's broadcast (a follower's way to keep
    /// up; a leader learns from its own decisions, and one that learns a newer view this way
    /// is stale: it starts leading again from that view). Views not newer than the latest
    /// known, or that do not follow it when they come right after it, are ignored.
    pub fn learned(&mut self, view: View) {
        if view.cluster != self.config.initial.cluster || view.check().is_err() {
            return;
        }
        if let Some(latest) = &self.latest {
            let next = view.epoch == latest.epoch + 1;
            if view.epoch <= latest.epoch || (next && !view.follows(latest)) {
                return;
            }
        }
        if self.leading {
            // Another leader decided views this one does not know: it was stopped, or cut
            // off, while the others went on. Its proposer holds indices prepared long ago
            // and its changes rest on an old view; it starts again from the newer view.
            self.step_down();
        }
        self.adopt_latest(view);
    }

    /// A change for the next view. Only the leader takes changes.
    pub fn request(&mut self, change: Change) {
        if !self.leading {
            return self.outputs.push(Output::NotLeader { change });
        }
        let latest = self.latest.as_ref().unwrap_or(&self.config.initial);
        if let Err(why) = self.changes.add(change.clone(), latest) {
            self.outputs.push(Output::Refused { change, why });
        }
    }

    /// Moves on: starts or stops leading as the election says, submits the next view when
    /// the latest is decided and something changes, and polls the proposer.
    /// `random` is a fresh random number from the runtime (for the back-off).
    pub fn poll(&mut self, now_ns: u64, random: u64, mem: &mut dyn Memory) {
        let elected = leader(self.alive) == Some(self.config.me) && !self.rejoining;
        if self.leading && !elected {
            self.step_down();
        } else if !self.leading && elected && now_ns >= self.backoff_until_ns {
            self.start(mem);
        }
        if !self.leading {
            return;
        }
        if self.proposed.is_none() {
            self.submit_next();
        }
        self.proposer.poll(mem);
        self.take_events(now_ns, random, mem);
    }

    fn start(&mut self, mem: &mut dyn Memory) {
        let first = self.latest.as_ref().map_or(0, |v| v.epoch + 1);
        let last = self.latest.as_ref().map(|_| (EntryKind::Membership, &self.latest_bytes[..]));
        self.proposer.set_applied_floor(first);
        self.proposer.start(first, last, mem);
        self.leading = true;
        self.proposed = None;
    }

    fn step_down(&mut self) {
        self.proposer.stop();
        self.leading = false;
        self.proposed = None;
        self.changes = self.changes.cleared();
    }

    fn submit_next(&mut self) {
        let next = match &self.latest {
            None => Some(self.config.initial.clone()),
            Some(latest) => self.changes.next_view(latest).or_else(|| self.rejoin_view(latest)),
        };
        let Some(view) = next else { return };
        self.value.clear();
        view.encode(&mut self.value);
        match self.proposer.submit(EntryKind::Membership, &self.value) {
            Ok(()) => self.proposed = Some(view.epoch),
            Err(e) => unreachable!("submitting a view while leading and idle: {e:?}"),
        }
    }

    /// A CAS completed.
    pub fn on_cas(&mut self, op: u64, old: u64, now_ns: u64, random: u64, mem: &mut dyn Memory) {
        self.proposer.on_cas(op, old);
        self.take_events(now_ns, random, mem);
    }

    /// A read of a value to adopt completed.
    pub fn on_read(&mut self, op: u64, now_ns: u64, random: u64, mem: &mut dyn Memory) {
        self.proposer.on_read(op, mem);
        self.take_events(now_ns, random, mem);
    }

    /// A CAS or read failed (its connection broke).
    pub fn on_error(&mut self, op: u64) {
        self.proposer.on_error(op);
    }

    /// A write to `peer` failed (its connection broke).
    pub fn on_write_error(&mut self, peer: usize) {
        self.proposer.on_write_error(peer);
    }

    /// The connection to `peer` was set up again.
    pub fn reconnected(&mut self, peer: usize) {
        self.proposer.reconnected(peer);
    }

    /// Remote operations to post, oldest first (into `into`, which must be empty).
    pub fn take_actions(&mut self, into: &mut Vec<Action>) {
        self.proposer.take_actions(into);
    }

    /// What happened since the last call, oldest first.
    pub fn drain_outputs(&mut self) -> std::vec::Drain<'_, Output> {
        self.outputs.drain(..)
    }

    fn take_events(&mut self, now_ns: u64, random: u64, mem: &mut dyn Memory) {
        let mut events = std::mem::take(&mut self.events);
        self.proposer.take_events(&mut events);
        for event in events.drain(..) {
            match event {
                Event::Decided { index, submitted } => self.decided(index, submitted, mem),
                Event::Stopped(reason) => {
                    self.outputs.push(Output::Stopped(reason));
                    self.leading = false;
                    self.proposed = None;
                    self.back_off(now_ns, random);
                }
                Event::MalformedWord { .. } => {}
            }
        }
        self.events = events;
    }

    fn back_off(&mut self, now_ns: u64, random: u64) {
        let wait_ns = random % self.config.backoff_max_ns.max(1);
        self.backoff_until_ns = now_ns.saturating_add(wait_ns);
    }

    /// Index `index` is decided; its value is in this coordinator's own value log.
    fn decided(&mut self, index: u64, submitted: bool, mem: &mut dyn Memory) {
        let layout = self.config.layout;
        mem.read(layout.value_slot_offset(self.config.me, index), &mut self.slot);
        let view = match layout.log().decode(index, &self.slot) {
            Slot::Entry(e) if e.kind == EntryKind::Membership => {
                View::decode(e.value).map_err(|e: ViewError| e.to_string())
            }
            _ => Err("no view entry in the value log".to_string()),
        };
        let view = view.and_then(|v| self.check_decided(index, v));
        let view = match view {
            Ok(v) => v,
            Err(why) => {
                // Never broadcast, never built on: this coordinator leads no more (its operator
                // sees the output); the others go on without it.
                self.outputs.push(Output::BadDecision { index, why });
                self.step_down();
                self.backoff_until_ns = u64::MAX;
                return;
            }
        };
        self.proposer.set_applied_floor(index + 1);
        let ours = self.proposed == Some(index);
        assert!(
            !submitted || ours,
            "view {index} decided as submitted, but {:?} was",
            self.proposed
        );
        self.proposed = None;
        self.adopt_latest(view);
        // Past a rejoined coordinator's bound, its record is dropped (an old bound would read
        // as ahead again after half the laps went round).
        let slots = self.config.layout.slots_count();
        for from in &mut self.peers_answer_from {
            if from.is_some_and(|b| !restart::is_before(index + 1, b, slots)) {
                *from = None;
            }
        }
        self.outputs.push(Output::Decided(self.latest.clone().expect("just set")));
        if self.keeps_lost_views {
            if !submitted && self.proposer.has_pending() {
                self.proposed = Some(index + 1);
            }
            return;
        }
        if !submitted && self.proposer.has_pending() && !self.proposer.withdraw() {
            // Our view was written for an index another view won: start one index further on,
            // which drops it (module docs).
            let (first, last) = (index + 1, (EntryKind::Membership, &self.latest_bytes[..]));
            self.proposer.stop();
            self.proposer.start(first, Some(last), mem);
        }
    }

    /// Breaks this coordinator on purpose, for tests that show their checks catch it: a view
    /// that lost its index is kept and offered at the next one, where it does not follow.
    #[doc(hidden)]
    pub fn break_keeping_lost_views(&mut self) {
        self.keeps_lost_views = true;
    }

    /// What every decided value must be: a view of this cluster for its index, following the
    /// latest known when it comes right after it.
    fn check_decided(&self, index: u64, view: View) -> Result<View, String> {
        if view.cluster != self.config.initial.cluster {
            return Err(format!("a view of cluster {:#x}", view.cluster));
        }
        if view.epoch != index {
            return Err(format!("a view of epoch {} at index {index}", view.epoch));
        }
        match &self.latest {
            Some(latest) if latest.epoch + 1 == index && !view.follows(latest) => {
                Err(format!("view {index} does not follow view {}", latest.epoch))
            }
            None if index == 0 && view != self.config.initial => {
                Err("view 0 is not this coordinator's initial view".to_string())
            }
            _ => Ok(view),
        }
    }

    fn adopt_latest(&mut self, view: View) {
        self.changes.settle(&view);
        self.latest_bytes.clear();
        view.encode(&mut self.latest_bytes);
        let before = self.latest.replace(view);
        let epoch = self.latest.as_ref().map(|v| v.epoch);
        self.previous = before.filter(|b| Some(b.epoch + 1) == epoch);
    }
}
