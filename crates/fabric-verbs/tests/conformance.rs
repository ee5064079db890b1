//! The fabric conformance suite on RDMA verbs, with tasks as real child processes.
//!
//! Runs only where an RDMA device exists; elsewhere each test prints `skipped: no RDMA device`
//! and returns (the only skip allowed). Without the `verbs` feature this file compiles to nothing.
//!
//! A task is this very test binary, run again with `--ignored --exact child_main` and its spec in
//! the environment. It prints `MU-CHILD READY` once its node is up, waits for a `START` line on
//! stdin, runs its program and prints `MU-CHILD OUTCOME <ops_ok> <status>`.
//!
//! On RDMA the NIC copies, not the writer's CPU: `hold_mid_write` stops the writer's process once
//! its writes are visibly landing, and the NIC finishes what it was given. That is the situation a
//! revocation must handle on hardware.

#![cfg(feature = "verbs")]

use mu_fabric::conformance::{
    decode_spec, encode_spec, parse_outcome, read_marked, run_child, Harness, Program, TaskOutcome,
    TaskSpec, CHILD_MARKER as MARKER,
};
use mu_fabric::{LocalRegion, NodeId};
use mu_fabric_verbs::{VerbsConfig, VerbsError, VerbsFabric};
use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const CLUSTER_ID: u64 = 0x6d75_7665_7262;

pub struct VerbsHarness {
    dir: PathBuf,
    nodes: HashMap<NodeId, VerbsFabric>,
    children: HashMap<NodeId, u32>,
}

pub struct VerbsTask {
    node: NodeId,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    spec: TaskSpec,
}

impl VerbsHarness {
    /// A harness, or `None` when this host has no RDMA device. Any other failure to list devices
    /// fails the test: a broken device is not a reason to skip.
    pub fn try_new() -> Option<VerbsHarness> {
        match mu_fabric_verbs::device_names() {
            Ok(_) => {}
            Err(VerbsError::NoDevice { .. }) => return None,
            Err(e) => panic!("listing RDMA devices: {e}"),
        }
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("mu-verbs-conformance-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Some(VerbsHarness { dir, nodes: HashMap::new(), children: HashMap::new() })
    }
}

impl Drop for VerbsHarness {
    fn drop(&mut self) {
        for pid in self.children.values() {
            // SAFETY: signals a child we spawned; no memory is passed.
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < within, "{what} within {within:?}");
        std::thread::sleep(Duration::from_micros(100));
    }
}

impl Harness for VerbsHarness {
    type F = VerbsFabric;
    type Task = VerbsTask;

    fn fabric(&mut self, node: NodeId) -> VerbsFabric {
        let dir = self.dir.clone();
        self.nodes
            .entry(node)
            .or_insert_with(|| {
                VerbsFabric::open(VerbsConfig::new(dir, CLUSTER_ID, node))
                    .unwrap_or_else(|e| panic!("open node {node}: {e}"))
            })
            .clone()
    }

    fn tick(&mut self) {
        std::thread::yield_now();
    }

    fn settle(&mut self) {
        // The NIC finishes in-flight operations on its own; give it a moment.
        std::thread::sleep(Duration::from_millis(10));
    }

    fn crash(&mut self, node: NodeId) {
        if let Some(f) = self.nodes.get(&node) {
            f.crash();
            return;
        }
        let pid = self.children.remove(&node).expect("crash of an unknown node");
        // SAFETY: signals a child we spawned and still own.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        wait_for("the child dies", Duration::from_secs(10), || {
            matches!(proc_state(pid), None | Some('Z') | Some('X'))
        });
    }

    fn spawn(&mut self, spec: TaskSpec) -> VerbsTask {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--ignored", "--exact", "child_main", "--nocapture", "--test-threads=1"])
            .env("MU_VERBS_CHILD_DIR", &self.dir)
            .env("MU_VERBS_CHILD_SPEC", encode_spec(&spec))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdin = child.stdin.take().expect("child stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("child stdout"));
        let line = read_marked(&mut stdout, MARKER).expect("child died before it was ready");
        assert_eq!(line, "READY", "child said {line:?}");
        self.children.insert(spec.node, child.id());
        VerbsTask { node: spec.node, child, stdin, stdout, spec }
    }

    fn start(&mut self, task: &VerbsTask) {
        let mut stdin = &task.stdin;
        stdin.write_all(b"START\n").and_then(|_| stdin.flush()).expect("start child");
    }

    fn hold_mid_write(&mut self, task: &VerbsTask) {
        let Program::WriteLoop { conn, remote, .. } = task.spec.program else {
            panic!("not a write loop")
        };
        let target = self.fabric(conn.peer);
        let region = target.region(remote.region).expect("the write loop's target region");
        let at = remote.offset as usize;
        wait_for("the writer's bytes land", Duration::from_secs(30), || {
            let mut byte = [0u8];
            region.read(at, &mut byte).is_ok() && byte[0] != 0
        });
        let pid = task.child.id();
        // SAFETY: signals our own child, not reaped before `join`.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        wait_for("the writer stops", Duration::from_secs(10), || proc_state(pid) == Some('T'));
    }

    fn release(&mut self, task: &VerbsTask) {
        // SAFETY: signals our own child.
        unsafe { libc::kill(task.child.id() as i32, libc::SIGCONT) };
    }

    fn join(&mut self, mut task: VerbsTask) -> Option<TaskOutcome> {
        let line = read_marked(&mut task.stdout, MARKER);
        let _ = task.child.wait();
        self.children.remove(&task.node);
        parse_outcome(&line?)
    }
}

/// Entry point of a task's process (see the module docs); ignored in normal runs.
#[test]
#[ignore = "entry point for the child processes of the conformance suite"]
fn child_main() {
    let (Ok(dir), Ok(spec)) =
        (std::env::var("MU_VERBS_CHILD_DIR"), std::env::var("MU_VERBS_CHILD_SPEC"))
    else {
        return;
    };
    let spec = decode_spec(&spec);
    let fabric =
        VerbsFabric::open(VerbsConfig::new(dir, CLUSTER_ID, spec.node)).expect("child node");
    run_child(fabric, &spec, false);
}

/// Device discovery on this host: either a device, or exactly the "no RDMA device" error.
#[test]
fn discovery_reports_no_device_clearly() {
    match mu_fabric_verbs::device_names() {
        Ok(names) => assert!(!names.is_empty()),
        Err(e) => {
            assert!(e.is_no_device(), "{e}");
            assert!(e.to_string().starts_with("no RDMA device found"), "{e}");
            let dir = std::env::temp_dir().join(format!("mu-verbs-nodev-{}", std::process::id()));
            let err = VerbsFabric::open(VerbsConfig::new(&dir, CLUSTER_ID, NodeId(0)))
                .err()
                .expect("no device, no node");
            assert!(err.is_no_device(), "{err}");
        }
    }
}

mu_fabric::conformance_tests!(match VerbsHarness::try_new() {
    Some(harness) => harness,
    None => {
        println!("skipped: no RDMA device");
        return;
    }
});
