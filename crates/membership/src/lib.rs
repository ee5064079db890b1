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
//! * [`coordinator`]: a coordinator: consensus with its peers, requests and reports from its
//!   inbox, decided views written to every node's board.
//! * [`node`]: a node's core (uKharon Core): joins and leaves, views, lease renewal, the
//!   heartbeat; or a lease cache's. [`detectors`]: its three failure detectors. [`renewal`]:
//!   renewing by checks of the coordinators or through a cache.
//! * [`channels`]: the layout's channels on a fabric with four per pair (shm).
//! * [`clock`]: the host's monotonic clock every thread gives the drivers, and how a thread
//!   waits between polls.
//! * [`service`]: a coordinator as a thread ([`CoordinatorService`]).
//! * [`group`]: the application's handle on the group ([`Membership`]): join, `active`,
//!   views and failures, leave.
//! * [`spans`]: when `Active` was true, per view, for checks across processes.

#![forbid(unsafe_code)]

pub mod channels;
pub mod clock;
pub mod config;
pub mod coordinator;
pub mod detectors;
pub mod group;
pub mod layout;
pub mod links;
pub mod memory;
pub mod node;
pub mod peer_watch;
pub mod published;
pub mod renewal;
pub mod service;
pub mod spans;

pub use clock::Polling;
pub use config::{ConfigError, MembershipConfig};
pub use coordinator::{CoordinatorDriver, CoordinatorEvent};
pub use group::{Failure, JoinOptions, Membership, MembershipError};
pub use node::{NodeCore, NodeEvent};
pub use service::{CoordinatorService, CoordinatorStatus};
pub use spans::ActiveSpan;
