//! Engine tests of the leader, with no fabric. Each names the part of the Mu paper it checks.

mod common;

use common::{Cluster, Fault};
use mu_fabric::NodeId;
use mu_log::{Integrity, LogLayout, FUO_OFFSET, MIN_PROPOSAL_OFFSET};
use mu_replication::{
    AbortReason, Action, Area, Grant, Memory, Phase, ProposeError, RemoteOp, ReplicaSet,
    CATCH_UP_BATCH_SLOTS, UPDATE_CHUNK_SLOTS,
};

/// "a majority of the replicas" — right for even sizes too (the original code's (n+1)/2 gave
/// 2 of 4).
#[test]
fn t10_majority_is_more_than_half() {
    for (n, m) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)] {
        let set = ReplicaSet::new((0..n).map(NodeId).collect()).unwrap();
        assert_eq!(set.majority(), m, "n = {n}");
        // Any two majorities intersect.
        assert!(2 * m > n as usize);
    }
    assert!(ReplicaSet::new(vec![NodeId(1), NodeId(1)]).is_err());
}

/// Listing 2, lines 9–12: a new leader asks every replica for permission and goes on once a
/// majority granted it; §4.2 "Growing confirmed followers": it briefly waits for the rest.
#[test]
fn t20_permissions_from_a_majority_then_the_grace_period() {
    let mut c = Cluster::new(5, 0);
    c.become_leader();
    let asked: Vec<_> = c
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::RequestPermission { peer, .. } => Some(peer.0),
            _ => None,
        })
        .collect();
    assert_eq!(asked, [0, 1, 2, 3, 4]);
    let me = c.me();
    let mut out = Vec::new();
    for p in [0, 1, 2] {
        c.leader.on_permission(NodeId(p), Grant::Member, 0, &mut c.mems[me], &mut out);
    }
    assert_eq!(c.leader.phase(), Phase::Permissions, "a majority, but the grace period is running");
    c.leader.tick(500, &mut c.mems[me], &mut out);
    assert_eq!(c.leader.phase(), Phase::Permissions);
    c.leader.on_permission(NodeId(3), Grant::Member, 600, &mut c.mems[me], &mut out);
    c.leader.tick(1_000, &mut c.mems[me], &mut out);
    assert_eq!(c.leader.phase(), Phase::ReadFuos, "grace period over");
    assert_eq!(c.leader.confirmed(), [NodeId(0), NodeId(1), NodeId(2), NodeId(3)]);
}

/// §4.2 "briefly waiting for responses from all replicas": not for the replicas the failure
/// detector considers failed (in a failover, the old leader is always among them). A replica
/// that is missing but not suspected is still waited for.
#[test]
fn t21_the_grace_period_does_not_wait_for_suspected_replicas() {
    let mut c = Cluster::new(5, 0);
    c.become_leader();
    let me = c.me();
    let mut out = Vec::new();
    c.leader.set_suspected(1 << 4);
    for p in [0, 1, 2] {
        c.leader.on_permission(NodeId(p), Grant::Member, 0, &mut c.mems[me], &mut out);
    }
    c.leader.tick(10, &mut c.mems[me], &mut out);
    assert_eq!(c.leader.phase(), Phase::Permissions, "replica 3 is missing and not suspected");
    c.leader.on_permission(NodeId(3), Grant::Member, 20, &mut c.mems[me], &mut out);
    assert_eq!(c.leader.phase(), Phase::ReadFuos, "only a suspected replica is missing");
    assert_eq!(c.leader.confirmed(), [NodeId(0), NodeId(1), NodeId(2), NodeId(3)]);

    // Suspected but not a majority: no confirmed set before the majority has granted.
    let mut c = Cluster::new(5, 0);
    c.become_leader();
    c.leader.set_suspected(0b11100);
    for p in [0, 1] {
        c.leader.on_permission(NodeId(p), Grant::Member, 0, &mut c.mems[me], &mut out);
    }
    c.leader.tick(10_000_000, &mut c.mems[me], &mut out);
    assert_eq!(c.leader.phase(), Phase::Permissions, "two of five is no majority");
    c.leader.on_permission(NodeId(2), Grant::Member, 10_000_001, &mut c.mems[me], &mut out);
    assert_eq!(c.leader.phase(), Phase::ReadFuos);
    assert_eq!(c.leader.confirmed(), [NodeId(0), NodeId(1), NodeId(2)]);
}

/// Listing 2: prepare (read minProposals, write a higher proposal number, read the slot at FUO)
/// then accept (write the value); the value is then at a majority and FUO moves on.
#[test]
fn t30_first_proposal_prepares_then_accepts() {
    let mut c = Cluster::ready(3, 0);
    assert_eq!(c.leader.phase(), Phase::Ready);
    let since = c.actions.len();
    c.propose(b"first").unwrap();
    c.run();
    assert_eq!(c.committed(), [(0, true)]);
    assert_eq!(c.leader.fuo(), 1);
    let p = c.leader.proposal_number();
    assert!(p > 0);
    for pos in 0..3 {
        assert_eq!(c.entry(pos, 0), Some((p, b"first".to_vec())), "replica {pos}");
        assert_eq!(
            c.mems[pos].load_u64(Area::Log, MIN_PROPOSAL_OFFSET),
            p,
            "prepare wrote minProposal"
        );
    }
    let ops = c.posts_since(since);
    assert!(ops.iter().any(|(_, op)| matches!(
        op,
        RemoteOp::ReadIntoScratch { offset: MIN_PROPOSAL_OFFSET, .. }
    )));
    assert!(ops
        .iter()
        .any(|(_, op)| matches!(op, RemoteOp::WriteWord { offset: MIN_PROPOSAL_OFFSET, .. })));
    assert!(ops.iter().any(|(_, op)| matches!(op, RemoteOp::WriteFromLog { .. })));
}

