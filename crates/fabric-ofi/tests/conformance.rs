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

/// The first port the kernel hands out to outgoing connections (`net.ipv4.ip_local_port_range`).
fn ephemeral_ports_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A block of `NODES * NODE_STRIDE` ports, all free when checked, distinct for every harness of
/// this process and spread by process id across concurrent test binaries. Blocks lie below the
/// kernel's ports for outgoing connections: a child node binds its block a while after the
/// check, and meanwhile an outgoing connection took one of its ports on a loaded machine.
fn port_block() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    const BLOCK: u16 = NODES * NODE_STRIDE;
    const FIRST: u16 = 10_000;
    let end = ephemeral_ports_start().clamp(FIRST + 20 * BLOCK, 60_000);
    let blocks = (end - FIRST) / BLOCK;
    let spread = (std::process::id() % u32::from(blocks)) as u16;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let base = FIRST + ((spread + n * 7) % blocks) * BLOCK;
        let free = (0..BLOCK).all(|p| TcpListener::bind(("127.0.0.1", base + p)).is_ok());
        if free {
            return base;
        }
    }
}

/// Where node `n` lives: `sockets` nodes share 127.0.0.1; `tcp;ofi_rxm` needs an address per
/// node, and gets 127.0.0.1, 127.0.0.2 and so on.
fn host(provider: &str, n: u16) -> std::net::Ipv4Addr {
    if provider == "sockets" {
        std::net::Ipv4Addr::LOCALHOST
    } else {
        std::net::Ipv4Addr::new(127, 0, 0, 1 + n as u8)
    }
}

fn config(provider: &str, base: u16, node: NodeId) -> OfiConfig {
    let nodes: BTreeMap<NodeId, NodeAddr> = (0..NODES)
        .map(|n| {
            let host = host(provider, n).to_string();
            (NodeId(n), NodeAddr { host, base_port: base + n * NODE_STRIDE })
        })
        .collect();
    const { assert!(PORTS_PER_NODE <= NODE_STRIDE) };
    let mut c = OfiConfig::new(provider, CLUSTER_ID, node, nodes);
    c.connect_timeout_ms = 5_000;
    // A revocation that cut a stopped writer off holds once the provider's thread has closed
    // the streams; on a loaded machine that thread ran later than the default 100 ms, and the
    // revocation failed where the suite expects it to hold.
    c.cut_wait_ms = 10_000;
    c
}

