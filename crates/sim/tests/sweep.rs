//! The seed runner behind `mu sim`: determinism, a short sweep with every checker on, and proof
//! that the simulator finds bugs (deliberately broken engines are caught).

use mu_replication::mutation::Mutation;
use mu_sim::{run, Faults, RunConfig};

/// `mu sim --seed S` replays a run exactly: two runs of one seed produce the same trace, line
/// for line, and the same hash of every simulator event.
#[test]
fn t10_one_seed_twice_gives_identical_traces() {
    for seed in [3, 8] {
        let a = run(&RunConfig::new(seed));
        let b = run(&RunConfig::new(seed));
        assert_eq!(a.violation, None, "seed {seed}: {:?}", a.trace);
        assert_eq!(a.trace, b.trace, "seed {seed}");
        assert_eq!(a.trace_hash, b.trace_hash, "seed {seed}");
        assert_eq!(a.history, b.history, "seed {seed}");
        assert!(a.ops_returned > 100, "seed {seed} did work: {a:?}");
        let other = run(&RunConfig::new(seed + 2));
        assert_ne!(a.trace_hash, other.trace_hash, "another seed, another run");
    }
}

/// A short sweep, every fault on, 3 and 5 replicas; the histories are checked by lincheck in
/// the test command's sweep (`mu sim --seeds`), here only by the Rust checkers.
#[test]
fn t20_a_sweep_finds_nothing_wrong() {
    for seed in 0..16 {
        let report = run(&RunConfig::new(seed));
        if let Some(v) = &report.violation {
            panic!(
                "seed {seed}: {} violated: {}\n{}",
                v.checker,
                v.message,
                report.trace.join("\n")
            );
        }
        assert!(report.acked > 0 && report.ops_returned > 0, "seed {seed} committed nothing");
    }
}

/// Each broken engine is caught within a bounded number of seeds, by the checker its bug
/// breaks: the simulator finds bugs, it does not only pass.
#[test]
fn t30_broken_engines_are_caught() {
    for (mutation, seeds_max) in [(Mutation::SkipRevoke, 5), (Mutation::SkipPrepareAdopt, 40)] {
        let mut caught = None;
        for seed in 0..seeds_max {
            let mut config = RunConfig::new(seed);
            config.mutation = Some(mutation);
            let report = run(&config);
            if let Some(v) = report.violation {
                caught = Some((seed, v));
                break;
            }
        }
        let (seed, v) =
            caught.unwrap_or_else(|| panic!("{} not caught in {seeds_max} seeds", mutation.name()));
        eprintln!(
            "{} caught at seed {seed} by {}: {}",
            mutation.name(),
            v.checker,
            v.message.lines().next().unwrap_or("")
        );
    }
    // And the mutation is off again for this thread.
    assert_eq!(run(&RunConfig::new(0)).violation, None);
}

/// The faults can be switched off one by one: a run without faults commits, and each fault alone
/// runs clean.
#[test]
fn t40_each_fault_alone() {
    for spec in
        ["none", "crash,restart", "pause", "delay", "partition", "perm-failure", "out-of-order"]
    {
        let mut config = RunConfig::new(11);
        config.faults = Faults::parse(spec).unwrap();
        let report = run(&config);
        assert_eq!(report.violation, None, "faults {spec}: {}", report.trace.join("\n"));
        assert_eq!(report.faults, spec);
    }
}
