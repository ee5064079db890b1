//! Velos (one-sided compare-and-swap Paxos; the Velos paper, Algorithm 5 and §5) as pure state
//! machines: no threads, no clock, no I/O.
//!
//! * [`word`]: an acceptor's Paxos state for one log index packed in the 8 bytes a remote
//!   compare-and-swap changes at once (min proposal, accepted proposal, lap, piggybacked
//!   decision), and proposal numbers that name their proposer.
//! * [`layout`]: a replica's Velos region: head, slot words, one value log per proposer.
//! * [`Proposer`]: prepare and accept as CAS to every acceptor with predicted states,
//!   pre-preparation, value indirection, piggybacked decisions, leader change in one round,
//!   and proposal numbers that never wrap.
//! * [`learner`]: what a follower learns from its own words.
//! * [`recovery`]: the slots a replica that restarted without its memory abstains in.
//!
//! The rules a replica's driver applies around them, as pure functions of numbers and sets:
//!
//! * [`heads`]: what the peers' log heads (counts of entries, not laps) say: how far behind or
//!   ahead a replica is, the recycling floor, which peers the proposer keeps away from.
//! * [`guards`]: the lap guards: a stalled leader resyncs, a replica far behind takes new words.
//! * [`standing`]: who leads (the election's outcome, standing after a snapshot), when a leader
//!   decides an empty entry, and what a removal does.
//! * [`rejoin`]: a restarted replica's way back (fence, request, rejoin entry), and which rejoin
//!   entry a leader decides next.
//!
//! `docs/protocols/velos.md` traces each mechanism to the paper.

#![forbid(unsafe_code)]

pub mod guards;
pub mod heads;
pub mod layout;
pub mod learner;
mod proposer;
pub mod recovery;
pub mod rejoin;
pub mod standing;
pub mod word;

pub use layout::VelosLayout;
pub use proposer::{
    Action, Event, Memory, Phase, Proposer, ProposerConfig, StopReason, SubmitError, OP_BITS,
    PREPARE_AHEAD_MAX, REPUBLISHED_TAG,
};
pub use word::{SlotWord, View, PROPOSAL_MAX};

/// The version of what Velos replicas share (the slot word, the region layout, the entries of the
/// value logs in the `mu_log` format). 2: abstaining words. 3: the entry checksum in four lanes
/// (`mu_log`), which reads an entry of version 2 as incomplete. 4: a restarted replica rejoins
/// through a rejoin entry (`recovery`), asked for in the status its peers read. 5: the
/// heartbeat's flags carry the configuration's fingerprint. 6: the heartbeat says whether its
/// run started as a member in good standing, and which peers it refuses as restarted without
/// rejoining, as Mu's 4. 7: the entry checksum's lanes take a word with one multiplication,
/// as Mu's 5.
pub const PROTOCOL_VERSION: u32 = 7;

/// The name and version a replica records on its fabric, e.g. `velos/7`.
pub fn protocol_tag() -> String {
    format!("velos/{PROTOCOL_VERSION}")
}

/// The region holding a replica's slot words and value logs (same id on every replica).
pub const VELOS_REGION: mu_fabric::RegionId = mu_fabric::RegionId(5);
