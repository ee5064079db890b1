//! The fabric conformance suite on libfabric, once per provider, over loopback TCP, with tasks
//! as real child processes.
//!
//! A task is this very test binary, run again with `--ignored --exact child_main` and its spec,
//! provider and port block in the environment. It prints `MU-CHILD READY` once its node is up,
//! waits for a `START` line, runs its program and prints `MU-CHILD OUTCOME <ops_ok> <status>`.

use mu_fabric::conformance::{
    decode_spec, encode_spec, parse_outcome, read_marked, run_child, Harness, Program, TaskOutcome,
    TaskSpec, CHILD_MARKER,
};
use mu_fabric::{LocalRegion, NodeId};
use mu_fabric_ofi::{NodeAddr, OfiConfig, OfiFabric, PORTS_PER_NODE};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufReader, Write};
use std::net::TcpListener;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

const CLUSTER_ID: u64 = 0x6d75_6f66_6974;
/// Nodes the suite uses: 0..=6 (node 9 is the missing one, with no address).
const NODES: u16 = 7;
/// Ports between two nodes' base ports.
const NODE_STRIDE: u16 = 10;

/// A block of `NODES * NODE_STRIDE` ports, all free when checked, distinct for every harness of
/// this process and spread by process id across concurrent test binaries.
fn port_block() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    const BLOCK: u16 = NODES * NODE_STRIDE;
    const FIRST: u16 = 20_000;
    const BLOCKS: u16 = (60_000 - FIRST) / BLOCK;
    let spread = (std::process::id() % BLOCKS as u32) as u16;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let base = FIRST + ((spread + n * 7) % BLOCKS) * BLOCK;
        let free = (0..BLOCK).all(|p| TcpListener::bind(("127.0.0.1", base + p)).is_ok());
        if free {
            return base;
        }
    }
}

fn config(provider: &str, base: u16, node: NodeId) -> OfiConfig {
    let nodes: BTreeMap<NodeId, NodeAddr> = (0..NODES)
        .map(|n| {
            let addr = NodeAddr { host: "127.0.0.1".into(), base_port: base + n * NODE_STRIDE };
            (NodeId(n), addr)
        })
        .collect();
    const { assert!(PORTS_PER_NODE <= NODE_STRIDE) };
    let mut c = OfiConfig::new(provider, CLUSTER_ID, node, nodes);
    c.connect_timeout_ms = 5_000;
    c
}

pub struct OfiHarness {
    provider: &'static str,
    base: u16,
    nodes: HashMap<NodeId, OfiFabric>,
    children: HashMap<NodeId, u32>,
}

pub struct OfiTask {
    node: NodeId,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    spec: TaskSpec,
}

impl OfiHarness {
    pub fn new(provider: &'static str) -> OfiHarness {
        OfiHarness { provider, base: port_block(), nodes: HashMap::new(), children: HashMap::new() }
    }
}

impl Drop for OfiHarness {
    fn drop(&mut self) {
        for pid in self.children.values() {
            signal(*pid, libc::SIGKILL);
        }
        self.nodes.clear();
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill takes a pid and a signal, no memory; the pid is a child of ours not reaped.
    unsafe { libc::kill(pid as i32, sig) };
}

impl Harness for OfiHarness {
    type F = OfiFabric;
    type Task = OfiTask;

    fn fabric(&mut self, node: NodeId) -> OfiFabric {
        let (provider, base) = (self.provider, self.base);
        self.nodes
            .entry(node)
            .or_insert_with(|| OfiFabric::open(config(provider, base, node)).expect("open node"))
            .clone()
    }

    fn tick(&mut self) {
        std::thread::sleep(Duration::from_micros(50));
    }

    fn settle(&mut self) {
        std::thread::sleep(Duration::from_millis(20));
    }

    fn crash(&mut self, node: NodeId) {
        let pid = self.children.remove(&node).expect("only tasks crash on ofi");
        signal(pid, libc::SIGKILL);
    }

    fn spawn(&mut self, spec: TaskSpec) -> OfiTask {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--ignored", "--exact", "child_main", "--nocapture", "--test-threads=1"])
            .env("MU_OFI_CHILD_SPEC", encode_spec(&spec))
            .env("MU_OFI_CHILD_PROVIDER", self.provider)
            .env("MU_OFI_CHILD_BASE", self.base.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let line = read_marked(&mut stdout, CHILD_MARKER).expect("child died before it was ready");
        assert_eq!(line, "READY", "child said {line:?}");
        self.children.insert(spec.node, child.id());
        OfiTask { node: spec.node, child, stdin, stdout, spec }
    }

    fn start(&mut self, task: &OfiTask) {
        let mut stdin = &task.stdin;
        stdin.write_all(b"START\n").and_then(|_| stdin.flush()).expect("start child");
    }

    /// The provider copies a write into the target on its own threads, out of sight of the
    /// test; the writer writes its whole 1 MiB region again and again, so a stop once its
    /// bytes are seen arriving catches it, nearly always, with a write under way.
    fn hold_mid_write(&mut self, task: &OfiTask) {
        let Program::WriteLoop { conn, remote, .. } = task.spec.program else {
            panic!("not a write loop")
        };
        let target = self.fabric(conn.peer);
        let _ = target;
        let region = self.region_of(conn.peer, remote.region);
        let start = Instant::now();
        while region.load_u64(0).unwrap() == 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "writer never wrote");
            std::thread::yield_now();
        }
        signal(task.child.id(), libc::SIGSTOP);
        let start = Instant::now();
        while proc_state(task.child.id()) != Some('T') {
            assert!(start.elapsed() < Duration::from_secs(10), "writer did not stop");
            std::thread::yield_now();
        }
    }

