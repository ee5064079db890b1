//! A key-value store on three replica processes on the shared-memory fabric, checked from the
//! outside: whichever replica leads drives a few key-value clients through its log, every
//! process records what its clients invoked and were told (on `CLOCK_MONOTONIC`, which all
//! processes of the host share), the leader is killed (SIGKILL) half way, and the client
//! history of the whole run must be linearizable according to `lincheck` (porcupine;
//! docs/verification/linearizability.md), and the survivors' stores must be equal. The same
//! history with one read deliberately corrupted must be rejected, so that a checker that
//! accepts everything cannot pass the test. The run is made once per engine (Mu, Velos).
//!
//! Each replica is this test binary run again as `child_main`, told what to be by environment
//! variables. Its state machine is a `mu_kv::Store`. While it leads it runs `CLIENTS` clients,
//! one operation each at a time, proposed together in one `propose_many` call per round (so
//! their operations are concurrent, and batched). Each round appends to `history-<id>.log`:
//! before proposing, an `invoke` line per request; after, a `return` line (with the reply the
//! local store holds for that client and sequence number) or a `drop` line (refused before it
//! was handed over: it can never take effect). A request that failed after it was handed over
//! gets neither: its outcome is unknown, and its client continues under a new id. Every line
//! goes out in one `write` on an unbuffered file, so that a SIGKILLed leader leaves behind
//! everything it was told.
//!
//! To kill the leader the test writes a `die-<id>` file: the leader then sends itself SIGKILL
//! from another thread at a random moment of its next round's proposal, so that the kill
//! lands, most of the time, with operations in flight, replicated nowhere, to a minority, or
//! to a majority (a kill from the test process would nearly always land in the pause between
//! two rounds).
//!
//! When the test asks it to stop (the `stop` file), a replica stops proposing and keeps
//! reporting how many requests it applied and its store's digest (`state-<id>`) until the test
//! has seen the survivors agree and writes the `exit` file.

mod common;

use mu_fabric::NodeId;
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_kv::{Op, Reply, Request, Store};
use mu_replica::{Mode, Protocol, Replica, ReplicaConfig, StateMachine};
use mu_sim::history::{History, Operation, Outcome};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CLUSTER_ID: u64 = 0x6d75_6b76;
const REPLICAS: u16 = 3;
/// Clients a leader runs at once.
const CLIENTS: u64 = 4;
/// The keys they share: few, so that their operations conflict.
const KEYS: u64 = 3;
/// Pause between two rounds of a leader's clients. Porcupine's cost grows with the square of
/// the operations per key: unpaced, a leader would issue tens of thousands of operations a
/// second on three keys, which would take minutes to check.
const ROUND_PAUSE_US: u64 = 1_000;
/// Client operations one process issues at most (the same bound, whatever the machine's speed).
const OPERATIONS_MAX: u64 = 6_000;
/// The leader kills itself this many microseconds at most after it starts a round's proposal.
/// On a two-core machine a round took 25-130 µs (median, by the machine's other load; 200-300
/// µs at the 99th percentile), and starting the killer thread takes some of that: with this
/// bound the kill landed with operations in flight in about four runs of five, and after the
/// round otherwise. (The
/// window in which an operation in flight is already on a majority, so that the next leader
/// commits it, is a few microseconds: that case is rare.)
const KILL_DELAY_US_MAX: u64 = 100;
/// How long the clients run before the leader is killed, and after.
const RUN_MS: u64 = 1_000;
/// Returned operations a leader must have before it is killed, and the next one after: enough
/// that the history says something about both leaderships, however slow the machine.
const RETURNED_MIN: u64 = 100;
/// Bound on every wait for the cluster (election, progress, catching up): generous, for a
/// loaded two-core machine.
const WAIT_MS: u64 = 10_000;
/// Status and state files are rewritten this often.
const REPORT_MS: u64 = 20;

/// `CLOCK_MONOTONIC`, in nanoseconds: one clock for every process on the host (the history's
/// timestamps from different processes are compared with each other).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The replica's state machine: the store, shared with the client driver (which reads its
/// clients' replies from it), and how many requests it applied (to compare replicas that
/// applied the same prefix).
#[derive(Clone, Default)]
struct Kv(Arc<Mutex<KvState>>);

#[derive(Default)]
struct KvState {
    store: Store,
    applied: u64,
}

