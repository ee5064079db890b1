//! Unmodified Memcached replicated by Mu through request capture (`docs/apps/memcached.md`).
//!
//! Pure pieces: [`text`] (the bounded parser of the text protocol, base64 keys), [`rewrite`]
//! (what each command is: replicated, answered locally or refused; what the server is sent
//! instead of the client's exptimes, and which expiries it sets), [`entry`] (log entries),
//! [`expiry`] (the replicated expiry table).
//!
//! The runtime: [`server`] (the private `memcached` and the framing of its replies),
//! [`machine`] (the state machine that applies entries to the server), [`transfer`] (state
//! transfer: the snapshot, reading the items and writing them back with their CAS values),
//! [`front`] (the client port), [`node`] (starting them).

pub mod entry;
pub mod expiry;
pub mod front;
pub mod machine;
pub mod node;
pub mod rewrite;
pub mod server;
pub mod text;
pub mod transfer;

pub use machine::MemcachedMachine;
pub use node::{MemcachedNode, NodeConfig};
