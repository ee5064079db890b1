use crate::{ConnId, NodeId, QpState, RegionId};

/// A control-plane error: registering regions, opening endpoints, changing connections.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FabricError {
    #[error("region {0} is already registered")]
    RegionExists(RegionId),
    #[error("region {0} is not registered")]
    UnknownRegion(RegionId),
    #[error("region of {len_bytes} bytes is not allowed: {why}")]
    BadRegionSize { len_bytes: usize, why: &'static str },
    #[error("access [{offset}, {offset}+{len}) is outside a region of {region_len} bytes")]
    OutOfBounds { offset: u64, len: u64, region_len: u64 },
    #[error("offset {0} is not 8-byte aligned")]
    Misaligned(u64),
    #[error("connection {0} does not exist: {why}", why = .1)]
    UnknownConnection(ConnId, &'static str),
    #[error("connection {conn} is already attached to another endpoint")]
    AlreadyAttached { conn: ConnId },
    #[error("connection {conn}: transition {from:?} -> {to:?} is not allowed")]
    InvalidTransition { conn: ConnId, from: QpState, to: QpState },
    #[error("peer {0} is not reachable: {1}")]
    PeerUnreachable(NodeId, String),
    #[error("incompatible: {0}")]
    Incompatible(String),
    #[error("fencing node {node} failed: {why}")]
    FenceFailed { node: NodeId, why: String },
    /// A control call's own wait ran out while its operation goes on (a backend asked to keep
    /// each call short, whose control operations wait on the network: see
    /// [`crate::Fabric::modify_qp`]). Nothing the call promises holds yet; the same call made
    /// again later takes the operation up where it is.
    #[error("still under way with node {0}: {1}")]
    InProgress(NodeId, String),
    #[error("bad configuration: {0}")]
    Config(String),
    #[error("{context}: {message}")]
    Io { context: String, message: String },
}

impl FabricError {
    /// An I/O error with what was being done when it happened.
    pub fn io(context: impl Into<String>, err: std::io::Error) -> FabricError {
        FabricError::Io { context: context.into(), message: err.to_string() }
    }
}

/// Why a work request could not be posted. Nothing was posted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    #[error("connection {conn} is in state {state:?}, not ready to send")]
    NotReadyToSend { conn: ConnId, state: QpState },
    #[error("connection {0} is not attached to this endpoint")]
    NotAttached(ConnId),
    #[error("inline payload of {len} bytes exceeds the limit of {max} bytes")]
    InlineTooLarge { len: usize, max: usize },
    #[error("completion queue is full: poll before posting more")]
    QueueFull,
    #[error("node {0} is paused and cannot post")]
    Paused(NodeId),
}

/// Why a fast permission change did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PermError {
    /// The peer had operations in flight. The connection is now in the error state; use the slow
    /// path.
    #[error("operations in flight on {0}: connection moved to error, use the slow path")]
    Busy(ConnId),
    #[error(transparent)]
    Fabric(#[from] FabricError),
}
