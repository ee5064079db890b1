//! The fabric conformance suite on shared memory, with tasks as real child processes.
//!
//! A task is this very test binary, run again with `--ignored --exact child_main` and its spec in
//! the environment. It speaks to the parent over its stdin and stdout: it prints
//! `MU-CHILD READY` once its node is up, waits for a `START` line, runs its program and prints
//! `MU-CHILD OUTCOME <ops_ok> <status>`.

use mu_fabric::conformance::{Harness, Program, ProgramRunner, TaskOutcome, TaskSpec};
use mu_fabric::{Access, ConnId, NodeId, RegionId, RemoteAddr, Status};
use mu_fabric_shm::{ShmConfig, ShmFabric};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const CLUSTER_ID: u64 = 0x6d75_7465_7374;

pub struct ShmHarness {
    dir: PathBuf,
    nodes: HashMap<NodeId, ShmFabric>,
    children: HashMap<NodeId, u32>,
}

pub struct ShmTask {
    node: NodeId,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    spec: TaskSpec,
}

/// A fresh private run directory on tmpfs where there is one.
pub fn fresh_run_dir(tag: &str) -> PathBuf {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    base.join(format!("mu-{tag}-{}-{n}", std::process::id()))
}

impl ShmHarness {
    pub fn new() -> ShmHarness {
        ShmHarness {
            dir: fresh_run_dir("conformance"),
            nodes: HashMap::new(),
            children: HashMap::new(),
        }
    }
}

impl Default for ShmHarness {
    fn default() -> Self {
        ShmHarness::new()
    }
}

