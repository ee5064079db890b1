//! What each node of a uKharon-KV group registers on its data fabric node.
//!
//! The data region (`DATA_REGION`), written by the primary and read by it:
//!
//! ```text
//! 0     follow word: epoch, applied, whole (three u64; the backup writes it)
//! 24    installed: epoch, position of the last snapshot restored (two u64)
//! 64    committed word: the value and its complement (two u64; the primary writes them)
//! 128   snapshot header: epoch, position, committed, len, checksum (five u64)
//! 192   the ring of records (`mu_primary_backup::Ring`)
//! ...   the snapshot's bytes (at most `snapshot_bytes_max`)
//! ```
//!
//! The staging region (`STAGING_REGION`), never accessed by peers: where follow-word reads
//! land (64 bytes per node id), records too long to be written inline (one ring's worth per
//! node id, so a record is not overwritten while its write is in flight: its slot is reused
//! only once the backup applied it), and the snapshot being sent.

use mu_fabric::{NodeId, RegionId};
use mu_primary_backup::Ring;

pub const DATA_REGION: RegionId = RegionId(1);
pub const STAGING_REGION: RegionId = RegionId(2);

pub const FOLLOW_OFFSET: usize = 0;
pub const INSTALLED_OFFSET: usize = 24;
/// What the primary reads at once: the follow word and the installed words.
pub const FOLLOW_AREA_BYTES: usize = 64;
pub const COMMITTED_OFFSET: usize = 64;
const COMMITTED_MASK: u64 = u64::MAX;

/// The committed word's bytes: the value, then its complement, so that a word read while
/// it was being written (two stores, or a copy byte by byte) is told from a whole one.
pub fn committed_bytes(committed: u64) -> [u8; 16] {
    let mut out = [0; 16];
    out[..8].copy_from_slice(&committed.to_le_bytes());
    out[8..].copy_from_slice(&(committed ^ COMMITTED_MASK).to_le_bytes());
    out
}

/// The committed value from its two words, if they agree (zero before any was written).
pub fn committed_from(value: u64, complement: u64) -> Option<u64> {
    match (value, complement) {
        (0, 0) => Some(0),
        _ => (value ^ COMMITTED_MASK == complement).then_some(value),
    }
}
pub const SNAPSHOT_HEADER_OFFSET: usize = 128;
pub const SNAPSHOT_HEADER_BYTES: usize = 40;
pub const RING_OFFSET: usize = 192;
const SNAPSHOT_SEED: u64 = 0x6b76_736e_6170_7368; // "kvsnapsh"

/// The connection on which `from` writes into and reads from `to` (one per direction, so that
/// each side sets up again only what it initiates).
pub fn channel(from: NodeId, to: NodeId) -> u8 {
    if from < to {
        0
    } else {
        1
    }
}

/// The sizes every node of a group must agree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    pub ring: Ring,
    pub snapshot_bytes_max: usize,
    /// Every node id is below this.
    pub nodes_max: u16,
}

impl KvLayout {
    pub fn snapshot_offset(&self) -> usize {
        (RING_OFFSET + self.ring.bytes()).next_multiple_of(64)
    }

    pub fn data_bytes(&self) -> usize {
        self.snapshot_offset() + self.snapshot_bytes_max
    }

    /// Where a follow-word read from `node` lands in the staging region.
    pub fn follow_landing(&self, node: u16) -> usize {
        usize::from(node) * FOLLOW_AREA_BYTES
    }

    /// Where a record for `node` at ring offset `offset` is staged.
    pub fn record_staging(&self, node: u16, offset: usize) -> usize {
        usize::from(self.nodes_max) * FOLLOW_AREA_BYTES
            + usize::from(node) * self.ring.bytes()
            + offset
    }

    /// Where the snapshot being sent is staged: its header, then its bytes.
    pub fn snapshot_staging(&self) -> usize {
        (usize::from(self.nodes_max) * (FOLLOW_AREA_BYTES + self.ring.bytes())).next_multiple_of(64)
    }

