//! uKharon-KV in the simulator: seeds with every fault (clock drift included) pass every
//! checker with histories checked by porcupine, a seed replays identically, and each broken
//! engine variant is caught within a bounded number of seeds.

use mu_primary_backup::Mutation;
use mu_sim::caught::first_caught;
use mu_sim::ukharon_kv::{run, KvReport, KvRunConfig};

fn seeds() -> u64 {
    std::env::var("UKHARON_KV_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(8)
}

/// The first seed of the sweep (`UKHARON_KV_FIRST`, default 0).
fn first_seed() -> u64 {
    std::env::var("UKHARON_KV_FIRST").ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The `lincheck` binary: built by scripts/lincheck.sh (Go, porcupine) if it is not there yet.
fn lincheck() -> std::path::PathBuf {
    if let Some(p) = mu_sim::check::linearizability::find_lincheck() {
        return p;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let status = std::process::Command::new("bash")
        .arg("scripts/lincheck.sh")
        .current_dir(&root)
        .status()
        .expect("run scripts/lincheck.sh");
    assert!(status.success(), "scripts/lincheck.sh failed to build lincheck");
    mu_sim::check::linearizability::find_lincheck().expect("lincheck built")
}

fn checked(seed: u64) -> KvRunConfig {
    let mut config = KvRunConfig::new(seed);
    config.setup.lincheck = Some(lincheck());
    config
}

/// Every fault, the primary's crash and stop and the primary with the leading coordinator
/// among them: linearizable histories with local gets, no acknowledged write lost, equal
/// stores, a group that serves again once healed, no stale answer; failovers happen.
#[test]
fn every_fault_keeps_every_checker_happy() {
    let mut failovers = 0;
    let mut returned = 0;
    let mut failed = Vec::new();
    let mut lost = 0;
    for seed in first_seed()..first_seed() + seeds() {
        let report = run(&checked(seed));
        eprintln!("{report:?}");
        if report.state_lost() {
            lost += 1;
            continue;
        }
        if report.violation.is_some() || report.ops_returned <= 100 {
            failed.push(report);
            continue;
        }
        failovers += report.failovers;
        returned += report.ops_returned;
    }
    assert!(failed.is_empty(), "{} seeds failed: {failed:#?}", failed.len());
    // Runs whose faults took every member holding the state (docs/protocols/ukharon-kv.md):
    // rare (3 of seeds 0 to 199); it must stay so.
    let allowed = seeds() / 20 + 1;
    assert!(lost <= allowed, "{lost} seeds lost the group's state");
    assert!(failovers >= seeds() as usize / 2, "{failovers} failovers in {} seeds", seeds());
    assert!(returned > 0);
}

#[test]
fn a_seed_replays_identically() {
    let a = run(&KvRunConfig::new(5));
    let b = run(&KvRunConfig::new(5));
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!((a.views, a.answers, a.ops_returned), (b.views, b.answers, b.ops_returned));
}

/// Why a run failed a checker, if it did (a run that lost the group's state is no failure).
fn failed(report: KvReport) -> Option<String> {
    let lost = report.state_lost();
    let why = report.violation.filter(|_| !lost);
    why.map(|(checker, message)| format!("{checker}: {message}"))
}

/// The first seed below `bound` whose run `mutation` breaks, checking that the real engine
/// passes that seed.
fn caught_within(mutation: Mutation, bound: u64) -> Option<(u64, String)> {
    let broken = |seed| failed(run(&KvRunConfig { mutation, ..checked(seed) }));
    let real = |seed| run(&checked(seed)).violation.map(|(checker, m)| format!("{checker}: {m}"));
    let caught = first_caught(0..bound, broken, real).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{caught:?}");
    caught
}

#[test]
fn a_primary_that_answers_before_the_write_completes_is_caught() {
    assert!(caught_within(Mutation::AnswerBeforeComplete, 40).is_some());
}

#[test]
fn a_primary_that_answers_without_active_is_caught() {
    assert!(caught_within(Mutation::AnswerWithoutActive, 40).is_some());
}

#[test]
fn a_get_from_the_speculative_state_is_caught() {
    assert!(caught_within(Mutation::GetFromSpeculativeState, 40).is_some());
}

#[test]
fn a_new_primary_that_serves_before_its_scan_is_caught() {
    assert!(caught_within(Mutation::ServeBeforeScan, 40).is_some());
}

/// Not caught: the simulated fabric changes a connection's rights at once (a slow change is
/// charged to the node's time, but takes effect when called), so the backup's revocation ends
/// in the same poll that published its follow word, before the new primary can read it, and
/// no late write of the old primary can land in between. Catching it needs a revocation that
/// stays under way for a while in `mu-fabric-sim` (RDMA's slow permission change).
#[test]
#[ignore = "the simulated fabric has no revocation that stays under way"]
fn a_backup_that_follows_before_the_revocation_is_caught() {
    assert!(caught_within(Mutation::FollowBeforeRevoke, 40).is_some());
}
