//! The configuration the leader works under (§5.4): the members that decide its FUO, and the
//! changes it may propose.

use super::{Leader, ProposeError};
use crate::membership::{self, Change};
use crate::{Area, Memory, PositionSet, ReplicaSet};
use mu_log::{EntryKind, Slot, HEAD_OFFSET};

/// The configurations the leader knows of, as positions in the replica set.
pub(super) struct Configuration {
    /// The configuration that decides our FUO: only members are asked for permission and
    /// counted.
    pub(super) members: PositionSet,
    /// The configuration after the entries our replayer applied (below our log head), as the
    /// runtime tells it: where working out `members` starts.
    pub(super) applied: PositionSet,
}

impl Configuration {
    /// Every replica of the set, until the runtime says otherwise.
    pub(super) fn new(replicas: &ReplicaSet) -> Configuration {
        Configuration { members: PositionSet::all(replicas), applied: PositionSet::all(replicas) }
    }
}

impl Leader {
    /// The configuration that decides our FUO (§5.4), as a mask of positions in the replica set.
    pub fn members_mask(&self) -> u64 {
        self.config.members.bits()
    }

    pub(super) fn is_member(&self, pos: usize) -> bool {
        self.config.members.contains(pos)
    }

    /// More than half of the current configuration's members.
    pub(super) fn majority(&self) -> usize {
        membership::majority(self.config.members.bits())
    }

    /// The runtime's replayer applied entries up to our log head, and the configuration after
    /// them is `members` (the initial one at first; after a snapshot is installed, the one it
    /// carries).
    pub fn set_applied_members(&mut self, members: u64) {
        self.config.applied = PositionSet::from_bits(members);
    }

    /// The configuration that decides our FUO: the applied one, changed by the membership
    /// entries between our log head and our FUO (decided entries, still in our log: a slot is
    /// reused only once we applied its entry). Only headers are read, and whole slots where a
    /// header says membership.
    pub(super) fn members_at_fuo(&mut self, mem: &impl Memory) -> PositionSet {
        let head = mem.load_u64(Area::Log, HEAD_OFFSET);
        let mut members = self.config.applied;
        let mut slot = std::mem::take(&mut self.scan_buf);
        // Not past a lap from the head: no slot there holds an entry we have not applied (a
        // leader writes no further), and an FUO word a faulty leader wrote far on would keep
        // this loop going for ever.
        for index in head..self.fuo.min(head.saturating_add(self.layout.slots_count())) {
            let offset = self.layout.slot_offset(index);
            mem.read(Area::Log, offset, &mut slot[..16]);
            if EntryKind::from_u8(slot[12]) != Some(EntryKind::Membership) {
                continue;
            }
            mem.read(Area::Log, offset, &mut slot);
            if let Slot::Entry(e) = self.layout.decode(index, &slot) {
                if e.kind == EntryKind::Membership {
                    members = self.apply_change_to(members, e.value);
                }
            }
        }
        self.scan_buf = slot;
        members
    }

    /// Whether a membership change with `value` may be proposed now: well formed, a change of the
    /// current configuration, and no other one waiting (one at a time, so that each is checked
    /// against the configuration it will change). It is applied relative to the configuration
    /// at its index, whatever was decided in between (see [`membership`]).
    pub fn check_change(&self, value: &[u8]) -> Result<(), ProposeError> {
        let change = Change::decode(value)
            .ok_or_else(|| ProposeError::Membership("malformed membership entry".into()))?;
        if self.proposals.queue.iter().any(|p| p.kind == EntryKind::Membership) {
            return Err(ProposeError::Membership("another change is in progress".into()));
        }
        change
            .check(&self.replicas, self.config.members.bits())
            .map(|_| ())
            .map_err(ProposeError::Membership)
    }

    /// The current configuration after a membership entry with `value` (see
    /// [`membership::apply`]).
    pub(super) fn apply_change(&self, value: &[u8]) -> PositionSet {
        self.apply_change_to(self.config.members, value)
    }

    fn apply_change_to(&self, members: PositionSet, value: &[u8]) -> PositionSet {
        PositionSet::from_bits(membership::apply(&self.replicas, members.bits(), value))
    }
}
