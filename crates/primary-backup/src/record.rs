//! What lies in a backup's memory: the ring of records the primary writes into, one one-sided
//! write per record, and the follow word the backup publishes for the primary to read.
//!
//! A record's bytes, little endian:
//!
//! ```text
//! position   u64   1, 2, 3, ... in the order the primary executed the requests
//! committed  u64   every backup of the view held every record up to here when it was written
//! epoch      u64   the view in which the primary wrote it
//! len        u32   the request's bytes
//! reserved   u32   zero
//! request    len bytes (a `mu_kv::Request`, encoded)
//! checksum   u64   over everything before it
//! ```
//!
//! Record `p` lives in slot `(p - 1) % slots_count`. The position tells a record from the one
//! of an earlier lap that the same slot held, and the checksum a record read while it was being
//! written (a torn read on shared memory) from a whole one.

/// The header's bytes before the request.
pub const HEADER_BYTES: usize = 32;
/// The checksum's bytes after the request.
pub const TRAILER_BYTES: usize = 8;
const CHECKSUM_SEED: u64 = 0x7062_7265_636f_7264; // "pbrecord"

/// A record decoded from a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub position: u64,
    pub committed: u64,
    pub epoch: u64,
    pub request: Vec<u8>,
}

/// The ring of slots a backup keeps for its primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    pub slots_count: u64,
    pub slot_bytes: usize,
}

/// Why a slot holds no usable record for the position looked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotError {
    /// A whole record of another position (an earlier lap), or an empty slot.
    Other { position: u64 },
    /// Bytes that do not check out: being written now, or never a record.
    Torn,
}

/// Why a ring cannot be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RingError {
    NoSlots,
    /// A slot too small for a record with a request of at least one byte.
    SlotTooSmall {
        slot_bytes: usize,
    },
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RingError::NoSlots => write!(f, "a ring needs at least one slot"),
            RingError::SlotTooSmall { slot_bytes } => write!(
                f,
                "slots of {slot_bytes} bytes cannot hold a record: give at least {} bytes",
                HEADER_BYTES + TRAILER_BYTES + 8
            ),
        }
    }
}

/// What a backup publishes for its primary to read: the view it follows (once the old
/// primary's access is gone), the last position it applied, and whether its state is a prefix
/// of every later primary's: false before it holds a state at all (a fresh backup), and when it
/// restored a snapshot that held records not yet known to be held by every backup (a primary's
/// store is speculative), until it learns they were.
/// A torn read of it is harmless: `applied` only grows, and an older one only makes the primary
/// send again what the backup skips.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowWord {
    pub epoch: u64,
    pub applied: u64,
    pub whole: bool,
}

impl Ring {
    pub fn new(slots_count: u64, slot_bytes: usize) -> Result<Ring, RingError> {
        if slots_count == 0 {
            return Err(RingError::NoSlots);
        }
        // Slots are whole words, so that a record's fields stay aligned.
        if slot_bytes < HEADER_BYTES + TRAILER_BYTES + 8 || slot_bytes % 8 != 0 {
            return Err(RingError::SlotTooSmall { slot_bytes });
        }
        Ok(Ring { slots_count, slot_bytes })
    }

    /// The ring's bytes in the backup's memory.
    pub fn bytes(&self) -> usize {
        self.slots_count as usize * self.slot_bytes
    }

    /// The longest request a record can carry.
    pub fn request_bytes_max(&self) -> usize {
        self.slot_bytes - HEADER_BYTES - TRAILER_BYTES
    }

    /// Where record `position` (from 1) starts in the ring.
    pub fn offset(&self, position: u64) -> usize {
        assert!(position > 0, "positions start at 1");
        ((position - 1) % self.slots_count) as usize * self.slot_bytes
    }

