//! Regions, channels and the background region's bytes: what every replica agrees on.

use mu_fabric::{NodeId, RegionId};

pub use mu_replication::{LOG_REGION, SCRATCH_REGION};

/// The background plane's region: heartbeat, permission requests and acknowledgements (§5),
/// state-transfer requests.
pub const BACKGROUND_REGION: RegionId = RegionId(2);

/// The background-plane connection on which `from` reads `to`'s heartbeat and writes into its
/// request and acknowledgement arrays (channel 1 when the lower id initiates, 3 otherwise).
///
/// One connection per direction here too: a failed operation moves the *initiator's* side to
/// the error state, and the initiator repairs only its own side. With one connection for both
/// directions, each replica's repair broke the operations the other had in flight, which broke
/// the other's side in turn: after a partition healed, two replicas could keep breaking each
/// other's reads for ever (found by the randomized simulation test).
pub fn background_channel(from: NodeId, to: NodeId) -> u8 {
    if from < to {
        1
    } else {
        3
    }
}

/// The replication-plane connection on which `from` writes into `to`'s log.
///
/// Each direction has its own connection (channel 0 when the lower id writes, 2 otherwise), so
/// that what a replica does to its own side as a would-be leader (reconnecting after an error)
/// never touches the side through which it grants a peer access to its log, which belongs to its
/// permission manager. One bidirectional connection would make the two planes' threads change the
/// same side.
pub fn replication_channel(from: NodeId, to: NodeId) -> u8 {
    if from < to {
        0
    } else {
        2
    }
}

/// The most replicas a cluster may have: the background region holds one request and one
/// acknowledgement word per replica.
pub const MAX_REPLICAS: usize = 64;

/// Heartbeat counter, incremented by the background thread while the replica is healthy.
pub const HEARTBEAT_OFFSET: u64 = 0;
/// A copy of the log head (first index not applied here), read by the leader for recycling.
pub const HEAD_COPY_OFFSET: u64 = 8;
/// Flags: [`FLAG_ELIGIBLE`], [`FLAG_ABSTAINING`], [`FLAG_FOUNDING`] in the low 16 bits; the replica's
/// configuration fingerprint (`ReplicaConfig::fingerprint`) in the next 16
/// ([`FLAGS_CONFIG_SHIFT`]); the run's boot id in the high half (a peer whose boot id changes
/// restarted).
pub const FLAGS_OFFSET: u64 = 16;
/// Where the configuration fingerprint sits in the flags word.
pub const FLAGS_CONFIG_SHIFT: u32 = 16;
/// The configuration after the entries applied here (§5.4), by position.
pub const MEMBERS_COPY_OFFSET: u64 = 24;
/// The positions whose heartbeat this replica does not hear (its failure detector judges them
/// failed), as a mask. A replica that reads its own bit there for many reads in a row, while it
/// reads that peer's heartbeat fine, binds its side of the connection the peer reads it through
/// again: that side may be bound to a run of the peer that has since ended.
pub const UNHEARD_OFFSET: u64 = 32;
/// Velos: the replica's request to rejoin as an acceptor (`mu_velos::recovery::request`), or 0.
/// A leader that reads one not yet answered decides a rejoin entry for it.
pub const REJOIN_OFFSET: u64 = 40;
/// The positions this replica refuses as restarted without rejoining, as a mask: a peer whose
/// earlier run it saw came back with [`FLAG_FOUNDING`] (see there). A replica that started
/// founding and reads its own bit here stops.
pub const REFUSED_OFFSET: u64 = 48;
/// Bytes a peer reads in one go: heartbeat, head, flags, configuration, the unheard mask, the
/// rejoin request and the refused mask.
pub const STATUS_BYTES: u32 = 56;
/// The replica stands for election: it holds the whole log (it did not restart into an empty
/// one), is a member, and sees a live majority of the configuration its log gives.
pub const FLAG_ELIGIBLE: u64 = 1;
/// Velos: the replica restarted without its memory, rejoined, and still abstains in an index
/// some live replica has not applied (`mu_velos::recovery`). A leader
/// decides empty entries while a peer says so, so that the log passes those indices even
/// when no request comes.
pub const FLAG_ABSTAINING: u64 = 2;
/// This run of the replica started as a member in good standing (`ReplicaConfig::eligible`):
/// its log began empty, with the cluster's. Said by every run that started so, for its whole
/// life. A peer that saw an earlier run of it knows better: that run's log is gone, and
/// counted as a member's, this one's empty log could help decide a second value at an index
/// where the lost one had helped choose a first. Such a peer refuses it ([`REFUSED_OFFSET`]).
pub const FLAG_FOUNDING: u64 = 4;

