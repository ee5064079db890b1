//! Whole replicas as separate processes on the shared-memory fabric, with real failures: the
//! leader killed (SIGKILL), the leader stopped and continued (SIGSTOP, SIGCONT), a follower
//! killed, a follower stopped long enough to lag, and the log recycled many times over. After
//! each, every live replica holds the same applied sequence, and every proposal a leader
//! acknowledged is in it at its index.
//!
//! Each replica is this test binary run again as `child_main`, told what to be by environment
//! variables. It proposes `n<id>-<k>` whenever it leads (alone, or in groups of up to
//! `MU_RT_GROUP` requests, batched two per entry with three entries in flight, §7.4), appends every acknowledged proposal to
//! `acked-<id>.log` as soon as it is acknowledged (so that a killed leader's acknowledgements
//! survive it), keeps what it applies in memory, and writes it to `applied-<id>.log` when the
//! test asks it to stop (the `stop` file). A membership change the test writes into the
//! `command` file ("add 3", "remove 0") is made by whichever replica leads, which answers in
//! `command-done`.

mod common;

use mu_fabric::NodeId;
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_replica::{Change, Mode, Replica, ReplicaConfig, StateMachine};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CLUSTER_ID: u64 = 0x6d75_7274;

/// The replica configuration every child uses: `slots` slots of 128 bytes, and the defaults of
/// `ReplicaConfig::new` otherwise (a failure-detector period this two-core machine keeps up
/// with).
fn config(n: u16, me: u16, slots: u64) -> ReplicaConfig {
    let mut c = ReplicaConfig::new(NodeId(me), (0..n).map(NodeId).collect());
    c.slots_count = slots;
    c.slot_bytes = 128;
    c
}

/// Log slots unless a test asks for others: enough that a replica stopped for a few tens of
/// milliseconds at full speed can still be caught up from the log (no state transfer).
const SLOTS: u64 = 1 << 14;

