//! A replica on real time: the two planes on their own threads, and the application's API.

use crate::config::{ConfigError, ReplicaConfig, Threads};
use crate::core::ReplicationPlane;
use crate::core::{ReplicaCore, StartError};
use crate::group::Requests;
use crate::lease::{Appointment, Term};
use crate::replication::{Applier, ProposeError};
use crate::setup_trace::Poller;
use crate::shared::Shared;
use mu_fabric::wait::Backoff;
use mu_fabric::{Fabric, NodeId};
use mu_log::EntryKind;
use mu_replication::membership::Change;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where proposals run (Mu paper §3.1, §7.2 "direct" and "handover" modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A dedicated replication thread runs the replication plane; `propose` hands the value to it
    /// and waits. The thread busy-polls, so the handover costs a cache-line transfer each way.
    Handover,
    /// `propose` runs the replication plane on the calling thread until the value commits; a
    /// helper thread runs it (replayer, leader changes) between proposals.
    Direct,
}

/// What a replica reports about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaStatus {
    /// This replica's id.
    pub me: NodeId,
    /// The leader this replica's failure detector elected.
    pub leader: Option<NodeId>,
    /// This replica's first undecided offset, as its leader engine last knew it.
    pub fuo: u64,
    /// Entries committed by this replica as leader.
    pub commits: u64,
    /// Attempts the leader engine aborted (a write failed, permission was lost): each is
    /// followed by a new attempt while this replica still leads.
    pub aborts: u64,
    /// How many times the elected leader changed, as this replica saw it.
    pub leader_changes: u64,
    /// Permission requests this replica's permission manager served, and how many needed the
    /// slow path (a connection cycled through reset).
    pub permission_switches: u64,
    /// Of `permission_switches`, those that took the slow path.
    pub slow_permission_switches: u64,
    /// Whether the heartbeat is going (fate sharing stops it while the replication plane is
    /// stuck inside propose).
    pub heartbeat_on: bool,
    /// Whether this replica may lead.
    pub eligible: bool,
    /// Whether this replica restarted without its log and does not count in majorities yet:
    /// under Mu until a leader prepared without it (§5.3); under Velos while it reads its
    /// peers' slot words and then while it abstains in indices not every live replica has
    /// applied (`docs/protocols/velos.md`). It counts as a failed replica meanwhile.
    pub recovering: bool,
    /// When this replica's failure detector elected it, in nanoseconds since the replica
    /// started ([`Replica::started_at`]); `None` while another replica leads.
    pub elected_at_ns: Option<u64>,
    /// When, on the same clock, this replica (as Mu's leader) held write permission from a
    /// majority (Listing 2's permission round done; its log not yet caught up): splits the
    /// set-up from election to `ready_at_ns` in two. `None` while it is not leading or has no
    /// such permission yet, and always under Velos, which asks for none.
    pub permitted_at_ns: Option<u64>,
    /// Mu: when, on the same clock, the leader engine first entered each phase of its current
    /// leadership (the phases it entered so far; empty while not leading, and under Velos).
    pub phases_entered_at_ns: Vec<(mu_replication::Phase, u64)>,
    /// Mu: how long the polls of the current leadership took until the first of its own
    /// proposals committed, by the phase each poll began in: (phase, nanoseconds,
    /// polls), for the phases with at least one. `Follower` stands for the poll that took up the
    /// leadership. Beside `phases_entered_at_ns`, it says how much of a new leader's set-up is
    /// time inside its polls and how much lies between them (the thread elsewhere, or other
    /// threads awaited: permission managers, a follower's background plane). Polls are timed
    /// only by a replica that runs its own threads ([`Replica::start`]); empty otherwise, while
    /// not leading, and under Velos (see `velos_busy_ns`).
    pub phases_busy_ns: Vec<(mu_replication::Phase, u64, u64)>,
    /// Velos: when, on the same clock, the leader first took each step of its current
    /// leadership ([`crate::VelosStep`]; empty while not leading, and under Mu).
    pub velos_steps_at_ns: Vec<(crate::VelosStep, u64)>,
    /// Velos: how long the polls of the current leadership took, from the one that took it up
    /// to the one that answered the application's first value, and how many there were
    /// (nanoseconds, polls); as `phases_busy_ns` is for Mu. (0, 0) while not leading, under
    /// Mu, and where polls are not timed.
    pub velos_busy_ns: (u64, u64),
    /// Either engine: the busy polls of the current leadership while its polls are timed (as
    /// for `phases_busy_ns` and `velos_busy_ns`), the first [`crate::SETUP_TRACE_POLLS`] of
    /// them, each with the idle polls before it and the thread that made it: where the time
    /// between a new leader's steps went.
    pub setup_polls: Vec<crate::SetupPoll>,
    /// When, on the same clock, this replica was ready to replicate as leader: write permission
    /// from a majority, its log caught up and its followers updated (§4.2 and Listings 3–4);
    /// `None` while it is not leading or not ready yet.
    pub ready_at_ns: Option<u64>,
    /// Why the leader engine last aborted an attempt, if it ever did.
    pub last_abort: Option<mu_replication::AbortReason>,
    /// While this replica leads, the replicas it writes to (itself included): its confirmed
    /// followers (§4.2). Empty otherwise.
    pub confirmed: Vec<NodeId>,
    /// How many times this replica started leading.
    pub leaderships: u64,
    /// State transfer: snapshots this replica took for others, and installed from others.
    pub snapshots_served: u64,
    /// Snapshots installed from others.
    pub snapshots_installed: u64,
    /// What last went wrong in a state transfer, if anything did.
    pub state_transfer_error: Option<String>,
    /// Why the replica stopped on its own, if it did: a panic on one of its threads or in the
    /// plane under a call of the application's (a commit handler or snapshot hook that
    /// panicked, most likely). The replica then works no more: see [`Replica::start`].
    pub failure: Option<String>,
    /// Peers whose heartbeat says they run with another configuration (protocol, log shape or
    /// replica list: [`ReplicaConfig::fingerprint`]): they are never counted alive and their
    /// permission requests are not served. Empty in a cluster configured alike.
    pub other_configuration: Vec<NodeId>,
    /// Peers refused because they restarted as members in good standing (`eligible: true`)
    /// after this replica had seen an earlier run of theirs: their logs were lost with that
    /// run, so they must rejoin (`eligible: false`). Never counted alive, their permission
    /// requests not served; each stops once it reads the refusal, its
    /// [`ReplicaStatus::failure`] saying why. Empty in a cluster restarted as it should be.
    /// Not seen: a restart before this replica read the earlier run, or while every replica
    /// that had read it was down too (a whole cluster restarted anew is such a case, and
    /// rightly so).
    pub restarted_without_rejoin: Vec<NodeId>,
    /// The members of the configuration after the entries this replica applied (§5.4).
    pub members: Vec<NodeId>,
    /// A decided membership entry removed this replica: it no longer takes part (no heartbeat,
    /// no grants, never leads) and can be shut down.
    pub removed: bool,
    /// The failure detector's score (0–15, §5.1) of each other replica it has read.
    pub scores: Vec<(NodeId, u8)>,
    /// Who this replica's permission manager lets write its log (§5.2), if anyone.
    pub log_holder: Option<NodeId>,
}

