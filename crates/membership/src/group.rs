//! The application's handle on a membership group: a [`NodeCore`] polled by a thread of its
//! own with the host's monotonic clock ([`crate::clock`]), and what applications ask of it.
//!
//! * [`Membership::active`]: whether a view is active now (§6.2, Algorithm 2): one load of the
//!   published lease (a sequence word over three, no lock) and one read of `CLOCK_MONOTONIC`
//!   through the vDSO (no system call), the clock the core's leases are on.
//! * [`Membership::latest`], [`Membership::member`]: the latest view learnt, this node in it.
//! * [`Membership::views`], [`Membership::failures`]: streams of later views and of members
//!   that left a view (removed or leaving; each once, with the first epoch without them).
//! * [`Membership::leave`]: asks to leave and waits, with a deadline, for a view without it.
//!
//! Dropping the handle stops the thread; the node then stops renewing its lease and beating,
//! and the detectors of the others remove it.

use crate::clock::{now_ns, Polling};
use crate::config::MembershipConfig;
use crate::node::{NodeCore, NodeEvent};
use crate::published::PublishedLease;
use crate::service::lock;
use crate::spans::{ActiveSpan, SpanRecorder};
use mu_fabric::Fabric;
use mu_ukharon::lease::LeaseConfig;
use mu_ukharon::view::{Member, View};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;

/// A member that left the view before `epoch` (removed by the detectors, or by its own leave).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    pub member: Member,
    /// The first view learnt without it.
    pub epoch: u64,
}

/// How the node's thread runs and how long [`Membership::join`] waits.
#[derive(Clone, Copy, Debug)]
pub struct JoinOptions {
    pub polling: Polling,
    /// How long `join` waits for a view that admits this node.
    pub timeout: Duration,
    /// This process's incarnation: a new random number unless given (tests).
    pub incarnation: Option<u64>,
}

impl Default for JoinOptions {
    fn default() -> Self {
        JoinOptions { polling: Polling::Spin, timeout: Duration::from_secs(5), incarnation: None }
    }
}

/// Why a membership call failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum MembershipError {
    /// The node's board or its thread could not be set up.
    #[error("starting the node: {0}")]
    Start(String),
    #[error("no view {what} after {waited_ms} ms")]
    Timeout { what: &'static str, waited_ms: u128 },
    /// The node's thread ended (it panicked; the message went to stderr).
    #[error("the node's thread has stopped")]
    Stopped,
}

#[derive(Default)]
struct State {
    latest: Option<View>,
    member: Option<Member>,
    views: Vec<Sender<View>>,
    failures: Vec<Sender<Failure>>,
    spans: SpanRecorder,
    last_problem: Option<String>,
    running: bool,
}

struct Shared {
    stop: AtomicBool,
    leave: AtomicBool,
    /// A member to ask the coordinators to name primary, plus one (0: none).
    primary_wanted: AtomicU32,
    published: Arc<PublishedLease>,
    state: Mutex<State>,
    changed: Condvar,
}

/// See the module docs.
pub struct Membership {
    shared: Arc<Shared>,
    node: u16,
    thread: Option<JoinHandle<()>>,
}

impl Membership {
    /// Starts the node on `fabric` and waits until a view admits it (`options.timeout`).
    pub fn join<F: Fabric>(
        fabric: F,
        config: MembershipConfig,
        lease: LeaseConfig,
        options: JoinOptions,
    ) -> Result<Membership, MembershipError> {
        let membership = Membership::start(fabric, config, lease, options)?;
        membership.wait_for("admitting this node", options.timeout, |s| s.member.is_some())?;
        Ok(membership)
    }

    /// [`Membership::join`], with every view the node learns from its start on, the one that
    /// admits it included (an application that must know what the group looked like when it
    /// came in: [`Membership::views`] taken after `join` may miss views learnt meanwhile).
    pub fn join_watching<F: Fabric>(
        fabric: F,
        config: MembershipConfig,
        lease: LeaseConfig,
        options: JoinOptions,
    ) -> Result<(Membership, Receiver<View>), MembershipError> {
        let incarnation = options.incarnation.unwrap_or_else(random_incarnation);
        let core = NodeCore::new(fabric, config, lease, incarnation);
        let (tx, views) = channel();
        let membership =
            Membership::run_core_with(core.map_err(MembershipError::Start)?, options, vec![tx])?;
        membership.wait_for("admitting this node", options.timeout, |s| s.member.is_some())?;
        Ok((membership, views))
    }

