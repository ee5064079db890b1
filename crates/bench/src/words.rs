//! What a benchmark replica process publishes for the benchmark (and what the benchmark tells
//! it): one `#[repr(C)]` struct of atomic words in a small shared file, mapped by both. Both
//! sides are the same binary, so the layout is the struct's and no offset is written by hand.
//! Times are `CLOCK_MONOTONIC` nanoseconds, one clock for every process of the host.

use mu_fabric_shm::mapping::{AtomicsOnly, Mapping};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// One published word: written with release, read with acquire, so that a reader that sees a
/// counter move also sees what was written before it.
#[repr(transparent)]
pub struct Word(AtomicU64);

impl Word {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    pub fn set(&self, value: u64) {
        self.0.store(value, Ordering::Release);
    }

    pub fn add(&self, value: u64) {
        self.0.fetch_add(value, Ordering::AcqRel);
    }
}

/// Words per engine's phase or step tables (more than either has).
pub const TABLE_LEN: usize = 16;
const _: () = assert!(mu_replication::Phase::ALL.len() <= TABLE_LEN);
const _: () = assert!(mu_replica::VelosStep::ALL.len() <= TABLE_LEN);

/// A replica process's words.
#[repr(C)]
pub struct SharedWords {
    /// 1 once the replica runs.
    pub started: Word,
    /// Proposals this replica committed as leader (its `propose` returned `Ok`).
    pub commits: Word,
    /// When its last proposal was committed.
    pub last_commit_ns: Word,
    /// Terms as leader with at least one commit. Bumped after the term's words below
    /// (`first_commit_ns` to `setup_polls`) are written for the new term, so a reader that sees
    /// it move reads that term's values.
    pub terms: Word,
    /// The current term's first commit.
    pub first_commit_ns: Word,
    /// When the failure detector elected this replica for the current term (0: unknown).
    pub elected_ns: Word,
    /// When this replica was ready to replicate as leader in the current term (0: unknown).
    pub ready_ns: Word,
    /// The leader this replica's detector elected, plus one (0: none).
    pub leader_seen: Word,
    /// Proposals that failed because leadership changed (expected around a failover).
    pub lost_proposals: Word,
    /// Entries this replica applied (the index after the last one its commit handler saw).
    pub applied: Word,
    /// Set by the benchmark: whether a proposing replica may propose when it leads
    /// ([`GO_WAIT`], [`GO_SLOW`], [`GO_FULL_SPEED`]). A leader at full speed leaves a replica
    /// that is not yet its follower more than a log behind within milliseconds, for good (these
    /// replicas take no snapshots for a state transfer), so the benchmark starts slow.
    pub go: Word,
    /// Commits that came more than [`RESUME_GAP_NS`] after the one before (the process was
    /// stopped and continued, say). Bumped after `resumed_ns` is written.
    pub resumes: Word,
    /// When the last such commit was.
    pub resumed_ns: Word,
    /// When this replica, as Mu's leader, held a majority's permission in the current term (0:
    /// unknown, or Velos).
    pub permitted_ns: Word,
    /// Mu: attempts the leader engine aborted between the start of the current term (or of the
    /// process) and its first commit (`ReplicaStatus::aborts`), and the kind of the last one
    /// ([`abort_kind`]).
    pub setup_aborts: Word,
    pub last_abort_kind: Word,
    /// Mu: when the leader engine first entered each phase of the current term, by
    /// `phase as usize` (`mu_replication::Phase::ALL`; 0: not entered).
    pub phases_ns: [Word; TABLE_LEN],
    /// Velos: when the leader first took each step of the current term, by `step as usize`
    /// (`mu_replica::VelosStep::ALL`; 0: not taken).
    pub velos_steps_ns: [Word; TABLE_LEN],
    /// Mu: how long the new leader's polls took, from the one that took up the leadership to
    /// the one in which it was first ready after its first commit, by the phase each poll began
    /// in (`ReplicaStatus::phases_busy_ns`; `Follower`: the poll that took up the leadership);
    /// and how many polls, in `phase_polls`.
    pub phase_busy_ns: [Word; TABLE_LEN],
    pub phase_polls: [Word; TABLE_LEN],
    /// Velos: how long the new leader's polls took, from the one that took up the leadership
    /// to the one that answered its first value (`ReplicaStatus::velos_busy_ns`), and how many.
    pub velos_busy_ns: Word,
    pub velos_polls: Word,
    /// Either engine: how many of `setup_polls` hold the new leader's busy polls
    /// (`ReplicaStatus::setup_polls`).
    pub setup_polls_len: Word,
    /// Proposals refused because the log was full (a live follower had not applied the entry
    /// whose slot comes next): the proposing replica waits a millisecond and goes on.
    pub log_full_waits: Word,
    /// The new leader's busy polls: when each began (as the other times), then
    /// `SetupPoll::pack`'s two words.
    pub setup_polls: [[Word; 3]; mu_replica::SETUP_TRACE_POLLS],
}

// SAFETY: `SharedWords` is repr(C) and made only of `Word`s (repr(transparent) over AtomicU64),
// valid for every bit pattern, the all-zero one of a fresh file included.
unsafe impl AtomicsOnly for SharedWords {}

/// [`SharedWords::go`]'s values: not yet.
pub const GO_WAIT: u64 = 0;
/// One proposal per millisecond, until every follower applies.
pub const GO_SLOW: u64 = 1;
pub const GO_FULL_SPEED: u64 = 2;

/// A pause between two commits that counts as a resume: far above a proposal at full speed
/// (microseconds), far below a failover's detection at any read period the benchmark takes
/// (about 15 read periods of at least 1 µs while stopped, plus the failover).
pub const RESUME_GAP_NS: u64 = 10_000;

/// [`SharedWords::last_abort_kind`]'s values.
pub fn abort_kind(reason: Option<mu_replication::AbortReason>) -> u64 {
    use mu_replication::AbortReason as R;
    match reason {
        None => 0,
        Some(R::PermissionLost { .. }) => 1,
        Some(R::LostMajority) => 2,
        Some(R::Fabric { .. }) => 3,
        Some(R::CatchUpSourceLost { .. }) => 4,
        Some(R::NeedsStateTransfer { .. }) => 5,
        Some(R::Removed) => 6,
        Some(R::OutcomeUnknown { .. }) => 7,
    }
}

/// The names of [`abort_kind`]'s values.
pub const ABORT_KINDS: [&str; 8] = [
    "none",
    "permission_lost",
    "lost_majority",
    "fabric",
    "catch_up_source_lost",
    "needs_state_transfer",
    "removed",
    "outcome_unknown",
];

const WORDS_BYTES: usize = std::mem::size_of::<SharedWords>();

/// A replica process's [`SharedWords`], mapped by the process and by the benchmark. The
/// mapping outlives the process, so the benchmark reads a killed leader's last commit.
pub struct Words {
    map: Mapping,
}

impl Words {
    pub fn create(path: &Path) -> Result<Words, String> {
        Ok(Words { map: Mapping::create(path, WORDS_BYTES).map_err(|e| e.to_string())? })
    }

    pub fn open(path: &Path) -> Result<Words, String> {
        Ok(Words { map: Mapping::open(path, WORDS_BYTES).map_err(|e| e.to_string())? })
    }
}

impl std::ops::Deref for Words {
    type Target = SharedWords;

    fn deref(&self) -> &SharedWords {
        self.map.atomics_at::<SharedWords>(0)
    }
}