/// The application's replicated state: what the commit handler applies to, and what state
/// transfer copies to a replica that lost its log or fell more than a log behind.
pub trait StateMachine: Send + 'static {
    /// Applies one committed request. Called on every replica, in log order, from the thread
    /// running the replication plane. Requests batched into one entry share its index.
    fn apply(&mut self, index: u64, request: &[u8]);

    /// Writes into `out` (empty) the state after every request applied so far, for another
    /// replica. The default refuses: a replica that needs a state transfer then stays out of
    /// the cluster, and its status says why.
    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        let _ = out;
        Err("this application does not take snapshots".into())
    }

    /// A membership entry (§5.4) was decided at `index`: called in log order with the requests,
    /// on every replica that applies it. The default ignores it. A change that changes nothing
    /// (adding a member, removing a non-member) is reported too; [`ReplicaStatus::members`]
    /// says what the configuration is.
    fn membership_changed(&mut self, index: u64, change: Change) {
        let _ = (index, change);
    }

    /// Replaces the state with one [`StateMachine::snapshot`] wrote at another replica; the
    /// next request applied follows it.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let _ = snapshot;
        Err("this application does not restore snapshots".into())
    }
}

/// A commit handler alone: a state machine without snapshots.
struct CommitHandler<F>(F);

impl<F: FnMut(u64, &[u8]) + Send + 'static> StateMachine for CommitHandler<F> {
    fn apply(&mut self, index: u64, request: &[u8]) {
        (self.0)(index, request)
    }
}

/// The replication plane and the application's state machine, which it drives.
struct Plane<F: Fabric> {
    driver: ReplicationPlane<F>,
    app: Application,
    /// The replica's clock (`Inner::start`).
    start: Instant,
}

/// The application as the replication plane sees it: entries unpacked into requests; and the
/// replica's id, for its log events.
struct Application(Box<dyn StateMachine>, NodeId);

impl Applier for Application {
    fn apply(&mut self, index: u64, kind: EntryKind, value: &[u8]) {
        match kind {
            EntryKind::Request => self.0.apply(index, value),
            EntryKind::Batch => match mu_log::batch::requests(value) {
                Ok(requests) => {
                    for request in requests {
                        self.0.apply(index, request);
                    }
                }
                // Checked whole before any of it is applied, so that every replica does the
                // same with it: none applies it. Only the leader that built it could have
                // broken its framing (a bug, or a build that frames batches otherwise); the
                // integrity check passed, so these are the bytes it wrote. Stopping instead
                // would stop every replica at this entry, with no peer left to take a
                // snapshot from.
                Err(e) => tracing::error!(
                    replica = self.1 .0,
                    index,
                    error = %e,
                    "a decided batch entry is malformed: none of its requests is applied"
                ),
            },
            EntryKind::Membership => {
                if let Some(change) = Change::decode(value) {
                    self.0.membership_changed(index, change);
                }
            }
            EntryKind::Noop | EntryKind::Rejoin => {}
        }
    }

    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        self.0.snapshot(out)
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.0.restore(snapshot)
    }
}

