//! Mailboxes: how the messages the paper sends two-sided (joins and leaves to the coordinator
//! leader, failure reports, cache renewals, §3.2) travel as one-sided writes.
//!
//! A mailbox is an area of the receiver's memory that exactly one sender writes; the receiver
//! polls it. Each message is one frame, written whole over the previous one:
//!
//! ```text
//! 0   cluster      u64   the sender's cluster id: a frame of another cluster is refused
//! 8   seq          u64   1, 2, 3, ... per mailbox and sender process: taken once each
//! 16  incarnation  u64   the sender process's random number: a restarted sender counts anew
//! 24  from         u16   the sender's node id
//! 26  kind         u16   what the payload is
//! 28  len          u32   payload bytes
//! 32  payload
//! ..  checksum  u64   over everything before it
//! ```
//!
//! The checksum makes a frame read while it was being overwritten (or landed out of order)
//! a torn frame, which the receiver skips: it reads the mailbox again at its next poll, and
//! senders repeat what is not answered yet. Frames are never partly believed.

use crate::view::Member;

const HEADER_BYTES: usize = 32;
/// Offsets of the sequence number and of the sender's incarnation in a frame: a receiver may
/// read these two words alone to see whether a mailbox holds a new frame ([`Inbox::is_new`])
/// before it reads the frame.
pub const SEQ_OFFSET: usize = 8;
pub const INCARNATION_OFFSET: usize = 16;
const CHECKSUM_BYTES: usize = 8;
const CHECKSUM_SEED: u64 = 0x756b_6d61_696c_626f;

/// Bytes of a frame with `payload_len` payload bytes.
pub const fn frame_len(payload_len: usize) -> usize {
    HEADER_BYTES + payload_len + CHECKSUM_BYTES
}

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Kind {
    Join = 1,
    Leave = 2,
    Report = 3,
    Renew = 4,
    Answer = 5,
    Lease = 6,
    Primary = 7,
}

impl Kind {
    fn from_u16(v: u16) -> Option<Kind> {
        Some(match v {
            1 => Kind::Join,
            2 => Kind::Leave,
            3 => Kind::Report,
            4 => Kind::Renew,
            5 => Kind::Answer,
            6 => Kind::Lease,
            7 => Kind::Primary,
            _ => return None,
        })
    }
}

/// A frame read from a mailbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    pub seq: u64,
    pub from: u16,
    pub kind: Kind,
    pub payload: &'a [u8],
}

/// Why a mailbox holds no new message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("torn frame (checksum mismatch): read again later")]
    Torn,
    #[error("a frame of cluster {found:#x}, this is cluster {expected:#x}")]
    OtherCluster { found: u64, expected: u64 },
    #[error("frame kind {0} unknown")]
    UnknownKind(u16),
    #[error("frame of {len} payload bytes does not fit the {room}-byte mailbox")]
    TooLong { len: usize, room: usize },
    #[error("frame from node {found}, the mailbox is node {expected}'s")]
    WrongSender { found: u16, expected: u16 },
}

