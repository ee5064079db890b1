//! The world's trace: a running 64-bit hash of every event, and the most recent events in full.
//!
//! The hash is what determinism tests compare: two runs from the same seed with the same calls
//! must produce the same hash, bit for bit. The recent events are for a human reading a failure.

use crate::rng::splitmix64;
use mu_fabric::{NodeId, Status};
use std::collections::VecDeque;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceKind {
    /// A work request was accepted by `post` (`detail`: its `wr_id`).
    Post,
    /// One chunk of a write, a read's snapshot, or a CAS was applied at the target (`detail`: a
    /// digest of the bytes written, or the CAS's previous value).
    Land,
    /// An operation stopped landing with the given status (`detail`: its `wr_id`).
    LandEnd,
    /// A completion was delivered, or dropped because its endpoint is gone (`detail`: `wr_id`).
    Complete,
    /// A landing was parked because its initiator is held (`detail`: `wr_id`).
    Park,
    /// A local write through a region handle (`bytes`: its length, `detail`: the offset).
    LocalWrite,
    /// A region was registered (`detail`: its id).
    Register,
    /// An endpoint was opened or a connection attached to one.
    Endpoint,
    /// A connection side changed state (`detail`: the new state).
    ModifyQp,
    /// A fast permission change (`status`: `None` when it succeeded, `Flushed` for `Busy`).
    AccessFast,
    /// A slow permission change.
    AccessSlow,
    /// Fault injection: a node crashed.
    Crash,
    /// Fault injection: a node restarted (`detail`: its new incarnation).
    Restart,
    /// Fault injection: a node's CPU stopped.
    Pause,
    /// Fault injection: a node's CPU runs again.
    Resume,
    /// Fault injection: the link between `node` and `peer` was cut.
    Partition,
    /// Fault injection: the link between `node` and `peer` was restored.
    Heal,
    /// Fault injection: a link's delay was changed (`bytes`: extra ns, `detail`: jitter ns).
    LinkDelay,
    /// Fault injection: a node's outgoing operations were held or released (`detail`: 1 held).
    Hold,
    /// Fault injection: the world's fault switches were changed.
    Faults,
}

/// One recorded event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// Virtual time of the event.
    pub time_ns: u64,
    pub kind: TraceKind,
    /// The node the event is about (the initiator, for operations).
    pub node: NodeId,
    /// The other node, where there is one (the target of an operation).
    pub peer: Option<NodeId>,
    pub status: Option<Status>,
    /// Bytes moved, where that means something.
    pub bytes: u64,
    /// Kind-specific detail (see [`TraceKind`]).
    pub detail: u64,
}

impl TraceEvent {
    /// An event about `node`; the world fills in the time when recording it.
    pub(crate) fn new(kind: TraceKind, node: NodeId) -> TraceEvent {
        TraceEvent { time_ns: 0, kind, node, peer: None, status: None, bytes: 0, detail: 0 }
    }

    pub(crate) fn peer(mut self, peer: NodeId) -> TraceEvent {
        self.peer = Some(peer);
        self
    }

    pub(crate) fn status(mut self, status: Status) -> TraceEvent {
        self.status = Some(status);
        self
    }

    pub(crate) fn bytes(mut self, bytes: u64) -> TraceEvent {
        self.bytes = bytes;
        self
    }

    pub(crate) fn detail(mut self, detail: u64) -> TraceEvent {
        self.detail = detail;
        self
    }
}

pub(crate) struct Trace {
    hash: u64,
    count: u64,
    recent: VecDeque<TraceEvent>,
    capacity: usize,
}

impl Trace {
    pub(crate) fn new(capacity: usize) -> Trace {
        Trace { hash: 0, count: 0, recent: VecDeque::new(), capacity }
    }

    pub(crate) fn record(&mut self, event: TraceEvent) {
        let words = [
            event.time_ns,
            event.kind as u64,
            u64::from(event.node.0),
            event.peer.map_or(u64::MAX, |p| u64::from(p.0)),
            event.status.map_or(u64::MAX, status_code),
            event.bytes,
            event.detail,
        ];
        for word in words {
            // SplitMix's finalizer is a bijection, so every word changes the hash.
            let mut state = self.hash ^ word;
            self.hash = splitmix64(&mut state);
        }
        self.count += 1;
        if self.capacity > 0 {
            if self.recent.len() == self.capacity {
                self.recent.pop_front();
            }
            self.recent.push_back(event);
        }
    }

    pub(crate) fn hash(&self) -> u64 {
        self.hash
    }

    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    pub(crate) fn recent(&self) -> Vec<TraceEvent> {
        self.recent.iter().copied().collect()
    }
}

fn status_code(status: Status) -> u64 {
    match status {
        Status::Success => 0,
        Status::RemoteAccessDenied => 1,
        Status::RemoteOutOfBounds => 2,
        Status::RemoteInvalidRequest => 3,
        Status::LocalProtection => 4,
        Status::Flushed => 5,
        Status::PeerUnreachable => 6,
    }
}

/// FNV-1a over `bytes`: a cheap digest of landed data for the trace.
pub(crate) fn digest(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01B3);
    }
    h
}
