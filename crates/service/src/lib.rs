//! The replicated key-value service on Mu (HERD-like: get, put, delete, compare-and-set).
//!
//! * [`wire`]: the client protocol, length-prefixed frames on a Unix stream socket or a TCP
//!   connection ([`Endpoint`]).
//! * [`Server`]: a replica serving clients; it proposes their requests (batched) through
//!   [`mu_replica::Replica`] and answers once they are committed and applied. Replicas that do
//!   not lead answer with a hint naming the leader. It serves any [`Backend`]: a Mu or Velos
//!   replica ([`ReplicaBackend`]), or a uKharon-KV node ([`ukharon_kv::UkharonKvBackend`]:
//!   the view's primary answers, the others name it as the leader).
//! * [`Client`]: the library clients use: follows the hints, retries with the same client id
//!   and sequence number (applied once, [`mu_kv::Store`]), times out with a clear error.
//! * [`SharedMachine`]: the [`mu_kv::Store`] as the replica's state machine, with snapshots
//!   for state transfer.

#![forbid(unsafe_code)]

pub mod app;
pub mod backend;
pub mod client;
pub mod config;
pub mod counters;
mod crash_notice;
pub mod fabric_link;
pub mod fabric_path;
pub mod lease;
pub mod machine;
pub mod metrics;
pub mod report;
pub mod server;
pub mod socket;
pub mod ukharon_kv;
pub mod wire;

pub use app::{App, AppReply, AppRequest, AppState};
pub use backend::{Backend, ReplicaBackend};
pub use client::{Client, ClientError, PIPELINE_LANES};
pub use config::ClusterConfig;
pub use lease::LeasedBackend;
pub use machine::SharedMachine;
pub use report::ReplicaReport;
pub use server::Server;
pub use socket::Endpoint;
