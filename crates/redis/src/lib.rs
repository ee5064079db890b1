//! Unmodified Redis replicated by Mu through Redis's own effect stream (`docs/apps/redis.md`).
//!
//! Pure pieces: [`resp`] (bounded RESP2/RESP3 framing), [`command`] (what the front does with
//! each command), [`plan`] (where the front puts its `ROLE` and what each reply waits for),
//! [`entry`] (log entries, what a replica feeds its server, command boundaries in the stream),
//! [`master::answer`] (the handshake a follower's server gets), [`history`] (the committed
//! stream a replica keeps, compacted behind an RDB), [`snapshot`] (what a state transfer
//! carries).
//!
//! The runtime, which moves bytes: [`server`] (the private `redis-server`), [`link`] (the
//! leader's replica link and the commit watermark), [`master`] (feeding a follower's server),
//! [`front`] (the client port), [`node`] (the state machine and the role changes).

pub mod command;
pub mod entry;
pub mod front;
pub mod history;
pub mod link;
pub mod master;
pub mod node;
pub mod plan;
pub mod resp;
pub mod server;
pub mod snapshot;

pub use node::{NodeConfig, RedisMachine, RedisNode};
