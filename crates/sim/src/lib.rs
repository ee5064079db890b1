//! Whole Mu clusters in the deterministic simulator (`mu sim`).
//!
//! * [`SimCluster`]: replicas of the production runtime on one simulated fabric, polled in
//!   rounds of virtual time from one thread.
//! * [`Workload`]: key-value clients whose operations go through the log, and the history of
//!   what they were told ([`history`]).
//! * [`Faults`]: the fault switches; [`run::run`] draws when and where they strike from the seed,
//!   runs a safety phase then a liveness phase, and applies the checkers of [`check`], one per
//!   file: agreement, validity, durability (no acknowledged proposal lost), a single writer per
//!   log, linearizability of the client history (through the `lincheck` helper).
//!
//! [`ukharon`] runs the uKharon membership service the same way (`mu sim --protocol ukharon`):
//! coordinators and node cores, its own faults (clock drift among them) and checkers;
//! [`ukharon_kv`] runs uKharon-KV on it (`mu sim --protocol ukharon-kv`): a primary-backup data
//! plane beside each member, clients whose history is checked as Mu's is; [`lease_reads`] runs
//! Mu or Velos with leased reads on it (`mu sim --protocol mu|velos --reads lease`); the two
//! share their clients and phases ([`kv_run`]).
//!
//! A run is a function of its seed and configuration: [`SeedReport::trace_hash`] is equal for
//! two runs of one seed, which a test checks.

pub mod caught;
pub mod check;
pub mod cluster;
pub mod describe;
pub mod faults;
pub mod history;
pub mod kv_run;
pub mod lease_reads;
pub mod membership;
pub mod profile;
pub mod run;
pub mod ukharon;
pub mod ukharon_kv;
pub mod workload;

pub use cluster::{change_label, SimCluster};
pub use faults::{Faults, FAULT_NAMES};
pub use run::{run, Protocol, RunConfig, SeedReport, Violation};
pub use workload::Workload;
