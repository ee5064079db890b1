//! What the log holds for Redis (`docs/apps/redis.md`, "Log entries"), how a replica turns the
//! entries it applies into bytes for its own server ([`Applier`]), and where the leader may cut
//! the stream ([`Boundaries`]). Pure.

use crate::resp::RespError;

const KIND_STREAM: u8 = 1;
const KIND_STREAM_PART: u8 = 2;
const KIND_LEADER: u8 = 3;
const KIND_BARRIER: u8 = 4;

/// One leadership of one replica: its id and a term it chose when it took over (the time, in
/// nanoseconds: unlike the replica's id, it tells two leaderships of one replica apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leadership {
    pub node: u16,
    pub term_ns: u64,
}

const LEADERSHIP_BYTES: usize = 10;

impl Leadership {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.node.to_le_bytes());
        out.extend_from_slice(&self.term_ns.to_le_bytes());
    }

    fn decode(bytes: &[u8]) -> Option<(Leadership, &[u8])> {
        let (head, rest) = bytes.split_first_chunk::<LEADERSHIP_BYTES>()?;
        let node = u16::from_le_bytes([head[0], head[1]]);
        let term_ns = u64::from_le_bytes(head[2..].try_into().ok()?);
        Some((Leadership { node, term_ns }, rest))
    }
}

/// The bytes a stream entry adds to its payload: its kind and its leadership.
pub const ENTRY_HEADER_BYTES: usize = 1 + LEADERSHIP_BYTES;

/// One log entry. Stream entries name the leadership that proposed them, so that one proposed
/// by a deposed leader and decided after its successor's [`Entry::Leader`] is skipped by every
/// replica alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    /// Stream bytes that end at a command boundary.
    Stream(Leadership, &'a [u8]),
    /// Stream bytes that end inside a command: held until the next [`Entry::Stream`].
    StreamPart(Leadership, &'a [u8]),
    /// The first entry of a leadership.
    Leader(Leadership),
    /// Nothing: committed by a leader to learn that it still leads (reads wait for one).
    Barrier,
}

impl Entry<'_> {
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Entry::Stream(l, bytes) | Entry::StreamPart(l, bytes) => {
                let kind =
                    if matches!(self, Entry::Stream(..)) { KIND_STREAM } else { KIND_STREAM_PART };
                out.push(kind);
                l.encode(out);
                out.extend_from_slice(bytes);
            }
            Entry::Leader(l) => {
                out.push(KIND_LEADER);
                l.encode(out);
            }
            Entry::Barrier => out.push(KIND_BARRIER),
        }
    }

    /// `None` for bytes no Redis replica wrote (the same at every replica).
    pub fn decode(bytes: &[u8]) -> Option<Entry<'_>> {
        let (&kind, rest) = bytes.split_first()?;
        match kind {
            KIND_STREAM => Leadership::decode(rest).map(|(l, b)| Entry::Stream(l, b)),
            KIND_STREAM_PART => Leadership::decode(rest).map(|(l, b)| Entry::StreamPart(l, b)),
            KIND_LEADER => match Leadership::decode(rest)? {
                (l, []) => Some(Entry::Leader(l)),
                _ => None,
            },
            KIND_BARRIER if rest.is_empty() => Some(Entry::Barrier),
            _ => None,
        }
    }
}

/// What applying an entry did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Stream of the current leadership: the bytes it completes were appended (possibly none
    /// yet: a part held until its end). The replica decides whether its server ran them
    /// already (a leadership this process ran) or must be fed them.
    Stream(Leadership),
    /// Stream of a leadership that had ended when it was decided: nobody runs it.
    Stale,
    /// A new leadership began.
    Leader(Leadership),
    /// Nothing to do.
    Barrier,
    /// Not an entry of ours.
    Malformed,
}

/// A replica's view of the log: whose stream it is applying, and the part of a command held
/// until its end is committed.
#[derive(Debug, Default)]
pub struct Applier {
    source: Option<Leadership>,
    held: Vec<u8>,
}

