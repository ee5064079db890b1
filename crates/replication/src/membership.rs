//! Adding and removing replicas (Mu paper §5.4): "consensus itself informs replicas about the
//! change", through a special log entry.
//!
//! A cluster has a fixed universe of replicas ([`crate::ReplicaSet`], every id that may ever be
//! a member, each with its connections set up in advance) and a **configuration**: the members,
//! a bit mask of positions in the universe. The configuration that decides index `i` is the
//! initial one changed by the membership entries below `i`, in order. Every replica agrees on
//! the entries below `i` once they are decided, so every replica and every leader agree on the
//! configuration of each index.
//!
//! The leader keeps a membership entry alone in flight, and after committing it, or after its
//! catch-up copied one, starts over from permissions under the new configuration (its confirmed
//! set and its prepare belonged to the old one); see [`crate::Leader`]. Those start-overs are
//! what make changes safe: no leader prepares or commits an index with a majority of another
//! configuration than that index's. The TLA+ model `spec/tla/MuReconfig.tla` shows it: it stays
//! safe even with entries that change two replicas at once, and breaks when a start-over is
//! left out.
//!
//! A membership entry still adds or removes **one** replica ([`Change`]), for margin: any
//! majority of the old configuration and any majority of the new one then share a replica, so
//! a leader that went on under the old configuration by mistake would still meet every value
//! the new one could have chosen. The change is relative, and applying it is total: adding a
//! member or removing a non-member changes nothing, and so does removing the last member or a
//! malformed value; every replica computes the same result from the same bytes.

use crate::{PositionSet, ReplicaSet};
use mu_fabric::NodeId;

/// One change of the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Add(NodeId),
    Remove(NodeId),
}

/// Bytes of an encoded change: an operation byte and the id.
pub const CHANGE_BYTES: usize = 3;

const OP_ADD: u8 = 1;
const OP_REMOVE: u8 = 2;

impl Change {
    /// The value of the membership entry that carries this change.
    pub fn encode(self) -> [u8; CHANGE_BYTES] {
        let (op, id) = match self {
            Change::Add(id) => (OP_ADD, id),
            Change::Remove(id) => (OP_REMOVE, id),
        };
        let id = id.0.to_le_bytes();
        [op, id[0], id[1]]
    }

    /// The change a membership entry's value carries, if it is well formed.
    pub fn decode(value: &[u8]) -> Option<Change> {
        let [op, a, b] = value.try_into().ok()?;
        let id = NodeId(u16::from_le_bytes([a, b]));
        match op {
            OP_ADD => Some(Change::Add(id)),
            OP_REMOVE => Some(Change::Remove(id)),
            _ => None,
        }
    }

    /// The replica this change is about.
    pub fn replica(self) -> NodeId {
        match self {
            Change::Add(id) | Change::Remove(id) => id,
        }
    }

    /// `members` after this change, or why the change cannot be proposed there: the replica is
    /// outside the universe, already is (or is not) a member, or would be the last one removed.
    pub fn check(self, universe: &ReplicaSet, members: u64) -> Result<u64, String> {
        let id = self.replica();
        let Some(pos) = universe.position(id) else {
            return Err(format!(
                "replica {id} is not one of the cluster's replicas {:?}",
                universe.ids()
            ));
        };
        let mut members = PositionSet::from_bits(members);
        match self {
            Change::Add(_) if members.contains(pos) => {
                Err(format!("replica {id} is a member already"))
            }
            Change::Remove(_) if !members.contains(pos) => {
                Err(format!("replica {id} is not a member"))
            }
            Change::Remove(_) if members == PositionSet::single(pos) => {
                Err(format!("replica {id} is the last member; a cluster needs one"))
            }
            Change::Add(_) => {
                members.insert(pos);
                Ok(members.bits())
            }
            Change::Remove(_) => {
                members.remove(pos);
                Ok(members.bits())
            }
        }
    }
}

/// The configuration after a membership entry with `value` is applied to `members`: the change
/// it carries where that is a change (see the module docs), `members` otherwise.
pub fn apply(universe: &ReplicaSet, members: u64, value: &[u8]) -> u64 {
    Change::decode(value).and_then(|c| c.check(universe, members).ok()).unwrap_or(members)
}

/// The smallest number of members that any two groups of that size share one of.
pub fn majority(members: u64) -> usize {
    PositionSet::from_bits(members).count() / 2 + 1
}

/// The mask of `ids` (each must be in the universe).
pub fn mask_of(universe: &ReplicaSet, ids: &[NodeId]) -> Result<u64, String> {
    let positions = ids.iter().map(|&id| {
        universe.position(id).ok_or_else(|| {
            format!("replica {id} is not one of the cluster's replicas {:?}", universe.ids())
        })
    });
    positions.collect::<Result<PositionSet, String>>().map(PositionSet::bits)
}

/// Every replica of the universe as members.
pub fn all(universe: &ReplicaSet) -> u64 {
    PositionSet::all(universe).bits()
}

/// The ids at the positions set in `members`, in order (`ids` by position, as
/// [`ReplicaSet::ids`] gives them).
pub fn ids_of(ids: &[NodeId], members: u64) -> Vec<NodeId> {
    PositionSet::from_bits(members).ids(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn universe() -> ReplicaSet {
        ReplicaSet::new((0..5).map(NodeId).collect()).unwrap()
    }

    #[test]
    fn changes_round_trip_and_apply_once() {
        let u = universe();
        for c in [Change::Add(NodeId(3)), Change::Remove(NodeId(1))] {
            assert_eq!(Change::decode(&c.encode()), Some(c));
        }
        let m = 0b00111;
        assert_eq!(apply(&u, m, &Change::Add(NodeId(3)).encode()), 0b01111);
        assert_eq!(apply(&u, m, &Change::Remove(NodeId(1)).encode()), 0b00101);
        // Not a change: the configuration stays as it is, at every replica alike.
        assert_eq!(apply(&u, m, &Change::Add(NodeId(2)).encode()), m);
        assert_eq!(apply(&u, m, &Change::Remove(NodeId(4)).encode()), m);
        assert_eq!(apply(&u, m, &Change::Add(NodeId(9)).encode()), m);
        assert_eq!(apply(&u, 0b1, &Change::Remove(NodeId(0)).encode()), 0b1);
        assert_eq!(apply(&u, m, b"\x07\x00\x00"), m);
        assert_eq!(apply(&u, m, b"\x01\x00"), m);
    }

    #[test]
    fn majorities_of_configurations_one_change_apart_intersect() {
        // Every majority of a configuration and every majority of one with a replica more or
        // less share a replica: the sizes add up to more than the union holds.
        for n in 1..=9usize {
            let small = majority((1u64 << n) - 1);
            let large = majority((1u64 << (n + 1)) - 1);
            assert!(small + large > n + 1, "n = {n}");
        }
    }

    #[test]
    fn checks_say_why() {
        let u = universe();
        assert!(Change::Add(NodeId(2)).check(&u, 0b111).unwrap_err().contains("already"));
        assert!(Change::Remove(NodeId(0)).check(&u, 0b1).unwrap_err().contains("last member"));
        assert!(Change::Add(NodeId(7)).check(&u, 0b1).unwrap_err().contains("not one of"));
        assert_eq!(mask_of(&u, &[NodeId(0), NodeId(4)]), Ok(0b10001));
        assert_eq!(ids_of(u.ids(), 0b10001), vec![NodeId(0), NodeId(4)]);
        assert_eq!(all(&u), 0b11111);
    }
}
