//! Engine tests of several entries in flight at once (Mu paper §7.4, "multiple outstanding
//! requests"), with no fabric: what goes out before any completion, the order of commits, what
//! followers learn from the counts carried in entries (§4.2 commit piggybacking), and aborts
//! with entries in flight.

mod common;

use common::{Cluster, Fault};
use mu_fabric::NodeId;
use mu_log::EntryKind;
use mu_replication::{Area, Memory, Phase, ProposeError, RemoteOp, Replayer};

/// A 3-replica cluster whose leader (0) keeps up to `k` entries in flight, with "a" committed at
/// index 0: prepare ran once and found nothing, so prepare is omitted from now on.
fn prepared(k: usize) -> Cluster {
    let mut c = Cluster::new(3, 0);
    c.set_outstanding(k);
    c.become_leader();
    c.grant_all();
    c.run();
    c.propose(b"a").unwrap();
    c.run();
    assert_eq!(c.committed(), [(0, true)]);
    assert!(c.leader.prepared());
    c
}

/// `prepared(4)`, with both followers under `fault`, then "b" to "e" proposed and everything
/// that can be delivered delivered.
fn four_proposed_with(fault: Fault) -> Cluster {
    let mut c = prepared(4);
    c.faults[1] = fault;
    c.faults[2] = fault;
    for v in [b"b", b"c", b"d", b"e"] {
        c.propose(v).unwrap();
    }
    c.run();
    c
}

fn accepts_posted_since(c: &Cluster, since: usize) -> Vec<(usize, u64)> {
    c.posts_since(since)
        .into_iter()
        .filter_map(|(peer, op)| match op {
            RemoteOp::WriteFromLog { offset, .. } => Some((peer, offset)),
            _ => None,
        })
        .collect()
}

