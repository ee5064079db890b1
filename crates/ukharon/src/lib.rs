//! uKharon (the uKharon paper, ATC 2022: microsecond membership, §3–§6) as pure state machines:
//! no threads, no clock, no I/O. Every function that needs the time takes it as an argument
//! (`now_ns`, a reading of the caller's monotonic clock); every remote operation is an action
//! for the runtime to post and a completion it hands back.
//!
//! * [`view`]: views (the paper's memberships): epoch, members with their unique ids, the
//!   application's primary, the lease duration, and how long a node waits before a lease on the
//!   view may start; their checksummed bytes.
//! * [`changes`]: what the coordinator leader puts into the next view (joins, leaves, removals,
//!   the catastrophic detector's clique, primary and lease changes) and the unique ids it gives.
//! * [`coordinator`]: the coordinators' consensus on views: Velos's proposer (CAS Paxos with
//!   predicted states, pre-preparation, one-round leader change) driven so that index `k`
//!   holds view `k` and nothing else; the lowest live coordinator leads.
//! * [`restart`]: a coordinator restarted without its memory: the indices it abstains in,
//!   bounded from the other coordinators' slot words.
//! * [`mailbox`]: one-sided mailboxes for what the paper sends two-sided (joins, leaves,
//!   reports, renewals): checksummed frames numbered per sender, each taken once.
//! * [`check`]: the non-leased check of a view (Algorithm 6): the coordinators' slot words for
//!   the next index, and a majority of answers.
//! * [`lease`]: leases and `Active` (Algorithm 2, Appendix C): the lease keeper of a node's core,
//!   its margins for clock drift and cross-core skew, compatible successors.
//! * [`cache`]: lease caches (§6.3): a cache's lease on the view and the δ leases it hands out.
//! * [`detect`]: the failure detectors of §4.2 (crash notification, the heartbeat ring,
//!   broadcast heartbeats) with their repeated reports, and the leader's connectivity graph.
//! * [`clique`]: the catastrophic detector's choice of the next view, the largest clique that
//!   contains the coordinator leader, exact on up to 64 nodes.
//!
//! `docs/protocols/ukharon.md` traces each mechanism to the paper.

#![forbid(unsafe_code)]

pub mod cache;
pub mod changes;
pub mod check;
pub mod clique;
pub mod coordinator;
pub mod detect;
pub mod lease;
pub mod mailbox;
pub mod restart;
pub mod view;

pub use view::{Member, View, ViewError};