/// §4.2 "Omitting the prepare phase": after finding only empty slots, the next proposals are a
/// single write to each follower.
#[test]
fn t31_prepare_is_omitted_after_empty_slots() {
    let mut c = Cluster::ready(3, 0);
    c.propose(b"one").unwrap();
    c.run();
    assert!(c.leader.prepared());
    let since = c.actions.len();
    c.propose(b"two").unwrap();
    c.run();
    let ops = c.posts_since(since);
    let (accepts, rest): (Vec<&(usize, RemoteOp)>, Vec<_>) =
        ops.iter().partition(|(_, op)| matches!(op, RemoteOp::WriteFromLog { .. }));
    assert_eq!(accepts.len(), 2, "one write per follower: {ops:?}");
    assert!(rest.is_empty(), "nothing else on a proposal's path: {ops:?}");
    assert_eq!(c.committed(), [(0, true), (1, true)]);
    // Then, idle for FUO_PUBLISH_AFTER_NS, the leader tells them its FUO so they apply "two"
    // without waiting for more; not before (a next entry would tell them the same).
    let since = c.actions.len();
    c.tick();
    assert!(c.posts_since(since).is_empty(), "10 µs idle: not yet");
    c.tick();
    c.tick();
    let fuo = RemoteOp::WriteWord { offset: FUO_OFFSET, value: 2 };
    let ops = c.posts_since(since);
    assert_eq!(ops.iter().collect::<Vec<_>>(), [&(1, fuo), &(2, fuo)], "{ops:?}");
    // Once.
    let since = c.actions.len();
    c.tick();
    c.tick();
    assert!(c.posts_since(since).is_empty());
}

/// §4.2 commit piggybacking: a leader proposing back to back writes no FUO between its entries
/// (each entry tells the followers that the ones before it are decided); a pending FUO write is
/// dropped when the next entry goes out first.
#[test]
fn t32_back_to_back_entries_carry_the_fuo() {
    let mut c = Cluster::ready(3, 0);
    let since = c.actions.len();
    for i in 0..5u8 {
        c.propose(&[i]).unwrap();
        c.run();
        c.tick(); // 10 µs between proposals: below FUO_PUBLISH_AFTER_NS
    }
    let fuo_writes = c
        .posts_since(since)
        .into_iter()
        .filter(|(_, op)| matches!(op, RemoteOp::WriteWord { offset: FUO_OFFSET, .. }))
        .count();
    assert_eq!(fuo_writes, 0);
    assert_eq!(c.committed().len(), 5);
    c.tick();
    c.tick();
    let fuo = RemoteOp::WriteWord { offset: FUO_OFFSET, value: 5 };
    assert!(c.posts_since(since).contains(&(1, fuo)), "idle at last: the FUO goes out");
}

/// Listing 2, lines 24–28: a value found in a slot during prepare is adopted (the highest
/// proposal number among the replicas that answered wins) and committed before the leader's own,
/// which goes to the next index. (A majority answers: here ourselves and replica 1, the first to.)
#[test]
fn t40_prepare_adopts_the_highest_accepted_value() {
    let mut c = Cluster::new(3, 0);
    c.plant(0, 0, (1 << 16) | 2, b"older leader, low");
    c.plant(1, 0, (2 << 16) | 3, b"older leader, high");
    c.become_leader();
    c.grant_all();
    c.run();
    c.propose(b"mine").unwrap();
    c.run();
    assert_eq!(c.committed(), [(0, false), (1, true)]);
    let p = c.leader.proposal_number();
    assert!(p > (2 << 16) | 3, "above every minProposal seen");
    for pos in 0..3 {
        assert_eq!(c.entry(pos, 0).unwrap().1, b"older leader, high", "replica {pos}");
        assert_eq!(c.entry(pos, 1).unwrap().1, b"mine");
    }
}

/// Listing 3: a new leader first catches up from its most advanced confirmed follower.
#[test]
fn t50_leader_catches_up_from_the_most_advanced_follower() {
    let mut c = Cluster::new(3, 0);
    for i in 0..4 {
        c.plant(2, i, 1 << 16 | 3, format!("decided {i}").as_bytes());
    }
    c.mems[2].store_u64(Area::Log, FUO_OFFSET, 4);
    c.become_leader();
    c.grant_all();
    c.run();
    assert_eq!(c.leader.fuo(), 4);
    let me = c.me();
    assert_eq!(c.mems[me].load_u64(Area::Log, FUO_OFFSET), 4);
    for i in 0..4 {
        assert_eq!(
            c.entry(0, i).unwrap().1,
            format!("decided {i}").as_bytes(),
            "leader, index {i}"
        );
    }
    c.propose(b"next").unwrap();
    c.run();
    assert_eq!(c.committed(), [(4, true)]);
}

/// Listing 4: the leader brings lagging followers up to its FUO: the missing slots, then FUO.
#[test]
fn t60_lagging_followers_are_brought_up_to_date() {
    let mut c = Cluster::new(3, 0);
    for i in 0..3 {
        c.plant(0, i, 1 << 16 | 1, format!("v{i}").as_bytes());
    }
    c.mems[0].store_u64(Area::Log, FUO_OFFSET, 3);
    c.become_leader();
    c.grant_all();
    c.run();
    for pos in [1, 2] {
        assert_eq!(c.mems[pos].load_u64(Area::Log, FUO_OFFSET), 3, "follower {pos}'s FUO");
        for i in 0..3 {
            assert_eq!(c.entry(pos, i).unwrap().1, format!("v{i}").as_bytes());
        }
    }
}

/// §5.4: the configuration at our FUO comes from the membership entries between our head and
/// our FUO, a lap at most (no leader writes further). An FUO word far beyond that, which only a
/// faulty leader could have written, is scanned a lap deep, not to its end: the scan of every
/// index up to it did not return.
#[test]
fn t63_the_scan_for_membership_entries_stops_a_lap_past_the_head() {
    let mut c = Cluster::new(3, 0);
    c.mems[0].store_u64(Area::Log, FUO_OFFSET, u64::MAX / 4);
    c.become_leader();
    assert_eq!(c.leader.fuo(), u64::MAX / 4);
}

