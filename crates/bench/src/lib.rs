//! Every `mu bench` command, and the replica and peer processes they start.

#[macro_use]
extern crate mu_procs;

pub mod all;
pub mod cluster;
pub mod e2e;
pub mod fabric;
pub mod failover;
pub mod measure;
#[cfg(feature = "ofi")]
pub mod ofi;
#[cfg(feature = "ofi")]
pub mod ofi_loopback;
pub mod payload;
pub mod peers;
pub mod replica_child;
pub mod replication;
pub mod suite;
pub mod targets;
pub mod throughput;
pub mod words;

use mu_procs::{counts, interrupt};
