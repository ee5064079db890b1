//! The world's state and its event queue, and the [`SimWorld`] handle that drives them.
//!
//! Everything lives in one [`World`] behind a mutex, so that the fabric handles can be `Send +
//! Sync` as the API asks; the world is meant to be driven from one thread, which is what makes a
//! run deterministic. All collections iterate in key order (`BTreeMap`), never in hash order.

use crate::config::{FaultConfig, LinkDelay, SimConfig};
use crate::node::{CompletionQueue, Node};
use crate::pending::PendingOp;
use crate::rng::SimRng;
use crate::trace::{Trace, TraceEvent, TraceKind};
use mu_fabric::NodeId;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub(crate) type Shared = Arc<Mutex<World>>;

/// Locks the world. A panic while it was held (a failing test) does not poison it for good: the
/// world's invariants are restored before any call returns, so the state is still usable.
pub(crate) fn lock(shared: &Shared) -> MutexGuard<'_, World> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Something scheduled to happen at a virtual time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Event {
    /// The next chunk of an operation lands at its target (or the operation fails there).
    Land(u64),
    /// An operation's completion reaches its initiator.
    Complete(u64),
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Scheduled {
    time_ns: u64,
    /// Ties at one time run in the order they were scheduled.
    seq: u64,
    event: Event,
}

pub(crate) struct World {
    pub(crate) config: SimConfig,
    pub(crate) seed: u64,
    pub(crate) now_ns: u64,
    pub(crate) rng: SimRng,
    queue: BinaryHeap<Reverse<Scheduled>>,
    next_seq: u64,
    events_run: u64,
    pub(crate) nodes: BTreeMap<NodeId, Node>,
    pub(crate) endpoints: BTreeMap<u64, CompletionQueue>,
    pub(crate) next_endpoint_id: u64,
    pub(crate) ops: BTreeMap<u64, PendingOp>,
    pub(crate) next_op_id: u64,
    /// Keyed by the ordered pair (lower id first): links are symmetric.
    pub(crate) links: BTreeMap<(NodeId, NodeId), LinkDelay>,
    pub(crate) partitions: BTreeSet<(NodeId, NodeId)>,
    /// Nodes whose operations may not land until released.
    pub(crate) held: BTreeSet<NodeId>,
    /// Landings that came due while their initiator was held, in the order they came due.
    pub(crate) parked: Vec<u64>,
    pub(crate) trace: Trace,
}

/// The key of the symmetric link between `a` and `b`.
pub(crate) fn link_key(a: NodeId, b: NodeId) -> (NodeId, NodeId) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

impl World {
    fn new(config: SimConfig, seed: u64) -> World {
        let trace = Trace::new(config.trace_capacity);
        World {
            config,
            seed,
            now_ns: 0,
            rng: SimRng::new(seed),
            queue: BinaryHeap::new(),
            next_seq: 0,
            events_run: 0,
            nodes: BTreeMap::new(),
            endpoints: BTreeMap::new(),
            next_endpoint_id: 0,
            ops: BTreeMap::new(),
            next_op_id: 0,
            links: BTreeMap::new(),
            partitions: BTreeSet::new(),
            held: BTreeSet::new(),
            parked: Vec::new(),
            trace,
        }
    }

    /// Schedules `event` at `time_ns`, or now if that is already past.
    pub(crate) fn schedule(&mut self, time_ns: u64, event: Event) {
        let time_ns = time_ns.max(self.now_ns);
        self.next_seq += 1;
        self.queue.push(Reverse(Scheduled { time_ns, seq: self.next_seq, event }));
    }

    /// Records an event at the current time.
    pub(crate) fn note(&mut self, mut event: TraceEvent) {
        event.time_ns = self.now_ns;
        self.trace.record(event);
    }

    fn step(&mut self) -> bool {
        let Some(Reverse(next)) = self.queue.pop() else {
            return false;
        };
        self.now_ns = self.now_ns.max(next.time_ns);
        self.events_run += 1;
        match next.event {
            Event::Land(id) => self.land(id),
            Event::Complete(id) => self.complete(id),
        }
        true
    }

    fn next_event_ns(&self) -> Option<u64> {
        self.queue.peek().map(|Reverse(s)| s.time_ns)
    }

    fn run_until(&mut self, t_ns: u64) {
        while self.next_event_ns().is_some_and(|t| t <= t_ns) {
            self.step();
        }
        self.now_ns = self.now_ns.max(t_ns);
    }

    pub(crate) fn chunk_bytes(&self) -> u64 {
        self.config.chunk_bytes.max(1) as u64
    }

    /// One one-way trip between `a` and `b`: base latency, jitter, and the link's extra delay.
    pub(crate) fn one_way_ns(&mut self, a: NodeId, b: NodeId) -> u64 {
        let mut t = self.config.one_way_ns.saturating_add(self.rng.up_to(self.config.jitter_ns));
        if let Some(link) = self.links.get(&link_key(a, b)).copied() {
            t = t.saturating_add(link.extra_ns).saturating_add(self.rng.up_to(link.jitter_ns));
        }
        t
    }

    /// Time to serialize `len` payload bytes.
    pub(crate) fn bytes_ns(&self, len: u64) -> u64 {
        let ps = u128::from(len) * u128::from(self.config.per_byte_ps);
        u64::try_from(ps / 1000).unwrap_or(u64::MAX)
    }

    pub(crate) fn is_partitioned(&self, a: NodeId, b: NodeId) -> bool {
        self.partitions.contains(&link_key(a, b))
    }

