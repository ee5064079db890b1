//! What an application's mistakes do to a replica: a configuration that cannot work is refused
//! at start with a typed error, never a panic nor a replica that starts and does nothing; a
//! call out of place (an empty or oversized request, a follower asked, a membership change
//! that changes nothing) fails with the error that says so, and the replica works on.
//! Replicas in this process, on the shared-memory fabric.

mod common;

use mu_fabric::NodeId;
use mu_replica::{
    ConfigError, Mode, ProposeError, Replica, ReplicaConfig, StartError, StateMachine,
};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CLUSTER_ID: u64 = 0x6d75_616d;

/// The tests of this file go one at a time: each runs replicas with busy threads in this
/// process, and on a two-core machine several at once starve each other's heartbeats.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

type Applied = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

fn ids(n: u16) -> Vec<NodeId> {
    (0..n).map(NodeId).collect()
}

/// A fabric node for replica `id` on `dir`.
fn fabric(dir: &Path, id: u16) -> mu_fabric_shm::ShmFabric {
    mu_fabric_shm::ShmFabric::create(mu_fabric_shm::ShmConfig::new(dir, CLUSTER_ID, NodeId(id)))
        .expect("fabric")
}

/// A small log (64 slots of 128 bytes) and the defaults otherwise.
fn small(me: u16, n: u16) -> ReplicaConfig {
    let mut config = ReplicaConfig::new(NodeId(me), ids(n));
    config.slots_count = 64;
    config.slot_bytes = 128;
    config
}

/// Starts replica `config.me` with a handler that records what it applies.
fn start(dir: &Path, config: ReplicaConfig, mode: Mode) -> (Replica, Applied) {
    let seen = Applied::default();
    let log = seen.clone();
    let me = config.me.0;
    let replica = Replica::start(config, fabric(dir, me), mode, move |index, value: &[u8]| {
        log.lock().unwrap().push((index, value.to_vec()))
    })
    .expect("replica starts");
    (replica, seen)
}

