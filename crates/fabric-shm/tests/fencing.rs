//! Regression tests for the revocation barrier's choice of whom to wait for and whom to fence.
//!
//! The target's in-flight word names the writer incarnation that set it
//! (`guard::in_flight_incarnation`). A writer that dies in the middle of a copy leaves the word
//! odd; its node's next incarnation must neither make a revoke wait for the dead writer nor be
//! fenced because of that leftover (tests `a*`). A writer of the bound incarnation stopped in the
//! middle of a copy must still be fenced, and nothing of it may land afterwards (tests `b*`).
//!
//! Writers are separate processes: this very test binary, run again with
//! `--ignored --exact child_main` and its orders in the environment ([`ChildNode`]). A child
//! prints `MU-FENCING READY <incarnation>` once its node is up. In `writer` mode it then waits for
//! `START` and writes 1 MiB into node 0's region again and again; in `host` mode it obeys
//! `WRITE <offset> <byte>` lines (one signaled inline write of 64 copies of `<byte>`, answered
//! with `MU-FENCING WROTE <status>`) until its stdin closes.
//!
//! The tests of this file take [`SERIAL`] so that no busy writer of one test competes for the
//! CPU with the timed revokes of another.

mod common;

use common::{read_back, ChildNode, RunDir};
use mu_fabric::conformance::{Program, ProgramRunner, TaskSpec};
use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, NodeId, PermError, QpState, RegionId, RemoteAddr,
    Source, Status, WorkRequest,
};
use mu_fabric_shm::guard::in_flight_incarnation;
use mu_fabric_shm::{ShmConfig, ShmFabric, ShmRegion};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const CLUSTER: u64 = 0x0066_656e_6369_6e67;
const DATA: RegionId = RegionId(0);
const MIB: usize = 1 << 20;
/// The target: an in-process node.
const T: u16 = 0;
/// The writer: a child process.
const W: u16 = 2;
/// How long to wait for a child's line, for a child to stop or die, for a completion.
const WAIT: Duration = Duration::from_secs(15);
/// `fence_after_ms` of the target in the tests whose revokes must not wait for anyone: a revoke
/// that waits out a dead writer, or fences a live one, takes at least this long.
const PATIENCE: Duration = Duration::from_secs(10);
/// A revoke that need not wait for anyone returns well within [`PATIENCE`]. Not the default
/// 20 ms patience and a 15 ms bound: on a loaded machine a killed writer's exit, which a revoke
/// does wait for, took from 16 to 138 ms.
const QUICK: Duration = Duration::from_secs(5);
/// Bytes a `host` child writes per `WRITE` order.
const HOST_WRITE_BYTES: usize = 64;

/// Serializes the tests of this binary (see the module docs).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn conn(peer: u16) -> ConnId {
    ConnId::new(NodeId(peer), 0)
}

fn remote(offset: u64) -> RemoteAddr {
    RemoteAddr { region: DATA, offset }
}

// ---------------------------------------------------------------------------------------------
// Fixtures.
// ---------------------------------------------------------------------------------------------

/// A fresh private (0700) run directory of this binary's cluster for the test `tag`, removed on
/// drop even if the test panics.
fn run_dir(tag: &str) -> RunDir {
    RunDir::new(&format!("fencing-{tag}"), CLUSTER)
}

/// Target `T` in `dir` that waits [`PATIENCE`] for a writer in flight before fencing it.
fn patient_target(dir: &RunDir) -> ShmFabric {
    let mut config = dir.config(T);
    config.fence_after_ms = PATIENCE.as_millis() as u64;
    ShmFabric::create(config).expect("create the target")
}

impl ChildNode {
    /// Starts node `W` in `mode` (`writer` or `host`) and waits until its node is up.
    fn spawn(dir: &RunDir, mode: &str) -> ChildNode {
        let mut command = common::child_command();
        command.env("MU_FENCING_DIR", dir.path()).env("MU_FENCING_MODE", mode);
        let mut c = ChildNode::launch(command, "MU-FENCING ", WAIT);
        c.wait_ready();
        c
    }
}

// ---------------------------------------------------------------------------------------------
// The child.
// ---------------------------------------------------------------------------------------------

