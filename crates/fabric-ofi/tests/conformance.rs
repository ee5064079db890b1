//! The fabric conformance suite on libfabric, once per provider, over loopback TCP, with tasks
//! as real child processes.
//!
//! A task is this very test binary, run again with `--ignored --exact child_main` and its spec,
//! provider and port block in the environment. It prints `MU-CHILD READY` once its node is up,
//! waits for a `START` line, runs its program and prints `MU-CHILD OUTCOME <ops_ok> <status>`.

use mu_fabric::conformance::{
    decode_spec, encode_spec, format_outcome, parse_outcome, Harness, Program, ProgramRunner,
    TaskOutcome, TaskSpec,
};
use mu_fabric::{LocalRegion, NodeId};
use mu_fabric_ofi::{NodeAddr, OfiConfig, OfiFabric, PORTS_PER_NODE};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

const CLUSTER_ID: u64 = 0x6d75_6f66_6974;
const MARKER: &str = "MU-CHILD ";
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
    assert!(PORTS_PER_NODE <= NODE_STRIDE);
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

fn read_marked(stdout: &mut impl BufRead) -> Option<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if stdout.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if let Some(at) = line.find(MARKER) {
            return Some(line[at + MARKER.len()..].trim_end().to_string());
        }
    }
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
        let line = read_marked(&mut stdout).expect("child died before it was ready");
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
        let line = read_marked(&mut task.stdout);
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
    let mut runner = ProgramRunner::new(fabric, &spec).expect("child setup");
    println!("MU-CHILD READY");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("wait for START");
    assert_eq!(line.trim(), "START");
    loop {
        if let Some(outcome) = runner.step() {
            println!("MU-CHILD {}", format_outcome(&outcome));
            return;
        }
        if spec.program == Program::Host {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

mod sockets {
    mu_fabric::conformance_tests!(super::OfiHarness::new("sockets"));
}

mod tcp_rxm {
    mu_fabric::conformance_tests!(super::OfiHarness::new("tcp;ofi_rxm"));
}
