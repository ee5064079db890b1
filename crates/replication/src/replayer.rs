//! The replayer (Mu paper §4.2, "Followers commit in background" and "Replayer").

use crate::{Area, Memory};
use mu_log::{EntryKind, LogLayout, FUO_OFFSET, HEAD_OFFSET};

/// Applies the decided entries of the local log, in order.
///
/// Entry `i` is decided once the FUO is past it (a leader brought this replica up to date), or
/// once a complete entry `j > i` says so (commit piggybacking): "a leader will not start
/// replicating in an index i before it knows index i − 1 to be committed", and a leader with
/// several accepts outstanding (§7.4) writes into each entry how many below it were still in
/// flight ([`mu_log::Entry::decided_below`]). Order matters: the replayer first establishes that
/// `i` is decided and only then reads slot `i`. Read the other way round, it could take an
/// undecided value that the deciding leader overwrote in between (a leader writes `i` before
/// `j` on the same FIFO connection, so once `j` is seen, slot `i` holds the decided value).
pub struct Replayer {
    layout: LogLayout,
    head: u64,
    /// Every index below this is known decided.
    decided_below: u64,
    /// Entries between the head and this index were seen complete: later looks start here.
    scanned_to: u64,
    /// Whether [`Replayer::poll`] looks at the entries after the head for news that it is
    /// decided (see [`Replayer::scan_entries`]).
    scan: bool,
    slot: Vec<u8>,
    next: Vec<u8>,
}

/// How far past the head the replayer looks for an entry that tells it the head is decided: as
/// many entries as a leader may have in flight, plus one.
pub const SCAN_SLOTS_MAX: u64 = crate::OUTSTANDING_MAX as u64 + 1;

impl Replayer {
    /// A replayer whose next entry to apply is `head`.
    pub fn new(layout: LogLayout, head: u64) -> Replayer {
        let bytes = layout.slot_bytes() as usize;
        Replayer {
            layout,
            head,
            decided_below: head,
            scanned_to: head + 1,
            scan: true,
            slot: vec![0; bytes],
            next: vec![0; bytes],
        }
    }

    /// The next index to apply.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Applies every entry now known to be decided, in order, and publishes the head in the log
    /// after each (for log recycling, §5.3). Returns how many it applied.
    pub fn poll(
        &mut self,
        mem: &mut impl Memory,
        mut apply: impl FnMut(u64, EntryKind, &[u8]),
    ) -> usize {
        let mut applied = 0;
        loop {
            let index = self.head;
            if self.decided_below <= index && !self.learn(mem) {
                break;
            }
            let offset = self.layout.slot_offset(index);
            let entry = self.layout.read_entry(index, &mut self.slot, |out| {
                mem.read(Area::Log, offset, out);
            });
            let Some(entry) = entry else {
                // Decided but not (yet) complete here: the bytes are still landing.
                break;
            };
            apply(index, entry.kind, entry.value);
            self.head = index + 1;
            applied += 1;
            // Published entry by entry, not once the poll ends. A poll applies every entry
            // known decided, up to a whole log for a follower far behind, and the leader makes
            // room only from the heads it reads (§5.3): published at the end of such a poll,
            // the head kept the leader waiting, its room spent, for as long as the whole log
            // took to apply (on a loaded machine, a log of 65,536 batches of 8 took the
            // followers over 100 ms, and the leader's proposals failed with "log full" while
            // both followers were applying). Published every 64 entries, a commit handler that
            // sleeps now and then still went 100 ms between two. The head word has a cache
            // line of its own, read by the background plane alone (to publish it), at most
            // once per poll of its: a store that stays in this core's cache in between.
            mem.store_u64(Area::Log, HEAD_OFFSET, self.head);
        }
        applied
    }

    /// Whether later polls look at the entries after the head (commit piggybacking, the
    /// default) or take only the FUO word as news that the head is decided.
    ///
    /// A replicating leader that holds its own log turns the scan off: its own FUO word, which
    /// it writes as it commits, already says everything it knows decided, and the slot after
    /// its last entry is the one it has not written yet, so the scan reads it (a lap-old entry
    /// once the log has wrapped, whose checksum it computes) on every poll for nothing: about
    /// 250 of the leader's instructions per proposal (`scripts/propose-instructions.sh`). Once
    /// another leader holds the log, the scan is on again whatever the engine believes: an idle
    /// leader may not notice it was replaced, and what its successor decided is told by the
    /// entries it wrote (commit piggybacking) long before any FUO word.
    pub fn scan_entries(&mut self, scan: bool) {
        self.scan = scan;
    }

    /// Every index below this is known decided (as of the last poll).
    pub fn decided_below(&self) -> u64 {
        self.decided_below
    }

    /// Whether the head is known decided but its slot does not hold a complete entry for it
    /// (as of the last poll). Normal for a moment while the entry's bytes land; for long, the
    /// entry is not coming: this log skipped it (a snapshot was installed over a hole, or a
    /// leader's update copied a slot its own log never received), and only a state transfer
    /// moves the head on.
    pub fn blocked(&self) -> bool {
        self.decided_below > self.head
    }

    /// Looks for news that the head is decided: the FUO word, then the complete entries after
    /// the head. Returns whether it found some.
    fn learn(&mut self, mem: &mut impl Memory) -> bool {
        let head = self.head;
        self.decided_below = self.decided_below.max(mem.load_u64(Area::Log, FUO_OFFSET));
        if !self.scan {
            return self.decided_below > head;
        }
        let limit = head + SCAN_SLOTS_MAX.min(self.layout.slots_count() - 1);
        let mut j = self.scanned_to.max(head + 1);
        while self.decided_below <= head && j <= limit {
            let offset = self.layout.slot_offset(j);
            let entry = self.layout.read_entry(j, &mut self.next, |out| {
                mem.read(Area::Log, offset, out);
            });
            let Some(e) = entry else { break };
            self.decided_below = self.decided_below.max(e.decided_below(j));
            j += 1;
        }
        self.scanned_to = j;
        self.decided_below > head
    }
}
