//! Child-process scaffolding shared by the integration tests of this crate (`conformance`,
//! `fencing`, `lifecycle`).
//!
//! Nodes that must be separate processes are the test binary itself, run again with
//! `--ignored --exact child_main` ([`child_command`]). Each binary keeps its own `child_main`
//! (their modes and environment variables differ); what they share is here: private run
//! directories ([`RunDir`]), the wire form of a [`TaskSpec`] and of a task's outcome, finding a
//! child's marked lines in its stdout ([`marked`]), watching and signalling child processes
//! ([`proc_state`], [`ChildNode`]) and stopping a writer in the middle of a copy
//! ([`hold_mid_write`]).

// Each test binary compiles its own copy of this module (`mod common;`) and none of them uses
// all of it: without this, every binary would warn about the helpers only the others use.
#![allow(dead_code)]

use mu_fabric::{ConnId, FabricError, LocalRegion, NodeId, Status};
use mu_fabric_shm::{ShmConfig, ShmFabric, ShmRegion};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Run directories.
// ---------------------------------------------------------------------------------------------

/// A fresh path `mu-<tag>-<pid>-<n>` on tmpfs where there is one (under /dev/shm, else the
/// temporary directory). Nothing is created.
pub fn fresh_run_dir(tag: &str) -> PathBuf {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    base.join(format!("mu-{tag}-{}-{n}", std::process::id()))
}

/// The run directory of one cluster, at a [`fresh_run_dir`] path, removed on drop even if the
/// test panics.
pub struct RunDir {
    path: PathBuf,
    cluster: u64,
}

impl RunDir {
    /// Creates a fresh private directory: mode exactly 0700, whatever the umask.
    pub fn new(tag: &str, cluster: u64) -> RunDir {
        let path = fresh_run_dir(tag);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new().mode(0o700).create(&path).expect("create run dir");
        // Whatever the umask: exactly 0700.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
            .expect("chmod run dir");
        RunDir { path, cluster }
    }

    /// Picks a fresh path but leaves creating the directory to the first node started in it.
    pub fn uncreated(tag: &str, cluster: u64) -> RunDir {
        RunDir { path: fresh_run_dir(tag), cluster }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The configuration of node `node` of this directory's cluster.
    pub fn config(&self, node: u16) -> ShmConfig {
        ShmConfig::new(&self.path, self.cluster, NodeId(node))
    }

    pub fn create(&self, node: u16) -> Result<ShmFabric, FabricError> {
        ShmFabric::create(self.config(node))
    }

    pub fn node(&self, node: u16) -> ShmFabric {
        self.create(node).unwrap_or_else(|e| panic!("create node {node}: {e}"))
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        // A test may have changed its mode.
        let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o700));
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// `len` bytes of a local region from `offset`.
pub fn read_back(region: &ShmRegion, offset: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    region.read(offset, &mut out).expect("local read");
    out
}

// ---------------------------------------------------------------------------------------------
// What crosses the process boundary.
// ---------------------------------------------------------------------------------------------

// The wire forms live in the conformance module, shared with the other backends' harnesses.
#[allow(unused_imports)]
pub use mu_fabric::conformance::{
    assert_spec_round_trips, decode_spec, encode_spec, format_outcome, marked, parse_outcome,
    read_marked,
};

// ---------------------------------------------------------------------------------------------
// Child processes.
// ---------------------------------------------------------------------------------------------

/// This test binary again, running only its `child_main`, with stdin and stdout piped. The
/// caller adds the child's orders (environment variables) and spawns it.
pub fn child_command() -> Command {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args(["--ignored", "--exact", "child_main", "--nocapture", "--test-threads=1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    command
}

/// A thread that reads `stdout` and sends on what follows `marker` in the lines that hold it;
/// the receiver disconnects when stdout closes.
pub fn forward_marked(stdout: ChildStdout, marker: &'static str) -> mpsc::Receiver<String> {
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(said) = marked(&line, marker) {
                if tx.send(said.to_string()).is_err() {
                    return;
                }
            }
        }
    });
    lines
}