/// Listing 4 in chunks: a follower 100 entries behind gets its slots [`UPDATE_CHUNK_SLOTS`] at
/// a time, the next chunk once the last write of one has completed, so that no more are ever
/// on its connection (a fabric's connection may hold only so many: an RDMA send queue). All
/// at once, those past the connection's room were refused and the follower dropped.
#[test]
fn t62_a_follower_far_behind_gets_its_slots_in_chunks() {
    let layout = LogLayout::new(256, 128, Integrity::Checksum).unwrap();
    let mut c = Cluster::with_layout(3, 0, layout);
    for i in 0..100 {
        c.plant(0, i, 1 << 16 | 1, format!("v{i}").as_bytes());
    }
    c.mems[0].store_u64(Area::Log, FUO_OFFSET, 100);
    c.become_leader();
    c.grant_all();
    let mut most = 0;
    loop {
        let on_the_way = |peer: u16| {
            let slot = |op: &RemoteOp| matches!(op, RemoteOp::WriteFromLog { .. });
            c.queue.iter().filter(|p| p.peer == NodeId(peer) && slot(&p.op)).count()
        };
        most = most.max(on_the_way(1)).max(on_the_way(2));
        if !c.deliver_one() {
            break;
        }
    }
    assert_eq!(most as u64, UPDATE_CHUNK_SLOTS, "slot writes on one connection at once");
    for pos in [1, 2] {
        assert_eq!(c.mems[pos].load_u64(Area::Log, FUO_OFFSET), 100, "follower {pos}'s FUO");
        for i in 0..100 {
            assert_eq!(c.entry(pos, i).unwrap().1, format!("v{i}").as_bytes(), "{pos}, {i}");
        }
    }
    c.propose(b"next").unwrap();
    c.run();
    assert_eq!(c.committed(), [(100, true)]);
}

/// Listing 4 after a state transfer: a leader whose log lacks an entry below its FUO (it
/// installed a snapshot over it) still overwrites that slot in a lagging follower. The follower
/// may hold there a complete entry for that index that was never decided (its own accept as an
/// earlier leader), and the FUO written after the slots would make its replayer apply it
/// (simulator, seed 180023 with 7 replicas: two replicas applied different values at one
/// index). Given the hole, its replayer waits there instead, which a state transfer ends.
#[test]
fn t61_a_slot_the_leader_lacks_is_not_left_to_a_follower_below_the_fuo() {
    let mut c = Cluster::new(3, 0);
    // Index 1 was decided elsewhere; this leader's log skipped it (a snapshot).
    for i in [0, 2] {
        c.plant(0, i, 2 << 16 | 1, format!("v{i}").as_bytes());
    }
    c.mems[0].store_u64(Area::Log, FUO_OFFSET, 3);
    // Follower 1 knows index 0 decided, and holds at index 1 a value of its own that lost.
    c.plant(1, 0, 2 << 16 | 1, b"v0");
    c.plant(1, 1, 1 << 16 | 1, b"never decided");
    c.mems[1].store_u64(Area::Log, FUO_OFFSET, 1);
    c.become_leader();
    c.grant_all();
    c.run();
    assert_eq!(c.mems[1].load_u64(Area::Log, FUO_OFFSET), 3);
    assert_eq!(c.entry(1, 2).unwrap().1, b"v2");
    assert_eq!(c.entry(1, 1), None, "the undecided value is still there under FUO 3");
    let mut replayer = mu_replication::Replayer::new(c.layout, 1);
    let mut applied = Vec::new();
    replayer.poll(&mut c.mems[1], |index, _, value| applied.push((index, value.to_vec())));
    assert_eq!(applied, [], "applied past a slot it does not have");
    assert!(replayer.blocked(), "waits for a state transfer at index 1");
}

/// Listing 2, "Abort if any write fails" and §4.1: a follower that gave write access to another
/// leader makes the write fail; the leader aborts, asks for permission again, and proposes again.
#[test]
fn t70_a_denied_write_aborts_and_the_proposal_is_retried() {
    let mut c = Cluster::ready(3, 0);
    c.propose(b"one").unwrap();
    c.run();
    c.faults[1] = Fault::Denied;
    c.propose(b"two").unwrap();
    c.run();
    assert_eq!(c.aborts(), [AbortReason::PermissionLost { peer: NodeId(1) }]);
    assert_eq!(c.leader.phase(), Phase::Permissions);
    assert!(!c.leader.prepared(), "after an abort, prepare is needed again");
    assert_eq!(c.propose(b"three"), Err(ProposeError::Busy), "the first value is still pending");
    c.faults[1] = Fault::None;
    c.grant_all();
    c.run();
    assert_eq!(
        c.committed(),
        [(0, true), (1, true)],
        "the value accepted before the abort is not proposed twice"
    );
    assert_eq!(c.entry(2, 1).unwrap().1, b"two");
    assert!(c.entry(0, 2).is_none());
}

/// Listing 2, lines 29–32, seen from the application: a proposal may be decided from the moment
/// it is first written into a log (a later prepare adopts it, lines 24–28), so the engine says
/// so ([`Action::Exposed`]) once per proposal, before its writes go out, however often it is
/// written again after aborts; not while prepare decides a value found elsewhere first, and
/// never for its own empty entries. Without it the runtime inferred exposure from the phase at
/// the end of a poll, which missed a proposal written and aborted within one poll: the
/// application was told "not leader" for a request a later leader then decided (a multi-process
/// key-value test saw four such requests applied).
#[test]
fn t71_a_proposal_is_exposed_once_when_first_written() {
    let exposed_before_writes = |c: &Cluster, since: usize| -> Vec<bool> {
        // For each Exposed since `since`: whether it came before any accept write after it.
        let actions = &c.actions[since..];
        actions
            .iter()
            .enumerate()
            .filter(|(_, a)| matches!(a, Action::Exposed))
            .map(|(i, _)| {
                actions[i + 1..]
                    .iter()
                    .any(|a| matches!(a, Action::Post { op: RemoteOp::WriteFromLog { .. }, .. }))
                    && !actions[..i].iter().any(|a| {
                        matches!(a, Action::Post { op: RemoteOp::WriteFromLog { .. }, .. })
                    })
            })
            .collect()
    };
    // Prepare finds a value of an earlier leader at index 0: it is decided there first, and ours
    // is exposed only when written at index 1.
    let mut c = Cluster::new(3, 0);
    c.plant(1, 0, (1 << 16) | 2, b"older leader");
    c.become_leader();
    c.grant_all();
    c.run();
    let since = c.actions.len();
    c.propose(b"one").unwrap();
    // Deliver until index 0 is committed: nothing of ours was written yet.
    while c.committed().is_empty() {
        assert!(c.deliver_one());
        assert!(!c.actions[since..].iter().any(|a| matches!(a, Action::Exposed)));
    }
    assert_eq!(c.committed(), [(0, false)]);
    c.run();
    assert_eq!(c.committed(), [(0, false), (1, true)]);
    let at_one = c.actions[since..].iter().position(|a| matches!(a, Action::Exposed));
    let committed_zero = c.actions[since..]
        .iter()
        .position(|a| matches!(a, Action::Committed { index: 0, .. }))
        .unwrap();
    assert!(at_one.is_some_and(|i| i > committed_zero), "exposed once written at index 1");
    let exposed = c.actions[since..].iter().filter(|a| matches!(a, Action::Exposed)).count();
    assert_eq!(exposed, 1);

    // Written, then a follower denies the write: aborted, written again after the new
    // permissions, still exposed once.
    let since = c.actions.len();
    c.faults[1] = Fault::Denied;
    c.propose(b"two").unwrap();
    c.run();
    assert_eq!(c.aborts(), [AbortReason::PermissionLost { peer: NodeId(1) }]);
    assert_eq!(exposed_before_writes(&c, since), [true], "exposed before its first write");
    c.faults[1] = Fault::None;
    c.grant_all();
    c.run();
    assert_eq!(c.committed().last(), Some(&(2, true)));
    let exposed = c.actions[since..].iter().filter(|a| matches!(a, Action::Exposed)).count();
    assert_eq!(exposed, 1, "written twice, exposed once");

    // Two in flight at once: each is exposed as it is written.
    let mut c = Cluster::new(3, 0);
    c.set_outstanding(2);
    c.become_leader();
    c.grant_all();
    c.run();
    c.propose(b"a").unwrap();
    c.run();
    let since = c.actions.len();
    c.faults[2] = Fault::Held;
    c.propose(b"b").unwrap();
    c.propose(b"c").unwrap();
    let exposed = c.actions[since..].iter().filter(|a| matches!(a, Action::Exposed)).count();
    assert_eq!(exposed, 2, "both written before any answer");
    c.release(2);
    c.run();
    assert_eq!(c.committed(), [(0, true), (1, true), (2, true)]);
}

