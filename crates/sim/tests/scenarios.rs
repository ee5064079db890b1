//! Whole replicas (both planes, the real runtime) on the simulated fabric. Each test names the
//! part of the Mu paper it exercises.

mod common;

use mu_fabric::NodeId;
use mu_fabric_sim::SimConfig;
use mu_replica::{Change, Protocol};
use mu_sim::membership::{Changes, RemovalBudget};
use mu_sim::SimCluster;

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
    c.check_agreement();
    c.check_acked_applied(0);
    for pos in 1..3 {
        assert!(c.applied[pos].len() >= 19, "replica {pos} applied {}", c.applied[pos].len());
    }
}

/// §5.1, §5.2, Listing 3: the leader crashes; the detector of the others notices (the dead
/// replica's connections fail), replica 1 takes over, catches up and goes on from where the old
/// leader stopped. Nothing acknowledged is lost.
#[test]
fn t20_leader_crash_fails_over() {
    let mut c = SimCluster::new(3, 2);
    c.await_leader(5_000_000);
    for i in 0..10 {
        c.propose_anywhere(format!("before {i}").as_bytes(), 5_000_000);
    }
    let crashed_at = c.world.now_ns();
    c.crash(0);
    assert_eq!(c.await_leader(20_000_000), NodeId(1));
    let index = c.propose_anywhere(b"after", 20_000_000);
    assert_eq!(index, 10, "the new leader goes on right after the old one's last commit");
    let committed_at = c.world.now_ns();
    eprintln!("failover and first commit took {} ns (virtual)", committed_at - crashed_at);
    // Status dates the takeover: elected after the crash, ready after that, before the commit.
    let status = c.cores[1].as_ref().unwrap().status();
    let elected = status.elected_at_ns.expect("replica 1 dates its election");
    let ready = status.ready_at_ns.expect("replica 1 dates its readiness");
    assert!(crashed_at <= elected && elected <= ready && ready <= committed_at, "{status:?}");
    assert_eq!(status.leaderships, 1);
    // Its first round is not spoilt by answers it never asked for: before its requests went
    // out, the zero acknowledgement words matched its zero request word, the dead leader and
    // replica 2 counted as granted, and the first write to 2 failed (one abort, 1.5 µs more).
    assert_eq!(status.aborts, 0, "{status:?}");
    assert_eq!(status.confirmed, [NodeId(1), NodeId(2)], "it writes to itself and replica 2");
    let follower = c.cores[2].as_ref().unwrap().status();
    assert_eq!((follower.elected_at_ns, follower.ready_at_ns), (None, None), "{follower:?}");
    assert!(follower.confirmed.is_empty() && follower.leaderships == 0);
    for i in 0..10 {
        c.propose_anywhere(format!("after {i}").as_bytes(), 5_000_000);
    }
    c.run_for(200_000);
    c.check_agreement();
    c.check_acked_applied(1);
}

/// §5.1 pull-score and §4.1: a paused leader's heartbeat stops; the others elect replica 1, whose
/// permission requests revoke the old leader's write access. When the old leader resumes, its
/// writes fail, and the lowest live id leads again once the others see its heartbeat: it catches
/// up from them first. Every replica ends with the same sequence.
#[test]
fn t30_paused_leader_is_replaced_and_cannot_write() {
    let mut c = SimCluster::new(3, 3);
    c.await_leader(5_000_000);
    for i in 0..5 {
        c.propose_anywhere(format!("before {i}").as_bytes(), 5_000_000);
    }
    // Pause the leader with a proposal of its own in flight.
    c.submit(0, b"in flight at the pause").unwrap();
    c.pause(0);
    let others_elect =
        |c: &SimCluster| (1..3).all(|p| c.cores[p].as_ref().unwrap().leader() == Some(NodeId(1)));
    let end = c.world.now_ns() + 20_000_000;
    while !others_elect(&c) {
        assert!(c.world.now_ns() < end, "the others did not elect replica 1");
        c.round();
    }
    for i in 0..5 {
        let index = c.propose(1, format!("during {i}").as_bytes(), 10_000_000);
        assert!(matches!(index, Some(Ok(_))), "replica 1 commits while 0 is paused: {index:?}");
    }
    let aborts_before = c.cores[0].as_ref().unwrap().status().aborts;
    c.resume(0);
    // The old leader's proposal either committed or failed; it never forks the log.
    c.run_for(5_000_000);
    assert!(
        c.cores[0].as_ref().unwrap().status().aborts > aborts_before,
        "the resumed leader's writes were refused and it aborted"
    );
    eprintln!("the paused leader's proposal: {:?}", c.outcomes[0]);
    for i in 0..5 {
        c.propose_anywhere(format!("after {i}").as_bytes(), 20_000_000);
    }
    c.run_for(500_000);
    c.check_agreement();
    let leader = c.await_leader(1_000_000).0 as usize;
    c.check_acked_applied(leader);
}

