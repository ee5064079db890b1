//! Whole Velos replicas (both planes, the real runtime) on the simulated fabric. Each test
//! names the part of the Velos paper it exercises (`docs/protocols/velos.md`).

mod common;

use mu_fabric::{NodeId, OpKind};
use mu_fabric_sim::{LinkDelay, SimConfig, TraceKind};
use mu_replica::Protocol;
use mu_sim::cluster::QUANTUM_NS;
use mu_sim::SimCluster;

fn velos(n: u16, seed: u64) -> SimCluster {
    SimCluster::with(n, seed, |c| c.protocol = Protocol::Velos)
}

/// Proposes `count` values at replica 0, one after another, each decided; returns the longest
/// one took (virtual ns).
fn decide_at_0(c: &mut SimCluster, tag: &str, count: usize) -> u64 {
    let mut slowest_ns = 0;
    for i in 0..count {
        let start = c.world.now_ns();
        c.propose(0, format!("{tag} {i}").as_bytes(), 5_000_000).unwrap().unwrap();
        slowest_ns = slowest_ns.max(c.world.now_ns() - start);
    }
    slowest_ns
}

/// Algorithm 5 with §5.1 and §5.4: the lowest id leads and decides entry after entry; followers
/// learn each from their own slot words, one entry behind.
#[test]
fn t10_three_replicas_decide_and_learn() {
    let mut c = velos(3, 1);
    assert_eq!(c.await_leader(5_000_000), NodeId(0));
    for i in 0..40u64 {
        let index = c.propose(0, format!("v{i}").as_bytes(), 5_000_000).unwrap().unwrap();
        assert_eq!(index, i);
    }
    c.run_for(100_000);
    c.check_agreement();
    c.check_acked_applied(0);
    for pos in 1..3 {
        assert!(c.applied[pos].len() >= 39, "replica {pos} applied {}", c.applied[pos].len());
    }
}

/// §5.1 end, §7.2: the leader crashes; replica 1 is elected, predicts the old leader's slots
/// from its own words, re-decides what was accepted and goes on. Nothing acknowledged is lost,
/// and the log wraps several times (recycling by lap, §5.2 in our layout).
#[test]
fn t20_leader_crash_fails_over() {
    let mut c = velos(3, 2);
    c.await_leader(5_000_000);
    for i in 0..100 {
        c.propose_anywhere(format!("before {i}").as_bytes(), 5_000_000);
    }
    let crashed_at = c.world.now_ns();
    c.crash(0);
    assert_eq!(c.await_leader(20_000_000), NodeId(1));
    let index = c.propose_anywhere(b"after", 20_000_000);
    assert_eq!(index, 100, "the new leader goes on right after the old one's last decision");
    eprintln!("failover and first decision took {} ns (virtual)", c.world.now_ns() - crashed_at);
    for i in 0..200 {
        c.propose_anywhere(format!("after {i}").as_bytes(), 5_000_000);
    }
    c.run_for(200_000);
    c.check_agreement();
    c.check_acked_applied(1);
    assert!(c.applied[2].len() >= 300, "replica 2 applied {}", c.applied[2].len());
}

/// §5.1: a leader goes on with a majority while an acceptor is dead. Operations to the dead
/// one complete only when the fabric gives up on them (here 1 ms, on RDMA the queue pair's
/// retries); the leader stops posting to it before they could fill its completion queue, which
/// it shares with the live acceptor. Filled, posts to the live one failed too and the leader
/// lost its majority until it connected again (seen after a restart, `t62`, seed 620).
#[test]
fn t21_a_dead_acceptor_does_not_crowd_out_the_live_one() {
    let mut c = velos(3, 21);
    assert_eq!(c.await_leader(5_000_000), NodeId(0));
    decide_at_0(&mut c, "before", 20);
    c.crash(2);
    let slowest_ns = decide_at_0(&mut c, "after", 400);
    // A decision takes a few microseconds here; connecting again after losing the live side
    // would have taken up to `RECONNECT_PERIOD_NS` (1 ms).
    assert!(slowest_ns < 200_000, "a decision took {slowest_ns} ns (virtual): {}", c.describe());
    c.run_for(1_000_000);
    c.check_agreement();
    c.check_acked_applied(1);
}