/// Listing 2, line 34 ("if value == myValue"), at any index: a proposal of ours that another
/// leader decided at some index, after our attempt wrote it and aborted, is committed as ours
/// at that index and never proposed again (proposed again, a request acknowledged once would
/// take effect twice: simulator seeds 120018 and 120028, two leaders at once). The other leader
/// either wrote the decided entries into our log (found when the next attempt reads our FUO)
/// or holds them in its own, a more advanced follower's (found in catch-up, Listing 3).
#[test]
fn t74_a_proposal_decided_by_another_leader_is_ours_and_not_proposed_again() {
    for through_catch_up in [false, true] {
        let mut c = Cluster::ready(3, 0);
        c.propose(b"first").unwrap();
        c.run();
        assert!(c.leader.prepared());
        // Our accept of "mine" at 1 is written into our log and posted, and held.
        c.faults[1] = Fault::Held;
        c.faults[2] = Fault::Held;
        c.propose(b"mine").unwrap();
        assert_eq!(c.entry(0, 1).map(|e| e.1), Some(b"mine".to_vec()));
        // Another leader took over, found "mine" at 1, decided it, then "other" at 2, in its
        // log and replica 2's, and in ours too unless we are to find them by catching up.
        let p = (7 << 16) | 2;
        let holders: &[usize] = if through_catch_up { &[1, 2] } else { &[0, 1, 2] };
        for &pos in holders {
            c.plant(pos, 1, p, b"mine");
            c.plant(pos, 2, p, b"other");
            c.mems[pos].store_u64(Area::Log, FUO_OFFSET, 3);
        }
        // Our held writes are refused (the logs were given to the other leader): abort.
        c.faults[1] = Fault::Denied;
        c.faults[2] = Fault::Denied;
        let held: Vec<_> = c.held.drain(..).collect();
        c.queue.extend(held);
        c.run();
        assert!(!c.aborts().is_empty(), "the attempt aborted");
        // We lead again.
        c.faults[1] = Fault::None;
        c.faults[2] = Fault::None;
        c.grant_all();
        c.run();
        let committed = c.committed();
        assert_eq!(committed, [(0, true), (1, true)], "catch-up {through_catch_up}");
        assert_eq!(c.leader.fuo(), 3);
        assert!(c.entry(0, 3).is_none(), "not proposed again");
        c.propose(b"next").unwrap();
        c.run();
        assert_eq!(c.committed().last(), Some(&(3, true)));
        for pos in 0..3 {
            assert_eq!(c.entry(pos, 3).map(|e| e.1), Some(b"next".to_vec()), "replica {pos}");
            assert_eq!(c.entry(pos, 1).map(|e| e.1), Some(b"mine".to_vec()), "replica {pos}");
        }
    }
}

/// Listing 2, line 34, where the log no longer shows the answer: a proposal of ours, written at
/// an index by an attempt that aborted, may have been decided there by another leader; if that
/// leader has since moved our log on by more than its length (16 slots here), the slot holds a
/// later lap's entry and nothing tells whether it was. Proposed again, it could be decided
/// twice (simulator seed 60092: a request applied at 555 and again at 633, with a 64-slot
/// log). The leader steps down instead (`AbortReason::OutcomeUnknown`), so that the runtime
/// answers it as of unknown outcome, and leads again with nothing queued.
#[test]
fn t75_a_proposal_whose_index_left_the_log_is_not_proposed_again() {
    let mut c = Cluster::ready(3, 0);
    c.propose(b"first").unwrap();
    c.run();
    c.faults[1] = Fault::Held;
    c.faults[2] = Fault::Held;
    c.propose(b"mine").unwrap();
    assert_eq!(c.entry(0, 1).map(|e| e.1), Some(b"mine".to_vec()));
    // Another leader decided "mine" at 1, then 2..=20, in every log: index 17 reuses the slot
    // of 1 in a log of 16 slots.
    let p = (7 << 16) | 2;
    for pos in 0..3 {
        c.plant(pos, 1, p, b"mine");
        for index in 2..=20 {
            c.plant(pos, index, p, format!("later {index}").as_bytes());
        }
        c.mems[pos].store_u64(Area::Log, FUO_OFFSET, 21);
    }
    assert!(c.entry(0, 1).is_none(), "slot 1 holds entry 17 now");
    c.faults[1] = Fault::Denied;
    c.faults[2] = Fault::Denied;
    let held: Vec<_> = c.held.drain(..).collect();
    c.queue.extend(held);
    c.run();
    assert_eq!(c.aborts().last(), Some(&AbortReason::OutcomeUnknown { exposed_at: 1 }));
    assert_eq!(c.leader.phase(), Phase::Follower, "stepped down with the proposal dropped");
    assert_eq!(c.committed(), [(0, true)], "not committed as ours: its index is unknown");
    // Leading again (the replicas we wrote to are asked once fences to them completed):
    // nothing of the old queue is proposed.
    c.faults[1] = Fault::None;
    c.faults[2] = Fault::None;
    c.become_leader();
    c.run();
    c.grant_all();
    c.run();
    assert_eq!(c.leader.fuo(), 21);
    assert!(c.entry(0, 21).is_none(), "not proposed again");
    // Every replica applied the other leader's entries: 21 may reuse the slot of 5.
    c.set_min_head(21);
    c.propose(b"next").unwrap();
    c.run();
    assert_eq!(c.committed().last(), Some(&(21, true)));
    assert_eq!(c.entry(1, 21).map(|e| e.1), Some(b"next".to_vec()));
}

