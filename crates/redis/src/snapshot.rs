//! What a Redis replica's state transfer carries (`docs/apps/redis.md`, "State transfer"): the
//! whole committed stream the donor applied (from offset 0), with the donor's place in the log
//! (the leadership whose stream it was applying, the part of a command it held). The receiver's
//! server starts over, emptied, and runs that stream: the same state as the donor's server
//! after the same entries, whatever either server's clock did. Pure.

use crate::entry::Leadership;

/// The first bytes of every snapshot, with its format's version.
const MAGIC: &[u8; 8] = b"MUREDIS1";

/// A replica's state between two entries applied.
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot<'a> {
    /// The leadership of the last `Leader` entry applied.
    pub source: Option<Leadership>,
    /// The part of a command held until the entry that ends it.
    pub held: &'a [u8],
    /// The whole committed stream applied, from offset 0.
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
        out.extend_from_slice(&(self.held.len() as u64).to_le_bytes());
        out.extend_from_slice(self.held);
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
        let (held_len, rest) = rest.split_first_chunk::<8>().ok_or_else(|| bad("a cut header"))?;
        let held_len = usize::try_from(u64::from_le_bytes(*held_len))
            .ok()
            .filter(|&n| n <= rest.len())
            .ok_or_else(|| bad("a held part longer than itself"))?;
        let (held, stream) = rest.split_at(held_len);
        Ok(Snapshot { source, held, stream })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_round_trip_and_garbage_is_refused() {
        let l = Leadership { node: 2, term_ns: 77 };
        for source in [None, Some(l)] {
            let s = Snapshot { source, held: b"*1\r\n$4", stream: b"*1\r\n$4\r\nPING\r\n" };
            let mut bytes = Vec::new();
            s.encode(&mut bytes);
            assert_eq!(Snapshot::decode(&bytes), Ok(s));
            // Every cut inside the header is refused, never misread.
            let header = if source.is_some() { 8 + 1 + 10 + 8 } else { 8 + 1 + 8 };
            for cut in 0..header + 6 {
                assert!(Snapshot::decode(&bytes[..cut]).is_err(), "cut at {cut}");
            }
        }
        assert!(Snapshot::decode(b"MUREDIS1\x05").is_err());
        assert!(Snapshot::decode(b"REDIS0010").is_err());
    }
}