thread_local! {
    /// The replica (the address of its `Shared`) whose plane this thread is polling, if any:
    /// the commit handler and the snapshot hooks run there, and a proposal to that replica
    /// from there would wait for the poll it is part of. (One to another replica of the
    /// process is fine.)
    static IN_PLANE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks this thread as inside a plane's poll until dropped (also when a panic unwinds).
struct InPlane(usize);

impl InPlane {
    fn enter(shared: &Arc<Shared>) -> InPlane {
        InPlane(IN_PLANE.with(|f| f.replace(Arc::as_ptr(shared) as usize)))
    }

    /// Whether this thread is inside a poll of `shared`'s replica.
    fn inside(shared: &Arc<Shared>) -> bool {
        IN_PLANE.with(|f| f.get()) == Arc::as_ptr(shared) as usize
    }
}

impl Drop for InPlane {
    fn drop(&mut self) {
        IN_PLANE.with(|f| f.set(self.0));
    }
}

impl<F: Fabric> Plane<F> {
    /// Polls the plane; `now_ns` is on `start`'s clock. A new leadership's polls are timed
    /// until it is set up and committed ([`ReplicationPlane::setup_timed`]): one more clock
    /// read per poll then, none otherwise.
    fn poll(&mut self, now_ns: u64, poller: Poller) -> bool {
        let _in_plane = InPlane::enter(self.driver.shared());
        let timed = self.driver.setup_timed();
        let busy = self.driver.poll(now_ns, &mut self.app);
        if timed || self.driver.setup_timed() {
            // `now_ns` may be a moment old (read for a submission just before): that moment
            // counts too.
            let end_ns = self.start.elapsed().as_nanos() as u64;
            // The set-up counts from the election: a poll that took up the leadership began
            // before it (or `now_ns` was read before it, and the thread was then descheduled),
            // and that part is no set-up time. Left in, it made the first poll longer than the
            // failover, overlapping the other thread's polls.
            let elected_ns = self.driver.shared().probe.elected_at_ns.load(Ordering::Acquire);
            let start_ns = now_ns.max(elected_ns.saturating_sub(1));
            self.driver.note_setup_poll(start_ns, end_ns.saturating_sub(start_ns), busy, poller);
        }
        busy
    }
}

const EMPTY: u8 = 0;
const SUBMITTED: u8 = 1;
const DONE: u8 = 2;

/// Handover mode's mailbox: one call's requests at a time from the application to the
/// replication thread and their outcomes back. The state word is what both sides spin on; the
/// mutexes around the requests and the outcomes are only ever taken by one side at a time (the
/// state says whose turn it is), so they never wait.
struct Mailbox {
    state: AtomicU8,
    requests: Mutex<Requests>,
    /// Set instead of requests for a membership change.
    change: Mutex<Option<Change>>,
    outcomes: Mutex<Vec<Result<u64, ProposeError>>>,
    /// Serializes application threads calling `propose` at once.
    callers: Mutex<()>,
}

/// The planes' state, shared by the replica's threads and the application.
/// Who watches for leader changes ([`Replica::watch_leader`]), and the leader they were last
/// told of: each is told of a change once.
struct LeaderWatchers {
    senders: Vec<Sender<Option<NodeId>>>,
    told: Option<NodeId>,
}

struct Inner<F: Fabric> {
    mode: Mode,
    me: NodeId,
    shared: Arc<Shared>,
    stop: AtomicBool,
    mailbox: Mailbox,
    /// In direct mode, the replication plane (the application and the helper thread take turns).
    plane: Mutex<Option<Plane<F>>>,
    /// Direct mode: the application waits for the plane, and the helper leaves it alone.
    app_waiting: AtomicBool,
    /// Direct mode: proposals the application has started (written under the plane's lock),
    /// so that the helper sees the application at work even when it only ever finds the lock
    /// free, between two proposals.
    app_proposals: AtomicU64,
    start: Instant,
    leader_watchers: Mutex<LeaderWatchers>,
    /// How the replication thread waits when idle ([`crate::Threads`]).
    idle: Backoff,
}

/// How a failure found by its poisoned lock alone ends (its panic's message is not known there).
const BARE_FAILURE: &str = " (the message went to the panicking thread's stderr)";

impl<F: Fabric> Inner<F> {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Stops the replica for good after a panic in `what`: its threads end (the heartbeat with
    /// them, so that the others find it failed and elect another leader), and every later call
    /// fails with [`ProposeError::ShuttingDown`]. A plane left half way through a poll, or a
    /// state machine half way through an entry, must not be polled again: the entry would be
    /// applied twice. The first failure is the one recorded.
    fn fail(&self, what: &str, payload: Option<&(dyn std::any::Any + Send)>) {
        self.stop.store(true, Ordering::Release);
        let message = payload.map(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into())
        });
        let mut failure = lock(&self.shared.failure);
        // A poisoned lock is often found before the panicking thread's own report arrives:
        // that report, which has the panic's message, replaces the bare one.
        let bare = failure.as_deref().is_some_and(|f| f.ends_with(BARE_FAILURE));
        if failure.is_none() || (bare && message.is_some()) {
            let text = format!(
                "{what} panicked{}",
                message.as_deref().map_or(BARE_FAILURE.into(), |m| format!(": {m}"))
            );
            tracing::error!(replica = self.me.0, failure = text, "replica stopped");
            *failure = Some(text);
        }
    }

    /// Once the background thread ends (a shutdown, a failure on any thread, a refusal): the
    /// heartbeat has stopped, and this replica follows no leader and says so to whoever
    /// watches. Its last election would otherwise stand for good: a stopped leader would go on
    /// naming itself while the others elect another, and an application that routes by it
    /// would send every request to a replica that refuses them all. Only the background thread
    /// calls it, as it alone sets the leader.
    fn follow_no_leader(&self) {
        self.shared.heartbeat_on.store(false, Ordering::Release);
        self.shared.set_leader(None, self.me, self.now_ns());
        // Whether or not the word changed here: a last poll may have cleared it and ended
        // (a refusal, a panic) before the watchers were told.
        self.tell_leader(None);
    }

    /// Tells the watchers that `leader` is elected, unless that is what they were last told.
    fn tell_leader(&self, leader: Option<NodeId>) {
        let mut watchers = lock(&self.leader_watchers);
        if watchers.told != leader {
            watchers.told = leader;
            watchers.senders.retain(|tx| tx.send(leader).is_ok());
        }
    }

    /// Runs `body` as one of the replica's threads: a panic in it stops the replica
    /// ([`Inner::fail`]) rather than leaving the others running without it.
    fn guarded(self: Arc<Self>, what: &'static str, body: impl FnOnce()) {
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
            self.fail(what, Some(payload.as_ref()));
        }
    }
}

/// A running replica. See the crate docs; dropping it shuts it down.
pub struct Replica {
    me: NodeId,
    shared: Arc<Shared>,
    /// The planes, with the fabric type erased: `Replica` is one type whatever the fabric.
    inner: Arc<dyn Handle>,
    threads: Vec<JoinHandle<()>>,
    started_at: Instant,
}

/// What the application does with a replica, whatever its fabric.
trait Handle: Send + Sync {
    fn propose(
        &self,
        requests: &[&[u8]],
        change: Option<Change>,
        outcomes: &mut Vec<Result<u64, ProposeError>>,
    );
    fn watch(&self) -> Receiver<Option<NodeId>>;
    fn stop(&self);
}

impl<F: Fabric> Handle for Inner<F> {
    fn propose(
        &self,
        requests: &[&[u8]],
        change: Option<Change>,
        outcomes: &mut Vec<Result<u64, ProposeError>>,
    ) {
        propose(self, requests, change, outcomes)
    }

