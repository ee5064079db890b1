//! The fabric conformance suite on shared memory, with tasks as real child processes.
//!
//! A task is this very test binary, run again with `--ignored --exact child_main` and its spec in
//! the environment. It speaks to the parent over its stdin and stdout: it prints
//! `MU-CHILD READY` once its node is up, waits for a `START` line, runs its program and prints
//! `MU-CHILD OUTCOME <ops_ok> <status>`.

mod common;

use common::{
    decode_spec, encode_spec, hold_mid_write, parse_outcome, read_marked, wait_dead, RunDir,
};
use mu_fabric::conformance::{run_child, Harness, Program, TaskOutcome, TaskSpec};
use mu_fabric::{ConnId, NodeId, RegionId, RemoteAddr};
use mu_fabric_shm::{ShmConfig, ShmFabric};
use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout};
use std::time::Duration;

const CLUSTER_ID: u64 = 0x6d75_7465_7374;
/// What the children print before the lines meant for the parent.
const MARKER: &str = "MU-CHILD ";

pub struct ShmHarness {
    /// Removed when the harness drops, after `Drop::drop` has killed the children and dropped
    /// the nodes.
    dir: RunDir,
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

impl ShmHarness {
    pub fn new() -> ShmHarness {
        ShmHarness {
            // The first node creates it.
            dir: RunDir::uncreated("conformance", CLUSTER_ID),
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
        // `self.dir` removes the run directory when it drops, after this.
    }
}

impl Harness for ShmHarness {
    type F = ShmFabric;
    type Task = ShmTask;

    fn fabric(&mut self, node: NodeId) -> ShmFabric {
        let dir = &self.dir;
        self.nodes.entry(node).or_insert_with(|| dir.create(node.0).expect("create node")).clone()
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
        wait_dead(pid, Duration::from_secs(10));
    }

    fn spawn(&mut self, spec: TaskSpec) -> ShmTask {
        let mut child = common::child_command()
            .env("MU_SHM_CHILD_DIR", self.dir.path())
            .env("MU_SHM_CHILD_SPEC", encode_spec(&spec))
            .spawn()
            .expect("spawn child");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let line = read_marked(&mut stdout, MARKER).expect("child died before it was ready");
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
        // Our own child, not reaped before `join`.
        let pid = task.child.id();
        hold_mid_write(pid, &target, side, Duration::from_secs(30), Duration::from_secs(10));
    }

    fn release(&mut self, task: &ShmTask) {
        // SAFETY: signals our own child (a no-op if it was fenced).
        unsafe { libc::kill(task.child.id() as i32, libc::SIGCONT) };
    }

    fn join(&mut self, mut task: ShmTask) -> Option<TaskOutcome> {
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
        (std::env::var("MU_SHM_CHILD_DIR"), std::env::var("MU_SHM_CHILD_SPEC"))
    else {
        return;
    };
    let spec = decode_spec(&spec);
    let fabric = ShmFabric::create(ShmConfig::new(dir, CLUSTER_ID, spec.node)).expect("child node");
    run_child(fabric, &spec, false);
}

#[test]
fn spec_encoding_round_trips() {
    common::assert_spec_round_trips(Program::CasIncrements {
        conn: ConnId::new(NodeId(0), 1),
        remote: RemoteAddr { region: RegionId(0), offset: 128 },
        count: 5,
    });
}

mu_fabric::conformance_tests!(ShmHarness::new());

mod doorbells {
    mu_fabric::conformance_tests!(@each super::ShmHarness::new(); doorbell_wakes_a_waiter,
        crash_rings_the_doorbell);
}
