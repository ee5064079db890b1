//! Model checking of the guard that makes revocation a barrier on the shared-memory fabric.
//!
//! # What is modelled
//!
//! `mu_fabric_shm::guard` is written against the `MemoryModel`/`AtomicWord` traits. This file
//! implements them over `shuttle::sync::atomic::AtomicU64` and `shuttle::sync::atomic::fence`
//! (through a local newtype, [`Word`], because of the orphan rule), so the **real** `Slot` code —
//! `publish`, `still_in_flight`, `enter`, `exit`, `writer_start_seq`, `move_to_error` — runs under
//! the shuttle model checker, which drives the threads through many interleavings (random and
//! PCT schedulers). Every shuttle atomic access is a scheduling point, so a writer can be
//! preempted between any two of its word stores, and between its check and its copy.
//!
//! The target's region is a few shuttle atomics that the writer fills word by word, one separate
//! store per word, with a value particular to the operation; the copy is bracketed by `enter` and
//! `exit` exactly as the fabric brackets its `memcpy`.
//!
//! # The invariant (DESIGN.md, "Revocation is a barrier")
//!
//! Once a revoke has returned — `publish` of an ACL without WRITE, then waiting while
//! `still_in_flight`, or on the slow path killing the writer and waiting for its death — no store
//! from that writer lands in the region. Each scenario snapshots the region when the revoke
//! returns and checks that (a) no writer store happens after that point (checked at every store,
//! exact because shuttle executes sequentially consistently), and (b) after the writer has been
//! joined the region still equals the snapshot. Every barrier failure panics with a message
//! containing `BARRIER VIOLATED`.
//!
//! # Scenarios
//!
//! 1. `revocation_is_a_barrier_fast_path`: one writer doing several operations (one of them
//!    stalled mid-copy), one revoker that publishes and waits while the writer is in flight.
//!    Also `revocation_is_a_barrier_exhaustive_small`: a lean version of the same handshake
//!    (one operation of two words, a revoker polling at most twice) explored exhaustively by
//!    shuttle's DFS scheduler, every interleaving rather than a sample.
//! 2. `stopped_writer_is_fenced_by_kill`: the revoker's wait is bounded; past the bound it "kills"
//!    the writer (the writer checks a `killed` flag before each store and stops dead, without
//!    `exit`, like SIGKILL between two instructions) and waits for its death. Then a new writer
//!    incarnation starts from `writer_start_seq` and is refused until the owner binds it.
//! 3. Mutations — the model must be able to fail: a writer that checks the ACL *before*
//!    announcing itself in flight, a revoker that does not wait for the writer in flight, and
//!    `move_to_error` used on its own as a revoke. Each is run with fixed seeds (random and PCT
//!    schedulers) and the test asserts that shuttle **does** find a barrier violation, and that
//!    the real guard, run with the same seeds and iterations, does not; the first two are also
//!    found by the exhaustive search (`mutations_are_caught_exhaustively`).
//! 4. `revoking_one_channel_leaves_the_other_alone`: two writers into one owner on two
//!    channels; revoking one neither refuses nor waits for the other.
//!    `move_to_error_racing_publish_is_never_torn`: `move_to_error` racing `publish` only ever
//!    leaves valid ACL words, never loses a publish, and never resurrects an older ACL.
//!
//! # What shuttle does not check
//!
//! Shuttle explores interleavings under **sequential consistency**: it treats every ordering as
//! `SeqCst` and its `fence` is a no-op. It therefore cannot catch a bug caused by weak memory —
//! weakening the orderings in `guard.rs` would still pass here. On real hardware the handshake
//! holds because each side's store and its following load of the *other* word cannot be reordered:
//! the writer stores its odd `inflight` and loads `acl` both with `SeqCst` (two operations in the
//! single total order of `SeqCst` operations; on x86 the store is an `xchg`), and the revoker
//! stores `acl` with `SeqCst`, then issues a `SeqCst` fence before loading `inflight`. By the
//! C++/Rust rules for `SeqCst` operations and fences, at least one of the two loads sees the other
//! side's store, which is exactly the SC behaviour this model assumes. Without them, both stores
//! could sit in store buffers while both loads read old values: the writer would copy under the
//! old grant while the revoker saw nobody in flight. The release store in `exit` paired with the
//! acquire load in `still_in_flight` is what orders the copy before the revoker's return; under
//! SC it is implied.
//!
//! # Running
//!
//! ```text
//! cargo test -p mu-fabric-shm --test guard_model
//! ```
//!
//! The random-scheduler runs draw a fresh seed each time; a failure prints the failing schedule
//! (and the seed) for `shuttle::replay` / `SHUTTLE_RANDOM_SEED`. The mutation checks use fixed
//! seeds so that they are deterministic.

use mu_fabric::{Access, QpState};
use mu_fabric_shm::guard::{Acl, AtomicWord, MemoryModel, Refusal, Slot};
use shuttle::scheduler::{DfsScheduler, PctScheduler, RandomScheduler, Scheduler};
use shuttle::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use shuttle::{thread, Config, FailurePersistence, Runner};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
use std::sync::Arc;

// ---- the memory model: shuttle's atomics --------------------------------------------------------

/// A shuttle atomic word. Shared (`Arc`) so that a test can keep a handle on the raw `acl` or
/// `inflight` word of a `Slot` and inspect bits that `Slot`'s API decodes away.
#[derive(Clone)]
struct Word {
    value: Arc<AtomicU64>,
}