    fn watch(&self) -> Receiver<Option<NodeId>> {
        let (tx, rx) = channel();
        lock(&self.leader_watchers).senders.push(tx);
        rx
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Replica {
    /// Starts a replica on `fabric` (already created for `config.me`): registers its regions,
    /// starts the background thread and, in handover mode, the replication thread. Peers need
    /// not be up yet: the background plane connects to them as they come.
    ///
    /// `on_commit(index, request)` is called for every committed request, in log order, on every
    /// replica (the leader included), from the thread running the replication plane. With a
    /// commit handler alone there is no state transfer: a replica that falls more than a log
    /// behind (one started after the others went round the log, or cut off that long; the
    /// leader does not wait for a replica it has not confirmed as a follower) stays behind for
    /// good, and its status's `state_transfer_error` says so. See
    /// [`Replica::start_with_state`].
    ///
    /// What the commit handler (and a [`StateMachine`]'s hooks) may count on and must keep to:
    /// - **Its thread.** In handover mode the replication thread calls it; in direct mode the
    ///   thread of a `propose` call in progress (the leader's own commits run inside its
    ///   proposals), or the replica's helper thread between calls. Never two at once.
    /// - **Time.** It runs inside the replication plane: while it runs, this replica replicates
    ///   and applies nothing. A follower whose handler is slow falls behind, and the leader's
    ///   proposals wait for it before its slot of the log is reused: the leader goes at its
    ///   pace. One that returns from no call for `log_full_timeout_ns` while the leader waits
    ///   for it makes the proposals fail with [`ProposeError::LogFull`], which names it.
    /// - **No proposals from inside.** A `propose` (or `propose_many`, `add_replica`,
    ///   `remove_replica`) made from the handler would wait for the poll it is part of: it
    ///   fails at once with [`ProposeError::Reentrant`]. Hand the value to another thread.
    /// - **A panic stops the replica.** The entry in hand may be half applied, so the replica
    ///   does not go on: its threads end (its heartbeat with them, so the others elect another
    ///   leader), every later call fails with [`ProposeError::ShuttingDown`], and
    ///   [`ReplicaStatus::failure`] gives the panic's message. In direct mode the panic also
    ///   reaches the `propose` call in which it happened. Restart the replica as one that lost
    ///   its log (`eligible: false`).
    pub fn start<F: Fabric>(
        config: ReplicaConfig,
        fabric: F,
        mode: Mode,
        on_commit: impl FnMut(u64, &[u8]) + Send + 'static,
    ) -> Result<Replica, StartError> {
        Replica::start_with_state(config, fabric, mode, CommitHandler(on_commit))
    }

    /// [`Replica::start`] with a [`StateMachine`] that takes and restores snapshots, so that a
    /// replica that restarts, or falls more than a log behind, gets the others' state.
    pub fn start_with_state<F: Fabric>(
        config: ReplicaConfig,
        fabric: F,
        mode: Mode,
        app: impl StateMachine,
    ) -> Result<Replica, StartError> {
        let core = ReplicaCore::new(&config, fabric, crate::core::Boot::fresh())?;
        let ReplicaCore { replication, mut background } = core;
        let shared = replication.shared().clone();
        let started_at = Instant::now();
        let plane = Plane {
            driver: replication,
            app: Application(Box::new(app), config.me),
            start: started_at,
        };
        let inner = Arc::new(Inner {
            mode,
            me: config.me,
            shared: shared.clone(),
            stop: AtomicBool::new(false),
            mailbox: Mailbox {
                state: AtomicU8::new(EMPTY),
                requests: Mutex::new(Requests::default()),
                change: Mutex::new(None),
                outcomes: Mutex::new(Vec::new()),
                callers: Mutex::new(()),
            },
            plane: Mutex::new(None),
            app_waiting: AtomicBool::new(false),
            app_proposals: AtomicU64::new(0),
            start: started_at,
            leader_watchers: Mutex::new(LeaderWatchers { senders: Vec::new(), told: None }),
            idle: match config.threads {
                Threads::Shared => Backoff::FAST_PATH,
                Threads::Dedicated => Backoff::POLL,
            },
        });
        let mut threads = Vec::new();
        let bg = inner.clone();
        // Between heartbeat reads the background thread sleeps no longer than this: a quarter
        // of a read period, so that the heartbeat moves several times between two reads of any
        // peer, and the crash-notification period.
        let max_wait_ns =
            (config.detector.read_period_ns / 4).min(config.crash_check_period_ns).max(1_000);
        let dedicated = config.threads == Threads::Dedicated;
        threads.push(spawn_pinned(
            format!("mu-bg-{}", config.me),
            "background",
            config.cpus.background,
            move || {
                let held = bg.clone();
                held.guarded("the background thread", || {
                    background_loop(&bg, &mut background, max_wait_ns, dedicated)
                });
                bg.follow_no_leader();
            },
        )?);
        let repl = inner.clone();
        let spawned = match mode {
            Mode::Handover => spawn_pinned(
                format!("mu-repl-{}", config.me),
                "replication",
                config.cpus.replication,
                move || {
                    let held = repl.clone();
                    held.guarded("the replication thread", || handover_loop(&repl, plane))
                },
            ),
            Mode::Direct => {
                *lock(&inner.plane) = Some(plane);
                spawn_pinned(
                    format!("mu-repl-{}", config.me),
                    "replication",
                    config.cpus.replication,
                    move || {
                        let held = repl.clone();
                        held.guarded("the replication thread", || direct_helper_loop(&repl))
                    },
                )
            }
        };
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                inner.stop.store(true, Ordering::Release);
                for t in threads {
                    let _ = t.join();
                }
                return Err(e);
            }
        }
        tracing::debug!(
            replica = config.me.0,
            mode = ?mode,
            replicas = config.replicas.len(),
            "replica threads started"
        );
        Ok(Replica { me: config.me, shared, inner, threads, started_at })
    }

    /// Replicates `value`: returns its log index once it is committed (and applied here), or
    /// why not. Only the leader proposes; others answer with a hint.
    pub fn propose(&self, value: &[u8]) -> Result<u64, ProposeError> {
        // The outcome goes through a vector kept per thread, not one allocated per call (an
        // allocation and a free were about 2 % of a proposal's instructions). Where that vector
        // is borrowed already or gone (a call while the thread's locals are being destroyed),
        // the call gets a vector of its own.
        thread_local! {
            static OUTCOMES: RefCell<Vec<Result<u64, ProposeError>>> =
                const { RefCell::new(Vec::new()) };
        }
        let propose = |outcomes: &mut Vec<_>| {
            self.inner.propose(&[value], None, outcomes);
            outcomes.pop().unwrap_or(Err(ProposeError::ShuttingDown))
        };
        OUTCOMES
            .try_with(|cell| cell.try_borrow_mut().ok().map(|mut outcomes| propose(&mut outcomes)))
            .ok()
            .flatten()
            .unwrap_or_else(|| propose(&mut Vec::with_capacity(1)))
    }

