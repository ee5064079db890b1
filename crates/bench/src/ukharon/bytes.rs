//! Figure 4: bytes per lease renewal, counted from the code path of `mu_membership::node`
//! (not measured on the wire: shm has no wire).
//!
//! * From the coordinators (`NodeCore::read_slots`): one one-sided read of an 8-byte slot word
//!   from each coordinator.
//! * Through a cache (`NodeCore::renew` and `serve`): one mailbox frame written to the cache
//!   (`mailbox::frame_len` of the 16-byte request: id and epoch) and one frame written back.
//!
//! Payload bytes are what the work requests move. Wire bytes add InfiniBand's per-packet
//! headers as the paper's RDMA would send them (no acknowledgements: the paper's 240 B is
//! exactly three reads of 8 bytes with these headers): LRH 8, BTH 12, ICRC 4, VCRC 2, plus RETH
//! 16 on a read request or write, AETH 4 on a read response.

use mu_ukharon::mailbox::frame_len;

const COORDINATORS: u64 = 3;
const SLOT_WORD_BYTES: u64 = 8;
/// The request to a cache and its answer: a request id and an epoch (`node::cache_payload`).
const CACHE_PAYLOAD_BYTES: usize = 16;
const IB_PACKET_BYTES: u64 = 8 + 12 + 4 + 2;
const RETH_BYTES: u64 = 16;
const AETH_BYTES: u64 = 4;

pub struct RenewalBytes {
    pub work_requests: u64,
    pub payload_bytes: u64,
    pub wire_bytes: u64,
}

pub fn from_coordinators() -> RenewalBytes {
    let request = IB_PACKET_BYTES + RETH_BYTES;
    let response = IB_PACKET_BYTES + AETH_BYTES + SLOT_WORD_BYTES;
    RenewalBytes {
        work_requests: COORDINATORS,
        payload_bytes: COORDINATORS * SLOT_WORD_BYTES,
        wire_bytes: COORDINATORS * (request + response),
    }
}

pub fn through_cache() -> RenewalBytes {
    let frame = frame_len(CACHE_PAYLOAD_BYTES) as u64;
    let write = IB_PACKET_BYTES + RETH_BYTES + frame;
    RenewalBytes { work_requests: 2, payload_bytes: 2 * frame, wire_bytes: 2 * write }
}