/// Appends a frame to `out`.
pub fn encode(
    (cluster, seq, incarnation): (u64, u64, u64),
    from: u16,
    kind: Kind,
    payload: &[u8],
    out: &mut Vec<u8>,
) {
    let start = out.len();
    out.extend_from_slice(&cluster.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&incarnation.to_le_bytes());
    out.extend_from_slice(&from.to_le_bytes());
    out.extend_from_slice(&(kind as u16).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    let sum = mu_log::digest(CHECKSUM_SEED, &out[start..]);
    out.extend_from_slice(&sum.to_le_bytes());
}

/// The receiving side of one mailbox: `sender`'s, in a cluster.
#[derive(Clone, Debug)]
pub struct Inbox {
    cluster: u64,
    sender: u16,
    /// The sender incarnation and sequence number of the last frame taken.
    taken: (u64, u64),
}

impl Inbox {
    pub fn new(cluster: u64, sender: u16) -> Inbox {
        Inbox { cluster, sender, taken: (0, 0) }
    }

    /// Whether a frame numbered `seq` by a sender process of `incarnation` would be new: a
    /// higher number, or any number from another process (a restarted sender numbers anew).
    pub fn is_new(&self, seq: u64, incarnation: u64) -> bool {
        seq != 0 && (incarnation != self.taken.0 || seq > self.taken.1)
    }

    /// The new frame in the mailbox's bytes, if there is one: `Ok(None)` when it is empty or
    /// holds a frame already taken; an error for a torn or foreign frame (nothing is taken).
    pub fn take<'a>(&mut self, bytes: &'a [u8]) -> Result<Option<Frame<'a>>, FrameError> {
        if bytes.len() < HEADER_BYTES + CHECKSUM_BYTES {
            return Ok(None);
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
        let (seq, incarnation) = (word(SEQ_OFFSET), word(INCARNATION_OFFSET));
        if !self.is_new(seq, incarnation) {
            return Ok(None);
        }
        let len = u32::from_le_bytes(bytes[28..32].try_into().expect("4")) as usize;
        let room = bytes.len() - HEADER_BYTES - CHECKSUM_BYTES;
        if len > room {
            // A torn length field looks the same; the checksum cannot be found to tell.
            return Err(FrameError::TooLong { len, room });
        }
        let end = HEADER_BYTES + len;
        if mu_log::digest(CHECKSUM_SEED, &bytes[..end]) != word(end) {
            return Err(FrameError::Torn);
        }
        let cluster = word(0);
        if cluster != self.cluster {
            return Err(FrameError::OtherCluster { found: cluster, expected: self.cluster });
        }
        let from = u16::from_le_bytes([bytes[24], bytes[25]]);
        if from != self.sender {
            return Err(FrameError::WrongSender { found: from, expected: self.sender });
        }
        let kind = u16::from_le_bytes([bytes[26], bytes[27]]);
        let kind = Kind::from_u16(kind).ok_or(FrameError::UnknownKind(kind))?;
        self.taken = (incarnation, seq);
        Ok(Some(Frame { seq, from, kind, payload: &bytes[HEADER_BYTES..end] }))
    }
}

/// The sending side of one mailbox: numbers its frames.
#[derive(Clone, Debug)]
pub struct Outbox {
    cluster: u64,
    me: u16,
    incarnation: u64,
    seq: u64,
    frame: Vec<u8>,
}

impl Outbox {
    /// The outbox of node `me`'s process `incarnation` (a random number of the process).
    pub fn new(cluster: u64, me: u16, incarnation: u64) -> Outbox {
        Outbox { cluster, me, incarnation, seq: 0, frame: Vec::new() }
    }

    /// The bytes of the next frame, to be written whole at the mailbox's start.
    pub fn next(&mut self, kind: Kind, payload: &[u8]) -> &[u8] {
        self.seq += 1;
        self.frame.clear();
        let header = (self.cluster, self.seq, self.incarnation);
        encode(header, self.me, kind, payload, &mut self.frame);
        &self.frame
    }
}

/// A request to the coordinator leader (§3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Join; `incarnation` is the process's own random number (see `changes::Change::Join`).
    Join {
        incarnation: u64,
    },
    Leave {
        member: Member,
    },
    /// A longer or shorter lease for the next views (§6.3 adaptive leases: a compatible view
    /// when nothing else changes).
    Lease {
        lease_ns: u64,
    },
    /// Another member as the application's primary from the next view on (a primary that
    /// cannot serve names the one to take its place).
    Primary {
        node: u16,
    },
}

impl Request {
    pub fn kind(&self) -> Kind {
        match self {
            Request::Join { .. } => Kind::Join,
            Request::Leave { .. } => Kind::Leave,
            Request::Lease { .. } => Kind::Lease,
            Request::Primary { .. } => Kind::Primary,
        }
    }