    /// Adds replica `id` (one of the configured `replicas`) to the cluster's members, through a
    /// membership entry (§5.4); on the leader only. Returns the entry's log index once it is
    /// decided: from the next index on, majorities are of the new configuration. Start the new
    /// replica (with `eligible: false`) before or after: it is brought up to date by the log,
    /// or by a state transfer if the log has moved on more than its length. A replica that was
    /// removed stays out for good, even if it still runs: to add its id back, stop it and
    /// start it anew (with `eligible: false`).
    pub fn add_replica(&self, id: NodeId) -> Result<u64, ProposeError> {
        self.change_membership(Change::Add(id))
    }

    /// Removes replica `id` from the cluster's members, through a membership entry (§5.4); on
    /// the leader only (the leader may remove itself: it stops leading and another is elected).
    /// Returns the entry's log index once it is decided. The removed replica stops taking
    /// part once it applies the entry (its status then says `removed`); the others ignore its
    /// permission requests from then on. Until every other member has applied the entry, the
    /// removed replica counts as failed in the configuration before it: remove a live member
    /// only while that configuration could lose one more (`docs/protocols/mu.md`).
    pub fn remove_replica(&self, id: NodeId) -> Result<u64, ProposeError> {
        self.change_membership(Change::Remove(id))
    }

    fn change_membership(&self, change: Change) -> Result<u64, ProposeError> {
        let mut outcomes = Vec::with_capacity(1);
        self.inner.propose(&[&[]], Some(change), &mut outcomes);
        outcomes.pop().unwrap_or(Err(ProposeError::ShuttingDown))
    }

    /// Replicates several requests at once (§7.4): they are packed into entries of up to
    /// `batch_requests_max` requests, and up to `outstanding_max` entries are replicated at a
    /// time. Returns once every request has an outcome: into `outcomes` (cleared first), one per
    /// request in order, the log index it was committed at (requests packed into one entry
    /// share its index, and are applied in the order given) or why not. Requests are committed
    /// in the order given; if one fails, the ones after it fail too. A request too large for an
    /// entry fails the whole call before anything is proposed (every outcome is its
    /// [`ProposeError::TooLarge`]).
    pub fn propose_many(&self, requests: &[&[u8]], outcomes: &mut Vec<Result<u64, ProposeError>>) {
        self.inner.propose(requests, None, outcomes);
    }

    /// The error a proposal here would fail with at once, without waiting for the replication
    /// plane: [`ProposeError::NotLeader`] where this replica leads nothing and its failure
    /// detector names another replica (or none). `None`: a proposal goes to the plane. A
    /// server answers such a replica's requests with it before it takes any lock of its own.
    pub fn led_elsewhere(&self) -> Option<ProposeError> {
        led_elsewhere(&self.shared, self.me)
    }

    /// The leader this replica's failure detector elected.
    pub fn leader(&self) -> Option<NodeId> {
        self.shared.leader()
    }

    /// Appoints the leader, where [`crate::ReplicaConfig::leaders`] is `Appointed` (ignored
    /// otherwise): the primary the membership's latest view names, `None` for nobody. Rule 1
    /// of leased reads (`docs/protocols/lease-reads.md`) is the caller's: appoint this replica
    /// only once `Active(view)` held here for the view that names it.
    pub fn appoint(&self, appointment: Option<Appointment>) {
        self.shared.appoint(appointment)
    }

    /// The leadership under way on this replica, if any: the appointment it started under and
    /// its serial number (for [`crate::LeaseGate`]).
    pub fn term(&self) -> Option<Term> {
        self.shared.term()
    }

