//! What the replication plane's two drivers (Mu's, `mu.rs`, and Velos's, `velos.rs`) share
//! with the replica API: why a proposal failed, the settings they enforce, and what they need
//! from the application.

use mu_fabric::NodeId;
use mu_log::EntryKind;

/// Why a proposal failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProposeError {
    /// Only the leader proposes; `leader` is the replica this one believes leads, if any.
    #[error("this replica is not the leader{}", leader_hint(.leader))]
    NotLeader {
        /// The replica this one's failure detector elected, if any.
        leader: Option<NodeId>,
    },
    /// This replica stopped leading while the value was being replicated: it may or may not be
    /// committed (the next leader decides). Retry with the same client sequence number so that
    /// the state machine applies it once.
    #[error("leadership was lost while replicating; the value may or may not be committed")]
    Aborted,
    /// A request larger than an entry holds.
    #[error("value of {len} bytes is larger than an entry holds ({max} bytes)")]
    TooLarge {
        /// Its bytes.
        len: usize,
        /// The most one request may be: an entry's value bytes (`slot_bytes` less the entry's
        /// framing).
        max: usize,
    },
    /// A replica the leader counts on (one of its confirmed followers, or itself) has applied
    /// nothing for `log_full_timeout_ns` while the leader waited for it to free the slot the
    /// next index reuses: it stopped applying (its commit handler does not return, or its
    /// replayer cannot go on). A replica that applies, however slowly, slows the leader down
    /// instead. Nothing was overwritten.
    #[error(
        "the log is full: replica {replica} has not applied entry {oldest} (log of {slots_count} \
         slots) and applied nothing for log_full_timeout_ns while the leader waited for it: its \
         commit handler or replayer has stopped (a slow one only slows the leader down)"
    )]
    LogFull {
        /// The replica the leader waited for.
        replica: NodeId,
        /// The first entry it has not applied, as the leader last read its head.
        oldest: u64,
        /// The log's length in slots.
        slots_count: u64,
    },
    /// Another proposal is in progress on this replica.
    #[error("another proposal is in progress")]
    Busy,
    /// A call with no requests.
    #[error("nothing to propose: no requests were given")]
    Empty,
    /// The replica is shutting down, or has stopped after a panic on one of its threads or in
    /// the commit handler ([`crate::ReplicaStatus::failure`] says which).
    #[error("the replica is shutting down, or stopped (its status says why)")]
    ShuttingDown,
    /// A call made from inside the commit handler or a snapshot hook: those run inside the
    /// replication plane, which the call would wait for. Nothing was proposed.
    #[error(
        "propose was called from the commit handler or a snapshot hook, which run inside the \
         replication plane and would wait for themselves: hand the value to another thread \
         that proposes it"
    )]
    Reentrant,
    /// A membership change that cannot be made: the replica is not one of the cluster's, is
    /// already (or is not) a member, would be the last one removed, or another change is in
    /// progress.
    #[error("membership change refused: {0}")]
    Membership(String),
}

/// The engine's refusals, as the application sees them: the one place where the engine's layer
/// of errors becomes this one. (The runtime checks leadership and size before it hands a value
/// over, so in practice only `Busy`, which it takes as back-pressure, and `Membership` come.)
impl From<mu_replication::ProposeError> for ProposeError {
    fn from(refused: mu_replication::ProposeError) -> ProposeError {
        use mu_replication::ProposeError as Engine;
        match refused {
            Engine::NotLeader => ProposeError::NotLeader { leader: None },
            Engine::Busy => ProposeError::Busy,
            Engine::TooLarge { len, max } => ProposeError::TooLarge { len, max },
            Engine::Membership(why) => ProposeError::Membership(why),
        }
    }
}

impl ProposeError {
    /// Whether the request can never take effect, whatever happens next: it was refused before
    /// it reached a log, or reached none (`NotLeader`, `Busy`, `TooLarge`, `Empty`, `LogFull`,
    /// `Membership`, `Reentrant`). A client may then send something else instead. False for
    /// `Aborted` and `ShuttingDown`: the request may have been written somewhere and may still
    /// be decided, so a client retries it with the same sequence number (the state machine
    /// applies it once) or treats its outcome as unknown.
    pub fn never_applied(&self) -> bool {
        !matches!(self, ProposeError::Aborted | ProposeError::ShuttingDown)
    }
}

fn leader_hint(leader: &Option<NodeId>) -> String {
    match leader {
        Some(l) => format!(" (replica {l} is)"),
        None => " (no leader is known: no live majority is in sight, or an election is under \
                  way; the status's scores say which replicas this one hears)"
            .into(),
    }
}

/// Settings the driver enforces.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub permission_timeout_ns: u64,
    pub log_full_timeout_ns: u64,
    /// The most requests packed into one entry.
    pub batch_requests_max: usize,
    /// The largest snapshot the state-transfer region holds.
    pub snapshot_bytes_max: usize,
    /// The failure detector's read period: a replication thread that went several of them
    /// without a poll may have been deposed and overtaken meanwhile (Velos resyncs then).
    pub read_period_ns: u64,
}

impl Settings {
    /// The settings `config` gives (both engines' drivers take them).
    pub(crate) fn of(config: &crate::config::ReplicaConfig) -> Settings {
        Settings {
            permission_timeout_ns: config.permission_timeout_ns,
            log_full_timeout_ns: config.log_full_timeout_ns,
            batch_requests_max: config.batch_requests_max,
            snapshot_bytes_max: config.snapshot_bytes_max,
            read_period_ns: config.detector.read_period_ns,
        }
    }
}

/// What the replication plane needs from the application: the decided entries, in log order,
/// and for state transfer (a replica that lost its log, or fell more than a log behind, gets
/// another's state) snapshots taken and restored.
pub trait Applier {
    /// Applies one decided entry: `kind` tells the application's requests from the replicas'
    /// own entries (membership changes, empty entries).
    fn apply(&mut self, index: u64, kind: EntryKind, value: &[u8]);
    /// Writes into `out` (empty) the state after every entry applied so far.
    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), String>;
    /// Replaces the state with one `snapshot` wrote, at another replica.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String>;
}

/// Log writes this long or shorter go inline where the fabric allows it (Mu §6: "RDMA Writes
/// ... with payloads below a device-specific limit (256 bytes in our setup) are inlined"): the
/// NIC then needs no DMA read of the payload. Both engines' drivers follow it.
pub(crate) const INLINE_WRITE_BYTES_MAX: usize = 256;
