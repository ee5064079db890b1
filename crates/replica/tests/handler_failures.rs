//! What the application's code does to a replica when it misbehaves: a commit handler that
//! panics stops its replica for good (its heartbeat with it, so the others elect a leader
//! without it), no entry is applied twice, and later calls fail at once with
//! `ShuttingDown`, the status saying why; a proposal from inside the commit handler is refused
//! with `Reentrant` instead of waiting for itself. Three replicas in this process, on the
//! shared-memory fabric, in both modes.

mod common;

use mu_fabric::NodeId;
use mu_replica::{Mode, ProposeError, Replica, StateMachine};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

const CLUSTER_ID: u64 = 0x6d75_6866;

/// The tests of this file go one at a time: each runs three replicas with busy threads in this
/// process, and on a two-core machine several at once starve each other's heartbeats (a leader
/// then changes in the middle of a test).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
/// The index whose commit makes the misbehaving handler panic.
const PANIC_AT: u64 = 5;

/// Each replica's calls of its commit handler, by index.
type Calls = Arc<Mutex<BTreeMap<u64, u32>>>;

/// Three replicas of one cluster on `dir`; replica `panicking`'s handler panics at
/// [`PANIC_AT`] (none if `None`). Every handler counts its calls.
fn cluster(dir: &Path, mode: Mode, panicking: Option<u16>) -> (Vec<Replica>, Vec<Calls>) {
    let mut replicas = Vec::new();
    let mut calls = Vec::new();
    for id in 0..3u16 {
        let (fabric, config) = common::in_process_replica(dir, CLUSTER_ID, id);
        let seen = Calls::default();
        let counted = seen.clone();
        let panics = panicking == Some(id);
        let replica = Replica::start(config, fabric, mode, move |index, _value: &[u8]| {
            *counted.lock().unwrap().entry(index).or_default() += 1;
            if panics && index == PANIC_AT {
                panic!("boom at {index}");
            }
        })
        .expect("replica starts");
        replicas.push(replica);
        calls.push(seen);
    }
    (replicas, calls)
}

