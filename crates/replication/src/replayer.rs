//! The replayer (Mu paper §4.2, "Followers commit in background" and "Replayer").

use crate::{Area, Memory};
use mu_log::{EntryKind, LogLayout, Slot, FUO_OFFSET, HEAD_OFFSET};

/// Applies the decided entries of the local log, in order.
///
/// Entry `i` is decided once the FUO is past it (a leader brought this replica up to date), or
/// once entry `i + 1` is complete: "a leader will not start replicating in an index i before it
/// knows index i − 1 to be committed" (commit piggybacking). Order matters: the replayer first
/// establishes that `i` is decided and only then reads slot `i`. Read the other way round, it
/// could take an undecided value that the deciding leader overwrote in between (a leader writes
/// `i` before `i + 1` on the same FIFO connection, so once `i + 1` is seen, slot `i` holds the
/// decided value).
pub struct Replayer {
    layout: LogLayout,
    head: u64,
    slot: Vec<u8>,
    next: Vec<u8>,
}

impl Replayer {
    /// A replayer whose next entry to apply is `head`.
    pub fn new(layout: LogLayout, head: u64) -> Replayer {
        let bytes = layout.slot_bytes() as usize;
        Replayer { layout, head, slot: vec![0; bytes], next: vec![0; bytes] }
    }

    /// The next index to apply.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Applies every entry now known to be decided, in order, and publishes the new head in the
    /// log (for log recycling, §5.3). Returns how many it applied.
    pub fn poll(
        &mut self,
        mem: &mut impl Memory,
        mut apply: impl FnMut(u64, EntryKind, &[u8]),
    ) -> usize {
        let mut applied = 0;
        loop {
            let index = self.head;
            let decided = mem.load_u64(Area::Log, FUO_OFFSET) > index || {
                mem.read(Area::Log, self.layout.slot_offset(index + 1), &mut self.next);
                matches!(self.layout.decode(index + 1, &self.next), Slot::Entry(_))
            };
            if !decided {
                break;
            }
            mem.read(Area::Log, self.layout.slot_offset(index), &mut self.slot);
            let Slot::Entry(entry) = self.layout.decode(index, &self.slot) else {
                // Decided but not (yet) complete here: the bytes are still landing.
                break;
            };
            apply(index, entry.kind, entry.value);
            self.head = index + 1;
            applied += 1;
        }
        if applied > 0 {
            mem.store_u64(Area::Log, HEAD_OFFSET, self.head);
        }
        applied
    }
}
