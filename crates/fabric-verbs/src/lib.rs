//! The RDMA fabric: the fabric API mapped onto libibverbs through the `sideway` crate.
//!
//! **Nothing here has run on RDMA hardware.** The machines this was written on have no RDMA device
//! (`ibv_get_device_list` fails with `ENOSYS`); it builds, and device discovery reports "no RDMA
//! device found" there. See `docs/fabric-verbs.md` for what was checked and what was not.
//!
//! The RDMA code is behind the cargo feature `verbs` (it needs cmake and libclang to build
//! `rdma-mummy-sys`). Without it the same types exist and [`VerbsFabric::open`] fails with
//! [`VerbsError::FeatureDisabled`], so code that names the backend builds everywhere.
//!
//! # The mapping
//!
//! | fabric API | verbs |
//! | --- | --- |
//! | a node ([`VerbsFabric::open`]) | a device context, one protection domain, one queue pair per possible (peer, channel), created at open and published in the run directory |
//! | [`Fabric::register_region`](mu_fabric::Fabric::register_region) | page-aligned zeroed memory registered twice: a *local* registration (local write and memory-window binding, no remote access) for this node's own requests, and a *shared* one whose remote flags are the region's [`Access`](mu_fabric::Access), which caps every connection |
//! | [`scope_region`](mu_fabric::Fabric::scope_region) | the region's published remote key: `Every`, the shared registration's; `Only(conn)`, the shared registration is deregistered and a type 2 memory window, bound on this node's side of `conn`, gives the key (a type 2 window admits only requests arriving on the queue pair it is bound to); `Nobody`, the local registration's, which reaches nothing. Every change republishes; peers read keys when they bind. A device without type 2 windows refuses `Only` with `Incompatible` |
//! | a connection side's state and flags | the RC queue pair's state and its `qp_access_flags` (what the *peer* may do here) |
//! | `modify_qp` to ready-to-receive | INIT→RTR with the peer's queue-pair number, PSN, LID/GID and MTU read from its published file |
//! | [`set_access_fast`](mu_fabric::Fabric::set_access_fast) | RTS→RTS changing the access flags only; on failure the queue pair is moved to ERR and `PermError::Busy` returned |
//! | [`set_access_slow`](mu_fabric::Fabric::set_access_slow) | RESET→INIT→RTR→RTS with the new flags and the peer information the side was bound with |
//! | an endpoint | the completion queues of the connections attached to it (one completion queue per queue pair, see below) polled by one thread |
//! | write / read / compare-and-swap | `ibv_wr_rdma_write` (inline up to the device's limit), `ibv_wr_rdma_read`, `ibv_wr_atomic_cmp_swp`, posted with the extended `ibv_wr_*` API |
//! | a remote address `(RegionId, offset)` | `(addr + offset, rkey)` from the peer's published regions, bounds-checked by the initiator |
//! | statuses | `REM_ACCESS_ERR` → `RemoteAccessDenied`, `RETRY_EXC_ERR`/`RNR_RETRY_EXC_ERR` → `PeerUnreachable`, `WR_FLUSH_ERR` → `Flushed`, `LOC_PROT_ERR` → `LocalProtection`, `REM_INV_REQ_ERR` → `RemoteInvalidRequest` |
//! | [`LocalRegion::compare_swap_u64`](mu_fabric::LocalRegion::compare_swap_u64) | a CPU atomic where the device's atomics are global (`IBV_ATOMIC_GLOB`), else a compare-and-swap through a loopback queue pair connected to itself |
//! | [`crash_notified`](mu_fabric::Fabric::crash_notified) | the peer's lock file in the run directory: free, or holding a later incarnation's number, once the incarnation bound to has died (`rundir::DeathWatch`) |
//!
//! ## Decisions
//!
//! * **One completion queue per queue pair.** A verbs queue pair's completion queue is fixed when
//!   it is created, but a fabric connection must exist (a peer connects to it) before it is
//!   attached to an endpoint. Rejected: one completion queue per node shared by the endpoints (a
//!   lock on the fast path) and re-creating the queue pair at attach time (its number would change
//!   under a peer that already connected). The cost: an endpoint polls one queue per attached
//!   connection.
//! * **Queue pairs exist from the start**, for peers `0..max_nodes` and every channel: a peer may
//!   bring its side to ready-to-receive before this node has touched the connection, and it needs
//!   this node's queue-pair number to do so.
//! * **Locally detected failures keep RDMA's order.** A bad remote address (unknown region, out of
//!   bounds, overflowing), a bad local slice or a misaligned compare-and-swap is found before
//!   anything is sent; the queue pair is moved to ERR (what a NIC does on such an error) and a
//!   signaled zero-length marker is posted in place of the request. The marker is flushed in
//!   order behind what was posted before it, and its completion carries the failure's status. The
//!   peer is never involved, so a local mistake cannot break the peer's side.
//! * **Unsignaled requests** are posted unsignaled, with a signaled one whenever a connection has
//!   had half its send queue unsignaled in a row or the endpoint is more than half full, so that
//!   the send queue and the endpoint's bookkeeping always drain.
//! * **The control plane changes a queue pair through `ibv_modify_qp` on its raw pointer** while
//!   the attached endpoint owns the sideway handle for posting: libibverbs allows the two at once,
//!   and no lock is taken on the fast path.
//! * **A scope is kept by which keys exist, not by a check of ours** (`verbs::scope`,
//!   `verbs::window`). A key that a scope leaves out dies on the device: the shared registration is
//!   deregistered, a window deallocated, so a peer still holding it is refused by the NIC whatever
//!   it does. The window for `Only(conn)` is bound by a work request the *control plane* posts on
//!   the side's queue pair, holding the control lock, while the endpoint may be posting on it:
//!   `ibv_wr_start`…`ibv_wr_complete` is a critical section the provider locks (no thread domain
//!   here), the bind is unsignaled with a work request id no endpoint uses (a failed bind shows as
//!   the side's next requests being flushed), and the queue pair has room for it beyond the
//!   endpoint's. The bind needs ready-to-send: a side that is not there when the region is scoped
//!   gets its window when it next moves there (`modify_qp`, `set_access_slow`). A window bound on a
//!   side that is then reset is replaced, with a new key, so that nothing rests on what a reset
//!   does to a bound window. In the fabric API's terms: a scope to one connection holds for
//!   operations its peer posts after its next move to ready-to-receive, once this node's side of
//!   the connection is ready to send, provided that side was not reset after the peer bound (a
//!   reset changes the key: the peer binds again, as a reset side needs anyway, its packet numbers
//!   starting over). Rejected: a lock on the endpoint's fast path; binding from the endpoint (one
//!   may not be attached, or not polling); a protection domain per connection (a registration per
//!   region and connection, and queue pairs that cannot move between domains).
//! * **Taking a connection out of a scope is no barrier** (as the API says), and more so here: a
//!   bind still queued behind a side's own requests when the scope moves on targets a window
//!   already deallocated. Were the device to give the same index (and key) to a later window before
//!   that bind runs, the bind could attach the later window to the old side. Resetting the side
//!   before narrowing, as callers that need a barrier do anyway (the request rings), discards the
//!   queued bind.

#![deny(unsafe_op_in_unsafe_fn)]

mod config;
mod error;
pub mod rundir;

pub use config::VerbsConfig;
pub use error::VerbsError;

#[cfg(feature = "verbs")]
mod verbs;
#[cfg(feature = "verbs")]
pub use verbs::{device_names, VerbsEndpoint, VerbsFabric, VerbsRegion, MAX_ENDPOINT_DEPTH};

#[cfg(not(feature = "verbs"))]
mod disabled;
#[cfg(not(feature = "verbs"))]
pub use disabled::{device_names, VerbsEndpoint, VerbsFabric, VerbsRegion};
