//! The replica daemon and cluster operations of the `mu` command: `mu replica` (one replica of
//! a key-value cluster), `mu cluster up|status|down`, `mu kv`, `mu ukharon` (a uKharon membership group's
//! processes), and the local clusters the demo
//! and benchmarks start.

#[macro_use]
extern crate mu_procs;

pub mod app_client;
pub mod app_state;
pub mod cluster;
pub mod config;
pub mod fabric_config;
pub mod kv_cluster;
pub mod kv_cmd;
pub mod kv_failover;
pub mod leased;
pub mod log_buffer;
pub mod memcached_app;
pub mod node_log;
pub mod redis_app;
pub mod replica_pid;
mod replica_support;
pub mod serve;
pub mod ukharon;
pub mod ukharon_kv;
pub mod ukharon_kv_group;

use mu_procs::interrupt;
