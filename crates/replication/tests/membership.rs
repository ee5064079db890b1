//! Engine tests of membership changes (Mu paper §5.4, "Adding and Removing Replicas"), with no
//! fabric: who is asked for permission and counted, the membership entry travelling alone, the
//! leader starting over under the new configuration, a leader removing itself, and a
//! configuration learned by catching up.

mod common;

use common::Cluster;
use mu_fabric::NodeId;
use mu_log::{EntryKind, FUO_OFFSET};
use mu_replication::membership::Change;
use mu_replication::{AbortReason, Area, Memory, Phase, ProposeError, RemoteOp};

/// Universe of four, members 0–2: the leader (0) asks only the members.
fn three_of_four(outstanding_max: usize) -> Cluster {
    let mut c = Cluster::new(4, 0);
    c.set_outstanding(outstanding_max);
    c.leader.set_applied_members(0b0111);
    c.become_leader();
    assert_eq!(asked_since(&c, 0), [0, 1, 2], "only members are asked");
    c
}

fn asked_since(c: &Cluster, since: usize) -> Vec<u16> {
    c.asked_since(since)
}

fn propose_change(c: &mut Cluster, change: Change) -> Result<(), ProposeError> {
    c.propose_kind(EntryKind::Membership, &change.encode())
}

/// §5.4: a grant from a replica outside the configuration is not counted; once the entry adding
/// it is decided, the leader asks the four members again and needs three of them.
#[test]
fn t10_an_added_replica_is_asked_and_counted_after_the_entry() {
    let mut c = three_of_four(1);
    c.grant(3); // not a member: ignored
    c.grant_all();
    c.run();
    assert_eq!(c.leader.confirmed(), [NodeId(0), NodeId(1), NodeId(2)]);
    propose_change(&mut c, Change::Add(NodeId(3))).unwrap();
    let since = c.actions.len();
    c.run();
    assert_eq!(c.committed(), [(0, true)]);
    assert_eq!(c.leader.members_mask(), 0b1111);
    assert_eq!(c.leader.phase(), Phase::Permissions, "starts over under the new configuration");
    assert_eq!(asked_since(&c, since), [0, 1, 2, 3]);
    // The followers were told at once that the entry is decided (their FUO is past it).
    for pos in 1..3 {
        assert_eq!(c.mems[pos].load_u64(Area::Log, FUO_OFFSET), 1, "replica {pos}");
    }
    // Two of four grants plus time: not a majority any more.
    c.grant(0);
    c.grant(1);
    c.tick();
    assert_eq!(c.leader.phase(), Phase::Permissions);
    c.grant(3);
    c.tick();
    assert_ne!(c.leader.phase(), Phase::Permissions);
    c.run();
    c.propose(b"after").unwrap();
    c.run();
    assert_eq!(c.committed(), [(0, true), (1, true)]);
    assert_eq!(c.entry(3, 1).map(|e| e.1), Some(b"after".to_vec()), "3 is written to");
}

/// §5.4: a membership entry travels alone: entries before it commit first, and the ones after
/// it wait until it is decided and the leader prepared under the new configuration.
#[test]
fn t20_a_membership_entry_travels_alone() {
    let mut c = three_of_four(4);
    c.grant_all();
    c.run();
    c.propose(b"a").unwrap();
    c.run(); // prepare found nothing: prepare omitted from here on
    let since = c.actions.len();
    c.faults[1] = common::Fault::Held;
    c.faults[2] = common::Fault::Held;
    c.propose(b"b").unwrap();
    propose_change(&mut c, Change::Add(NodeId(3))).unwrap();
    c.propose(b"c").unwrap();
    c.run();
    let slot = |index| c.layout.slot_offset(index);
    let accepts: Vec<u64> = c
        .posts_since(since)
        .into_iter()
        .filter_map(|(_, op)| match op {
            RemoteOp::WriteFromLog { offset, .. } => Some(offset),
            _ => None,
        })
        .collect();
    assert_eq!(accepts, [slot(1), slot(1)], "only b is out, to both followers");
    c.release(1);
    c.release(2);
    c.run();
    // b, then the change, then c under the new configuration (with 3 granting).
    assert_eq!(c.committed(), [(0, true), (1, true), (2, true)]);
    assert_eq!(c.leader.phase(), Phase::Permissions);
    c.grant_all();
    c.run();
    assert_eq!(c.committed(), [(0, true), (1, true), (2, true), (3, true)]);
    assert_eq!(c.entry(3, 3).map(|e| e.1), Some(b"c".to_vec()));
}

/// §5.4: "once a replica sees it has been removed, it stops executing": a leader that removes
/// itself stops leading once the entry is decided, and cannot lead again.
#[test]
fn t30_a_leader_removing_itself_stops_leading() {
    let mut c = Cluster::ready(3, 0);
    propose_change(&mut c, Change::Remove(NodeId(0))).unwrap();
    c.run();
    assert_eq!(c.committed(), [(0, true)]);
    assert_eq!(c.aborts().last(), Some(&AbortReason::Removed));
    assert_eq!(c.leader.phase(), Phase::Follower);
    let me = c.me();
    let mut out = Vec::new();
    assert!(!c.leader.become_leader(&c.mems[me], &mut out), "not a member: never leads again");
    assert!(out.is_empty());
}

/// §5.4 with Listing 3: a new leader catching up on entries that include a membership change
/// starts over from permissions under the configuration they make.
#[test]
fn t40_a_change_learned_by_catching_up_restarts_the_permissions() {
    let mut c = three_of_four(1);
    // Replica 1 holds a decided entry adding 3, at index 0, and its FUO is past it.
    let mut b = vec![0; c.layout.slot_bytes() as usize];
    let value = Change::Add(NodeId(3)).encode();
    let n = c.layout.encode(0, 5, EntryKind::Membership, &value, &mut b).unwrap();
    c.mems[1].write(Area::Log, c.layout.slot_offset(0), &b[..n]);
    c.mems[1].store_u64(Area::Log, FUO_OFFSET, 1);
    let since = c.actions.len();
    c.grant_all();
    c.run();
    assert_eq!(c.leader.fuo(), 1);
    assert_eq!(c.leader.members_mask(), 0b1111);
    assert_eq!(asked_since(&c, since), [0, 1, 2, 3], "asked again, the new member too");
}

/// One change at a time, and only real changes.
#[test]
fn t50_changes_are_checked() {
    let mut c = three_of_four(4);
    c.grant_all();
    c.run();
    let err = propose_change(&mut c, Change::Add(NodeId(2))).unwrap_err();
    assert!(matches!(err, ProposeError::Membership(ref why) if why.contains("already")), "{err}");
    let err = propose_change(&mut c, Change::Add(NodeId(9))).unwrap_err();
    assert!(matches!(err, ProposeError::Membership(_)), "{err}");
    c.faults[1] = common::Fault::Held;
    c.faults[2] = common::Fault::Held;
    propose_change(&mut c, Change::Add(NodeId(3))).unwrap();
    let err = propose_change(&mut c, Change::Remove(NodeId(1))).unwrap_err();
    assert!(matches!(err, ProposeError::Membership(ref why) if why.contains("in progress")));
}