    /// Whether this replica stands for leadership now ([`ReplicaStatus::eligible`]): one atomic
    /// load, for a loop that asks often.
    pub fn eligible(&self) -> bool {
        self.shared.eligible.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Why the replica stopped on its own, if it did ([`ReplicaStatus::failure`]): cheaper
    /// than a whole status, for a loop that watches for it.
    pub fn failure(&self) -> Option<String> {
        lock(&self.shared.failure).clone()
    }

    /// Leader changes as this replica sees them, from now on: a leader elected before the call
    /// is not sent, so read [`Replica::leader`] after it for the current one.
    pub fn watch_leader(&self) -> Receiver<Option<NodeId>> {
        self.inner.watch()
    }

    /// What the replica reports about itself: leadership, progress, counters, the failure
    /// detector's scores, failover timing. Atomic loads and a few small vectors: cheap enough to
    /// poll now and then, not on every request ([`Replica::failure`] and [`Replica::leader`]
    /// are cheaper).
    pub fn status(&self) -> ReplicaStatus {
        self.shared.status(self.me)
    }

    /// This replica's id.
    pub fn id(&self) -> NodeId {
        self.me
    }

    /// The origin of the replica's clock, which status timestamps count from.
    pub fn started_at(&self) -> Instant {
        self.started_at
    }

    /// Stops the replica's threads; a proposal in progress fails with
    /// [`ProposeError::ShuttingDown`].
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        let running = !self.threads.is_empty();
        self.inner.stop();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if running {
            tracing::debug!(replica = self.me.0, "replica threads stopped");
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

/// Proposes `requests`, or with `change` a membership change (and one placeholder request, for
/// its outcome).
fn propose<F: Fabric>(
    inner: &Inner<F>,
    requests: &[&[u8]],
    change: Option<Change>,
    outcomes: &mut Vec<Result<u64, ProposeError>>,
) {
    outcomes.clear();
    if requests.is_empty() {
        return;
    }
    if inner.stop.load(Ordering::Acquire) {
        return fail(requests, outcomes, ProposeError::ShuttingDown);
    }
    if InPlane::inside(&inner.shared) {
        return fail(requests, outcomes, ProposeError::Reentrant);
    }
    if let Some(e) = led_elsewhere(&inner.shared, inner.me) {
        return fail(requests, outcomes, e);
    }
    match inner.mode {
        Mode::Handover => handover_propose(inner, requests, change, outcomes),
        Mode::Direct => direct_propose_locked(inner, requests, change, outcomes),
    }
}

/// The error a proposal on replica `me` fails with at once, where no leadership is under way
/// here and the failure detector names another replica (or none): the engine is a follower
/// and would refuse it the same way. Read from the shared state, without the replication
/// plane: on a busy follower the plane is held by its applying thread, and a proposer waiting
/// for it (tens of milliseconds on two loaded vCPUs) kept clients that asked who leads from
/// hearing it. Where this replica is elected, the proposal goes to the plane, which takes the
/// election in; a stale "not leader" from a replica just elected only sends the client round.
fn led_elsewhere(shared: &Shared, me: NodeId) -> Option<ProposeError> {
    let leader = shared.leader();
    (leader != Some(me) && shared.term().is_none()).then_some(ProposeError::NotLeader { leader })
}

/// Every one of `requests` fails with `e`.
fn fail(requests: &[&[u8]], outcomes: &mut Vec<Result<u64, ProposeError>>, e: ProposeError) {
    outcomes.clear();
    outcomes.extend(requests.iter().map(|_| Err(e.clone())));
}

/// Handover mode: mails `requests` (or `change`) to the replication thread and waits for its
/// answer.
#[inline]
fn handover_propose<F: Fabric>(
    inner: &Inner<F>,
    requests: &[&[u8]],
    change: Option<Change>,
    outcomes: &mut Vec<Result<u64, ProposeError>>,
) {
    let mailbox = &inner.mailbox;
    let _caller = lock(&mailbox.callers);
    {
        let mut mailed = lock(&mailbox.requests);
        mailed.clear();
        requests.iter().for_each(|r| mailed.push(r));
        *lock(&mailbox.change) = change;
    }
    mailbox.state.store(SUBMITTED, Ordering::Release);
    loop {
        let done = Backoff::FAST_PATH.wait_for(Duration::from_millis(100), || {
            (mailbox.state.load(Ordering::Acquire) == DONE).then_some(())
        });
        if done.is_some() {
            break;
        }
        if inner.stop.load(Ordering::Acquire) && mailbox.state.load(Ordering::Acquire) != DONE {
            // The replication thread has gone; nothing will answer.
            std::thread::sleep(Duration::from_millis(10));
            if mailbox.state.load(Ordering::Acquire) != DONE {
                mailbox.state.store(EMPTY, Ordering::Release);
                return fail(requests, outcomes, ProposeError::ShuttingDown);
            }
        }
    }
    std::mem::swap(outcomes, &mut *lock(&mailbox.outcomes));
    mailbox.state.store(EMPTY, Ordering::Release);
    if outcomes.len() != requests.len() {
        fail(requests, outcomes, ProposeError::ShuttingDown);
    }
}

/// Direct mode: takes the plane from the application's side and proposes on this thread.
#[inline]
fn direct_propose_locked<F: Fabric>(
    inner: &Inner<F>,
    requests: &[&[u8]],
    change: Option<Change>,
    outcomes: &mut Vec<Result<u64, ProposeError>>,
) {
    let Some(mut guard) = app_lock_plane(inner) else {
        return fail(requests, outcomes, ProposeError::ShuttingDown);
    };
    let Some(plane) = guard.as_mut() else {
        return fail(requests, outcomes, ProposeError::ShuttingDown);
    };
    // Stopped, by a shutdown or a failure, while this call waited for the plane.
    if inner.stop.load(Ordering::Acquire) {
        return fail(requests, outcomes, ProposeError::ShuttingDown);
    }
    // A panic in the plane (the commit handler's, most likely) stops the replica before
    // the plane is let go: no other thread may poll a plane left half way through a
    // poll, or the entry in hand would be applied twice. The panic then goes on to the
    // caller.
    let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        direct_propose(inner, plane, requests, change, outcomes)
    }));
    if let Err(payload) = polled {
        inner.fail("the commit handler or the plane, under propose,", Some(payload.as_ref()));
        *guard = None;
        drop(guard);
        std::panic::resume_unwind(payload);
    }
}

/// Direct mode: submits `requests` (or `change`) to `plane` and polls it on the caller's thread
/// until they have outcomes.
fn direct_propose<F: Fabric>(
    inner: &Inner<F>,
    plane: &mut Plane<F>,
    requests: &[&[u8]],
    change: Option<Change>,
    outcomes: &mut Vec<Result<u64, ProposeError>>,
) {
    let fail = |outcomes: &mut Vec<_>, e: ProposeError| {
        outcomes.clear();
        outcomes.extend(requests.iter().map(|_| Err(e.clone())));
    };
    let submit = |plane: &mut Plane<F>, now_ns| match change {
        Some(change) => plane.driver.submit_change(change, now_ns),
        None => plane.driver.submit(requests.iter().copied(), now_ns),
    };
    let mut now_ns = inner.now_ns();
    let mut submitted = submit(plane, now_ns);
    if matches!(submitted, Err(ProposeError::NotLeader { leader }) if leader == Some(inner.me)) {
        // Elected, and the plane has not taken the election in yet: the helper thread
        // does between proposals, and an application that asks again at once keeps it
        // from the lock (on two vCPUs a new leader's engine started milliseconds late).
        // Take it in on this thread.
        plane.poll(now_ns, Poller::Application);
        now_ns = inner.now_ns();
        submitted = submit(plane, now_ns);
    }
    if let Err(e) = submitted {
        return fail(outcomes, e);
    }
    // Counted only once submitted: this thread now polls until the outcome. (An
    // application that calls a follower gets `NotLeader` without a poll, and must not
    // keep the helper away from the follower's replayer.) Written under the lock, which
    // serialises the writers: a plain store, not a locked add. It publishes nothing.
    let started = inner.app_proposals.load(Ordering::Relaxed);
    inner.app_proposals.store(started.wrapping_add(1), Ordering::Relaxed);
    // A proposal that waits on other threads (a new leader's permission round, which
    // the background threads serve) gives the CPU up as the helper thread would, after
    // spinning a while: on two vCPUs a spinning proposer kept a new leader's background
    // thread from running for milliseconds. With dedicated threads it spins.
    let mut idle_since = None;
    loop {
        // The first poll takes the time read for the submission, a moment old: on
        // shared memory a proposal is usually done in that poll, and a clock read costs
        // 30 to 40 ns on a virtual machine, a few per cent of a proposal (the plane's
        // timeouts are microseconds and more).
        let busy = plane.poll(now_ns, Poller::Application);
        if plane.driver.take_outcomes(outcomes) {
            return;
        }
        if inner.stop.load(Ordering::Acquire) {
            plane.driver.shut_down();
        }
        pace(&inner.idle, &mut idle_since, busy);
        now_ns = inner.now_ns();
    }
}