/// One replica process: see the module docs.
#[test]
#[ignore = "run by the tests below as a replica process"]
fn child_main() {
    let dir = PathBuf::from(std::env::var("MU_RT_DIR").expect("MU_RT_DIR"));
    let me: u16 = std::env::var("MU_RT_NODE").expect("MU_RT_NODE").parse().unwrap();
    let n: u16 = std::env::var("MU_RT_N").expect("MU_RT_N").parse().unwrap();
    let slots: u64 = std::env::var("MU_RT_SLOTS").expect("MU_RT_SLOTS").parse().unwrap();
    let group: u64 = std::env::var("MU_RT_GROUP").map_or(1, |g| g.parse().unwrap());
    // The initial configuration (§5.4), if not every replica.
    let members: Option<Vec<NodeId>> = std::env::var("MU_RT_MEMBERS")
        .ok()
        .map(|m| m.split(',').map(|id| NodeId(id.parse().unwrap())).collect());
    // A restarted replica: its log is gone; it rejoins recovering, by state transfer.
    let boot: u64 = std::env::var("MU_RT_BOOT").map_or(0, |b| b.parse().unwrap());
    let velos = std::env::var("MU_RT_PROTOCOL").is_ok_and(|p| p == "velos");
    let mode = match std::env::var("MU_RT_MODE").as_deref() {
        Ok("direct") => Mode::Direct,
        _ => Mode::Handover,
    };
    let fabric = ShmFabric::create(ShmConfig::new(&dir, CLUSTER_ID, NodeId(me))).expect("fabric");
    // A follower whose commit handler sleeps now and then: `MU_RT_SLOW_APPLY` is "odds,max_ms",
    // one entry in `odds` sleeps up to `max_ms` (not the first leader, replica 0).
    let slow = std::env::var("MU_RT_SLOW_APPLY").ok().filter(|_| me != 0).map(|s| {
        let (odds, max_ms) = s.split_once(',').expect("odds,max_ms");
        let seed = std::env::var("MU_RT_SEED").map_or(1, |s| s.parse().unwrap());
        SlowApply {
            odds: odds.parse().unwrap(),
            max_ms: max_ms.parse().unwrap(),
            rng: Rng(seed ^ u64::from(me) << 32 | 1),
        }
    });
    let applied = Applied {
        slow: slow.map(|s| std::sync::Arc::new(std::sync::Mutex::new(s))),
        ..Default::default()
    };
    let mut config = config(n, me, slots);
    config.batch_requests_max = 2;
    config.outstanding_max = 3;
    config.eligible = boot == 0 && members.as_ref().is_none_or(|m| m.contains(&NodeId(me)));
    config.members = members;
    // A slower failure detector for a test about something else (`MU_RT_READ_PERIOD_US`).
    if let Ok(us) = std::env::var("MU_RT_READ_PERIOD_US") {
        config.detector.read_period_ns = us.parse::<u64>().unwrap() * 1_000;
    }
    if velos {
        config.protocol = mu_replica::Protocol::Velos;
    }
    let replica =
        Replica::start_with_state(config, fabric, mode, applied.clone()).expect("replica starts");
    let applied = applied.list;
    let mut acked = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("acked-{me}.log")))
        .expect("acked log");
    let mut errors = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("errors-{me}.log")))
        .expect("errors log");
    std::fs::write(dir.join(format!("ready-{me}")), b"").unwrap();
    let mut k = 0u64;
    let mut outcomes = Vec::new();
    let mut last_status = Instant::now();
    while !dir.join("stop").exists() {
        if last_status.elapsed() > Duration::from_millis(100) {
            last_status = Instant::now();
            let status =
                format!("{:?} applied {}", replica.status(), applied.lock().unwrap().len());
            std::fs::write(dir.join(format!("status-{me}")), status).unwrap();
        }
        if replica.leader() != Some(NodeId(me)) || dir.join("quiet").exists() {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        if let Ok(command) = std::fs::read_to_string(dir.join("command")) {
            let change = match command.trim().split_once(' ') {
                Some(("add", id)) => Change::Add(NodeId(id.parse().unwrap())),
                Some(("remove", id)) => Change::Remove(NodeId(id.parse().unwrap())),
                _ => panic!("bad command {command:?}"),
            };
            let outcome = match change {
                Change::Add(id) => replica.add_replica(id),
                Change::Remove(id) => replica.remove_replica(id),
            };
            if let Ok(index) = outcome {
                acked.write_all(format!("{index} {change:?}\n").as_bytes()).unwrap();
                std::fs::remove_file(dir.join("command")).unwrap();
                std::fs::write(dir.join("command-done"), format!("{change:?} at {index}")).unwrap();
            }
            continue;
        }
        let size = 1 + k % group;
        let values: Vec<String> = (k..k + size).map(|j| format!("n{me}b{boot}-{j}")).collect();
        k += size;
        let requests: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
        replica.propose_many(&requests, &mut outcomes);
        let mut lines = String::new();
        let mut failed = String::new();
        for (value, outcome) in values.iter().zip(&outcomes) {
            match outcome {
                Ok(index) => lines.push_str(&format!("{index} {value}\n")),
                Err(e) => failed.push_str(&format!("{value}: {e}\n")),
            }
        }
        if !failed.is_empty() {
            errors.write_all(failed.as_bytes()).unwrap();
        }
        if lines.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        } else {
            // One write per call: the acknowledgements must outlive a SIGKILL right after.
            acked.write_all(lines.as_bytes()).unwrap();
        }
    }
    // Let the replayer catch up with what the leader committed last.
    std::thread::sleep(Duration::from_millis(200));
    let status = replica.status();
    replica.shutdown();
    let mut out = String::new();
    for (index, value) in applied.lock().unwrap().iter() {
        out.push_str(&format!("{index} {value}\n"));
    }
    std::fs::write(dir.join(format!("applied-{me}.log")), out).unwrap();
    std::fs::write(dir.join(format!("status-{me}")), format!("{status:?}")).unwrap();
}

/// A child's state machine: what it applied, (index, request) in order. Its snapshot is that
/// list, so a replica restored from one holds its donor's sequence up to there, and the checks
/// below hold for it too.
#[derive(Clone, Default)]
struct Applied {
    list: std::sync::Arc<std::sync::Mutex<Vec<(u64, String)>>>,
    /// Sleeps now and then in `apply`, if set.
    slow: Option<std::sync::Arc<std::sync::Mutex<SlowApply>>>,
}

