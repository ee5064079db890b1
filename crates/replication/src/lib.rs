//! Mu's replication plane (Mu paper §4) as pure state machines: no threads, no clock, no I/O.
//!
//! * [`Leader`] is the replicator of a replica that believes it leads: it builds its confirmed
//!   followers by permission requests, catches up from the most advanced one (Listing 3), brings
//!   the others up to date (Listing 4), and replicates each value with prepare and accept phases
//!   over one-sided reads and writes (Listing 2), omitting prepare once it found only empty slots.
//! * [`Replayer`] applies committed entries of the local log in order, learning commits by
//!   piggybacking (§4.2): entry `i` is decided once entry `i + 1` is complete or the FUO passed it.
//!
//! The engines touch the replica's own memory through [`Memory`] and everything remote through
//! [`Action`]s that a runtime turns into fabric work requests; completions come back as events.
//! That is what lets the same engine run on shared memory, on RDMA and in the simulator, and be
//! tested with no fabric at all (`tests/`).

#![forbid(unsafe_code)]

mod detector;
mod leader;
pub mod membership;
pub mod mutation;
mod permissions;
mod position_set;
mod replayer;
pub mod standing;

pub use detector::{Detector, DetectorConfig, FateSharing};
pub use leader::{
    AbortReason, Grant, Leader, LeaderConfig, Phase, ProposeError, CATCH_UP_BATCH_SLOTS,
    FUO_PUBLISH_AFTER_NS, UPDATE_CHUNK_SLOTS,
};
pub use permissions::{
    request_word, split_request, PermStep, PermissionManager, ACK_RECOVERING, REQUEST_SEQ_MAX,
};
pub use position_set::{PositionSet, Positions, REPLICAS_MAX};
pub use replayer::Replayer;

use mu_fabric::NodeId;

/// The version of everything replicas of one cluster share: the log's layout, the request and
/// grant words, the heartbeat and membership records. Raised whenever one of them changes, so
/// that a replica of another build is refused at start ([`protocol_tag`]) rather than reading
/// memory it does not understand. 2: the entry checksum in four lanes (`mu_log`), which reads
/// an entry of version 1 as incomplete. 3: the heartbeat's flags carry the configuration's
/// fingerprint, which a replica of version 2 leaves 0 (and so is never counted alive). 4: the
/// heartbeat says whether its run started as a member in good standing, and which peers it
/// refuses as restarted without rejoining (`mu_replica::layout::FLAG_FOUNDING`), which a
/// replica of version 3 would neither say nor heed. 5: the entry checksum's lanes take a word
/// with one multiplication (`mu_log`), which reads an entry of version 4 as incomplete.
pub const PROTOCOL_VERSION: u32 = 5;

/// The name and version a replica records on its fabric, e.g. `mu/5`: a fabric refuses nodes
/// that speak anything else in the same cluster.
pub fn protocol_tag() -> String {
    format!("mu/{PROTOCOL_VERSION}")
}

/// The most entries a leader may have in the accept phase at once (§7.4).
pub const OUTSTANDING_MAX: usize = 64;

/// The region holding a replica's consensus log (same id on every replica).
pub const LOG_REGION: mu_fabric::RegionId = mu_fabric::RegionId(0);
/// The region where a leader receives what it reads from its followers.
pub const SCRATCH_REGION: mu_fabric::RegionId = mu_fabric::RegionId(1);
/// The connection channel of the replication plane.
pub const REPLICATION_CHANNEL: u8 = 0;

/// The replicas of a cluster, in id order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaSet {
    ids: Vec<NodeId>,
}

impl ReplicaSet {
    /// A set of distinct replicas, at most [`REPLICAS_MAX`].
    pub fn new(mut ids: Vec<NodeId>) -> Result<ReplicaSet, String> {
        ids.sort();
        if ids.is_empty() {
            return Err("a cluster needs at least one replica".into());
        }
        if ids.len() > REPLICAS_MAX {
            return Err(format!("{} replicas, at most {REPLICAS_MAX} are supported", ids.len()));
        }
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(format!("replica ids must be distinct: {ids:?}"));
        }
        Ok(ReplicaSet { ids })
    }

    pub fn ids(&self) -> &[NodeId] {
        &self.ids
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The position of `id` in the set.
    pub fn position(&self, id: NodeId) -> Option<usize> {
        self.ids.binary_search(&id).ok()
    }

    /// The smallest number of replicas that any two such groups share one of: more than half.
    /// (The original Mu code computed `(n + 1) / 2`, which is wrong for even `n`: 2 of 4.)
    pub fn majority(&self) -> usize {
        self.ids.len() / 2 + 1
    }
}

/// An area of the replica's own registered memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Area {
    Log,
    Scratch,
}

/// A write to this replica's own log was refused: its permission manager has given write access
/// to the log to another leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Revoked;

