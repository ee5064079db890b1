//! A HERD-style client path over the fabric API (Kalia et al., SIGCOMM 2014; the Mu paper's
//! HERD clients, §7): each client writes its requests with one-sided writes into a request
//! ring of its own on the server's node, the server polls the rings, and writes each response
//! with a one-sided write into the client's response ring. It runs on every backend (shm, ofi,
//! verbs, and the simulator). Payloads are opaque bytes: the application's client id and
//! sequence number, if it has them, travel inside.
//!
//! * **Nodes.** The server uses a fabric node of its own for clients (not a replica's node):
//!   it registers one request ring per client slot, region `ring_region_base + slot`, and
//!   nothing else remotely writable. Each client runs its own node and registers its response
//!   ring and nothing else remotely writable. A connection's write flag covers every remotely
//!   writable region of the node it is on, so this is what keeps a client from writing
//!   anything of the server but the rings, and the server from writing anything of a client's
//!   but its response ring (`docs/client-path.md` says what each backend enforces).
//! * **Frames** ([`frame`]): a header with the grant's generation, a transport sequence number,
//!   the length and two checks, then the payload. Writes may land out of order or torn; the
//!   server takes a slot only when its checks hold and it holds the next sequence number
//!   expected of that client, so a client that dies in the middle of a write leaves a slot the
//!   server never takes.
//! * **Batching.** Up to `slots_per_client` requests outstanding per client; the server takes
//!   each client's requests in order and may answer them in any order.
//! * **Joining and leaving** happen at run time through a handshake the caller carries over a
//!   channel of its own: the client starts its node and registers its regions as the server's
//!   [`RingServer::client_layout`] says ([`RingClient::prepare`]), then asks; the server
//!   [`RingServer::admit`]s it (binding its side of their connection, which on ofi and verbs
//!   reads the client's regions) and returns a [`Grant`] (bytes: [`Grant::to_bytes`]); the
//!   client [`PreparedClient::connect`]s with it. Each ring is scoped to its client's
//!   connection ([`mu_fabric::RegionScope`]): a client reaches its own ring and nothing else. [`RingServer::release`] (or [`RingServer::leave`] with the
//!   client's grant) revokes the client's write access through a revocation barrier, and the
//!   slot is given to the next client with a new generation. The server's poll releases
//!   clients the fabric reports crashed, clients whose responses fail to land, and, with
//!   an idle timeout, quiet ones.
//! * **No threads, no clock.** [`RingServer::poll`] and [`RingClient::poll`] do one round;
//!   where time matters the caller passes `now_ns`.
//! * **Resending.** After a leader change a client joins another server and
//!   [`RingClient::reopen`]s; what was not answered ([`RingClient::unanswered`]) it sends
//!   again with the same payload. The ring's sequence numbers are the transport's; applying
//!   once is the application's business.

#![forbid(unsafe_code)]

mod client;
mod config;
mod error;
pub mod frame;
mod grant;
pub mod measure;
mod post;
mod server;
mod session;

pub use client::{PreparedClient, Reply, RingClient};
pub use config::{
    ConfigError, Geometry, ServerConfig, SLOTS_PER_CLIENT_MAX, SLOT_BYTES_MAX, SLOT_BYTES_MIN,
};
pub use error::{
    AdmitError, ClientError, OpenError, ReleaseError, RespondError, SendError, ServerError,
};
pub use frame::{Checks, Rejection};
pub use grant::{ClientLayout, ClientSlot, Grant, GrantError, GRANT_BYTES, LAYOUT_BYTES};
pub use measure::{measure_round_trip, round_trip_samples, Echo, MeasureError, RoundTrips};
pub use server::{ReleaseReason, Released, RingServer, ServerStats};
