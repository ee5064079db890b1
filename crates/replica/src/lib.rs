//! The Mu replica: the pure engines of `mu-replication` bound to a fabric, in two planes (Mu
//! paper §3.2, Fig. 1).
//!
//! To embed it: [`Replica::start`] (or [`Replica::start_with_state`]) on a fabric node, with a
//! [`ReplicaConfig`] alike on every replica but for `me`; `propose` on the leader. A whole
//! program, three replicas of a counter on the shared-memory fabric, is
//! `examples/embed.rs` (`cargo run --release -p mu-replica --example embed`); the test command
//! runs it.
//!
//! * The **replication plane** ([`ReplicationDriver`]) runs the leader engine when this replica
//!   leads and the replayer always: it turns the engine's actions into one-sided work requests on
//!   the replication connections and feeds their completions back.
//! * The **background plane** ([`BackgroundDriver`]) keeps the heartbeat, reads the peers'
//!   heartbeats (pull-score failure detector), elects the leader (lowest live id), stops the
//!   heartbeat when the replication plane is stuck (fate sharing), serves permission requests
//!   (revoke, grant, acknowledge; fast path then slow path) and, on the leader, reads the log
//!   heads that recycling needs. It has its own connections and its own region.
//!
//! Neither driver owns a thread or reads a clock: [`ReplicaCore`] holds both and is driven by
//! [`Replica`] (a thread per plane, real time) on real fabrics and by a simulation loop (virtual
//! time) on the simulated one, so the same code runs in both.
//!
//! State transfer: a replica whose log is a whole log behind a peer's (it restarted, or was
//! stopped long) asks the most advanced peer for a snapshot of its [`StateMachine`]; the peer's
//! replication plane takes it between two entries into its state-transfer region, the requester
//! reads it with one-sided reads, checks its digest and restores it, and a leader's update of
//! followers brings its log on from there.
//!
//! Regions (same ids on every replica): the log ([`LOG_REGION`]), the leader's scratch area
//! ([`SCRATCH_REGION`]), the background region ([`BACKGROUND_REGION`], laid out in
//! [`layout`]) and the state-transfer region ([`layout::SNAPSHOT_REGION`]). Connections: one per direction and plane between every two replicas
//! ([`layout::replication_channel`], [`layout::background_channel`]).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod ask_ahead;
mod background;
mod config;
mod core;
mod group;
pub mod layout;
pub mod lease;
mod lines;
mod memory;
mod mu;
mod probe;
mod replica;
mod replication;
mod setup_trace;
mod shared;
mod signals;
mod transfer;
mod velos;

pub use background::BackgroundDriver;
pub use config::{
    ConfigError, Leaders, Protocol, ReplicaConfig, ThreadCpus, Threads, BATCH_REQUESTS_MAX,
};
pub use core::{Boot, ReplicaCore, ReplicationPlane, StartError};
pub use layout::{BACKGROUND_REGION, LOG_REGION, SCRATCH_REGION};
pub use lease::{hand_on, next_appointment, Appointment, LeaseGate, Term};
pub use mu::ReplicationDriver;
pub use mu_replication::membership::Change;
pub use mu_replication::{protocol_tag, PROTOCOL_VERSION};
pub use replica::{Mode, Replica, ReplicaStatus, StateMachine};
pub use replication::{Applier, ProposeError};
pub use setup_trace::{Poller, SetupPoll, SETUP_TRACE_POLLS};
pub use velos::{VelosDriver, VelosStep};
