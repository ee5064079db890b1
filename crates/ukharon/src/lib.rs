//! uKharon (the uKharon paper, ATC 2022: microsecond membership, §3–§6) as pure state machines:
//! no threads, no clock, no I/O. Every function that needs the time takes it as an argument
//! (`now_ns`, a reading of the caller's monotonic clock); every remote operation is an action
//! for the runtime to post and a completion it hands back.
//!
//! * [`mailbox`]: one-sided mailboxes for what the paper sends two-sided (joins, leaves,
//!   reports, renewals): checksummed frames numbered per sender, each taken once.
//! * [`view`]: views (the paper's memberships): epoch, members with their unique ids, the
//!   application's primary, the lease duration, and how long a node waits before a lease on the
//!   view may start; their checksummed bytes.
//!
//! `docs/protocols/ukharon.md` traces each mechanism to the paper.

#![forbid(unsafe_code)]

pub mod changes;
pub mod coordinator;
pub mod mailbox;
pub mod view;

pub use view::{Member, View, ViewError};