/// The replica's own memory as an engine sees it: its log and its scratch area. A runtime backs
/// it with fabric regions; tests with byte vectors ([`VecMemory`]).
pub trait Memory {
    fn read(&self, area: Area, offset: u64, out: &mut [u8]);

    /// Writes memory the replica owns whatever the permissions: its scratch area, the words of
    /// its log that only it writes (the log head), and, as it installs a snapshot, the slots the
    /// snapshot skipped (`ReplicationDriver::forget_skipped_slots` in the runtime).
    fn write(&mut self, area: Area, offset: u64, data: &[u8]);

    /// Writes the consensus part of the replica's own log (slots, minProposal, FUO) as its
    /// leader. Like a remote leader's writes, this must stop as a barrier once the replica's
    /// permission manager grants another leader write access to the log: then it fails, and the
    /// engine aborts.
    fn write_guarded(&mut self, offset: u64, data: &[u8]) -> Result<(), Revoked>;

    fn load_u64(&self, area: Area, offset: u64) -> u64 {
        let mut b = [0u8; 8];
        self.read(area, offset, &mut b);
        u64::from_le_bytes(b)
    }

    fn store_u64(&mut self, area: Area, offset: u64, value: u64) {
        self.write(area, offset, &value.to_le_bytes());
    }
}

/// Memory in byte vectors, for tests and tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VecMemory {
    pub log: Vec<u8>,
    pub scratch: Vec<u8>,
    /// Whether guarded writes are refused (another leader holds this log).
    pub revoked: bool,
}

impl VecMemory {
    pub fn new(log_bytes: usize, scratch_bytes: usize) -> VecMemory {
        VecMemory { log: vec![0; log_bytes], scratch: vec![0; scratch_bytes], revoked: false }
    }

    fn area(&self, area: Area) -> &Vec<u8> {
        match area {
            Area::Log => &self.log,
            Area::Scratch => &self.scratch,
        }
    }
}

impl Memory for VecMemory {
    fn read(&self, area: Area, offset: u64, out: &mut [u8]) {
        let at = offset as usize;
        out.copy_from_slice(&self.area(area)[at..at + out.len()]);
    }

    fn write(&mut self, area: Area, offset: u64, data: &[u8]) {
        let at = offset as usize;
        let bytes = match area {
            Area::Log => &mut self.log,
            Area::Scratch => &mut self.scratch,
        };
        bytes[at..at + data.len()].copy_from_slice(data);
    }

    fn write_guarded(&mut self, offset: u64, data: &[u8]) -> Result<(), Revoked> {
        if self.revoked {
            return Err(Revoked);
        }
        self.write(Area::Log, offset, data);
        Ok(())
    }
}

/// A one-sided operation on a peer, in terms of the log layout. Offsets in the peer's log are the
/// same as in ours: a leader copies between equal places.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteOp {
    /// Write `len` bytes of our log at `offset` to the peer's log at `offset`.
    WriteFromLog { offset: u64, len: u32 },
    /// Write one 8-byte word into the peer's log (minProposal, FUO), inline.
    WriteWord { offset: u64, value: u64 },
    /// Read `len` bytes of the peer's log at `offset` into our scratch area at `scratch_offset`.
    ReadIntoScratch { offset: u64, scratch_offset: u64, len: u32 },
}

/// What an engine asks its runtime to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Ask `peer`'s permission manager for write access to its log (§5.2); the answer comes back
    /// through [`Leader::on_permission`]. Requests of one `round` share one request word; a new
    /// round needs a new word (the managers answered the old one already). The requests of a
    /// round may come at different times: one to a replica we may still have writes in flight
    /// to waits until they have landed or failed (see [`Leader::fence_pending`]).
    RequestPermission { peer: NodeId, round: u32 },
    /// Post a work request to `peer` on the replication plane.
    Post { peer: NodeId, wr_id: u64, op: RemoteOp, signaled: bool },
    /// Log index `index` is decided; `mine` if it holds the value being proposed.
    Committed { index: u64, mine: bool },
    /// The oldest of the application's proposals not written before has now been written into
    /// our log and posted to the confirmed followers (the accept phase, Listing 2, lines 29–32),
    /// once per proposal whatever the aborts after. From here on it may be decided even if this
    /// leader stops or steps down (a later leader adopts it in prepare), so the runtime must
    /// report it as of unknown outcome, never as refused. Carried out in order with the posts,
    /// like every action.
    Exposed,
    /// The attempt was aborted; the engine starts again from permissions while it leads.
    Aborted { reason: AbortReason },
    /// `peer`'s log holds a minProposal that no leader writes (no proposal number can exceed
    /// it): its memory is corrupted, or the peer is faulty. The engine dropped it from the
    /// confirmed set, as it drops an unreachable follower, or, where `peer` is this replica,
    /// overwrites it in prepare; the runtime reports it. A follower is reported once per
    /// leadership, however many prepares drop it.
    CorruptPeer { peer: NodeId },
}
