//! Scenarios both engines run, with the waits that differ between them.

use mu_fabric::NodeId;
use mu_replica::{Change, ProposeError, Protocol};
use mu_sim::SimCluster;

/// Adding a replica (the Mu paper's §5.4; for Velos, `docs/protocols/velos.md`, "Membership
/// changes"): a cluster created with replicas 0–2 adds replica 3, which starts outside the
/// configuration and is brought up to date by the log. With four members a majority is three,
/// so once the leader crashes the others go on only with replica 3 counted: it must be a full
/// member. Removing the dead replica brings the majority back to two of three.
///
/// Mu's newcomer is not eligible to lead until it is a member and caught up. Velos's starts like
/// a restarted replica (its rejoin entry first), and abstains below one lap past that entry.
pub fn a_replica_is_added_and_counts(protocol: Protocol, seed: u64) {
    let mut c = SimCluster::with_members(4, &[0, 1, 2], seed, |c| c.protocol = protocol);
    assert_eq!(c.await_leader(5_000_000), NodeId(0));
    for i in 0..10 {
        c.propose_anywhere(format!("three: {i}").as_bytes(), 5_000_000);
    }
    c.start(3);
    match protocol {
        // Up and connected before it is added (an ack lost with a connection not up yet would
        // leave it out until the leader asks again, a permission timeout later).
        Protocol::Mu => c.run_for(500_000),
        Protocol::Velos => {
            let end = c.world.now_ns() + 20_000_000;
            while c.cores[3].as_ref().unwrap().replication.velos().unwrap().recovering() {
                assert!(c.world.now_ns() < end, "replica 3 did not rejoin: {}", c.describe());
                c.round();
            }
        }
    }
    let status = c.cores[3].as_ref().unwrap().status();
    assert_eq!(status.members, vec![NodeId(0), NodeId(1), NodeId(2)]);
    if protocol == Protocol::Mu {
        assert!(!status.eligible);
    }
    let added = c.change_anywhere(Change::Add(NodeId(3)), 10_000_000);
    for i in 0..10 {
        c.propose_anywhere(format!("four: {i}").as_bytes(), 5_000_000);
    }
    if protocol == Protocol::Velos {
        // It abstains below one lap past its rejoin entry; the log passes that first.
        let end = c.world.now_ns() + 50_000_000;
        while c.cores[3].as_ref().unwrap().status().recovering {
            assert!(c.world.now_ns() < end, "replica 3 still abstains: {}", c.describe());
            c.round();
        }
    }
    c.run_for(500_000);
    c.check_agreement();
    for pos in 0..4 {
        let status = c.cores[pos].as_ref().unwrap().status();
        assert_eq!(status.members.len(), 4, "replica {pos}: {}", c.describe());
    }
    assert!(c.applied[3].len() as u64 > added, "replica 3 applied past its addition");
    assert_eq!(c.applied[3][0].0, 0, "replica 3 applied the log from the start");
    if protocol == Protocol::Mu {
        assert!(c.cores[3].as_ref().unwrap().status().eligible, "{}", c.describe());
    }
    // Leader 0 crashes: 1, 2 and 3 are the three of four that must agree.
    c.crash(0);
    assert_eq!(c.await_leader(20_000_000), NodeId(1));
    for i in 0..5 {
        c.propose_anywhere(format!("without 0: {i}").as_bytes(), 20_000_000);
    }
    // One more crash would stop a cluster of four; remove the dead replica first.
    c.change_anywhere(Change::Remove(NodeId(0)), 20_000_000);
    c.crash(2);
    for i in 0..5 {
        c.propose_anywhere(format!("two of three: {i}").as_bytes(), 20_000_000);
    }
    c.run_for(500_000);
    c.check_agreement();
    c.check_acked_applied(1);
    c.check_acked_applied(3);
    let status = c.cores[3].as_ref().unwrap().status();
    assert_eq!(status.members, vec![NodeId(1), NodeId(2), NodeId(3)], "{status:?}");
}