/// Proposes on `replica` until it commits a value, for up to 10 s.
fn commit_on(replica: &Replica, what: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match replica.propose(what.as_bytes()) {
            Ok(index) => return index,
            Err(e) => {
                assert!(Instant::now() < deadline, "{what}: no commit within 10 s ({e})");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Waits until `replica` sees `leader` lead, for up to 10 s.
fn wait_for_leader(replica: &Replica, leader: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while replica.leader() != Some(NodeId(leader)) {
        assert!(Instant::now() < deadline, "replica {} never saw {leader} lead", replica.id());
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_panicking_commit_handler_stops_the_leader_and_another_takes_over() {
    let _one = one_at_a_time();
    for mode in [Mode::Direct, Mode::Handover] {
        let dir = common::fresh_run_dir(&format!("handler-panic-leader-{mode:?}"));
        let (replicas, calls) = cluster(&dir, mode, Some(0));
        wait_for_leader(&replicas[0], 0);
        // Propose until the leader's handler panics: in direct mode on this thread (the
        // panic reaches the caller), in handover mode on the replication thread (the call
        // fails).
        let mut ended = None;
        for k in 0..100 {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                replicas[0].propose(format!("v{k}").as_bytes())
            }));
            match outcome {
                Ok(Ok(index)) => assert!(index < PANIC_AT, "{mode:?}: {index} committed"),
                Ok(Err(ProposeError::NotLeader { .. })) => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                other => {
                    ended = Some(other.map_err(|_| "a panic"));
                    break;
                }
            }
        }
        let ended = ended.unwrap_or_else(|| panic!("{mode:?}: the handler never panicked"));
        // In direct mode the panic reaches the caller when the leader applies the entry in
        // its own call (the usual case); where the helper thread applied it, the call fails.
        let failed = Ok(Err(ProposeError::ShuttingDown));
        match mode {
            Mode::Direct => assert!(ended == Err("a panic") || ended == failed, "{ended:?}"),
            Mode::Handover => assert_eq!(ended, failed),
        }
        // The replica has stopped: it says why, and refuses at once from now on.
        let status = replicas[0].status();
        let failure = status.failure.unwrap_or_else(|| panic!("{mode:?}: no failure reported"));
        assert!(failure.contains("boom at 5"), "{mode:?}: {failure}");
        let refused_at = Instant::now();
        assert_eq!(replicas[0].propose(b"after"), Err(ProposeError::ShuttingDown));
        assert!(refused_at.elapsed() < Duration::from_secs(1), "refused at once");
        // Its heartbeat stopped with it: replica 1 takes over, and the cluster goes on.
        wait_for_leader(&replicas[2], 1);
        let index = commit_on(&replicas[1], "after the failure");
        assert!(index >= PANIC_AT, "{mode:?}: {index}");
        // No entry was applied twice on the failed replica, before the panic or by another of
        // its threads after it.
        std::thread::sleep(Duration::from_millis(50));
        let seen = calls[0].lock().unwrap().clone();
        assert!(seen.values().all(|&n| n == 1), "{mode:?}: applied twice: {seen:?}");
        assert_eq!(seen.get(&PANIC_AT), Some(&1), "{mode:?}: {seen:?}");
        drop(replicas);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_follower_whose_handler_panics_stops_and_the_leader_goes_on() {
    let _one = one_at_a_time();
    let dir = common::fresh_run_dir("handler-panic-follower");
    let (replicas, calls) = cluster(&dir, Mode::Handover, Some(2));
    wait_for_leader(&replicas[0], 0);
    for k in 0..2 * PANIC_AT {
        commit_on(&replicas[0], &format!("v{k}"));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let failure = loop {
        if let Some(f) = replicas[2].status().failure {
            break f;
        }
        assert!(Instant::now() < deadline, "the follower's failure was never reported");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(failure.contains("boom at 5"), "{failure}");
    // A majority (0 and 1) is left: the leader goes on committing.
    let index = commit_on(&replicas[0], "with two");
    assert!(index > PANIC_AT);
    let seen = calls[2].lock().unwrap().clone();
    assert!(seen.keys().all(|&i| i <= PANIC_AT), "applied past the panic: {seen:?}");
    drop(replicas);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A follower whose commit handler is slow (here: stuck until released) holds its
/// replication plane meanwhile; a proposal made to it is still refused at once, naming the
/// leader, rather than waiting for the plane: a server asked who leads must not wait for its
/// applying thread.
#[test]
fn a_follower_busy_applying_names_the_leader_at_once() {
    let _one = one_at_a_time();
    for mode in [Mode::Direct, Mode::Handover] {
        let dir = common::fresh_run_dir(&format!("handler-busy-follower-{mode:?}"));
        let stuck = Arc::new(std::sync::Barrier::new(2));
        // Released by the test, or after a few seconds: a proposal that waits for the plane
        // fails the test rather than hangs it.
        let (release, released) = std::sync::mpsc::channel::<()>();
        let released = Arc::new(Mutex::new(released));
        let mut replicas = Vec::new();
        for id in 0..3u16 {
            let (fabric, config) = common::in_process_replica(&dir, CLUSTER_ID, id);
            let (stuck, released) = (stuck.clone(), released.clone());
            let replica = Replica::start(config, fabric, mode, move |index, _: &[u8]| {
                if id == 2 && index == PANIC_AT {
                    stuck.wait();
                    let _ = released.lock().unwrap().recv_timeout(Duration::from_secs(3));
                }
            })
            .expect("replica starts");
            replicas.push(replica);
        }
        wait_for_leader(&replicas[2], 0);
        for k in 0..=PANIC_AT {
            commit_on(&replicas[0], &format!("v{k}"));
        }
        stuck.wait();
        let asked = Instant::now();
        let outcome = replicas[2].propose(b"to a busy follower");
        let took = asked.elapsed();
        let _ = release.send(());
        assert_eq!(outcome, Err(ProposeError::NotLeader { leader: Some(NodeId(0)) }), "{mode:?}");
        assert!(took < Duration::from_secs(1), "{mode:?}: refused after {took:?}");
        commit_on(&replicas[0], "after");
        drop(replicas);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_proposal_from_inside_the_commit_handler_is_refused() {
    let _one = one_at_a_time();
    for mode in [Mode::Direct, Mode::Handover] {
        let dir = common::fresh_run_dir(&format!("handler-reentrant-{mode:?}"));
        let mut replicas = Vec::new();
        let inner_outcomes: Arc<Mutex<Vec<Result<u64, ProposeError>>>> = Arc::default();
        let me: Arc<OnceLock<Vec<Weak<Replica>>>> = Arc::default();
        for id in 0..3u16 {
            let (fabric, config) = common::in_process_replica(&dir, CLUSTER_ID, id);
            let (me, outcomes) = (me.clone(), inner_outcomes.clone());
            let replica = Replica::start(config, fabric, mode, move |_, value: &[u8]| {
                if id == 0 && value == b"outer" {
                    let all = me.get().expect("set before proposing");
                    let own = all[0].upgrade().expect("replica 0");
                    let other = all[1].upgrade().expect("replica 1");
                    outcomes.lock().unwrap().push(own.propose(b"inner"));
                    // Another replica of the process is another plane: asked, it answers.
                    outcomes.lock().unwrap().push(other.propose(b"elsewhere"));
                }
            })
            .expect("replica starts");
            replicas.push(Arc::new(replica));
        }
        me.set(replicas.iter().map(Arc::downgrade).collect()).unwrap();
        wait_for_leader(&replicas[0], 0);
        commit_on(&replicas[0], "outer");
        let outcomes = inner_outcomes.lock().unwrap().clone();
        assert_eq!(outcomes.len(), 2, "{mode:?}: {outcomes:?}");
        assert_eq!(outcomes[0], Err(ProposeError::Reentrant), "{mode:?}");
        // Replica 1 answers: as a follower (NotLeader) most often, or, where a loaded machine
        // made it leader meanwhile, with its commit. Only a call to the replica whose plane
        // runs the handler is refused.
        assert_ne!(outcomes[1], Err(ProposeError::Reentrant), "{mode:?}");
        // And the replica works on.
        commit_on(&replicas[0], "later");
        drop(replicas);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A state machine that takes snapshots (of nothing) and refuses, or not, to restore them,
/// counting its attempts.
struct Snapshots {
    restores: Arc<AtomicU64>,
    refuse: bool,
}

impl StateMachine for Snapshots {
    fn apply(&mut self, _index: u64, _request: &[u8]) {}

    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        out.extend_from_slice(b"state");
        Ok(())
    }

    fn restore(&mut self, _snapshot: &[u8]) -> Result<(), String> {
        self.restores.fetch_add(1, Ordering::Relaxed);
        if self.refuse {
            Err("this build cannot read that state".into())
        } else {
            Ok(())
        }
    }
}

/// A replica more than a log behind whose application refuses every snapshot: it asks again,
/// but less and less often (each refusal doubles the wait, up to a second), rather than have
/// a donor take a snapshot as fast as it can (about 2,400 a second before).
#[test]
fn a_replica_whose_restore_fails_asks_again_less_and_less_often() {
    let _one = one_at_a_time();
    let dir = common::fresh_run_dir("restore-refused");
    let start = |id: u16, refuse: bool, restores: Arc<AtomicU64>| {
        let (fabric, mut config) = common::in_process_replica(&dir, CLUSTER_ID, id);
        config.slots_count = 16;
        config.eligible = !refuse;
        Replica::start_with_state(config, fabric, Mode::Handover, Snapshots { restores, refuse })
            .expect("replica starts")
    };
    let donors = [start(0, false, Arc::default()), start(1, false, Arc::default())];
    wait_for_leader(&donors[0], 0);
    for k in 0..200 {
        commit_on(&donors[0], &format!("v{k}"));
    }
    // Replica 2 comes late, twelve laps of the log behind: only a snapshot brings it up.
    let restores = Arc::new(AtomicU64::new(0));
    let late = start(2, true, restores.clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    while restores.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "no snapshot was ever restored");
        std::thread::sleep(Duration::from_millis(1));
    }
    let first = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    let tries = restores.load(Ordering::Relaxed);
    let error = late.status().state_transfer_error.unwrap_or_default();
    assert!(error.contains("cannot read that state"), "{error}");
    // Waits of 1, 2, 4, ... ms (a read period, doubling): about 11 tries in 1.5 s.
    assert!(
        (2..=20).contains(&tries),
        "{tries} restores in {:.1} s",
        first.elapsed().as_secs_f64()
    );
    drop(late);
    drop(donors);
    let _ = std::fs::remove_dir_all(&dir);
}
