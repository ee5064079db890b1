use std::fmt;

/// A node (replica) in the cluster.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct NodeId(pub u16);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// A region, by the id its owner registered it under. Every node of a cluster uses the same ids
/// for the same roles (the log, the background-plane area, …), so a peer names a remote region by
/// `(node, region id)` with no key exchange.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct RegionId(pub u16);

impl fmt::Display for RegionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// One side of a reliable connection: the peer it leads to and a channel number, so that two
/// nodes may share several independent connections (Mu uses one per plane).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ConnId {
    pub peer: NodeId,
    pub channel: u8,
}

impl ConnId {
    pub const fn new(peer: NodeId, channel: u8) -> ConnId {
        ConnId { peer, channel }
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/c{}", self.peer, self.channel)
    }
}

/// Which connections may reach a region, on top of the region's access and each side's flags
/// ([`Fabric::scope_region`](crate::Fabric::scope_region)): how a node that serves many peers
/// keeps each out of the others' regions, as an RDMA memory window bound to one queue pair does.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum RegionScope {
    /// Every connection: a region starts so.
    #[default]
    Every,
    /// Only this node's side of one connection (its peer and channel).
    Only(ConnId),
    /// No connection: the region stays local until scoped again.
    Nobody,
}

impl RegionScope {
    /// Whether an operation arriving through this node's side of `conn` may reach the region.
    pub fn admits(self, conn: ConnId) -> bool {
        match self {
            RegionScope::Every => true,
            RegionScope::Only(only) => only == conn,
            RegionScope::Nobody => false,
        }
    }
}

impl fmt::Display for RegionScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegionScope::Every => f.write_str("every connection"),
            RegionScope::Only(conn) => write!(f, "only {conn}"),
            RegionScope::Nobody => f.write_str("no connection"),
        }
    }
}

/// The state of one side of a connection, as an RDMA RC queue pair's.
///
/// Incoming operations are accepted only in [`QpState::ReadyToReceive`] and
/// [`QpState::ReadyToSend`]; posting needs [`QpState::ReadyToSend`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum QpState {
    Reset = 0,
    Init = 1,
    ReadyToReceive = 2,
    ReadyToSend = 3,
    Error = 4,
}

impl QpState {
    /// Decodes a state stored as its discriminant.
    pub const fn from_u8(v: u8) -> Option<QpState> {
        match v {
            0 => Some(QpState::Reset),
            1 => Some(QpState::Init),
            2 => Some(QpState::ReadyToReceive),
            3 => Some(QpState::ReadyToSend),
            4 => Some(QpState::Error),
            _ => None,
        }
    }

    /// Whether this side accepts operations from its peer.
    pub const fn accepts_remote(self) -> bool {
        matches!(self, QpState::ReadyToReceive | QpState::ReadyToSend)
    }

    /// Whether `self -> to` is a legal transition.
    pub const fn can_move_to(self, to: QpState) -> bool {
        matches!(
            (self, to),
            (_, QpState::Reset)
                | (_, QpState::Error)
                | (QpState::Reset, QpState::Init)
                | (QpState::Init, QpState::Init)
                | (QpState::Init, QpState::ReadyToReceive)
                | (QpState::ReadyToReceive, QpState::ReadyToSend)
                | (QpState::ReadyToSend, QpState::ReadyToSend)
        )
    }
}

/// A slice of one of this node's registered regions: the source of a write or the destination of
/// a read, as a verbs scatter-gather entry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LocalSlice {
    pub region: RegionId,
    pub offset: u64,
    pub len: u32,
}

/// An address in a peer's region; the peer is the connection's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RemoteAddr {
    pub region: RegionId,
    pub offset: u64,
}

/// Where a write's bytes come from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Source<'a> {
    /// From a local registered region, read when the write executes.
    Local(LocalSlice),
    /// Copied out of the caller's buffer when posted, up to [`crate::Fabric::max_inline_bytes`].
    Inline(&'a [u8]),
}

