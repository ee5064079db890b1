//! A deterministic simulated fabric: every node in one process, virtual time, one seed.
//!
//! # The model
//!
//! A [`SimWorld`] holds every node's registered memory, both sides of every connection, the
//! network between nodes, an event queue and a virtual clock in nanoseconds. Nothing happens on
//! its own: the world is driven by one thread with [`SimWorld::step`] (run the next event),
//! [`SimWorld::run_until`], [`SimWorld::advance`] and [`SimWorld::run_until_idle`]. All random
//! choices (jitter, out-of-order landing, injected permission failures) come from one seeded
//! generator ([`SimRng`], xoshiro256**), and all state is kept in ordered maps, so the same seed
//! and the same calls give the same run, bit for bit; [`SimWorld::trace_hash`] summarizes a run
//! so tests can check that.
//!
//! [`SimWorld::node`] gives a [`SimFabric`], which implements [`mu_fabric::Fabric`]. Handles
//! share the world through an `Arc<Mutex<_>>`, so they are `Send + Sync` as the API requires.
//!
//! * **Local memory** ([`SimRegion`]) is read and written at once, at the current virtual time.
//!   A test that reads a region between two world events sees exactly what has landed.
//! * **Posting** checks what verbs checks at post time (paused node, attachment, ready-to-send,
//!   inline size, queue depth) and schedules the operation.
//! * **Landing**: an operation reaches its target one one-way latency later. Every check the
//!   target makes (its side's state, its side's access flags, the region's access, bounds,
//!   alignment, and whether it is alive and reachable) is made *at landing time*, against the
//!   state at that moment. A write lands as separate chunks ([`SimConfig::chunk_bytes`]), each
//!   its own event and each checked again: a right revoked while a write is in flight stops its
//!   remaining chunks, so a revocation is a barrier as on RDMA. A write's bytes come from an
//!   inline payload copied at post time, or from the local region as each chunk lands (as a NIC
//!   DMA-reads it). A read snapshots the remote bytes when it lands and writes them into the
//!   local slice when its completion arrives. A compare-and-swap is atomic at landing.
//! * **FIFO**: operations on one connection land one after another, never overlapping, whatever
//!   the jitter, and their completions arrive in order. With out-of-order landing on
//!   ([`FaultConfig::out_of_order_landing`]), the chunks *within* one write land in a shuffled
//!   order; with it off they land left to right (a canary at the end of an entry then works).
//! * **Completions** arrive one one-way latency after the last landing. Successful unsignaled
//!   operations produce none; failures always do. A failure (other than a flush) moves the
//!   initiator's side to the error state when its completion arrives, and flushes the
//!   operations already posted behind it; posts on a side in error complete with
//!   [`mu_fabric::Status::Flushed`].
//! * **Unreachable peers**: an operation that finds its target crashed, restarted since the
//!   connection was bound, or cut off by a partition fails with
//!   [`mu_fabric::Status::PeerUnreachable`] once [`SimConfig::retry_timeout_ns`] has passed
//!   since it was posted (an RC queue pair's retry-exceeded error). A dead peer never acks.
//! * **Control plane** calls are synchronous and happen at the current time. Those that cost
//!   time on RDMA are charged to the node ([`SimWorld::node_busy_until`]) rather than moving the
//!   global clock: a fast flag change costs [`SimConfig::fast_access_change_ns`], a slow one
//!   [`SimConfig::slow_access_change_ns`], other queue-pair transitions a quarter of the slow cost
//!   each. Changing flags, cycling or breaking a connection needs no waiting in the simulator:
//!   landings check the state they find, so the change is a barrier as soon as it returns.
//!
//! # Defaults and where they come from
//!
//! | Setting | Default | Source |
//! |---|---|---|
//! | [`SimConfig::one_way_ns`] | 600 ns | Mu paper: write and read round trips ≈ 1.1–1.3 µs |
//! | [`SimConfig::jitter_ns`] | 40 ns | small, so that seeds matter but figures do not move |
//! | [`SimConfig::per_byte_ps`] | 80 ps | 12.5 GB/s, a 100 Gbit/s link |
//! | [`SimConfig::cas_extra_ns`] | 700 ns | Velos paper: a CAS round ≈ 1.9 µs vs 1.25 µs for writes |
//! | [`SimConfig::chunk_bytes`] | 64 | a cache line, the unit of a NIC's PCIe writes |
//! | [`SimConfig::max_inline_bytes`] | 256 | typical ConnectX inline limit (Mu inlines ≤ 128 B) |
//! | [`SimConfig::retry_timeout_ns`] | 1 ms | configurable; RDMA's is set by retry count × timeout |
//! | [`SimConfig::connection_depth`] | no limit | an endpoint's depth bounds posts; set it to model a send queue smaller than that |
//! | [`SimConfig::fast_access_change_ns`] | 88 µs | Mu paper, Fig. 2 ("QP Flags") |
//! | [`SimConfig::slow_access_change_ns`] | 1.2 ms | Mu paper, Fig. 2 ("QP Restart"), §5.2: ≈ 10× the fast path |
//! | [`SimConfig::non_inline_extra_ns`] | 0 | no inline step; the hardware profiles (`spec/profiles/`) set one |
//! | [`SimConfig::post_cpu_ns`] | 0 | posts cost no CPU time; the hardware profiles set it |
//! | [`SimConfig::crash_notice_ns`] | 0 | a crash is known at once, like shm's death flag |
//!
//! # Faults
//!
//! [`SimWorld::crash`], [`SimWorld::restart`], [`SimWorld::pause`] / [`SimWorld::resume`],
//! [`SimWorld::partition`] / [`SimWorld::heal`], [`SimWorld::set_link_delay`] (extra delay and
//! jitter per link), [`SimWorld::hold_outgoing`] / [`SimWorld::release_outgoing`] (a writer stuck
//! in the middle of a write), and the world-wide [`FaultConfig`]: out-of-order landing and
//! injected failures of the fast permission change ([`mu_fabric::PermError::Busy`], which leaves
//! the side in the error state, as the Mu paper saw NICs do under load).
//!
//! What a crash means: the node's memory stays, it never acknowledges again, its posts fail with
//! [`mu_fabric::PostError::Paused`], its control-plane calls fail, and operations it had already
//! posted still land (they left its NIC). A restart makes a new incarnation with no regions and
//! every connection in reset.

#![forbid(unsafe_code)]

mod config;
mod control;
mod fabric;
mod faults;
mod node;
mod ops;
mod pending;
mod rng;
mod trace;
mod world;

pub use config::{FaultConfig, LinkDelay, SimConfig};
pub use fabric::{SimEndpoint, SimFabric, SimRegion};
pub use faults::InFlight;
pub use rng::SimRng;
pub use trace::{TraceEvent, TraceKind};
pub use world::SimWorld;
