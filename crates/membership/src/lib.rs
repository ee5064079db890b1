//! The uKharon membership service's runtime: the pure engines of `mu_ukharon` on a fabric.
//! Drivers own their regions, endpoint and connections and take the time as an argument
//! (`poll(now_ns)`), so that threads drive them on real fabrics and the simulator drives them
//! in virtual time.
//!
//! * [`config`]: what a cluster agrees on (its id, coordinators, node ids) and the detectors'
//!   and leases' parameters, checked with errors that name the key.
//! * [`layout`]: the board every node registers (fingerprint, heartbeat, latest view, beat
//!   words, mailboxes, read scratch), the consensus region, the channels.
//! * [`links`]: initiated connections, set up again after a failure.
//! * [`memory`]: a registered region as the engines' memory.
//! * [`published`]: the lease the core publishes for lock-free `Active` in application
//!   threads (a sequence word over three).
//! * [`coordinator`]: a coordinator: consensus with its peers, requests from its inbox,
//!   decided views written to every node's board.

#![forbid(unsafe_code)]

pub mod config;
pub mod coordinator;
pub mod detectors;
pub mod layout;
pub mod links;
pub mod memory;
pub mod node;
pub mod published;
pub mod renewal;

pub use config::{ConfigError, MembershipConfig};
pub use coordinator::{CoordinatorDriver, CoordinatorEvent};
pub use node::{NodeCore, NodeEvent};