/// Entry point of the child processes (see the module docs); does nothing in normal runs.
#[test]
#[ignore = "entry point for the child processes of the fencing tests"]
fn child_main() {
    let (Ok(dir), Ok(mode)) = (std::env::var("MU_FENCING_DIR"), std::env::var("MU_FENCING_MODE"))
    else {
        return;
    };
    let fabric = ShmFabric::create(ShmConfig::new(dir, CLUSTER, NodeId(W))).expect("child node");
    let incarnation = fabric.incarnation();
    let stdin = std::io::stdin();
    let mut line = String::new();
    match mode.as_str() {
        "writer" => {
            let spec = TaskSpec {
                node: NodeId(W),
                regions: vec![(DATA, MIB, Access::ALL)],
                connect: vec![(conn(T), Access::NONE)],
                program: Program::WriteLoop { conn: conn(T), remote: remote(0), len: MIB as u32 },
            };
            let mut runner = ProgramRunner::new(fabric, &spec).expect("child setup");
            println!("MU-FENCING READY {incarnation}");
            stdin.read_line(&mut line).expect("wait for START");
            assert_eq!(line.trim(), "START");
            let outcome = loop {
                if let Some(outcome) = runner.step() {
                    break outcome;
                }
            };
            println!("MU-FENCING OUTCOME {} {:?}", outcome.ops_ok, outcome.last_status);
        }
        "host" => {
            fabric.register_region(DATA, MIB, Access::ALL).expect("child region");
            fabric.connect(conn(T), Access::NONE).expect("child connect");
            let mut ep = fabric.endpoint(8).expect("child endpoint");
            ep.attach(conn(T)).expect("child attach");
            println!("MU-FENCING READY {incarnation}");
            line.clear();
            while stdin.read_line(&mut line).is_ok_and(|n| n > 0) {
                let order: Vec<&str> = line.split_whitespace().collect();
                let ["WRITE", offset, byte] = order[..] else { panic!("order {line:?}") };
                let data = [byte.parse::<u8>().expect("byte"); HOST_WRITE_BYTES];
                let wr =
                    WorkRequest::write(1, Source::Inline(&data), remote(offset.parse().unwrap()));
                ep.post(conn(T), &wr).expect("post");
                let mut out = [Completion::EMPTY; 1];
                let start = Instant::now();
                while ep.poll(&mut out) == 0 {
                    assert!(start.elapsed() < WAIT, "no completion");
                    std::thread::yield_now();
                }
                println!("MU-FENCING WROTE {}", out[0].status);
                line.clear();
            }
        }
        other => panic!("unknown mode {other}"),
    }
}

// ---------------------------------------------------------------------------------------------
// (a) A writer that died in flight: its successor is neither waited for nor fenced.
// ---------------------------------------------------------------------------------------------

/// The scene of the `a*` tests: target `t` with its region; the writer's first incarnation was
/// stopped in the middle of a copy into the region and then killed, leaving the in-flight word
/// `left` odd; the writer's next incarnation `w` (a `host` child, which never writes on its own)
/// is up, and `t` has brought its side of the connection up again, bound to `w`.
struct Scene {
    // Field order is drop order: the child goes before the node and the directory.
    w: ChildNode,
    t: ShmFabric,
    region: ShmRegion,
    left: u64,
    _dir: RunDir,
}

fn dead_writer_left_its_word_odd(tag: &str) -> Scene {
    let dir = run_dir(tag);
    let t = patient_target(&dir);
    let region = t.register_region(DATA, MIB, Access::ALL).unwrap();
    let side = conn(W);

    let mut old = ChildNode::spawn(&dir, "writer");
    t.connect(side, Access::READ_WRITE).unwrap();
    old.say("START");
    let left = old.hold_mid_write(&t, side);
    assert_eq!(in_flight_incarnation(left), old.incarnation(), "the word names its writer");
    assert_eq!(old.kill().signal(), Some(libc::SIGKILL));
    assert_eq!(t.peer_inflight_seq(side).unwrap(), left, "the dead writer's word moved");

    let mut w = ChildNode::spawn(&dir, "host");
    assert!(
        w.incarnation() > old.incarnation(),
        "incarnation {} after {}",
        w.incarnation(),
        old.incarnation()
    );
    drop(old);

    // Bringing the side up again goes through reset, a barrier: it must not wait for the dead.
    t.connect(side, Access::READ_WRITE).expect("reconnect to the new incarnation");
    assert!(w.is_alive(), "reconnecting fenced the writer's new incarnation");
    assert_eq!(t.qp_state(side).unwrap(), QpState::ReadyToSend);
    assert_eq!(
        t.peer_inflight_seq(side).unwrap(),
        left,
        "precondition: the dead incarnation's odd word is still there"
    );
    Scene { w, t, region, left, _dir: dir }
}

