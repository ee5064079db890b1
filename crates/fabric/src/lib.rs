//! The one-sided fabric API every Mu backend implements.
//!
//! The API is shaped like RDMA verbs on purpose, so that the real RDMA backend is a thin mapping and
//! so that what the protocol engines rely on holds on every backend:
//!
//! * **Regions** ([`Fabric::register_region`]) are memory a node makes available to its peers, each
//!   registered with the access rights a remote peer may ever have on it ([`Access`]).
//! * **Connections** ([`ConnId`]) are reliable, FIFO, point-to-point queue pairs between two nodes.
//!   Each side of a connection has a [`QpState`] and a set of remote access flags: the flags on a
//!   node's side say what the *peer* may do to this node's regions. Changing them is how a node
//!   grants and revokes write permission ([`Fabric::set_access_fast`], [`Fabric::set_access_slow`]).
//! * **Work requests** ([`WorkRequest`]) are posted on an [`Endpoint`] — one completion queue and
//!   the connections bound to it, driven by one thread — and finish with a [`Completion`] whose
//!   [`Status`] tells success from each kind of failure.
//!
//! The semantics every backend keeps are listed in `docs/fabric.md` and checked by the
//! [`conformance`] suite, which every backend instantiates.

#![forbid(unsafe_code)]

mod access;
pub mod conformance;
mod error;
mod types;
pub mod wait;

pub use access::Access;
pub use error::{FabricError, PermError, PostError};
pub use types::{
    Completion, ConnId, LocalSlice, NodeId, Op, OpKind, QpState, RegionId, RegionScope, RemoteAddr,
    Source, Status, WorkRequest,
};