/// The state letter of process `pid` (`R`, `S`, `T`, `Z`, …); `None` if there is no such process.
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Whether process `pid` has ended: gone, or a zombie whose threads have all exited. (A zombie
/// main thread alone is not enough: after SIGKILL the main thread can be a zombie while other
/// threads, the one that keeps the death flag among them, are still exiting.)
pub fn proc_ended(pid: u32) -> bool {
    match proc_state(pid) {
        None | Some('X') => true,
        Some('Z') => std::fs::read_dir(format!("/proc/{pid}/task")).map_or(true, |tasks| {
            tasks.flatten().all(|t| {
                let tid = t.file_name();
                let stat = std::fs::read_to_string(format!(
                    "/proc/{pid}/task/{}/stat",
                    tid.to_string_lossy()
                ));
                // The state follows the command name, which is in parentheses.
                stat.map_or(true, |s| {
                    s.rsplit_once(')')
                        .and_then(|(_, rest)| rest.trim_start().chars().next())
                        .is_none_or(|state| matches!(state, 'Z' | 'X'))
                })
            })
        }),
        Some(_) => false,
    }
}

/// Waits until process `pid` is stopped; panics after `within`.
pub fn wait_stopped(pid: u32, within: Duration) {
    let start = Instant::now();
    while proc_state(pid) != Some('T') {
        assert!(start.elapsed() < within, "child {pid} did not stop");
        std::thread::yield_now();
    }
}

/// Waits until process `pid` has ended ([`proc_ended`]); panics after `within`.
pub fn wait_dead(pid: u32, within: Duration) {
    let start = Instant::now();
    while !proc_ended(pid) {
        assert!(start.elapsed() < within, "child {pid} did not die");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Sends `sig` to `pid`, which must be a child of ours not reaped yet (so that the pid cannot
/// have been reused).
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill takes a pid and a signal number, no memory. The caller vouches for the pid.
    let rc = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
}

/// Stops the writer `pid` (a child of ours, not reaped) with a write into `target` in flight:
/// spins until the target's in-flight word for `side` is odd, SIGSTOPs the writer, waits until
/// it is stopped and checks the word did not move; if it did, lets the writer go and tries
/// again. Returns that word. Panics if no write is caught within `catch_within`, or the writer
/// does not stop within `stop_within`.
pub fn hold_mid_write(
    pid: u32,
    target: &ShmFabric,
    side: ConnId,
    catch_within: Duration,
    stop_within: Duration,
) -> u64 {
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < catch_within, "never caught the writer mid-copy");
        let seq = target.peer_inflight_seq(side).expect("in-flight word");
        if seq % 2 == 0 {
            std::hint::spin_loop();
            continue;
        }
        signal(pid, libc::SIGSTOP);
        wait_stopped(pid, stop_within);
        if target.peer_inflight_seq(side).expect("in-flight word") == seq {
            return seq; // stopped with that very write in flight
        }
        signal(pid, libc::SIGCONT);
    }
}

/// A node running in a child process of ours, whose marked lines a thread collects
/// ([`forward_marked`]). Killed and reaped on drop.
pub struct ChildNode {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    status: Option<ExitStatus>,
    incarnation: Option<u32>,
    /// How long to wait for a line of the child, or for it to stop.
    wait: Duration,
}

impl ChildNode {
    /// Spawns `command` (a [`child_command`]) and collects the lines it marks with `marker`.
    /// Every wait on the child (for a line, for it to stop, for a write to catch) gives up after
    /// `wait`.
    pub fn launch(mut command: Command, marker: &'static str, wait: Duration) -> ChildNode {
        let mut child = command.spawn().expect("spawn child");
        let stdin = child.stdin.take();
        let lines = forward_marked(child.stdout.take().expect("child stdout"), marker);
        ChildNode { child, stdin, lines, status: None, incarnation: None, wait }
    }

    /// Waits until the child says `READY <incarnation>` (its node is up); returns the
    /// incarnation, which [`ChildNode::incarnation`] gives from then on.
    pub fn wait_ready(&mut self) -> u32 {
        let line = self.line().expect("child died before it was ready");
        let incarnation = line
            .strip_prefix("READY ")
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("child said {line:?}"));
        self.incarnation = Some(incarnation);
        incarnation
    }

    /// The incarnation of the child's node (see [`ChildNode::wait_ready`]).
    pub fn incarnation(&self) -> u32 {
        self.incarnation.expect("the child has not said it is ready")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child's next marked line; `None` if its stdout closed (it died) first.
    pub fn line(&self) -> Option<String> {
        match self.lines.recv_timeout(self.wait) {
            Ok(l) => Some(l),
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("child said nothing within {:?}", self.wait)
            }
        }
    }

    /// Sends the child one line on its stdin.
    pub fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("child stdin");
        stdin
            .write_all(line.as_bytes())
            .and_then(|_| stdin.write_all(b"\n"))
            .and_then(|_| stdin.flush())
            .expect("talk to child");
    }

    /// Waits for the child's program to end: (ops_ok, last status).
    pub fn outcome(&self) -> (u64, Option<Status>) {
        let line = self.line().expect("child died before reporting");
        let outcome = parse_outcome(&line).unwrap_or_else(|| panic!("child said {line:?}"));
        (outcome.ops_ok, outcome.last_status)
    }

    pub fn signal(&self, sig: i32) {
        assert!(self.status.is_none(), "signalling a reaped child");
        signal(self.pid(), sig);
    }

    /// Whether the child has exited, without waiting (waitpid with WNOHANG).
    pub fn try_reap(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("waitpid");
        }
        self.status
    }

    /// SIGKILLs the child and reaps it; returns how it ended.
    pub fn kill(&mut self) -> ExitStatus {
        let _ = self.child.kill();
        let status = self.child.wait().expect("reap child");
        self.status = Some(status);
        status
    }

    /// Running (or stopped), not a zombie, and not reaped.
    pub fn is_alive(&mut self) -> bool {
        !proc_ended(self.pid()) && self.try_reap().is_none()
    }

    /// Stops the child, a writer, with a write into `target` in flight ([`hold_mid_write`]);
    /// returns the in-flight word.
    pub fn hold_mid_write(&self, target: &ShmFabric, side: ConnId) -> u64 {
        assert!(self.status.is_none(), "signalling a reaped child");
        hold_mid_write(self.pid(), target, side, self.wait, self.wait)
    }
}

impl Drop for ChildNode {
    fn drop(&mut self) {
        // SIGKILL also ends a stopped child.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