/// The other side of `t21`: an acceptor that answers, but late (its link to the leader
/// delays every trip by 300 µs), is set aside while its operations are out, and taken back
/// once they have all come back, without its connection cycled. Taken back it counts: with
/// the third replica crashed, the leader decides with it alone.
#[test]
fn t22_a_slow_acceptor_is_set_aside_and_taken_back() {
    let mut c = velos(3, 22);
    assert_eq!(c.await_leader(5_000_000), NodeId(0));
    decide_at_0(&mut c, "before", 20);
    let slow = LinkDelay { extra_ns: 300_000, jitter_ns: 0 };
    c.world.set_link_delay(NodeId(0), NodeId(2), slow);
    // Fewer entries than two logs (128): it is not excluded as too far behind meanwhile (as
    // `VelosDriver::update_exclusions` does), which would take it back by another way.
    let slowest_ns = decide_at_0(&mut c, "slow", 100);
    assert!(slowest_ns < 200_000, "a decision took {slowest_ns} ns (virtual): {}", c.describe());
    c.world.set_link_delay(NodeId(0), NodeId(2), LinkDelay::default());
    c.run_for(2_000_000);
    c.crash(1);
    decide_at_0(&mut c, "with 2 alone", 50);
    c.run_for(1_000_000);
    c.check_agreement();
    c.check_acked_applied(2);
}

/// `t22` on connections that hold 34 requests (an RDMA send queue smaller than the operations
/// the leader lets out to one peer): the slow acceptor's connection fills before it is set
/// aside. A post refused so sets it aside too, rather than taking the connection down: no side
/// of the leader's is cycled while it is slow, and taken back it counts, as in `t22`.
#[test]
fn t23_a_full_connection_sets_the_acceptor_aside_without_cycling_it() {
    let fabric =
        SimConfig { connection_depth: 34, trace_capacity: 1 << 20, ..SimConfig::default() };
    let mut c =
        SimCluster::with_fabric(3, &[0, 1, 2], 23, fabric, |c| c.protocol = Protocol::Velos);
    assert_eq!(c.await_leader(5_000_000), NodeId(0));
    decide_at_0(&mut c, "before", 20);
    let slow = LinkDelay { extra_ns: 300_000, jitter_ns: 0 };
    c.world.set_link_delay(NodeId(0), NodeId(2), slow);
    let from_ns = c.world.now_ns();
    let slowest_ns = decide_at_0(&mut c, "slow", 100);
    assert!(slowest_ns < 200_000, "a decision took {slowest_ns} ns (virtual): {}", c.describe());
    c.world.set_link_delay(NodeId(0), NodeId(2), LinkDelay::default());
    c.run_for(2_000_000);
    let cycled = c
        .world
        .recent_trace()
        .iter()
        .filter(|e| e.time_ns >= from_ns && e.kind == TraceKind::ModifyQp)
        .filter(|e| e.node == NodeId(0) && e.peer == Some(NodeId(2)))
        .count();
    assert_eq!(cycled, 0, "the leader's connection to the slow acceptor changed state");
    c.crash(1);
    decide_at_0(&mut c, "with 2 alone", 50);
    c.run_for(1_000_000);
    c.check_agreement();
    c.check_acked_applied(2);
}