    /// The record `position` in `ring`'s bytes, if its slot holds it whole.
    pub fn read(&self, ring: &[u8], position: u64) -> Result<Record, SlotError> {
        let at = self.offset(position);
        let slot = &ring[at..at + self.slot_bytes];
        let word = |i: usize| u64::from_le_bytes(slot[i..i + 8].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(slot[24..28].try_into().expect("4 bytes")) as usize;
        if len > self.request_bytes_max() {
            return Err(SlotError::Torn);
        }
        let end = HEADER_BYTES + len;
        if mu_log::digest(CHECKSUM_SEED, &slot[..end]) != word(end) || slot[28..32] != [0; 4] {
            return if slot[..end + 8].iter().all(|&b| b == 0) {
                Err(SlotError::Other { position: 0 })
            } else {
                Err(SlotError::Torn)
            };
        }
        if word(0) != position {
            return Err(SlotError::Other { position: word(0) });
        }
        let request = slot[HEADER_BYTES..end].to_vec();
        Ok(Record { position, committed: word(8), epoch: word(16), request })
    }
}

impl Record {
    /// The record's bytes, as written into its slot (at most `ring.slot_bytes`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + self.request.len() + TRAILER_BYTES);
        out.extend_from_slice(&self.position.to_le_bytes());
        out.extend_from_slice(&self.committed.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&(self.request.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&self.request);
        let sum = mu_log::digest(CHECKSUM_SEED, &out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> Ring {
        Ring::new(4, 64).unwrap()
    }

    fn put(ring_bytes: &mut [u8], ring: &Ring, record: &Record) {
        let at = ring.offset(record.position);
        let bytes = record.encode();
        ring_bytes[at..at + bytes.len()].copy_from_slice(&bytes);
    }

    #[test]
    fn a_record_reads_back_at_its_position_only() {
        let ring = ring();
        let mut bytes = vec![0; ring.bytes()];
        let r = Record { position: 6, committed: 4, epoch: 9, request: b"put".to_vec() };
        put(&mut bytes, &ring, &r);
        assert_eq!(ring.read(&bytes, 6), Ok(r));
        // The same slot, another lap: the position tells them apart.
        assert_eq!(ring.read(&bytes, 2), Err(SlotError::Other { position: 6 }));
        assert_eq!(ring.read(&bytes, 10), Err(SlotError::Other { position: 6 }));
        assert_eq!(ring.read(&bytes, 1), Err(SlotError::Other { position: 0 }));
    }

    /// A slot read while it is being written: every prefix of a record over an older one.
    #[test]
    fn a_half_written_record_is_torn_never_a_record() {
        let ring = ring();
        let old = Record { position: 1, committed: 0, epoch: 1, request: b"older".to_vec() };
        let new = Record { position: 5, committed: 3, epoch: 1, request: b"newer!".to_vec() };
        let new_bytes = new.encode();
        for cut in 0..new_bytes.len() {
            let mut bytes = vec![0; ring.bytes()];
            put(&mut bytes, &ring, &old);
            bytes[..cut].copy_from_slice(&new_bytes[..cut]);
            let read = ring.read(&bytes, 5);
            assert!(read.is_err(), "cut at {cut}: {read:?}");
        }
    }

    #[test]
    fn a_flipped_bit_is_never_a_record() {
        let ring = ring();
        let r = Record { position: 3, committed: 2, epoch: 7, request: b"value".to_vec() };
        let clean = r.encode();
        for bit in 0..clean.len() * 8 {
            let mut bytes = vec![0; ring.bytes()];
            put(&mut bytes, &ring, &r);
            bytes[ring.offset(3) + bit / 8] ^= 1 << (bit % 8);
            assert_ne!(ring.read(&bytes, 3), Ok(r.clone()), "bit {bit}");
        }
    }

    #[test]
    fn rings_that_cannot_hold_a_record_are_refused() {
        assert_eq!(Ring::new(0, 64), Err(RingError::NoSlots));
        assert_eq!(Ring::new(4, 40), Err(RingError::SlotTooSmall { slot_bytes: 40 }));
        assert_eq!(Ring::new(4, 52), Err(RingError::SlotTooSmall { slot_bytes: 52 }));
        assert_eq!(Ring::new(4, 64).unwrap().request_bytes_max(), 24);
    }
}