impl Source<'_> {
    pub fn len(&self) -> usize {
        match self {
            Source::Local(s) => s.len as usize,
            Source::Inline(d) => d.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A one-sided operation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Op<'a> {
    /// Writes bytes into the peer's region.
    Write { source: Source<'a>, remote: RemoteAddr },
    /// Reads bytes of the peer's region into a local region.
    Read { local: LocalSlice, remote: RemoteAddr },
    /// Atomically replaces the 8-byte word at `remote` (8-byte aligned) with `desired` if it
    /// equals `expected`. The completion carries the word's previous value.
    CompareSwap { remote: RemoteAddr, expected: u64, desired: u64 },
}

impl Op<'_> {
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Write { .. } => OpKind::Write,
            Op::Read { .. } => OpKind::Read,
            Op::CompareSwap { .. } => OpKind::CompareSwap,
        }
    }
}

/// A work request: an operation, the caller's id for it, and whether a successful completion is
/// wanted.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct WorkRequest<'a> {
    pub wr_id: u64,
    pub op: Op<'a>,
    /// Whether success produces a completion. Failure always does.
    pub signaled: bool,
}

impl<'a> WorkRequest<'a> {
    /// A signaled write.
    pub fn write(wr_id: u64, source: Source<'a>, remote: RemoteAddr) -> WorkRequest<'a> {
        WorkRequest { wr_id, op: Op::Write { source, remote }, signaled: true }
    }

    /// A signaled read.
    pub fn read(wr_id: u64, local: LocalSlice, remote: RemoteAddr) -> WorkRequest<'a> {
        WorkRequest { wr_id, op: Op::Read { local, remote }, signaled: true }
    }

    /// A signaled compare-and-swap.
    pub fn compare_swap(
        wr_id: u64,
        remote: RemoteAddr,
        expected: u64,
        desired: u64,
    ) -> WorkRequest<'a> {
        WorkRequest { wr_id, op: Op::CompareSwap { remote, expected, desired }, signaled: true }
    }

    /// The same request, unsignaled.
    pub fn unsignaled(mut self) -> WorkRequest<'a> {
        self.signaled = false;
        self
    }
}

/// The kind of operation a completion is for.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum OpKind {
    Write,
    Read,
    CompareSwap,
}

/// How a work request ended.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Status {
    /// Done: a write's bytes are in the remote region, a read's in the local one, a CAS was
    /// applied (or not, as its previous value says).
    Success,
    /// The peer's region or connection flags do not allow the operation, or the peer's side is
    /// not accepting. The connection moves to the error state.
    RemoteAccessDenied,
    /// The remote range is outside the region (or the region does not exist). The connection
    /// moves to the error state.
    RemoteOutOfBounds,
    /// A compare-and-swap on an address that is not 8-byte aligned. The connection moves to the
    /// error state.
    RemoteInvalidRequest,
    /// The local slice is outside its region or the region does not exist. The connection moves
    /// to the error state.
    LocalProtection,
    /// The connection was in the error state; the request was not executed.
    Flushed,
    /// The peer is dead or unreachable (retry exceeded). The connection moves to the error state.
    PeerUnreachable,
}

impl Status {
    /// Every status, for parsing and exhaustive tests.
    pub const ALL: [Status; 7] = [
        Status::Success,
        Status::RemoteAccessDenied,
        Status::RemoteOutOfBounds,
        Status::RemoteInvalidRequest,
        Status::LocalProtection,
        Status::Flushed,
        Status::PeerUnreachable,
    ];

    pub fn is_success(self) -> bool {
        self == Status::Success
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Parses what `Display` prints (`"PeerUnreachable"`, …): statuses cross process boundaries in
/// tests and tools as text.
impl std::str::FromStr for Status {
    type Err = String;

    fn from_str(s: &str) -> Result<Status, String> {
        Status::ALL
            .into_iter()
            .find(|st| st.to_string() == s)
            .ok_or_else(|| format!("unknown status {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::Status;

    #[test]
    fn status_text_round_trips() {
        for st in Status::ALL {
            assert_eq!(st.to_string().parse::<Status>(), Ok(st));
        }
        assert!("Sucess".parse::<Status>().is_err());
    }
}

/// The result of a work request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Completion {
    pub wr_id: u64,
    pub kind: OpKind,
    pub status: Status,
    /// For a successful compare-and-swap, the word's value before it; otherwise 0.
    pub value: u64,
}

impl Completion {
    /// An empty completion to fill a poll buffer with.
    pub const EMPTY: Completion =
        Completion { wr_id: 0, kind: OpKind::Write, status: Status::Success, value: 0 };
}
