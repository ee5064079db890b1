//! The committed stream a replica keeps (`docs/apps/redis.md`, "State transfer" and
//! "Compaction"): an RDB of the state at some offset of the stream, and the stream from there.
//! A server started from that RDB and fed that stream holds the state after the whole committed
//! stream applied here. A deposed leader's server is rebuilt from it, and a state transfer
//! carries it. Pure.

/// An RDB with no keys: the header of version 10 (Redis 7.0), the end-of-file opcode and a
/// zero checksum, which Redis reads as "saved without a checksum".
pub const EMPTY_RDB: &[u8] = b"REDIS0010\xff\0\0\0\0\0\0\0\0";

/// The state at `rdb_offset` of the committed stream, and the stream after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    /// An RDB of a server that had run the stream up to `rdb_offset`, and nothing else.
    pub rdb: Vec<u8>,
    pub rdb_offset: u64,
    /// The committed stream from `rdb_offset`.
    pub stream: Vec<u8>,
}

impl Default for History {
    /// The stream from its start: an empty server at offset 0.
    fn default() -> History {
        History { rdb: EMPTY_RDB.to_vec(), rdb_offset: 0, stream: Vec::new() }
    }
}

impl History {
    /// Where the committed stream it holds ends.
    pub fn end(&self) -> u64 {
        self.rdb_offset + self.stream.len() as u64
    }

    /// The bytes it holds.
    pub fn bytes(&self) -> usize {
        self.rdb.len() + self.stream.len()
    }

    /// The first answer of the master to a server that starts over from it: a full resync at
    /// `rdb_offset` with the RDB (as a `$<length>` bulk, with no CRLF after it); the stream
    /// follows.
    pub fn full_resync(&self, replid: &str) -> Vec<u8> {
        let mut reply =
            format!("+FULLRESYNC {replid} {}\r\n${}\r\n", self.rdb_offset, self.rdb.len())
                .into_bytes();
        reply.extend_from_slice(&self.rdb);
        reply
    }

    /// Replaces the stream up to `offset` with `rdb`, an RDB of a server that had run the
    /// committed stream up to `offset` exactly. Refused (nothing changes) for an offset this
    /// history does not hold, or where it would not shrink.
    pub fn compact(&mut self, rdb: Vec<u8>, offset: u64) -> Result<(), String> {
        if offset < self.rdb_offset || offset > self.end() {
            return Err(format!(
                "an RDB at offset {offset}, outside the kept stream ({} to {})",
                self.rdb_offset,
                self.end()
            ));
        }
        let dropped = (offset - self.rdb_offset) as usize;
        if rdb.len() >= self.rdb.len() + dropped {
            return Err(format!(
                "an RDB of {} bytes would not shrink the kept stream ({} bytes up to offset {offset})",
                rdb.len(),
                self.rdb.len() + dropped
            ));
        }
        self.stream.drain(..dropped);
        self.rdb = rdb;
        self.rdb_offset = offset;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compaction_keeps_the_stream_after_the_rdb() {
        let mut h = History::default();
        h.stream.extend_from_slice(b"0123456789");
        assert_eq!(h.end(), 10);
        assert!(h.full_resync("id").starts_with(b"+FULLRESYNC id 0\r\n$18\r\nREDIS0010"));
        let rdb = b"REDIS0010abc".to_vec();
        assert!(h.compact(rdb.clone(), 11).unwrap_err().contains("outside"));
        assert!(h.compact(vec![0; 40], 6).unwrap_err().contains("would not shrink"));
        assert_eq!(h.stream, b"0123456789", "a refusal changes nothing");
        h.compact(rdb.clone(), 6).unwrap();
        assert_eq!((h.rdb_offset, &h.stream[..], h.end()), (6, &b"6789"[..], 10));
        assert!(h.full_resync("id").starts_with(b"+FULLRESYNC id 6\r\n$12\r\nREDIS0010abc"));
        assert!(h.compact(b"x".to_vec(), 5).unwrap_err().contains("outside"), "behind the RDB");
        h.compact(b"REDIS".to_vec(), 10).unwrap();
        assert!(h.stream.is_empty() && h.end() == 10);
    }
}
