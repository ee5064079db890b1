//! The leader's scratch area: one block per replica for what the steps read from its log, then
//! the catch-up staging slots.

use super::Leader;
use crate::ReplicaSet;
use mu_log::{LogLayout, FUO_OFFSET, HEAD_OFFSET};

pub(super) const SCRATCH_MIN_PROPOSAL: u64 = 0;

/// Where a fence's read lands (nobody looks at it).
pub(super) const SCRATCH_FENCE: u64 = 8;

/// A follower's log words from FUO to the log head land here (one read of both).
pub(super) const SCRATCH_FUO: u64 = 64;

pub(super) const SCRATCH_HEAD: u64 = SCRATCH_FUO + (HEAD_OFFSET - FUO_OFFSET);

pub(super) const SCRATCH_SLOT: u64 = (SCRATCH_HEAD + 8).next_multiple_of(64);

/// Catch-up reads this many slots at a time into the scratch area, then copies them into our log
/// with guarded writes. Reading straight into the log would bypass the guard: a read posted
/// before our permission manager gave our log to another leader could land after it, over that
/// leader's entries.
pub const CATCH_UP_BATCH_SLOTS: u64 = 16;

impl Leader {
    pub(super) fn scratch_block(layout: &LogLayout) -> u64 {
        (SCRATCH_SLOT + u64::from(layout.slot_bytes())).next_multiple_of(64)
    }

    /// Bytes of scratch memory a leader of `replicas` with `layout` needs: one block per replica
    /// for what prepare reads, then the catch-up staging slots.
    pub fn scratch_bytes(replicas: &ReplicaSet, layout: &LogLayout) -> usize {
        (Leader::staging_offset(replicas, layout)
            + CATCH_UP_BATCH_SLOTS * u64::from(layout.slot_bytes())) as usize
    }

    fn staging_offset(replicas: &ReplicaSet, layout: &LogLayout) -> u64 {
        Leader::scratch_block(layout) * replicas.len() as u64
    }

    pub(super) fn staging_slot(&self, k: u64) -> u64 {
        Leader::staging_offset(&self.replicas, &self.layout)
            + k * u64::from(self.layout.slot_bytes())
    }

    pub(super) fn scratch(&self, pos: usize, field: u64) -> u64 {
        pos as u64 * self.scratch_block + field
    }
}
