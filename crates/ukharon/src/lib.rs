//! uKharon (the uKharon paper, ATC 2022: microsecond membership, §3–§6) as pure state machines:
//! no threads, no clock, no I/O. Every function that needs the time takes it as an argument
//! (`now_ns`, a reading of the caller's monotonic clock); every remote operation is an action
//! for the runtime to post and a completion it hands back.
//!
//! * [`view`]: views (the paper's memberships): epoch, members with their unique ids, the
//!   application's primary, the lease duration, and how long a node waits before a lease on the
//!   view may start; their checksummed bytes.
//! * [`clique`]: the catastrophic detector's choice of the next view, the largest clique that
//!   contains the coordinator leader, exact on up to 64 nodes.
//! * [`detect`]: the failure detectors of §4.2 (crash notification, the heartbeat ring,
//!   broadcast heartbeats) with their repeated reports, and the leader's connectivity graph.
//!
//! `docs/protocols/ukharon.md` traces each mechanism to the paper.

#![forbid(unsafe_code)]

pub mod clique;
pub mod detect;
pub mod view;

pub use view::{Member, View, ViewError};