/// §4.1 and §5.2, permissions as the guard of a log: after an abort, a replica the leader may
/// still have writes on the way to is asked for permission again only once a fence (a signaled
/// read behind them on the same FIFO connection) has completed. Otherwise a write of the aborted
/// attempt could land after the replica granted us again, over entries another leader decided
/// there in between (simulator seed 6985).
#[test]
fn t73_a_replica_is_asked_again_only_once_our_writes_to_it_have_landed() {
    let mut c = Cluster::ready(5, 0);
    c.propose(b"a").unwrap();
    c.run();
    c.faults[4] = Fault::Held; // its writes stay on the wire
    c.faults[1] = Fault::Denied; // another leader has replica 1's log
    c.propose(b"b").unwrap();
    let since = c.actions.len();
    c.run();
    assert_eq!(c.aborts(), [AbortReason::PermissionLost { peer: NodeId(1) }]);
    let asked = |c: &Cluster| c.asked_since(since);
    assert_eq!(asked(&c), [0, 1, 2, 3], "replica 4 waits: our accept to it is still on the wire");
    assert!(c.leader.fence_pending());
    let fences: Vec<usize> = c
        .posts_since(since)
        .into_iter()
        .filter(|(_, op)| {
            matches!(op, RemoteOp::ReadIntoScratch { offset: FUO_OFFSET, len: 8, .. })
        })
        .map(|(pos, _)| pos)
        .collect();
    assert_eq!(fences, [1, 2, 3, 4], "a fence to every replica written to, none to ourselves");
    // A grant from replica 4 now (an answer to an older request) is not counted.
    c.faults[1] = Fault::None;
    c.grant(4);
    c.grant_all();
    c.run();
    assert!(!c.leader.confirmed().contains(&NodeId(4)));
    assert!(c.entry(4, 1).is_none(), "the held write has not landed");
    // The held write lands, then the fence completes: only then is replica 4 asked.
    c.release(4);
    c.run();
    assert_eq!(c.entry(4, 1).unwrap().1, b"b");
    assert_eq!(asked(&c), [0, 1, 2, 3, 4]);
    assert!(!c.leader.fence_pending());
}

/// Listing 3 with log recycling (§5.3): the most advanced follower's decided prefix is copied
/// only while its slots hold it. Here its slot for our FUO already holds the next lap's entry
/// (it applied the one we lack long ago): the leader must not prepare at that decided index (it
/// would find the slot "taken by another index" and decide a value of its own), so it steps down
/// as a replica that needs a state transfer (simulator seed 5302).
#[test]
fn t53_catch_up_steps_down_where_the_source_recycled_the_slot() {
    let layout = LogLayout::new(16, 128, Integrity::Checksum).unwrap();
    let mut c = Cluster::with_layout(3, 0, layout);
    // Replica 1 decided 0..16 and accepted 16..19, which reuse slots 0..3. Our log and
    // replica 2's are empty: we are one log behind, which the size check lets through.
    for i in 0..20 {
        c.plant(1, i, 1 << 16 | 2, format!("decided {i}").as_bytes());
    }
    c.mems[1].store_u64(Area::Log, FUO_OFFSET, 16);
    c.become_leader();
    c.grant_all();
    c.run();
    let _ = c.propose(b"new");
    c.run();
    assert_eq!(c.aborts(), [AbortReason::NeedsStateTransfer { behind: 16 }]);
    assert_eq!(c.leader.phase(), Phase::Follower);
    assert!(
        !c.posts_since(0)
            .iter()
            .any(|(_, op)| matches!(op, RemoteOp::WriteWord { offset: MIN_PROPOSAL_OFFSET, .. })),
        "no prepare at a decided index"
    );
    assert!(c.entry(2, 0).is_none(), "nothing decided anew at index 0");
}

/// §4.2 "Growing confirmed followers": the leader waits for a majority only; a slow follower
/// gets the same entries, in order, later.
#[test]
fn t80_accept_waits_for_a_majority_only() {
    let mut c = Cluster::ready(5, 0);
    c.faults[3] = Fault::Held;
    c.faults[4] = Fault::Held;
    for v in [&b"a"[..], b"b", b"c"] {
        c.propose(v).unwrap();
        c.run();
    }
    assert_eq!(c.committed(), [(0, true), (1, true), (2, true)]);
    assert!(c.entry(3, 0).is_none(), "the slow follower has nothing yet");
    c.release(3);
    c.release(4);
    c.run();
    for i in 0..3 {
        assert_eq!(c.entry(3, i), c.entry(0, i));
        assert_eq!(c.entry(4, i), c.entry(0, i));
    }
}

/// An unreachable follower is dropped from the confirmed set; the leader goes on while a
/// majority remains and aborts when it does not.
#[test]
fn t81_unreachable_followers_are_dropped_until_the_majority_is_lost() {
    let mut c = Cluster::ready(5, 0);
    c.propose(b"a").unwrap();
    c.run();
    c.faults[4] = Fault::Unreachable;
    c.propose(b"b").unwrap();
    c.run();
    assert_eq!(c.committed(), [(0, true), (1, true)]);
    assert!(!c.leader.confirmed().contains(&NodeId(4)));
    c.faults[3] = Fault::Unreachable;
    c.faults[2] = Fault::Unreachable;
    c.propose(b"c").unwrap();
    c.run();
    assert_eq!(c.aborts(), [AbortReason::LostMajority]);
}

