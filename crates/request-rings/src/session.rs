//! One admitted client as the server sees it: the next request it expects, the requests
//! accepted and not answered, and when the client was last heard of.

use crate::config::Geometry;
use crate::frame::{self, Checks, Expect, Invalid, Kind, HEADER_BYTES};
use crate::grant::ClientSlot;
use mu_fabric::{LocalRegion, NodeId};

pub(crate) struct Session {
    pub(crate) client: NodeId,
    pub(crate) slot: ClientSlot,
    /// The server's count of grants when this one was made; completions name it.
    pub(crate) grant_no: u64,
    /// The transport sequence number the server takes next: requests are taken in order.
    pub(crate) expected_seq: u64,
    /// Per ring slot: the request taken from it and not answered yet. The server does not read
    /// a ring slot again while it holds one: a client writes it again only once answered.
    pub(crate) pending: Vec<Option<u64>>,
    pub(crate) outstanding: u32,
    /// When a request was last taken or answered; `None` until the next poll stamps it (the
    /// server has no clock: admit and respond take no time).
    pub(crate) last_activity_ns: Option<u64>,
    pub(crate) last_crash_check_ns: Option<u64>,
    /// The last refused frame counted, so that one frame seen on many polls counts once.
    last_refused: Option<(u64, u64)>,
}

/// What the server found in the next ring slot.
pub(crate) enum Found {
    /// Nothing to take yet: an earlier frame, garbage, or a frame still landing.
    Nothing,
    /// A request of `len` bytes, now in the caller's buffer.
    Request { seq: u64, len: usize },
    /// An intact header for the expected request announcing more than a slot holds: refused,
    /// and the next request expected.
    Oversized { seq: u64, len: u32 },
}

impl Session {
    pub(crate) fn new(client: NodeId, slot: ClientSlot, grant_no: u64, slots: u32) -> Session {
        Session {
            client,
            slot,
            grant_no,
            expected_seq: 0,
            pending: vec![None; slots as usize],
            outstanding: 0,
            last_activity_ns: None,
            last_crash_check_ns: None,
            last_refused: None,
        }
    }

    /// Looks at the ring slot of the next expected request, and takes it into `payload` if it
    /// holds that request whole. `refused` counts intact frames of another generation or kind
    /// (someone else's, or a client that kept an old grant).
    pub(crate) fn next_request<R: LocalRegion>(
        &mut self,
        ring: &R,
        geometry: &Geometry,
        checks: Checks,
        payload: &mut Vec<u8>,
        refused: &mut u64,
    ) -> Found {
        let seq = self.expected_seq;
        let at = geometry.slot_of(seq);
        if self.pending[at].is_some() {
            return Found::Nothing;
        }
        let offset = geometry.request_offset(seq) as usize;
        let mut bytes = [0u8; HEADER_BYTES];
        if ring.read(offset, &mut bytes).is_err() {
            return Found::Nothing;
        }
        let Ok(header) = frame::read_header(&bytes) else { return Found::Nothing };
        let expect = Expect {
            kinds: &[Kind::Request],
            generation: self.slot.generation,
            seq,
            payload_bytes_max: geometry.request_payload_bytes_max(),
        };
        match frame::check_header(&header, &expect) {
            Ok(()) => {}
            Err(Invalid::Oversized { len, .. }) => {
                self.expected_seq += 1;
                return Found::Oversized { seq, len };
            }
            Err(Invalid::WrongGeneration { .. } | Invalid::WrongKind { .. }) => {
                if self.last_refused != Some((header.generation, header.seq)) {
                    self.last_refused = Some((header.generation, header.seq));
                    *refused += 1;
                }
                return Found::Nothing;
            }
            Err(_) => return Found::Nothing,
        }
        let len = header.len as usize;
        payload.resize(len, 0);
        if ring.read(offset + HEADER_BYTES, payload).is_err()
            || !frame::payload_matches(&header, payload, checks)
        {
            return Found::Nothing;
        }
        self.pending[at] = Some(seq);
        self.outstanding += 1;
        self.expected_seq += 1;
        Found::Request { seq, len }
    }

    /// Marks `seq` answered; false if it was not waiting for an answer.
    pub(crate) fn answer(&mut self, geometry: &Geometry, seq: u64) -> bool {
        let at = geometry.slot_of(seq);
        if self.pending[at] != Some(seq) {
            return false;
        }
        self.pending[at] = None;
        self.outstanding -= 1;
        self.last_activity_ns = None;
        true
    }

    /// Whether the client has been quiet for `idle_timeout_ns` with nothing outstanding.
    pub(crate) fn idle(&self, now_ns: u64, idle_timeout_ns: u64) -> bool {
        idle_timeout_ns > 0
            && self.outstanding == 0
            && self
                .last_activity_ns
                .is_some_and(|last| now_ns.saturating_sub(last) >= idle_timeout_ns)
    }

    /// Whether it is time to ask the fabric about the client's liveness again.
    pub(crate) fn crash_check_due(&mut self, now_ns: u64, interval_ns: u64) -> bool {
        let due = self.last_crash_check_ns.is_none_or(|t| now_ns.saturating_sub(t) >= interval_ns);
        if due {
            self.last_crash_check_ns = Some(now_ns);
        }
        due
    }
}
