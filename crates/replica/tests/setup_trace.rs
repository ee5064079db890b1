//! A new leader's polls are timed and traced up to its first commit, even when it was set up
//! with nothing to propose: the polls that carry its first proposal are part of a failover
//! too (`ReplicaStatus::phases_busy_ns` and `setup_polls`). Three replicas in this process, on
//! the shared-memory fabric, in direct mode (as `mu bench failover` runs them).

mod common;

use mu_fabric::NodeId;
use mu_replica::{Mode, Replica, ReplicaStatus};
use mu_replication::Phase;
use std::time::{Duration, Instant};

const CLUSTER_ID: u64 = 0x6d75_7374;

/// Waits up to 10 s for `done` to hold of replica `replica`'s status.
fn wait_for(replica: &Replica, what: &str, done: impl Fn(&ReplicaStatus) -> bool) -> ReplicaStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = replica.status();
        if done(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "{what} within 10 s: {status:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_leader_set_up_idle_is_traced_to_its_first_commit() {
    let dir = common::fresh_run_dir("setup-trace");
    let replicas: Vec<Replica> = (0..3u16)
        .map(|id| {
            let (fabric, config) = common::in_process_replica(&dir, CLUSTER_ID, id);
            Replica::start(config, fabric, Mode::Direct, |_: u64, _: &[u8]| {})
                .expect("replica starts")
        })
        .collect();
    let leader = &replicas[0];
    // Set up (permissions, catch-up, followers updated) with nothing proposed: `Ready`.
    let idle = wait_for(leader, "replica 0 set up as leader", |s| {
        s.leader == Some(NodeId(0)) && s.ready_at_ns.is_some()
    });
    let entered =
        |s: &ReplicaStatus, phase: Phase| s.phases_entered_at_ns.iter().any(|p| p.0 == phase);
    assert!(entered(&idle, Phase::Ready), "ready before any proposal: {idle:?}");
    assert!(!entered(&idle, Phase::PrepareRead), "nothing proposed yet: {idle:?}");
    // Some time with nothing to do, then the first proposal.
    std::thread::sleep(Duration::from_millis(20));
    leader.propose(b"first").expect("the leader commits");
    let first = leader.status();
    assert_eq!(first.leaderships, idle.leaderships, "leadership kept: {first:?}");
    let traced: Vec<Option<Phase>> = first.setup_polls.iter().map(|p| p.phase).collect();
    assert!(
        traced.contains(&Some(Phase::PrepareRead)) || traced.len() == mu_replica::SETUP_TRACE_POLLS,
        "the first proposal's polls are traced: {traced:?}"
    );
    let busy_in = |s: &ReplicaStatus, phase: Phase| s.phases_busy_ns.iter().any(|p| p.0 == phase);
    assert!(busy_in(&first, Phase::PrepareRead), "its polls timed: {first:?}");
    // Timing stops at the first commit: later proposals add nothing.
    for i in 0..20 {
        leader.propose(format!("later {i}").as_bytes()).expect("the leader commits");
    }
    let later = leader.status();
    assert_eq!(later.leaderships, first.leaderships, "leadership kept: {later:?}");
    assert_eq!(later.setup_polls, first.setup_polls, "no poll traced after the first commit");
    assert_eq!(later.phases_busy_ns, first.phases_busy_ns, "no poll timed after the first commit");
    for replica in replicas {
        replica.shutdown();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