impl StateMachine for Kv {
    fn apply(&mut self, _index: u64, request: &[u8]) {
        let mut s = self.0.lock().unwrap();
        s.store.apply_bytes(request);
        s.applied += 1;
    }

    /// The applied count, then the store's own snapshot.
    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        let s = self.0.lock().unwrap();
        out.extend_from_slice(&s.applied.to_le_bytes());
        s.store.snapshot(out);
        Ok(())
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let (count, store) = snapshot.split_at_checked(8).ok_or("a snapshot of under 8 bytes")?;
        let store = Store::restore(store).map_err(|e| e.to_string())?;
        let mut s = self.0.lock().unwrap();
        s.applied = u64::from_le_bytes(count.try_into().expect("8 bytes"));
        s.store = store;
        Ok(())
    }
}

/// A small deterministic generator (xorshift): each process draws its operations from its id.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// One client of a leader: its id and the sequence number of its last request.
struct Client {
    id: u64,
    seq: u64,
}

/// A leader's clients: ids unique per process and leadership, so that no two processes (nor
/// two leaderships of one) ever share a client.
struct Clients {
    node: u64,
    leadership: u64,
    /// Clients started in this leadership (the next one's id follows).
    started: u64,
    active: Vec<Client>,
}

impl Clients {
    fn new(node: u64, leadership: u64) -> Clients {
        let mut c = Clients { node, leadership, started: 0, active: Vec::new() };
        c.active = (0..CLIENTS).map(|_| c.fresh()).collect();
        c
    }

    fn fresh(&mut self) -> Client {
        assert!(self.started < 1000, "client ids of a leadership would collide with the next");
        let id = self.node * 1_000_000 + self.leadership * 1000 + self.started;
        self.started += 1;
        Client { id, seq: 0 }
    }
}

/// Draws the next operation of `client`. Values are unique ("c<client>s<seq>"); compare-and-
/// set mostly expects the value this leader last saw on the key, so that some succeed.
fn next_op(rng: &mut Rng, client: &Client, last_seen: &[Option<Vec<u8>>]) -> Op {
    let k = rng.next() % KEYS;
    let key = format!("k{k}").into_bytes();
    let value = format!("c{}s{}", client.id, client.seq).into_bytes();
    match rng.next() % 10 {
        0..=3 => Op::Get { key },
        4..=6 => Op::Put { key, value },
        7 => Op::Delete { key },
        _ => {
            let expected = match rng.next() % 5 {
                0 => Some(b"never-written".to_vec()),
                _ => last_seen[k as usize].clone(),
            };
            Op::Cas { key, expected, value }
        }
    }
}

/// What `last_seen` becomes after `op` returned `reply`.
fn note_reply(last_seen: &mut [Option<Vec<u8>>], op: &Op, reply: &Reply) {
    let k: usize = std::str::from_utf8(&op.key()[1..]).unwrap().parse().unwrap();
    match (op, reply) {
        (Op::Get { .. }, Reply::Value(v)) => last_seen[k] = v.clone(),
        (Op::Put { value, .. }, _) | (Op::Cas { value, .. }, Reply::Swapped(true)) => {
            last_seen[k] = Some(value.clone())
        }
        (Op::Delete { .. }, _) => last_seen[k] = None,
        _ => {}
    }
}

/// A reply as the tokens of a `return` line (values hold no spaces).
fn reply_text(reply: &Reply) -> String {
    match reply {
        Reply::Value(None) => "none".into(),
        Reply::Value(Some(v)) => format!("value {}", String::from_utf8_lossy(v)),
        Reply::Stored => "stored".into(),
        Reply::Deleted(b) => format!("deleted {b}"),
        Reply::Swapped(b) => format!("swapped {b}"),
        // A client cannot be told these for a well-formed, in-order request: writing them
        // makes `History::to_json` refuse the history, naming the operation.
        Reply::Malformed(why) => format!("malformed {}", why.replace(' ', "_")),
        Reply::Stale { applied_seq } => format!("stale {applied_seq}"),
    }
}