/// One node's view of the fabric: its control plane.
///
/// A `Fabric` handle is cheap to clone and may be used from any thread: the permission manager
/// changes access flags from its own thread while the replication thread posts on an
/// [`Endpoint`], as a verbs application calls `ibv_modify_qp` beside `ibv_post_send`.
pub trait Fabric: Clone + Send + Sync + 'static {
    /// A registered local region.
    type Region: LocalRegion;
    /// A completion queue with the connections bound to it.
    type Endpoint: Endpoint;

    /// A short name for messages and benchmark output (`"shm"`, `"sim"`, …).
    fn backend_name(&self) -> &'static str;

    /// This node's id.
    fn node(&self) -> NodeId;

    /// The largest payload a write may carry inline ([`Source::Inline`]).
    fn max_inline_bytes(&self) -> usize;

    /// Registers a region of `len_bytes` bytes, zeroed, that remote peers may access as `access`
    /// allows (and as each connection's flags further restrict).
    fn register_region(
        &self,
        id: RegionId,
        len_bytes: usize,
        access: Access,
    ) -> Result<Self::Region, FabricError>;

    /// Sets which connections may reach `region` (a region starts reachable by every one):
    /// an operation arriving through a side `scope` leaves out fails with
    /// [`Status::RemoteAccessDenied`], touches nothing, and moves the initiator's side to error,
    /// as any remote access error does.
    ///
    /// Taking a connection out of a region's scope is not a barrier by itself: an operation of
    /// that connection already admitted may still land. Callers that need one revoke the
    /// connection first ([`Fabric::modify_qp`] to reset, a barrier), as the request rings do
    /// before a client's ring goes to the next client. A scope that lets a connection in holds
    /// for operations that peer posts after its side next moves to ready-to-receive (on verbs
    /// the region's remote key changes with its scope, and a peer reads keys when it binds).
    /// Fails for a region not registered, or where the backend cannot keep the scope (the
    /// error says why).
    fn scope_region(&self, region: RegionId, scope: RegionScope) -> Result<(), FabricError>;

    /// Opens a completion queue that holds at most `depth` unpolled completions.
    fn endpoint(&self, depth: usize) -> Result<Self::Endpoint, FabricError>;

    /// The state of this node's side of `conn`.
    fn qp_state(&self, conn: ConnId) -> Result<QpState, FabricError>;

    /// The remote access flags of this node's side of `conn`: what the peer may do here.
    fn qp_access(&self, conn: ConnId) -> Result<Access, FabricError>;

    /// Whether the fabric knows, without waiting for a timeout, that `peer`'s incarnation this
    /// node last reached has crashed: a crash notification (on shared memory the kernel-kept
    /// death flag; on RDMA an asynchronous error event). `false` when it cannot tell (a peer
    /// never reached, or a fabric without notifications): callers keep their timeouts. Cheap
    /// enough to ask on every poll.
    fn crash_notified(&self, peer: NodeId) -> bool {
        let _ = peer;
        false
    }

    /// This node's doorbell count: peers raise it with [`Fabric::ring_doorbell`] after a control
    /// write this node's sleeping thread must act on (a permission request, a grant), so that
    /// a thread with nothing to do waits on it ([`Fabric::wait_doorbell`]) rather than sleeping
    /// blind. A doorbell is a wake-up, never a promise: a waiter looks at its memory again
    /// whatever woke it, and keeps every timeout it has. `0` on a backend without doorbells.
    fn doorbell(&self) -> u64 {
        0
    }

    /// Waits until this node's doorbell count differs from `seen` (read before the waiter last
    /// looked at its memory, so that a ring in between is not lost) or `timeout_ns` has passed,
    /// and returns the count then. May return early for no reason. A backend without doorbells
    /// sleeps for the timeout.
    fn wait_doorbell(&self, seen: u64, timeout_ns: u64) -> u64 {
        std::thread::sleep(std::time::Duration::from_nanos(timeout_ns));
        seen
    }

    /// Rings the doorbell of `peer` (this node's own included): raises its count and wakes its
    /// waiters, as a peer's write alone would not. Cheap when nobody waits; never blocks. A
    /// peer not reached yet, dead, or on a backend without doorbells is not rung; nothing
    /// depends on a ring but how soon a sleeping thread looks.
    fn ring_doorbell(&self, peer: NodeId) {
        let _ = peer;
    }

    /// Moves this node's side of `conn` to `to`, setting its remote access flags to `access`.
    ///
    /// Legal transitions are those of RDMA RC queue pairs: reset→init, init→ready-to-receive,
    /// ready-to-receive→ready-to-send, ready-to-send→ready-to-send (flags only), and any state to
    /// reset or error. Moving to ready-to-receive binds the connection to the peer's current
    /// incarnation: a peer that restarts later is unreachable through it until it is cycled.
    /// Moving to reset or error first waits for the peer's in-flight operations to finish, so
    /// it is a revocation barrier like [`Fabric::set_access_slow`] (fencing the peer if needed).
    ///
    /// A backend whose control operations wait on the network may be configured to keep each
    /// call short (the ofi backend's `call_wait_us`): a binding or a fence that has not
    /// finished when the call's wait runs out goes on, and the call fails with
    /// [`FabricError::InProgress`]. A revocation that does so has taken the rights away but is
    /// no barrier yet, as one whose fence failed. Callers that keep a thread's loop going (a
    /// heartbeat) call again later; only a backend so configured returns it.
    fn modify_qp(&self, conn: ConnId, to: QpState, access: Access) -> Result<(), FabricError>;

    /// Fast permission change: changes the access flags of this node's side of `conn` in place.
    ///
    /// Returns `Ok` only once the change holds as a barrier: no operation the new flags forbid
    /// lands afterwards. It may fail with [`PermError::Busy`] when the peer has operations in
    /// flight; the connection is then in the error state (as with RDMA, where changing flags
    /// under load can break the queue pair) and the caller uses [`Fabric::set_access_slow`].
    fn set_access_fast(&self, conn: ConnId, access: Access) -> Result<(), PermError>;

    /// Slow permission change: cycles this node's side of `conn` through reset, init,
    /// ready-to-receive and ready-to-send with the new flags, staying bound to the same peer
    /// incarnation. A peer stuck in the middle of an operation is fenced for good (see the
    /// backend's docs). Fails only if the side was never bound to a peer (use
    /// [`Fabric::connect`]) or a stuck peer could not be fenced, or with
    /// [`FabricError::InProgress`] as [`Fabric::modify_qp`] says.
    fn set_access_slow(&self, conn: ConnId, access: Access) -> Result<(), FabricError>;

    /// Convenience: brings this node's side of `conn` from reset to ready-to-send with `access`.
    fn connect(&self, conn: ConnId, access: Access) -> Result<(), FabricError> {
        self.modify_qp(conn, QpState::Reset, Access::NONE)?;
        self.modify_qp(conn, QpState::Init, access)?;
        self.modify_qp(conn, QpState::ReadyToReceive, access)?;
        self.modify_qp(conn, QpState::ReadyToSend, access)
    }
}