impl Scene {
    /// Runs `revoke` on the target, which must succeed quickly, leave the dead writer's word in
    /// place (nobody wrote) and leave the writer's new incarnation alive and unfenced.
    fn revoke_quickly<E: std::fmt::Debug>(
        &mut self,
        what: &str,
        revoke: impl FnOnce(&ShmFabric) -> Result<(), E>,
    ) {
        let start = Instant::now();
        let result = revoke(&self.t);
        let took = start.elapsed();
        assert!(self.w.is_alive(), "{what} fenced the writer's new incarnation");
        result.unwrap_or_else(|e| panic!("{what} failed: {e:?}"));
        assert!(took < QUICK, "{what} took {took:?}: it waited for a dead writer");
        assert_eq!(self.t.peer_inflight_seq(conn(W)).unwrap(), self.left);
    }

    /// Grants write access again and has the writer's new incarnation write once: it succeeds and
    /// its bytes land (proof that it was not fenced and its writes are not refused).
    fn new_incarnation_writes(&mut self) {
        self.t.connect(conn(W), Access::READ_WRITE).expect("grant again");
        let offset = 4096;
        self.w.say(&format!("WRITE {offset} 201"));
        let said = self.w.line().expect("the new incarnation died instead of writing");
        let status = said.strip_prefix("WROTE ").map(|s| s.parse::<Status>().expect("a status"));
        assert_eq!(status, Some(Status::Success), "child said {said:?}");
        assert_eq!(read_back(&self.region, offset, HOST_WRITE_BYTES), [201; HOST_WRITE_BYTES]);
        let word = self.t.peer_inflight_seq(conn(W)).unwrap();
        assert_eq!((word % 2, in_flight_incarnation(word)), (0, self.w.incarnation()));
        assert!(self.w.is_alive());
    }
}

/// The slow path revokes at once: the odd word belongs to a dead incarnation, which copies
/// nothing, and the bound (new) incarnation is not in flight.
#[test]
fn a1_slow_revoke_after_a_writer_died_in_flight() {
    let _serial = serial();
    let mut s = dead_writer_left_its_word_odd("a1");
    s.revoke_quickly("set_access_slow", |t| t.set_access_slow(conn(W), Access::READ));
    assert_eq!(s.t.qp_state(conn(W)).unwrap(), QpState::ReadyToSend);
    assert_eq!(s.t.qp_access(conn(W)).unwrap(), Access::READ);
    s.new_incarnation_writes();
}

/// Moving the side to reset (a barrier, like the slow path) does not wait or fence either.
#[test]
fn a2_reset_after_a_writer_died_in_flight() {
    let _serial = serial();
    let mut s = dead_writer_left_its_word_odd("a2");
    s.revoke_quickly("modify_qp(Reset)", |t| t.modify_qp(conn(W), QpState::Reset, Access::NONE));
    assert_eq!(s.t.qp_state(conn(W)).unwrap(), QpState::Reset);
    s.new_incarnation_writes();
}

/// The fast path does not give up with `Busy` (breaking the connection) because of a dead
/// writer's word.
#[test]
fn a3_fast_revoke_after_a_writer_died_in_flight() {
    let _serial = serial();
    let mut s = dead_writer_left_its_word_odd("a3");
    s.revoke_quickly("set_access_fast", |t| -> Result<(), PermError> {
        t.set_access_fast(conn(W), Access::READ)
    });
    assert_eq!(s.t.qp_state(conn(W)).unwrap(), QpState::ReadyToSend);
    assert_eq!(s.t.qp_access(conn(W)).unwrap(), Access::READ);
    s.new_incarnation_writes();
}

/// All three in a row on one scene, each one a barrier again over the same leftover word.
#[test]
fn a4_every_revoke_in_turn_after_a_writer_died_in_flight() {
    let _serial = serial();
    let mut s = dead_writer_left_its_word_odd("a4");
    s.revoke_quickly("set_access_fast", |t| t.set_access_fast(conn(W), Access::READ));
    s.t.set_access_fast(conn(W), Access::READ_WRITE).expect("a grant never waits");
    s.revoke_quickly("set_access_slow", |t| t.set_access_slow(conn(W), Access::READ));
    s.t.set_access_slow(conn(W), Access::READ_WRITE).expect("grant again");
    s.revoke_quickly("modify_qp(Reset)", |t| t.modify_qp(conn(W), QpState::Reset, Access::NONE));
    s.new_incarnation_writes();
}

// ---------------------------------------------------------------------------------------------
// (b) A writer of the bound incarnation stuck in flight is still fenced.
// ---------------------------------------------------------------------------------------------