    /// Charges `cost_ns` of synchronous control-plane work to `node`. Costs queue up: a second
    /// change right after a first is busy until both are done.
    pub(crate) fn charge(&mut self, node: NodeId, cost_ns: u64) {
        let now = self.now_ns;
        if let Some(n) = self.nodes.get_mut(&node) {
            n.busy_until_ns = n.busy_until_ns.max(now).saturating_add(cost_ns);
        }
    }
}

/// A simulated cluster: every node, its memory and connections, the network between them, and
/// virtual time. Cheap to clone (all clones drive the same world).
///
/// Nothing happens on its own: operations land and complete only as the world is driven with
/// [`SimWorld::step`], [`SimWorld::run_until`], [`SimWorld::run_until_idle`] or
/// [`SimWorld::advance`], from one thread. Same seed and same calls give the same run.
#[derive(Clone)]
pub struct SimWorld {
    pub(crate) shared: Shared,
}

impl std::fmt::Debug for SimWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = lock(&self.shared);
        f.debug_struct("SimWorld")
            .field("seed", &w.seed)
            .field("now_ns", &w.now_ns)
            .field("nodes", &w.nodes.len())
            .field("pending_events", &w.queue.len())
            .finish()
    }
}

impl SimWorld {
    /// A world with no nodes at virtual time 0, whose every random choice comes from `seed`.
    pub fn new(config: SimConfig, seed: u64) -> SimWorld {
        SimWorld { shared: Arc::new(Mutex::new(World::new(config, seed))) }
    }

    /// The nodes created so far.
    pub fn nodes(&self) -> Vec<NodeId> {
        lock(&self.shared).nodes.keys().copied().collect()
    }

    /// The configuration the world was made with (with the current fault switches).
    pub fn config(&self) -> SimConfig {
        lock(&self.shared).config.clone()
    }

    /// The seed the world was made with.
    pub fn seed(&self) -> u64 {
        lock(&self.shared).seed
    }

    /// The current virtual time.
    pub fn now_ns(&self) -> u64 {
        lock(&self.shared).now_ns
    }

    /// Runs the next event, moving time to it. Returns false (and does nothing) if none is
    /// scheduled. Landings parked by [`SimWorld::hold_outgoing`] are not scheduled.
    pub fn step(&self) -> bool {
        lock(&self.shared).step()
    }

    /// Runs every event due at or before `t_ns`, then moves time to `t_ns` (never backwards).
    pub fn run_until(&self, t_ns: u64) {
        lock(&self.shared).run_until(t_ns);
    }

    /// Runs events until none is scheduled; returns how many ran.
    pub fn run_until_idle(&self) -> u64 {
        let mut w = lock(&self.shared);
        let before = w.events_run;
        while w.step() {}
        w.events_run - before
    }

    /// Moves time forward by `ns`, running the events that come due.
    pub fn advance(&self, ns: u64) {
        let mut w = lock(&self.shared);
        let t = w.now_ns.saturating_add(ns);
        w.run_until(t);
    }

    /// How many events are scheduled.
    pub fn pending_events(&self) -> usize {
        lock(&self.shared).queue.len()
    }

    /// When the next scheduled event is due.
    pub fn next_event_ns(&self) -> Option<u64> {
        lock(&self.shared).next_event_ns()
    }

    /// How many events have run since the world was made.
    pub fn events_run(&self) -> u64 {
        lock(&self.shared).events_run
    }

    /// A running hash of every event so far (time, kind, nodes, status, bytes, data digests):
    /// equal for two runs exactly when they did the same things at the same virtual times (up
    /// to hash collisions).
    pub fn trace_hash(&self) -> u64 {
        lock(&self.shared).trace.hash()
    }

    /// How many events the trace has recorded.
    pub fn trace_len(&self) -> u64 {
        lock(&self.shared).trace.count()
    }

    /// The most recent trace events, oldest first (at most [`SimConfig::trace_capacity`]).
    pub fn recent_trace(&self) -> Vec<TraceEvent> {
        lock(&self.shared).trace.recent()
    }

    /// Until when `node`'s CPU is busy with synchronous control-plane calls that take time on
    /// RDMA (permission changes and queue-pair transitions are charged, but the global clock is
    /// not moved by them: a runtime built on the simulator decides how to charge it). 0 for a
    /// node that does not exist or was never charged.
    pub fn node_busy_until(&self, node: NodeId) -> u64 {
        lock(&self.shared).nodes.get(&node).map_or(0, |n| n.busy_until_ns)
    }

    /// The node's current incarnation (0 until its first restart); `None` if it does not exist.
    pub fn incarnation(&self, node: NodeId) -> Option<u32> {
        lock(&self.shared).nodes.get(&node).map(|n| n.incarnation)
    }

    /// The world-wide fault switches.
    pub fn faults(&self) -> FaultConfig {
        lock(&self.shared).config.faults.clone()
    }

    /// Changes the world-wide fault switches. Operations already posted keep the landing order
    /// they were given.
    pub fn set_faults(&self, faults: FaultConfig) {
        let mut w = lock(&self.shared);
        let detail = u64::from(faults.out_of_order_landing)
            ^ faults.fast_perm_failure_probability.to_bits().rotate_left(1)
            ^ faults.fast_perm_busy_in_flight_probability.to_bits().rotate_left(2)
            ^ faults.control_under_way_probability.to_bits().rotate_left(3);
        w.config.faults = faults;
        w.note(TraceEvent::new(TraceKind::Faults, NodeId(0)).detail(detail));
    }
}
