//! Every error of the crate: clear values, never panics.

use crate::config::ConfigError;
use crate::grant::ClientSlot;
use mu_fabric::{ConnId, FabricError, NodeId, PostError, RegionId, Status};
use thiserror::Error;

/// Why a server could not start.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ServerError {
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("registering region {region}: {source}")]
    Register { region: RegionId, source: FabricError },
    #[error("opening the endpoint: {0}")]
    Endpoint(FabricError),
}

/// Why a client was not admitted.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AdmitError {
    #[error("every one of the {clients_max} client slots is taken")]
    SlotsFull { clients_max: u16 },
    #[error("node {0} is the server's own node")]
    ClientIsServer(NodeId),
    #[error("node {client} already holds slot {} (release it first)", slot.index)]
    AlreadyAdmitted { client: NodeId, slot: ClientSlot },
    #[error("node {client}'s previous slot is still being released: try again")]
    StillReleasing { client: NodeId },
    #[error("connecting to client node {client}: {source}")]
    Fabric { client: NodeId, source: FabricError },
}

/// Why a release was refused, or has not finished.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ReleaseError {
    #[error("slot {} of generation {:#x} is not admitted (released already, or never)", .0.index, .0.generation)]
    NotAdmitted(ClientSlot),
    #[error("grant of server {found:#x}, this is server {expected:#x}")]
    OtherServer { found: u64, expected: u64 },
    /// The slot is released (its client can no longer be answered), but the revocation of the
    /// client's write access has not held yet; the server's poll tries again and the slot is
    /// given to nobody until it holds.
    #[error("slot {index}: revoking the client's access has not held yet: {source}")]
    Revocation { index: u16, source: FabricError },
}

/// Why a response was not sent.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RespondError {
    #[error("slot {} of generation {:#x} is no longer admitted: its client is gone", .0.index, .0.generation)]
    StaleSlot(ClientSlot),
    #[error("request {seq} of slot {index} is not waiting for a response")]
    NotPending { index: u16, seq: u64 },
    #[error("response of {len} bytes is over the slot's {max}")]
    TooLarge { len: usize, max: usize },
    #[error("posting the response: {0}")]
    Post(PostError),
    #[error("staging the response: {0}")]
    Staging(FabricError),
}

/// Why a client could not open (or reopen) its ring.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum OpenError {
    #[error("the grant is for node {grant}, this is node {node}")]
    NotForThisNode { grant: NodeId, node: NodeId },
    #[error("the grant's geometry: {0}")]
    Geometry(ConfigError),
    #[error("registering region {region}: {source}")]
    Register { region: RegionId, source: FabricError },
    #[error("opening the endpoint: {0}")]
    Endpoint(FabricError),
    #[error("connection {conn}: {source}")]
    Connect { conn: ConnId, source: FabricError },
    #[error("the new grant's rings ({needed} bytes in region {region}) do not fit what this client registered ({registered} bytes)")]
    DoesNotFit { region: RegionId, needed: usize, registered: usize },
    #[error("the new grant names region {grant}, this client registered {registered}")]
    RegionDiffers { grant: RegionId, registered: RegionId },
}

/// Why a request was not sent. Nothing was written.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SendError {
    #[error("payload of {len} bytes is over the request slot's {max}")]
    TooLarge { len: usize, max: usize },
    #[error("not connected to a server: open or reopen a grant first")]
    NotConnected,
    #[error("all {slots} request slots hold requests not answered yet: poll first")]
    WindowFull { slots: u32 },
    #[error(
        "the connection to the server failed ({0}): the client was released or the server is gone"
    )]
    Disconnected(Status),
    #[error("posting the request: {0}")]
    Post(PostError),
    #[error("staging the request: {0}")]
    Staging(FabricError),
}

/// Why a client's poll stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum ClientError {
    /// A write of this client failed: the server revoked its access (it was released) or the
    /// server's node is gone. Requests not answered yet ([`crate::RingClient::unanswered`]) may
    /// be sent again after joining a server again.
    #[error(
        "the connection to the server failed ({0}): the client was released or the server is gone"
    )]
    Disconnected(Status),
}
