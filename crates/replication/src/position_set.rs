//! Sets of replicas, by position in the [`ReplicaSet`]: the configuration's members, the
//! confirmed followers, who granted or was asked for permission, who may write a log.
//!
//! One bit per position of a `u64`, so a set is `Copy`, costs no allocation on the accept path,
//! and is what the runtime publishes as a mask ([`PositionSet::bits`]). That bounds a cluster to
//! [`REPLICAS_MAX`] replicas.

use crate::ReplicaSet;
use mu_fabric::NodeId;

/// The most replicas a cluster may have: one bit of a [`PositionSet`] each.
pub const REPLICAS_MAX: usize = 64;
const _: () = assert!(REPLICAS_MAX <= u64::BITS as usize);

/// A set of positions in a [`ReplicaSet`] (each below [`REPLICAS_MAX`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PositionSet(u64);

impl PositionSet {
    pub const EMPTY: PositionSet = PositionSet(0);

    /// The set whose bit `pos` is set for each position `pos` in it.
    pub const fn from_bits(bits: u64) -> PositionSet {
        PositionSet(bits)
    }

    /// The mask of the set: bit `pos` for each position `pos` in it.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// Positions `0..len`: every replica of a set of `len` (at most [`REPLICAS_MAX`]).
    pub fn first(len: usize) -> PositionSet {
        assert!(len <= REPLICAS_MAX, "{len} replicas: at most {REPLICAS_MAX}");
        PositionSet(u64::MAX.checked_shr(u64::BITS - len as u32).unwrap_or(0))
    }

    /// Every replica of `replicas`.
    pub fn all(replicas: &ReplicaSet) -> PositionSet {
        PositionSet::first(replicas.len())
    }

    /// The set holding `pos` alone.
    pub fn single(pos: usize) -> PositionSet {
        PositionSet(PositionSet::bit(pos))
    }

    fn bit(pos: usize) -> u64 {
        debug_assert!(pos < REPLICAS_MAX, "position {pos} is beyond {REPLICAS_MAX}");
        1 << pos
    }

    pub fn contains(self, pos: usize) -> bool {
        self.0 & PositionSet::bit(pos) != 0
    }

    pub fn insert(&mut self, pos: usize) {
        self.0 |= PositionSet::bit(pos);
    }

    pub fn remove(&mut self, pos: usize) {
        self.0 &= !PositionSet::bit(pos);
    }

    /// Inserts `pos` if `member`, removes it otherwise.
    pub fn set(&mut self, pos: usize, member: bool) {
        if member {
            self.insert(pos);
        } else {
            self.remove(pos);
        }
    }

    /// How many positions the set holds.
    pub fn count(self) -> usize {
        self.0.count_ones() as usize
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The positions in both sets.
    pub fn intersection(self, other: PositionSet) -> PositionSet {
        PositionSet(self.0 & other.0)
    }

    /// The positions in either set.
    pub fn union(self, other: PositionSet) -> PositionSet {
        PositionSet(self.0 | other.0)
    }

    /// The positions of this set that are not in `other`.
    pub fn difference(self, other: PositionSet) -> PositionSet {
        PositionSet(self.0 & !other.0)
    }

    /// The positions, lowest first.
    pub fn iter(self) -> Positions {
        Positions(self.0)
    }

    /// The ids at the set's positions, in order (`ids` by position, as [`ReplicaSet::ids`]
    /// gives them).
    pub fn ids(self, ids: &[NodeId]) -> Vec<NodeId> {
        self.iter().map(|pos| ids[pos]).collect()
    }
}

impl IntoIterator for PositionSet {
    type Item = usize;
    type IntoIter = Positions;

    fn into_iter(self) -> Positions {
        self.iter()
    }
}

impl FromIterator<usize> for PositionSet {
    fn from_iter<I: IntoIterator<Item = usize>>(positions: I) -> PositionSet {
        let mut set = PositionSet::EMPTY;
        for pos in positions {
            set.insert(pos);
        }
        set
    }
}

/// The positions of a [`PositionSet`], lowest first.
#[derive(Clone, Debug)]
pub struct Positions(u64);

impl Iterator for Positions {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let pos = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(pos)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.0.count_ones() as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Positions {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_hold_what_was_inserted_and_iterate_in_order() {
        let mut s = PositionSet::EMPTY;
        assert!(s.is_empty());
        for pos in [5, 0, 63, 5] {
            s.insert(pos);
        }
        assert_eq!(s.count(), 3);
        assert!(s.contains(0) && s.contains(5) && s.contains(63) && !s.contains(1));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 5, 63]);
        s.remove(5);
        s.set(1, true);
        s.set(63, false);
        assert_eq!(s.bits(), 0b11);
        assert_eq!([4, 2].into_iter().collect::<PositionSet>(), PositionSet::from_bits(0b10100));
    }

    #[test]
    fn first_covers_every_length_up_to_the_maximum() {
        assert_eq!(PositionSet::first(0), PositionSet::EMPTY);
        assert_eq!(PositionSet::first(3).bits(), 0b111);
        assert_eq!(PositionSet::first(REPLICAS_MAX).bits(), u64::MAX);
        assert_eq!(PositionSet::first(REPLICAS_MAX).count(), REPLICAS_MAX);
    }

    #[test]
    fn set_operations_and_ids() {
        let a = PositionSet::from_bits(0b0110);
        let b = PositionSet::from_bits(0b1100);
        assert_eq!(a.union(b).bits(), 0b1110);
        assert_eq!(a.intersection(b).bits(), 0b0100);
        assert_eq!(a.difference(b).bits(), 0b0010);
        let ids: Vec<NodeId> = (10..14).map(NodeId).collect();
        assert_eq!(a.ids(&ids), vec![NodeId(11), NodeId(12)]);
        assert_eq!(PositionSet::single(3).bits(), 0b1000);
    }
}