pub struct OfiHarness {
    provider: &'static str,
    base: u16,
    /// Changes to the default configuration of this process's nodes (not the children's).
    tune: fn(&mut OfiConfig),
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
        OfiHarness::tuned(provider, |_| {})
    }

    fn tuned(provider: &'static str, tune: fn(&mut OfiConfig)) -> OfiHarness {
        OfiHarness {
            provider,
            base: port_block(),
            tune,
            nodes: HashMap::new(),
            children: HashMap::new(),
        }
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
        let (provider, base, tune) = (self.provider, self.base, self.tune);
        self.nodes
            .entry(node)
            .or_insert_with(|| {
                let mut config = config(provider, base, node);
                tune(&mut config);
                OfiFabric::open(config).expect("open node")
            })
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

/// Every test of the suite, and this backend's own tests (among them what it does about a
/// stopped writer beyond the suite's barrier, below), for one provider.
macro_rules! provider_tests {
    ($module:ident, $provider:literal) => {
        mod $module {
            mu_fabric::conformance_tests!(@each super::OfiHarness::new($provider);
                one_sided_operations, unsignaled_requests, inline_limit, out_of_bounds_is_denied,
                read_only_peer_is_denied, region_access_caps_connection,
                region_scope_keeps_other_connections_out, connection_state_machine,
                missing_peer_is_an_error, permission_changes, fifo_write_then_cas,
                dead_target_cannot_ack, crash_is_notified, revoke_is_a_barrier_under_load,
                cas_is_atomic_under_contention, revoke_is_a_barrier_for_a_stopped_writer,
                doorbell_wakes_a_waiter, crash_rings_the_doorbell);

            #[test]
            fn dead_writer_is_fenced() {
                super::dead_writer_is_fenced($provider);
            }

            #[test]
            fn stopped_writer_is_cut_off_after_the_fence_budget() {
                super::stopped_writer_is_cut_off_after_the_fence_budget($provider);
            }

            #[test]
            fn short_calls_leave_a_stopped_peer_under_way() {
                super::short_calls_leave_a_stopped_peer_under_way($provider);
            }

            #[test]
            fn simultaneous_first_contact_opens_one_stream() {
                super::simultaneous_first_contact_opens_one_stream($provider);
            }
        }
    };
}

provider_tests!(sockets, "sockets");
provider_tests!(rxm, "tcp;ofi_rxm");

/// Node `t` (here) lets node `w` (a child process) write its `DATA` region, and `w` starts
/// writing the whole region again and again: `t`'s fabric, its region and the writer's task.
fn writer_into(
    h: &mut OfiHarness,
    t: NodeId,
    w: NodeId,
) -> (OfiFabric, mu_fabric_ofi::OfiRegion, OfiTask) {
    use mu_fabric::conformance::{CHANNEL, DATA, DATA_BYTES};
    use mu_fabric::{Access, ConnId, Fabric, RemoteAddr};
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
    // With calls kept short (`short_calls_leave_a_stopped_peer_under_way`), a binding may take
    // a few calls.
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = ft.connect(conn(w), Access::READ_WRITE) {
        let under_way = matches!(e, mu_fabric::FabricError::InProgress(..));
        assert!(under_way && Instant::now() < deadline, "connecting to the writer: {e}");
        std::thread::sleep(Duration::from_millis(1));
    }
    h.start(&task);
    (ft, region, task)
}

/// A stopped writer's revocation has returned: once the writer goes on, nothing of it lands,
/// and its next write fails.
fn nothing_lands_once_it_goes_on(
    h: &mut OfiHarness,
    task: OfiTask,
    region: &mu_fabric_ofi::OfiRegion,
) {
    use mu_fabric::conformance::DATA_BYTES;
    let mut after_revoke = vec![0u8; DATA_BYTES];
    region.read(0, &mut after_revoke).unwrap();
    h.release(&task);
    std::thread::sleep(Duration::from_millis(200));
    let outcome = h.join(task).expect("the writer reports");
    let mut now = vec![0u8; DATA_BYTES];
    region.read(0, &mut now).unwrap();
    assert!(now == after_revoke, "bytes landed after the revoke returned");
    assert!(outcome.last_status.is_some_and(|s| !s.is_success()), "{outcome:?}");
}

/// How this backend passes the suite's `revoke_is_a_barrier_for_a_stopped_writer` (run above
/// too): a writer stopped (SIGSTOP) while it writes cannot answer the fence, so the fast path
/// fails with `Busy`, and the slow path waits out the rest of the fence's budget
/// (`slow_fence_ms`), then shuts down the streams with the writer and holds once the provider
/// has closed them (`Node::cut`), the writer still stopped. Nothing lands after it returns,
/// once the writer goes on either, and the writer's next write fails.
fn stopped_writer_is_cut_off_after_the_fence_budget(provider: &'static str) {
    use mu_fabric::{Access, ConnId, Fabric, PermError, QpState};
    let mut h = OfiHarness::new(provider);
    let (t, w) = (NodeId(0), NodeId(2));
    let (ft, region, task) = writer_into(&mut h, t, w);
    let conn = |peer| ConnId::new(peer, mu_fabric::conformance::CHANNEL);
    h.hold_mid_write(&task);
    let revoked_at = Instant::now();
    match ft.set_access_fast(conn(w), Access::READ) {
        Err(PermError::Busy(c)) => assert_eq!(c, conn(w)),
        other => panic!("a stopped writer cannot answer the fast path's fence: {other:?}"),
    }
    assert_eq!(ft.qp_state(conn(w)).unwrap(), QpState::Error);
    ft.set_access_slow(conn(w), Access::READ).expect("the slow path cuts a stopped writer off");
    let took = revoked_at.elapsed();
    let slow_fence = Duration::from_millis(config(provider, 0, t).slow_fence_ms);
    assert!(took >= slow_fence, "cut off after {took:?}, before the fence's budget");
    assert_eq!(proc_state(task.child.id()), Some('T'), "the writer is still stopped");
    assert_eq!(ft.qp_state(conn(w)).unwrap(), QpState::ReadyToSend);
    nothing_lands_once_it_goes_on(&mut h, task, &region);
}

/// With calls kept short (`OfiConfig::call_wait_us`, as a replica sets it), nothing waits on
/// a stopped peer for long: revoking its write access returns `InProgress` within a small part
/// of its own timeouts, again and again while it stays stopped, without claiming a barrier,
/// until the fence's whole budget (`slow_fence_ms`) is spent; then the streams with it are cut
/// and a later call finds the revocation holding, the writer still stopped. Nothing lands after
/// that, once it goes on either. A binding to a stopped peer says `InProgress` too, and
/// completes once the peer goes on.
fn short_calls_leave_a_stopped_peer_under_way(provider: &'static str) {
    use mu_fabric::conformance::CHANNEL;
    use mu_fabric::{Access, ConnId, Fabric, FabricError, PermError, QpState};
    const SLOW_FENCE_MS: u64 = 8_000;
    // Far below the timeouts (a call that waited them would take 5 to 8 s), far above the
    // call wait (2 ms), for a loaded machine: there a call that cut the streams took 800 ms.
    const SHORT: Duration = Duration::from_secs(2);
    let mut h = OfiHarness::tuned(provider, |c| {
        c.call_wait_us = Some(2_000);
        c.slow_fence_ms = SLOW_FENCE_MS;
        c.fast_fence_us = 1_000_000;
    });
    let (t, w) = (NodeId(0), NodeId(2));
    let (ft, region, task) = writer_into(&mut h, t, w);
    let conn = |peer| ConnId::new(peer, CHANNEL);
    h.hold_mid_write(&task);
    let timed = |what: &str, call: &mut dyn FnMut() -> Result<(), FabricError>| {
        let start = Instant::now();
        let result = call();
        assert!(start.elapsed() < SHORT, "{what} waited {:?}: {result:?}", start.elapsed());
        result
    };

    let fenced_at = Instant::now();
    let fast = {
        let start = Instant::now();
        let result = ft.set_access_fast(conn(w), Access::READ);
        assert!(start.elapsed() < SHORT, "the fast path waited {:?}", start.elapsed());
        result
    };
    assert!(matches!(fast, Err(PermError::Busy(_))), "{fast:?}");
    let mut under_way = 0;
    loop {
        match timed("a slow path", &mut || ft.set_access_slow(conn(w), Access::READ)) {
            Err(FabricError::InProgress(node, why)) => {
                assert_eq!(node, w);
                assert!(why.contains("fence"), "{why}");
                under_way += 1;
            }
            Ok(()) => break,
            other => panic!("a stopped writer cannot answer the fence: {other:?}"),
        }
        // In error, not reset: a reset side reads as one that never let the peer in.
        assert_eq!(ft.qp_state(conn(w)).unwrap(), QpState::Error);
        assert!(fenced_at.elapsed() < Duration::from_secs(30), "never cut off");
        std::thread::sleep(Duration::from_millis(20));
    }
    let held = fenced_at.elapsed();
    assert!(held >= Duration::from_millis(SLOW_FENCE_MS), "held after {held:?}");
    assert!(under_way >= 10, "{under_way} calls said the fence was under way");
    assert_eq!(proc_state(task.child.id()), Some('T'), "the writer is still stopped");
    assert_eq!(ft.qp_state(conn(w)).unwrap(), QpState::ReadyToSend);
    nothing_lands_once_it_goes_on(&mut h, task, &region);

    // A binding to a stopped peer, then to the same peer gone on.
    let p = NodeId(3);
    let host =
        h.spawn(TaskSpec { node: p, regions: vec![], connect: vec![], program: Program::Host });
    signal(host.child.id(), libc::SIGSTOP);
    let start = Instant::now();
    while proc_state(host.child.id()) != Some('T') {
        assert!(start.elapsed() < Duration::from_secs(10), "the peer did not stop");
        std::thread::yield_now();
    }
    for _ in 0..5 {
        match timed("a binding", &mut || ft.connect(conn(p), Access::NONE)) {
            Err(FabricError::InProgress(node, _)) => assert_eq!(node, p),
            other => panic!("a stopped peer cannot answer a binding: {other:?}"),
        }
        assert_ne!(ft.qp_state(conn(p)).unwrap(), QpState::ReadyToSend);
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(host.child.id(), libc::SIGCONT);
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = timed("a binding", &mut || ft.connect(conn(p), Access::NONE)) {
        assert!(Instant::now() < deadline, "the peer went on, the binding: {e}");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(ft.qp_state(conn(p)).unwrap(), QpState::ReadyToSend);
    h.crash(p);
}

/// A writer that died is fenced without an answer from it: once this node's provider has
/// handled the ends of the dead writer's streams and closed them, nothing of the writer's can
/// land, so the revocation holds with no round trip (`Node::gone_for_good`). With
/// `tcp;ofi_rxm`, which keeps trying to reconnect to a dead peer and answers "again" to every
/// post meanwhile, no fence could even be posted.
fn dead_writer_is_fenced(provider: &'static str) {
    use mu_fabric::{Access, ConnId, Fabric, QpState};
    // A fence budget far beyond the test's wait, so that the revocation cannot hold by cutting
    // the writer off once the budget is spent (on a loaded machine that came first, before
    // the death was known); short calls, so that each call returns to the loop.
    let mut h = OfiHarness::tuned(provider, |c| {
        c.slow_fence_ms = 120_000;
        c.call_wait_us = Some(2_000);
    });
    let (t, w) = (NodeId(0), NodeId(2));
    let (ft, region, task) = writer_into(&mut h, t, w);
    let conn = |peer| ConnId::new(peer, mu_fabric::conformance::CHANNEL);
    let start = Instant::now();
    while region.load_u64(0).unwrap() == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "the writer never wrote");
        std::thread::yield_now();
    }
    h.crash(w);
    let crashed = Instant::now();
    while let Err(e) = ft.set_access_slow(conn(w), Access::READ) {
        assert!(crashed.elapsed() < Duration::from_secs(20), "a dead writer's revocation: {e}");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(ft.qp_state(conn(w)).unwrap(), QpState::ReadyToSend);
    assert!(ft.crash_notified(w), "revoked without a fence only once the death is known");
    assert_eq!(h.join(task), None, "a crashed task reports nothing");
}

/// Established TCP streams whose accepting end listens on one of `ports` (each stream has one
/// such end), from this network namespace's table.
fn streams_accepted_on(ports: &[u16]) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f[1].rsplit_once(':').map(|(_, p)| u16::from_str_radix(p, 16));
            f[3] == "01" && matches!(local_port, Some(Ok(p)) if ports.contains(&p))
        })
        .count()
}