/// Removing the leader (§5.4): it proposes its own removal, stops leading once that is decided
/// ("once a replica sees it has been removed, it stops executing"), and the next replica leads
/// the two that remain, whose majority is both. A change that is not one of the current
/// configuration is refused at once.
///
/// Mu's removed leader applies nothing after its removal. Velos's decides one entry more, from
/// whose word the others learn the removal (`docs/protocols/velos.md`, "Membership changes").
pub fn the_leader_removes_itself(protocol: Protocol, seed: u64) {
    let mut c = SimCluster::with(3, seed, |c| c.protocol = protocol);
    assert_eq!(c.await_leader(5_000_000), NodeId(0));
    for i in 0..5 {
        c.propose_anywhere(format!("v{i}").as_bytes(), 5_000_000);
    }
    match c.submit_change(0, Change::Add(NodeId(1))) {
        Err(ProposeError::Membership(why)) => assert!(why.contains("member already"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let removed_at = c.change_anywhere(Change::Remove(NodeId(0)), 10_000_000);
    c.run_for(500_000);
    let status = c.cores[0].as_ref().unwrap().status();
    assert!(status.removed, "{status:?}");
    assert_eq!(c.agreed_leader(), Some(NodeId(1)), "{}", c.describe());
    for i in 0..10 {
        let index = c.propose_anywhere(format!("after: {i}").as_bytes(), 20_000_000);
        assert!(index > removed_at);
    }
    c.run_for(500_000);
    c.check_agreement();
    c.check_acked_applied(1);
    c.check_acked_applied(2);
    if protocol == Protocol::Mu {
        let last = c.applied[0].last().unwrap().0;
        assert_eq!(last, removed_at, "replica 0 stopped at its removal");
    }
    // Two members: both are needed; with one crashed nothing is decided.
    c.crash(2);
    let outcome = c.propose(1, b"needs both", 5_000_000);
    assert!(!matches!(outcome, Some(Ok(_))), "decided without a majority: {}", c.describe());
}

/// A replica restarted as a member in good standing (`eligible: true`) although its log was
/// lost with its crash: the replicas that saw its earlier run refuse it (never counted alive,
/// their permission managers do not serve it), it stops on reading the refusal, saying why,
/// and never leads, even as the lowest id; the others go on without it. Restarted properly
/// (rejoining) after that, it is taken back and the refusal is lifted.
///
/// `quick`: restarted at once, before the others' detectors could find it failed, and under
/// load: the others may still count the old run when the new one grants or answers.
pub fn a_replica_restarted_as_new_is_refused(
    protocol: Protocol,
    seed: u64,
    restarted: usize,
    quick: bool,
) {
    let mut c = SimCluster::with(3, seed, |c| c.protocol = protocol);
    c.await_leader(5_000_000);
    for i in 0..10 {
        c.propose_anywhere(format!("before {i}").as_bytes(), 5_000_000);
    }
    c.crash(restarted);
    if !quick {
        for i in 0..10 {
            c.propose_anywhere(format!("without it: {i}").as_bytes(), 20_000_000);
        }
    }
    c.restart_as_new(restarted);
    let status = |c: &SimCluster, pos: usize| c.cores[pos].as_ref().unwrap().status();
    let others: Vec<usize> = (0..3).filter(|&p| p != restarted).collect();
    let end = c.world.now_ns() + 20_000_000;
    let mut k = 0;
    while status(&c, restarted).failure.is_none()
        || others.iter().any(|&p| status(&c, p).restarted_without_rejoin.is_empty())
    {
        assert!(c.world.now_ns() < end, "not refused: {}", c.describe());
        if quick {
            let leader = c.agreed_leader().map_or(others[0], |l| l.0 as usize);
            let _ = c.propose(leader, format!("meanwhile {k}").as_bytes(), 200_000);
            k += 1;
        }
        c.round();
    }
    assert_eq!(status(&c, restarted).commits, 0, "{}", c.describe());
    let failure = status(&c, restarted).failure.unwrap();
    assert!(failure.contains("had seen an earlier run"), "{failure}");
    for &p in &others {
        let seen = status(&c, p).restarted_without_rejoin;
        assert_eq!(seen, vec![NodeId(restarted as u16)], "replica {p}");
    }
    // The others go on, led by one of them, and the refused replica never leads.
    for i in 0..10 {
        c.propose_anywhere(format!("refused: {i}").as_bytes(), 20_000_000);
        let leader = c.agreed_leader();
        assert_ne!(leader, Some(NodeId(restarted as u16)), "{}", c.describe());
    }
    let refused = status(&c, restarted);
    // It may have taken up a leadership before it read the refusal (the lowest id does), but no
    // permission was served to it: it committed nothing.
    assert_eq!(refused.commits, 0, "{refused:?}");
    assert_eq!(refused.leader, None, "it follows no leader once refused: {refused:?}");
    // Followers learn the last entries a little after the leader: an idle leader tells them
    // soon after (Mu writes its FUO, Velos decides an empty entry).
    c.run_for(1_000_000);
    c.check_agreement();
    for &p in &others {
        c.check_acked_applied(p);
    }
    // Restarted as it should have been, it is taken back.
    c.crash(restarted);
    c.restart(restarted);
    let end = c.world.now_ns() + 200_000_000;
    let mut k = 0;
    while !status(&c, restarted).eligible
        || others.iter().any(|&p| !status(&c, p).restarted_without_rejoin.is_empty())
    {
        assert!(c.world.now_ns() < end, "not taken back: {}", c.describe());
        c.propose_anywhere(format!("rejoining: {k}").as_bytes(), 20_000_000);
        c.run_for(100_000);
        k += 1;
    }
    c.check_agreement();
}