/// Listing 2, line 11 (choose a proposal number above every minProposal read): a follower whose
/// minProposal no number can exceed (only corrupted memory or a faulty peer holds one) is
/// dropped like an unreachable one, and the leader goes on with the majority left; it used to
/// trip an assertion, and so would every leader after it. Our own corrupted minProposal is
/// overwritten by prepare.
#[test]
fn t82_a_follower_with_an_impossible_min_proposal_is_dropped() {
    let mut c = Cluster::ready(3, 0);
    c.mems[1].store_u64(Area::Log, MIN_PROPOSAL_OFFSET, u64::MAX);
    c.mems[0].store_u64(Area::Log, MIN_PROPOSAL_OFFSET, u64::MAX - 7);
    // Follower 2 answers after follower 1 and holds a real, higher promise: the number is
    // chosen only once it answered (the majority left), above it.
    let promise = (5 << 16) | 3;
    c.mems[2].store_u64(Area::Log, MIN_PROPOSAL_OFFSET, promise);
    c.propose(b"a").unwrap();
    c.run();
    assert_eq!(c.committed(), [(0, true)]);
    assert!(!c.leader.confirmed().contains(&NodeId(1)));
    assert!(c.actions.contains(&Action::CorruptPeer { peer: NodeId(1) }));
    let own = c.actions.iter().filter(|a| **a == Action::CorruptPeer { peer: NodeId(0) });
    assert_eq!(own.count(), 1, "our own, reported once");
    let p = c.leader.proposal_number();
    assert!(p < 1 << 63 && p > promise, "proposal number {p:#x}");
    assert_eq!(c.mems[0].load_u64(Area::Log, MIN_PROPOSAL_OFFSET), p);
    assert_eq!(c.mems[2].load_u64(Area::Log, MIN_PROPOSAL_OFFSET), p);

    // Two of three: no majority left, an abort, no panic.
    let mut c = Cluster::ready(3, 0);
    for pos in [1, 2] {
        c.mems[pos].store_u64(Area::Log, MIN_PROPOSAL_OFFSET, (1 << 63) + pos as u64);
    }
    c.propose(b"a").unwrap();
    c.run();
    assert_eq!(c.committed(), []);
    assert_eq!(c.aborts(), [AbortReason::LostMajority]);
}

/// The corrupt follower of t82 is reported once per leadership: a later grant lets it back
/// into the confirmed set (its minProposal is never rewritten, since it takes no part in
/// prepare), and each prepare after an abort drops it again, silently.
#[test]
fn t82b_a_corrupt_follower_is_reported_once_per_leadership() {
    let reports = |c: &Cluster| {
        c.actions.iter().filter(|a| **a == Action::CorruptPeer { peer: NodeId(1) }).count()
    };
    let mut c = Cluster::ready(5, 0);
    c.mems[1].store_u64(Area::Log, MIN_PROPOSAL_OFFSET, u64::MAX);
    c.propose(b"a").unwrap();
    c.run();
    assert_eq!(reports(&c), 1);
    assert!(!c.leader.confirmed().contains(&NodeId(1)));
    // Back by a late grant, as the runtime asks the members we lead without now and then.
    let mut out = Vec::new();
    c.leader.ask_missing(&mut out);
    c.take(out);
    c.run(); // the fence before the request
    c.grant(1);
    c.run();
    c.propose(b"b").unwrap();
    c.run();
    assert!(c.leader.confirmed().contains(&NodeId(1)), "{:?}", c.leader.confirmed());
    // The majority lost and regained: a new attempt prepares again and finds it again.
    for pos in 2..5 {
        c.faults[pos] = Fault::Unreachable;
    }
    c.propose(b"c").unwrap();
    c.run();
    assert_eq!(c.aborts(), [AbortReason::LostMajority]);
    for pos in 2..5 {
        c.faults[pos] = Fault::None;
    }
    c.grant_all();
    c.run();
    c.propose(b"d").unwrap();
    c.run();
    assert!(!c.leader.confirmed().contains(&NodeId(1)), "dropped again");
    assert_eq!(reports(&c), 1, "reported once in this leadership");
    assert!(c.committed().contains(&(3, true)), "{:?}", c.committed());
}

/// Not leading: propose is refused with a typed error, as is a value larger than a slot.
#[test]
fn t90_propose_errors() {
    let mut c = Cluster::new(3, 0);
    assert_eq!(c.propose(b"x"), Err(ProposeError::NotLeader));
    let mut c = Cluster::ready(3, 0);
    let big = vec![0u8; c.layout.max_value_bytes() + 1];
    assert!(matches!(c.propose(&big), Err(ProposeError::TooLarge { .. })));
}

/// §5.2: a replica's permission manager grants write access to its log to one leader at a time
/// — that includes the replica itself. Once another leader holds our own log, our local writes
/// are refused like remote ones, and we abort instead of writing under it.
#[test]
fn t72_our_own_log_given_away_aborts_us() {
    let mut c = Cluster::ready(3, 0);
    c.propose(b"one").unwrap();
    c.run();
    let me = c.me();
    c.mems[me].revoked = true;
    let before = c.entry(me, 1);
    c.propose(b"two").unwrap();
    c.run();
    assert_eq!(c.aborts(), [AbortReason::PermissionLost { peer: NodeId(0) }]);
    assert_eq!(c.entry(me, 1), before, "nothing was written into our log under another leader");
    assert_eq!(c.committed(), [(0, true)]);
}

/// Listing 3 with a gap larger than one catch-up batch: the leader copies the source's slots in
/// batches through its scratch area and ends with the source's FUO.
#[test]
fn t51_catch_up_larger_than_one_batch() {
    let layout = LogLayout::new(64, 128, Integrity::Checksum).unwrap();
    let mut c = Cluster::with_layout(3, 0, layout);
    let gap = CATCH_UP_BATCH_SLOTS * 2 + 3;
    for i in 0..gap {
        c.plant(1, i, 1 << 16 | 2, format!("decided {i}").as_bytes());
    }
    c.mems[1].store_u64(Area::Log, FUO_OFFSET, gap);
    c.become_leader();
    c.grant_all();
    c.run();
    assert_eq!(c.leader.fuo(), gap);
    for pos in 0..3 {
        for i in 0..gap {
            let (_, v) = c.entry(pos, i).unwrap_or_else(|| panic!("replica {pos} index {i}"));
            assert_eq!(v, format!("decided {i}").as_bytes());
        }
    }
    let reads = c
        .posts_since(0)
        .iter()
        .filter(|(pos, op)| {
            *pos == 1 && matches!(op, RemoteOp::ReadIntoScratch { len, .. } if *len == 128)
        })
        .count() as u64;
    assert_eq!(reads, gap, "each slot read once, into scratch");
}