/// §5.3: many times the log's size goes through it. The leader reads the log heads, computes
/// minHead and never overwrites an entry a live replica has not applied.
#[test]
fn t40_recycling_under_load() {
    let mut c = SimCluster::new(3, 4);
    c.await_leader(5_000_000);
    let slots = c.configs[0].slots_count;
    for i in 0..slots * 6 {
        c.propose_anywhere(format!("v{i}").as_bytes(), 5_000_000);
    }
    c.run_for(200_000);
    c.check_agreement();
    c.check_acked_applied(0);
    for pos in 0..3 {
        assert!(c.applied[pos].len() as u64 >= slots * 6 - 1, "replica {pos}");
    }
}

/// §5.3: a follower that stops applying (paused) holds the log back only while it is considered
/// alive: once the detector declares it failed, the leader recycles past it.
#[test]
fn t41_a_dead_follower_does_not_hold_the_log_forever() {
    let mut c = SimCluster::new(3, 5);
    c.await_leader(5_000_000);
    c.crash(2);
    let slots = c.configs[0].slots_count;
    for i in 0..slots * 3 {
        c.propose_anywhere(format!("v{i}").as_bytes(), 10_000_000);
    }
    c.check_agreement();
}

/// A follower cut off from the leader, on a fabric whose connections hold fewer requests than
/// their endpoint (16 here, as an RDMA send queue can be; verbs' `send_queue_depth`): the
/// leader's writes to it stay unfinished until the fabric gives up on them (its retry time),
/// so under load the 17th is refused even after the completion queue is drained. That stopped
/// the replication thread on an assertion before. Now the follower is dropped as unreachable
/// at once, the others go on, and it comes back once the link heals (here by a state transfer:
/// it is a log behind by then).
#[test]
fn t42_writes_to_a_cut_off_follower_fill_its_connection() {
    let fabric = SimConfig { connection_depth: 16, ..SimConfig::default() };
    let mut c = SimCluster::with_fabric(3, &[0, 1, 2], 42, fabric, |_| {});
    assert_eq!(c.await_leader(5_000_000), NodeId(0));
    for i in 0..10 {
        c.propose(0, format!("before {i}").as_bytes(), 5_000_000).unwrap().unwrap();
    }
    c.world.partition(NodeId(0), NodeId(2));
    for i in 0..40 {
        c.propose(0, format!("cut off {i}").as_bytes(), 5_000_000).unwrap().unwrap();
    }
    c.world.heal(NodeId(0), NodeId(2));
    let slots = c.configs[0].slots_count;
    for i in 0..slots * 3 {
        c.propose_anywhere(format!("after {i}").as_bytes(), 10_000_000);
    }
    c.run_for(20_000_000);
    c.check_agreement();
    c.check_acked_applied(2);
}

/// "Majority correct for any n": five replicas survive two crashes, including the leader's.
#[test]
fn t50_five_replicas_survive_two_crashes() {
    let mut c = SimCluster::new(5, 6);
    assert_eq!(c.await_leader(5_000_000), NodeId(0));
    for i in 0..10 {
        c.propose_anywhere(format!("a{i}").as_bytes(), 5_000_000);
    }
    c.crash(0);
    c.crash(3);
    assert_eq!(c.await_leader(20_000_000), NodeId(1));
    for i in 0..10 {
        c.propose_anywhere(format!("b{i}").as_bytes(), 10_000_000);
    }
    c.run_for(200_000);
    c.check_agreement();
    c.check_acked_applied(1);
}

/// Four replicas: the majority is three, and two crashes stop progress without breaking
/// agreement.
#[test]
fn t51_four_replicas_need_three() {
    let mut c = SimCluster::new(4, 7);
    c.await_leader(5_000_000);
    for i in 0..5 {
        c.propose_anywhere(format!("a{i}").as_bytes(), 5_000_000);
    }
    c.crash(3);
    for i in 0..5 {
        c.propose_anywhere(format!("b{i}").as_bytes(), 10_000_000);
    }
    c.crash(2);
    let outcome = c.propose(0, b"no majority", 5_000_000);
    assert!(!matches!(outcome, Some(Ok(_))), "two of four cannot commit: {outcome:?}");
    c.check_agreement();
}

