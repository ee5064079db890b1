//! What the coordinator leader puts into the next view (§3.2): the join and leave requests it
//! was sent, the members the failure detectors removed, lease and primary changes; and the
//! unique ids it gives joins.
//!
//! The leader gathers changes while a view is being decided and proposes them together in the
//! next one (view `k + 1` is proposed only once view `k` is decided, Appendix B.2). A change
//! that no longer applies to the latest view (a leave of a member already removed) is dropped,
//! never turned into another change.
//!
//! Unique ids (§3.1): a node admitted by the view of epoch `e` gets `((e + 1) << 16) | node`.
//! Two members of decided views with the same id would need the same node admitted by two
//! views of the same epoch, and only one view is decided per epoch: ids are never reused, by
//! whichever leader proposes. A node that restarts joins again and gets a new id; its earlier
//! incarnation is removed by the same view.

use crate::view::{Member, View, MEMBERS_MAX};
use std::collections::{BTreeMap, BTreeSet};

/// One requested change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A node asks to join. `incarnation` is the requesting process's own random number, the
    /// same in every copy of its request: a request repeated while the answer is on its way
    /// does not admit the node twice.
    Join { node: u16, incarnation: u64 },
    /// A member leaves (it names its unique id: a request from an earlier incarnation of the
    /// node changes nothing).
    Leave { member: Member },
    /// A failure detector says the member is gone (crash notification or heartbeat ring).
    Remove { member: Member },
    /// The catastrophic detector's choice (§4.2, the largest clique containing the leader):
    /// the members not in `keep` go. Joins admitted by the same view are not affected.
    KeepOnly { keep: Vec<Member> },
    /// The application's primary from the next view on (it must be a member then).
    Primary { node: u16 },
    /// The lease duration of the next views (a compatible view when nothing else changes).
    Lease { lease_ns: u64 },
}

/// Why a change is refused at once (the requester is told).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the view is full ({MEMBERS_MAX} members)")]
    Full,
    #[error("node id {0} is reserved")]
    ReservedNode(u16),
    #[error("unique id {uid} is not node {node}'s in the latest view (epoch {epoch})")]
    StaleUid { node: u16, uid: u64, epoch: u64 },
}

/// The unique id a join of `node` admitted by the view of epoch `epoch` gets.
pub fn uid_for(epoch: u64, node: u16) -> u64 {
    assert!(epoch < 1 << 47, "epoch {epoch} leaves no room for unique ids");
    ((epoch + 1) << 16) | u64::from(node)
}

/// The changes gathered for the next view.
#[derive(Clone, Debug, Default)]
pub struct Changes {
    /// node → incarnation of its latest join request.
    joins: BTreeMap<u16, u64>,
    /// node → incarnation it was last admitted as, by this leader (not in views: a new leader
    /// that gets a repeated request admits the node once more, under a new id).
    admitted: BTreeMap<u16, u64>,
    gone: BTreeSet<Member>,
    keep: Option<BTreeSet<Member>>,
    primary: Option<u16>,
    lease_ns: Option<u64>,
    /// Every view with members names a primary (an application such as uKharon-KV needs one):
    /// the oldest member when none is named yet.
    name_primary: bool,
}

impl Changes {
    /// Changes for a group whose views always name a primary when they have members
    /// (`name_primary`), or only the one the application names ([`Change::Primary`]).
    pub fn new(name_primary: bool) -> Changes {
        Changes { name_primary, ..Changes::default() }
    }

    /// The same policy, nothing gathered (a leader that steps down drops what it gathered).
    pub fn cleared(&self) -> Changes {
        Changes::new(self.name_primary)
    }