/// Listing 3 and §5.2: catch-up copies into our log only through the guard. If our log is given
/// to another leader while a batch is being read, the batch is not copied and we abort.
#[test]
fn t52_catch_up_stops_when_our_log_is_given_away() {
    let mut c = Cluster::new(3, 0);
    for i in 0..4 {
        c.plant(2, i, 1 << 16 | 3, format!("decided {i}").as_bytes());
    }
    c.mems[2].store_u64(Area::Log, FUO_OFFSET, 4);
    c.become_leader();
    c.grant_all();
    while c.leader.phase() != Phase::CatchUp {
        assert!(c.deliver_one(), "the leader reached catch-up");
    }
    c.faults[2] = Fault::Held;
    c.run();
    assert_eq!(c.leader.phase(), Phase::CatchUp);
    c.mems[0].revoked = true;
    c.release(2);
    c.run();
    assert!(c.aborts().contains(&AbortReason::PermissionLost { peer: NodeId(0) }));
    for i in 0..4 {
        assert_eq!(c.entry(0, i), None, "index {i} was not copied under another leader");
    }
}

/// §5.3: the log is never full and never overwritten. With no log heads read yet, the leader
/// fills all slots but one, then waits; once every replica applied the first entries, it goes on.
#[test]
fn t95_recycling_waits_for_log_heads() {
    let mut c = Cluster::ready(3, 0);
    let slots = c.layout.slots_count();
    for i in 0..slots - 1 {
        c.propose(format!("v{i}").as_bytes()).unwrap();
        c.run();
    }
    assert_eq!(c.committed().len() as u64, slots - 1);
    c.propose(b"one too many").unwrap();
    c.run();
    assert!(c.leader.waiting_for_room());
    assert_eq!(c.committed().len() as u64, slots - 1, "nothing overwrote index 0");
    assert_eq!(c.entry(1, 0).unwrap().1, b"v0");
    c.set_min_head(0);
    assert!(c.leader.waiting_for_room(), "a head of 0 frees nothing");
    c.set_min_head(1);
    c.run();
    assert!(!c.leader.waiting_for_room());
    assert_eq!(c.committed().last(), Some(&(slots - 1, true)));
    assert_eq!(c.entry(1, slots - 1).unwrap().1, b"one too many");
    // A proposal waiting for room can be given up; one being replicated cannot.
    c.propose(b"waits").unwrap();
    c.run();
    assert_eq!(c.leader.cancel_waiting_proposals(), 1);
    assert!(!c.leader.waiting_for_room());
    c.set_min_head(2);
    c.run();
    assert_eq!(c.committed().len() as u64, slots, "the cancelled value was not proposed");
}

/// §5.3 with back-pressure: out of room, the leader waits for the slowest follower while its
/// head moves, however slowly, and drops it (a majority remaining) only once its head stood
/// still for `drop_stalled_after_ns`.
#[test]
fn t97_a_slow_follower_is_waited_for_and_a_stalled_one_dropped() {
    let mut c = Cluster::ready(3, 0);
    c.leader.set_drop_stalled_after_ns(100_000);
    let slots = c.layout.slots_count();
    for i in 0..slots - 1 {
        c.propose(format!("v{i}").as_bytes()).unwrap();
        c.run();
    }
    // The leader and replica 1 applied everything, replica 2 the first entry only.
    c.mems[0].store_u64(Area::Log, mu_log::HEAD_OFFSET, slots - 1);
    let mut out = Vec::new();
    c.leader.set_head(NodeId(1), slots - 1, &mut c.mems[0], &mut out);
    c.leader.set_head(NodeId(2), 1, &mut c.mems[0], &mut out);
    c.take(out);
    c.propose(b"fits").unwrap();
    c.run();
    c.propose(b"waits for 2").unwrap();
    c.run();
    assert!(c.leader.waiting_for_room());
    for _ in 0..5 {
        c.tick();
    }
    c.run();
    assert!(c.leader.waiting_for_room(), "replica 2's head moved 50 µs ago: waited for");
    assert_eq!(c.leader.confirmed().len(), 3);
    let mut out = Vec::new();
    c.leader.set_head(NodeId(2), 2, &mut c.mems[0], &mut out);
    c.take(out);
    c.run();
    assert!(!c.leader.waiting_for_room(), "replica 2 applied one more: room for one more");
    assert_eq!(c.committed().len() as u64, slots + 1);
    c.propose(b"replica 2 stands still").unwrap();
    c.run();
    assert!(c.leader.waiting_for_room());
    for _ in 0..11 {
        c.tick();
    }
    c.run();
    assert!(!c.leader.waiting_for_room(), "110 µs without a move: replica 2 is dropped");
    assert_eq!(c.leader.confirmed(), [NodeId(0), NodeId(1)]);
    assert_eq!(c.committed().len() as u64, slots + 2);
}

/// §4.2 "Omitting the prepare phase" after the circular log wrapped (§5.3): slots holding the
/// previous lap read as stale, not as accepted values, so a new leader still omits prepare after
/// its first proposal, with no zeroing of reused slots.
#[test]
fn t96_prepare_is_omitted_after_the_log_wrapped() {
    let mut c = Cluster::ready(3, 0);
    let slots = c.layout.slots_count();
    let mut replayers: Vec<_> =
        (0..3).map(|_| mu_replication::Replayer::new(c.layout, 0)).collect();
    for i in 0..slots + 4 {
        c.set_min_head(i);
        c.propose(format!("v{i}").as_bytes()).unwrap();
        c.run();
        for (pos, r) in replayers.iter_mut().enumerate() {
            r.poll(&mut c.mems[pos], |_, _, _| {});
        }
    }
    assert_eq!(c.committed().len() as u64, slots + 4);
    // Idle, the leader writes its FUO: the followers apply the last entry too.
    for _ in 0..3 {
        c.tick();
    }
    c.run();
    for (pos, r) in replayers.iter_mut().enumerate() {
        r.poll(&mut c.mems[pos], |_, _, _| {});
    }
    // Followers learn commits by piggybacking. Under steady load, when the leader never goes
    // idle, their FUO words stay behind while their heads move on: make it so.
    for pos in [1, 2] {
        c.mems[pos].store_u64(Area::Log, FUO_OFFSET, 1);
    }
    assert_eq!(replayers[1].head(), slots + 4, "the last one too: the idle leader wrote its FUO");
    // Replica 1 takes over.
    c.leader = mu_replication::Leader::new(mu_replication::LeaderConfig {
        me: NodeId(1),
        replicas: ReplicaSet::new(c.ids.clone()).unwrap(),
        layout: c.layout,
        permission_grace_ns: 1_000,
        outstanding_max: 1,
    })
    .unwrap();
    c.become_leader();
    c.grant_all();
    c.run();
    c.set_min_head(slots + 4);
    let since = c.actions.len();
    for i in 0..3 {
        c.propose(format!("new {i}").as_bytes()).unwrap();
        c.run();
    }
    let prepares = c
        .posts_since(since)
        .iter()
        .filter(|(_, op)| matches!(op, RemoteOp::WriteWord { offset: MIN_PROPOSAL_OFFSET, .. }))
        .count();
    assert_eq!(prepares, 2, "one prepare (to each of two followers), then omitted");
    for pos in 0..3 {
        assert_eq!(c.entry(pos, slots + 6).unwrap().1, b"new 2", "replica {pos}");
    }
}