/// §7.4: with prepare omitted, a leader writes the next entries before the first is committed,
/// up to `outstanding_max`; each entry says how many below it were still in flight; then they
/// commit in index order.
#[test]
fn t10_entries_go_out_before_the_first_commits() {
    let mut c = prepared(4);
    let since = c.actions.len();
    for v in [b"b", b"c", b"d", b"e"] {
        c.propose(v).unwrap();
    }
    assert_eq!(c.propose(b"f"), Err(ProposeError::Busy), "four may wait at once, no more");
    assert_eq!(c.leader.in_flight_count(), 4);
    let posted = accepts_posted_since(&c, since);
    let l = c.layout;
    let expected: Vec<(usize, u64)> =
        (1..=4).flat_map(|i| [(1, l.slot_offset(i)), (2, l.slot_offset(i))]).collect();
    assert_eq!(posted, expected, "every accept posted before any completion");
    for (i, value) in [(1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")] {
        assert_eq!(c.entry_counts(0, i), Some(((i - 1) as u16, value.to_vec())), "index {i}");
    }
    assert_eq!(c.committed().len(), 1, "nothing committed before a completion");
    c.run();
    assert_eq!(c.committed(), [(0, true), (1, true), (2, true), (3, true), (4, true)]);
    assert_eq!(c.leader.phase(), Phase::Ready);
    assert_eq!(c.leader.fuo(), 5);
    for pos in [1, 2] {
        assert_eq!(c.entry_counts(pos, 4), Some((3, b"e".to_vec())));
    }
}

/// §4.2 "the leader waits for just a majority", per entry: acknowledgements that arrive out of
/// order commit nothing until the oldest entry has a majority; then all commit, in order.
#[test]
fn t20_commits_in_index_order_whatever_order_acks_arrive() {
    let mut c = prepared(3);
    c.faults[1] = Fault::Held; // only follower 2 answers: it makes each majority
    for v in [b"b", b"c", b"d"] {
        c.propose(v).unwrap();
    }
    // Follower 2's writes land newest first.
    let (mut to_two, to_one): (Vec<_>, Vec<_>) =
        c.queue.drain(..).partition(|p| p.peer == NodeId(2));
    to_two.reverse();
    c.held.extend(to_one);
    c.queue.extend(to_two);
    c.deliver_one();
    c.deliver_one();
    assert_eq!(c.committed().len(), 1, "indexes 3 and 2 acknowledged, 1 not yet: nothing");
    c.deliver_one();
    assert_eq!(c.committed(), [(0, true), (1, true), (2, true), (3, true)]);
    c.release(1);
    c.run();
    assert_eq!(c.committed().len(), 4, "late acknowledgements of committed entries are ignored");
}

/// §4.2 commit piggybacking with entries in flight: a follower applies an entry only once an
/// entry after it says it is decided, so it never applies one its leader may not commit.
#[test]
fn t30_followers_learn_decisions_from_the_counts() {
    let mut c = four_proposed_with(Fault::Held);
    // Follower 1's log receives the four writes; the leader hears nothing back yet.
    for p in c.held.iter().filter(|p| p.peer == NodeId(1)) {
        if let RemoteOp::WriteFromLog { offset, len } = p.op {
            let mut b = vec![0; len as usize];
            c.mems[0].read(Area::Log, offset, &mut b);
            c.mems[1].write(Area::Log, offset, &b);
        }
    }
    let mut replayer = Replayer::new(c.layout, 0);
    let mut applied = Vec::new();
    replayer.poll(&mut c.mems[1], |i, kind, v| {
        assert_eq!(kind, EntryKind::Request);
        applied.push((i, v.to_vec()));
    });
    assert_eq!(
        applied,
        [(0, b"a".to_vec())],
        "1 to 4 were in flight: the entries after 1 say it was not known decided"
    );
    // The leader commits them; the next value's entry says so.
    c.release(1);
    c.release(2);
    c.run();
    assert_eq!(c.committed().len(), 5);
    c.propose(b"f").unwrap();
    c.run();
    replayer.poll(&mut c.mems[1], |i, _, v| applied.push((i, v.to_vec())));
    assert_eq!(applied.len(), 5, "f waits: nothing after it says it is decided yet");
    // Idle for FUO_PUBLISH_AFTER_NS, the leader writes its FUO.
    for _ in 0..3 {
        c.tick();
    }
    c.run();
    replayer.poll(&mut c.mems[1], |i, _, v| applied.push((i, v.to_vec())));
    let values: Vec<&[u8]> = applied.iter().map(|(_, v)| &v[..]).collect();
    assert_eq!(
        values,
        [&b"a"[..], b"b", b"c", b"d", b"e", b"f"],
        "f too: the leader, idle again, wrote its FUO"
    );
}

/// Listing 2 "If it still thinks it is the leader, it calls propose again", with several
/// entries in flight: after an abort every queued value is proposed again from the oldest,
/// through prepare, and each is committed once, in the order proposed.
#[test]
fn t40_an_abort_with_entries_in_flight_proposes_them_again_in_order() {
    let mut c = four_proposed_with(Fault::Denied);
    assert!(!c.aborts().is_empty(), "the refused writes abort the attempt");
    assert_eq!(c.leader.phase(), Phase::Permissions);
    assert_eq!(c.leader.proposals_count(), 4, "the values stay queued");
    assert_eq!(c.leader.in_flight_count(), 0);
    c.faults[1] = Fault::None;
    c.faults[2] = Fault::None;
    c.grant_all();
    c.run();
    assert_eq!(c.committed(), [(0, true), (1, true), (2, true), (3, true), (4, true)]);
    for (i, value) in [(1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")] {
        for pos in 0..3 {
            assert_eq!(c.entry(pos, i).map(|e| e.1), Some(value.to_vec()), "{pos} at {i}");
        }
    }
    assert!(!c.leader.prepared(), "each was found by prepare, so prepare is still on");
    c.propose(b"f").unwrap();
    c.run();
    assert_eq!(c.committed().last(), Some(&(5, true)));
    assert!(c.leader.prepared(), "prepare found nothing at 5: omitted from now on");
}