/// Seven replicas: the majority is four. Three crashes, the leader among them, leave a cluster
/// that elects the lowest live id and goes on; a fourth crash stops progress without breaking
/// agreement.
#[test]
fn t52_seven_replicas_need_four() {
    let mut c = SimCluster::new(7, 52);
    c.await_leader(5_000_000);
    for i in 0..5 {
        c.propose_anywhere(format!("a{i}").as_bytes(), 5_000_000);
    }
    for pos in [6, 0, 3] {
        c.crash(pos);
        c.propose_anywhere(format!("without {pos}").as_bytes(), 20_000_000);
    }
    assert_eq!(c.await_leader(20_000_000), NodeId(1), "the lowest live id leads");
    c.run_for(500_000);
    c.check_agreement();
    c.check_acked_applied(1);
    c.crash(5);
    let outcome = c.propose(1, b"no majority", 5_000_000);
    assert!(!matches!(outcome, Some(Ok(_))), "three of seven cannot commit: {outcome:?}");
    c.check_agreement();
}

/// §7.4: a group of requests is packed into batch entries of at most `batch_requests_max`,
/// several in flight at once; requests of one entry share its index, entries commit in order,
/// and every replica applies every request in the order given. Then the leader crashes while
/// a group is in flight: what was acknowledged is kept, the rest fails with a clear error.
#[test]
fn t60_batches_and_entries_in_flight() {
    let mut c = SimCluster::with(3, 6, |config| {
        config.batch_requests_max = 4;
        config.outstanding_max = 4;
    });
    c.await_leader(5_000_000);
    c.propose_anywhere(b"first", 5_000_000); // prepare runs once; omitted from then on
    let values: Vec<Vec<u8>> = (0..50).map(|k| format!("r{k}").into_bytes()).collect();
    let refs: Vec<&[u8]> = values.iter().map(|v| &v[..]).collect();
    let started = c.world.now_ns();
    let outcomes = c.propose_many(0, &refs, 5_000_000).expect("outcomes in time");
    let took_ns = c.world.now_ns() - started;
    let indexes: Vec<u64> = outcomes.into_iter().map(|o| o.expect("committed")).collect();
    let expected: Vec<u64> = (0..50).map(|k| 1 + k / 4).collect();
    assert_eq!(indexes, expected, "four requests per entry, entries in order");
    c.run_for(200_000);
    c.check_agreement();
    for pos in 0..3 {
        // Followers too, the last entries included: the idle leader wrote its FUO.
        c.check_acked_applied(pos);
    }
    let requests: Vec<&Vec<u8>> = c.applied[2].iter().flat_map(|(_, r)| r).collect();
    assert_eq!(requests[1..], values.iter().collect::<Vec<_>>()[..], "applied in the order given");
    // One round trip per entry would take 13 round trips; with four in flight it takes fewer.
    let one_by_one = c.propose_many(0, &refs[..4], 5_000_000).unwrap();
    assert!(one_by_one.iter().all(|o| o.is_ok()));
    eprintln!("50 requests in 13 entries, 4 in flight: {took_ns} ns (virtual)");

    // The leader crashes with a group in flight.
    c.submit_many(0, &refs).unwrap();
    c.run_for(3_000);
    c.crash(0);
    assert_eq!(c.await_leader(20_000_000), NodeId(1));
    c.propose_anywhere(b"after", 20_000_000);
    c.run_for(500_000);
    c.check_agreement();
    c.check_acked_applied(1);
}

/// A follower crashes and restarts with its log lost: it comes back recovering (not counted in
/// a new leader's prepare majority, not eligible to lead), is taken back once the leader has
/// prepared without it, applies the whole log again, becomes eligible, and can then lead.
#[test]
fn t70_a_restarted_replica_rejoins_and_can_lead() {
    let mut c = SimCluster::new(3, 70);
    c.await_leader(5_000_000);
    for i in 0..10 {
        c.propose_anywhere(format!("before {i}").as_bytes(), 5_000_000);
    }
    c.crash(1);
    for i in 0..10 {
        c.propose_anywhere(format!("without 1: {i}").as_bytes(), 5_000_000);
    }
    c.restart(1);
    let status = c.cores[1].as_ref().unwrap().status();
    assert!(!status.eligible, "a restarted replica starts recovering: {status:?}");
    // The leader re-asks the replicas it lacks now and then; the next proposal prepares.
    let mut k = 0;
    while !c.cores[1].as_ref().unwrap().status().eligible {
        assert!(k < 200, "replica 1 not eligible again: {}", c.describe());
        c.propose_anywhere(format!("with 1 back: {k}").as_bytes(), 5_000_000);
        c.run_for(100_000);
        k += 1;
    }
    c.check_agreement();
    assert!(c.applied[1].len() >= 20, "applied the whole log again: {}", c.applied[1].len());
    c.crash(0);
    assert_eq!(c.await_leader(20_000_000), NodeId(1), "eligible again, lowest id: it leads");
    for i in 0..5 {
        c.propose_anywhere(format!("led by 1: {i}").as_bytes(), 20_000_000);
    }
    c.run_for(500_000);
    c.check_agreement();
    c.check_acked_applied(1);
    c.check_acked_applied(2);
}

