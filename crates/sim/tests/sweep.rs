//! The seed runner behind `mu sim`: determinism, a short sweep with every checker on, and proof
//! that the simulator finds bugs (deliberately broken engines are caught).

use mu_replication::mutation::Mutation;
use mu_sim::{run, Faults, Protocol, RunConfig};

/// `mu sim --seed S` replays a run exactly: two runs of one seed produce the same trace, line
/// for line, and the same hash of every simulator event, under either engine and with
/// membership changes. (Velos's runs once differed in the hash alone: its rejoin requests were
/// made from a nonce drawn from the operating system, now from the seed.)
#[test]
fn t10_one_seed_twice_gives_identical_traces() {
    let velos = |seed| RunConfig { protocol: Protocol::Velos, ..RunConfig::new(seed) };
    let membership = |seed| RunConfig {
        faults: Faults::parse("all,membership").unwrap(),
        ..RunConfig::new(seed)
    };
    let configs: [&dyn Fn(u64) -> RunConfig; 3] = [&RunConfig::new, &velos, &membership];
    for (config, seed) in configs.into_iter().flat_map(|c| [(c, 3), (c, 8)]) {
        let a = run(&config(seed));
        let b = run(&config(seed));
        assert_eq!(a.violation, None, "seed {seed}: {:?}", a.trace);
        assert_eq!(a.trace, b.trace, "seed {seed}");
        assert_eq!(a.trace_hash, b.trace_hash, "seed {seed}");
        assert_eq!(a.history, b.history, "seed {seed}");
        assert!(a.ops_returned > 100, "seed {seed} did work: {a:?}");
        let other = run(&config(seed + 2));
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

/// Seeds that once broke a checker, each run again (the fix is named where it was made).
const ONCE_FAILED: &[u64] = &[
    // Liveness: replica 0 crashed before the others ever read it, so their sides it reads
    // through stayed bound to its first incarnation; restarted, it judged the leader failed for
    // good (`BackgroundDriver::read_heartbeats`).
    5444,
    // Liveness (five replicas): a replica whose log had a hole below its FUO was elected as the
    // lowest id and could never apply its own log (`ReplicationDriver::stand_aside_until_applied`).
    845,
    // Liveness (five replicas): a replica crashed, and a peer bound its side the crashed one
    // reads through again while it was down, to its dead incarnation; restarted, it could not
    // read that peer, the leader, and judged it failed for good while everyone else followed it
    // (`BackgroundDriver::on_completion`: a heartbeat from a later boot rebinds the side).
    21361,
    // Validity (three replicas, two replicas each believing it led): a request answered "not
    // leader" was decided by the other leader. The runtime had judged it never written from
    // the engine's phase at the end of a poll, and the proposal had been written and aborted
    // within that poll (`Action::Exposed` now says when a proposal is first written).
    100868,
];

/// Seeds that once failed with a cluster size other than the seed's own (`RunConfig::new`).
const ONCE_FAILED_SIZED: &[(u64, u16)] = &[
    // Liveness (four replicas): the seed-21361 case the boot id misses. Replica 0 bound its
    // side replica 2 reads through before it had read any heartbeat of 2, and 2 crashed and
    // restarted before that first read, so the first boot read looked like the bound one; 2
    // could never read replica 0, the leader (`BackgroundDriver::on_completion`: a peer that
    // says for many reads that it does not hear us gets our side bound again).
    (50301, 4),
];

#[test]
fn t25_seeds_that_once_failed() {
    for &seed in ONCE_FAILED {
        let report = run(&RunConfig::new(seed));
        assert_eq!(report.violation, None, "seed {seed}");
    }
    for &(seed, replicas) in ONCE_FAILED_SIZED {
        let mut config = RunConfig::new(seed);
        config.replicas = replicas;
        let report = run(&config);
        assert_eq!(report.violation, None, "seed {seed}, {replicas} replicas");
    }
}

/// Each broken engine is caught within a bounded number of seeds, by the checker its bug
/// breaks: the simulator finds bugs, it does not only pass. (Skipping prepare's adoption only
/// matters where a leader change leaves a value accepted at a minority: the first seed that
/// catches it was 7, then 60 once the fence before re-asking made that rarer, and 6 since
/// update-followers copies holes again, t65.)
#[test]
fn t30_broken_engines_are_caught() {
    for (mutation, seeds_max) in [(Mutation::SkipRevoke, 5), (Mutation::SkipPrepareAdopt, 100)] {
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

/// Client histories of simulated runs are linearizable by porcupine's check, and the checker
/// is not a rubber stamp: the same history with one read changed to a value nobody wrote is
/// rejected.
#[test]
fn t50_histories_are_linearizable_and_a_corrupted_one_is_not() {
    let lincheck = lincheck();
    let dir = std::env::temp_dir().join(format!("mu-sim-t50-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for seed in 0..6 {
        let mut config = RunConfig::new(seed);
        config.lincheck = Some(lincheck.clone());
        config.history_dir = Some(dir.clone());
        let report = run(&config);
        assert_eq!(report.violation, None, "seed {seed}");
        assert!(dir.join(format!("seed-{seed}.json")).is_file(), "history kept");
        if seed > 0 {
            continue;
        }
        let mut history = report.history.clone();
        let reads: Vec<usize> = (0..history.operations.len())
            .filter(|&i| {
                let o = &history.operations[i];
                matches!(o.op, mu_kv::Op::Get { .. })
                    && matches!(o.outcome, mu_sim::history::Outcome::Returned { .. })
            })
            .collect();
        assert!(reads.len() > 10, "enough reads to corrupt one");
        let victim = reads[reads.len() / 2];
        if let mu_sim::history::Outcome::Returned { reply, .. } =
            &mut history.operations[victim].outcome
        {
            *reply = mu_kv::Reply::Value(Some(b"never-written".to_vec()));
        }
        let path = dir.join("corrupted.json");
        std::fs::write(&path, history.to_json().unwrap()).unwrap();
        let verdict = mu_sim::check::linearizability::check(&lincheck, &path);
        let err = verdict.expect_err("a read of a value nobody wrote must be rejected");
        assert!(err.contains("not linearizable"), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Found by the sweep (seed 1685): a follower that installed a snapshot counts its head as
/// decided, but its log never received the entries the snapshot covered. A new leader caught
/// up from it, copied such a slot (a hole) into its own log, and its replayer waited on it for
/// ever. Catch-up now stops at the first slot that is not a complete entry, and the leader
/// steps down to get a state transfer (first it prepared the rest again, which seed 5302, t63,
/// showed unsafe).
#[test]
fn t60_catch_up_stops_at_a_hole_a_snapshot_left() {
    let report = run(&RunConfig::new(1685));
    assert_eq!(report.violation, None, "{}", report.trace.join("\n"));
}

/// Found by the sweep (seed 2313): a leader that had installed a snapshot updated a follower
/// from its own log, holes included; the follower's replayer blocked on the hole, and with the
/// follower in a bare majority the log filled up behind it, one slot short of the "a whole log
/// behind" rule that starts a state transfer. A replayer blocked on a decided entry for longer
/// than the transfer timeout now fetches a snapshot from any peer further on. (For a while
/// update-followers also stopped copying holes, which t65 showed unsafe: it copies them again.)
#[test]
fn t61_a_replayer_blocked_on_a_skipped_entry_fetches_a_snapshot() {
    let report = run(&RunConfig::new(2313));
    assert_eq!(report.violation, None, "{}", report.trace.join("\n"));
}

/// Found by the sweep (seed 6985), the one safety bug it found: after an abort, a leader asked a
/// slow follower for permission again while its accept to that follower was still on the wire.
/// The follower had meanwhile served another leader, which decided the entry at that index; it
/// granted the old leader again, the late write landed over the decided entry, and the old
/// leader caught up from that follower and applied its own never-chosen value: agreement broken.
/// A replica we may still have writes on the way to is now asked only after a fence.
#[test]
fn t62_no_write_of_an_aborted_attempt_lands_after_a_new_grant() {
    let report = run(&RunConfig::new(6985));
    assert_eq!(report.violation, None, "{}", report.trace.join("\n"));
}

/// Found by the sweep (seed 5302), a safety bug of the catch-up rule t60 brought in: a new
/// leader a log behind stopped its catch-up at a slot its source had already reused for the
/// next lap, then prepared at that decided index; the only surviving copy was the recycled
/// slot, so prepare found "nothing" and decided another value. Catch-up that meets a slot it
/// cannot copy now makes the leader step down and get a state transfer.
#[test]
fn t63_a_leader_never_prepares_below_a_confirmed_decided_prefix() {
    let report = run(&RunConfig::new(5302));
    assert_eq!(report.violation, None, "{}", report.trace.join("\n"));
}

/// Found by the sweep (seed 624) once t63's fix made leaders step down for a state transfer
/// more often: a replica that stepped down that way was marked not eligible, and the same flag
/// made its grants say "recovering", so a leader did not count it although its log was intact;
/// with the other follower really recovering, no leader could get a majority. "May lead" and
/// "counts in a majority" are now two flags (`Shared::eligible`, `Shared::recovering`).
#[test]
fn t64_a_replica_waiting_for_a_state_transfer_still_counts_in_majorities() {
    let report = run(&RunConfig::new(624));
    assert_eq!(report.violation, None, "{}", report.trace.join("\n"));
}

/// Found by a sweep of seven-replica clusters (seed 180023, 120 steps), an agreement violation:
/// a leader that had installed a snapshot brought a follower up to date, skipping the slot of
/// an entry its own log lacked, and wrote the follower's FUO past it. The follower, an earlier
/// leader, held there a value it had accepted itself that was never decided, and applied it.
/// Update-followers now copies the hole too (the follower's replayer then waits for a state
/// transfer), and a replica that installs a snapshot empties the slots the snapshot skipped,
/// so that no log holds an undecided entry below its decided prefix for a leader to copy
/// (`ReplicationDriver::forget_skipped_slots`).
#[test]
fn t65_no_undecided_entry_is_left_below_the_fuo_a_leader_writes() {
    let mut config = RunConfig::new(180023);
    config.replicas = 7;
    config.steps = 120;
    let report = run(&config);
    assert_eq!(report.violation, None, "{}", report.trace.join("\n"));
}

/// Found by the decided-prefix checker in a sweep of seven-replica clusters without the second
/// half of t65's fix (seed 200911, 120 steps): replica 3 installed a snapshot at index 345, and
/// its log still held at index 337 a batch it had accepted that was never decided, below a
/// decided prefix that catch-up and update-followers copy from. Installing a snapshot now
/// empties the slots it skipped (`ReplicationDriver::forget_skipped_slots`).
#[test]
fn t66_a_snapshot_leaves_no_undecided_entry_below_the_head() {
    let mut config = RunConfig::new(200911);
    config.replicas = 7;
    config.steps = 120;
    let report = run(&config);
    assert_eq!(report.violation, None, "{}", report.trace.join("\n"));
}

/// Found by the first membership sweep of Velos (`mu sim --protocol velos --faults
/// all,membership`, seed 10632): a replica gave up a state transfer that had read the donor's
/// snapshot header and was reading its body (timed out), and began another; the late body read
/// of the first then completed and was taken for one of the second's, which had no header yet:
/// a panic of the runtime. A fetch's reads now carry its sequence number, and those of a fetch
/// given up are ignored.
#[test]
fn t67_a_late_read_of_a_state_transfer_given_up_is_ignored() {
    membership_run_passes(Protocol::Velos, 10632, 3, 60);
}

/// `mu sim --protocol P --seed S --replicas R --steps N --faults all,membership` passes, and
/// changed the membership.
fn membership_run_passes(protocol: Protocol, seed: u64, replicas: u16, steps: u32) {
    let mut config = RunConfig::new(seed);
    config.protocol = protocol;
    config.replicas = replicas;
    config.steps = steps;
    config.faults = Faults::parse("all,membership").unwrap();
    let report = run(&config);
    assert_eq!(report.violation, None, "{}", report.trace.join("\n"));
    assert!(report.membership_changes > 0, "the run changed the membership");
}

/// Found by a membership sweep of Velos (`mu sim --protocol velos --faults all,membership`,
/// seed 22664): replica 1 led and decided the removal of 0; 0, elected under the old
/// configuration by the replica that had not applied it yet, decided the removal again and, as
/// a removed leader does, went on to decide one entry more before stepping down, while 1, which
/// elects by the new configuration, competed with it for that index: neither decided it, for
/// good. A removed leader now steps down at once when a live peer has applied its removal.
#[test]
fn t68_a_removed_leader_steps_down_once_a_peer_applied_its_removal() {
    membership_run_passes(Protocol::Velos, 22664, 3, 60);
}

/// Found by a membership sweep of Velos with 7 replicas (`mu sim --protocol velos --replicas 7
/// --steps 120 --faults all,membership`, seed 30745), a flaw of the simulator's fault budget:
/// the leader decided the removal of 6 and crashed before any live replica had applied it. The
/// change had stopped counting as in doubt once the leader applied it, so the budget held only
/// in the configuration of 7 the live replicas still had, and allowed a third crash: the
/// decided configuration of 6 was left with 3 members out, no majority, for good. A decided
/// change now keeps the budget in the configuration it makes until every live member has
/// applied it (`mu_sim::membership`).
#[test]
fn t69_a_decided_change_holds_the_budget_until_every_live_member_applied_it() {
    membership_run_passes(Protocol::Velos, 30745, 7, 120);
}

/// Found by a membership sweep of Mu with 7 replicas (`mu sim --replicas 7 --steps 120 --faults
/// all,membership`, seed 32684), another flaw of the fault budget: with 0 crashed, leader 4 of
/// {0, 2, 4, 6} was asked to remove itself, which the budget allowed because {0, 2, 6} keeps a
/// majority. Replica 2 took over just as 4 decided the removal, so 4's word that it was decided
/// never reached 2 and 6, and 4 stopped (§5.4: a removed replica stops). 2 and 6, still in
/// {0, 2, 4, 6}, had 2 of 4 out, for good. A removal is now asked for only if the configuration
/// before it keeps a majority with the removed member out too (`RemovalBudget`), and a removed
/// Mu replica counts as out wherever a configuration still has it.
#[test]
fn t70_a_removal_keeps_a_majority_of_the_configuration_before_it() {
    membership_run_passes(Protocol::Mu, 32684, 7, 120);
}

/// Found by a membership sweep of Velos with 7 replicas (`mu sim --protocol velos --replicas 7
/// --steps 120 --faults all,membership`, seed 34031), a flaw of the first form of t69's rule,
/// which kept the decided changes and applied them in turn to the current members: 3 was
/// removed and added again, the removal never showed as applied everywhere (3 was a member
/// again), and applied to the members it hid the configuration that the leader's own removal
/// made, {1, …, 6}, from the budget. With 1 crashed and 3 waiting for its rejoin entry, 4 was
/// allowed to crash: {1, …, 6} was left with 3 of 6 out, no majority to decide the rejoin
/// entries, for good. Decided configurations are now kept as they were seen, until every live
/// member that is in has applied as far.
#[test]
fn t71_a_change_undone_later_hides_no_configuration_from_the_budget() {
    membership_run_passes(Protocol::Velos, 34031, 7, 120);
}

/// Found by a membership sweep of Mu with 5 replicas and 8 clients (`mu sim --replicas 5
/// --steps 400 --clients 8 --faults all,membership`, seed 60092): leader 1 wrote a batch at 555
/// and lost its log to leader 2, which decided that batch there and went on to 633; 1 kept
/// asking for permissions all along, its log filled by 2, and once it led again it proposed the
/// batch anew at 633, more than a lap (64 slots) later, where its own log no longer showed
/// what 555 held: a request applied twice. The leader now steps down and answers such a
/// proposal as of unknown outcome (`AbortReason::OutcomeUnknown`; `leader.rs: t75`).
#[test]
fn t72_a_proposal_whose_index_left_the_log_is_not_proposed_again() {
    let mut config = RunConfig::new(60092);
    config.replicas = 5;
    config.steps = 400;
    config.clients = 8;
    config.faults = Faults::parse("all,membership").unwrap();
    let report = run(&config);
    assert_eq!(report.violation, None, "{}", report.trace.join("\n"));
}

/// Found by a sweep with bounded connections (`mu sim --replicas 3 --steps 400 --clients 8
/// --faults all,membership --connection-depth 16`, seeds 170032 and others): a new leader whose
/// followers were both 19 entries behind posted all their slots at once, more than a
/// connection held; both were dropped and it aborted for lack of a majority, for ever. Update
/// followers now goes in chunks (`mu_replication::UPDATE_CHUNK_SLOTS`; `leader.rs: t62`).
/// Seed 170094 broke liveness the same way with connections of 40, as the sweep without the
/// chunks showed.
#[test]
fn t73_a_follower_far_behind_is_brought_up_to_date_through_a_small_connection() {
    for (seed, depth) in [(170032, 64), (170058, 64), (170094, 40)] {
        let mut config = RunConfig::new(seed);
        config.replicas = 3;
        config.steps = 400;
        config.clients = 8;
        config.faults = Faults::parse("all,membership").unwrap();
        config.connection_depth = Some(depth);
        let report = run(&config);
        assert_eq!(report.violation, None, "seed {seed}: {}", report.trace.join("\n"));
    }
}

/// A history that cannot be written for lincheck (here: into a directory nobody may create)
/// fails the run under a name of its own, not as a linearizability violation.
#[test]
fn t12_a_history_that_cannot_be_written_is_not_called_a_violation() {
    let config = RunConfig {
        history_dir: Some(format!("/proc/mu-sim-test-{}", std::process::id()).into()),
        ..RunConfig::new(3)
    };
    let report = run(&config);
    let v = report.violation.expect("the history could not be written");
    assert_eq!(v.checker, "history-io", "{v:?}");
    assert!(v.message.contains("was not checked"), "{v:?}");
}