/// A commit handler that sleeps now and then: one entry in `odds`, up to `max_ms`.
struct SlowApply {
    odds: u64,
    max_ms: u64,
    rng: Rng,
}

/// xorshift64: enough randomness for faults, from a seed a failure prints.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

impl StateMachine for Applied {
    fn apply(&mut self, index: u64, request: &[u8]) {
        if let Some(slow) = &self.slow {
            let SlowApply { odds, max_ms, ref mut rng } = *slow.lock().unwrap();
            if rng.below(odds) == 0 {
                std::thread::sleep(Duration::from_millis(rng.below(max_ms + 1)));
            }
        }
        self.list.lock().unwrap().push((index, String::from_utf8_lossy(request).into_owned()));
    }

    fn membership_changed(&mut self, index: u64, change: Change) {
        self.list.lock().unwrap().push((index, format!("{change:?}")));
    }

    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        for (index, value) in self.list.lock().unwrap().iter() {
            out.extend_from_slice(format!("{index} {value}\n").as_bytes());
        }
        Ok(())
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(snapshot).map_err(|e| e.to_string())?;
        let mut entries = Vec::new();
        for line in text.lines() {
            let (index, value) = line.split_once(' ').ok_or("a line without a space")?;
            entries.push((index.parse().map_err(|_| "a bad index")?, value.to_string()));
        }
        *self.list.lock().unwrap() = entries;
        Ok(())
    }
}

/// A cluster of replica processes in a private run directory, removed (and the processes
/// killed) on drop.
struct Cluster {
    dir: PathBuf,
    children: Vec<Option<Child>>,
    /// How the children were started: replicas, mode, slots, group size, initial members,
    /// engine.
    n: u16,
    members: Option<String>,
    mode: String,
    slots: u64,
    group: u64,
    protocol: &'static str,
    /// More environment variables for every child (`MU_RT_SLOW_APPLY`, `MU_RT_SEED`).
    env: Vec<(&'static str, String)>,
}

impl Cluster {
    fn start(tag: &str, n: u16, mode: &str) -> Cluster {
        Cluster::start_with(tag, n, mode, SLOTS, 1)
    }

    /// `group`: each call proposes up to this many requests at once.
    fn start_with(tag: &str, n: u16, mode: &str, slots: u64, group: u64) -> Cluster {
        Cluster::start_engine(tag, n, mode, slots, group, "mu")
    }

    /// `protocol`: "mu" or "velos".
    fn start_engine(
        tag: &str,
        n: u16,
        mode: &str,
        slots: u64,
        group: u64,
        protocol: &'static str,
    ) -> Cluster {
        Cluster::start_env(tag, n, mode, slots, group, protocol, Vec::new())
    }