/// Node `T` (here) lets a writer child (`W`) write its region, and the writer is stopped in
/// the middle of a copy: the run directory, `T`, its region, the writer and its in-flight word.
fn writer_stopped_in_flight(
    tag: &str,
    target: impl FnOnce(&RunDir) -> ShmFabric,
) -> (RunDir, ShmFabric, ShmRegion, ChildNode, u64) {
    let dir = run_dir(tag);
    let t = target(&dir);
    let region = t.register_region(DATA, MIB, Access::ALL).unwrap();
    let mut w = ChildNode::spawn(&dir, "writer");
    t.connect(conn(W), Access::READ_WRITE).unwrap();
    w.say("START");
    let seen = w.hold_mid_write(&t, conn(W));
    assert_eq!(in_flight_incarnation(seen), w.incarnation());
    (dir, t, region, w, seen)
}

/// A writer stopped in the middle of a copy, and still bound, is killed by `revoke`; when it
/// returns the writer is dead of SIGKILL and nothing of it lands afterwards.
fn stuck_bound_writer_is_fenced(tag: &str, revoke: impl FnOnce(&ShmFabric) -> Result<(), String>) {
    let (_dir, t, region, mut w, _) = writer_stopped_in_flight(tag, |dir| dir.node(T));
    assert!(w.is_alive());

    revoke(&t).expect("a revoke of a stuck writer succeeds by fencing it");
    let after_revoke = read_back(&region, 0, MIB);
    let status = w.try_reap().expect("the stuck writer is still alive after the revoke");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the writer ended with {status:?}");
    std::thread::sleep(Duration::from_millis(50));
    assert!(read_back(&region, 0, MIB) == after_revoke, "bytes landed after the revoke returned");
    assert_eq!(w.line(), None, "a fenced writer reported an outcome");
}

#[test]
fn b1_slow_revoke_fences_a_stuck_bound_writer() {
    let _serial = serial();
    stuck_bound_writer_is_fenced("b1", |t| {
        t.set_access_slow(conn(W), Access::READ).map_err(|e| e.to_string())?;
        assert_eq!(t.qp_state(conn(W)).unwrap(), QpState::ReadyToSend);
        assert_eq!(t.qp_access(conn(W)).unwrap(), Access::READ);
        Ok(())
    });
}

#[test]
fn b2_reset_fences_a_stuck_bound_writer() {
    let _serial = serial();
    stuck_bound_writer_is_fenced("b2", |t| {
        t.modify_qp(conn(W), QpState::Reset, Access::NONE).map_err(|e| e.to_string())
    });
}

/// A writer of the bound incarnation killed in the middle of a copy (not reaped): the revoke
/// needs no fence of its own and does not wait `fence_after_ms`, since a writer whose process has
/// exited copies nothing more; nothing of it lands after the revoke returns.
#[test]
fn b3_a_writer_killed_in_flight_is_not_waited_for() {
    let _serial = serial();
    let (_dir, t, region, mut w, seen) = writer_stopped_in_flight("b3", patient_target);
    let side = conn(W);
    w.signal(libc::SIGKILL);
    let start = Instant::now();
    t.set_access_slow(side, Access::READ).expect("a dead writer's revoke");
    let took = start.elapsed();
    assert!(took < QUICK, "the revoke took {took:?}: it fenced or waited out a dead writer");
    let after_revoke = read_back(&region, 0, MIB);
    assert_eq!(t.peer_inflight_seq(side).unwrap(), seen, "the dead writer's word stays odd");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = w.try_reap() {
            break status;
        }
        assert!(start.elapsed() < WAIT, "the killed writer never ended");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    std::thread::sleep(Duration::from_millis(50));
    assert!(read_back(&region, 0, MIB) == after_revoke, "bytes landed after the revoke returned");
}

/// A control header naming a process that does not hold the node's liveness lock (corrupted, or
/// written in another pid namespace) never gets that process killed: fencing refuses, with a reason.
#[test]
fn c1_a_pid_that_is_not_the_lock_holder_is_never_killed() {
    use mu_fabric_shm::fence::{own_pid_namespace, PeerProcess};
    use mu_fabric_shm::mapping::Mapping;
    let _serial = serial();
    let dir = run_dir("c1");
    let _node = dir.node(1); // its liveness lock is held by a thread of this process
    let mut bystander = Command::new("sleep").arg("30").spawn().expect("spawn sleep");
    let ctl = Mapping::open(&dir.path().join("n1.ctl"), 4096).expect("map control segment");

    for namespace in [own_pid_namespace(), own_pid_namespace() + 1] {
        let process = PeerProcess::pin(bystander.id(), namespace, &ctl);
        assert_eq!(process.exited(), None, "an unpinned process has no known exit");
        let err = process.fence(Duration::from_millis(100)).expect_err("fenced a bystander");
        assert!(err.contains("cannot be fenced"), "{err}");
        assert_eq!(bystander.try_wait().expect("poll sleep"), None, "the bystander was killed");
    }
    let _ = bystander.kill();
    let _ = bystander.wait();
}