impl Word {
    fn new(value: u64) -> Self {
        Word { value: Arc::new(AtomicU64::new(value)) }
    }
    fn raw(&self) -> u64 {
        self.value.load(Ordering::SeqCst)
    }
}

impl AtomicWord for Word {
    fn load(&self, order: Ordering) -> u64 {
        self.value.load(order)
    }
    fn store(&self, value: u64, order: Ordering) {
        self.value.store(value, order)
    }
    fn compare_exchange(&self, current: u64, new: u64) -> Result<u64, u64> {
        self.value.compare_exchange(current, new, Ordering::SeqCst, Ordering::SeqCst)
    }
}

/// The guard's atomics, modelled by shuttle.
struct Shuttle;

impl MemoryModel for Shuttle {
    type Word = Word;
    fn fence_seq_cst() {
        fence(Ordering::SeqCst);
    }
}

type ModelSlot = Slot<Shuttle>;

/// A slot in the reset state, and handles on its raw `acl` and `inflight` words.
fn new_slot() -> (ModelSlot, Word, Word) {
    let acl = Word::new(0);
    let inflight = Word::new(0);
    (Slot::new(acl.clone(), inflight.clone()), acl, inflight)
}

// ---- running the checker ------------------------------------------------------------------------

/// Random iterations per positive scenario.
const RANDOM_ITERATIONS: usize = 20_000;
/// PCT iterations per positive scenario, and PCT's bug depth.
const PCT_ITERATIONS: usize = 20_000;
const PCT_DEPTH: usize = 3;

fn config(failure_persistence: FailurePersistence) -> Config {
    let mut config = Config::new();
    // The guard uses Relaxed/Acquire/Release on purpose; shuttle treats them as SeqCst (see the
    // module comment), and says so on every run unless silenced.
    config.silence_warnings = true;
    config.failure_persistence = failure_persistence;
    config
}

fn run_with<S: Scheduler + 'static>(scheduler: S, f: impl Fn() + Send + Sync + 'static) {
    Runner::new(scheduler, config(FailurePersistence::Print)).run(f);
}

/// Runs `f` under the random scheduler (a fresh seed each run) and under PCT: the equivalent of
/// `shuttle::check_random` followed by `shuttle::check_pct`, without the ordering warnings.
fn check(f: impl Fn() + Send + Sync + Clone + 'static) {
    run_with(RandomScheduler::new(RANDOM_ITERATIONS), f.clone());
    run_with(PctScheduler::new(PCT_DEPTH, PCT_ITERATIONS), f);
}

/// Runs `f` with the given (deterministic) scheduler and returns the panic message of the first
/// failing execution, if any.
fn find_failure<S: Scheduler + 'static>(
    scheduler: S,
    f: impl Fn() + Send + Sync + 'static,
) -> Option<String> {
    let runner = Runner::new(scheduler, config(FailurePersistence::None));
    match catch_unwind(AssertUnwindSafe(move || runner.run(f))) {
        Ok(_) => None,
        Err(payload) => Some(
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "<non-string panic>".to_string()),
        ),
    }
}

const MUTATION_SEED: u64 = 0x5eed_0f9a_4d00;
const MUTATION_ITERATIONS: usize = 2_000;

/// Asserts that the checker finds a barrier violation in `f`, with the random scheduler and with
/// PCT (fixed seeds), and returns how it failed and after how many executions.
fn assert_violation_found(f: impl Fn() + Send + Sync + Clone + 'static) -> String {
    let mut report = Vec::new();
    for name in ["random", "pct"] {
        let executions = Arc::new(AtomicUsize::new(0));
        let counted = {
            let (f, executions) = (f.clone(), executions.clone());
            move || {
                executions.fetch_add(1, StdOrdering::Relaxed);
                f()
            }
        };
        let found = if name == "random" {
            find_failure(
                RandomScheduler::new_from_seed(MUTATION_SEED, MUTATION_ITERATIONS),
                counted,
            )
        } else {
            find_failure(
                PctScheduler::new_from_seed(MUTATION_SEED, PCT_DEPTH, MUTATION_ITERATIONS),
                counted,
            )
        };
        let message = found.unwrap_or_else(|| {
            panic!(
                "the {name} scheduler found no violation in a broken protocol in \
                 {MUTATION_ITERATIONS} executions: the model is blind"
            )
        });
        assert!(
            message.contains("BARRIER VIOLATED"),
            "the {name} scheduler failed, but not on the barrier invariant: {message}"
        );
        let n = executions.load(StdOrdering::Relaxed);
        report.push(format!("{name} scheduler, execution {n}: {message}"));
    }
    report.join("\n")
}

/// Asserts that the same seeded schedulers find nothing wrong with `f` (the control for a
/// mutation check: the failure comes from the mutation, not from the harness).
fn assert_no_violation_with_mutation_seeds(f: impl Fn() + Send + Sync + Clone + 'static) {
    let random =
        find_failure(RandomScheduler::new_from_seed(MUTATION_SEED, MUTATION_ITERATIONS), f.clone());
    assert_eq!(random, None, "the real guard failed under the random scheduler");
    let pct =
        find_failure(PctScheduler::new_from_seed(MUTATION_SEED, PCT_DEPTH, MUTATION_ITERATIONS), f);
    assert_eq!(pct, None, "the real guard failed under PCT");
}

// ---- the region and the actors' common pieces ---------------------------------------------------