/// A paused leader (SIGSTOP) is replaced; when it resumes, its CASes fail on words the new
/// leader changed, so it decides nothing of its own, and it steps down.
#[test]
fn t30_paused_leader_is_replaced() {
    let mut c = velos(3, 3);
    c.await_leader(5_000_000);
    for i in 0..10 {
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
    for i in 0..20 {
        let index = c.propose(1, format!("during {i}").as_bytes(), 10_000_000);
        assert!(matches!(index, Some(Ok(_))), "replica 1 decides while 0 is paused: {index:?}");
    }
    c.resume(0);
    // The old leader's proposal either was decided or failed; it never forks the log.
    c.run_for(5_000_000);
    eprintln!("the paused leader's proposal: {:?}", c.outcomes[0]);
    for i in 0..10 {
        c.propose_anywhere(format!("after {i}").as_bytes(), 20_000_000);
    }
    c.run_for(500_000);
    c.check_agreement();
    let leader = c.await_leader(1_000_000).0 as usize;
    c.check_acked_applied(leader);
}

/// Five replicas survive two crashes (a majority of three decides).
#[test]
fn t50_five_replicas_survive_two_crashes() {
    let mut c = velos(5, 4);
    c.await_leader(5_000_000);
    for i in 0..10 {
        c.propose_anywhere(format!("a{i}").as_bytes(), 5_000_000);
    }
    c.crash(0);
    c.crash(3);
    assert_eq!(c.await_leader(30_000_000), NodeId(1));
    for i in 0..10 {
        c.propose_anywhere(format!("b{i}").as_bytes(), 20_000_000);
    }
    c.run_for(200_000);
    c.check_agreement();
    c.check_acked_applied(1);
}

/// Membership changes (the Mu paper's §5.4, as Velos runs them: `docs/protocols/velos.md`,
/// "Membership changes"): see `common::a_replica_is_added_and_counts`, which Mu runs too.
#[test]
fn t60_a_replica_is_added_and_counts() {
    common::a_replica_is_added_and_counts(Protocol::Velos, 60);
}

/// Removing the leader: see `common::the_leader_removes_itself`, which Mu runs too.
#[test]
fn t61_the_leader_removes_itself() {
    common::the_leader_removes_itself(Protocol::Velos, 61);
}

/// A replica restarted with its memory lost but told it is a member in good standing: refused;
/// see `common::a_replica_restarted_as_new_is_refused`, which Mu runs too.
#[test]
fn t62_a_replica_restarted_as_new_is_refused() {
    common::a_replica_restarted_as_new_is_refused(Protocol::Velos, 62, 1, false);
    common::a_replica_restarted_as_new_is_refused(Protocol::Velos, 63, 0, false);
    // Restarted at once and under load, before the others found it failed.
    for seed in 620..625 {
        for restarted in 0..3 {
            common::a_replica_restarted_as_new_is_refused(Protocol::Velos, seed, restarted, true);
        }
    }
}

/// A replica restarted without its memory (`mu_velos::recovery`, not in the paper): it lets
/// no one in until the leader decided a rejoin entry for it, catches up meanwhile (here by
/// state transfer: the log went round while it was down), and abstains below one lap past
/// that entry. No request comes after the restart: the leader decides empty
/// entries while a peer abstains, so the log passes its abstaining lap anyway. Then it is an
/// acceptor again: with the leader crashed, it and the third replica decide.
#[test]
fn t70_a_restarted_replica_becomes_an_acceptor_again() {
    let mut c = velos(3, 6);
    assert_eq!(c.await_leader(5_000_000), NodeId(0));
    for i in 0..30 {
        c.propose_anywhere(format!("a{i}").as_bytes(), 5_000_000);
    }
    c.crash(2);
    for i in 0..100 {
        c.propose_anywhere(format!("b{i}").as_bytes(), 5_000_000);
    }
    c.restart(2);
    let end = c.world.now_ns() + 20_000_000;
    while c.cores[2].as_ref().unwrap().replication.velos().unwrap().recovering() {
        assert!(c.world.now_ns() < end, "replica 2 did not recover: {}", c.describe());
        c.round();
    }
    assert!(c.cores[2].as_ref().unwrap().status().recovering, "abstaining after its reads");
    let end = c.world.now_ns() + 50_000_000;
    while c.cores[2].as_ref().unwrap().status().recovering {
        assert!(c.world.now_ns() < end, "replica 2 still abstains: {}", c.describe());
        c.round();
    }
    let applied_before = c.applied[0].len();
    assert!(applied_before > 130 + 64, "the log went a lap on: {applied_before}");
    c.crash(0);
    assert_eq!(c.await_leader(30_000_000), NodeId(1));
    for i in 0..20 {
        c.propose_anywhere(format!("d{i}").as_bytes(), 20_000_000);
    }
    c.run_for(1_000_000);
    c.check_agreement();
    c.check_acked_applied(1);
}

/// Laps are counted modulo 2048 in the slot words (`mu_velos::word`): a leader paused while the
/// others go round the log more than 1,024 times would read the words they wrote as older than
/// its own index, and a compare-and-swap on such a word would take it back a lap and erase what
/// it holds. Replica 0, the lowest id, considers itself alive throughout and leads again as
/// soon as it resumes: it must first learn how far the others went (`VelosDriver`'s resync
/// after a stall), find itself a whole log behind and catch up by state transfer.
#[test]
fn t80_a_leader_paused_for_over_1024_laps_does_not_fork_the_log() {
    let mut c = small_log(7);
    c.submit(0, b"in flight at the pause").unwrap();
    c.pause(0);
    decide_laps(&mut c, 1500 * SMALL_LOG_SLOTS, |c, end| {
        let leader = c.await_leader(end - c.world.now_ns()).0 as usize;
        assert_ne!(leader, 0, "replica 0 is paused");
        leader
    });
    c.resume(0);
    c.run_for(5_000_000);
    for i in 0..20 {
        c.propose_anywhere(format!("after {i}").as_bytes(), 50_000_000);
    }
    settle_and_check(&mut c);
}

/// Slots of the log in the lap tests: 1,500 laps are 12,000 entries.
const SMALL_LOG_SLOTS: u64 = 8;

/// Three Velos replicas with a log of [`SMALL_LOG_SLOTS`] slots, replica 0 leading, 10
/// entries decided.
fn small_log(seed: u64) -> SimCluster {
    let mut c = SimCluster::with(3, seed, |c| {
        c.protocol = Protocol::Velos;
        c.slots_count = SMALL_LOG_SLOTS;
        c.prepare_ahead = 4;
        c.outstanding_max = 4;
    });
    assert_eq!(c.await_leader(5_000_000), NodeId(0));
    for i in 0..10 {
        c.propose_anywhere(format!("before {i}").as_bytes(), 5_000_000);
    }
    c
}

/// Runs a millisecond, then checks agreement and that the leader applied what it acknowledged.
fn settle_and_check(c: &mut SimCluster) {
    c.run_for(1_000_000);
    c.check_agreement();
    let leader = c.await_leader(1_000_000).0 as usize;
    c.check_acked_applied(leader);
}

/// Decides `count` entries, one at a time, at the replica `leader` names.
fn decide_laps(c: &mut SimCluster, count: u64, leader: impl Fn(&mut SimCluster, u64) -> usize) {
    for i in 0..count {
        let value = format!("d{i}").into_bytes();
        let end = c.world.now_ns() + 20_000_000;
        loop {
            let pos = leader(c, end);
            if let Some(Ok(_)) = c.propose(pos, &value, 10_000_000) {
                break;
            }
            assert!(c.world.now_ns() < end, "no progress: {}", c.describe());
        }
    }
}

/// The other side of laps modulo 2048: an acceptor cut off while the others went round the log
/// more than 1,024 times holds words that read as newer than the leader's index. It catches
/// up by state transfer, and the cluster goes on deciding, with it as an acceptor again.
#[test]
fn t81_an_acceptor_cut_off_for_over_1024_laps_catches_up() {
    cut_off_for_1500_laps(2, 8);
}

/// The same with the lowest id cut off: it comes back elected by all (it never saw itself
/// fail, and it looks alive again), but a whole log behind it cannot lead; it stops standing
/// for election, so that another leads while it catches up.
#[test]
fn t82_the_lowest_id_cut_off_for_over_1024_laps_lets_another_lead() {
    cut_off_for_1500_laps(0, 9);
}

fn cut_off_for_1500_laps(cut: usize, seed: u64) {
    let mut c = small_log(seed);
    let others: Vec<usize> = (0..3).filter(|&p| p != cut).collect();
    for &p in &others {
        c.world.partition(NodeId(cut as u16), NodeId(p as u16));
    }
    let leader = others[0];
    let end = c.world.now_ns() + 20_000_000;
    while others
        .iter()
        .any(|&p| c.cores[p].as_ref().unwrap().leader() != Some(NodeId(leader as u16)))
    {
        assert!(c.world.now_ns() < end, "the others elect {leader}: {}", c.describe());
        c.round();
    }
    decide_laps(&mut c, 1500 * SMALL_LOG_SLOTS, |_, _| leader);
    for &p in &others {
        c.world.heal(NodeId(cut as u16), NodeId(p as u16));
    }
    let end = c.world.now_ns() + 100_000_000;
    while c.applied[cut].len() < c.applied[leader].len() {
        assert!(c.world.now_ns() < end, "replica {cut} did not catch up: {}", c.describe());
        c.round();
    }
    for i in 0..20 {
        c.propose_anywhere(format!("after {i}").as_bytes(), 50_000_000);
    }
    // It took new words (`mu_velos::recovery`): it rejoins once a rejoin entry is decided, and
    // abstains until the log passes one lap after it.
    let end = c.world.now_ns() + 100_000_000;
    while c.cores[cut].as_ref().unwrap().status().recovering {
        assert!(c.world.now_ns() < end, "replica {cut} did not rejoin: {}", c.describe());
        c.round();
    }
    // The replica that was cut off is an acceptor again: with another crashed, it decides
    // with the one left.
    c.crash(others[1]);
    for i in 0..20 {
        c.propose_anywhere(format!("without {}: {i}", others[1]).as_bytes(), 50_000_000);
    }
    settle_and_check(&mut c);
}

/// Laps modulo 2048 once more, with a leader that keeps running and only its network is slow.
/// From just before replica 0, leading, posts a proposal of its own, every operation on its
/// links to the others takes `DELAY_NS` longer each way (both directions, every connection:
/// its compare-and-swaps and value writes, its reads of the others' heartbeats and heads, and
/// theirs of its own). The others read its heartbeat late, find it failed, elect replica 1 and
/// decide 1,500 laps of an 8-slot log, all within the delay. The delay lifts just before the
/// first of replica 0's delayed operations lands: its compare-and-swaps then fail on words
/// written 1,500 laps after its index, which read, modulo 2048, as 548 laps older. Taken as
/// the words of the index's previous lap and prepared back into its lap, with its own acceptor
/// a majority, they would let it decide its proposal at an index decided long ago.
///
/// What stops it here: replica 0's own reads of the others are as late as theirs of it, so it
/// finds them failed as soon as they find it failed and, without a live majority, stops
/// leading long before its operations land; when they do, it is a follower, and its next reads
/// show it a whole log behind (it takes new words and catches up). Whatever the reason, no two
/// replicas may apply different entries at an index.
#[test]
fn t83_a_leader_whose_operations_are_delayed_for_1500_laps() {
    // Longer than the others take to elect replica 1 and go round the log 1,500 times (about
    // 35 ms of virtual time here).
    const DELAY_NS: u64 = 60_000_000;
    let mut c = small_log(10);
    let slow = LinkDelay { extra_ns: DELAY_NS, jitter_ns: 0 };
    let delayed_at = c.world.now_ns();
    for p in 1..3 {
        c.world.set_link_delay(NodeId(0), NodeId(p), slow);
    }
    c.submit(0, b"in flight while delayed").unwrap();
    c.round();
    let delayed_cas = |c: &SimCluster| {
        c.world.in_flight(NodeId(0)).iter().filter(|op| op.kind == OpKind::CompareSwap).count()
    };
    assert_eq!(delayed_cas(&c), 2, "replica 0 sent its proposal to both others");
    let end = c.world.now_ns() + 20_000_000;
    while (1..3).any(|p| c.cores[p].as_ref().unwrap().leader() != Some(NodeId(1))) {
        assert!(c.world.now_ns() < end, "the others elect 1: {}", c.describe());
        c.round();
    }
    decide_laps(&mut c, 1500 * SMALL_LOG_SLOTS, |_, _| 1);
    assert!(c.world.now_ns() < delayed_at + DELAY_NS, "the others went round within the delay");
    // Nothing replica 0 posted since the delay was set lands before `delayed_at + DELAY_NS`
    // (one delayed trip after its posting).
    while c.world.now_ns() + QUANTUM_NS < delayed_at + DELAY_NS {
        c.round();
    }
    assert_eq!(delayed_cas(&c), 2, "replica 0's proposal has not landed yet");
    for p in 1..3 {
        c.world.set_link_delay(NodeId(0), NodeId(p), LinkDelay::default());
    }
    // Checked as it goes: a replica that applied a second value at an index would later have
    // its applied sequence replaced by a state transfer, hiding it.
    let end = c.world.now_ns() + 5_000_000;
    while c.world.now_ns() < end {
        for _ in 0..40 {
            c.round();
        }
        c.check_agreement();
    }
    eprintln!("replica 0's delayed proposal: {:?}", c.outcomes[0]);
    for i in 0..20 {
        c.propose_anywhere(format!("after {i}").as_bytes(), 50_000_000);
    }
    settle_and_check(&mut c);
}
