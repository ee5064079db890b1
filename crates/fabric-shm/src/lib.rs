//! The shared-memory fabric: the embedded default.
//!
//! Each node is a separate OS process on one host. A node's regions and its control segment are
//! files in a private run directory (put it on tmpfs: `/dev/shm` or `$XDG_RUNTIME_DIR`), mapped by
//! every peer that connects to it; peers find each other by node id in that directory, with no
//! registry server. One-sided operations are done entirely by the initiator's CPU: a write is a
//! `memcpy` into the target's mapping, a compare-and-swap is an atomic instruction on it. The
//! target's CPU takes no part.
//!
//! RDMA's safety semantics are kept:
//! * **Revocation is a barrier** — see [`guard`]: every operation is bracketed by an in-flight
//!   marker that the revoker waits for, and a writer stuck in flight is fenced ([`fence`]).
//! * **A dead target cannot acknowledge** — see [`liveness`]: after every operation the initiator
//!   reads the target's kernel-kept death flag and reports [`mu_fabric::Status::PeerUnreachable`] if it is set.
//! * **A completion means the bytes are in the target region** — operations execute when posted;
//!   the completion is queued after the copy.
//! * **FIFO per connection** — operations on a connection execute in posting order, by one thread.
//! * **Bounds and rights** are checked against the target's region header and the target's side of
//!   the connection before anything is copied.
//!
//! Node liveness and fencing rely on Linux (robust futexes, pidfds) and glibc's mutex layout.

mod barrier;
mod config;
mod control;
mod crash_watch;
mod doorbell;
mod endpoint;
pub mod fence;
mod futex;
pub mod guard;
pub mod layout;
pub mod liveness;
mod lookup;
pub mod mapping;
mod node;
mod peer;
mod prefault;
mod region;
mod remote_region;
mod start;

pub use config::{
    ShmConfig, COPY_CHUNK_BYTES, DEFAULT_PROTOCOL, MAX_CQ_DEPTH, MAX_INLINE_BYTES, MAX_REGION_BYTES,
};
pub use crash_watch::DeathWatch;
pub use endpoint::ShmEndpoint;
pub use node::ShmFabric;
pub use region::ShmRegion;

/// Locks one of the node's mutexes.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind, still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