impl Drop for ShmHarness {
    fn drop(&mut self) {
        for pid in self.children.values() {
            // SAFETY: sending a signal to a child we spawned; no memory is passed.
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Harness for ShmHarness {
    type F = ShmFabric;
    type Task = ShmTask;

    fn fabric(&mut self, node: NodeId) -> ShmFabric {
        let dir = self.dir.clone();
        self.nodes
            .entry(node)
            .or_insert_with(|| {
                ShmFabric::create(ShmConfig::new(dir, CLUSTER_ID, node)).expect("create node")
            })
            .clone()
    }

    fn tick(&mut self) {
        std::thread::yield_now();
    }

    fn settle(&mut self) {}

    fn crash(&mut self, node: NodeId) {
        if let Some(f) = self.nodes.get(&node) {
            f.crash();
            return;
        }
        let pid = self.children.remove(&node).expect("crash of an unknown node");
        // SAFETY: signals a child we spawned and still own.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        wait_dead(pid);
    }

    fn spawn(&mut self, spec: TaskSpec) -> ShmTask {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--ignored", "--exact", "child_main", "--nocapture", "--test-threads=1"])
            .env("MU_SHM_CHILD_DIR", &self.dir)
            .env("MU_SHM_CHILD_SPEC", encode(&spec))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let line = read_marked(&mut stdout).expect("child died before it was ready");
        assert_eq!(line, "READY", "child said {line:?}");
        self.children.insert(spec.node, child.id());
        ShmTask { node: spec.node, child, stdin, stdout, spec }
    }

    fn start(&mut self, task: &ShmTask) {
        let mut stdin = &task.stdin;
        stdin.write_all(b"START\n").and_then(|_| stdin.flush()).expect("start child");
    }

    fn hold_mid_write(&mut self, task: &ShmTask) {
        let Program::WriteLoop { conn, .. } = task.spec.program else { panic!("not a write loop") };
        let target = self.fabric(conn.peer);
        let side = ConnId::new(task.node, conn.channel);
        let pid = task.child.id() as i32;
        let start = Instant::now();
        loop {
            assert!(start.elapsed() < Duration::from_secs(30), "never caught the writer mid-copy");
            let seq = target.peer_inflight_seq(side).unwrap();
            if seq % 2 == 0 {
                std::hint::spin_loop();
                continue;
            }
            // SAFETY: signals our own child.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            wait_stopped(pid as u32);
            if target.peer_inflight_seq(side).unwrap() == seq {
                return; // stopped with that very write still in flight
            }
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }

    fn release(&mut self, task: &ShmTask) {
        // SAFETY: signals our own child (a no-op if it was fenced).
        unsafe { libc::kill(task.child.id() as i32, libc::SIGCONT) };
    }

    fn join(&mut self, mut task: ShmTask) -> Option<TaskOutcome> {
        let line = read_marked(&mut task.stdout);
        let _ = task.child.wait();
        self.children.remove(&task.node);
        let line = line?;
        let mut parts = line.split_whitespace();
        assert_eq!(parts.next(), Some("OUTCOME"), "child said {line:?}");
        let ops_ok = parts.next()?.parse().ok()?;
        let last_status = match parts.next()? {
            "none" => None,
            s => Some(parse_status(s)),
        };
        Some(TaskOutcome { ops_ok, last_status })
    }
}

fn read_marked(stdout: &mut BufReader<ChildStdout>) -> Option<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if stdout.read_line(&mut line).ok()? == 0 {
            return None;
        }
        // libtest may have printed "test child_main ... " on the same line.
        if let Some(at) = line.find("MU-CHILD ") {
            return Some(line[at + "MU-CHILD ".len()..].trim_end().to_string());
        }
    }
}

fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

fn wait_stopped(pid: u32) {
    let start = Instant::now();
    while proc_state(pid) != Some('T') {
        assert!(start.elapsed() < Duration::from_secs(10), "child {pid} did not stop");
        std::thread::yield_now();
    }
}

fn wait_dead(pid: u32) {
    let start = Instant::now();
    while !matches!(proc_state(pid), None | Some('Z') | Some('X')) {
        assert!(start.elapsed() < Duration::from_secs(10), "child {pid} did not die");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn parse_status(s: &str) -> Status {
    match s {
        "Success" => Status::Success,
        "RemoteAccessDenied" => Status::RemoteAccessDenied,
        "RemoteOutOfBounds" => Status::RemoteOutOfBounds,
        "RemoteInvalidRequest" => Status::RemoteInvalidRequest,
        "LocalProtection" => Status::LocalProtection,
        "Flushed" => Status::Flushed,
        "PeerUnreachable" => Status::PeerUnreachable,
        other => panic!("unknown status {other}"),
    }
}

// A spec travels as `node;region,len,access|...;peer,channel,access|...;program,args...`.
fn encode(spec: &TaskSpec) -> String {
    let regions: Vec<String> =
        spec.regions.iter().map(|(id, len, a)| format!("{},{},{}", id.0, len, a.bits())).collect();
    let conns: Vec<String> = spec
        .connect
        .iter()
        .map(|(c, a)| format!("{},{},{}", c.peer.0, c.channel, a.bits()))
        .collect();
    let program = match &spec.program {
        Program::Host => "host".to_string(),
        Program::WriteLoop { conn, remote, len } => {
            format!(
                "write,{},{},{},{},{}",
                conn.peer.0, conn.channel, remote.region.0, remote.offset, len
            )
        }
        Program::CasIncrements { conn, remote, count } => {
            format!(
                "cas,{},{},{},{},{}",
                conn.peer.0, conn.channel, remote.region.0, remote.offset, count
            )
        }
    };
    format!("{};{};{};{}", spec.node.0, regions.join("|"), conns.join("|"), program)
}

fn decode(s: &str) -> TaskSpec {
    let fields: Vec<&str> = s.split(';').collect();
    let nums = |x: &str| -> Vec<u64> { x.split(',').map(|n| n.parse().expect("number")).collect() };
    let list =
        |x: &str| -> Vec<Vec<u64>> { x.split('|').filter(|p| !p.is_empty()).map(nums).collect() };
    let regions = list(fields[1])
        .into_iter()
        .map(|v| (RegionId(v[0] as u16), v[1] as usize, Access::from_bits_truncate(v[2] as u8)))
        .collect();
    let connect = list(fields[2])
        .into_iter()
        .map(|v| {
            (ConnId::new(NodeId(v[0] as u16), v[1] as u8), Access::from_bits_truncate(v[2] as u8))
        })
        .collect();
    let mut p = fields[3].splitn(2, ',');
    let kind = p.next().unwrap();
    let program = if kind == "host" {
        Program::Host
    } else {
        let v = nums(p.next().unwrap());
        let conn = ConnId::new(NodeId(v[0] as u16), v[1] as u8);
        let remote = RemoteAddr { region: RegionId(v[2] as u16), offset: v[3] };
        match kind {
            "write" => Program::WriteLoop { conn, remote, len: v[4] as u32 },
            "cas" => Program::CasIncrements { conn, remote, count: v[4] },
            _ => panic!("unknown program {kind}"),
        }
    };
    TaskSpec { node: NodeId(fields[0].parse().unwrap()), regions, connect, program }
}

/// Entry point of a task's process (see the module docs); ignored in normal runs.
#[test]
#[ignore = "entry point for the child processes of the conformance suite"]
fn child_main() {
    let (Ok(dir), Ok(spec)) =
        (std::env::var("MU_SHM_CHILD_DIR"), std::env::var("MU_SHM_CHILD_SPEC"))
    else {
        return;
    };
    let spec = decode(&spec);
    let fabric = ShmFabric::create(ShmConfig::new(dir, CLUSTER_ID, spec.node)).expect("child node");
    let mut runner = ProgramRunner::new(fabric, &spec).expect("child setup");
    println!("MU-CHILD READY");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("wait for START");
    assert_eq!(line.trim(), "START");
    loop {
        if let Some(outcome) = runner.step() {
            let status = outcome.last_status.map_or("none".to_string(), |s| format!("{s:?}"));
            println!("MU-CHILD OUTCOME {} {status}", outcome.ops_ok);
            return;
        }
        if spec.program == Program::Host {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[test]
fn spec_encoding_round_trips() {
    let spec = TaskSpec {
        node: NodeId(3),
        regions: vec![(RegionId(0), 4096, Access::ALL), (RegionId(2), 8, Access::READ)],
        connect: vec![(ConnId::new(NodeId(0), 1), Access::READ_WRITE)],
        program: Program::CasIncrements {
            conn: ConnId::new(NodeId(0), 1),
            remote: RemoteAddr { region: RegionId(0), offset: 128 },
            count: 5,
        },
    };
    assert_eq!(decode(&encode(&spec)), spec);
}

mu_fabric::conformance_tests!(ShmHarness::new());
