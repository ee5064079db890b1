//! What a Redis replica's state transfer carries (`docs/apps/redis.md`, "State transfer"): the
//! whole committed stream the donor applied (its history: an RDB at some offset and the stream
//! after it), with the donor's place in the log (the leadership whose stream it was applying,
//! the part of a command it held). The receiver's server starts over from that RDB and runs
//! that stream: the same state as the donor's server after the same entries, whatever either
//! server's clock did. Pure.

use crate::entry::Leadership;

/// The first bytes of every snapshot, with its format's version.
const MAGIC: &[u8; 8] = b"MUREDIS2";

/// A replica's state between two entries applied.
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot<'a> {
    /// The leadership of the last `Leader` entry applied.
    pub source: Option<Leadership>,
    /// The part of a command held until the entry that ends it.
    pub held: &'a [u8],
    /// An RDB of the state at `rdb_offset` of the committed stream.
    pub rdb: &'a [u8],
    pub rdb_offset: u64,
    /// The committed stream applied, from `rdb_offset`.
    pub stream: &'a [u8],
}

impl Snapshot<'_> {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC);
        match self.source {
            Some(l) => {
                out.push(1);
                out.extend_from_slice(&l.node.to_le_bytes());
                out.extend_from_slice(&l.term_ns.to_le_bytes());
            }
            None => out.push(0),
        }
        out.extend_from_slice(&self.rdb_offset.to_le_bytes());
        for part in [self.held, self.rdb] {
            out.extend_from_slice(&(part.len() as u64).to_le_bytes());
            out.extend_from_slice(part);
        }
        out.extend_from_slice(self.stream);
    }

    pub fn decode(bytes: &[u8]) -> Result<Snapshot<'_>, String> {
        let bad = |what: &str| format!("a Redis snapshot with {what}");
        let rest = bytes.strip_prefix(MAGIC).ok_or_else(|| bad("another format"))?;
        let (&present, mut rest) = rest.split_first().ok_or_else(|| bad("no header"))?;
        let source = match present {
            0 => None,
            1 => {
                let (node, r) = rest.split_first_chunk::<2>().ok_or_else(|| bad("a cut header"))?;
                let (term, r) = r.split_first_chunk::<8>().ok_or_else(|| bad("a cut header"))?;
                rest = r;
                Some(Leadership {
                    node: u16::from_le_bytes(*node),
                    term_ns: u64::from_le_bytes(*term),
                })
            }
            _ => return Err(bad("a bad header")),
        };
        let (offset, rest) = rest.split_first_chunk::<8>().ok_or_else(|| bad("a cut header"))?;
        let (held, rest) = part(rest).ok_or_else(|| bad("a cut held part"))?;
        let (rdb, stream) = part(rest).ok_or_else(|| bad("a cut RDB"))?;
        Ok(Snapshot { source, held, rdb, rdb_offset: u64::from_le_bytes(*offset), stream })
    }
}

/// A length-prefixed part of `bytes`, and what follows it.
fn part(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = bytes.split_first_chunk::<8>()?;
    let len = usize::try_from(u64::from_le_bytes(*len)).ok().filter(|&n| n <= rest.len())?;
    Some(rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_round_trip_and_garbage_is_refused() {
        let l = Leadership { node: 2, term_ns: 77 };
        for source in [None, Some(l)] {
            let s = Snapshot {
                source,
                held: b"*1\r\n$4",
                rdb: b"REDIS0010",
                rdb_offset: 12,
                stream: b"*1\r\n$4\r\nPING\r\n",
            };
            let mut bytes = Vec::new();
            s.encode(&mut bytes);
            assert_eq!(Snapshot::decode(&bytes), Ok(s));
            // Every cut before the stream is refused, never misread.
            let header = if source.is_some() { 8 + 1 + 10 + 8 } else { 8 + 1 + 8 };
            for cut in 0..header + 8 + 6 + 8 + 9 {
                assert!(Snapshot::decode(&bytes[..cut]).is_err(), "cut at {cut}");
            }
        }
        assert!(Snapshot::decode(b"MUREDIS2\x05").is_err());
        assert!(Snapshot::decode(b"REDIS0010").is_err());
    }
}
