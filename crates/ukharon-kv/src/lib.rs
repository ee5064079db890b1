//! uKharon-KV's runtime (ukharon-atc2022 §7.3): the primary-backup engines of
//! `mu_primary_backup` over any fabric, under the views and leases of a uKharon group.
//!
//! * [`KvDriver`]: one node on its data fabric node, without threads or clock (the simulator
//!   drives it in virtual time, a thread on the host clock otherwise).
//! * [`layout`]: what each node registers, and the connections' channels.
//! * [`links`]: the data plane's connections, and the write access only the followed
//!   primary holds.
//! * [`KvNode`]: a node as a thread beside its [`mu_membership::Membership`], taking clients'
//!   requests from a channel.
//!
//! Each replica process holds two fabric nodes with the same id: its membership node
//! (`mu_membership`) and its data node; see `docs/protocols/ukharon-kv.md`.

mod backup_io;
mod driver;
pub mod layout;
pub mod links;
mod node;
mod primary_io;

pub use driver::{KvDriver, KvEvent, KvSettings, RoleName};
pub use layout::KvLayout;
pub use node::{KvAnswer, KvNode, KvNodeStatus};
