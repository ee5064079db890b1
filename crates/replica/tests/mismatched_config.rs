//! A replica started with another configuration than its peers' (another log shape, another
//! protocol) takes no part: the others never count it alive nor serve its permission
//! requests, it cannot lead, and it acknowledges nothing, so what the others commit is on
//! their logs only, where it can be read back. Each side names the other in its status. Before
//! this, a replica with larger slots was granted the others' logs: the leader's acknowledged
//! entries were written at the wrong offsets and lost.

mod common;

use mu_fabric::NodeId;
use mu_replica::{Mode, ProposeError, Protocol, Replica, ReplicaConfig};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CLUSTER_ID: u64 = 0x6d75_6d63;

/// The tests of this file go one at a time: each runs three replicas with busy threads in this
/// process, and on a two-core machine several at once starve each other's heartbeats (a leader
/// then changes in the middle of a test).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

type Applied = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

/// Three replicas on `dir`; replica 0 gets `odd` applied to its configuration.
fn cluster(dir: &Path, odd: impl Fn(&mut ReplicaConfig)) -> (Vec<Replica>, Vec<Applied>) {
    let (mut replicas, mut applied) = (Vec::new(), Vec::new());
    for id in 0..3u16 {
        let (fabric, mut config) = common::in_process_replica(dir, CLUSTER_ID, id);
        if id == 0 {
            odd(&mut config);
        }
        let seen = Applied::default();
        let log = seen.clone();
        let replica = Replica::start(config, fabric, Mode::Handover, move |index, value: &[u8]| {
            log.lock().unwrap().push((index, value.to_vec()))
        })
        .expect("replica starts");
        replicas.push(replica);
        applied.push(seen);
    }
    (replicas, applied)
}

fn check_excluded(tag: &str, odd: impl Fn(&mut ReplicaConfig)) {
    let dir = common::fresh_run_dir(tag);
    let (replicas, applied) = cluster(&dir, odd);
    // Replica 1 leads: 0 is not alive for the others.
    let deadline = Instant::now() + Duration::from_secs(10);
    while replicas[2].leader() != Some(NodeId(1)) || replicas[1].leader() != Some(NodeId(1)) {
        assert!(Instant::now() < deadline, "{tag}: replica 1 never led");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut acked = Vec::new();
    for k in 0..50 {
        let value = format!("v{k}");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match replicas[1].propose(value.as_bytes()) {
                Ok(index) => break acked.push((index, value.into_bytes())),
                Err(e) => {
                    assert!(Instant::now() < deadline, "{tag}: no commit of {value}: {e}");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    // Every acknowledged value is applied, at its index, by the other replica of the majority.
    let deadline = Instant::now() + Duration::from_secs(10);
    while applied[2].lock().unwrap().len() < acked.len() {
        assert!(Instant::now() < deadline, "{tag}: replica 2 did not apply everything");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(*applied[2].lock().unwrap(), acked, "{tag}");
    // Replica 0 took no part, cannot lead, and says why; so do the others.
    assert!(applied[0].lock().unwrap().is_empty(), "{tag}: replica 0 applied entries");
    assert!(matches!(replicas[0].propose(b"x"), Err(ProposeError::NotLeader { .. })), "{tag}");
    assert_eq!(replicas[0].status().other_configuration, vec![NodeId(1), NodeId(2)], "{tag}");
    assert_eq!(replicas[1].status().other_configuration, vec![NodeId(0)], "{tag}");
    assert!(!replicas[1].status().confirmed.contains(&NodeId(0)), "{tag}");
    drop(replicas);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_replica_with_another_log_shape_takes_no_part() {
    let _one = one_at_a_time();
    check_excluded("mismatch-slot-bytes", |c| c.slot_bytes = 256);
    check_excluded("mismatch-slots", |c| c.slots_count = 128);
}

/// A replica whose snapshots may be larger than the others' could not serve them one, nor
/// take one of theirs: it is refused as configured differently, not left to fail every state
/// transfer.
#[test]
fn a_replica_with_another_snapshot_limit_takes_no_part() {
    let _one = one_at_a_time();
    check_excluded("mismatch-snapshot", |c| c.snapshot_bytes_max *= 2);
}

#[test]
fn a_replica_of_another_protocol_takes_no_part() {
    let _one = one_at_a_time();
    check_excluded("mismatch-protocol", |c| c.protocol = Protocol::Velos);
}

/// Replicas configured alike all take part (the fingerprint is a function of what they
/// agree on, not of who they are).
#[test]
fn replicas_configured_alike_share_a_fingerprint() {
    let ids: Vec<NodeId> = (0..3).map(NodeId).collect();
    let prints: Vec<u16> =
        (0..3).map(|id| ReplicaConfig::new(NodeId(id), ids.clone()).fingerprint()).collect();
    assert!(prints.iter().all(|&p| p == prints[0] && p != 0), "{prints:?}");
    let mut other = ReplicaConfig::new(NodeId(0), ids.clone());
    other.slot_bytes += 8;
    assert_ne!(other.fingerprint(), prints[0]);
    let fewer = ReplicaConfig::new(NodeId(0), ids[..2].to_vec());
    assert_ne!(fewer.fingerprint(), prints[0]);
    // The order the replicas are listed in is no difference.
    let reordered = ReplicaConfig::new(NodeId(0), vec![NodeId(1), NodeId(0), NodeId(2)]);
    assert_eq!(reordered.fingerprint(), prints[0]);
    // Another application's replicas are another cluster.
    let book = ReplicaConfig { application: "orderbook", ..ReplicaConfig::new(NodeId(0), ids) };
    assert_ne!(book.fingerprint(), prints[0]);
}