/// Where node `n` of a harness listens on the suite's channel.
fn channel_address(h: &OfiHarness, n: u16) -> std::net::SocketAddrV4 {
    let port = h.base + n * NODE_STRIDE + mu_fabric::conformance::CHANNEL as u16;
    std::net::SocketAddrV4::new(host(h.provider, n), port)
}

/// Two nodes that bind their connection at the same moment end up with one TCP stream between
/// their endpoints, not one opened by each: the fence of a revocation goes on the stream the
/// peer writes on. With `sockets` the backend makes it so (before the lower node became the
/// only one to open, they opened one each every time); `tcp;ofi_rxm` settles it itself, and
/// the stream it rejects may take a moment to close. Both orders of arrival are tried.
fn simultaneous_first_contact_opens_one_stream(provider: &'static str) {
    use mu_fabric::conformance::{CHANNEL, DATA, DATA_BYTES};
    use mu_fabric::{Access, ConnId, Fabric};
    for round in 0..12 {
        let mut h = OfiHarness::new(provider);
        let (a, b) = (h.fabric(NodeId(0)), h.fabric(NodeId(1)));
        a.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
        b.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let higher = {
            let (b, barrier) = (b.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                b.connect(ConnId::new(NodeId(0), CHANNEL), Access::ALL)
            })
        };
        barrier.wait();
        if round % 3 == 1 {
            // The higher node asks first (with `sockets`, it waits for the lower one's hello).
            std::thread::sleep(Duration::from_millis(20));
        }
        a.connect(ConnId::new(NodeId(1), CHANNEL), Access::ALL).unwrap();
        higher.join().unwrap().unwrap();
        let ports = [channel_address(&h, 0).port(), channel_address(&h, 1).port()];
        let settled = Instant::now() + Duration::from_secs(10);
        while streams_accepted_on(&ports) > 1 && provider != "sockets" && Instant::now() < settled {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(streams_accepted_on(&ports), 1, "round {round}: streams between the two");
        if provider == "sockets" {
            let opened = mu_fabric_ofi::streams::opened_to(channel_address(&h, 0)).unwrap();
            assert!(opened.is_empty(), "round {round}: the higher node opened {opened:?}");
        }
    }
}