/// State transfer: a follower restarts after the others went round the log three times, so no
/// log holds what it lacks. It asks the most advanced peer for a snapshot, restores it, is
/// brought on from there by the leader, and becomes a full member that a later leader counts on.
#[test]
fn t71_a_replica_a_log_behind_gets_a_snapshot() {
    let mut c = SimCluster::new(3, 71);
    c.await_leader(5_000_000);
    c.crash(2);
    let slots = c.configs[0].slots_count;
    for i in 0..3 * slots + 10 {
        c.propose_anywhere(format!("v{i}").as_bytes(), 5_000_000);
    }
    c.restart(2);
    let mut k = 0;
    while !c.cores[2].as_ref().unwrap().status().eligible {
        assert!(k < 400, "replica 2 not eligible again: {}", c.describe());
        c.propose_anywhere(format!("with 2 back: {k}").as_bytes(), 5_000_000);
        c.run_for(50_000);
        k += 1;
    }
    let status = c.cores[2].as_ref().unwrap().status();
    assert_eq!(status.snapshots_installed, 1, "{status:?}");
    assert_eq!(status.state_transfer_error, None);
    let served: u64 = (0..2).map(|p| c.cores[p].as_ref().unwrap().status().snapshots_served).sum();
    assert!(served >= 1);
    c.check_agreement();
    assert_eq!(c.applied[2][0].0, 0, "the snapshot holds the state from the first entry on");
    // Replica 2 now counts: with 0 gone, 1 leads with 2 as its majority.
    c.crash(0);
    assert_eq!(c.await_leader(20_000_000), NodeId(1));
    for i in 0..5 {
        c.propose_anywhere(format!("after: {i}").as_bytes(), 20_000_000);
    }
    c.run_for(500_000);
    c.check_agreement();
    c.check_acked_applied(1);
    c.check_acked_applied(2);
}

/// §5.4, adding a replica: see `common::a_replica_is_added_and_counts`, which Velos runs too.
#[test]
fn t80_a_replica_is_added_and_counts() {
    common::a_replica_is_added_and_counts(Protocol::Mu, 80);
}

/// §5.4, removing the leader: see `common::the_leader_removes_itself`, which Velos runs too.
#[test]
fn t81_the_leader_removes_itself() {
    common::the_leader_removes_itself(Protocol::Mu, 81);
}

/// §5.4 with state transfer: a replica added after the log went round three times gets a
/// snapshot, which carries the configuration, then the log from there.
#[test]
fn t82_a_replica_added_late_gets_a_snapshot() {
    let mut c = SimCluster::with_members(4, &[0, 1, 2], 82, |_| {});
    c.await_leader(5_000_000);
    c.change_anywhere(Change::Remove(NodeId(2)), 10_000_000);
    c.crash(2);
    let slots = c.configs[0].slots_count;
    for i in 0..3 * slots {
        c.propose_anywhere(format!("v{i}").as_bytes(), 5_000_000);
    }
    c.start(3);
    c.run_for(500_000);
    c.change_anywhere(Change::Add(NodeId(3)), 10_000_000);
    let mut k = 0;
    while !c.cores[3].as_ref().unwrap().status().eligible {
        assert!(k < 400, "replica 3 not eligible: {}", c.describe());
        c.propose_anywhere(format!("with 3: {k}").as_bytes(), 5_000_000);
        c.run_for(50_000);
        k += 1;
    }
    let status = c.cores[3].as_ref().unwrap().status();
    assert_eq!(status.snapshots_installed, 1, "{status:?}");
    assert_eq!(status.members, vec![NodeId(0), NodeId(1), NodeId(3)], "{status:?}");
    // Replica 3 counts: with 0 gone, 1 and 3 are the majority of three.
    c.crash(0);
    assert_eq!(c.await_leader(20_000_000), NodeId(1));
    for i in 0..5 {
        c.propose_anywhere(format!("after: {i}").as_bytes(), 20_000_000);
    }
    c.run_for(500_000);
    c.check_agreement();
    c.check_acked_applied(1);
    c.check_acked_applied(3);
}

