//! Where everything lives in a replica's Velos region (the same on every replica, so that a
//! proposer addresses an acceptor's memory at the offsets it uses in its own):
//!
//! ```text
//! 0                      head: first log index not yet applied here
//! 256                    slot words, slots_count × 8 bytes
//! values_offset(q)       proposer q's value log (mu-log format), one per position q < n
//! scratch_offset()       one slot where this replica's proposer reads a value it adopts
//! learner_scratch_offset() one slot and one word where a follower catching up reads
//! ```

use mu_log::LogLayout;

/// Offset of the head word.
pub const HEAD_OFFSET: u64 = 0;
/// Offset of the first slot word.
pub const WORDS_OFFSET: u64 = 256;

/// The region layout of a cluster of `n` positions with value logs shaped as `log`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VelosLayout {
    log: LogLayout,
    n: usize,
}

impl VelosLayout {
    /// Fails if the region would not fit in memory.
    pub fn new(log: LogLayout, n: usize) -> Result<VelosLayout, String> {
        if n == 0 || n > 64 {
            return Err(format!("{n} replicas: Velos supports 1 to 64"));
        }
        let total = (log.region_bytes() as u128) * (n as u128 + 1)
            + u128::from(log.slots_count()) * 8
            + u128::from(WORDS_OFFSET);
        if usize::try_from(total).is_err() {
            return Err(format!(
                "{n} value logs of {} bytes do not fit in memory",
                log.region_bytes()
            ));
        }
        Ok(VelosLayout { log, n })
    }

    /// The shape of each value log.
    pub fn log(&self) -> LogLayout {
        self.log
    }

    pub fn positions(&self) -> usize {
        self.n
    }

    pub fn slots_count(&self) -> u64 {
        self.log.slots_count()
    }

    /// Offset of the slot word of log index `index`.
    pub fn word_offset(&self, index: u64) -> u64 {
        WORDS_OFFSET + (index % self.slots_count()) * 8
    }

    /// Offset of position `q`'s value log (its mu-log header, unused, then its slots).
    pub fn values_offset(&self, q: usize) -> u64 {
        debug_assert!(q < self.n);
        let words_end = WORDS_OFFSET + self.slots_count() * 8;
        words_end + (q as u64) * self.log.region_bytes() as u64
    }

    /// Offset of the slot of position `q`'s value log that holds its value for `index`.
    pub fn value_slot_offset(&self, q: usize, index: u64) -> u64 {
        self.values_offset(q) + self.log.slot_offset(index)
    }

    /// Offset of the scratch slot.
    pub fn scratch_offset(&self) -> u64 {
        self.values_offset(self.n - 1) + self.log.region_bytes() as u64
    }

    /// Offset of the follower's scratch: a slot for an entry, then a word.
    pub fn learner_scratch_offset(&self) -> u64 {
        self.scratch_offset() + u64::from(self.log.slot_bytes())
    }

    /// Offset of the follower's scratch word.
    pub fn learner_word_offset(&self) -> u64 {
        self.learner_scratch_offset() + u64::from(self.log.slot_bytes())
    }

    /// Bytes of the whole region.
    pub fn region_bytes(&self) -> usize {
        (self.learner_word_offset() + 8) as usize
    }

    /// The largest value an entry carries.
    pub fn max_value_bytes(&self) -> usize {
        self.log.max_value_bytes()
    }

    /// Bytes of one value slot.
    pub fn slot_bytes(&self) -> u32 {
        self.log.slot_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mu_log::Integrity;

    #[test]
    fn areas_do_not_overlap() {
        let log = LogLayout::new(8, 64, Integrity::Checksum).unwrap();
        let l = VelosLayout::new(log, 3).unwrap();
        assert_eq!(l.word_offset(0), WORDS_OFFSET);
        assert_eq!(l.word_offset(9), WORDS_OFFSET + 8);
        assert!(l.word_offset(7) + 8 <= l.values_offset(0));
        for q in 0..3 {
            let start = l.values_offset(q);
            assert_eq!(start % 8, 0);
            assert!(l.value_slot_offset(q, 7) + 64 <= start + log.region_bytes() as u64);
        }
        assert_eq!(l.values_offset(1) - l.values_offset(0), log.region_bytes() as u64);
        assert_eq!(l.scratch_offset(), l.values_offset(2) + log.region_bytes() as u64);
        assert_eq!(l.learner_scratch_offset(), l.scratch_offset() + 64);
        assert_eq!(l.learner_word_offset(), l.scratch_offset() + 128);
        assert_eq!(l.region_bytes() as u64, l.scratch_offset() + 136);
        assert!(VelosLayout::new(log, 0).is_err());
        assert!(VelosLayout::new(log, 65).is_err());
    }
}