/// A completion queue and the connections bound to it. One thread drives an endpoint: it posts
/// work requests and polls completions; nothing here takes a lock on the fast path.
pub trait Endpoint: Send {
    /// Binds the send side of `conn` to this endpoint. A connection is bound to at most one
    /// endpoint at a time.
    fn attach(&mut self, conn: ConnId) -> Result<(), FabricError>;

    /// Posts a work request on `conn`.
    ///
    /// Errors found when posting (connection not ready to send, inline payload too large,
    /// completion queue full) are returned here and post nothing. Errors found by the remote side
    /// arrive as completions. A connection in the error state accepts posts and flushes them
    /// with [`Status::Flushed`], as verbs does.
    fn post(&mut self, conn: ConnId, wr: &WorkRequest<'_>) -> Result<(), PostError>;

    /// Moves up to `out.len()` completions into `out`, oldest first, and returns how many.
    /// Successful unsignaled work requests produce no completion; failed ones always do.
    fn poll(&mut self, out: &mut [Completion]) -> usize;
}

/// A region registered on this node. Local access goes through these methods so that a backend
/// can observe it (the simulator does, to land remote writes between local reads).
pub trait LocalRegion: Clone + Send + Sync + 'static {
    /// The region's id.
    fn id(&self) -> RegionId;

    /// The region's length in bytes.
    fn len_bytes(&self) -> usize;

    /// Copies `out.len()` bytes at `offset` into `out`.
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), FabricError>;

    /// Copies `data` to `offset`.
    fn write(&self, offset: usize, data: &[u8]) -> Result<(), FabricError>;

    /// Atomically loads the 8-byte word at `offset` (8-byte aligned), with acquire ordering.
    fn load_u64(&self, offset: usize) -> Result<u64, FabricError>;

    /// Atomically stores the 8-byte word at `offset` (8-byte aligned), with release ordering.
    fn store_u64(&self, offset: usize, value: u64) -> Result<(), FabricError>;

    /// Atomically replaces the 8-byte word at `offset` (8-byte aligned) with `desired` if it
    /// equals `expected`, and returns its previous value: atomic with the compare-and-swaps
    /// peers post on the same word ([`Op::CompareSwap`]). Velos's proposer uses it on its own
    /// acceptor's slot words. (On RDMA NICs whose atomics are atomic only among the NIC's own
    /// operations, a backend performs it through the NIC.)
    fn compare_swap_u64(
        &self,
        offset: usize,
        expected: u64,
        desired: u64,
    ) -> Result<u64, FabricError>;
}

/// Checks that `[offset, offset + len)` lies inside a region of `region_len` bytes.
pub fn check_bounds(offset: u64, len: u64, region_len: u64) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= region_len)
}

#[cfg(test)]
mod tests {
    use super::check_bounds;

    #[test]
    fn bounds_reject_overflow_and_overrun() {
        assert!(check_bounds(0, 8, 8));
        assert!(check_bounds(8, 0, 8));
        assert!(!check_bounds(1, 8, 8));
        assert!(!check_bounds(u64::MAX, 2, u64::MAX));
        assert!(!check_bounds(9, 0, 8));
    }
}