    /// The payload bytes.
    pub fn payload(&self) -> [u8; 16] {
        let (a, b) = match *self {
            Request::Join { incarnation } => (incarnation, 0),
            Request::Leave { member } => (u64::from(member.node), member.uid),
            Request::Lease { lease_ns } => (lease_ns, 0),
            Request::Primary { node } => (u64::from(node), 0),
        };
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&a.to_le_bytes());
        out[8..].copy_from_slice(&b.to_le_bytes());
        out
    }

    /// The request a frame carries, if it carries one (a malformed payload is `None`).
    pub fn from_frame(frame: &Frame<'_>) -> Option<Request> {
        let p: &[u8; 16] = frame.payload.try_into().ok()?;
        let a = u64::from_le_bytes(p[..8].try_into().expect("8"));
        let b = u64::from_le_bytes(p[8..].try_into().expect("8"));
        match frame.kind {
            Kind::Join if b == 0 => Some(Request::Join { incarnation: a }),
            Kind::Leave if a < u64::from(u16::MAX) && a == u64::from(frame.from) => {
                Some(Request::Leave { member: Member { node: a as u16, uid: b } })
            }
            Kind::Lease if b == 0 => Some(Request::Lease { lease_ns: a }),
            Kind::Primary if b == 0 && a < u64::from(u16::MAX) => {
                Some(Request::Primary { node: a as u16 })
            }
            _ => None,
        }
    }
}

/// A coordinator's answer to a request that the next view does not answer itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// This coordinator does not lead; `leader` is the one it believes leads.
    NotLeader { leader: Option<u16> },
    /// The view is full.
    Full,
    /// The request named a unique id the latest view (of epoch `epoch`) does not give.
    StaleUid { epoch: u64 },
    /// The node id is reserved.
    ReservedNode,
}