    /// Takes a change for the next view, or refuses it against `latest`, the latest view.
    pub fn add(&mut self, change: Change, latest: &View) -> Result<(), Refusal> {
        match change {
            Change::Join { node, incarnation } => {
                if node == u16::MAX {
                    return Err(Refusal::ReservedNode(node));
                }
                if self.admitted.get(&node) == Some(&incarnation) && latest.uid_of(node).is_some() {
                    return Ok(()); // a repeated request: the latest view answers it
                }
                let joining = self.joins.len() + usize::from(!self.joins.contains_key(&node));
                if latest.uid_of(node).is_none() && latest.members.len() + joining > MEMBERS_MAX {
                    return Err(Refusal::Full);
                }
                self.joins.insert(node, incarnation);
            }
            Change::Leave { member } | Change::Remove { member } => {
                if !latest.contains(member) {
                    return Err(Refusal::StaleUid {
                        node: member.node,
                        uid: member.uid,
                        epoch: latest.epoch,
                    });
                }
                self.gone.insert(member);
            }
            Change::KeepOnly { keep } => self.keep = Some(keep.into_iter().collect()),
            // A request for the primary the latest view names already is a copy repeated
            // while the answer was on its way: kept, it would name that node again in a later
            // view, once another primary had taken over, or a new process under its id.
            Change::Primary { node } if latest.primary == Some(node) => {}
            Change::Primary { node } => self.primary = Some(node),
            Change::Lease { lease_ns } => self.lease_ns = Some(lease_ns),
        }
        Ok(())
    }

    /// The next view after `latest` with every change that still applies, or `None` when
    /// nothing would change.
    pub fn next_view(&self, latest: &View) -> Option<View> {
        let epoch = latest.epoch + 1;
        let mut members: Vec<Member> = latest
            .members
            .iter()
            .copied()
            .filter(|m| !self.gone.contains(m))
            .filter(|m| self.keep.as_ref().is_none_or(|k| k.contains(m)))
            .filter(|m| !self.joins.contains_key(&m.node))
            .collect();
        for &node in self.joins.keys() {
            members.push(Member { node, uid: uid_for(epoch, node) });
        }
        members.sort_unstable();
        members.truncate(MEMBERS_MAX);
        let wanted = self.primary.or(latest.primary);
        // The oldest member (lowest unique id: admitted first) has had the longest to catch
        // up with the primary's state, so it is the likeliest to hold all of it.
        let oldest = || members.iter().min_by_key(|m| m.uid).map(|m| m.node);
        let primary = match wanted {
            Some(p) if members.iter().any(|m| m.node == p) => Some(p),
            // The primary left: the oldest remaining member takes over (the application may
            // name another with `Change::Primary`).
            Some(_) => oldest(),
            None if self.name_primary => oldest(),
            None => None,
        };
        let lease_ns = self.lease_ns.unwrap_or(latest.lease_ns);
        let next = latest.successor(members, primary, lease_ns);
        let unchanged = next.is_compatible_successor(latest) && lease_ns == latest.lease_ns;
        (!unchanged).then_some(next)
    }

