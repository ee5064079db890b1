//! Where everything lives: the board every node registers (the same layout on every node of a
//! cluster, so that a peer addresses it at the offsets it uses in its own), the coordinators'
//! consensus region, and the connections between nodes.
//!
//! ```text
//! board (BOARD_REGION), on every node
//! 0                 fingerprint   the configuration's digest, set when the node starts
//! 8                 incarnation   this process's random number
//! 64                heartbeat     the counter the heartbeat ring reads (§4.2)
//! 128               view          the latest decided view, written by the coordinator leader
//! beats_offset      one word per node id: the catastrophic detector's beats it writes here
//! answers_offset    one mailbox per coordinator position, then one for the lease cache
//! inbox_offset      one mailbox per node id (read on coordinators and caches)
//! scratch_offset    where this node's reads land: a word per coordinator (slot words), the
//!                   ring word, a word per coordinator (fingerprints), a view
//! send_offset       a frame too large to post inline, written from here
//! then              a word per coordinator: a coordinator's reads of its peers' heartbeats
//! then              a word per coordinator (on coordinators): written by coordinator p once
//!                   it rejoined after a restart without its memory: 1 + the first index it
//!                   answers in (0: none)
//! ```

use crate::config::MembershipConfig;
use mu_fabric::{LocalSlice, NodeId, RegionId, RemoteAddr, WorkRequest};
use mu_ukharon::coordinator::CoordinatorConfig;
use mu_ukharon::mailbox;
use mu_ukharon::view::{View, MEMBERS_MAX};
use mu_velos::VelosLayout;

/// The board every node registers.
pub const BOARD_REGION: RegionId = RegionId(8);
/// The coordinators' consensus region (slot words and value logs, `mu_velos::layout`).
pub const CONSENSUS_REGION: RegionId = RegionId(9);

/// The membership connection on which `from` writes into and reads from `to`'s board
/// (channels 4 and 6: one connection per direction, as the replica's planes, so that each side
/// repairs only what it initiates).
pub fn board_channel(from: NodeId, to: NodeId) -> u8 {
    if from < to {
        4
    } else {
        6
    }
}

/// The connection on which coordinator `from` posts consensus operations to `to` (channels 5
/// and 7). The value write and the accept CAS go on the same one: FIFO (§5.3.1).
pub fn consensus_channel(from: NodeId, to: NodeId) -> u8 {
    if from < to {
        5
    } else {
        7
    }
}

pub const FINGERPRINT_OFFSET: u64 = 0;
pub const INCARNATION_OFFSET: u64 = 8;
pub const HEARTBEAT_OFFSET: u64 = 64;
pub const VIEW_OFFSET: u64 = 128;
/// Bytes of the view area: the largest view.
pub const VIEW_BYTES: u64 = (View::encoded_len_of(MEMBERS_MAX) as u64).next_multiple_of(64);
/// Payload bytes a mailbox frame carries at most.
pub const MAILBOX_PAYLOAD_BYTES: usize = 480;
/// Bytes of one mailbox.
pub const MAILBOX_BYTES: u64 = mailbox::frame_len(MAILBOX_PAYLOAD_BYTES) as u64;

/// The offsets of a cluster's boards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoardLayout {
    nodes_max: u64,
    coordinators: u64,
}

impl BoardLayout {
    pub fn new(config: &MembershipConfig) -> BoardLayout {
        BoardLayout {
            nodes_max: u64::from(config.nodes_max),
            coordinators: config.coordinators.len() as u64,
        }
    }

    /// The word node `from` writes its catastrophic-detector beats to.
    pub fn beat_offset(&self, from: u16) -> u64 {
        debug_assert!(u64::from(from) < self.nodes_max);
        VIEW_OFFSET + VIEW_BYTES + 8 * u64::from(from)
    }

    fn answers_offset(&self) -> u64 {
        (VIEW_OFFSET + VIEW_BYTES + 8 * self.nodes_max).next_multiple_of(64)
    }

    /// The mailbox coordinator `position` answers this node in.
    pub fn answer_offset(&self, position: usize) -> u64 {
        debug_assert!((position as u64) < self.coordinators);
        self.answers_offset() + MAILBOX_BYTES * position as u64
    }

    /// The mailbox the lease cache answers this node in.
    pub fn cache_answer_offset(&self) -> u64 {
        self.answers_offset() + MAILBOX_BYTES * self.coordinators
    }