/// Permission requests, one word per requester position (written by would-be leaders).
pub const REQUEST_OFFSET: u64 = 64;
/// Permission acknowledgements, one word per granter position (written by permission managers).
pub const ACK_OFFSET: u64 = REQUEST_OFFSET + 8 * MAX_REPLICAS as u64;
/// Where heartbeat reads of each peer land, 64 bytes per position (local only).
pub const VIEW_OFFSET: u64 = ACK_OFFSET + 8 * MAX_REPLICAS as u64;
/// State-transfer requests, one word per requester position ([`snapshot_ticket`]).
pub const SNAPSHOT_REQUEST_OFFSET: u64 = VIEW_OFFSET + 64 * MAX_REPLICAS as u64;
/// Where a requester reads the donor's snapshot header (local only).
pub const FETCHED_HEADER_OFFSET: u64 = SNAPSHOT_REQUEST_OFFSET + 8 * MAX_REPLICAS as u64;
/// Bytes of the background region.
pub const BACKGROUND_BYTES: usize = (ACK_BOOT_OFFSET + 8 * MAX_REPLICAS as u64) as usize;
/// The boot id of the permission manager's run beside each of its acknowledgements, one word
/// per granter position, written just before the acknowledgement on the same connection (so it
/// lands first). A requester counts a grant only from the run of the granter whose heartbeat it
/// accepted: not from a run it has not read yet, which may be one restarted without rejoining
/// ([`FLAG_FOUNDING`]) that it will refuse.
pub const ACK_BOOT_OFFSET: u64 = FETCHED_HEADER_OFFSET + SNAPSHOT_HEADER_BYTES;

/// The state-transfer region: the snapshot this replica last served (a header, then the
/// application's bytes), then room for one it fetches from a donor.
pub const SNAPSHOT_REGION: RegionId = RegionId(3);
/// Bytes of a snapshot header: the ticket it answers (written last), the log index it was taken
/// at (everything below applied), the length of the bytes, their digest, an error code, the
/// configuration at the index (the members, by position, §5.4), and the entry just below the
/// index when the donor holds it (Velos: what a new leader republishes), as its kind (0: none)
/// and its length; its bytes are the last of the snapshot's.
pub const SNAPSHOT_HEADER_BYTES: u64 = 64;
/// Snapshot header: the ticket answered, written last.
pub const SNAPSHOT_TICKET: u64 = 0;
/// Snapshot header: the log index it was taken at.
pub const SNAPSHOT_INDEX: u64 = 8;
/// Snapshot header: the length of the application's bytes.
pub const SNAPSHOT_LEN: u64 = 16;
/// Snapshot header: the digest ([`snapshot_digest`]).
pub const SNAPSHOT_DIGEST: u64 = 24;
/// Snapshot header: the error code (`SNAPSHOT_OK` and those after it).
pub const SNAPSHOT_ERROR: u64 = 32;
/// Snapshot header: the members at the index, by position.
pub const SNAPSHOT_MEMBERS: u64 = 40;
/// Snapshot header: the kind of the entry just below the index (0: none).
pub const SNAPSHOT_LAST_KIND: u64 = 48;
/// Snapshot header: that entry's length.
pub const SNAPSHOT_LAST_LEN: u64 = 56;
/// A served snapshot's error code: none, the snapshot is in the region.
pub const SNAPSHOT_OK: u64 = 0;
/// A served snapshot's error code: the state is larger than `snapshot_bytes_max`.
pub const SNAPSHOT_TOO_LARGE: u64 = 1;
/// A served snapshot's error code: the application takes no snapshots.
pub const SNAPSHOT_UNSUPPORTED: u64 = 2;

/// Bytes of the state-transfer region for snapshots of at most `snapshot_bytes_max` bytes.
pub fn snapshot_region_bytes(snapshot_bytes_max: usize) -> usize {
    2 * (SNAPSHOT_HEADER_BYTES as usize + snapshot_bytes_max)
}

/// Where fetched snapshot bytes land in the state-transfer region.
pub fn fetched_body_offset(snapshot_bytes_max: usize) -> u64 {
    2 * SNAPSHOT_HEADER_BYTES + snapshot_bytes_max as u64
}

/// A state-transfer request of the replica at `pos`, its `seq`-th: never 0.
pub fn snapshot_ticket(pos: usize, seq: u32) -> u64 {
    ((pos as u64 + 1) << 32) | u64::from(seq)
}

/// The state-transfer request word of the requester at `pos`, in a donor's background region.
pub fn snapshot_request_offset(pos: usize) -> u64 {
    SNAPSHOT_REQUEST_OFFSET + 8 * pos as u64
}

/// The digest a snapshot header carries: over the index, the configuration, the last entry's
/// kind and length (`last`: kind in the high half) and the bytes.
pub fn snapshot_digest(index: u64, members: u64, last: u64, bytes: &[u8]) -> u64 {
    mu_log::digest(index ^ 0x6d75_736e_6170 ^ members.rotate_left(29) ^ last.rotate_left(7), bytes)
}

/// The permission request word of the requester at `pos`, in a permission manager's background
/// region.
pub fn request_offset(pos: usize) -> u64 {
    REQUEST_OFFSET + 8 * pos as u64
}

/// The acknowledgement word of the permission manager at `pos`, in a requester's background
/// region.
pub fn ack_offset(pos: usize) -> u64 {
    ACK_OFFSET + 8 * pos as u64
}

/// The boot word of the permission manager at `pos` ([`ACK_BOOT_OFFSET`]), in a requester's
/// background region.
pub fn ack_boot_offset(pos: usize) -> u64 {
    ACK_BOOT_OFFSET + 8 * pos as u64
}

/// Where the heartbeat read of the peer at `pos` lands, in this replica's background region.
pub fn view_offset(pos: usize) -> u64 {
    VIEW_OFFSET + 64 * pos as u64
}

const _: () = assert!(VIEW_OFFSET % 64 == 0 && STATUS_BYTES <= 64);