/// A replica that restarted has lost what it accepted: counted in the majority a new leader
/// prepares with, its empty slots could hide a chosen value. Its grant says it is recovering; it
/// does not count, and it joins only once the leader prepared without it; then update-followers
/// gives it the log and marks it taken back (the admitted word). A leader with nothing to
/// propose prepares by itself, with an empty entry of its own, so that the replica is not left
/// out until a request comes.
#[test]
fn t86_a_recovering_replica_counts_only_after_prepare() {
    let mut c = Cluster::new(3, 0);
    // A value chosen before replica 1 restarted, at replicas 1 and 2; replica 1 forgot it.
    c.plant(2, 0, (1 << 16) | 3, b"chosen earlier");
    c.become_leader();
    let me = c.me();
    let mut out = Vec::new();
    c.leader.on_permission(NodeId(0), Grant::Member, 0, &mut c.mems[me], &mut out);
    c.leader.on_permission(NodeId(1), Grant::Recovering, 0, &mut c.mems[me], &mut out);
    c.leader.tick(1_000_000, &mut c.mems[me], &mut out);
    assert_eq!(
        c.leader.phase(),
        Phase::Permissions,
        "ourselves and a recovering replica: no majority"
    );
    c.faults[1] = Fault::Unreachable; // no member grant from it: only the recovering one
    c.grant_all();
    c.faults[1] = Fault::None;
    c.run();
    // Prepare ran with replica 2, found the chosen value, and committed it first; then the
    // leader's own empty entry (neither reported as the application's).
    assert_eq!(c.committed(), [(0, false), (1, false)]);
    assert_eq!(c.leader.confirmed(), [NodeId(0), NodeId(1), NodeId(2)], "taken back once prepared");
    assert_eq!(c.leader.proposals_count(), 0, "the empty entry is not the application's");
    assert_eq!(c.entry(1, 0).unwrap().1, b"chosen earlier");
    assert_eq!(c.entry(1, 1).unwrap().1, b"");
    assert_eq!(c.mems[1].load_u64(Area::Log, mu_log::ADMITTED_OFFSET), 3, "1 + our FUO then");
    c.propose(b"mine").unwrap();
    c.run();
    assert_eq!(c.committed().last(), Some(&(2, true)));
    assert_eq!(c.entry(1, 2).unwrap().1, b"mine");
}

/// §4.2 "growing the confirmed set later": a replica that grants permission after the confirmed
/// set was formed is brought up to date (Listing 4) and then replicated to like the others.
#[test]
fn t85_a_late_grant_grows_the_confirmed_set() {
    let mut c = Cluster::new(3, 0);
    c.faults[2] = Fault::Unreachable; // does not answer the permission request in time
    c.become_leader();
    c.grant_all();
    c.run();
    c.faults[2] = Fault::None;
    for i in 0..3 {
        c.propose(format!("v{i}").as_bytes()).unwrap();
        c.run();
    }
    assert_eq!(c.leader.confirmed(), [NodeId(0), NodeId(1)]);
    assert_eq!(c.entry(2, 0), None, "replica 2 is not written to yet");
    // Its grant arrives now.
    c.grant(2);
    c.run();
    assert_eq!(c.leader.confirmed(), [NodeId(0), NodeId(1), NodeId(2)]);
    assert_eq!(c.mems[2].load_u64(Area::Log, FUO_OFFSET), 3, "brought up to our FUO");
    for i in 0..3 {
        assert_eq!(c.entry(2, i).unwrap().1, format!("v{i}").as_bytes());
    }
    c.propose(b"after").unwrap();
    c.run();
    assert_eq!(c.entry(2, 3).unwrap().1, b"after", "replicated to like the others");
    assert!(c.aborts().is_empty());
}

/// Asking ahead (a runtime sending a new leadership's first permission requests the moment its
/// election picks it, before the engine leads): only a replica none of our writes can still
/// land at may be asked so, for the reason of t73. A follower fences the replicas it wrote to
/// as leader; each becomes askable once its fence completed, not before.
#[test]
fn t76_only_replicas_nothing_of_ours_can_land_at_are_askable_ahead() {
    let mut c = Cluster::ready(3, 0);
    assert_eq!(c.leader.askable_ahead(), 0, "none while leading");
    c.faults[2] = Fault::Held; // our accept to replica 2 stays on the wire
    c.propose(b"a").unwrap();
    c.run();
    c.leader.step_down();
    assert_eq!(c.leader.askable_ahead(), 0b001, "ourselves only: we wrote to 1 and 2");
    let since = c.actions.len();
    let mut out = Vec::new();
    c.leader.fence_past_posts(&mut out);
    c.take(out);
    let fences: Vec<usize> = c.posts_since(since).into_iter().map(|(pos, _)| pos).collect();
    assert_eq!(fences, [1, 2], "a fence to every replica written to, none to ourselves");
    let mut again = Vec::new();
    c.leader.fence_past_posts(&mut again);
    assert!(again.is_empty(), "a fence in flight is not posted again");
    c.run();
    assert_eq!(c.leader.askable_ahead(), 0b011, "replica 1's fence completed; 2's waits");
    c.release(2);
    c.run();
    assert_eq!(c.entry(2, 0).unwrap().1, b"a", "the held write landed before the fence");
    assert_eq!(c.leader.askable_ahead(), 0b111);
    c.become_leader();
    assert_eq!(c.leader.askable_ahead(), 0, "none once leading again");
}