    /// Starts the node on `fabric` and returns at once; it joins in the background.
    pub fn start<F: Fabric>(
        fabric: F,
        config: MembershipConfig,
        lease: LeaseConfig,
        options: JoinOptions,
    ) -> Result<Membership, MembershipError> {
        let incarnation = options.incarnation.unwrap_or_else(random_incarnation);
        let core = NodeCore::new(fabric, config, lease, incarnation);
        Membership::run_core(core.map_err(MembershipError::Start)?, options)
    }

    /// Starts a lease cache (§6.3) on `fabric`, one of the configuration's caches: it does not
    /// join; it leases the latest view for ∆ and answers the members that renew through it.
    /// `active` and `latest` say what it holds.
    pub fn serve_cache<F: Fabric>(
        fabric: F,
        config: MembershipConfig,
        lease: LeaseConfig,
        options: JoinOptions,
    ) -> Result<Membership, MembershipError> {
        let incarnation = options.incarnation.unwrap_or_else(random_incarnation);
        let core = NodeCore::new_cache(fabric, config, lease, incarnation);
        Membership::run_core(core.map_err(MembershipError::Start)?, options)
    }

    fn run_core<F: Fabric>(
        core: NodeCore<F>,
        options: JoinOptions,
    ) -> Result<Membership, MembershipError> {
        Membership::run_core_with(core, options, Vec::new())
    }

    /// Runs `core` on a thread of its own, `views` receiving every view it learns.
    fn run_core_with<F: Fabric>(
        core: NodeCore<F>,
        options: JoinOptions,
        views: Vec<Sender<View>>,
    ) -> Result<Membership, MembershipError> {
        let node = core.node();
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            leave: AtomicBool::new(false),
            primary_wanted: AtomicU32::new(0),
            published: core.published(),
            state: Mutex::new(State { running: true, views, ..State::default() }),
            changed: Condvar::new(),
        });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("ukharon-node-{node}"))
                .spawn(move || run(core, &shared, options.polling))
                .map_err(|e| MembershipError::Start(format!("starting the thread: {e}")))?
        };
        Ok(Membership { shared, node, thread: Some(thread) })
    }

    /// Whether `view` is active now on this node: it holds a lease on it. Lock-free, no system
    /// call (see the module docs); false whenever in doubt.
    pub fn active(&self, view: &View) -> bool {
        self.shared.published.active_at(view.epoch, now_ns())
    }

    /// The lease `active` reads, for threads that keep their own handle on it.
    pub fn published(&self) -> Arc<PublishedLease> {
        self.shared.published.clone()
    }

    /// This node's fabric id.
    pub fn node(&self) -> u16 {
        self.node
    }

    /// The latest view this node learnt.
    pub fn latest(&self) -> Option<View> {
        lock(&self.shared.state).latest.clone()
    }

    /// This node as a member of the latest view, if it is one.
    pub fn member(&self) -> Option<Member> {
        lock(&self.shared.state).member
    }

    /// The views learnt from now on, in epoch order (epochs may be skipped).
    pub fn views(&self) -> Receiver<View> {
        let (tx, rx) = channel();
        lock(&self.shared.state).views.push(tx);
        rx
    }

    /// The members that leave a view from now on.
    pub fn failures(&self) -> Receiver<Failure> {
        let (tx, rx) = channel();
        lock(&self.shared.state).failures.push(tx);
        rx
    }

    /// When `Active` was true here, per view (the latest 64 views).
    pub fn active_spans(&self) -> Vec<ActiveSpan> {
        lock(&self.shared.state).spans.spans()
    }

    /// (epoch, when this node learnt that view) for the latest 64 views, on the clock of
    /// `active`.
    pub fn learnt_times(&self) -> Vec<(u64, u64)> {
        lock(&self.shared.state).spans.learnt_times()
    }

    /// The last refusal or bad view the core reported, if any.
    pub fn last_problem(&self) -> Option<String> {
        lock(&self.shared.state).last_problem.clone()
    }

    /// Asks the coordinators to name `node` the application's primary in this node's place (a
    /// primary that cannot serve names the one to take its place); asked again while the
    /// views name this node and have `node` as a member.
    pub fn ask_primary(&self, node: u16) {
        self.shared.primary_wanted.store(u32::from(node) + 1, Ordering::Release);
    }

    /// Waits until a view of at least `epoch` is learnt.
    pub fn wait_for_epoch(&self, epoch: u64, timeout: Duration) -> Result<View, MembershipError> {
        let at_least = |s: &State| s.latest.as_ref().is_some_and(|v| v.epoch >= epoch);
        self.wait_for("of the epoch asked for", timeout, at_least)?;
        Ok(self.latest().expect("waited for it"))
    }

    /// Asks to leave and waits until a view without this node is learnt, then stops the
    /// node's thread. A node that is not a member stops at once (should a join still in
    /// flight admit it, the detectors remove it, as a crashed node).
    pub fn leave(mut self, timeout: Duration) -> Result<(), MembershipError> {
        self.shared.leave.store(true, Ordering::Release);
        let left = self.wait_for("without this node", timeout, |s| s.member.is_none());
        self.halt();
        left
    }

    fn wait_for(
        &self,
        what: &'static str,
        timeout: Duration,
        ready: impl Fn(&State) -> bool,
    ) -> Result<(), MembershipError> {
        let start = Instant::now();
        let mut state = lock(&self.shared.state);
        loop {
            if ready(&state) {
                return Ok(());
            }
            if !state.running {
                return Err(MembershipError::Stopped);
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(MembershipError::Timeout { what, waited_ms: waited.as_millis() });
            }
            let wait = self.shared.changed.wait_timeout(state, timeout - waited);
            state = wait.unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            // A panic on the thread was reported on stderr when it happened.
            let _ = thread.join();
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A number no earlier process of this node had: std's per-process random hash keys, the pid
/// and the time.
fn random_incarnation() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(now_ns());
    h.finish() | 1
}

/// Marks the state stopped when the thread ends, by return or by panic, so that waiters wake.
struct Running<'a>(&'a Shared);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).running = false;
        self.0.changed.notify_all();
    }
}

