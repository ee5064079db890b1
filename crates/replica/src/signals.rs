//! The signals the two planes of a replica pass each other, beside [`crate::shared::Shared`]'s
//! own words, in named groups; each word's one writer is in its comment.

use crate::lines::OwnLines;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8};

/// [`PeerSignals::scores`] of this replica itself, or of a peer not scored yet.
pub(crate) const SCORE_NONE: u8 = u8::MAX;

/// What the background plane read of the peers, by position: heads and heartbeat flags, for the
/// replication plane. One writer: the background plane.
pub(crate) struct PeerSignals {
    /// Each replica's log head as last read, by position (background; stored when it moved, on
    /// a heartbeat read; read by the replication plane on every poll).
    pub heads: Vec<OwnLines<AtomicU64>>,
    /// By position, when (on the replica's clock) the background plane posted the read that
    /// last brought that replica's heartbeat and head; 0 before any. A Velos leader that
    /// stalled waits for reads posted after the stall before it trusts `heads` again.
    pub heads_read_ns: Vec<AtomicU64>,
    /// Per position: the boot id of the peer's run whose heartbeat was last accepted (same
    /// configuration, not refused), 0 until one is (background). Velos binds its replication side again when it changes: a side bound to
    /// a peer's earlier run never lets the restarted peer in.
    pub boots: Vec<AtomicU32>,
    /// Per position: how many heartbeat reads of the peer were accepted (same configuration,
    /// not refused) (background). Velos binds its own side to a peer again only after one more:
    /// a side bound to a run it has not read could reach one restarted without rejoining.
    pub reads_accepted: Vec<AtomicU64>,
    /// The peers whose last heartbeat read said `FLAG_ABSTAINING`, by position (background).
    pub abstaining: AtomicU64,
    /// The peers whose last heartbeat read gave our fingerprint, by position (background): the
    /// only ones whose permission requests are served.
    pub config_same: AtomicU64,
    /// The peers whose last heartbeat read gave another fingerprint: never counted alive.
    pub config_other: AtomicU64,
    /// The peers refused as restarted without rejoining (`layout::FLAG_FOUNDING`): never
    /// counted alive, their permission requests not served (background; published at
    /// `REFUSED_OFFSET`).
    pub refused: AtomicU64,
    /// Per position: the peer's rejoin request as last read with its heartbeat (background).
    pub rejoin_requests: Vec<AtomicU64>,
    /// The positions whose request there is not 0: a leader's poll looks at this one word.
    pub rejoining: AtomicU64,
    /// The failure detector's score of each replica, by position (background; for status).
    /// `SCORE_NONE` for this replica itself.
    pub scores: Vec<AtomicU8>,
    /// The replicas the failure detector considers alive, by position, this one included
    /// (background).
    pub alive_mask: AtomicU64,
}

impl PeerSignals {
    /// Nothing read yet of `n` replicas.
    pub fn new(n: usize) -> PeerSignals {
        let replicas_count = n;
        PeerSignals {
            heads: (0..replicas_count).map(|_| OwnLines(AtomicU64::new(0))).collect(),
            heads_read_ns: (0..replicas_count).map(|_| AtomicU64::new(0)).collect(),
            boots: (0..replicas_count).map(|_| AtomicU32::new(0)).collect(),
            reads_accepted: (0..replicas_count).map(|_| AtomicU64::new(0)).collect(),
            abstaining: AtomicU64::new(0),
            config_same: AtomicU64::new(0),
            config_other: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            rejoin_requests: (0..n).map(|_| AtomicU64::new(0)).collect(),
            rejoining: AtomicU64::new(0),
            scores: (0..n).map(|_| AtomicU8::new(SCORE_NONE)).collect(),
            alive_mask: AtomicU64::new(0),
        }
    }
}

/// State transfer between the planes: a request to serve, a snapshot fetched to install, and
/// what came of them (each word's writer in its comment).
pub(crate) struct TransferSignals {
    /// State transfer: the ticket of the snapshot request to serve next, 0 for none
    /// (background sets it, replication clears it once served).
    pub snapshot_wanted: AtomicU64,
    /// A snapshot fetched from a donor and checked waits in `fetched_snapshot` (background
    /// sets it, replication clears it once installed or refused).
    pub snapshot_fetched: AtomicBool,
    /// That snapshot: the checked copy, not the regions it was read into, where a read of an
    /// earlier fetch that was given up may still land (`transfer::install`).
    pub fetched_snapshot: std::sync::Mutex<Option<FetchedSnapshot>>,
    /// Set by the replication plane when its replayer has been blocked for longer than the
    /// transfer timeout (a decided entry that is not coming): the background plane then fetches a
    /// snapshot from any peer further on, not only from one a whole log ahead.
    pub replayer_stuck: AtomicBool,
    pub snapshots_served: AtomicU64,
    pub snapshots_installed: AtomicU64,
    /// Snapshots the application refused to restore (replication; the background plane waits
    /// longer after each before it fetches another).
    pub restore_failures: AtomicU64,
    /// What last went wrong in a state transfer, either side (rare: a mutex is fine).
    pub state_transfer_error: std::sync::Mutex<Option<String>>,
}

impl TransferSignals {
    /// No request, no snapshot.
    pub fn new() -> TransferSignals {
        TransferSignals {
            snapshot_wanted: AtomicU64::new(0),
            snapshot_fetched: AtomicBool::new(false),
            fetched_snapshot: std::sync::Mutex::new(None),
            replayer_stuck: AtomicBool::new(false),
            snapshots_served: AtomicU64::new(0),
            snapshots_installed: AtomicU64::new(0),
            restore_failures: AtomicU64::new(0),
            state_transfer_error: std::sync::Mutex::new(None),
        }
    }
}

/// A snapshot the background plane fetched and checked against the digest its donor published
/// with it, for the replication plane to install.
pub(crate) struct FetchedSnapshot {
    /// The next index to apply after it.
    pub index: u64,
    /// Its configuration (a mask of positions).
    pub members: u64,
    /// The entry below `index` that travels after the state: its kind in the high half, its
    /// length in the low half (`SNAPSHOT_LAST_KIND`, `SNAPSHOT_LAST_LEN`).
    pub last_word: u64,
    /// The state, then that entry's value.
    pub bytes: Vec<u8>,
}

/// Counters and records for status and metrics only: no plane decides anything by them.
pub(crate) struct Stats {
    /// Counters for status and metrics.
    pub aborts: AtomicU64,
    pub leader_changes: AtomicU64,
    pub permission_switches: AtomicU64,
    pub slow_permission_switches: AtomicU64,
    /// How many times this replica's engine started leading (replication).
    pub leaderships: AtomicU64,
    /// Why the leader engine last aborted (rare: a mutex is fine).
    pub last_abort: std::sync::Mutex<Option<mu_replication::AbortReason>>,
}

impl Stats {
    /// All zero.
    pub fn new() -> Stats {
        Stats {
            aborts: AtomicU64::new(0),
            leader_changes: AtomicU64::new(0),
            permission_switches: AtomicU64::new(0),
            slow_permission_switches: AtomicU64::new(0),
            leaderships: AtomicU64::new(0),
            last_abort: std::sync::Mutex::new(None),
        }
    }
}
