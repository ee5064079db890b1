//! A log entry: one client request as the leader's front took it, with the leader's clock and
//! what the leader needs to find its reply (`docs/apps/memcached.md`, "Entries").

/// The bytes before the request.
pub const HEADER_BYTES: usize = 2 + 8 + 8 + 8;

/// One request, as proposed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The replica whose front took the request, and that front's incarnation (distinct across
    /// restarts), so that only it takes the reply.
    pub origin: u16,
    pub incarnation: u64,
    /// The request's number at that front.
    pub seq: u64,
    /// The leader's wall clock when it proposed, in ms since the Unix epoch; replicas apply
    /// `max` of it and the previous entry's, so time never goes back in the log.
    pub now_ms: u64,
    /// The request's bytes: its line and data block, as the client sent them.
    pub request: &'a [u8],
}

impl<'a> Entry<'a> {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.origin.to_le_bytes());
        out.extend_from_slice(&self.incarnation.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.now_ms.to_le_bytes());
        out.extend_from_slice(self.request);
    }

    pub fn decode(bytes: &'a [u8]) -> Option<Entry<'a>> {
        if bytes.len() < HEADER_BYTES {
            return None;
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        Some(Entry {
            origin: u16::from_le_bytes([bytes[0], bytes[1]]),
            incarnation: word(2),
            seq: word(10),
            now_ms: word(18),
            request: &bytes[HEADER_BYTES..],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let entry =
            Entry { origin: 2, incarnation: 7, seq: 9, now_ms: 1234, request: b"get k\r\n" };
        let mut bytes = Vec::new();
        entry.encode(&mut bytes);
        assert_eq!(bytes.len(), HEADER_BYTES + 7);
        assert_eq!(Entry::decode(&bytes), Some(entry));
        assert_eq!(Entry::decode(&bytes[..HEADER_BYTES - 1]), None);
    }
}