impl Applier {
    /// An applier that continues from a state transfer: the leadership whose stream the
    /// donor was applying and the part of a command it held.
    pub fn restored(source: Option<Leadership>, held: Vec<u8>) -> Applier {
        Applier { source, held }
    }

    /// The leadership the last entry applied belongs to.
    pub fn source(&self) -> Option<Leadership> {
        self.source
    }

    /// The part of a command held until its end is committed.
    pub fn held(&self) -> &[u8] {
        &self.held
    }

    /// Applies one entry: the committed stream's bytes it completes are appended to `out`.
    pub fn apply(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> Applied {
        let Some(entry) = Entry::decode(bytes) else { return Applied::Malformed };
        match entry {
            Entry::Leader(l) => {
                // A part left by the previous leader never got its end: nobody ran it.
                self.held.clear();
                self.source = Some(l);
                Applied::Leader(l)
            }
            Entry::Barrier => Applied::Barrier,
            Entry::StreamPart(l, _) | Entry::Stream(l, _) if self.source != Some(l) => {
                Applied::Stale
            }
            Entry::StreamPart(l, part) => {
                self.held.extend_from_slice(part);
                Applied::Stream(l)
            }
            Entry::Stream(l, tail) => {
                out.append(&mut self.held);
                out.extend_from_slice(tail);
                Applied::Stream(l)
            }
        }
    }
}

/// Finds command boundaries in the replication stream as it arrives, in pieces of any size,
/// without holding the stream: a command is an array of bulk strings (all Redis 7.0 writes to
/// its replicas).
#[derive(Debug, Default)]
pub struct Boundaries {
    state: Scan,
    /// A header line cut between two pieces.
    line: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy)]
enum Scan {
    /// Between commands.
    #[default]
    Array,
    /// Expecting the header of one of `args` more bulk strings.
    Bulk { args: u64 },
    /// Inside a bulk string: `bytes` more (its CRLF included), then `args` more bulk strings.
    Body { bytes: u64, args: u64 },
}

/// The longest header line in the stream (`*` or `$` and a number).
const HEADER_BYTES_MAX: usize = 32;

impl Boundaries {
    /// Scans `piece`, the next bytes of the stream: the position just after the last command
    /// that ends in it, if one does.
    pub fn scan(&mut self, piece: &[u8]) -> Result<Option<usize>, RespError> {
        let mut last = None;
        let mut at = 0;
        while at < piece.len() {
            match self.state {
                Scan::Body { bytes, args } => {
                    let take = bytes.min((piece.len() - at) as u64);
                    at += take as usize;
                    self.state = if take == bytes {
                        self.after_element(args, &mut last, at)
                    } else {
                        Scan::Body { bytes: bytes - take, args }
                    };
                }
                Scan::Array | Scan::Bulk { .. } => {
                    let Some(end) = piece[at..].iter().position(|&b| b == b'\n') else {
                        self.push_line(&piece[at..])?;
                        break;
                    };
                    self.push_line(&piece[at..at + end + 1])?;
                    at += end + 1;
                    let header = std::mem::take(&mut self.line);
                    self.state = self.header(&header, &mut last, at)?;
                }
            }
        }
        Ok(last)
    }

    fn push_line(&mut self, bytes: &[u8]) -> Result<(), RespError> {
        self.line.extend_from_slice(bytes);
        if self.line.len() > HEADER_BYTES_MAX {
            return Err(RespError::LineTooLong { max: HEADER_BYTES_MAX });
        }
        Ok(())
    }

