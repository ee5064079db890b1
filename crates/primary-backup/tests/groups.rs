//! Randomized groups (`tests/group`): a primary and backups under views that change, with the
//! old primary crashed or left running cut off, views that keep the primary and remove a
//! backup, connections that break, fresh backups added, writes in flight and revocations that
//! take time. Every seed must keep the gets linearizable, lose no answered
//! put, and end with every backup's store equal to the primary's; each broken engine of
//! `Mutation` must be caught within a bounded number of seeds.

mod group;

use group::{check, Group};
use mu_primary_backup::Mutation;

/// Runs one seed: a workload with four view changes (the last one just before the end, so
/// that what the last primary answered must be found by its successor), then a quiet phase in which every
/// request is answered and the backups catch up. The first violation, if any.
fn run(seed: u64, mutation: Mutation) -> Option<String> {
    let mut g = Group::new(seed, mutation, 2, 4);
    let mut rng = group::SplitMix(seed ^ 0x5eed);
    for _ in 0..4 {
        for _ in 0..200 {
            g.step(true);
        }
        // Now and then, a view that keeps the primary and removes a backup, or a broken link.
        match rng.below(4) {
            0 if g.settled() => g.change_view_keep_primary(rng.below(2) == 0, rng.below(2) == 0),
            1 => g.lose_link(),
            _ => {}
        }
        for _ in 0..200 {
            g.step(true);
        }
        // A view changes while the primary has writes on the wire, if it comes to that.
        for _ in 0..200 {
            if g.primary_writing() {
                break;
            }
            g.step(true);
        }
        if g.settled() {
            g.change_view(rng.below(2) == 0, rng.below(3) == 0);
        }
    }
    for _ in 0..20_000 {
        if g.idle() && g.caught_up() {
            break;
        }
        g.step(false);
    }
    if std::env::var("PB_DEBUG").is_ok() {
        eprintln!("seed {seed}:\n{}", g.describe());
    }
    g.final_reads();
    if let Some(why) = check(&g.done) {
        return Some(format!("seed {seed}: {why}"));
    }
    let (primary, backups) = g.digests();
    for (node, applied, digest) in backups {
        if applied == g.primary_executed() && digest != primary {
            return Some(format!("seed {seed}: backup {node} diverged at {applied}"));
        }
    }
    if !g.idle() || !g.caught_up() {
        return Some(format!("seed {seed}: requests unanswered or backups behind at the end"));
    }
    None
}

/// Seeds per test (`PB_SEEDS`; a seed takes about a millisecond and a half).
fn seeds() -> u64 {
    std::env::var("PB_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1000)
}

/// §7.3 and `docs/protocols/ukharon-kv.md`: with the protocol, every seed passes.
#[test]
fn the_protocol_passes_every_seed() {
    let mut puts_gets = 0;
    let first: u64 = std::env::var("PB_FIRST").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    for seed in first..first + seeds() {
        if let Some(why) = run(seed, Mutation::None) {
            panic!("{why}");
        }
        puts_gets += 1;
    }
    assert!(puts_gets > 0);
}

/// Each broken engine is caught by some seed below the bound (twice the sweep's seeds: a
/// backup that follows before revoking needs an old primary's write to land late on a slot
/// the new primary already wrote, which is rare), and the protocol passes that seed.
#[test]
fn each_broken_engine_is_caught() {
    let bound = 2 * seeds();
    for mutation in Mutation::ALL {
        let caught = (0..bound).find_map(|seed| run(seed, mutation).map(|why| (seed, why)));
        let Some((seed, why)) = caught else {
            panic!("{mutation:?} was not caught within {bound} seeds");
        };
        eprintln!("{mutation:?} caught: {why}");
        assert_eq!(run(seed, Mutation::None), None, "seed {seed} fails with the protocol");
    }
}