/// Words in the region: several separate stores per copy, so a copy can be interrupted.
const WORDS: usize = 3;
/// Operations each writer attempts.
const OPS: u64 = 4;
/// The operation during which the writer stalls mid-copy (a SIGSTOP, a long deschedule).
const STALLED_OP: u64 = 2;
/// How many times the stalled writer yields between its first and second word.
const STALL: usize = 4;

const WRITER: u32 = 7;
const OTHER_WRITER: u32 = 9;
const NEW_INCARNATION: u32 = 8;

/// The target's memory that the writer copies into.
struct Region {
    words: [AtomicU64; WORDS],
}

impl Region {
    fn new() -> Self {
        Region { words: std::array::from_fn(|_| AtomicU64::new(0)) }
    }

    fn snapshot(&self) -> [u64; WORDS] {
        std::array::from_fn(|i| self.words[i].load(Ordering::SeqCst))
    }
}

/// The value operation `op` of writer `who` writes into every word.
fn value(who: u32, op: u64) -> u64 {
    (u64::from(who) << 32) | op
}

fn ready_to_send(peer_incarnation: u32, access: Access) -> Acl {
    Acl { peer_incarnation, state: QpState::ReadyToSend, access }
}

/// One store of a copy. `revoked` is set by the revoker when its revoke has returned; shuttle runs
/// sequentially consistently, so a store issued after seeing it set really lands after the
/// revoke returned.
fn store_word(region: &Region, i: usize, v: u64, revoked: &AtomicBool) {
    let after_revoke = revoked.load(Ordering::SeqCst);
    region.words[i].store(v, Ordering::SeqCst);
    assert!(!after_revoke, "BARRIER VIOLATED: word {i} := {v:#x} stored after the revoke returned");
}

/// Counts how often the interesting paths were taken, to show the scenarios exercise them.
#[derive(Default)]
struct Coverage {
    executions: AtomicUsize,
    revoker_saw_writer_in_flight: AtomicUsize,
    writer_refused: AtomicUsize,
    writer_killed: AtomicUsize,
    writer_killed_mid_copy: AtomicUsize,
    stale_in_flight_after_kill: AtomicUsize,
    revoker_gave_up: AtomicUsize,
}

impl Coverage {
    const fn new() -> Self {
        Coverage {
            executions: AtomicUsize::new(0),
            revoker_saw_writer_in_flight: AtomicUsize::new(0),
            writer_refused: AtomicUsize::new(0),
            writer_killed: AtomicUsize::new(0),
            writer_killed_mid_copy: AtomicUsize::new(0),
            stale_in_flight_after_kill: AtomicUsize::new(0),
            revoker_gave_up: AtomicUsize::new(0),
        }
    }
    fn bump(counter: &AtomicUsize) {
        counter.fetch_add(1, StdOrdering::Relaxed);
    }
    fn get(counter: &AtomicUsize) -> usize {
        counter.load(StdOrdering::Relaxed)
    }
}

// ---- the protocol under test, and broken variants of it -----------------------------------------

/// The guard as the scenarios use it: the real `Slot`, or a deliberately broken protocol.
trait Guard: Send + Sync + 'static {
    fn create() -> Self;
    fn publish(&self, acl: Acl) -> Option<u64>;
    fn still_in_flight(&self, seq: u64) -> bool;
    fn writer_start_seq(&self) -> u64;
    fn enter(&self, seq: &mut u64, incarnation: u32, needed: Access) -> Result<(), Refusal>;
    fn exit(&self, seq: &mut u64, incarnation: u32);
}

impl Guard for ModelSlot {
    fn create() -> Self {
        new_slot().0
    }
    fn publish(&self, acl: Acl) -> Option<u64> {
        Slot::publish(self, acl)
    }
    fn still_in_flight(&self, seq: u64) -> bool {
        Slot::still_in_flight(self, seq)
    }
    fn writer_start_seq(&self) -> u64 {
        Slot::writer_start_seq(self)
    }
    fn enter(&self, seq: &mut u64, incarnation: u32, needed: Access) -> Result<(), Refusal> {
        Slot::enter(self, seq, incarnation, needed)
    }
    fn exit(&self, seq: &mut u64, incarnation: u32) {
        Slot::exit(self, seq, incarnation)
    }
}

fn refusal(acl: Acl, incarnation: u32, needed: Access) -> Option<Refusal> {
    if acl.peer_incarnation != incarnation {
        Some(Refusal::WrongIncarnation)
    } else if !acl.state.accepts_remote() || !acl.access.contains(needed) {
        Some(Refusal::Denied)
    } else {
        None
    }
}

/// MUTATION: the writer checks the ACL *before* it announces itself in flight. The revoker is the
/// correct one. Between the writer's check and its announcement, a revoke can publish, see
/// nobody in flight and return; the writer then copies under a grant that no longer exists.
struct CheckBeforeAnnounce {
    acl: AtomicU64,
    inflight: AtomicU64,
}

