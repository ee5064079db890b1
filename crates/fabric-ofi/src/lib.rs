//! The libfabric fabric: Mu's one-sided operations over TCP, for clusters without RDMA NICs.
//!
//! Each node opens one libfabric domain of a configured provider (`sockets` or `tcp;ofi_rxm`,
//! [`PROVIDERS`]; what differs between them is `ProviderWays`) and one reliable-datagram
//! endpoint per channel, listening on `base_port + channel` of its
//! configured host. A connection `(peer, channel)` is the pair of both nodes' endpoints of that
//! channel: the provider keeps one byte stream between them, so operations on a connection land
//! in order (FIFO), and a completion is requested as `FI_DELIVERY_COMPLETE`: it means the bytes
//! are in the target's memory.
//!
//! * **Regions** are anonymous memory. The target registers each region once per (peer,
//!   channel, kind of access) it allows, under a key the peer computes itself
//!   ([`keys::data_key`]): granting registers, revoking closes that peer's registrations only.
//!   Each key includes the initiator's incarnation, so a peer that restarted holds no valid key
//!   until the target binds the connection again.
//! * **Binding** a connection (moving to ready-to-receive) reads the peer's identity (cluster,
//!   node, incarnation, regions and their lengths) through the connection: a peer that is not
//!   there is a clear error, and the initiator then checks every remote range itself.
//! * **Revocation is a barrier**: the registrations close, then a round trip on the connection
//!   (a read of the peer's identity) comes back after anything the peer had sent before. A peer
//!   that cannot answer (stopped) fails the fast path with `Busy`, and the slow path with
//!   `FenceFailed` — it does not claim a barrier it does not have — until the peer answers
//!   (it went on) or its connection breaks (it died). A peer that died, and with which this
//!   process holds no stream any more, needs no fence.
//! * **One stream per pair**: the provider opens a stream inside any post that finds none, from
//!   either side. With `sockets` only the lower node of a pair opens theirs (the higher one
//!   waits for its hello), so a fence goes on the stream the peer writes on; the higher node
//!   shuts down any stream it finds it opened, and the lower node any second one of its own
//!   ([`streams`]); `tcp;ofi_rxm` keeps one per pair itself.
//! * **Crash notification**: a plain TCP connection to the peer's liveness port, which the
//!   peer's kernel closes when its process dies (`liveness.rs`); the same port takes the higher
//!   node's requests for a hello, and answers "who are you" with the node's incarnation (how a
//!   `tcp;ofi_rxm` node tells a refused operation from a dead peer).
//!
//! `docs/fabric.md` says what holds and how it is checked; the C shim (`csrc/shim.c`) is the
//! only code that touches libfabric's structures.

mod binding;
mod channel;
mod channel_ops;
mod config;
mod doorbell;
mod endpoint;
mod fabric;
mod fencing;
mod ffi;
mod hello;
pub mod keys;
mod liveness;
mod node;
mod open;
mod region;
mod registrations;
mod side;
pub mod streams;
mod streams_rule;

/// Unit tests that read the kernel's socket table (`streams`) and those that open and close
/// hundreds of sockets (`liveness`) take turns: the table is read in pieces, and a row can be
/// missed while other sockets come and go.
#[cfg(test)]
pub(crate) static SOCKET_TABLE_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub use config::{NodeAddr, OfiConfig, CHANNELS, PORTS_PER_NODE, PROVIDERS};
pub use endpoint::OfiEndpoint;
pub use node::OfiFabric;
pub use region::OfiRegion;

pub(crate) fn unreachable(
    peer: mu_fabric::NodeId,
    why: impl Into<String>,
) -> mu_fabric::FabricError {
    mu_fabric::FabricError::PeerUnreachable(peer, why.into())
}

pub(crate) fn in_progress(
    peer: mu_fabric::NodeId,
    why: impl Into<String>,
) -> mu_fabric::FabricError {
    mu_fabric::FabricError::InProgress(peer, why.into())
}