impl Answer {
    pub fn payload(&self) -> [u8; 16] {
        let (code, value) = match *self {
            Answer::NotLeader { leader } => (1u64, leader.map_or(u64::MAX, u64::from)),
            Answer::Full => (2, 0),
            Answer::StaleUid { epoch } => (3, epoch),
            Answer::ReservedNode => (4, 0),
        };
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&code.to_le_bytes());
        out[8..].copy_from_slice(&value.to_le_bytes());
        out
    }

    pub fn from_frame(frame: &Frame<'_>) -> Option<Answer> {
        let p: &[u8; 16] = frame.payload.try_into().ok()?;
        let code = u64::from_le_bytes(p[..8].try_into().expect("8"));
        let value = u64::from_le_bytes(p[8..].try_into().expect("8"));
        if frame.kind != Kind::Answer {
            return None;
        }
        match code {
            1 if value == u64::MAX => Some(Answer::NotLeader { leader: None }),
            1 if value < u64::from(u16::MAX) => {
                Some(Answer::NotLeader { leader: Some(value as u16) })
            }
            2 => Some(Answer::Full),
            3 => Some(Answer::StaleUid { epoch: value }),
            4 => Some(Answer::ReservedNode),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mailbox(frame: &[u8], room: usize) -> Vec<u8> {
        let mut m = vec![0u8; frame_len(room).max(frame.len())];
        m[..frame.len()].copy_from_slice(frame);
        m
    }

    /// §3.2's requests as one-sided writes: each frame is taken once, in order.
    #[test]
    fn frames_are_taken_once() {
        let mut out = Outbox::new(7, 3, 11);
        let mut inbox = Inbox::new(7, 3);
        let join = Request::Join { incarnation: 99 };
        let m = mailbox(out.next(join.kind(), &join.payload()), 32);
        let frame = inbox.take(&m).unwrap().expect("a new frame");
        assert_eq!((frame.seq, frame.from, frame.kind), (1, 3, Kind::Join));
        assert_eq!(Request::from_frame(&frame), Some(join));
        assert_eq!(inbox.take(&m).unwrap(), None, "taken once");
        let leave = Request::Leave { member: Member { node: 3, uid: 1 << 16 | 3 } };
        let m = mailbox(out.next(leave.kind(), &leave.payload()), 32);
        let frame = inbox.take(&m).unwrap().unwrap();
        assert_eq!(Request::from_frame(&frame), Some(leave));
        let lease = Request::Lease { lease_ns: 40_000 };
        let m = mailbox(out.next(lease.kind(), &lease.payload()), 32);
        let frame = inbox.take(&m).unwrap().unwrap();
        assert_eq!(Request::from_frame(&frame), Some(lease));
        let primary = Request::Primary { node: 4 };
        let m = mailbox(out.next(primary.kind(), &primary.payload()), 32);
        let frame = inbox.take(&m).unwrap().unwrap();
        assert_eq!(Request::from_frame(&frame), Some(primary));
        assert_eq!(inbox.take(&[0u8; 64]).unwrap(), None, "an empty mailbox");
    }

    /// A frame read half-written is skipped whole, never partly believed.
    #[test]
    fn torn_and_foreign_frames_are_refused() {
        let mut out = Outbox::new(7, 3, 11);
        let frame = out.next(Kind::Join, &Request::Join { incarnation: 5 }.payload()).to_vec();
        for bit in (128..frame.len() * 8).step_by(7) {
            let mut torn = frame.clone();
            torn[bit / 8] ^= 1 << (bit % 8);
            let mut inbox = Inbox::new(7, 3);
            assert!(inbox.take(&mailbox(&torn, 32)).is_err(), "bit {bit}");
            assert!(inbox.take(&mailbox(&frame, 32)).unwrap().is_some(), "then the whole one");
        }
        let mut other = Inbox::new(8, 3);
        assert_eq!(
            other.take(&mailbox(&frame, 32)),
            Err(FrameError::OtherCluster { found: 7, expected: 8 })
        );
        let mut wrong = Inbox::new(7, 4);
        assert_eq!(
            wrong.take(&mailbox(&frame, 32)),
            Err(FrameError::WrongSender { found: 3, expected: 4 })
        );
        let mut small = Inbox::new(7, 3);
        assert!(small.take(&mailbox(&frame, 8)[..frame_len(8)]).is_err());
    }

    #[test]
    fn answers_round_trip() {
        let mut out = Outbox::new(7, 0, 11);
        for a in [
            Answer::NotLeader { leader: None },
            Answer::NotLeader { leader: Some(2) },
            Answer::Full,
            Answer::StaleUid { epoch: 9 },
            Answer::ReservedNode,
        ] {
            let m = mailbox(out.next(Kind::Answer, &a.payload()), 32);
            let mut inbox = Inbox::new(7, 0);
            let frame = inbox.take(&m).unwrap().unwrap();
            assert_eq!(Answer::from_frame(&frame), Some(a));
        }
    }

    /// A restarted sender numbers its frames from 1 again: they are new all the same.
    #[test]
    fn a_restarted_sender_is_heard() {
        let mut inbox = Inbox::new(7, 3);
        let mut first = Outbox::new(7, 3, 11);
        for _ in 0..5 {
            let m =
                mailbox(first.next(Kind::Join, &Request::Join { incarnation: 11 }.payload()), 32);
            assert!(inbox.take(&m).unwrap().is_some());
        }
        let mut second = Outbox::new(7, 3, 12);
        let m = mailbox(second.next(Kind::Join, &Request::Join { incarnation: 12 }.payload()), 32);
        assert_eq!(inbox.take(&m).unwrap().map(|f| f.seq), Some(1));
        assert_eq!(inbox.take(&m).unwrap(), None, "and taken once");
    }

    /// A leave names the sender itself: a node cannot ask another's removal.
    #[test]
    fn a_leave_for_another_node_is_no_request() {
        let mut out = Outbox::new(7, 3, 11);
        let leave = Request::Leave { member: Member { node: 4, uid: 9 } };
        let m = mailbox(out.next(leave.kind(), &leave.payload()), 32);
        let frame = Inbox::new(7, 3).take(&m).unwrap().unwrap();
        assert_eq!(Request::from_frame(&frame), None);
    }
}