    pub fn staging_bytes(&self) -> usize {
        self.snapshot_staging()
            + SNAPSHOT_HEADER_BYTES.next_multiple_of(64)
            + self.snapshot_bytes_max
    }
}

/// A snapshot's header, as the primary writes it after the snapshot's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotHeader {
    pub epoch: u64,
    pub position: u64,
    pub committed: u64,
    pub len: u64,
    pub checksum: u64,
}

impl SnapshotHeader {
    pub fn new(epoch: u64, position: u64, committed: u64, snapshot: &[u8]) -> SnapshotHeader {
        let mut h =
            SnapshotHeader { epoch, position, committed, len: snapshot.len() as u64, checksum: 0 };
        h.checksum = h.sum(snapshot);
        h
    }

    fn sum(&self, snapshot: &[u8]) -> u64 {
        let mut bytes = Vec::with_capacity(32 + snapshot.len());
        for w in [self.epoch, self.position, self.committed, self.len] {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        bytes.extend_from_slice(snapshot);
        mu_log::digest(SNAPSHOT_SEED, &bytes)
    }

    /// Whether `snapshot` is the whole of what this header announces (a snapshot being
    /// overwritten while it was read does not check out).
    pub fn checks(&self, snapshot: &[u8]) -> bool {
        self.len == snapshot.len() as u64 && self.sum(snapshot) == self.checksum
    }

    pub fn encode(&self) -> [u8; SNAPSHOT_HEADER_BYTES] {
        let mut out = [0; SNAPSHOT_HEADER_BYTES];
        let words = [self.epoch, self.position, self.committed, self.len, self.checksum];
        for (i, w) in words.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8; SNAPSHOT_HEADER_BYTES]) -> SnapshotHeader {
        let w = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        SnapshotHeader { epoch: w(0), position: w(1), committed: w(2), len: w(3), checksum: w(4) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_checks_out_whole_only() {
        let h = SnapshotHeader::new(3, 10, 8, b"state");
        assert!(h.checks(b"state"));
        assert!(!h.checks(b"statf") && !h.checks(b"stat"));
        assert_eq!(SnapshotHeader::decode(&h.encode()), h);
    }

    #[test]
    fn a_torn_committed_word_is_never_a_value() {
        let (old, new) = (committed_bytes(0x1_0000_00ff), committed_bytes(0x1_0000_0100));
        let word = |b: &[u8; 16], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        assert_eq!(committed_from(word(&new, 0), word(&new, 8)), Some(0x1_0000_0100));
        assert_eq!(committed_from(0, 0), Some(0));
        for cut in 1..16 {
            let mut torn = old;
            torn[..cut].copy_from_slice(&new[..cut]);
            let read = committed_from(word(&torn, 0), word(&torn, 8));
            // Where the rest of the bytes are the same, a torn copy is the whole new word.
            let whole = [None, Some(0x1_0000_00ff), Some(0x1_0000_0100)];
            assert!(whole.contains(&read), "cut {cut}: {read:?}");
            assert!(cut > 8 || read != Some(0x1_0000_0100), "cut {cut}: half a value taken");
        }
    }

    #[test]
    fn areas_do_not_overlap() {
        let l =
            KvLayout { ring: Ring::new(16, 128).unwrap(), snapshot_bytes_max: 4096, nodes_max: 4 };
        const { assert!(RING_OFFSET >= SNAPSHOT_HEADER_OFFSET + SNAPSHOT_HEADER_BYTES) };
        assert!(l.snapshot_offset() >= RING_OFFSET + l.ring.bytes());
        assert_eq!(
            l.record_staging(3, l.ring.bytes()),
            l.record_staging(0, 0) + 4 * l.ring.bytes()
        );
        assert!(l.snapshot_staging() >= l.record_staging(3, l.ring.bytes()));
    }
}