    /// [`Cluster::start_engine`] with more environment variables for the children.
    fn start_env(
        tag: &str,
        n: u16,
        mode: &str,
        slots: u64,
        group: u64,
        protocol: &'static str,
        env: Vec<(&'static str, String)>,
    ) -> Cluster {
        let dir = common::fresh_run_dir(tag);
        let mut cluster = Cluster {
            dir,
            children: Vec::new(),
            n,
            members: None,
            mode: mode.to_string(),
            slots,
            group,
            protocol,
            env,
        };
        cluster.children = (0..n).map(|_| None).collect();
        for me in 0..n {
            cluster.restart(me as usize, 0);
        }
        cluster.await_ready(0..n);
        cluster
    }

    /// A cluster of `n` possible replicas of which `members` are started, the initial
    /// configuration (§5.4).
    fn start_members(tag: &str, n: u16, members: &[u16], protocol: &'static str) -> Cluster {
        let mut cluster = Cluster::start_engine(tag, 0, "handover", SLOTS, 1, protocol);
        cluster.n = n;
        cluster.children = (0..n).map(|_| None).collect();
        let list: Vec<String> = members.iter().map(u16::to_string).collect();
        cluster.members = Some(list.join(","));
        for &me in members {
            cluster.restart(me as usize, 0);
        }
        cluster.await_ready(members.iter().copied());
        cluster
    }

    fn await_ready(&self, replicas: impl IntoIterator<Item = u16>) {
        for me in replicas {
            self.wait_for(&format!("replica {me} ready"), Duration::from_secs(30), |c| {
                c.dir.join(format!("ready-{me}")).exists()
            });
        }
    }

    /// Has whichever replica leads make a membership change, and waits until it is decided.
    fn change(&self, command: &str) {
        let _ = std::fs::remove_file(self.dir.join("command-done"));
        // Written whole, then renamed: a child must never read it half written.
        std::fs::write(self.dir.join("command.tmp"), command).unwrap();
        std::fs::rename(self.dir.join("command.tmp"), self.dir.join("command")).unwrap();
        self.wait_for(command, WITHIN, |c| c.dir.join("command-done").exists());
    }

    /// Starts replica `me`'s process; `boot` 0 for a member of the cluster started together,
    /// more for a restart (its log is gone: it rejoins recovering).
    fn spawn(&self, me: u16, boot: u64) -> Child {
        let mut command = Command::new(std::env::current_exe().unwrap());
        if let Some(members) = &self.members {
            command.env("MU_RT_MEMBERS", members);
        }
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command
            .args(["--ignored", "--exact", "child_main", "--nocapture"])
            .env("MU_RT_DIR", &self.dir)
            .env("MU_RT_NODE", me.to_string())
            .env("MU_RT_N", self.n.to_string())
            .env("MU_RT_MODE", &self.mode)
            .env("MU_RT_SLOTS", self.slots.to_string())
            .env("MU_RT_GROUP", self.group.to_string())
            .env("MU_RT_BOOT", boot.to_string())
            .env("MU_RT_PROTOCOL", self.protocol)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn replica")
    }

    /// Starts killed replica `me` again, as its `boot`-th run.
    fn restart(&mut self, me: usize, boot: u64) {
        assert!(self.children[me].is_none(), "restart a killed replica");
        let child = self.spawn(me as u16, boot);
        self.children[me] = Some(child);
    }

    /// Replica `me`'s last status report.
    fn status(&self, me: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("status-{me}"))).unwrap_or_default()
    }