impl Guard for CheckBeforeAnnounce {
    fn create() -> Self {
        CheckBeforeAnnounce { acl: AtomicU64::new(0), inflight: AtomicU64::new(0) }
    }
    fn publish(&self, acl: Acl) -> Option<u64> {
        self.acl.store(acl.pack(), Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let seq = self.inflight.load(Ordering::Acquire);
        (seq % 2 == 1).then_some(seq)
    }
    fn still_in_flight(&self, seq: u64) -> bool {
        self.inflight.load(Ordering::Acquire) == seq
    }
    fn writer_start_seq(&self) -> u64 {
        let seq = self.inflight.load(Ordering::Acquire);
        seq + 2 - seq % 2
    }
    fn enter(&self, seq: &mut u64, incarnation: u32, needed: Access) -> Result<(), Refusal> {
        let acl = Acl::unpack(self.acl.load(Ordering::SeqCst)); // BUG: checked first...
        self.inflight.store(*seq + 1, Ordering::SeqCst); // ...announced second.
        fence(Ordering::SeqCst);
        match refusal(acl, incarnation, needed) {
            None => Ok(()),
            Some(r) => {
                self.exit(seq, incarnation);
                Err(r)
            }
        }
    }
    fn exit(&self, seq: &mut u64, _incarnation: u32) {
        *seq += 2;
        self.inflight.store(*seq, Ordering::Release);
    }
}

/// MUTATION: the real writer side, but a revoker that publishes and never waits for the
/// operation it saw in flight.
struct RevokerDoesNotWait(ModelSlot);

impl Guard for RevokerDoesNotWait {
    fn create() -> Self {
        RevokerDoesNotWait(new_slot().0)
    }
    fn publish(&self, acl: Acl) -> Option<u64> {
        let _ = self.0.publish(acl); // BUG: the in-flight sequence is dropped.
        None
    }
    fn still_in_flight(&self, seq: u64) -> bool {
        self.0.still_in_flight(seq)
    }
    fn writer_start_seq(&self) -> u64 {
        self.0.writer_start_seq()
    }
    fn enter(&self, seq: &mut u64, incarnation: u32, needed: Access) -> Result<(), Refusal> {
        self.0.enter(seq, incarnation, needed)
    }
    fn exit(&self, seq: &mut u64, incarnation: u32) {
        self.0.exit(seq, incarnation)
    }
}

// ---- scenario 1: the fast path ------------------------------------------------------------------

/// One writer doing `OPS` operations (operation `STALLED_OP` stalls mid-copy), one revoker taking
/// WRITE away and waiting for the operation it saw in flight.
fn barrier_fast_path<G: Guard>(coverage: &'static Coverage, ops: u64) {
    Coverage::bump(&coverage.executions);
    let guard = Arc::new(G::create());
    // Nobody is attached yet, so there is nothing to wait for.
    assert_eq!(guard.publish(ready_to_send(WRITER, Access::READ_WRITE)), None);
    let region = Arc::new(Region::new());
    let published = Arc::new(AtomicBool::new(false));
    let revoked = Arc::new(AtomicBool::new(false));

    let writer = thread::spawn({
        let (guard, region) = (guard.clone(), region.clone());
        let (published, revoked) = (published.clone(), revoked.clone());
        move || {
            let mut seq = guard.writer_start_seq();
            assert_eq!(seq % 2, 0, "a writer starts on an even sequence number");
            let mut last_admitted = 0;
            let mut refused = false;
            for op in 1..=ops {
                let after_publish = published.load(Ordering::SeqCst);
                match guard.enter(&mut seq, WRITER, Access::WRITE) {
                    Ok(()) => {
                        assert!(
                            !after_publish,
                            "BARRIER VIOLATED: operation {op} admitted after the revoke was \
                             published"
                        );
                        assert!(!refused, "operation {op} admitted after an earlier refusal");
                        for i in 0..WORDS {
                            if op == STALLED_OP && i == 1 {
                                for _ in 0..STALL {
                                    thread::yield_now();
                                }
                            }
                            store_word(&region, i, value(WRITER, op), &revoked);
                        }
                        guard.exit(&mut seq, WRITER);
                        last_admitted = op;
                    }
                    Err(r) => {
                        assert_eq!(r, Refusal::Denied, "the writer is bound, only denied");
                        refused = true;
                        Coverage::bump(&coverage.writer_refused);
                    }
                }
                assert_eq!(seq % 2, 0, "nothing is in flight between operations");
            }
            last_admitted
        }
    });

    let revoker = thread::spawn({
        let (guard, region) = (guard.clone(), region.clone());
        move || {
            let seen = guard.publish(ready_to_send(WRITER, Access::READ));
            published.store(true, Ordering::SeqCst);
            if let Some(seq) = seen {
                Coverage::bump(&coverage.revoker_saw_writer_in_flight);
                assert_eq!(seq % 2, 1);
                while guard.still_in_flight(seq) {
                    thread::yield_now();
                }
            }
            // The revoke has returned.
            revoked.store(true, Ordering::SeqCst);
            region.snapshot()
        }
    });

    let snapshot = revoker.join().unwrap();
    let last_admitted = writer.join().unwrap();
    let fin = region.snapshot();
    assert_eq!(fin, snapshot, "BARRIER VIOLATED: the region changed after the revoke returned");
    let expected = if last_admitted == 0 { 0 } else { value(WRITER, last_admitted) };
    assert_eq!(fin, [expected; WORDS], "the region holds the last admitted operation, whole");
}

static FAST_PATH: Coverage = Coverage::new();

#[test]
fn revocation_is_a_barrier_fast_path() {
    check(|| barrier_fast_path::<ModelSlot>(&FAST_PATH, OPS));
    let c = &FAST_PATH;
    println!(
        "fast path: {} executions, revoker saw the writer in flight {} times, writer refused {} \
         times",
        Coverage::get(&c.executions),
        Coverage::get(&c.revoker_saw_writer_in_flight),
        Coverage::get(&c.writer_refused),
    );
    assert!(Coverage::get(&c.revoker_saw_writer_in_flight) > 0, "the wait was never exercised");
    assert!(Coverage::get(&c.writer_refused) > 0, "the refusal was never exercised");
}

/// The handshake alone, lean enough for shuttle's exhaustive (DFS) scheduler: a writer doing
/// `ops` operations of two words each, and a revoker that polls `still_in_flight` at most
/// `polls` times (the wait must be bounded for the search to be finite). An execution in which
/// the revoker gives up proves nothing and is only counted; in every other one the region must
/// not change after the revoke returned.
fn handshake<G: Guard>(coverage: &'static Coverage, ops: u64, polls: usize) {
    Coverage::bump(&coverage.executions);
    let guard = Arc::new(G::create());
    guard.publish(ready_to_send(WRITER, Access::READ_WRITE));
    let region = Arc::new(Region::new());
    let writer = thread::spawn({
        let (guard, region) = (guard.clone(), region.clone());
        move || {
            let mut seq = guard.writer_start_seq();
            let mut last = 0;
            for op in 1..=ops {
                if guard.enter(&mut seq, WRITER, Access::WRITE).is_ok() {
                    for word in &region.words[..2] {
                        word.store(value(WRITER, op), Ordering::SeqCst);
                    }
                    guard.exit(&mut seq, WRITER);
                    last = op;
                }
            }
            last
        }
    });
    let returned = match guard.publish(ready_to_send(WRITER, Access::READ)) {
        None => true,
        Some(seq) => {
            Coverage::bump(&coverage.revoker_saw_writer_in_flight);
            (0..polls).any(|_| !guard.still_in_flight(seq))
        }
    };
    let snapshot: [u64; 2] = std::array::from_fn(|i| region.words[i].load(Ordering::SeqCst));
    let last = writer.join().unwrap();
    if !returned {
        Coverage::bump(&coverage.revoker_gave_up);
        return;
    }
    let fin = region.snapshot();
    assert_eq!(
        fin[..2],
        snapshot,
        "BARRIER VIOLATED: the region changed after the revoke returned"
    );
    let v = if last == 0 { 0 } else { value(WRITER, last) };
    assert_eq!(fin, [v, v, 0], "the last admitted operation, whole");
}

const EXHAUSTIVE_OPS: u64 = 1;
const EXHAUSTIVE_POLLS: usize = 2;

static EXHAUSTIVE: Coverage = Coverage::new();

/// Every interleaving (under SC) of the real guard's handshake, explored by DFS rather than
/// sampled.
#[test]
fn revocation_is_a_barrier_exhaustive_small() {
    let c = &EXHAUSTIVE;
    Runner::new(DfsScheduler::new(None, false), config(FailurePersistence::Print))
        .run(|| handshake::<ModelSlot>(&EXHAUSTIVE, EXHAUSTIVE_OPS, EXHAUSTIVE_POLLS));
    println!(
        "exhaustive: {} executions, revoker saw the writer in flight in {}, gave up in {}",
        Coverage::get(&c.executions),
        Coverage::get(&c.revoker_saw_writer_in_flight),
        Coverage::get(&c.revoker_gave_up),
    );
    assert!(
        Coverage::get(&c.revoker_saw_writer_in_flight) > Coverage::get(&c.revoker_gave_up),
        "the wait never succeeded"
    );
}

static EXHAUSTIVE_MUTATIONS: Coverage = Coverage::new();

/// The exhaustive search finds both broken protocols.
#[test]
fn mutations_are_caught_exhaustively() {
    let dfs = || DfsScheduler::new(None, false);
    let check_before_announce = find_failure(dfs(), || {
        handshake::<CheckBeforeAnnounce>(&EXHAUSTIVE_MUTATIONS, EXHAUSTIVE_OPS, EXHAUSTIVE_POLLS)
    });
    let no_wait = find_failure(dfs(), || {
        handshake::<RevokerDoesNotWait>(&EXHAUSTIVE_MUTATIONS, EXHAUSTIVE_OPS, EXHAUSTIVE_POLLS)
    });
    for (name, found) in [("check before announce", check_before_announce), ("no wait", no_wait)] {
        let message = found.unwrap_or_else(|| panic!("DFS missed the mutation \"{name}\""));
        assert!(message.contains("BARRIER VIOLATED"), "{name}: {message}");
    }
}

// ---- scenario 2: the slow path, a writer stopped in flight is killed -----------------------------

/// How many times the revoker polls `still_in_flight` before it gives up and fences the writer.
const WAIT_BOUND: usize = 3;

/// How the writer process ended.
#[derive(Debug)]
struct WriterEnd {
    /// The last operation whose copy completed.
    last_complete: u64,
    /// Killed in the middle of operation `.0`'s copy, after storing `.1` words.
    killed_mid_copy: Option<(u64, usize)>,
    /// Killed while `inflight` was odd (entered and never exited).
    died_in_flight: bool,
}

fn fenced_writer(coverage: &'static Coverage) {
    Coverage::bump(&coverage.executions);
    let (slot, _acl, inflight) = new_slot();
    let slot = Arc::new(slot);
    assert_eq!(slot.publish(ready_to_send(WRITER, Access::READ_WRITE)), None);
    let region = Arc::new(Region::new());
    let killed = Arc::new(AtomicBool::new(false));
    let dead = Arc::new(AtomicBool::new(false));
    let revoked = Arc::new(AtomicBool::new(false));

    let writer = thread::spawn({
        let (slot, region) = (slot.clone(), region.clone());
        let (killed, dead, revoked) = (killed.clone(), dead.clone(), revoked.clone());
        move || {
            // SIGKILL can land between any two instructions: the writer checks before each of its
            // own steps and, once killed, does nothing more (in particular, no `exit`).
            let die = |end: WriterEnd| {
                dead.store(true, Ordering::SeqCst); // the kernel reaps it; the revoker sees death
                end
            };
            let is_killed = || killed.load(Ordering::SeqCst);
            let mut seq = slot.writer_start_seq();
            let mut last_complete = 0;
            for op in 1..=OPS {
                if is_killed() {
                    return die(WriterEnd {
                        last_complete,
                        killed_mid_copy: None,
                        died_in_flight: false,
                    });
                }
                match slot.enter(&mut seq, WRITER, Access::WRITE) {
                    Ok(()) => {
                        for i in 0..WORDS {
                            if op == STALLED_OP && i == 1 {
                                // Stopped mid-copy (SIGSTOP, descheduled for long).
                                for _ in 0..STALL {
                                    thread::yield_now();
                                }
                            }
                            if is_killed() {
                                let killed_mid_copy = Some((op, i));
                                return die(WriterEnd {
                                    last_complete,
                                    killed_mid_copy,
                                    died_in_flight: true,
                                });
                            }
                            store_word(&region, i, value(WRITER, op), &revoked);
                        }
                        if is_killed() {
                            return die(WriterEnd {
                                last_complete: op,
                                killed_mid_copy: None,
                                died_in_flight: true,
                            });
                        }
                        slot.exit(&mut seq, WRITER);
                        last_complete = op;
                    }
                    Err(r) => {
                        assert_eq!(r, Refusal::Denied);
                        Coverage::bump(&coverage.writer_refused);
                    }
                }
            }
            // A process that exits normally is dead too.
            die(WriterEnd { last_complete, killed_mid_copy: None, died_in_flight: false })
        }
    });

    let revoker = thread::spawn({
        let (slot, region) = (slot.clone(), region.clone());
        let (killed, dead) = (killed.clone(), dead.clone());
        move || {
            let mut fenced = false;
            if let Some(seq) = slot.publish(ready_to_send(WRITER, Access::READ)) {
                Coverage::bump(&coverage.revoker_saw_writer_in_flight);
                let mut polls = 0;
                while slot.still_in_flight(seq) {
                    if polls == WAIT_BOUND {
                        // Slow path: fence the writer for good and wait for its death.
                        killed.store(true, Ordering::SeqCst);
                        while !dead.load(Ordering::SeqCst) {
                            thread::yield_now();
                        }
                        fenced = true;
                        break;
                    }
                    polls += 1;
                    thread::yield_now();
                }
            }
            revoked.store(true, Ordering::SeqCst);
            let snapshot = region.snapshot();
            (snapshot, fenced)
        }
    });

    let (snapshot, fenced) = revoker.join().unwrap();
    let end = writer.join().unwrap();
    let fin = region.snapshot();
    assert_eq!(fin, snapshot, "BARRIER VIOLATED: the region changed after the revoke returned");
    if fenced {
        Coverage::bump(&coverage.writer_killed);
    }

    // What the region holds: the last complete copy, and a prefix of the copy cut by the kill.
    let old = if end.last_complete == 0 { 0 } else { value(WRITER, end.last_complete) };
    let mut expected = [old; WORDS];
    if let Some((op, stored)) = end.killed_mid_copy {
        assert!(fenced, "only the revoker kills");
        Coverage::bump(&coverage.writer_killed_mid_copy);
        for word in expected.iter_mut().take(stored) {
            *word = value(WRITER, op);
        }
    }
    assert_eq!(fin, expected, "writer ended as {end:?}");

    // A new incarnation of the writer attaches: it starts above anything the dead one left, on an
    // even number, and is refused until the owner binds its incarnation.
    let left = inflight.raw();
    assert_eq!(left % 2 == 1, end.died_in_flight, "odd in-flight iff it died in flight");
    if end.died_in_flight {
        // The dead writer's odd sequence stays behind: any publish now reports it in flight, and
        // it never moves until a new writer enters. An owner must not wait on it (the writer is
        // fenced already).
        Coverage::bump(&coverage.stale_in_flight_after_kill);
        assert_eq!(slot.publish(slot.acl()), Some(left));
    }
    let mut seq = slot.writer_start_seq();
    assert_eq!(seq % 2, 0, "a new writer starts on an even sequence number");
    assert_eq!(
        mu_fabric_shm::guard::in_flight_incarnation(left),
        WRITER,
        "the word left behind names the dead incarnation, so nobody waits for it or fences its successor"
    );
    assert_eq!(
        slot.enter(&mut seq, NEW_INCARNATION, Access::WRITE),
        Err(Refusal::WrongIncarnation)
    );
    assert_eq!(slot.publish(ready_to_send(NEW_INCARNATION, Access::READ_WRITE)), None);
    slot.enter(&mut seq, NEW_INCARNATION, Access::WRITE).expect("bound and granted");
    for word in &region.words {
        word.store(value(NEW_INCARNATION, 1), Ordering::SeqCst);
    }
    slot.exit(&mut seq, NEW_INCARNATION);
    assert_eq!(region.snapshot(), [value(NEW_INCARNATION, 1); WORDS]);
    // ...and the old incarnation's binding is gone.
    assert_eq!(slot.acl().peer_incarnation, NEW_INCARNATION);
}

static SLOW_PATH: Coverage = Coverage::new();

#[test]
fn stopped_writer_is_fenced_by_kill() {
    check(|| fenced_writer(&SLOW_PATH));
    let c = &SLOW_PATH;
    println!(
        "slow path: {} executions, in flight at revoke {}, killed {} (mid-copy {}, stale in-flight \
         after kill {}), refused {}",
        Coverage::get(&c.executions),
        Coverage::get(&c.revoker_saw_writer_in_flight),
        Coverage::get(&c.writer_killed),
        Coverage::get(&c.writer_killed_mid_copy),
        Coverage::get(&c.stale_in_flight_after_kill),
        Coverage::get(&c.writer_refused),
    );
    assert!(Coverage::get(&c.writer_killed) > 0, "the kill path was never exercised");
    assert!(Coverage::get(&c.writer_killed_mid_copy) > 0, "never killed mid-copy");
    assert!(Coverage::get(&c.stale_in_flight_after_kill) > 0, "never died in flight");
    assert!(
        Coverage::get(&c.revoker_saw_writer_in_flight) > Coverage::get(&c.writer_killed),
        "the bounded wait never succeeded"
    );
}

// ---- scenario 3: mutations, the model must catch them -------------------------------------------

static MUTATIONS: Coverage = Coverage::new();

#[test]
fn mutation_writer_checking_before_announcing_is_caught() {
    let how = assert_violation_found(|| barrier_fast_path::<CheckBeforeAnnounce>(&MUTATIONS, OPS));
    println!("caught:\n{how}");
}

#[test]
fn mutation_revoker_not_waiting_is_caught() {
    let how = assert_violation_found(|| barrier_fast_path::<RevokerDoesNotWait>(&MUTATIONS, OPS));
    println!("caught:\n{how}");
}

static CONTROL: Coverage = Coverage::new();

#[test]
fn mutation_control_real_guard_passes_with_the_same_seeds() {
    assert_no_violation_with_mutation_seeds(|| barrier_fast_path::<ModelSlot>(&CONTROL, OPS));
}

/// `move_to_error` takes the side out of a receiving state, which on RDMA stops incoming writes.
/// In the guard it is a plain CAS: it does not look at `inflight` and returns nothing to wait on,
/// so on its own it is **not** a barrier; an owner that relies on it to cut a writer off must
/// follow it with `publish` and the wait (or the fence). This documents that: if `move_to_error`
/// is ever made a barrier, this test fails and should be turned into a positive check.
fn move_to_error_as_revoke() {
    let (slot, _, _) = new_slot();
    let slot = Arc::new(slot);
    slot.publish(ready_to_send(WRITER, Access::READ_WRITE));
    let region = Arc::new(Region::new());
    let revoked = Arc::new(AtomicBool::new(false));
    let writer = thread::spawn({
        let (slot, region, revoked) = (slot.clone(), region.clone(), revoked.clone());
        move || {
            let mut seq = slot.writer_start_seq();
            for op in 1..=OPS {
                if slot.enter(&mut seq, WRITER, Access::WRITE).is_ok() {
                    for i in 0..WORDS {
                        store_word(&region, i, value(WRITER, op), &revoked);
                    }
                    slot.exit(&mut seq, WRITER);
                }
            }
        }
    });
    slot.move_to_error(slot.acl());
    revoked.store(true, Ordering::SeqCst);
    let snapshot = region.snapshot();
    writer.join().unwrap();
    assert_eq!(region.snapshot(), snapshot, "BARRIER VIOLATED: region changed after move_to_error");
}

#[test]
fn move_to_error_alone_is_not_a_barrier() {
    let how = assert_violation_found(move_to_error_as_revoke);
    println!("caught:\n{how}");
}

// ---- scenario 4: two channels, and move_to_error racing publish ---------------------------------

fn two_channels(coverage: &'static Coverage) {
    Coverage::bump(&coverage.executions);
    // The owner's two sides, one per writer, and the region each writes into.
    let a = Arc::new(new_slot().0);
    let b = Arc::new(new_slot().0);
    assert_eq!(a.publish(ready_to_send(WRITER, Access::READ_WRITE)), None);
    assert_eq!(b.publish(ready_to_send(OTHER_WRITER, Access::READ_WRITE)), None);
    let region_a = Arc::new(Region::new());
    let region_b = Arc::new(Region::new());
    let revoked = Arc::new(AtomicBool::new(false));
    let never = Arc::new(AtomicBool::new(false));

    let writer_a = thread::spawn({
        let (slot, region, revoked) = (a.clone(), region_a.clone(), revoked.clone());
        move || {
            let mut seq = slot.writer_start_seq();
            let mut last = 0;
            for op in 1..=OPS {
                if slot.enter(&mut seq, WRITER, Access::WRITE).is_ok() {
                    for i in 0..WORDS {
                        store_word(&region, i, value(WRITER, op), &revoked);
                    }
                    slot.exit(&mut seq, WRITER);
                    last = op;
                }
            }
            last
        }
    });
    let writer_b = thread::spawn({
        let (slot, region, revoked, never) = (b.clone(), region_b.clone(), revoked.clone(), never);
        move || {
            let mut seq = slot.writer_start_seq();
            for op in 1..=OPS {
                slot.enter(&mut seq, OTHER_WRITER, Access::WRITE).unwrap_or_else(|r| {
                    panic!("channel b refused ({r:?}) by a revoke of channel a")
                });
                for i in 0..WORDS {
                    if op == 1 && i == 1 {
                        // Stay in flight on b until a's revoke has returned: a revoke of a that
                        // waited on b would never return (shuttle reports the livelock).
                        while !revoked.load(Ordering::SeqCst) {
                            thread::yield_now();
                        }
                    }
                    // b's stores keep landing after a's revoke: `never` is never set.
                    store_word(&region, i, value(OTHER_WRITER, op), &never);
                }
                slot.exit(&mut seq, OTHER_WRITER);
            }
        }
    });

    let seen = a.publish(ready_to_send(WRITER, Access::READ));
    if let Some(seq) = seen {
        Coverage::bump(&coverage.revoker_saw_writer_in_flight);
        while a.still_in_flight(seq) {
            thread::yield_now();
        }
    }
    revoked.store(true, Ordering::SeqCst);
    let snapshot_a = region_a.snapshot();
    assert_eq!(b.acl(), ready_to_send(OTHER_WRITER, Access::READ_WRITE), "b's grant untouched");

    let last_a = writer_a.join().unwrap();
    writer_b.join().unwrap();
    assert_eq!(region_a.snapshot(), snapshot_a, "BARRIER VIOLATED on channel a");
    let expected_a = if last_a == 0 { 0 } else { value(WRITER, last_a) };
    assert_eq!(snapshot_a, [expected_a; WORDS]);
    assert_eq!(region_b.snapshot(), [value(OTHER_WRITER, OPS); WORDS], "b did all its operations");
}

static TWO_CHANNELS: Coverage = Coverage::new();

#[test]
fn revoking_one_channel_leaves_the_other_alone() {
    check(|| two_channels(&TWO_CHANNELS));
    assert!(Coverage::get(&TWO_CHANNELS.revoker_saw_writer_in_flight) > 0);
}

/// Whether `word` is a well-formed `acl` word: only the incarnation, state and access bits, a
/// known state and known access flags.
fn well_formed(word: u64) -> bool {
    let reserved = word & 0x0000_0000_ffff_0000;
    let state = QpState::from_u8((word >> 8) as u8);
    let access = word as u8;
    reserved == 0 && state.is_some() && Access::from_bits_truncate(access).bits() == access
}

fn move_to_error_racing_publish() {
    // The ACLs the owner publishes, in order.
    let versions = [
        ready_to_send(WRITER, Access::ALL),
        Acl { peer_incarnation: WRITER, state: QpState::ReadyToReceive, access: Access::READ },
        ready_to_send(OTHER_WRITER, Access::READ_WRITE),
    ];
    let errored = |acl: Acl| Acl { state: QpState::Error, ..acl };
    let (slot, acl_word, _) = new_slot();
    let slot = Arc::new(slot);
    slot.publish(versions[0]);

    let owner = thread::spawn({
        let slot = slot.clone();
        move || {
            for acl in &versions[1..] {
                slot.publish(*acl);
            }
        }
    });
    let failer = thread::spawn({
        let slot = slot.clone();
        move || slot.move_to_error(slot.acl())
    });
    let observer = thread::spawn(move || {
        // Every word ever seen is a published ACL, or one of them moved to Error; versions never
        // go backwards; an errored version never comes back to life without a new publish.
        let mut last: Option<(usize, bool)> = None;
        for _ in 0..6 {
            let word = acl_word.raw();
            assert!(well_formed(word), "torn or invalid acl word {word:#x}");
            let acl = Acl::unpack(word);
            let version = versions
                .iter()
                .position(|v| *v == acl || errored(*v) == acl)
                .unwrap_or_else(|| panic!("acl {acl:?} was never published"));
            let is_error = acl.state == QpState::Error;
            if let Some((v, e)) = last {
                assert!(version >= v, "acl went back from version {v} to {version}");
                assert!(version > v || is_error || !e, "version {v} came back from Error");
            }
            last = Some((version, is_error));
        }
    });
    owner.join().unwrap();
    failer.join().unwrap();
    observer.join().unwrap();
    // No publish is lost, and no older ACL is resurrected by the CAS loop.
    let last = versions[versions.len() - 1];
    let fin = slot.acl();
    assert!(fin == last || fin == errored(last), "final acl {fin:?}");
}

#[test]
fn move_to_error_racing_publish_is_never_torn() {
    check(move_to_error_racing_publish);
}

/// A thread that saw the old connection fail calls `move_to_error(seen)` while the owner
/// re-establishes the connection (binds a new incarnation, `ReadyToSend`). Whatever the
/// interleaving, the fresh connection must not end in `Error`: `move_to_error` moves only from the
/// ACL its caller saw. (An earlier version retried its compare-and-swap on any change and broke
/// the new connection; this model found it.)
fn move_to_error_vs_reconnect() {
    let (slot, _, _) = new_slot();
    let slot = Arc::new(slot);
    slot.publish(ready_to_send(WRITER, Access::READ_WRITE));
    let seen = slot.acl();
    let reconnected = ready_to_send(NEW_INCARNATION, Access::READ_WRITE);
    let owner = thread::spawn({
        let slot = slot.clone();
        move || {
            slot.publish(reconnected);
        }
    });
    slot.move_to_error(seen);
    owner.join().unwrap();
    assert_eq!(
        slot.acl(),
        reconnected,
        "move_to_error overwrote a state that changed in the meantime"
    );
}

#[test]
fn move_to_error_backs_off_when_the_state_changed() {
    check(move_to_error_vs_reconnect);
}