fn run<F: Fabric>(mut core: NodeCore<F>, shared: &Shared, polling: Polling) {
    let _running = Running(shared);
    let mut leaving = false;
    let mut events = Vec::new();
    while !shared.stop.load(Ordering::Acquire) {
        if !leaving && shared.leave.load(Ordering::Acquire) {
            core.leave();
            leaving = true;
        }
        if let Some(node) = shared.primary_wanted.swap(0, Ordering::AcqRel).checked_sub(1) {
            core.ask_primary(node as u16);
        }
        core.poll(now_ns());
        events.extend(core.drain_events());
        let lease = shared.published.load();
        let seen_ns = now_ns();
        let mut state = lock(&shared.state);
        state.spans.observe(lease, seen_ns);
        if !events.is_empty() {
            for event in events.drain(..) {
                apply(&mut state, event, seen_ns);
            }
            drop(state);
            shared.changed.notify_all();
        } else {
            drop(state);
        }
        polling.pause();
    }
}

fn apply(state: &mut State, event: NodeEvent, seen_ns: u64) {
    match event {
        NodeEvent::View(view) => {
            state.spans.learnt(view.epoch, seen_ns);
            if let Some(previous) = &state.latest {
                let gone = previous.members.iter().filter(|m| !view.contains(**m));
                let failures: Vec<Failure> =
                    gone.map(|&member| Failure { member, epoch: view.epoch }).collect();
                for failure in failures {
                    state.failures.retain(|tx| tx.send(failure).is_ok());
                }
            }
            state.views.retain(|tx| tx.send(view.clone()).is_ok());
            state.latest = Some(view);
        }
        NodeEvent::Joined(member) => state.member = Some(member),
        NodeEvent::Out { .. } => state.member = None,
        NodeEvent::Refused(answer) => state.last_problem = Some(format!("refused: {answer:?}")),
        NodeEvent::BadView(why) => state.last_problem = Some(why),
    }
}