/// Randomized: pauses, crashes, restarts with the log lost, and partitions at random (never more
/// than a minority crashed or recovering),
/// proposals throughout, alone or in groups (batched, several entries in flight, §7.4); then every fault is healed and the cluster must commit again. Checks
/// agreement and that nothing acknowledged was lost. A failure names its seed.
#[test]
fn t90_random_faults() {
    const SEEDS_DEFAULT: u64 = 40;
    let seeds: u64 =
        std::env::var("MU_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(SEEDS_DEFAULT);
    for seed in first_seed()..first_seed() + seeds {
        random_run(seed);
    }
}

/// Found by the random sweep (seed 168 then; seed 480 of the sweep as it is now reproduces it
/// with the bug put back): an idle leader that re-asked for permission every replica, the ones
/// it already held included, got back silently the logs another leader had taken and written
/// meanwhile, and overwrote a decided entry with prepare omitted. A leader now re-asks only the
/// replicas it leads without.
#[test]
fn t91_rerequests_never_silently_regain_a_log() {
    random_run(480);
}

fn first_seed() -> u64 {
    std::env::var("MU_SIM_FIRST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn random_run(seed: u64) {
    let mut rng = mu_fabric_sim::SimRng::new(seed ^ 0x5eed);
    let n = if seed % 2 == 0 { 3 } else { 5 };
    // Small batches and a short pipeline, so that groups of requests span several entries.
    let mut c = SimCluster::with(n, seed, |config| {
        config.batch_requests_max = 3;
        config.outstanding_max = 3;
    });
    let max_crashed = (n as usize - 1) / 2;
    // Crashed, or restarted and still recovering: not a full member.
    let out_count = |c: &SimCluster| {
        c.cores.iter().filter(|core| core.as_ref().is_none_or(|k| !k.status().eligible)).count()
    };
    c.await_leader(10_000_000);
    for step in 0..60 {
        match rng.below(10) {
            0 if out_count(&c) < max_crashed => {
                let pos = rng.below(n as u64) as usize;
                if c.cores[pos].is_some() {
                    c.crash(pos);
                }
            }
            9 if rng.below(2) == 0 => {
                // A crashed replica restarts, its log lost.
                let pos = rng.below(n as u64) as usize;
                if c.cores[pos].is_none() {
                    c.restart(pos);
                }
            }
            1 => c.pause_random(&mut rng),
            2 => c.resume_all(),
            3 => c.partition_random(&mut rng),
            4 => c.heal_all(),
            _ => {
                // A proposal at whoever some replica believes leads; it may fail.
                let pos = rng.below(n as u64) as usize;
                if let Some(core) = &c.cores[pos] {
                    if let Some(l) = core.leader() {
                        let l = l.0 as usize;
                        if c.cores[l].is_some() && !c.paused[l] && c.outstanding[l].is_none() {
                            // One request, or a group (batched, several entries in flight).
                            let values: Vec<Vec<u8>> = (0..1 + rng.below(2) * rng.below(12))
                                .map(|k| format!("s{seed} #{step}.{k}").into_bytes())
                                .collect();
                            let values: Vec<&[u8]> = values.iter().map(|v| &v[..]).collect();
                            let _ = c.propose_many(l, &values, 2_000_000);
                        }
                    }
                }
            }
        }
        c.run_for(rng.below(200_000));
        c.check_agreement();
    }
    // Liveness: heal everything; the live replicas must converge and commit.
    c.resume_all();
    c.heal_all();
    for i in 0..3 {
        c.propose_anywhere(format!("s{seed} final {i}").as_bytes(), 100_000_000);
    }
    settle_and_check(&mut c, &format!("s{seed} last"));
}

/// The end of a randomized run, once every fault is healed: whoever leads then has applied
/// every acknowledged value. A replica that stands again after the faults healed takes
/// leadership back if its id is lower (detection needs a few read periods to trust it again),
/// and all may agree on it while it is still catching up: a value committed through the
/// leader, which still leads afterwards, says it is settled and done.
fn settle_and_check(c: &mut SimCluster, last: &str) {
    c.run_for(1_000_000);
    c.check_agreement();
    for attempt in 0..20 {
        let leader = c.await_leader(10_000_000);
        let pos = leader.0 as usize;
        let value = format!("{last} {attempt}");
        if c.outstanding[pos].is_none()
            && matches!(c.propose(pos, value.as_bytes(), 10_000_000), Some(Ok(_)))
            && c.agreed_leader() == Some(leader)
        {
            c.check_acked_applied(pos);
            return;
        }
        c.run_for(1_000_000);
    }
    panic!("leadership never settled: {}", c.describe());
}

/// Randomized membership (§5.4): a universe of five replicas, three members at first; replicas
/// are added (started fresh, or restarted if they ran before) and removed (the leader too) at
/// random, among crashes, restarts, pauses, partitions and proposals. Never more than a minority
/// of the current members is out (crashed or recovering). Checks agreement all along; at the end
/// everything is healed and the members must commit again, with nothing acknowledged lost.
#[test]
fn t92_random_membership_changes() {
    const SEEDS_DEFAULT: u64 = 30;
    let seeds: u64 =
        std::env::var("MU_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(SEEDS_DEFAULT);
    for seed in first_seed()..first_seed() + seeds {
        random_membership_run(seed);
    }
}

/// Found by the membership sweep (seed 69): a replica that believed it led, but could not get
/// a majority, retried its permission round for ever under the configuration it started with,
/// while another leader had decided a removal in its log (its majority counted the removed,
/// stopped replica). A leader now starts every round from what its log says: its decided prefix
/// and the configuration that decides its FUO.
#[test]
fn t93_each_permission_round_uses_the_configuration_the_log_says() {
    random_membership_run(69);
}

/// Found by the membership sweep (seed 91): a replica removed while it was cut off never
/// applied its removal (the leader that decided it writes only to members), and went on
/// believing it led. A replica now also learns its removal from a peer that applied further
/// and whose configuration leaves it out (the configuration is published with the heartbeat).
#[test]
fn t94_a_replica_that_missed_its_removal_learns_it_from_a_peer() {
    random_membership_run(91);
}

/// Found by the membership sweep (seed 1120 of `MU_SIM_FIRST_SEED=1000 MU_SIM_SEEDS=400`): a
/// leader that started over under a new configuration and had nothing to propose never
/// prepared, so a recovering replica (its log lost) waited for ever to be taken back; still
/// believing a configuration whose members were gone, it named no leader, and the replicas
/// never agreed on one. An idle leader with such a replica waiting now prepares with an empty
/// entry of its own.
#[test]
fn t95_an_idle_leader_prepares_to_take_back_a_recovering_replica() {
    random_membership_run(1120);
}

/// Found by a membership sweep (seed 307494 of `MU_SIM_FIRST_SEED=300000 MU_SIM_SEEDS=20000`):
/// replica 0 was removed, by an entry that 4 applied and 1 did not; 3 had restarted and was
/// waiting to be taken back. Replica 1, the lowest live id, stood for election under the
/// configuration its log gave, {0, 1, 3, 4}; but 0 had stopped and 3, recovering, counts in no
/// majority, so its permission round never got one, while 4, which could lead {1, 3, 4},
/// followed it. A replica now does not stand while a standing peer has applied past what it
/// knows to be decided under another configuration: 4 leads, and brings 1 up to date.
#[test]
fn t99_a_replica_behind_a_decided_change_does_not_stand() {
    random_membership_run_as_found(307494, Protocol::Mu);
}

/// Found by a sweep of the Velos membership test (seed 300927 of `MU_SIM_FIRST_SEED=300000
/// MU_SIM_SEEDS=5000`): replica 1, far behind in the configuration {0, 1}, asked for a snapshot
/// of the peer whose published head was highest, 2, which had been removed and had stopped
/// (no heartbeat, no snapshots served) with its connection still up; each fetch timed out and
/// was asked of 2 again, and {0, 1} never had a majority. A donor is now a peer the failure
/// detector considers alive.
#[test]
fn t100_a_snapshot_is_asked_of_a_live_peer() {
    random_membership_run_on(300927, Protocol::Velos);
}

/// Found by the same sweep (seed 302768): two members, elected behind the leader by more than an
/// entry, had stood aside for state transfers, and the third had needed one too; then the
/// leader, which had removed itself, stopped. Each waited to apply an entry the usual way before
/// standing again (a new leader republishes the entry before its first index, which a snapshot
/// did not bring), and none led to decide one. The donor now sends that entry with the
/// snapshot, and a replica that installed one stands once no leader is elected for a while.
#[test]
fn t101_replicas_that_installed_snapshots_elect_a_leader() {
    random_membership_run_as_found(302768, Protocol::Velos);
}

/// Found by a sweep of the first fix of t101, which let a replica that installed a snapshot
/// stand at once (seed 302432): its snapshot, from a leader that had removed itself, gave it the
/// configuration without that leader, which it elected itself in, while the leader, which
/// publishes the new configuration only once its last entry is decided, went on for that
/// entry; the two competed for it for good. Such a replica now stands early only when no
/// leader is elected.
#[test]
fn t102_a_replica_that_installed_a_snapshot_lets_a_leaving_leader_finish() {
    random_membership_run_as_found(302432, Protocol::Velos);
}

fn random_membership_run(seed: u64) {
    random_membership_run_on(seed, Protocol::Mu);
}

/// The same randomized membership run on Velos (`docs/protocols/velos.md`, "Membership
/// changes"), where a replica added or restarted first rejoins through a rejoin entry and then
/// abstains for a lap: it counts as out until it stops abstaining.
#[test]
fn t98_random_membership_changes_velos() {
    const SEEDS_DEFAULT: u64 = 30;
    let seeds: u64 =
        std::env::var("MU_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(SEEDS_DEFAULT);
    for seed in first_seed()..first_seed() + seeds {
        random_membership_run_on(seed, Protocol::Velos);
    }
}

fn random_membership_run_on(seed: u64, protocol: Protocol) {
    random_membership_run_with(seed, protocol, RemovalBudget::BothConfigurations);
}

/// The run of a seed found before removals were checked in the configuration before them too
/// ([`RemovalBudget::AfterOnly`]): the path that found its bug.
fn random_membership_run_as_found(seed: u64, protocol: Protocol) {
    random_membership_run_with(seed, protocol, RemovalBudget::AfterOnly);
}

fn random_membership_run_with(seed: u64, protocol: Protocol, removals: RemovalBudget) {
    let mut rng = mu_fabric_sim::SimRng::new(seed ^ 0x3e3b);
    const N: u16 = 5;
    let mut c = SimCluster::with_members(N, &[0, 1, 2], seed, |config| {
        config.protocol = protocol;
        config.batch_requests_max = 3;
        config.outstanding_max = 2;
    });
    // The members now, the change in doubt and the fault budget (Velos: a replica abstaining
    // for a lap after its rejoin counts in no majority either, nor does a removed one in a
    // configuration that a lagging replica still has): `mu_sim::membership`.
    let mut changes = Changes::with_removal_budget(removals);
    c.await_leader(10_000_000);
    for step in 0..60 {
        let m = changes.members(&c);
        let may_crash = changes.may_lose_one(&c, &m);
        match rng.below(12) {
            0 if may_crash => {
                let pos = m[rng.below(m.len() as u64) as usize];
                if c.cores[pos].is_some() {
                    c.crash(pos);
                }
            }
            1 => {
                // A crashed member restarts, its log lost.
                let pos = m[rng.below(m.len() as u64) as usize];
                if c.cores[pos].is_none() {
                    c.restart(pos);
                }
            }
            2 => c.pause_random(&mut rng),
            3 => c.resume_all(),
            4 => c.partition_random(&mut rng),
            5 => c.heal_all(),
            6 | 7 => {
                // A change at whoever the members agree leads; it may fail.
                if changes.try_change(&mut c, &mut rng, &m).is_none() {
                    continue;
                }
            }
            _ => {
                let Some(l) = c.agreed_leader() else { continue };
                let l = l.0 as usize;
                if !c.paused[l] && c.outstanding[l].is_none() {
                    let values: Vec<Vec<u8>> = (0..1 + rng.below(2) * rng.below(6))
                        .map(|k| format!("m{seed} #{step}.{k}").into_bytes())
                        .collect();
                    let values: Vec<&[u8]> = values.iter().map(|v| &v[..]).collect();
                    let _ = c.submit_many(l, &values);
                }
            }
        }
        c.run_for(rng.below(200_000));
        c.check_agreement();
    }
    // Liveness: heal everything, restart the members that crashed; they must commit again.
    c.resume_all();
    c.heal_all();
    c.run_for(2_000_000);
    for i in 0..3 {
        c.propose_anywhere(format!("m{seed} final {i}").as_bytes(), 100_000_000);
    }
    settle_and_check(&mut c, &format!("m{seed} last"));
    if std::env::var("MU_SIM_VERBOSE").is_ok() {
        let changes = c.acked.iter().filter(|(_, v)| v.starts_with(b"membership")).count();
        let members = c.members_now();
        let hash = c.world.trace_hash();
        eprintln!(
            "seed {seed}: {changes} changes acknowledged, members {members:?}, trace {hash:016x}"
        );
    }
}

/// §5.4 with a leader several changes behind: replica 0 applies {0, 1, 2, 3, 4}, then is
/// paused while the others add 5 and 6 and remove 1, 2 and 3 (which then stop). Resumed, 0 is
/// the lowest live id, so 4, 5 and 6 follow it, but its own log still says {0, 1, 2, 3, 4},
/// where only 0 and 4 are left: no majority, for good. 0 does not stand for election while
/// it sees no live majority of its configuration, and says so with its heartbeat; the others
/// elect 4, whose update-followers brings 0's log up to date, configuration included; 0 then
/// stands again and, the lowest id, leads under the new configuration.
#[test]
fn t96_a_leader_several_changes_behind_learns_the_configuration() {
    let mut c = SimCluster::with_members(7, &[0, 1, 2, 3, 4], 96, |_| {});
    assert_eq!(c.await_leader(5_000_000), NodeId(0));
    for i in 0..5 {
        c.propose_anywhere(format!("before: {i}").as_bytes(), 5_000_000);
    }
    c.run_for(500_000);
    c.pause(0);
    assert_eq!(c.await_leader(20_000_000), NodeId(1));
    c.start(5);
    c.start(6);
    c.run_for(500_000);
    c.change_anywhere(Change::Add(NodeId(5)), 20_000_000);
    c.change_anywhere(Change::Add(NodeId(6)), 20_000_000);
    for i in 0..5 {
        c.propose_anywhere(format!("seven: {i}").as_bytes(), 20_000_000);
    }
    for removed in [3, 2, 1] {
        c.change_anywhere(Change::Remove(NodeId(removed)), 20_000_000);
    }
    for i in 0..5 {
        c.propose_anywhere(format!("without 0: {i}").as_bytes(), 20_000_000);
    }
    for removed in [1, 2, 3] {
        c.crash(removed);
    }
    c.resume(0);
    for i in 0..5 {
        c.propose_anywhere(format!("0 is back: {i}").as_bytes(), 50_000_000);
    }
    // Taking 0 back and its standing again take a few read periods.
    c.run_for(5_000_000);
    c.check_agreement();
    let leader = c.await_leader(10_000_000);
    assert_eq!(leader, NodeId(0), "{}", c.describe());
    c.check_acked_applied(0);
    let status = c.cores[0].as_ref().unwrap().status();
    assert_eq!(status.members, [0, 4, 5, 6].map(NodeId), "{status:?}");
}

/// Found by review: a replicating leader's replayer takes only its own FUO word as news
/// (`Replayer::scan_entries`), which is right only while this replica still holds its own log.
/// Here leader 0 is idle, paused and replaced by 1; resumed, 0's permission manager grants 1
/// its log, and 1 writes entries into it that say the earlier ones are decided, with no FUO word
/// yet. Then 1 crashes. 0, the lowest id, is elected again while its engine still sits idle in
/// its old leadership, and had it kept the scan off it would not apply what 1 decided until its
/// next proposal. It applies it now, as the other survivor does.
#[test]
fn t97_a_deposed_leader_applies_what_its_successor_decided() {
    for seed in 1..6u64 {
        let mut c = SimCluster::new(3, 970 + seed);
        assert_eq!(c.await_leader(5_000_000), NodeId(0));
        for i in 0..5 {
            c.propose_anywhere(format!("a{i}").as_bytes(), 5_000_000);
        }
        c.run_for(200_000);
        c.pause(0);
        let end = c.world.now_ns() + 20_000_000;
        while !(1..3).all(|p| c.cores[p].as_ref().unwrap().leader() == Some(NodeId(1))) {
            assert!(c.world.now_ns() < end, "seed {seed}: 1 not elected: {}", c.describe());
            c.round();
        }
        let mut k = 0;
        for _ in 0..5 {
            c.propose(1, format!("b{k}").as_bytes(), 10_000_000);
            k += 1;
        }
        c.resume(0);
        // 1 keeps proposing until it holds 0's log and has written more there.
        let end = c.world.now_ns() + 3_000_000;
        let mut holds = false;
        while c.world.now_ns() < end && !(holds && k > 40) {
            if c.outstanding[1].is_none() {
                let _ = c.submit(1, format!("b{k}").as_bytes());
                k += 1;
            }
            c.round();
            holds |= c.cores[0].as_ref().unwrap().status().log_holder == Some(NodeId(1));
        }
        assert!(holds, "seed {seed}: 1 never held 0's log: {}", c.describe());
        c.crash(1);
        c.run_for(20_000_000);
        c.check_agreement();
        assert_eq!(
            c.applied[0].len(),
            c.applied[2].len(),
            "seed {seed}: the survivors applied different lengths: {}",
            c.describe()
        );
    }
}

/// §5.3's premise, checked: a replica restarted with its log lost but told it is a member in
/// good standing is refused by the replicas that saw its earlier run; see
/// `common::a_replica_restarted_as_new_is_refused`, which Velos runs too.
#[test]
fn t72_a_follower_restarted_as_new_is_refused() {
    common::a_replica_restarted_as_new_is_refused(Protocol::Mu, 72, 1, false);
}

/// As `t72`, for the lowest id, which the election would pick: it must not lead.
#[test]
fn t73_the_lowest_id_restarted_as_new_is_refused() {
    common::a_replica_restarted_as_new_is_refused(Protocol::Mu, 73, 0, false);
}

/// As `t72` and `t73`, restarted at once and under load, before the others found it failed.
#[test]
fn t74_a_replica_restarted_as_new_at_once_is_refused() {
    for seed in 740..745 {
        common::a_replica_restarted_as_new_is_refused(Protocol::Mu, seed, 1, true);
        common::a_replica_restarted_as_new_is_refused(Protocol::Mu, seed, 0, true);
        common::a_replica_restarted_as_new_is_refused(Protocol::Mu, seed, 2, true);
    }
}
