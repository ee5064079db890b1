//! The client path on the shared-memory fabric: a server thread on a node of its own, clients
//! in threads with their own nodes, and one client in a child process killed mid-stream (this
//! test binary run again, `child_main`). Every test starts and stops what it uses, in a
//! private run directory removed at the end.

mod threaded;

use mu_fabric::NodeId;
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_request_rings::{ClientLayout, Grant, ReleaseReason, RingClient};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use threaded::{round_trips, Ask, ServerThread, WAIT};

const CLUSTER: u64 = 0x7269_6e67;
const SERVER: u16 = 0;
const CHILD_DIR_VAR: &str = "MU_RINGS_CHILD_RUN_DIR";
const CHILD_NODE_VAR: &str = "MU_RINGS_CHILD_NODE";
const MARK: &str = "RINGS ";

/// A private run directory on tmpfs where there is one, removed on drop.
struct RunDir(PathBuf);

impl RunDir {
    fn new(tag: &str) -> RunDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = base.join(format!("mu-rings-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new().mode(0o700).create(&path).expect("create run dir");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        RunDir(path)
    }

    fn node(&self, node: u16) -> ShmFabric {
        ShmFabric::create(ShmConfig::new(&self.0, CLUSTER, NodeId(node)))
            .unwrap_or_else(|e| panic!("start node {node}: {e}"))
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn clients_in_threads_are_served_and_a_crashed_one_is_released() {
    let run = RunDir::new("threads");
    let server = ServerThread::start(run.node(SERVER));
    let mut clients = Vec::new();
    for node in 1..=3u16 {
        let fabric = run.node(node);
        let (asks, layout) = (server.asks.clone(), server.layout);
        clients.push(std::thread::spawn(move || {
            let mut client = ServerThread::join(&asks, &layout, fabric, node);
            round_trips(&mut client, node, 0..300);
            // Node 3 then dies (as its process would), the others go on.
            if node == 3 {
                client.fabric().crash();
                return;
            }
            round_trips(&mut client, node, 300..600);
        }));
    }
    let crashed = server.wait_release(3);
    assert_eq!(crashed.reason, ReleaseReason::CrashNotified);
    for c in clients {
        c.join().expect("client thread");
    }
    // A new client takes the freed slot.
    let mut late = ServerThread::join(&server.asks, &server.layout, run.node(4), 4);
    round_trips(&mut late, 4, 0..50);
}

/// A client in a child process of ours, killed and reaped on drop.
struct ChildClient {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl ChildClient {
    fn spawn(run: &RunDir, node: u16) -> ChildClient {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--ignored", "--exact", "child_main", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_VAR, &run.0)
            .env(CHILD_NODE_VAR, node.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // The harness may print its own words before the child's on the same line.
                if let Some(at) = line.find(MARK) {
                    if tx.send(line[at + MARK.len()..].to_string()).is_err() {
                        return;
                    }
                }
            }
        });
        ChildClient { child, lines }
    }

    fn line(&self) -> String {
        self.lines.recv_timeout(WAIT).expect("the child said nothing in time")
    }
}

impl Drop for ChildClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex")).collect()
}

#[test]
fn a_client_process_killed_mid_stream_is_released_and_the_others_served() {
    let run = RunDir::new("child");
    let server = ServerThread::start(run.node(SERVER));
    let mut child = ChildClient::spawn(&run, 5);
    let stdin = child.child.stdin.as_mut().expect("stdin");
    writeln!(stdin, "{}", hex(&server.layout.to_bytes())).expect("layout to the child");
    assert_eq!(child.line(), "READY");
    let (tx, rx) = mpsc::channel();
    server.asks.send(Ask::Join { node: 5, grant: tx }).expect("server");
    let grant = rx.recv_timeout(WAIT).expect("grant").expect("admit");
    let stdin = child.child.stdin.as_mut().expect("stdin");
    writeln!(stdin, "{}", hex(&grant)).expect("grant to the child");
    // Served a while, then killed in the middle of its stream of requests.
    let mut beside = ServerThread::join(&server.asks, &server.layout, run.node(6), 6);
    loop {
        let line = child.line();
        let served: u32 =
            line.strip_prefix("SERVED ").and_then(|n| n.parse().ok()).expect("SERVED n");
        round_trips(&mut beside, 6, served..served + 5);
        if served >= 500 {
            break;
        }
    }
    child.child.kill().expect("kill the child");
    child.child.wait().expect("reap the child");
    // Noticed by the poll's crash check, or by a response that could not land first.
    let released = server.wait_release(5);
    assert!(
        matches!(
            released.reason,
            ReleaseReason::CrashNotified
                | ReleaseReason::ResponseFailed(mu_fabric::Status::PeerUnreachable)
        ),
        "{released:?}"
    );
    round_trips(&mut beside, 6, 1000..1100);
}

/// The child's side: a client on node `MU_RINGS_CHILD_NODE` of `MU_RINGS_CHILD_RUN_DIR` that
/// reads its grant from stdin and sends requests until it is killed. Does nothing when run
/// without them.
#[test]
#[ignore]
fn child_main() {
    let (Ok(dir), Ok(node)) = (std::env::var(CHILD_DIR_VAR), std::env::var(CHILD_NODE_VAR)) else {
        return;
    };
    let node: u16 = node.parse().expect("node id");
    let fabric = ShmFabric::create(ShmConfig::new(dir, CLUSTER, NodeId(node))).expect("node");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("layout line");
    let layout = ClientLayout::from_bytes(&unhex(line.trim())).expect("layout");
    let prepared = RingClient::prepare(fabric, &layout).expect("prepare");
    println!("{MARK}READY");
    line.clear();
    std::io::stdin().read_line(&mut line).expect("grant line");
    let grant = Grant::from_bytes(&unhex(line.trim())).expect("grant");
    let mut client = prepared.connect(&grant).map_err(|(_, e)| e).expect("connect");
    for round in 0u32.. {
        round_trips(&mut client, node, round * 100..(round + 1) * 100);
        println!("{MARK}SERVED {}", (round + 1) * 100);
    }
}

#[test]
fn round_trips_can_be_measured_against_an_echo_server() {
    let run = RunDir::new("measure");
    let server = ServerThread::start(run.node(SERVER));
    let mut client = ServerThread::join(&server.asks, &server.layout, run.node(1), 1);
    let r = mu_request_rings::measure_round_trip(&mut client, &[3u8; 32], 10, 200, WAIT)
        .expect("measure");
    assert_eq!(r.samples, 200);
    assert!(0 < r.min_ns && r.min_ns <= r.p50_ns && r.p50_ns <= r.p99_ns && r.p99_ns <= r.max_ns);
    assert_eq!(client.outstanding(), 0);
}
