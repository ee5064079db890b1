//! uKharon in the simulator: seeds with every fault pass every checker, a seed replays
//! identically, and each broken lease engine is caught within a bounded number of seeds.

use mu_sim::ukharon::{run, UkRunConfig};
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

/// The first seed below `bound` whose run `mutation` breaks, checking that the real engine
/// passes that seed.
fn caught_within(mutation: LeaseMutation, bound: u64) -> Option<(u64, String)> {
    for seed in 0..bound {
        let broken = run(&UkRunConfig { mutation, ..UkRunConfig::new(seed) });
        if let Some(why) = broken.violation {
            let real = run(&UkRunConfig::new(seed));
            assert!(real.violation.is_none(), "seed {seed} fails unmutated: {:?}", real.violation);
            return Some((seed, why));
        }
    }
    None
}

/// Algorithm 2 line 7 without `+ δ`: a first lease that starts at its timestamp.
#[test]
fn a_lease_that_starts_at_t_is_caught() {
    assert!(caught_within(LeaseMutation::StartAtT, 20).is_some());
}

/// Algorithm 2 line 4: the timestamp taken after the reads instead of before them.
#[test]
fn a_timestamp_after_the_reads_is_caught() {
    assert!(caught_within(LeaseMutation::TimestampAfterReads, 20).is_some());
}

/// §6.3: the compatible-view shortcut taken on a view that is not compatible.
#[test]
fn the_compatible_shortcut_on_incompatible_views_is_caught() {
    assert!(caught_within(LeaseMutation::CompatibleShortcutOnIncompatible, 20).is_some());
}
