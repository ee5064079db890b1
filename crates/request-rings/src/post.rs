//! Posting one frame as a one-sided write: inline when it fits, else from a staging area.

use crate::frame::{self, Kind};
use mu_fabric::{
    ConnId, Endpoint, Fabric, FabricError, LocalRegion, LocalSlice, PostError, RemoteAddr, Source,
    WorkRequest,
};

/// Why a frame was not posted. Nothing was written.
#[derive(Debug)]
pub(crate) enum PostFailure {
    Post(PostError),
    Staging(FabricError),
}

/// One side's endpoint, its staging region (registered with no remote access) and the buffer
/// frames are encoded in.
///
/// Who owns a staging slot: the frame for ring slot `i` is staged at the staging slot of `i`
/// and the write reads it as it lands (the simulator reads a local source chunk by chunk, as a
/// NIC's DMA does). The slot is written again only for the next use of ring slot `i`, which
/// comes after the peer has read this frame whole (a response to the request, or the request
/// that a response answers), so after the write has landed.
pub(crate) struct FramePoster<F: Fabric> {
    pub(crate) endpoint: F::Endpoint,
    staging: F::Region,
    max_inline_bytes: usize,
    frame: Vec<u8>,
}

/// Where a frame goes.
pub(crate) struct Target {
    pub(crate) conn: ConnId,
    pub(crate) wr_id: u64,
    pub(crate) remote: RemoteAddr,
    pub(crate) staging_offset: u64,
}

/// What a frame holds.
pub(crate) struct Content<'a> {
    pub(crate) kind: Kind,
    pub(crate) generation: u64,
    pub(crate) seq: u64,
    pub(crate) payload: &'a [u8],
}

impl<F: Fabric> FramePoster<F> {
    pub(crate) fn new(
        endpoint: F::Endpoint,
        staging: F::Region,
        max_inline_bytes: usize,
        slot_bytes: usize,
    ) -> FramePoster<F> {
        FramePoster { endpoint, staging, max_inline_bytes, frame: vec![0; slot_bytes] }
    }

    /// Posts the frame as an unsignaled write: only a failure completes. The caller checked the
    /// payload against the slot it goes to.
    pub(crate) fn post(&mut self, to: &Target, content: &Content<'_>) -> Result<(), PostFailure> {
        let needed = frame::frame_bytes(content.payload.len());
        if self.frame.len() < needed {
            self.frame.resize(needed, 0);
        }
        let len = frame::encode(
            &mut self.frame,
            content.kind,
            content.generation,
            content.seq,
            content.payload,
        )
        .expect("the buffer was sized to the frame, and payloads are bounded by their slot");
        let source = if len <= self.max_inline_bytes {
            Source::Inline(&self.frame[..len])
        } else {
            self.staging
                .write(to.staging_offset as usize, &self.frame[..len])
                .map_err(PostFailure::Staging)?;
            Source::Local(LocalSlice {
                region: self.staging.id(),
                offset: to.staging_offset,
                len: len as u32,
            })
        };
        let wr = WorkRequest::write(to.wr_id, source, to.remote).unsignaled();
        self.endpoint.post(to.conn, &wr).map_err(PostFailure::Post)
    }
}
