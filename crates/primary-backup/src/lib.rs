//! Primary-backup replication under uKharon's views: uKharon-KV (ukharon-atc2022 §7.3), as pure
//! state machines with no threads, clocks or I/O, like the project's other engines.
//!
//! * [`Primary`] executes requests at once on its store, writes a [`Record`] of each into every
//!   backup's [`Ring`], and answers only once every backup holds every record executed before
//!   the answer and `Active(view)` still holds; gets are answered from its store under the same
//!   rule, without a record.
//! * [`Backup`] applies the records its primary wrote up to what every backup holds, follows a
//!   new primary only after the old one's write access is gone, and takes over
//!   ([`Backup::take_over`]) when a view names it primary.
//!
//! The runtime gives `Active(view)` (from `mu_membership`), moves the bytes and reports the
//! completions; the protocol and what the paper leaves loose are in
//! `docs/protocols/ukharon-kv.md`.

#![forbid(unsafe_code)]

mod backup;
pub mod mutation;
mod primary;
mod record;

pub use backup::{Backup, BackupAction, Takeover, TakeoverError};
pub use mutation::Mutation;
pub use primary::{Action, Node, Primary, Refusal};
pub use record::{FollowWord, Record, Ring, RingError, SlotError, HEADER_BYTES, TRAILER_BYTES};