    fn header(&self, line: &[u8], last: &mut Option<usize>, at: usize) -> Result<Scan, RespError> {
        let text = line.strip_suffix(b"\r\n").ok_or(RespError::BadNumber)?;
        let (&kind, digits) = text.split_first().ok_or(RespError::BadNumber)?;
        let n: u64 = std::str::from_utf8(digits)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(RespError::BadNumber)?;
        Ok(match (self.state, kind) {
            // A header near u64::MAX is no length the stream can have: an error, not an
            // overflow.
            (Scan::Array, b'*') => {
                self.after_element(n.checked_add(1).ok_or(RespError::BadNumber)?, last, at)
            }
            (Scan::Bulk { args }, b'$') => {
                Scan::Body { bytes: n.checked_add(2).ok_or(RespError::BadNumber)?, args }
            }
            (_, other) => return Err(RespError::BadType(other)),
        })
    }

    /// One element (or the array's header, counted as one) is done; `args` were left before it.
    fn after_element(&self, args: u64, last: &mut Option<usize>, at: usize) -> Scan {
        if args <= 1 {
            *last = Some(at);
            Scan::Array
        } else {
            Scan::Bulk { args: args - 1 }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(e: Entry) -> Vec<u8> {
        let mut out = Vec::new();
        e.encode(&mut out);
        out
    }

    #[test]
    fn entries_round_trip() {
        let l = Leadership { node: 7, term_ns: 1 << 40 };
        for e in [
            Entry::Stream(l, b"*1\r\n$4\r\nPING\r\n"),
            Entry::StreamPart(l, b"*2"),
            Entry::Stream(l, b""),
            Entry::Leader(l),
            Entry::Barrier,
        ] {
            assert_eq!(Entry::decode(&entry(e)), Some(e));
        }
        assert_eq!(entry(Entry::Stream(l, b"ab")).len(), ENTRY_HEADER_BYTES + 2);
        assert_eq!(Entry::decode(&[]), None);
        assert_eq!(Entry::decode(&[9, 1]), None);
        assert_eq!(Entry::decode(&[KIND_LEADER, 1]), None);
        assert_eq!(Entry::decode(&[KIND_STREAM, 1, 2, 3]), None);
    }

    const A: Leadership = Leadership { node: 0, term_ns: 5 };
    const B: Leadership = Leadership { node: 1, term_ns: 9 };

    #[test]
    fn the_current_leaderships_stream_is_appended_and_named() {
        let mut a = Applier::default();
        let mut out = Vec::new();
        assert_eq!(a.apply(&entry(Entry::Leader(A)), &mut out), Applied::Leader(A));
        assert_eq!(a.apply(&entry(Entry::Stream(A, b"ab")), &mut out), Applied::Stream(A));
        assert_eq!(out, b"ab");
        out.clear();
        assert_eq!(a.apply(&entry(Entry::Leader(B)), &mut out), Applied::Leader(B));
        assert_eq!(a.apply(&entry(Entry::StreamPart(B, b"c")), &mut out), Applied::Stream(B));
        assert!(out.is_empty(), "a part is held until its end");
        assert_eq!(a.held(), b"c");
        assert_eq!(a.apply(&entry(Entry::Stream(B, b"d")), &mut out), Applied::Stream(B));
        assert_eq!(out, b"cd");
        assert_eq!(a.apply(&[0xee], &mut out), Applied::Malformed);
    }

    #[test]
    fn a_part_left_without_its_end_is_not_stream() {
        let mut a = Applier::default();
        let mut out = Vec::new();
        a.apply(&entry(Entry::Leader(A)), &mut out);
        a.apply(&entry(Entry::StreamPart(A, b"half")), &mut out);
        a.apply(&entry(Entry::Leader(B)), &mut out);
        assert_eq!(a.apply(&entry(Entry::Stream(B, b"xy")), &mut out), Applied::Stream(B));
        assert_eq!(out, b"xy", "nobody ran the part whose end never committed");
    }

    #[test]
    fn a_restored_applier_goes_on_where_its_donor_was() {
        let mut a = Applier::restored(Some(A), b"*1\r\n$4".to_vec());
        let mut out = Vec::new();
        assert_eq!(
            a.apply(&entry(Entry::Stream(A, b"\r\nPING\r\n")), &mut out),
            Applied::Stream(A)
        );
        assert_eq!(out, b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(a.apply(&entry(Entry::Stream(B, b"x")), &mut out), Applied::Stale);
    }

    #[test]
    fn a_deposed_leaders_late_entries_are_skipped_everywhere() {
        for me in [0, 1, 2] {
            let mut a = Applier::default();
            let mut out = Vec::new();
            a.apply(&entry(Entry::Leader(A)), &mut out);
            a.apply(&entry(Entry::Leader(B)), &mut out);
            assert_eq!(a.apply(&entry(Entry::Stream(A, b"late")), &mut out), Applied::Stale);
            assert_eq!(a.apply(&entry(Entry::StreamPart(A, b"la")), &mut out), Applied::Stale);
            assert!(out.is_empty(), "replica {me} ran a deposed leader's stream");
        }
    }

    #[test]
    fn a_part_waits_for_its_end_and_dies_with_its_leader() {
        let mut a = Applier::default();
        let mut out = Vec::new();
        a.apply(&entry(Entry::Leader(A)), &mut out);
        a.apply(&entry(Entry::StreamPart(A, b"*1\r\n$4")), &mut out);
        assert!(out.is_empty());
        a.apply(&entry(Entry::Stream(A, b"\r\nPING\r\n")), &mut out);
        assert_eq!(out, b"*1\r\n$4\r\nPING\r\n");
        out.clear();
        a.apply(&entry(Entry::StreamPart(A, b"*1\r\n$4")), &mut out);
        a.apply(&entry(Entry::Leader(B)), &mut out);
        a.apply(&entry(Entry::Stream(B, b"*1\r\n$4\r\nPING\r\n")), &mut out);
        assert_eq!(out, b"*1\r\n$4\r\nPING\r\n", "the dead leader's part was dropped");
    }

    #[test]
    fn boundaries_are_found_across_any_cut() {
        let stream = b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$12\r\n\r\n*1\r\n$4\r\nab\r\n";
        let first_end = 23;
        let whole = stream.len();
        // Every way of cutting the stream in two finds the same boundaries.
        for cut in 0..=whole {
            let mut b = Boundaries::default();
            let mut found = Vec::new();
            if let Some(end) = b.scan(&stream[..cut]).unwrap() {
                found.push(end);
            }
            if let Some(end) = b.scan(&stream[cut..]).unwrap() {
                found.push(cut + end);
            }
            let expected: Vec<usize> =
                if cut >= first_end && cut < whole { vec![first_end, whole] } else { vec![whole] };
            assert_eq!(found, expected, "cut at {cut}");
        }
    }

    #[test]
    fn bytes_one_at_a_time_and_garbage() {
        let stream = b"*1\r\n$4\r\nPING\r\n";
        let mut b = Boundaries::default();
        let ends: Vec<usize> = stream
            .iter()
            .enumerate()
            .filter_map(|(i, byte)| b.scan(std::slice::from_ref(byte)).unwrap().map(|e| i + e))
            .collect();
        assert_eq!(ends, vec![stream.len()]);
        assert!(Boundaries::default().scan(b"+OK\r\n").is_err());
        assert!(Boundaries::default().scan(&[b'*'; 64]).is_err());
    }

    #[test]
    fn headers_at_the_largest_count_are_errors_not_overflows() {
        let max = u64::MAX;
        assert_eq!(
            Boundaries::default().scan(format!("*{max}\r\n").as_bytes()),
            Err(RespError::BadNumber)
        );
        let bulk = format!("*2\r\n${max}\r\n");
        assert_eq!(Boundaries::default().scan(bulk.as_bytes()), Err(RespError::BadNumber));
        let bulk = format!("*2\r\n${}\r\n", max - 2);
        assert_eq!(Boundaries::default().scan(bulk.as_bytes()), Ok(None), "the largest that fits");
    }
}
