//! Whole replicas (both planes, the real runtime) on the simulated fabric. Each test names the
//! part of the Mu paper it exercises.

mod common;

use common::SimCluster;
use mu_fabric::NodeId;

/// §5.1 and §4: three replicas elect the lowest id, which replicates; every replica applies the
/// same sequence.
#[test]
fn t10_three_replicas_elect_and_commit() {
    let mut c = SimCluster::new(3, 1);
    assert_eq!(c.await_leader(5_000_000), NodeId(0));
    for i in 0..20u64 {
        let index = c.propose(0, format!("v{i}").as_bytes(), 5_000_000).unwrap().unwrap();
        assert_eq!(index, i);
    }
    c.run_for(100_000);
    eprintln!(
        "t = {} ns, applied {:?}",
        c.world.now_ns(),
        c.applied.iter().map(|a| a.len()).collect::<Vec<_>>()
    );
    c.check_agreement();
    c.check_acked_applied(0);
    for pos in 1..3 {
        assert!(c.applied[pos].len() >= 19, "replica {pos} applied {}", c.applied[pos].len());
    }
}