    fn wait_for(&self, what: &str, within: Duration, mut done: impl FnMut(&Cluster) -> bool) {
        let start = Instant::now();
        while !done(self) {
            if start.elapsed() > within {
                panic!("{what}: not within {within:?}{}", self.statuses());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The replicas' last status reports, for failure messages.
    fn statuses(&self) -> String {
        let mut out = String::new();
        for me in 0..self.children.len() {
            let status = std::fs::read_to_string(self.dir.join(format!("status-{me}")));
            let acked = self.acked(me);
            let range = (acked.keys().next().copied(), acked.keys().last().copied());
            out.push_str(&format!(
                "\n  replica {me}: {} acked {} {range:?}",
                status.unwrap_or_default(),
                acked.values().map(Vec::len).sum::<usize>()
            ));
        }
        out
    }

    /// The proposals replica `me` acknowledged, index → values.
    fn acked(&self, me: usize) -> BTreeMap<u64, Vec<String>> {
        read_log(&self.dir.join(format!("acked-{me}.log")))
    }

    fn acked_count(&self, me: usize) -> usize {
        self.acked(me).values().map(Vec::len).sum()
    }

    /// Acknowledgements by every replica but `except`.
    fn acked_by_others(&self, except: usize) -> usize {
        (0..self.children.len()).filter(|&r| r != except).map(|r| self.acked_count(r)).sum()
    }

    fn pid(&self, me: usize) -> i32 {
        self.children[me].as_ref().expect("a live replica").id() as i32
    }

    fn kill(&mut self, me: usize) {
        let mut child = self.children[me].take().expect("a live replica");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn signal(&self, me: usize, sig: i32) {
        // SAFETY: kill takes a pid and a signal number, no memory; the pid is a child of ours
        // that was not reaped, so it cannot have been reused.
        let rc = unsafe { libc::kill(self.pid(me), sig) };
        assert_eq!(rc, 0, "kill({}, {sig})", self.pid(me));
    }

    /// Asks every live replica to stop, waits for them, and checks what they applied: one
    /// sequence (each a prefix of the longest), with every acknowledged proposal at its index.
    /// Returns the longest applied sequence's length.
    fn stop_and_check(mut self) -> usize {
        eprintln!("before stopping:{}", self.statuses());
        std::fs::write(self.dir.join("stop"), b"").unwrap();
        let mut live = Vec::new();
        for (me, child) in self.children.iter_mut().enumerate() {
            if let Some(child) = child {
                let status = child.wait().expect("replica exits");
                assert!(status.success(), "replica {me} exited with {status}");
                live.push(me);
            }
        }
        self.children.clear();
        let applied: Vec<(usize, BTreeMap<u64, Vec<String>>)> = live
            .iter()
            .map(|&me| (me, read_log(&self.dir.join(format!("applied-{me}.log")))))
            .collect();
        let longest =
            applied.iter().map(|(_, a)| a.values().map(Vec::len).sum()).max().unwrap_or(0);
        // No replica skipped an entry: below the last index it applied, it holds every index
        // any replica applied. (An index no replica holds is an empty entry, which gives the
        // state machine nothing: a leader decides one of its own to take a restarted replica
        // back while no request comes.)
        for (me, a) in &applied {
            let Some(&last) = a.keys().last() else { continue };
            for (other, b) in &applied {
                if let Some(index) = b.keys().find(|&&i| i <= last && !a.contains_key(&i)) {
                    panic!("replica {me} skipped index {index}, which replica {other} applied");
                }
            }
        }
        for (a, x) in &applied {
            for (b, y) in &applied {
                for (index, value) in x {
                    if let Some(other) = y.get(index) {
                        assert_eq!(value, other, "replicas {a} and {b} disagree at {index}");
                    }
                }
            }
        }
        // Every acknowledged proposal, by any leader, dead or alive, was applied at its index
        // by the replica that applied the most (the others may lag by the last entries).
        let (best, most) = applied.iter().max_by_key(|(_, a)| a.len()).expect("a live replica");
        for me in 0..8 {
            for (index, values) in self.acked(me) {
                for value in values {
                    assert!(
                        most.get(&index).is_some_and(|applied| applied.contains(&value)),
                        "acknowledged {value} at {index} (by {me}) is not in what replica {best} \
                         applied there: {:?}",
                        most.get(&index)
                    );
                }
            }
        }
        longest
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Lines of "index value", as index → values in the order of the lines (requests batched
/// into one entry share its index).
fn read_log(path: &Path) -> BTreeMap<u64, Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut log: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for (i, v) in text.lines().filter_map(|l| l.split_once(' ')) {
        log.entry(i.parse().expect("index")).or_default().push(v.to_string());
    }
    log
}

const WITHIN: Duration = Duration::from_secs(60);

/// The clusters of these tests run one at a time: each is three to five processes with busy
/// threads, on a machine that may have two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// §5.1 crash detection through the connection (the dead process's death flag) and §4 leader
/// change: the leader is killed; another replica (the lowest live id that holds the log) takes
/// over and goes on; nothing acknowledged is lost.
#[test]
fn t10_leader_sigkill_three_replicas() {
    let _serial = one_at_a_time();
    let mut c = Cluster::start("kill3", 3, "handover");
    c.wait_for("replica 0 commits", WITHIN, |c| c.acked_count(0) >= 200);
    let before = c.acked_by_others(0);
    c.kill(0);
    c.wait_for("another replica takes over", WITHIN, |c| c.acked_by_others(0) >= before + 200);
    let len = c.stop_and_check();
    assert!(len >= 400, "applied {len}");
}

/// The same with five replicas, in direct mode, proposing groups of requests (batched, several
/// entries in flight), and two failures: a follower, then the leader.
#[test]
fn t11_follower_then_leader_sigkill_five_replicas() {
    let _serial = one_at_a_time();
    let mut c = Cluster::start_with("kill5", 5, "direct", SLOTS, 6);
    c.wait_for("replica 0 commits", WITHIN, |c| c.acked_count(0) >= 100);
    c.kill(3);
    let before = c.acked_count(0);
    c.wait_for("replica 0 goes on without 3", WITHIN, |c| c.acked_count(0) >= before + 100);
    let before = c.acked_by_others(0);
    c.kill(0);
    c.wait_for("another replica takes over", WITHIN, |c| c.acked_by_others(0) >= before + 200);
    c.stop_and_check();
}

/// §5.1 pull-score and §4.1: the leader is stopped (SIGSTOP), so its heartbeat stops; replica
/// 1 is elected and revokes the old leader's access to the followers' logs. When the old leader
/// continues (SIGCONT), its writes fail and it must ask for permission again; it leads again only
/// once the others see its heartbeat (the lowest live id leads), after catching up from them.
/// Requests go in groups (batched, several entries in flight).
#[test]
fn t20_leader_sigstop_then_sigcont() {
    let _serial = one_at_a_time();
    let c = Cluster::start_with("stop3", 3, "handover", SLOTS, 6);
    c.wait_for("replica 0 commits", WITHIN, |c| c.acked_count(0) >= 300);
    let before = c.acked_by_others(0);
    c.signal(0, libc::SIGSTOP);
    c.wait_for("another replica takes over", WITHIN, |c| c.acked_by_others(0) >= before + 200);
    c.signal(0, libc::SIGCONT);
    let before = c.acked_count(0);
    c.wait_for("replica 0 leads again", WITHIN, |c| c.acked_count(0) >= before + 300);
    c.stop_and_check();
}

/// §5.3: a small log (64 slots) recycled many times over under load, with the leader reading
/// the log heads and never overwriting an entry a live replica has not applied.
#[test]
fn t40_recycling_under_load() {
    let _serial = one_at_a_time();
    let c = Cluster::start_with("recycle3", 3, "handover", 64, 1);
    c.wait_for("the log goes round 50 times", WITHIN, |c| c.acked_count(0) >= 50 * 64);
    let len = c.stop_and_check();
    assert!(len >= 50 * 64, "applied {len}");
}

/// Back-pressure, not errors (§5.3): replica 0 proposes flat out for 10 s (groups of up to six
/// requests, two per entry, three entries in flight) into a log of 4,096 slots, while its
/// followers' replayers are held up at random: their commit handlers sleep up to 20 ms on one
/// entry in 16 (about 1,600 entries a second each, far below the leader's pace). The log is
/// full most of the time and the leader goes at the followers' pace: no proposal fails (not
/// with "log full", nor otherwise), and once the leader stops, every replica applies every
/// acknowledged entry, at its index, in one order.
///
/// (Followers stopped with SIGSTOP at random, tried too, bring in the failure detector: a
/// leader change now and then, whose proposals fail with `Aborted`, which is not what this
/// test is about. For the same reason its replicas read heartbeats every 5 ms rather than
/// every 1 ms: on two CPUs shared with the test's own load, and with whatever else the machine
/// runs, a follower's background thread can go unscheduled for the 14 ms the default gives
/// before suspecting it, and the leader then stepped down in about one run of three.)
#[test]
fn t45_sustained_overload_slows_the_leader_without_errors() {
    let _serial = one_at_a_time();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    let seed = std::env::var("MU_RT_SEED").map_or(seed, |s| s.parse().unwrap());
    eprintln!("seed {seed} (MU_RT_SEED)");
    let env = vec![
        ("MU_RT_SLOW_APPLY", "16,20".to_string()),
        ("MU_RT_SEED", seed.to_string()),
        ("MU_RT_READ_PERIOD_US", "5000".to_string()),
    ];
    let c = Cluster::start_env("overload3", 3, "handover", 4096, 6, "mu", env);
    c.wait_for("replica 0 commits", WITHIN, |c| c.acked_count(0) >= 100);
    // From here on: a first proposal may come before the leader's replication plane has taken
    // up the leadership its background plane announced (`NotLeader`).
    std::fs::write(c.dir.join("errors-0.log"), b"").unwrap();
    std::thread::sleep(Duration::from_secs(10));
    std::fs::write(c.dir.join("quiet"), b"").unwrap();
    // The call under way when the leader was told to stop ends first.
    let mut count = c.acked_count(0);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = c.acked_count(0);
        if now == count {
            break;
        }
        count = now;
    }
    let acked = c.acked(0);
    let last = *acked.keys().last().expect("replica 0 acknowledged proposals");
    let laps = last / c.slots;
    eprintln!("{count} requests acknowledged, up to index {last}");
    assert!(laps >= 2, "the log went round only {laps} times: no overload");
    let errors = std::fs::read_to_string(c.dir.join("errors-0.log")).unwrap_or_default();
    assert!(
        errors.is_empty(),
        "{} proposals failed under overload, first and last:\n{}\n{}{}",
        errors.lines().count(),
        first_lines(&errors, 3),
        errors.lines().last().unwrap_or_default(),
        c.statuses()
    );
    // Every replica applies up to the last acknowledged entry (the followers at their pace).
    c.wait_for("every replica applies every acknowledged entry", WITHIN, |c| {
        (0..3).all(|me| applied_count(&c.status(me)) >= count)
    });
    // One order, every acknowledged entry at its index; (more may be applied than was
    // acknowledged: a request whose proposal failed as the leadership was being taken up,
    // before the errors were counted, may still have been decided).
    let applied = c.stop_and_check();
    assert!(applied >= count, "applied {applied} of {count} acknowledged");
}

/// The first `n` lines of `text`.
fn first_lines(text: &str, n: usize) -> String {
    text.lines().take(n).collect::<Vec<_>>().join("\n")
}

/// The count of applied requests a child's status report ends with ("... applied N").
fn applied_count(status: &str) -> usize {
    status.rsplit_once("applied ").and_then(|(_, n)| n.trim().parse().ok()).unwrap_or(0)
}

/// A follower stopped for a while lags; when it continues, the leader's update of followers
/// (Listing 4) or the replayer brings it up to date, and the cluster goes on.
#[test]
fn t30_a_lagging_follower_is_caught_up() {
    let _serial = one_at_a_time();
    let c = Cluster::start("lag3", 3, "handover");
    c.wait_for("replica 0 commits", WITHIN, |c| c.acked_count(0) >= 100);
    c.signal(2, libc::SIGSTOP);
    let before = c.acked_count(0);
    c.wait_for("replica 0 goes on without 2", WITHIN, |c| c.acked_count(0) >= before + 100);
    c.signal(2, libc::SIGCONT);
    let before = c.acked_count(0);
    c.wait_for("replica 0 goes on with 2 back", WITHIN, |c| c.acked_count(0) >= before + 300);
    c.stop_and_check();
}

/// Replica 2 (a follower) is killed while replica 0 goes round the log `laps` times, then
/// restarts with an empty log; once `rejoined` says so of its status, the leader is killed and
/// replica 1 must go on with it. Every replica ends with one sequence from index 0.
fn restart_a_follower_then_kill_the_leader(
    mut c: Cluster,
    laps: usize,
    rejoined: (&str, fn(&str) -> bool),
) {
    c.wait_for("replica 0 commits", WITHIN, |c| c.acked_count(0) >= 100);
    c.kill(2);
    let before = c.acked_count(0);
    let entries = laps * c.slots as usize;
    c.wait_for("the log goes round", WITHIN, |c| c.acked_count(0) >= before + entries);
    let _ = std::fs::remove_file(c.dir.join("status-2"));
    c.restart(2, 1);
    c.wait_for(rejoined.0, WITHIN, |c| (rejoined.1)(&c.status(2)));
    let before = c.acked_by_others(0);
    c.kill(0);
    c.wait_for("replica 1 leads with 2", WITHIN, |c| c.acked_by_others(0) >= before + 200);
    c.stop_and_check();
}

/// State transfer across processes: a follower is killed, the others go round their logs
/// several times, and the follower restarts with an empty log. It rejoins recovering, gets
/// a snapshot from a peer (one-sided reads of its state-transfer region), is brought on from
/// there, becomes eligible, and then carries the cluster with replica 1 when the leader is
/// killed.
#[test]
fn t50_a_restarted_replica_rejoins_by_state_transfer() {
    let _serial = one_at_a_time();
    let c = Cluster::start_with("transfer3", 3, "handover", 1024, 1);
    // At full speed the leader may be a log ahead again by the time a snapshot is installed:
    // then the replica fetches another.
    restart_a_follower_then_kill_the_leader(
        c,
        5,
        ("replica 2 rejoins", |status| {
            status.contains("eligible: true") && !status.contains("snapshots_installed: 0")
        }),
    );
}

/// Velos, a replica restarted without its memory, on processes (`docs/protocols/velos.md`,
/// "Restarting a replica"): a follower is killed, the log goes round twice, and it restarts.
/// It lets no one in until the leader decided a rejoin entry for it, is brought on by state
/// transfer meanwhile, abstains below one lap past that entry, and counts in majorities again
/// once the log passed the slots it abstains in. Then the leader is killed, and replica 1 goes on with it.
#[test]
fn t51_a_restarted_velos_replica_becomes_an_acceptor_again() {
    let _serial = one_at_a_time();
    let c = Cluster::start_engine("velos-restart3", 3, "handover", 1024, 1, "velos");
    restart_a_follower_then_kill_the_leader(
        c,
        2,
        ("replica 2 is an acceptor again", |status| {
            status.contains("eligible: true") && status.contains("recovering: false")
        }),
    );
}

/// Velos, laps modulo 2048 on processes (`docs/protocols/velos.md`, "Laps modulo 2048"): with
/// a log of 8 slots, the leader is stopped (SIGSTOP) while the others go round the log 1,500
/// times, more than a slot word's lap tells apart. When it continues it is still the lowest
/// live id and elected at once; it must first read how far the others went, step down and
/// catch up by state transfer, not prepare their words back into its own lap.
#[test]
fn t52_a_velos_leader_stopped_for_over_1024_laps_catches_up() {
    let _serial = one_at_a_time();
    let c = Cluster::start_engine("velos-laps3", 3, "handover", 8, 1, "velos");
    c.wait_for("replica 0 commits", WITHIN, |c| c.acked_count(0) >= 100);
    let before = c.acked_by_others(0);
    c.signal(0, libc::SIGSTOP);
    c.wait_for("the others go round the log 1,500 times", WITHIN, |c| {
        c.acked_by_others(0) >= before + 1500 * 8
    });
    c.signal(0, libc::SIGCONT);
    c.wait_for("replica 0 catches up", WITHIN, |c| !c.status(0).contains("snapshots_installed: 0"));
    let before = c.acked_by_others(0) + c.acked_count(0);
    c.wait_for("the cluster goes on", WITHIN, |c| {
        c.acked_by_others(0) + c.acked_count(0) >= before + 300
    });
    c.stop_and_check();
}

/// §5.4 on processes: a cluster created with replicas 0–2 adds replica 3 (started outside the
/// configuration, brought up to date by the log), then loses its leader: with four members
/// three must agree, so 1, 2 and 3 go on only with 3 a full member. The dead replica is
/// removed, then the new leader removes itself: it stops, and 2 and 3 go on as a cluster of
/// two.
#[test]
fn t60_adding_and_removing_replicas() {
    let _serial = one_at_a_time();
    adding_and_removing_replicas(Cluster::start_members("members", 4, &[0, 1, 2], "mu"));
}

/// The same with Velos (`docs/protocols/velos.md`, "Membership changes"): replica 3 first
/// rejoins (a rejoin entry, as for a restarted replica), is added, and counts once it no
/// longer abstains; the leader that removes itself decides one entry more before it stops.
#[test]
fn t61_adding_and_removing_velos_replicas() {
    let _serial = one_at_a_time();
    adding_and_removing_replicas(Cluster::start_members("members-velos", 4, &[0, 1, 2], "velos"));
}

fn adding_and_removing_replicas(mut c: Cluster) {
    c.wait_for("replica 0 commits", WITHIN, |c| c.acked_count(0) >= 100);
    c.restart(3, 0);
    c.await_ready([3]);
    c.change("add 3");
    c.wait_for("replica 3 is a full member", WITHIN, |c| {
        let status = c.status(3);
        status.contains("eligible: true")
            && status.contains("recovering: false")
            && status.contains("NodeId(3)], removed: false")
    });
    let before = c.acked_by_others(0);
    c.kill(0);
    c.wait_for("1 leads 2 and 3", WITHIN, |c| c.acked_by_others(0) >= before + 200);
    c.change("remove 0");
    c.change("remove 1");
    c.wait_for("replica 1 stops", WITHIN, |c| c.status(1).contains("removed: true"));
    let before = c.acked_count(2);
    c.wait_for("2 leads 3", WITHIN, |c| c.acked_count(2) >= before + 200);
    // Status files are rewritten every 100 ms: 200 commits can take less.
    c.wait_for("replica 3 applied both removals", WITHIN, |c| {
        c.status(3).contains("members: [NodeId(2), NodeId(3)]")
    });
    c.stop_and_check();
}