    /// `decided` became the latest view: what it carried out, or what no longer applies to
    /// it, is dropped.
    pub fn settle(&mut self, decided: &View) {
        let epoch_uid = |node: u16| uid_for(decided.epoch, node);
        let joins = std::mem::take(&mut self.joins);
        for (node, incarnation) in joins {
            if decided.uid_of(node) == Some(epoch_uid(node)) {
                self.admitted.insert(node, incarnation);
            } else {
                self.joins.insert(node, incarnation);
            }
        }
        self.gone.retain(|m| decided.contains(*m));
        if let Some(keep) = &self.keep {
            if decided.members.iter().all(|m| keep.contains(m) || m.uid == epoch_uid(m.node)) {
                self.keep = None;
            }
        }
        // Carried out, or for a node the view no longer has (a process that comes back under
        // its id is another one, which nobody asked for).
        if self.primary.is_some_and(|p| decided.primary == Some(p) || decided.uid_of(p).is_none()) {
            self.primary = None;
        }
        if self.lease_ns == Some(decided.lease_ns) {
            self.lease_ns = None;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.joins.is_empty()
            && self.gone.is_empty()
            && self.keep.is_none()
            && self.primary.is_none()
            && self.lease_ns.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(node: u16, uid: u64) -> Member {
        Member { node, uid }
    }

    fn v0() -> View {
        View::initial(9, vec![m(0, uid_for(0, 0)), m(1, uid_for(0, 1))], Some(0), 20_000)
    }

    /// §3.2: joins and leaves go to the leader and are answered with the new view; each join
    /// gets a unique id that no later view gives again (§3.1).
    #[test]
    fn joins_get_ids_no_view_gives_again() {
        let mut c = Changes::default();
        let mut latest = v0();
        let mut seen = BTreeSet::new();
        for m in &latest.members {
            seen.insert(m.uid);
        }
        for round in 0..20u64 {
            c.add(Change::Join { node: 5, incarnation: round }, &latest).unwrap();
            if round % 3 == 0 {
                c.add(Change::Join { node: 7, incarnation: round }, &latest).unwrap();
            }
            let next = c.next_view(&latest).expect("a join changes the view");
            next.check().unwrap();
            for m in &next.members {
                if !latest.contains(*m) {
                    assert!(seen.insert(m.uid), "unique id {} given twice", m.uid);
                }
            }
            c.settle(&next);
            latest = next;
        }
        assert!(c.is_empty());
    }

    #[test]
    fn a_repeated_join_admits_once_and_a_restarted_node_replaces_its_old_self() {
        let mut c = Changes::default();
        let latest = v0();
        c.add(Change::Join { node: 3, incarnation: 77 }, &latest).unwrap();
        let v1 = c.next_view(&latest).unwrap();
        c.settle(&v1);
        c.add(Change::Join { node: 3, incarnation: 77 }, &v1).unwrap();
        assert_eq!(c.next_view(&v1), None, "the repeated request is answered by v1");
        c.add(Change::Join { node: 3, incarnation: 78 }, &v1).unwrap();
        let v2 = c.next_view(&v1).unwrap();
        assert_eq!(v2.uid_of(3), Some(uid_for(2, 3)));
        assert_eq!(v2.members.len(), 3);
        assert!(!v2.contains(m(3, uid_for(1, 3))), "the old incarnation goes");
    }

    /// A leave that names an id the latest view does not give the node is refused: a request
    /// from an earlier incarnation never removes the current one.
    #[test]
    fn a_stale_unique_id_is_refused() {
        let mut c = Changes::default();
        let latest = v0();
        let stale = m(1, uid_for(0, 1) + (1 << 16));
        assert_eq!(
            c.add(Change::Leave { member: stale }, &latest),
            Err(Refusal::StaleUid { node: 1, uid: stale.uid, epoch: 0 })
        );
        assert!(c.is_empty());
        c.add(Change::Remove { member: latest.members[1] }, &latest).unwrap();
        let v1 = c.next_view(&latest).unwrap();
        assert_eq!(v1.nodes().collect::<Vec<_>>(), vec![0]);
        assert_eq!(v1.wait_ns, 20_000, "a removal waits out the earlier leases");
    }

    /// §6.3: a lease change alone is a compatible view; with a member change it is not.
    #[test]
    fn a_lease_change_alone_is_compatible() {
        let mut c = Changes::default();
        let latest = v0();
        c.add(Change::Lease { lease_ns: 40_000 }, &latest).unwrap();
        let v1 = c.next_view(&latest).unwrap();
        assert!(v1.is_compatible_successor(&latest));
        c.settle(&v1);
        assert!(c.is_empty());
        assert_eq!(c.next_view(&v1), None, "nothing left to change");
    }

    #[test]
    fn the_clique_keeps_its_members_and_the_primary_moves_when_it_goes() {
        let mut c = Changes::default();
        let mut latest = v0();
        latest.members.push(m(4, uid_for(0, 4)));
        c.add(Change::KeepOnly { keep: vec![latest.members[1], latest.members[2]] }, &latest)
            .unwrap();
        let v1 = c.next_view(&latest).unwrap();
        assert_eq!(v1.nodes().collect::<Vec<_>>(), vec![1, 4]);
        assert_eq!(v1.primary, Some(1));
        c.settle(&v1);
        assert!(c.is_empty());
    }

    #[test]
    fn a_group_that_names_a_primary_takes_the_oldest_member() {
        let empty = View::initial(9, Vec::new(), None, 20_000);
        let mut plain = Changes::default();
        plain.add(Change::Join { node: 5, incarnation: 1 }, &empty).unwrap();
        assert_eq!(plain.next_view(&empty).unwrap().primary, None);
        let mut c = Changes::new(true);
        c.add(Change::Join { node: 5, incarnation: 1 }, &empty).unwrap();
        let v1 = c.next_view(&empty).unwrap();
        assert_eq!(v1.primary, Some(5));
        c.settle(&v1);
        // A lower node id that joins later is younger: the primary stays, then goes to the
        // oldest remaining member when it leaves.
        c.add(Change::Join { node: 2, incarnation: 1 }, &v1).unwrap();
        c.add(Change::Join { node: 3, incarnation: 1 }, &v1).unwrap();
        let v2 = c.next_view(&v1).unwrap();
        assert_eq!(v2.primary, Some(5));
        c.settle(&v2);
        c.add(Change::Join { node: 1, incarnation: 1 }, &v2).unwrap();
        let v3 = c.next_view(&v2).unwrap();
        c.settle(&v3);
        c.add(Change::Remove { member: v3.members[3] }, &v3).unwrap();
        let v4 = c.next_view(&v3).unwrap();
        assert_eq!(v4.nodes().collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(v4.primary, Some(2), "2 and 3 joined together, before 1");
        assert_eq!(c.cleared().next_view(&v4), None);
    }

    /// A member that asked for another primary repeats its request until a view answers it:
    /// a copy that arrives after that view, or a request for a member removed before it was
    /// carried out, names nobody later (such a request once named a node again when a new
    /// process under its id joined, taking the role from the primary that served meanwhile).
    #[test]
    fn a_stale_primary_request_names_nobody_later() {
        let mut c = Changes::new(true);
        let mut v0 = v0();
        v0.members.push(m(4, uid_for(0, 4)));
        c.add(Change::Primary { node: 4 }, &v0).unwrap();
        let v1 = c.next_view(&v0).unwrap();
        assert_eq!(v1.primary, Some(4));
        c.settle(&v1);
        // The copy sent before the requester learnt v1.
        c.add(Change::Primary { node: 4 }, &v1).unwrap();
        assert_eq!(c.next_view(&v1), None, "v1 answered it already");
        assert!(c.is_empty());
        // Asked for, then removed in the same view: the request goes with it.
        c.add(Change::Primary { node: 1 }, &v1).unwrap();
        c.add(Change::Remove { member: m(1, uid_for(0, 1)) }, &v1).unwrap();
        let v2 = c.next_view(&v1).unwrap();
        assert_eq!(v2.primary, Some(0), "the oldest member, for the one asked for is gone");
        c.settle(&v2);
        assert!(c.is_empty());
        c.add(Change::Join { node: 1, incarnation: 9 }, &v2).unwrap();
        let v3 = c.next_view(&v2).unwrap();
        assert_eq!(v3.primary, Some(0), "the new process under node 1 was never asked for");
    }

    #[test]
    fn a_full_view_refuses_joins() {
        let mut c = Changes::default();
        let members = (0..MEMBERS_MAX as u16).map(|n| m(n, uid_for(0, n))).collect();
        let latest = View::initial(1, members, None, 0);
        assert_eq!(c.add(Change::Join { node: 100, incarnation: 1 }, &latest), Err(Refusal::Full));
        c.add(Change::Join { node: 3, incarnation: 1 }, &latest).unwrap();
        assert_eq!(
            c.add(Change::Join { node: u16::MAX, incarnation: 1 }, &latest),
            Err(Refusal::ReservedNode(u16::MAX))
        );
    }
}