/// Starts one of the replica's threads, pinned to `cpu` if one is given. The thread pins
/// itself and says how that went before running `body`, and the caller waits for it: a CPU the
/// kernel refuses is an error of [`Replica::start`], not a thread that quietly runs elsewhere.
fn spawn_pinned(
    name: String,
    role: &str,
    cpu: Option<usize>,
    body: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>, StartError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let handle = std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            // Woken threads (a permission request, a crash notice) should run within a short
            // slice of whatever spins on their core, and spinning ones hand it over as soon.
            let _ = mu_cpu::request_slice_ns(mu_cpu::SLICE_NS_MIN);
            let pinned = cpu.map_or(Ok(()), mu_cpu::pin_to);
            let go = pinned.is_ok();
            let _ = tx.send(pinned);
            if go {
                body();
            }
        })
        .map_err(|e| StartError::Other(format!("starting the {role} thread: {e}")))?;
    let refused = match rx.recv() {
        Ok(Ok(())) => return Ok(handle),
        Ok(Err(e)) => e,
        Err(_) => "it ended before it could say".to_string(),
    };
    let _ = handle.join();
    Err(StartError::Config(ConfigError::Cpus(format!(
        "the {role} thread: {refused} (this thread may run on cpus {})",
        mu_cpu::cpu_list(&mu_cpu::allowed_cpus())
    ))))
}

/// Direct mode: the application's turn at the plane. Announced, so that the helper stops taking
/// the lock, and waited for by spinning first rather than asleep in the kernel: a sleeping
/// thread runs again only once its CPU is woken, which on a virtual machine whose idle CPUs
/// halt takes tens of microseconds (the shm fabric's liveness thread, asleep, delayed the
/// detection of a kill by about 40 µs on a 16-vCPU one: `BENCHMARKS.md`).
///
/// `None` once the lock is poisoned: a panic left the plane half way through a poll, and the
/// replica has stopped ([`Inner::fail`]).
fn app_lock_plane<F: Fabric>(inner: &Inner<F>) -> Option<MutexGuard<'_, Option<Plane<F>>>> {
    let poisoned = || {
        inner.fail("the replication plane, under an application's call,", None);
        None
    };
    match inner.plane.try_lock() {
        Ok(guard) => return Some(guard),
        Err(std::sync::TryLockError::Poisoned(_)) => return poisoned(),
        Err(std::sync::TryLockError::WouldBlock) => {}
    }
    inner.app_waiting.store(true, Ordering::Release);
    let since = Instant::now();
    let guard = loop {
        match inner.plane.try_lock() {
            Ok(guard) => break Some(guard),
            Err(std::sync::TryLockError::Poisoned(_)) => break None,
            Err(std::sync::TryLockError::WouldBlock) => {
                Backoff::FAST_PATH.pause(since.elapsed().as_nanos() as u64)
            }
        }
    };
    inner.app_waiting.store(false, Ordering::Release);
    guard.or_else(poisoned)
}

/// Handover mode: the replication thread owns the plane and serves the mailbox.
fn handover_loop<F: Fabric>(inner: &Inner<F>, mut plane: Plane<F>) {
    let mailbox = &inner.mailbox;
    let mut idle_since: Option<Instant> = None;
    let mut proposing = false;
    while !inner.stop.load(Ordering::Acquire) {
        let now_ns = inner.now_ns();
        let mut busy = false;
        if !proposing && mailbox.state.load(Ordering::Acquire) == SUBMITTED {
            busy = true;
            let submitted = match lock(&mailbox.change).take() {
                Some(change) => plane.driver.submit_change(change, now_ns),
                None => plane.driver.submit(lock(&mailbox.requests).iter(), now_ns),
            };
            match submitted {
                Ok(()) => proposing = true,
                Err(e) => fail_all(mailbox, e),
            }
        }
        busy |= plane.poll(now_ns, Poller::Replication);
        if proposing {
            answer_if_done(mailbox, &mut plane.driver, &mut proposing);
        }
        pace(&inner.idle, &mut idle_since, busy || proposing);
    }
    plane.driver.shut_down();
    answer_if_done(mailbox, &mut plane.driver, &mut proposing);
    if mailbox.state.load(Ordering::Acquire) == SUBMITTED {
        fail_all(mailbox, ProposeError::ShuttingDown);
    }
}

fn answer_if_done<F: Fabric>(
    mailbox: &Mailbox,
    driver: &mut ReplicationPlane<F>,
    proposing: &mut bool,
) {
    if driver.outcomes_ready() {
        driver.take_outcomes(&mut lock(&mailbox.outcomes));
        *proposing = false;
        mailbox.state.store(DONE, Ordering::Release);
    }
}

/// Answers every request in the mailbox with `e` and hands the outcomes to the caller.
fn fail_all(mailbox: &Mailbox, e: ProposeError) {
    let count = lock(&mailbox.requests).len();
    {
        let mut outcomes = lock(&mailbox.outcomes);
        outcomes.clear();
        outcomes.extend((0..count).map(|_| Err(e.clone())));
    }
    mailbox.state.store(DONE, Ordering::Release);
}