fn parse_reply(tokens: &[&str]) -> Reply {
    match tokens {
        ["none"] => Reply::Value(None),
        ["value", v] => Reply::Value(Some(v.as_bytes().to_vec())),
        ["stored"] => Reply::Stored,
        ["deleted", b] => Reply::Deleted(b.parse().expect("a bool")),
        ["swapped", b] => Reply::Swapped(b.parse().expect("a bool")),
        ["malformed", why] => Reply::Malformed(why.to_string()),
        ["stale", seq] => Reply::Stale { applied_seq: seq.parse().expect("a number") },
        other => panic!("bad reply {other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Writes `text` to `path` whole: to a temporary file, then renamed over it, so that a reader
/// never sees it half written.
fn write_whole(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// One replica process: see the module docs.
#[test]
#[ignore = "run by the test below as a replica process"]
fn child_main() {
    let dir = PathBuf::from(std::env::var("MU_KV_DIR").expect("MU_KV_DIR"));
    let me: u16 = std::env::var("MU_KV_NODE").expect("MU_KV_NODE").parse().unwrap();
    let fabric = ShmFabric::create(ShmConfig::new(&dir, CLUSTER_ID, NodeId(me))).expect("fabric");
    let mut config = ReplicaConfig::new(NodeId(me), (0..REPLICAS).map(NodeId).collect());
    config.protocol = match std::env::var("MU_KV_PROTOCOL").expect("MU_KV_PROTOCOL").as_str() {
        "velos" => Protocol::Velos,
        _ => Protocol::Mu,
    };
    config.slots_count = 4096;
    config.slot_bytes = 256;
    // A round's four requests go as two entries of two, both in flight at once (§7.4).
    config.batch_requests_max = 2;
    config.outstanding_max = 2;
    let kv = Kv::default();
    let replica =
        Replica::start_with_state(config, fabric, Mode::Handover, kv.clone()).expect("starts");
    let mut history = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("history-{me}.log")))
        .expect("history log");
    std::fs::write(dir.join(format!("ready-{me}")), b"").unwrap();

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (u64::from(me) + 1).wrapping_mul(0x2545_f491));
    let mut leadership = 0u64;
    let mut clients: Option<Clients> = None;
    let mut last_seen: Vec<Option<Vec<u8>>> = vec![None; KEYS as usize];
    let (mut issued, mut returned, mut unknown, mut dropped) = (0u64, 0u64, 0u64, 0u64);
    // Acknowledged requests whose reply was not in the local store yet when `propose_many`
    // returned (it says it returns once they are applied here), and the longest wait for one.
    let (mut late_replies, mut late_wait_ns_max) = (0u64, 0u64);
    let mut outcomes = Vec::new();
    // Whether this process sent itself SIGKILL already (it lands within microseconds).
    let mut dying = false;
    let mut last_report = Instant::now() - Duration::from_secs(1);
    while !dir.join("stop").exists() {
        let leads = replica.leader() == Some(NodeId(me));
        // Asked to die: in the middle of the next round's proposal if this replica leads (so
        // that operations are in flight when it dies), else at once.
        let die = dir.join(format!("die-{me}")).exists();
        if die && !leads {
            sigkill_self(0);
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        if last_report.elapsed() >= Duration::from_millis(REPORT_MS) {
            last_report = Instant::now();
            write_whole(
                &dir.join(format!("status-{me}")),
                &format!(
                    "leads {leads} leaderships {leadership} issued {issued} returned {returned} \
                     unknown {unknown} dropped {dropped} late_replies {late_replies}"
                ),
            );
        }
        if !leads {
            // A leadership's clients end with it: any operation of theirs still in flight
            // failed (unknown or dropped), and the next leadership starts new ones.
            clients = None;
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        if issued >= OPERATIONS_MAX {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let cs = clients.get_or_insert_with(|| {
            leadership += 1;
            Clients::new(u64::from(me), leadership)
        });
        let mut ops = Vec::with_capacity(CLIENTS as usize);
        let mut bytes = Vec::with_capacity(CLIENTS as usize);
        for client in &mut cs.active {
            client.seq += 1;
            let op = next_op(&mut rng, client, &last_seen);
            let request = Request { client: client.id, seq: client.seq, op: op.clone() };
            bytes.push(request.encode().expect("a request within the limits"));
            ops.push(op);
        }
        // Taken before the requests leave: the operations' intervals start here.
        let invoke_ns = monotonic_ns();
        let mut lines = String::new();
        for b in &bytes {
            lines.push_str(&format!("invoke {invoke_ns} {}\n", hex(b)));
        }
        history.write_all(lines.as_bytes()).unwrap();
        issued += bytes.len() as u64;
        let requests: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        if die && !dying {
            dying = true;
            sigkill_self(rng.next() % KILL_DELAY_US_MAX);
        }
        replica.propose_many(&requests, &mut outcomes);
        let mut replies = Vec::with_capacity(outcomes.len());
        for (client, outcome) in cs.active.iter().zip(&outcomes) {
            let reply = match outcome {
                Ok(_) => {
                    let waited_since = Instant::now();
                    let mut looks = 0;
                    let reply = loop {
                        looks += 1;
                        if let Some(r) = kv.0.lock().unwrap().store.reply(client.id, client.seq) {
                            break r.clone();
                        }
                        assert!(
                            waited_since.elapsed() < Duration::from_millis(WAIT_MS),
                            "replica {me}: client {} request {} acknowledged but never applied \
                             here",
                            client.id,
                            client.seq
                        );
                        std::thread::sleep(Duration::from_micros(50));
                    };
                    if looks > 1 {
                        late_replies += 1;
                        let waited_ns = waited_since.elapsed().as_nanos() as u64;
                        late_wait_ns_max = late_wait_ns_max.max(waited_ns);
                    }
                    Some(reply)
                }
                Err(_) => None,
            };
            replies.push(reply);
        }
        // Taken after the replies were read: the operations took effect before this.
        let return_ns = monotonic_ns();
        let mut lines = String::new();
        let mut fresh = Vec::new();
        for (i, outcome) in outcomes.iter().enumerate() {
            let client = &cs.active[i];
            match (outcome, &replies[i]) {
                (Ok(_), Some(reply)) => {
                    returned += 1;
                    note_reply(&mut last_seen, &ops[i], reply);
                    let text = reply_text(reply);
                    lines.push_str(&format!(
                        "return {} {} {return_ns} {text}\n",
                        client.id, client.seq
                    ));
                }
                // Refused before it was handed to the leader engine, or handed over but never
                // written into any log, as the runtime reports it: it can never take effect.
                (Err(e), _) if e.never_applied() => {
                    dropped += 1;
                    lines.push_str(&format!("drop {} {}\n", client.id, client.seq));
                }
                // Handed over and failed after it may have been written (aborted by a lost
                // leadership, shutting down): it may still take effect. Its client's stream has no end; a new
                // client takes its place.
                _ => {
                    unknown += 1;
                    fresh.push(i);
                }
            }
        }
        if !lines.is_empty() {
            // One write: the whole round's outcomes outlive a SIGKILL right after.
            history.write_all(lines.as_bytes()).unwrap();
        }
        for i in fresh {
            cs.active[i] = cs.fresh();
        }
        std::thread::sleep(Duration::from_micros(ROUND_PAUSE_US));
    }

    // Stopped proposing: report the applied count and digest until the test has seen the
    // survivors agree (a follower may still be applying the leader's last entries).
    let report = |kv: &Kv| {
        let s = kv.0.lock().unwrap();
        format!(
            "applied {} digest {:016x} returned {returned} unknown {unknown} dropped {dropped} \
             late_replies {late_replies} late_wait_ns_max {late_wait_ns_max}",
            s.applied,
            s.store.digest()
        )
    };
    while !dir.join("exit").exists() {
        write_whole(&dir.join(format!("state-{me}")), &report(&kv));
        std::thread::sleep(Duration::from_millis(REPORT_MS));
    }
    replica.shutdown();
}

/// Sends this process SIGKILL from another thread, `delay_us` from now (spinning, to be
/// precise at the scale of one proposal), while the caller goes on.
fn sigkill_self(delay_us: u64) {
    let at = Instant::now() + Duration::from_micros(delay_us);
    std::thread::spawn(move || {
        while Instant::now() < at {
            std::hint::spin_loop();
        }
        // SAFETY: kill takes a pid and a signal number, no memory; the pid is our own.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    });
}

/// The cluster's processes in a private run directory. On drop the processes are killed and
/// the directory removed; if the test failed, its logs and histories are copied first to
/// `CARGO_TARGET_TMPDIR`, where they can be looked at.
struct Cluster {
    dir: PathBuf,
    children: Vec<Option<Child>>,
}

impl Cluster {
    fn start(tag: &str, protocol: Protocol) -> Cluster {
        let dir = common::fresh_run_dir(tag);
        let mut cluster = Cluster { dir, children: Vec::new() };
        for me in 0..REPLICAS {
            let child = Command::new(std::env::current_exe().unwrap())
                .args(["--ignored", "--exact", "child_main", "--nocapture"])
                .env("MU_KV_DIR", &cluster.dir)
                .env("MU_KV_NODE", me.to_string())
                .env("MU_KV_PROTOCOL", protocol.name())
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn replica");
            cluster.children.push(Some(child));
        }
        for me in 0..REPLICAS {
            cluster.wait_for(&format!("replica {me} ready"), |c| {
                c.dir.join(format!("ready-{me}")).exists()
            });
        }
        cluster
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// The number after `field` in replica `me`'s status or state file (0 if not there yet).
    fn field(&self, file: &str, me: usize, field: &str) -> u64 {
        let text = self.file(&format!("{file}-{me}"));
        let mut words = text.split_whitespace();
        while let Some(w) = words.next() {
            if w == field {
                return words.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            }
        }
        0
    }

    /// The replica that says it leads, with at least `returned_min` operations returned to
    /// its clients, other than `except`.
    fn leader_with(&self, returned_min: u64, except: Option<usize>) -> Option<usize> {
        (0..self.children.len()).find(|&me| {
            Some(me) != except
                && self.children[me].is_some()
                && self.file(&format!("status-{me}")).starts_with("leads true")
                && self.field("status", me, "returned") >= returned_min
        })
    }

    fn wait_for(&self, what: &str, mut done: impl FnMut(&Cluster) -> bool) {
        let start = Instant::now();
        while !done(self) {
            if start.elapsed() > Duration::from_millis(WAIT_MS) {
                panic!("{what}: not within {WAIT_MS} ms{}", self.statuses());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The replicas' last reports, for failure messages.
    fn statuses(&self) -> String {
        let mut out = String::new();
        for me in 0..self.children.len() {
            let status = self.file(&format!("status-{me}"));
            let state = self.file(&format!("state-{me}"));
            out.push_str(&format!("\n  replica {me}: {status} | {state}"));
        }
        out
    }

    /// Has replica `me` SIGKILL itself in the middle of a proposal (see `child_main`) and
    /// waits until it is dead; kills it from here if it did not die within `WAIT_MS`.
    fn kill(&mut self, me: usize) {
        std::fs::write(self.dir.join(format!("die-{me}")), b"").unwrap();
        let mut child = self.children[me].take().expect("a live replica");
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > Duration::from_millis(WAIT_MS) {
                child.kill().unwrap();
                panic!("replica {me} did not kill itself within {WAIT_MS} ms");
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(status.signal(), Some(libc::SIGKILL), "replica {me} ended with {status}");
    }

    /// Waits for every live replica to exit, successfully.
    fn wait_exits(&mut self) {
        let start = Instant::now();
        for (me, slot) in self.children.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            let status = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break status;
                }
                assert!(
                    start.elapsed() < Duration::from_millis(WAIT_MS),
                    "replica {me} did not exit within {WAIT_MS} ms of being told to"
                );
                std::thread::sleep(Duration::from_millis(5));
            };
            assert!(status.success(), "replica {me} exited with {status}");
            *slot = None;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            let keep = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("shm_kv-{}", std::process::id()));
            if std::fs::create_dir_all(&keep).is_ok() {
                for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if name.ends_with(".log") || name.ends_with(".json") {
                        let _ = std::fs::copy(entry.path(), keep.join(&name));
                    }
                }
                eprintln!("the run's histories and logs are kept in {}", keep.display());
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The client history of the whole run, from every process's log: each invocation with its
/// return if it has one, left out if it was dropped, and with an unknown outcome otherwise.
fn read_history(dir: &Path, source: String) -> History {
    // (client, seq) → operation.
    let mut ops: BTreeMap<(u64, u64), Operation> = BTreeMap::new();
    let mut dropped = Vec::new();
    for me in 0..REPLICAS {
        let text = std::fs::read_to_string(dir.join(format!("history-{me}.log"))).unwrap();
        // Lines are written whole, but a line cut by the SIGKILL would be the last one, without
        // its newline: only complete lines count.
        let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        for line in complete.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            match words[..] {
                ["invoke", invoke_ns, request] => {
                    let r = Request::decode(&unhex(request)).expect("a request");
                    let op = Operation {
                        client: r.client,
                        op: r.op,
                        invoke_ns: invoke_ns.parse().unwrap(),
                        outcome: Outcome::Unknown,
                    };
                    let old = ops.insert((r.client, r.seq), op);
                    assert!(old.is_none(), "client {} request {} invoked twice", r.client, r.seq);
                }
                ["return", client, seq, at_ns, ..] => {
                    let key = (client.parse().unwrap(), seq.parse().unwrap());
                    let op = ops.get_mut(&key).expect("a return after its invocation");
                    let reply = parse_reply(&words[4..]);
                    op.outcome = Outcome::Returned { at_ns: at_ns.parse().unwrap(), reply };
                }
                ["drop", client, seq] => {
                    dropped.push((client.parse().unwrap(), seq.parse().unwrap()));
                }
                _ => panic!("replica {me}: bad history line {line:?}"),
            }
        }
    }
    for key in dropped {
        let op = ops.remove(&key).expect("a drop after its invocation");
        assert_eq!(op.outcome, Outcome::Unknown, "client {} request {} dropped", key.0, key.1);
    }
    let mut operations: Vec<Operation> = ops.into_values().collect();
    operations.sort_by_key(|o| (o.invoke_ns, o.client));
    History { source, operations }
}

/// `lincheck`, built with `scripts/lincheck.sh` if it is not there yet.
fn lincheck() -> PathBuf {
    if let Some(path) = mu_sim::check::linearizability::find_lincheck() {
        return path;
    }
    // The script has no build-only command: `check` builds the binary when it is missing or
    // older than its sources, then checks a history (here one of its linearizable examples).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let example = root.join("tools/lincheck/testdata/linearizable_concurrent.json");
    let out = Command::new("bash")
        .arg(root.join("scripts/lincheck.sh"))
        .arg("check")
        .arg(&example)
        .arg("--quiet")
        .output()
        .expect("run scripts/lincheck.sh");
    assert!(
        out.status.success(),
        "lincheck is missing and `scripts/lincheck.sh check` could not build it ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    mu_sim::check::linearizability::find_lincheck()
        .expect("scripts/lincheck.sh succeeded but target/lincheck/lincheck is not there")
}

/// Runs `lincheck` on `history`; returns its exit status and what it printed.
fn run_lincheck(lincheck: &Path, history: &Path) -> (Option<i32>, String) {
    let out = Command::new(lincheck)
        .args(["--timeout", "60s"])
        .arg(history)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", lincheck.display()));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// The value a returned get past the middle of `history` could not have read: one written by
/// a write that returned before another write on its key was invoked, which itself returned
/// before the get was invoked (values are unique, so nothing wrote it again). Returns the
/// get's position and that value.
fn overwritten_read(history: &History) -> Option<(usize, Vec<u8>)> {
    let ops = &history.operations;
    // A write that certainly took effect: a returned put or successful compare-and-set.
    let written = |o: &Operation| -> Option<(u64, Vec<u8>)> {
        match (&o.op, &o.outcome) {
            (Op::Put { value, .. }, Outcome::Returned { at_ns, .. })
            | (Op::Cas { value, .. }, Outcome::Returned { at_ns, reply: Reply::Swapped(true) }) => {
                Some((*at_ns, value.clone()))
            }
            _ => None,
        }
    };
    for (g, get) in ops.iter().enumerate().skip(ops.len() / 2) {
        let (Op::Get { key }, Outcome::Returned { reply: Reply::Value(read), .. }) =
            (&get.op, &get.outcome)
        else {
            continue;
        };
        // The later write: returned before the get was invoked.
        let later = ops.iter().filter(|o| o.op.key() == key.as_slice()).filter_map(|o| {
            written(o).filter(|(at_ns, _)| *at_ns < get.invoke_ns).map(|_| o.invoke_ns)
        });
        let Some(later_invoke_ns) = later.max() else { continue };
        // The earlier write: returned before the later one was invoked.
        let earlier = ops
            .iter()
            .filter(|o| o.op.key() == key.as_slice())
            .filter_map(written)
            .filter(|(at_ns, value)| *at_ns < later_invoke_ns && Some(value) != read.as_ref())
            .max_by_key(|(at_ns, _)| *at_ns);
        if let Some((_, value)) = earlier {
            return Some((g, value));
        }
    }
    None
}

/// The whole run on Mu: three replicas, clients on the leader, the leader killed, a new
/// leader's clients, then the history checked (and a corrupted copy rejected) and the
/// survivors' stores compared.
#[test]
fn kv_history_across_a_leader_kill_is_linearizable() {
    kv_history_across_a_leader_kill(Protocol::Mu);
}

/// The same run on Velos.
#[test]
fn kv_history_across_a_velos_leader_kill_is_linearizable() {
    kv_history_across_a_leader_kill(Protocol::Velos);
}

fn kv_history_across_a_leader_kill(protocol: Protocol) {
    let lincheck = lincheck();
    let started = Instant::now();
    let mut c = Cluster::start(&format!("kv3-{}", protocol.name()), protocol);
    let ready = Instant::now();
    c.wait_for("a leader's clients get replies", |c| c.leader_with(RETURNED_MIN, None).is_some());
    std::thread::sleep(Duration::from_millis(RUN_MS).saturating_sub(ready.elapsed()));
    let old = c.leader_with(RETURNED_MIN, None).expect("a leader");
    c.kill(old);
    let killed = Instant::now();
    // The one found leading then: asked again later, the survivors may be changing leaders
    // at that very moment.
    let mut new = None;
    c.wait_for("another leader's clients get replies", |c| {
        new = c.leader_with(RETURNED_MIN, Some(old));
        new.is_some()
    });
    let new = new.expect("the wait found a leader");
    std::thread::sleep(Duration::from_millis(RUN_MS).saturating_sub(killed.elapsed()));
    let before_stop = c.statuses();

    // The survivors stop proposing; once they applied as many requests, they must hold the
    // same store (map and client sessions).
    std::fs::write(c.dir.join("stop"), b"").unwrap();
    let survivors: Vec<usize> = (0..REPLICAS as usize).filter(|&me| me != old).collect();
    c.wait_for("the survivors apply the same requests", |c| {
        let applied: Vec<u64> =
            survivors.iter().map(|&me| c.field("state", me, "applied")).collect();
        applied[0] > 0 && applied.iter().all(|&a| a == applied[0])
    });
    let digests: Vec<String> = survivors
        .iter()
        .map(|&me| {
            let state = c.file(&format!("state-{me}"));
            let digest = state.split_whitespace().skip_while(|w| *w != "digest").nth(1);
            digest.expect("a digest").to_string()
        })
        .collect();
    assert_eq!(digests[0], digests[1], "the survivors' stores differ:{}", c.statuses());
    let applied = c.field("state", survivors[0], "applied");
    // The survivors' final counts, and the killed leader's last report.
    let late_replies: u64 =
        survivors.iter().map(|&me| c.field("state", me, "late_replies")).sum::<u64>()
            + c.field("status", old, "late_replies");
    let after_stop = c.statuses();
    std::fs::write(c.dir.join("exit"), b"").unwrap();
    c.wait_exits();

    let source = format!(
        "shm mu-kv ({}): {REPLICAS} replica processes, {CLIENTS} clients per leadership on \
         {KEYS} keys; replica {old} (leader) SIGKILLed, replica {new} led next",
        protocol.name()
    );
    let history = read_history(&c.dir, source);
    let json = history.to_json().unwrap_or_else(|e| panic!("a reply no client can get: {e}"));
    let path = c.dir.join("history.json");
    std::fs::write(&path, &json).unwrap();
    let returned = history.returned_count() as u64;
    // Return times of the killed leader's clients and of the others'.
    let returns = |of_old: bool| {
        history.operations.iter().filter_map(move |o| match o.outcome {
            Outcome::Returned { at_ns, .. } if (o.client / 1_000_000 == old as u64) == of_old => {
                Some(at_ns)
            }
            _ => None,
        })
    };
    let by_old_leader = returns(true).count() as u64;
    let last_old_ns = returns(true).max().unwrap_or(0);
    // Replies after the killed leader's last one (under load, leadership may have moved back
    // and forth before the kill: replies by others before then do not count).
    let after_kill = returns(false).filter(|&at_ns| at_ns > last_old_ns).count() as u64;
    // From the last reply the killed leader gave to the first the next one gave: detection,
    // election, permissions and the new leader's catch-up, and a round of client operations.
    let takeover_ms = returns(false)
        .filter(|&at_ns| at_ns > last_old_ns)
        .min()
        .map(|first_new_ns| (first_new_ns - last_old_ns) as f64 / 1e6);
    // Every request in the log was applied once: each returned one, and some of those with an
    // unknown outcome (a dropped one never was handed over, so it must not be there).
    let unknown = history.unknown_count() as u64;
    assert!(
        (returned..=returned + unknown).contains(&applied),
        "the survivors applied {applied} requests; {returned} returned and {unknown} have an \
         unknown outcome"
    );
    // Unknown-outcome writes that did take effect, as far as the reads show: what the new
    // leader committed of the killed one's last round.
    let read_values: std::collections::BTreeSet<&[u8]> = history
        .operations
        .iter()
        .filter_map(|o| match &o.outcome {
            Outcome::Returned { reply: Reply::Value(Some(v)), .. } => Some(v.as_slice()),
            _ => None,
        })
        .collect();
    let unknown_seen = history
        .operations
        .iter()
        .filter(|o| o.outcome == Outcome::Unknown)
        .filter(|o| match &o.op {
            Op::Put { value, .. } | Op::Cas { value, .. } => read_values.contains(value.as_slice()),
            _ => false,
        })
        .count();
    // How long a round's proposal took (every operation of a round has the same interval).
    let mut latencies_us: Vec<u64> = history
        .operations
        .iter()
        .filter_map(|o| match o.outcome {
            Outcome::Returned { at_ns, .. } => Some((at_ns - o.invoke_ns) / 1000),
            _ => None,
        })
        .collect();
    latencies_us.sort_unstable();
    let percentile = |p: usize| latencies_us.get(latencies_us.len() * p / 100).copied();
    eprintln!(
        "round latency (µs): median {:?}, p99 {:?}, max {:?}",
        percentile(50),
        percentile(99),
        latencies_us.last()
    );
    eprintln!(
        "history: {} operations, {returned} returned ({by_old_leader} to the killed leader's \
         clients, {after_kill} after its last), {unknown} unknown ({} of them applied, \
         {unknown_seen} writes among them read later); takeover {takeover_ms:?} ms; late \
         replies {late_replies}\nbefore stopping:{before_stop}\nafter stopping:{after_stop}",
        history.operations.len(),
        applied - returned,
    );
    assert!(returned > 2 * RETURNED_MIN, "only {returned} operations returned");
    assert!(by_old_leader >= RETURNED_MIN, "only {by_old_leader} returned before the kill");
    assert!(after_kill >= RETURNED_MIN, "only {after_kill} returned after the kill");
    // `Replica::propose_many` returns once the requests are committed and applied here: the
    // local store must have held every reply when it returned.
    assert_eq!(late_replies, 0, "acknowledged requests not yet applied on their leader");

    let (status, text) = run_lincheck(&lincheck, &path);
    eprintln!("{}", text.lines().next().unwrap_or_default());
    assert_eq!(
        status,
        Some(0),
        "the history is not linearizable (lincheck status {status:?}):\n{text}"
    );

    // The same history with one read past the middle changed to return a value that was
    // overwritten before the read was invoked: the checker must reject it.
    let mut corrupted = history.clone();
    let (g, value) = overwritten_read(&history).expect("a read past the middle to corrupt");
    let Outcome::Returned { reply, .. } = &mut corrupted.operations[g].outcome else {
        unreachable!("a returned read")
    };
    *reply = Reply::Value(Some(value.clone()));
    corrupted.source.push_str(&format!(
        "; corrupted: operation {g} reads {:?}",
        String::from_utf8_lossy(&value)
    ));
    let path = c.dir.join("history-corrupted.json");
    std::fs::write(&path, corrupted.to_json().unwrap()).unwrap();
    let (status, text) = run_lincheck(&lincheck, &path);
    assert_eq!(
        status,
        Some(1),
        "the corrupted history was not rejected (lincheck status {status:?}):\n{text}"
    );
    eprintln!(
        "corrupted: {}; whole test {:?}",
        text.lines().next().unwrap_or_default(),
        started.elapsed()
    );
}