/// Proposes `value` on `replica` until it commits, for up to 10 s.
fn commit_on(replica: &Replica, value: &[u8]) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match replica.propose(value) {
            Ok(index) => return index,
            Err(e) => {
                assert!(Instant::now() < deadline, "{value:?}: no commit within 10 s ({e})");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Waits until every replica of `replicas` sees `leader` lead, for up to 10 s.
fn wait_for_leader(replicas: &[&Replica], leader: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for r in replicas {
        while r.leader() != Some(NodeId(leader)) {
            assert!(Instant::now() < deadline, "replica {} never saw {leader} lead", r.id());
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Waits until `seen` holds `count` entries, for up to 10 s.
fn wait_applied(seen: &Applied, count: usize) -> Vec<(u64, Vec<u8>)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = seen.lock().unwrap().clone();
        if now.len() >= count {
            return now;
        }
        assert!(Instant::now() < deadline, "applied {} of {count}: {now:?}", now.len());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Every configuration below is refused by `validate`, and by `Replica::start` with the same
/// error, before any thread or region exists.
#[test]
fn bad_configurations_are_refused_at_start() {
    let _one = one_at_a_time();
    let dir = common::fresh_run_dir("api-misuse-config");
    type Edit = fn(&mut ReplicaConfig);
    type Expected = fn(&ConfigError) -> bool;
    let cases: Vec<(&str, Edit, Expected)> = vec![
        ("no replicas", |c| c.replicas.clear(), |e| matches!(e, ConfigError::Replicas(_))),
        (
            "a repeated replica",
            |c| c.replicas.push(NodeId(1)),
            |e| matches!(e, ConfigError::Replicas(_)),
        ),
        (
            "me not among the replicas",
            |c| c.me = NodeId(7),
            |e| matches!(e, ConfigError::Replicas(_)),
        ),
        (
            "65 replicas",
            |c| c.replicas = (0..65).map(NodeId).collect(),
            |e| matches!(e, ConfigError::Replicas(_)),
        ),
        (
            "members outside the replicas",
            |c| c.members = Some(vec![NodeId(0), NodeId(9)]),
            |e| matches!(e, ConfigError::Replicas(_)),
        ),
        ("no members", |c| c.members = Some(vec![]), |e| matches!(e, ConfigError::Replicas(_))),
        ("0 slots", |c| c.slots_count = 0, |e| matches!(e, ConfigError::Log(_))),
        ("1 slot", |c| c.slots_count = 1, |e| matches!(e, ConfigError::Log(_))),
        ("slots of 0 bytes", |c| c.slot_bytes = 0, |e| matches!(e, ConfigError::Log(_))),
        ("slots of 129 bytes", |c| c.slot_bytes = 129, |e| matches!(e, ConfigError::Log(_))),
        (
            "a log too large for memory",
            |c| c.slots_count = u64::MAX / 2,
            |e| matches!(e, ConfigError::Log(_)),
        ),
        ("no snapshot", |c| c.snapshot_bytes_max = 0, |e| matches!(e, ConfigError::Log(_))),
        ("batches of 0", |c| c.batch_requests_max = 0, |e| matches!(e, ConfigError::Batching(_))),
        ("0 outstanding", |c| c.outstanding_max = 0, |e| matches!(e, ConfigError::Batching(_))),
        (
            "outstanding past the log",
            |c| {
                c.slots_count = 2;
                c.outstanding_max = 2;
            },
            |e| matches!(e, ConfigError::Batching(_)),
        ),
        (
            "outstanding past the engine's limit",
            |c| c.outstanding_max = usize::MAX,
            |e| matches!(e, ConfigError::Batching(_)),
        ),
        (
            "recovery at the failure threshold",
            |c| c.detector.recovery_threshold = c.detector.failure_threshold,
            |e| matches!(e, ConfigError::Detector(_)),
        ),
        (
            "recovery below the failure threshold",
            |c| {
                c.detector.failure_threshold = 6;
                c.detector.recovery_threshold = 2;
            },
            |e| matches!(e, ConfigError::Detector(_)),
        ),
        (
            "recovery at the highest score",
            |c| c.detector.recovery_threshold = 15,
            |e| matches!(e, ConfigError::Detector(_)),
        ),
        (
            "recovery past the highest score",
            |c| c.detector.recovery_threshold = 16,
            |e| matches!(e, ConfigError::Detector(_)),
        ),
        (
            "failure threshold 0",
            |c| c.detector.failure_threshold = 0,
            |e| matches!(e, ConfigError::Detector(_)),
        ),
        (
            "read period 0",
            |c| c.detector.read_period_ns = 0,
            |e| matches!(e, ConfigError::Detector(_)),
        ),
        (
            "fate check period 0",
            |c| c.detector.fate_check_period_ns = 0,
            |e| matches!(e, ConfigError::Detector(_)),
        ),
        (
            "log full timeout 0",
            |c| c.log_full_timeout_ns = 0,
            |e| matches!(e, ConfigError::Timing(_)),
        ),
        (
            "permission timeout forever",
            |c| c.permission_timeout_ns = u64::MAX,
            |e| matches!(e, ConfigError::Timing(_)),
        ),
        (
            "crash check period 0",
            |c| c.crash_check_period_ns = 0,
            |e| matches!(e, ConfigError::Timing(_)),
        ),
        (
            "grace past the permission timeout",
            |c| c.permission_grace_ns = c.permission_timeout_ns,
            |e| matches!(e, ConfigError::Timing(_)),
        ),
    ];
    for (what, edit, expected) in cases {
        let mut config = small(0, 3);
        edit(&mut config);
        match config.validate() {
            Err(e) => assert!(expected(&e), "{what}: {e:?}"),
            Ok(_) => panic!("{what}: accepted"),
        }
        let started = Replica::start(config, fabric(&dir, 0), Mode::Handover, |_, _: &[u8]| {});
        match started {
            Err(StartError::Config(e)) => assert!(expected(&e), "{what}: {e:?}"),
            Err(e) => panic!("{what}: not a configuration error: {e}"),
            Ok(_) => panic!("{what}: started"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cluster of one replica leads itself and commits, in both modes; so does one of two.
#[test]
fn clusters_of_one_and_two_commit() {
    let _one = one_at_a_time();
    for mode in [Mode::Direct, Mode::Handover] {
        let dir = common::fresh_run_dir(&format!("api-misuse-one-{mode:?}"));
        let (alone, seen) = start(&dir, small(0, 1), mode);
        wait_for_leader(&[&alone], 0);
        let index = commit_on(&alone, b"alone");
        assert_eq!(wait_applied(&seen, 1)[0], (index, b"alone".to_vec()), "{mode:?}");
        drop(alone);
        let _ = std::fs::remove_dir_all(&dir);

        let dir = common::fresh_run_dir(&format!("api-misuse-two-{mode:?}"));
        let (a, seen_a) = start(&dir, small(0, 2), mode);
        let (b, seen_b) = start(&dir, small(1, 2), mode);
        wait_for_leader(&[&a, &b], 0);
        let index = commit_on(&a, b"pair");
        assert_eq!(wait_applied(&seen_a, 1)[0], (index, b"pair".to_vec()), "{mode:?}");
        assert_eq!(wait_applied(&seen_b, 1)[0], (index, b"pair".to_vec()), "{mode:?}");
        drop((a, b));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Requests at the edges: an empty one commits and is applied empty; one of exactly the
/// largest size commits whole; one byte more is refused with the limit; an empty call has no
/// outcomes; a follower answers with the leader's id.
#[test]
fn proposals_at_the_edges() {
    let _one = one_at_a_time();
    for mode in [Mode::Direct, Mode::Handover] {
        let dir = common::fresh_run_dir(&format!("api-misuse-edges-{mode:?}"));
        let (replicas, applied): (Vec<_>, Vec<_>) =
            (0..3).map(|id| start(&dir, small(id, 3), mode)).unzip();
        let all: Vec<&Replica> = replicas.iter().collect();
        wait_for_leader(&all, 0);
        let leader = &replicas[0];
        // 128-byte slots: 24 bytes of framing, 104 of value.
        let max = 104;
        let empty = commit_on(leader, b"");
        let full = commit_on(leader, &vec![7u8; max]);
        assert_eq!(
            leader.propose(&vec![7u8; max + 1]),
            Err(ProposeError::TooLarge { len: max + 1, max }),
            "{mode:?}"
        );
        let mut outcomes = vec![Ok(1)];
        leader.propose_many(&[], &mut outcomes);
        assert!(outcomes.is_empty(), "{mode:?}: {outcomes:?}");
        // A batch with one request too large fails whole, and nothing of it is applied.
        leader.propose_many(&[b"a", &vec![0u8; max + 1], b"c"], &mut outcomes);
        assert_eq!(outcomes.len(), 3, "{mode:?}");
        assert!(
            outcomes.iter().all(|o| matches!(o, Err(ProposeError::TooLarge { .. }))),
            "{mode:?}: {outcomes:?}"
        );
        // Empty requests in a batch too.
        leader.propose_many(&[b"", b"x", b""], &mut outcomes);
        assert!(outcomes.iter().all(|o| o.is_ok()), "{mode:?}: {outcomes:?}");
        let batch = *outcomes[0].as_ref().unwrap();
        for follower in &replicas[1..] {
            assert_eq!(
                follower.propose(b"to a follower"),
                Err(ProposeError::NotLeader { leader: Some(NodeId(0)) }),
                "{mode:?}"
            );
        }
        for seen in &applied {
            let seen = wait_applied(seen, 5);
            assert_eq!(
                seen,
                [
                    (empty, vec![]),
                    (full, vec![7u8; max]),
                    (batch, vec![]),
                    (batch, b"x".to_vec()),
                    (batch, vec![]),
                ],
                "{mode:?}"
            );
        }
        drop(replicas);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Membership changes that change nothing are refused with the reason, and the replica works
/// on; the leader may remove itself, and then points proposals at the new leader.
#[test]
fn membership_changes_out_of_place() {
    let _one = one_at_a_time();
    for mode in [Mode::Direct, Mode::Handover] {
        let dir = common::fresh_run_dir(&format!("api-misuse-members-{mode:?}"));
        let mut configs: Vec<_> = (0..4).map(|id| small(id, 4)).collect();
        for c in &mut configs {
            c.members = Some(ids(3));
        }
        let (replicas, _applied): (Vec<_>, Vec<_>) =
            configs.into_iter().take(3).map(|c| start(&dir, c, mode)).unzip();
        let all: Vec<&Replica> = replicas.iter().collect();
        wait_for_leader(&all, 0);
        let leader = &replicas[0];
        commit_on(leader, b"first");
        let refused = |outcome: Result<u64, ProposeError>, what: &str| match outcome {
            Err(ProposeError::Membership(why)) => assert!(why.contains(what), "{mode:?}: {why}"),
            other => panic!("{mode:?}: {what}: {other:?}"),
        };
        refused(leader.add_replica(NodeId(1)), "a member already");
        refused(leader.remove_replica(NodeId(3)), "not a member");
        refused(leader.add_replica(NodeId(9)), "not one of the cluster's replicas");
        refused(leader.remove_replica(NodeId(9)), "not one of the cluster's replicas");
        assert_eq!(
            replicas[1].add_replica(NodeId(3)),
            Err(ProposeError::NotLeader { leader: Some(NodeId(0)) }),
            "{mode:?}"
        );
        commit_on(leader, b"after the refusals");
        // The leader removes itself: decided, it stops leading, and 1 takes over.
        let index = leader.remove_replica(NodeId(0)).expect("the leader removes itself");
        assert!(index > 0);
        wait_for_leader(&[&replicas[1], &replicas[2]], 1);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !leader.status().removed {
            assert!(Instant::now() < deadline, "{mode:?}: never removed");
            std::thread::sleep(Duration::from_millis(1));
        }
        match leader.propose(b"to the removed one") {
            Err(ProposeError::NotLeader { leader }) => {
                assert_ne!(leader, Some(NodeId(0)), "{mode:?}: the removed replica names itself")
            }
            other => panic!("{mode:?}: {other:?}"),
        }
        commit_on(&replicas[1], b"under the new leader");
        // Down to one member: the last cannot go.
        replicas[1].remove_replica(NodeId(2)).expect("2 removed");
        refused(replicas[1].remove_replica(NodeId(1)), "last member");
        commit_on(&replicas[1], b"alone");
        drop(replicas);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Followers whose commit handlers are held (they stop applying altogether) fill the log: the
/// leader's proposals fail with `LogFull` naming one of them after `log_full_timeout_ns`, not
/// wait for good nor overwrite their entries; once the handlers go on, so does the cluster.
#[test]
fn a_held_follower_fills_the_log_and_the_leader_says_so() {
    let _one = one_at_a_time();
    let dir = common::fresh_run_dir("api-misuse-log-full");
    // Both followers' handlers wait for the gate, held until the log has filled. (With one
    // held follower the leader may drop it for good, as it may any follower slower than itself
    // while a majority remains (`make_room`), and then never fills the log: whether it can
    // depends on how far its own replica has applied at that moment.)
    let gate = Arc::new(Mutex::new(()));
    let mut replicas = Vec::new();
    // Taken after `replicas` is declared, so that it is let go first when an assertion fails:
    // the replicas' drop waits for replica 2's thread, which waits for the gate.
    let held = gate.lock().unwrap();
    for id in 0..3u16 {
        let mut config = small(id, 3);
        config.slots_count = 16;
        config.log_full_timeout_ns = 50_000_000;
        let gate = Arc::clone(&gate);
        let replica =
            Replica::start(config, fabric(&dir, id), Mode::Handover, move |_, _: &[u8]| {
                if id != 0 {
                    drop(gate.lock().unwrap_or_else(|e| e.into_inner()));
                }
            })
            .expect("replica starts");
        replicas.push(replica);
    }
    let all: Vec<&Replica> = replicas.iter().collect();
    wait_for_leader(&all, 0);
    let mut full = None;
    for k in 0..64 {
        let started = Instant::now();
        match replicas[0].propose(format!("v{k}").as_bytes()) {
            Ok(_) => {}
            Err(e) => {
                full = Some((e, started.elapsed()));
                break;
            }
        }
    }
    let (e, waited) = full.expect("the log never filled");
    let ProposeError::LogFull { replica, slots_count: 16, .. } = e else { panic!("{e:?}") };
    assert!(replica == NodeId(1) || replica == NodeId(2), "a held follower is named: {e}");
    assert!(e.to_string().contains(&format!("replica {replica} ")), "{e}");
    assert!(waited >= Duration::from_millis(50) && waited < Duration::from_secs(5), "{waited:?}");
    drop(held);
    commit_on(&replicas[0], b"after");
    drop(replicas);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A counter that snapshots and restores; its first `refusals` snapshots fail, as an
/// application's may while it is busy.
struct Counter {
    sum: u64,
    refusals: Arc<Mutex<u32>>,
}

impl StateMachine for Counter {
    fn apply(&mut self, _index: u64, request: &[u8]) {
        self.sum += request.len() as u64;
    }

    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        let mut refusals = self.refusals.lock().unwrap();
        if *refusals > 0 {
            *refusals -= 1;
            return Err("busy compacting, ask later".into());
        }
        out.extend_from_slice(&self.sum.to_le_bytes());
        Ok(())
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let bytes: [u8; 8] = snapshot.try_into().map_err(|_| "not 8 bytes".to_string())?;
        self.sum = u64::from_le_bytes(bytes);
        Ok(())
    }
}

/// A replica started after the others went round the log needs a state transfer; a donor
/// whose snapshot hook fails once (a passing condition) delays it, and the replica's status
/// names the hook's failure rather than claiming the application takes no snapshots.
#[test]
fn a_snapshot_that_fails_once_delays_a_state_transfer() {
    let _one = one_at_a_time();
    let dir = common::fresh_run_dir("api-misuse-snapshot-fails");
    let refusals = Arc::new(Mutex::new(0));
    let config = |id| {
        let mut c = small(id, 3);
        c.slots_count = 16;
        c
    };
    let counter = |refusals: &Arc<Mutex<u32>>| Counter { sum: 0, refusals: refusals.clone() };
    let start_with = |id: u16| {
        Replica::start_with_state(config(id), fabric(&dir, id), Mode::Handover, counter(&refusals))
            .expect("replica starts")
    };
    let (a, b) = (start_with(0), start_with(1));
    wait_for_leader(&[&a, &b], 0);
    for k in 0..40 {
        commit_on(&a, format!("v{k}").as_bytes());
    }
    // Every donor refuses once.
    *refusals.lock().unwrap() = 2;
    let late = start_with(2);
    let deadline = Instant::now() + Duration::from_secs(10);
    let why = loop {
        if let Some(why) = late.status().state_transfer_error {
            break why;
        }
        assert!(Instant::now() < deadline, "no state transfer error reported");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(!why.contains("does not take snapshots"), "misleading: {why}");
    // And it is asked again: the transfer goes through.
    let deadline = Instant::now() + Duration::from_secs(10);
    while late.status().snapshots_installed == 0 {
        let s = late.status();
        assert!(Instant::now() < deadline, "never installed: {:?}", s.state_transfer_error);
        std::thread::sleep(Duration::from_millis(1));
    }
    drop((a, b, late));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A replica stopped by a panic in its commit handler no longer names a leader (the others
/// elect another without it), and whoever watches its leader is told it has none: a stopped
/// replica that still named itself leader would send the application's requests to one that
/// refuses them all.
#[test]
fn a_stopped_replica_names_no_leader() {
    let _one = one_at_a_time();
    for mode in [Mode::Direct, Mode::Handover] {
        let dir = common::fresh_run_dir(&format!("api-misuse-stopped-{mode:?}"));
        let mut replicas = Vec::new();
        for id in 0..3u16 {
            let replica =
                Replica::start(small(id, 3), fabric(&dir, id), mode, move |index, _: &[u8]| {
                    if id == 0 && index == 3 {
                        panic!("boom");
                    }
                })
                .expect("replica starts");
            replicas.push(replica);
        }
        let all: Vec<&Replica> = replicas.iter().collect();
        wait_for_leader(&all, 0);
        let watcher = replicas[0].watch_leader();
        for k in 0..10 {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                replicas[0].propose(format!("v{k}").as_bytes())
            }));
            if !matches!(outcome, Ok(Ok(_))) {
                break;
            }
        }
        assert!(replicas[0].failure().is_some(), "{mode:?}: never failed");
        assert_eq!(replicas[0].propose(b"after"), Err(ProposeError::ShuttingDown), "{mode:?}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while replicas[0].leader().is_some() {
            assert!(Instant::now() < deadline, "{mode:?}: still names {:?}", replicas[0].leader());
            std::thread::sleep(Duration::from_millis(1));
        }
        let status = replicas[0].status();
        assert_eq!(status.leader, None, "{mode:?}");
        assert!(!status.heartbeat_on, "{mode:?}: the heartbeat stopped with the replica");
        assert_eq!(watcher.recv_timeout(Duration::from_secs(5)), Ok(None), "{mode:?}");
        wait_for_leader(&[&replicas[1], &replicas[2]], 1);
        drop(replicas);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A state machine whose restore fails (`panics: false`) or panics, counting its attempts.
struct BadRestore {
    panics: bool,
    attempts: Arc<Mutex<u32>>,
}

impl StateMachine for BadRestore {
    fn apply(&mut self, _index: u64, _request: &[u8]) {}

    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        out.extend_from_slice(b"state");
        Ok(())
    }

    fn restore(&mut self, _snapshot: &[u8]) -> Result<(), String> {
        *self.attempts.lock().unwrap() += 1;
        if self.panics {
            panic!("restore exploded");
        }
        Err("cannot restore today".into())
    }
}

/// A replica that needs a state transfer and cannot restore it: a refusal is reported and
/// tried again later; a panic stops that replica alone, saying why. The others go on.
#[test]
fn a_failing_restore_is_reported_and_a_panicking_one_stops_its_replica() {
    let _one = one_at_a_time();
    for (mode, panics) in [(Mode::Handover, false), (Mode::Handover, true), (Mode::Direct, true)] {
        let dir = common::fresh_run_dir(&format!("api-misuse-restore-{mode:?}-{panics}"));
        let config = |id| {
            let mut c = small(id, 3);
            c.slots_count = 16;
            c
        };
        let attempts = Arc::new(Mutex::new(0));
        let start_with = |id: u16| {
            let app = BadRestore { panics: id == 2 && panics, attempts: attempts.clone() };
            Replica::start_with_state(config(id), fabric(&dir, id), mode, app)
                .expect("replica starts")
        };
        let (a, b) = (start_with(0), start_with(1));
        wait_for_leader(&[&a, &b], 0);
        for k in 0..40 {
            commit_on(&a, format!("v{k}").as_bytes());
        }
        let late = start_with(2);
        let deadline = Instant::now() + Duration::from_secs(10);
        if panics {
            let failure = loop {
                if let Some(f) = late.failure() {
                    break f;
                }
                assert!(Instant::now() < deadline, "{mode:?}: the panic was never reported");
                std::thread::sleep(Duration::from_millis(1));
            };
            assert!(failure.contains("restore exploded"), "{mode:?}: {failure}");
            assert_eq!(late.propose(b"x"), Err(ProposeError::ShuttingDown));
        } else {
            while *attempts.lock().unwrap() < 2 {
                assert!(Instant::now() < deadline, "{mode:?}: restore not tried again");
                std::thread::sleep(Duration::from_millis(1));
            }
            let why = late.status().state_transfer_error.unwrap_or_default();
            assert!(why.contains("cannot restore today"), "{mode:?}: {why}");
            assert!(late.failure().is_none(), "{mode:?}");
        }
        commit_on(&a, b"the others go on");
        drop((a, b, late));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