    /// The mailbox node `from` writes requests and reports into (on a coordinator or cache).
    pub fn inbox_offset(&self, from: u16) -> u64 {
        debug_assert!(u64::from(from) < self.nodes_max);
        self.cache_answer_offset() + MAILBOX_BYTES * (1 + u64::from(from))
    }

    fn scratch_offset(&self) -> u64 {
        self.inbox_offset(0) + MAILBOX_BYTES * self.nodes_max
    }

    /// Where a read of coordinator `position`'s slot word lands.
    pub fn slot_read_offset(&self, position: usize) -> u64 {
        self.scratch_offset() + 8 * position as u64
    }

    /// Where a read of the ring successor's heartbeat lands.
    pub fn ring_read_offset(&self) -> u64 {
        self.scratch_offset() + 8 * self.coordinators
    }

    /// Where a read of coordinator `position`'s fingerprint lands.
    pub fn fingerprint_read_offset(&self, position: usize) -> u64 {
        self.ring_read_offset() + 8 + 8 * position as u64
    }

    /// Where a read of a view lands.
    pub fn view_read_offset(&self) -> u64 {
        (self.fingerprint_read_offset(0) + 8 * self.coordinators).next_multiple_of(64)
    }

    /// A read of the view on another node's board into this one's, at [`Self::view_read_offset`].
    pub fn view_read(&self, wr_id: u64) -> WorkRequest<'static> {
        let len = VIEW_BYTES as u32;
        let local = LocalSlice { region: BOARD_REGION, offset: self.view_read_offset(), len };
        let remote = RemoteAddr { region: BOARD_REGION, offset: VIEW_OFFSET };
        WorkRequest::read(wr_id, local, remote)
    }

    /// Where a frame too large to post inline is put before it is written from there.
    pub fn send_offset(&self) -> u64 {
        self.view_read_offset() + VIEW_BYTES
    }

    /// Where a coordinator's read of coordinator `position`'s heartbeat lands.
    pub fn peer_beat_read_offset(&self, position: usize) -> u64 {
        debug_assert!((position as u64) < self.coordinators);
        self.send_offset() + MAILBOX_BYTES + 8 * position as u64
    }

    /// The word coordinator `position` writes once it rejoined after a restart without its
    /// memory: 1 + the first index it answers in (0: none).
    pub fn rejoined_offset(&self, position: usize) -> u64 {
        debug_assert!((position as u64) < self.coordinators);
        self.peer_beat_read_offset(0) + 8 * self.coordinators + 8 * position as u64
    }

    /// Bytes of the whole board.
    pub fn board_bytes(&self) -> usize {
        (self.rejoined_offset(0) + 8 * self.coordinators) as usize
    }
}

/// The coordinators' consensus region for `config`.
pub fn consensus_layout(config: &MembershipConfig) -> Result<VelosLayout, String> {
    CoordinatorConfig::layout_for(config.coordinators.len(), config.slots_count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_do_not_overlap() {
        let config = MembershipConfig::new(1, vec![0, 1, 2], 8);
        let l = BoardLayout::new(&config);
        let areas = [
            (FINGERPRINT_OFFSET, 8),
            (INCARNATION_OFFSET, 8),
            (HEARTBEAT_OFFSET, 8),
            (VIEW_OFFSET, VIEW_BYTES),
            (l.beat_offset(0), 8 * 8),
            (l.answer_offset(0), MAILBOX_BYTES * 3),
            (l.cache_answer_offset(), MAILBOX_BYTES),
            (l.inbox_offset(0), MAILBOX_BYTES * 8),
            (l.slot_read_offset(0), 8 * 3),
            (l.ring_read_offset(), 8),
            (l.fingerprint_read_offset(0), 8 * 3),
            (l.view_read_offset(), VIEW_BYTES),
            (l.send_offset(), MAILBOX_BYTES),
            (l.peer_beat_read_offset(0), 8 * 3),
            (l.rejoined_offset(0), 8 * 3),
        ];
        for pair in areas.windows(2) {
            assert!(pair[0].0 + pair[0].1 <= pair[1].0, "{pair:?} overlap");
        }
        assert_eq!(l.board_bytes() as u64, l.rejoined_offset(2) + 8);
        assert_eq!(l.beat_offset(7) % 8, 0);
        assert_ne!(board_channel(NodeId(1), NodeId(2)), board_channel(NodeId(2), NodeId(1)));
    }
}