/// Waits until this process holds no stream opened to `to`.
fn until_none_opened_to(to: std::net::SocketAddrV4, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !mu_fabric_ofi::streams::opened_to(to).unwrap().is_empty() {
        assert!(Instant::now() < deadline, "{what} is still held");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Nodes 1 (higher, the pair's `a`, with the endpoint) and 0 (lower) bound; then their one
/// stream breaks under both (as a reset from the network would break it) and the higher
/// node's next write opens a stream (or more) itself.
fn higher_node_opens_a_stream(
    h: &mut OfiHarness,
) -> mu_fabric::conformance::Pair<mu_fabric_ofi::OfiFabric> {
    use mu_fabric::conformance::{pair, run_one, CHANNEL, DATA};
    use mu_fabric::{Access, ConnId, RemoteAddr, Source, Status, WorkRequest};
    use mu_fabric_ofi::streams;
    let mut p = pair(h, NodeId(1), NodeId(0), Access::ALL, Access::ALL);
    let (to_low, to_high) = (channel_address(h, 0), channel_address(h, 1));
    assert!(streams::opened_to(to_low).unwrap().is_empty(), "the higher node opened none");
    let lowers = streams::opened_to(to_high).unwrap();
    assert!(!lowers.is_empty(), "the lower node opened the stream");
    for stream in &lowers {
        streams::shut_down(stream).unwrap();
    }
    until_none_opened_to(to_high, "the broken stream");
    // And the higher node's end of it is gone too (its provider read the end), so that the
    // write finds no stream: a fixed pause for that was too short on a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(10);
    while streams::held().unwrap().iter().any(|s| s.local == to_high) {
        assert!(Instant::now() < deadline, "the higher node still holds its end of the stream");
        std::thread::sleep(Duration::from_millis(5));
    }
    let conn = ConnId::new(NodeId(0), CHANNEL);
    let write = WorkRequest::write(1, Source::Inline(b"x"), RemoteAddr { region: DATA, offset: 0 });
    assert_eq!(run_one(h, &mut p.ep, conn, &write).status, Status::Success);
    // At least one: on a loaded machine the provider has been seen to open two for this one
    // write (why is not known), and the backend must shut down every one it finds.
    assert!(!streams::opened_to(to_low).unwrap().is_empty(), "the write opened a stream");
    p
}

/// Retries a slow revocation by `fabric` of `peer` until it holds (within 10 s), then checks
/// that the streams between nodes 0 and 1 are ones node 0 opened.
fn revoke_until_it_holds(h: &OfiHarness, fabric: &mu_fabric_ofi::OfiFabric, peer: NodeId) {
    use mu_fabric::conformance::CHANNEL;
    use mu_fabric::{Access, ConnId, Fabric, QpState};
    use mu_fabric_ofi::streams;
    let conn = ConnId::new(peer, CHANNEL);
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = fabric.set_access_slow(conn, Access::READ) {
        assert!(Instant::now() < deadline, "the lower node opened a stream, the fence: {e}");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(fabric.qp_state(conn).unwrap(), QpState::ReadyToSend);
    assert!(streams::opened_to(channel_address(h, 0)).unwrap().is_empty());
    assert!(!streams::opened_to(channel_address(h, 1)).unwrap().is_empty(), "node 0's stream");
}

fn assert_fence_refused(result: Result<(), mu_fabric::FabricError>, peer: NodeId) {
    match result {
        Err(mu_fabric::FabricError::FenceFailed { node, why }) => {
            assert_eq!(node, peer);
            assert!(why.contains("only the lower node opens"), "{why}");
        }
        other => panic!("a fence while the higher node has a stream of its own: {other:?}"),
    }
}

/// A stream that breaks while both nodes live leaves the higher node's provider free to open
/// one itself on its next post. The higher node finds it after its next fence, shuts it down
/// and claims no barrier (the lower node may be writing on a stream of its own); the lower
/// node is asked for a hello, opens a stream, and a later fence, on that stream, holds.
#[test]
fn a_stream_the_higher_node_opened_is_shut_and_fences_nothing() {
    use mu_fabric::conformance::CHANNEL;
    use mu_fabric::{Access, ConnId, Fabric, QpState};
    let mut h = OfiHarness::new("sockets");
    let p = higher_node_opens_a_stream(&mut h);
    let conn = ConnId::new(NodeId(0), CHANNEL);
    assert_fence_refused(p.a.set_access_slow(conn, Access::READ), NodeId(0));
    assert_eq!(p.a.qp_state(conn).unwrap(), QpState::Error);
    until_none_opened_to(channel_address(&h, 0), "the stream the higher node opened");
    revoke_until_it_holds(&h, &p.a, NodeId(0));
}

/// The same stream, met by the lower node's fence: it comes in on the lower node's channel port
/// from the higher node's address, where no node lower than node 0 lives, so the lower node
/// knows it for one the higher node opened, shuts it down and claims no barrier; its next post
/// opens a stream of its own, and a later fence holds.
#[test]
fn a_stream_the_higher_node_opened_is_shut_by_the_lower_nodes_fence() {
    let mut h = OfiHarness::new("sockets");
    let p = higher_node_opens_a_stream(&mut h);
    let conn = mu_fabric::ConnId::new(NodeId(1), mu_fabric::conformance::CHANNEL);
    use mu_fabric::Fabric;
    assert_fence_refused(p.b.set_access_slow(conn, mu_fabric::Access::READ), NodeId(1));
    until_none_opened_to(channel_address(&h, 0), "the stream the higher node opened");
    revoke_until_it_holds(&h, &p.b, NodeId(1));
}

/// Two threads of the lower node that post to the higher one while no stream exists (a data
/// post and a control post, after the stream broke under both) can each open one with
/// `sockets`, and the higher node's writes may then go on either: a fence on one is no barrier.
/// The lower node's fence finds more than one stream its process opened to the peer, shuts
/// them all down and claims nothing; its next post opens one again, and a later fence holds.
/// The provider cannot be made to open the second stream on demand, so this test opens it
/// itself, from the lower node's process (the pair's only node that may open streams to node
/// 1, so the count is node 0's).
#[test]
fn a_second_stream_the_lower_node_opened_is_shut_by_its_fence() {
    use mu_fabric::conformance::{pair, CHANNEL};
    use mu_fabric::{Access, ConnId, Fabric};
    use mu_fabric_ofi::streams;
    use std::io::Read;
    let mut h = OfiHarness::new("sockets");
    let p = pair(&mut h, NodeId(1), NodeId(0), Access::ALL, Access::ALL);
    let to_high = channel_address(&h, 1);
    let carried = |at| streams::opened_to(at).unwrap().into_iter().filter(|s| !s.connecting);
    assert_eq!(carried(to_high).count(), 1, "node 0 opened the pair's stream");
    let mut second = std::net::TcpStream::connect(to_high).expect("a second stream to node 1");
    let deadline = Instant::now() + Duration::from_secs(10);
    while carried(to_high).count() < 2 {
        assert!(Instant::now() < deadline, "the second stream never came up");
        std::thread::sleep(Duration::from_millis(1));
    }
    let conn = ConnId::new(NodeId(1), CHANNEL);
    match p.b.set_access_slow(conn, Access::READ) {
        Err(mu_fabric::FabricError::FenceFailed { node, why }) => {
            assert_eq!(node, NodeId(1));
            assert!(why.contains("more than one stream"), "{why}");
        }
        other => panic!("a fence while node 0 holds two streams to node 1: {other:?}"),
    }
    second.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(second.read(&mut [0u8; 1]).unwrap(), 0, "the second stream was shut down");
    // As the provider closes a stream it reads the end of.
    drop(second);
    revoke_until_it_holds(&h, &p.b, NodeId(1));
    assert_eq!(carried(to_high).count(), 1, "one stream again, opened by the fence that held");
}