/// Direct mode: while the application is not proposing, keep the plane going (replayer, leader
/// changes, a new leader's permission round, Velos's prepares ahead).
///
/// While the application proposes, its thread drives the plane, and the helper stands off: it
/// neither polls nor tries the lock until it has seen no new proposal for [`APP_ACTIVE_NS`]
/// (checked after each sleep of 50 µs, which the kernel stretches: about 110 µs at the median
/// on a 2-vCPU virtual machine, so the plane can go about 250 µs without a poll after the
/// application's last proposal). A helper that took the lock in the moment between two proposals made the
/// next one wait for its poll and then pull the plane's state back to the application's core.
/// With Velos that happened on every proposal: the helper's poll always had work (preparing
/// the next index ahead), so it never backed off, and on 16 vCPUs Velos's median proposal took
/// 3.5 to 5 times Mu's (`BENCHMARKS.md`). Standing off moves the prepares ahead onto the
/// application's thread, a whole window at once when it runs out: one proposal in
/// `prepare_ahead + 1` carries a prepare round.
fn direct_helper_loop<F: Fabric>(inner: &Inner<F>) {
    let mut idle_since: Option<Instant> = None;
    let mut proposals_seen = inner.app_proposals.load(Ordering::Relaxed);
    // When the helper last saw the application start a proposal.
    let mut app_seen: Option<Instant> = None;
    // When the helper last found the application holding the plane or waiting for it.
    let mut held_seen: Option<Instant> = None;
    while !inner.stop.load(Ordering::Acquire) {
        let proposals = inner.app_proposals.load(Ordering::Relaxed);
        if proposals != proposals_seen {
            proposals_seen = proposals;
            app_seen = Some(Instant::now());
        }
        if app_seen.is_some_and(|t| t.elapsed().as_nanos() < u128::from(APP_ACTIVE_NS)) {
            // Asleep rather than spinning: a spinning helper would read the proposal counter's
            // line out of the application's cache on every check.
            idle_since = None;
            std::thread::sleep(Duration::from_micros(Backoff::FAST_PATH.park_us));
            continue;
        }
        // The application waiting for the lock, or holding it, polls itself.
        let plane = if inner.app_waiting.load(Ordering::Acquire) {
            None
        } else {
            match inner.plane.try_lock() {
                Ok(guard) => Some(guard),
                // The application's thread panicked inside the plane (the commit handler, say):
                // the plane and the state machine are half way through a poll, and must not be
                // polled again.
                Err(std::sync::TryLockError::Poisoned(_)) => {
                    inner.fail("the replication plane, under an application's call,", None);
                    break;
                }
                Err(std::sync::TryLockError::WouldBlock) => None,
            }
        };
        let busy = match plane {
            Some(mut guard) => {
                guard.as_mut().is_some_and(|p| p.poll(inner.now_ns(), Poller::Helper))
            }
            None => {
                held_seen = Some(Instant::now());
                false
            }
        };
        // A proposal longer than the stand-off (a slow fabric, a new leader's permission
        // round): a helper that kept trying the lock would take its cache line from the
        // application every time. So it backs off then, even on a core of its own.
        let idle = match held_seen {
            Some(t) if t.elapsed().as_nanos() < u128::from(Backoff::FAST_PATH.yield_ns) => {
                &Backoff::FAST_PATH
            }
            _ => &inner.idle,
        };
        pace(idle, &mut idle_since, busy);
    }
    // Not after a panic in the plane (a poisoned lock): its state is half way through a poll.
    if let Ok(mut plane) = inner.plane.lock() {
        if let Some(plane) = plane.as_mut() {
            plane.driver.shut_down();
        }
    }
}

/// Direct mode: how long after it last saw the application start a proposal the helper leaves
/// the plane to it. Far above the gap between back-to-back proposals (a microsecond); what the
/// helper does between proposals can wait that long (Velos's empty entry after 200 µs idle is
/// late by at most the stand-off, heartbeat periods are a millisecond).
const APP_ACTIVE_NS: u64 = 50_000;

/// The replication loop's polling plan: spin while there is work, then back off as `idle` says
/// ([`Backoff::FAST_PATH`], or never with dedicated threads).
fn pace(idle: &Backoff, idle_since: &mut Option<Instant>, busy: bool) {
    if busy {
        *idle_since = None;
        return;
    }
    let since = *idle_since.get_or_insert_with(Instant::now);
    idle.pause(since.elapsed().as_nanos() as u64);
}

/// With dedicated threads, the background thread's shortest time between two idle polls: a
/// crash notification or a permission request waits at most this much longer to be seen.
const DEDICATED_POLL_GAP_NS: u64 = 1_000;

/// The background thread: poll, and between polls wait no longer than `max_wait_ns`, or (with
/// `dedicated` threads) spin for [`DEDICATED_POLL_GAP_NS`].
fn background_loop<F: Fabric>(
    inner: &Inner<F>,
    driver: &mut crate::background::BackgroundDriver<F>,
    max_wait_ns: u64,
    dedicated: bool,
) {
    let mut last_leader = inner.shared.leader();
    while !inner.stop.load(Ordering::Acquire) {
        let now_ns = inner.now_ns();
        // Read before the poll looks at memory: a ring during the poll is not slept through.
        let rung = driver.fabric().doorbell();
        let busy = driver.poll(now_ns);
        if inner.shared.refused.load(Ordering::Acquire) {
            // A peer refused this run as restarted without rejoining (the status's `failure`
            // says so): it stops, as after a failure, and later calls fail with `ShuttingDown`.
            // It follows no leader from then on (`Inner::follow_no_leader`).
            inner.stop.store(true, Ordering::Release);
            break;
        }
        let leader = inner.shared.leader();
        if leader != last_leader {
            last_leader = leader;
            inner.tell_leader(leader);
        }
        if dedicated {
            // Spin, but poll no more than once per DEDICATED_POLL_GAP_NS while idle: every poll
            // reads words the replication thread writes (the log's head), and each read costs
            // that thread a cache miss on its next write, on its proposing path.
            while !busy && inner.now_ns() < now_ns + DEDICATED_POLL_GAP_NS {
                std::hint::spin_loop();
            }
            continue;
        }
        if busy {
            std::thread::yield_now();
            continue;
        }
        let wait_ns = driver.next_deadline_ns().saturating_sub(inner.now_ns()).min(max_wait_ns);
        if wait_ns > 20_000 {
            // Until the next deadline, or until a peer's permission request or grant rings
            // (`Fabric::ring_doorbell`): a permission round costs a wake-up, not a sleep. Every
            // timeout is the driver's own and as long as before; a ring only makes it look
            // sooner.
            driver.fabric().wait_doorbell(rung, wait_ns);
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A decided batch whose framing is broken is applied by no replica, and none stops on it:
    /// stopping would stop every replica at the same entry.
    #[test]
    fn a_malformed_batch_is_applied_by_nobody_and_stops_nothing() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let handler = CommitHandler(move |index, request: &[u8]| {
            log.lock().unwrap().push((index, request.to_vec()));
        });
        let mut app = Application(Box::new(handler), NodeId(0));
        let mut good = Vec::new();
        mu_log::batch::push(&mut good, b"one");
        mu_log::batch::push(&mut good, b"two");
        app.apply(7, EntryKind::Batch, &good);
        // The second item claims more bytes than there are.
        let mut bad = Vec::new();
        mu_log::batch::push(&mut bad, b"three");
        bad.extend_from_slice(&100u32.to_le_bytes());
        bad.extend_from_slice(b"four");
        app.apply(8, EntryKind::Batch, &bad);
        app.apply(9, EntryKind::Request, b"five");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [(7, b"one".to_vec()), (7, b"two".to_vec()), (9, b"five".to_vec())],
            "nothing of entry 8"
        );
    }
}