    fn release(&mut self, task: &OfiTask) {
        signal(task.child.id(), libc::SIGCONT);
    }

    fn join(&mut self, mut task: OfiTask) -> Option<TaskOutcome> {
        let line = read_marked(&mut task.stdout, CHILD_MARKER);
        let _ = task.child.wait();
        self.children.remove(&task.node);
        parse_outcome(&line?)
    }
}

impl OfiHarness {
    fn region_of(&mut self, node: NodeId, id: mu_fabric::RegionId) -> mu_fabric_ofi::OfiRegion {
        self.fabric(node).registered(id).expect("the target's region")
    }
}

fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Entry point of a task's process (see the module docs); ignored in normal runs.
#[test]
#[ignore = "entry point for the child processes of the conformance suite"]
fn child_main() {
    let (Ok(spec), Ok(provider), Ok(base)) = (
        std::env::var("MU_OFI_CHILD_SPEC"),
        std::env::var("MU_OFI_CHILD_PROVIDER"),
        std::env::var("MU_OFI_CHILD_BASE"),
    ) else {
        return;
    };
    let spec = decode_spec(&spec);
    let base: u16 = base.parse().expect("base port");
    let fabric = OfiFabric::open(config(&provider, base, spec.node)).expect("child node");
    run_child(fabric, &spec, true);
}

mod sockets {
    // Every test of the suite but `revoke_is_a_barrier_for_a_stopped_writer`, which is below
    // with what this backend does instead.
    mu_fabric::conformance_tests!(@each super::OfiHarness::new("sockets");
        one_sided_operations, unsignaled_requests, inline_limit, out_of_bounds_is_denied,
        read_only_peer_is_denied, region_access_caps_connection, connection_state_machine,
        missing_peer_is_an_error, permission_changes, fifo_write_then_cas,
        dead_target_cannot_ack, crash_is_notified, revoke_is_a_barrier_under_load,
        cas_is_atomic_under_contention);
}

/// The suite's `revoke_is_a_barrier_for_a_stopped_writer`, as this backend keeps it. A writer
/// stopped (SIGSTOP) while it writes cannot answer the fence, so neither path can claim a
/// barrier: the fast path fails with `Busy`, the slow path with `FenceFailed`, and the side is
/// left not ready to send; once the two have spent the fence's wait, later attempts only look.
/// Once the writer goes on, the fence is answered, the next slow-path attempt succeeds and the
/// revocation holds: nothing lands after it returns, and the writer's next write fails. (The
/// suite's test expects the slow path to succeed while the writer is still stopped, which
/// needs a fabric that can cut a half-received operation off.)
#[test]
fn sockets_stopped_writer_is_fenced_once_it_goes_on() {
    use mu_fabric::conformance::{CHANNEL, DATA, DATA_BYTES};
    use mu_fabric::{Access, ConnId, Fabric, FabricError, PermError, QpState, RemoteAddr};
    let mut h = OfiHarness::new("sockets");
    let (t, w) = (NodeId(0), NodeId(2));
    let ft = h.fabric(t);
    let region = ft.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    let conn = |peer| ConnId::new(peer, CHANNEL);
    let task = h.spawn(TaskSpec {
        node: w,
        regions: vec![(DATA, DATA_BYTES, Access::ALL)],
        connect: vec![(conn(t), Access::NONE)],
        program: Program::WriteLoop {
            conn: conn(t),
            remote: RemoteAddr { region: DATA, offset: 0 },
            len: DATA_BYTES as u32,
        },
    });
    ft.connect(conn(w), Access::READ_WRITE).unwrap();
    h.start(&task);
    h.hold_mid_write(&task);
    match ft.set_access_fast(conn(w), Access::READ) {
        Err(PermError::Busy(c)) => assert_eq!(c, conn(w)),
        other => panic!("a stopped writer cannot answer the fast path's fence: {other:?}"),
    }
    assert_eq!(ft.qp_state(conn(w)).unwrap(), QpState::Error);
    match ft.set_access_slow(conn(w), Access::READ) {
        Err(FabricError::FenceFailed { node, .. }) => assert_eq!(node, w),
        other => panic!("a stopped writer cannot answer the slow path's fence: {other:?}"),
    }
    // In error, not reset: a reset side reads as one that never let the peer in.
    assert_eq!(ft.qp_state(conn(w)).unwrap(), QpState::Error);
    // The two calls spent the fence's wait (`slow_fence_ms`): a third only looks, so that a
    // peer that never answers holds its revoker up once, not on every attempt.
    let again = std::time::Instant::now();
    match ft.set_access_slow(conn(w), Access::READ) {
        Err(FabricError::FenceFailed { node, .. }) => assert_eq!(node, w),
        other => panic!("a stopped writer still cannot answer: {other:?}"),
    }
    let slow_fence = Duration::from_millis(config("sockets", 0, t).slow_fence_ms);
    assert!(again.elapsed() < slow_fence, "waited {:?} again", again.elapsed());

    // Once the writer goes on, the fence is answered, and the next attempt (as a permission
    // manager makes them) finds it so.
    h.release(&task);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while let Err(e) = ft.set_access_slow(conn(w), Access::READ) {
        assert!(std::time::Instant::now() < deadline, "the writer went on, the fence: {e}");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(ft.qp_state(conn(w)).unwrap(), QpState::ReadyToSend);
    let mut after_revoke = vec![0u8; DATA_BYTES];
    region.read(0, &mut after_revoke).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let outcome = h.join(task).expect("the writer reports");
    let mut now = vec![0u8; DATA_BYTES];
    region.read(0, &mut now).unwrap();
    assert!(now == after_revoke, "bytes landed after the revoke returned");
    assert!(outcome.last_status.is_some_and(|s| !s.is_success()), "{outcome:?}");
}
