//! The data path: an endpoint posts work requests on the queue pairs of its connections and polls
//! their completion queues.
//!
//! Each posted request takes a *slot* of the endpoint (preallocated, `depth` of them) until its
//! completion is polled, or until a later completion on the same connection shows that it finished
//! silently (an unsignaled success: completions of one queue pair arrive in posting order). A
//! connection keeps the slots of its requests in posting order (`fifo`). The hardware work request
//! id names the endpoint, the slot and the slot's generation, so that a completion of a request
//! the endpoint has forgotten (lost in a reset, or posted by an endpoint since dropped) is
//! recognized and skipped.

use super::memory::Memory;
use super::node::{lock, Node, VerbsFabric};
use super::region::VerbsRegion;
use super::side::{Binding, Side, SideWord};
use crate::rundir;
use mu_fabric::{
    check_bounds, Completion, ConnId, Endpoint, FabricError, LocalRegion, LocalSlice, Op, OpKind,
    PostError, QpState, RemoteAddr, Source, Status, WorkRequest,
};
use rdma_mummy_sys::{ibv_sge, ibv_wc_status};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::queue_pair::{
    PostSendError, PostSendGuard, QueuePair, SetInlineData, SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Completions read from one completion queue per call into the poller.
const POLL_BATCH: usize = 32;

/// Endpoint ids, for the high half of hardware work request ids.
static NEXT_ENDPOINT_ID: AtomicU32 = AtomicU32::new(1);

/// Maps a work completion status to the fabric's.
pub(crate) fn status_of(wc_status: u32) -> Status {
    use ibv_wc_status::*;
    match wc_status {
        IBV_WC_SUCCESS => Status::Success,
        IBV_WC_REM_ACCESS_ERR => Status::RemoteAccessDenied,
        // The responder could not carry out a valid request (its queue pair is not accepting).
        IBV_WC_REM_OP_ERR | IBV_WC_REM_ABORT_ERR => Status::RemoteAccessDenied,
        IBV_WC_REM_INV_REQ_ERR => Status::RemoteInvalidRequest,
        IBV_WC_WR_FLUSH_ERR => Status::Flushed,
        IBV_WC_LOC_PROT_ERR | IBV_WC_LOC_ACCESS_ERR | IBV_WC_LOC_LEN_ERR | IBV_WC_LOC_QP_OP_ERR => {
            Status::LocalProtection
        }
        IBV_WC_RETRY_EXC_ERR | IBV_WC_RNR_RETRY_EXC_ERR => Status::PeerUnreachable,
        // Bad or missing responses, fatal and general errors: nothing was confirmed by the peer.
        _ => Status::PeerUnreachable,
    }
}

#[derive(Clone, Copy)]
struct Slot {
    in_use: bool,
    generation: u16,
    user_wr_id: u64,
    kind: OpKind,
    user_signaled: bool,
    /// The status to report whatever the hardware says: a marker standing for a request that
    /// failed before it was sent, or one posted while the side was in error.
    preset: Option<Status>,
    /// The side's epoch when posted.
    epoch: u64,
}

impl Slot {
    const FREE: Slot = Slot {
        in_use: false,
        generation: 0,
        user_wr_id: 0,
        kind: OpKind::Write,
        user_signaled: false,
        preset: None,
        epoch: 0,
    };
}

struct AttachedConn {
    side: Arc<Side>,
    /// Slots of this connection's requests, in posting order.
    fifo: VecDeque<u16>,
    /// Requests posted unsignaled in a row on this connection.
    unsignaled_run: u32,
    /// The side's epoch this endpoint last saw.
    epoch: u64,
    binding: Option<Arc<Binding>>,
}

/// A request as the hardware will see it.
enum Prepared<'a> {
    WriteInline {
        rkey: u32,
        addr: u64,
        data: &'a [u8],
    },
    Write {
        rkey: u32,
        addr: u64,
        lkey: u32,
        local_addr: u64,
        len: u32,
    },
    Read {
        rkey: u32,
        addr: u64,
        lkey: u32,
        local_addr: u64,
        len: u32,
    },
    CompareSwap {
        rkey: u32,
        addr: u64,
        expected: u64,
        desired: u64,
    },
    /// A zero-length marker standing for a request that is not executed.
    Marker,
}

/// A completion queue per attached connection, polled by one thread.
pub struct VerbsEndpoint {
    fabric: VerbsFabric,
    id: u32,
    depth: usize,
    slots: Vec<Slot>,
    free: Vec<u16>,
    ready: VecDeque<Completion>,
    conns: Vec<AttachedConn>,
    /// `VerbsConfig::side_index` → index into `conns`, or `u16::MAX`.
    index: Vec<u16>,
    /// Local regions used as sources and destinations, looked up once.
    locals: Vec<VerbsRegion>,
    cursor: usize,
    /// Registration of `scratch` (declared first: deregistered before the memory goes).
    scratch_mr: Arc<MemoryRegion>,
    /// One 8-byte word per slot, where a compare-and-swap's previous value lands.
    scratch: Memory,
}

impl VerbsEndpoint {
    pub(crate) fn new(fabric: VerbsFabric, depth: usize) -> Result<VerbsEndpoint, FabricError> {
        let node = &fabric.node;
        let scratch = Memory::new(depth * 8)?;
        // SAFETY: `scratch` maps at least `depth * 8` bytes and is stored beside the
        // registration, declared after it, so it outlives it.
        let scratch_mr = unsafe {
            node.device.pd.reg_mr(scratch.addr() as usize, depth * 8, AccessFlags::LocalWrite)
        }
        .map_err(|e| FabricError::Io {
            context: "registering an endpoint's scratch words".into(),
            message: e.to_string(),
        })?;
        let sides = usize::from(node.config.max_nodes) * usize::from(node.config.channels);
        Ok(VerbsEndpoint {
            id: NEXT_ENDPOINT_ID.fetch_add(1, Ordering::Relaxed),
            depth,
            slots: vec![Slot::FREE; depth],
            free: (0..depth as u16).rev().collect(),
            ready: VecDeque::with_capacity(depth),
            conns: Vec::new(),
            index: vec![u16::MAX; sides],
            locals: Vec::new(),
            cursor: 0,
            scratch_mr,
            scratch,
            fabric,
        })
    }

    fn hw_wr_id(&self, slot: u16) -> u64 {
        u64::from(self.id) << 32
            | u64::from(self.slots[usize::from(slot)].generation) << 16
            | u64::from(slot)
    }

    fn in_use(&self) -> usize {
        self.depth - self.free.len()
    }

    fn has_room(&self, at: usize) -> bool {
        !self.free.is_empty()
            && self.in_use() + self.ready.len() < self.depth
            && self.conns[at].fifo.len() < self.fabric.node.device.send_queue_depth as usize
    }

    fn release(&mut self, slot: u16) {
        let s = &mut self.slots[usize::from(slot)];
        debug_assert!(s.in_use);
        s.in_use = false;
        s.generation = s.generation.wrapping_add(1);
        self.free.push(slot);
    }

    /// Catches up with a change of the side's epoch: requests posted under an earlier epoch were
    /// discarded by a reset and will never complete.
    fn sync_epoch(&mut self, at: usize, epoch: u64) {
        if self.conns[at].epoch == epoch {
            return;
        }
        while let Some(&front) = self.conns[at].fifo.front() {
            if self.slots[usize::from(front)].epoch >= epoch {
                break;
            }
            self.conns[at].fifo.pop_front();
            self.release(front);
        }
        let ac = &mut self.conns[at];
        ac.epoch = epoch;
        ac.unsignaled_run = 0;
        ac.binding = lock(&ac.side.binding).clone();
    }

    /// Moves every completion the hardware has into `ready`.
    fn reap(&mut self) {
        let n = self.conns.len();
        for k in 0..n {
            let at = (self.cursor + k) % n;
            loop {
                let mut batch = [(0u64, 0u32); POLL_BATCH];
                let mut got = 0;
                if let Ok(poller) = self.conns[at].side.cq.start_poll() {
                    for wc in poller {
                        batch[got] = (wc.wr_id(), wc.status());
                        got += 1;
                        if got == POLL_BATCH {
                            break;
                        }
                    }
                }
                for &(wr_id, status) in &batch[..got] {
                    self.complete(at, wr_id, status);
                }
                if got < POLL_BATCH {
                    break;
                }
            }
            let epoch = self.conns[at].side.load().epoch;
            self.sync_epoch(at, epoch);
        }
        if n > 0 {
            self.cursor = (self.cursor + 1) % n;
        }
    }

    fn complete(&mut self, at: usize, wr_id: u64, wc_status: u32) {
        let slot = (wr_id & 0xffff) as u16;
        let generation = (wr_id >> 16) as u16;
        let known = (wr_id >> 32) as u32 == self.id
            && usize::from(slot) < self.depth
            && self.slots[usize::from(slot)].in_use
            && self.slots[usize::from(slot)].generation == generation;
        if !known {
            return; // a request this endpoint has forgotten (see the module docs)
        }
        // Requests posted before this one on the connection that are still here finished without
        // a completion: unsignaled successes.
        while let Some(front) = self.conns[at].fifo.pop_front() {
            if front == slot {
                break;
            }
            self.release(front);
        }
        let s = self.slots[usize::from(slot)];
        let status = s.preset.unwrap_or_else(|| status_of(wc_status));
        if status != Status::Success || s.user_signaled {
            let value = if s.kind == OpKind::CompareSwap && status == Status::Success {
                self.scratch.u64_at(usize::from(slot) * 8).load(Ordering::Acquire)
            } else {
                0
            };
            self.ready.push_back(Completion { wr_id: s.user_wr_id, kind: s.kind, status, value });
        }
        if status != Status::Success && s.preset.is_none() {
            // A failed request leaves the queue pair in error (RC semantics); say so.
            self.fabric.node.fail_side(&self.conns[at].side, s.epoch);
        }
        self.release(slot);
    }

    /// Finds a local region by id, caching it.
    fn local(&mut self, s: LocalSlice) -> Option<(u32, u64)> {
        let i = match self.locals.iter().position(|r| r.id() == s.region) {
            Some(i) => i,
            None => {
                let r = lock(&self.fabric.node.regions).get(&s.region).cloned()?;
                self.locals.push(r);
                self.locals.len() - 1
            }
        };
        let r = &self.locals[i];
        check_bounds(s.offset, u64::from(s.len), r.len_bytes() as u64)
            .then(|| (r.inner.local_mr.lkey(), r.inner.memory.addr() + s.offset))
    }

    /// The peer's `(addr, rkey)` for `[offset, offset + len)` of its region `region`, checked
    /// against the region's published length. A region the binding does not know is looked up
    /// again in the peer's file (it may have been registered since), from the same incarnation.
    fn remote(
        &mut self,
        at: usize,
        region: mu_fabric::RegionId,
        offset: u64,
        len: u64,
    ) -> Result<(u32, u64), Status> {
        let ac = &mut self.conns[at];
        let binding = ac.binding.as_ref().ok_or(Status::PeerUnreachable)?;
        let info = match binding.peer.region(region) {
            Some(info) => info,
            None => {
                let node = &self.fabric.node;
                let fresh = rundir::read_peer(
                    &node.config.run_dir,
                    node.config.cluster_id,
                    ac.side.conn.peer,
                )
                .ok()
                .filter(|p| p.incarnation == binding.peer.incarnation)
                .ok_or(Status::RemoteOutOfBounds)?;
                let info = fresh.region(region).ok_or(Status::RemoteOutOfBounds)?;
                ac.binding = Some(Arc::new(Binding {
                    peer: fresh,
                    qp_number: binding.qp_number,
                    psn: binding.psn,
                }));
                info
            }
        };
        if !check_bounds(offset, len, info.len_bytes) {
            return Err(Status::RemoteOutOfBounds);
        }
        Ok((info.rkey, info.addr + offset))
    }

    /// The checks of a post, in order: the connection attached here, the inline size, the side
    /// ready to send (or in error, to flush), and room for the request. Returns the connection's
    /// index and the side's word.
    #[inline(always)]
    fn check_post(
        &mut self,
        node: &Node,
        conn: ConnId,
        wr: &WorkRequest<'_>,
    ) -> Result<(usize, SideWord), PostError> {
        let at = match node.config.side_index(conn.peer, conn.channel).map(|k| self.index[k]) {
            Some(i) if i != u16::MAX => usize::from(i),
            _ => return Err(PostError::NotAttached(conn)),
        };
        if let Op::Write { source: Source::Inline(data), .. } = wr.op {
            if data.len() > node.max_inline_bytes {
                return Err(PostError::InlineTooLarge {
                    len: data.len(),
                    max: node.max_inline_bytes,
                });
            }
        }
        let word = self.conns[at].side.load();
        if !matches!(word.state, QpState::ReadyToSend | QpState::Error) {
            return Err(PostError::NotReadyToSend { conn, state: word.state });
        }
        self.sync_epoch(at, word.epoch);
        if !self.has_room(at) {
            self.reap();
            if !self.has_room(at) {
                return Err(PostError::QueueFull);
            }
        }
        Ok((at, word))
    }

    /// What the hardware gets: the request, or a marker standing for it with the status it
    /// reports.
    #[inline(always)]
    fn request<'a>(
        &mut self,
        node: &Node,
        at: usize,
        word: SideWord,
        wr: &WorkRequest<'a>,
    ) -> (Prepared<'a>, Option<Status>) {
        if word.state == QpState::Error {
            // Verbs flushes what is posted on a queue pair in error; the marker goes through the
            // flush in order and reports the request as flushed.
            return (Prepared::Marker, Some(Status::Flushed));
        }
        match self.prepare(at, wr) {
            Ok(request) => (request, None),
            Err(status) => {
                // Found before sending: the queue pair goes to error as the NIC would move it,
                // and the marker reports the failure behind what was posted before.
                node.fail_side(&self.conns[at].side, word.epoch);
                (Prepared::Marker, Some(status))
            }
        }
    }

    /// Takes a free slot for `wr` (there is one: `check_post` made room) and fills it in;
    /// returns it and whether the request is posted signaled. Unsignaled requests are signaled
    /// anyway before the send queue or the endpoint could fill with requests nothing reports.
    #[inline(always)]
    fn take_slot(
        &mut self,
        node: &Node,
        at: usize,
        wr: &WorkRequest<'_>,
        preset: Option<Status>,
        epoch: u64,
    ) -> (u16, bool) {
        let slot = self.free.pop().expect("has_room checked a free slot");
        let sq_half = node.device.send_queue_depth / 2;
        let signaled = wr.signaled
            || preset.is_some()
            || self.conns[at].unsignaled_run + 1 >= sq_half
            || 2 * (self.in_use() + self.ready.len()) > self.depth;
        let s = &mut self.slots[usize::from(slot)];
        s.in_use = true;
        s.user_wr_id = wr.wr_id;
        s.kind = wr.op.kind();
        s.user_signaled = wr.signaled;
        s.preset = preset;
        s.epoch = epoch;
        (slot, signaled)
    }

    /// Checks a request's addresses and turns them into the hardware's; the status it fails with
    /// otherwise, checked in the order a NIC would find them (local, then remote).
    #[inline(always)]
    fn prepare<'a>(&mut self, at: usize, wr: &WorkRequest<'a>) -> Result<Prepared<'a>, Status> {
        match wr.op {
            Op::Write { source: Source::Inline(data), remote } => {
                self.prepare_write_inline(at, remote, data)
            }
            Op::Write { source: Source::Local(s), remote } => self.prepare_write(at, s, remote),
            Op::Read { local: s, remote } => self.prepare_read(at, s, remote),
            Op::CompareSwap { remote, expected, desired } => {
                self.prepare_compare_swap(at, remote, expected, desired)
            }
        }
    }

    /// A write of inline data.
    #[inline]
    fn prepare_write_inline<'a>(
        &mut self,
        at: usize,
        remote: RemoteAddr,
        data: &'a [u8],
    ) -> Result<Prepared<'a>, Status> {
        let (rkey, addr) = self.remote(at, remote.region, remote.offset, data.len() as u64)?;
        Ok(Prepared::WriteInline { rkey, addr, data })
    }

    /// A write from a local region.
    #[inline]
    fn prepare_write(
        &mut self,
        at: usize,
        s: LocalSlice,
        remote: RemoteAddr,
    ) -> Result<Prepared<'static>, Status> {
        let (lkey, local_addr) = self.local(s).ok_or(Status::LocalProtection)?;
        let (rkey, addr) = self.remote(at, remote.region, remote.offset, u64::from(s.len))?;
        Ok(Prepared::Write { rkey, addr, lkey, local_addr, len: s.len })
    }

    /// A read into a local region.
    #[inline]
    fn prepare_read(
        &mut self,
        at: usize,
        s: LocalSlice,
        remote: RemoteAddr,
    ) -> Result<Prepared<'static>, Status> {
        let (lkey, local_addr) = self.local(s).ok_or(Status::LocalProtection)?;
        let (rkey, addr) = self.remote(at, remote.region, remote.offset, u64::from(s.len))?;
        Ok(Prepared::Read { rkey, addr, lkey, local_addr, len: s.len })
    }

    /// A compare-and-swap of an 8-byte-aligned remote word.
    #[inline]
    fn prepare_compare_swap(
        &mut self,
        at: usize,
        remote: RemoteAddr,
        expected: u64,
        desired: u64,
    ) -> Result<Prepared<'static>, Status> {
        let (rkey, addr) = self.remote(at, remote.region, remote.offset, 8)?;
        if addr % 8 != 0 {
            return Err(Status::RemoteInvalidRequest);
        }
        Ok(Prepared::CompareSwap { rkey, addr, expected, desired })
    }

    /// Posts `request` on connection `at` in slot `slot` (already taken and filled in).
    fn post_hw(
        &mut self,
        at: usize,
        slot: u16,
        request: &Prepared<'_>,
        signaled: bool,
    ) -> Result<(), PostSendError> {
        let wr_id = self.hw_wr_id(slot);
        let mut flags =
            if signaled { WorkRequestFlags::Signaled } else { WorkRequestFlags::none() };
        if matches!(request, Prepared::WriteInline { .. } | Prepared::Marker) {
            flags |= WorkRequestFlags::Inline;
        }
        let scratch = (self.scratch_mr.lkey(), self.scratch.addr() + u64::from(slot) * 8);
        // SAFETY: this endpoint is the one the connection is attached to (the node's `attached`
        // set admits one), and the reference lives only for this call.
        let qp = unsafe { self.conns[at].side.qp_for_posting() };
        let mut guard = qp.start_post_send();
        let handle = guard.construct_wr(wr_id, flags);
        // A zero-length scatter entry means 2 GiB to some providers: zero-length requests carry
        // no entry at all.
        let no_entries: &[ibv_sge] = &[];
        match *request {
            Prepared::WriteInline { rkey, addr, data } => {
                handle.setup_write(rkey, addr).setup_inline_data(data)
            }
            Prepared::Marker => handle.setup_write(0, 0).setup_inline_data(&[]),
            // SAFETY: the scatter entry names memory registered under its key (a local region
            // kept by the region table and this endpoint's cache) for as long as the request can
            // run; registrations drop only with their owners, and deregistration stops the NIC.
            Prepared::Write { rkey, addr, lkey, local_addr, len } => unsafe {
                let h = handle.setup_write(rkey, addr);
                if len == 0 {
                    h.setup_sge_list(no_entries)
                } else {
                    h.setup_sge(lkey, local_addr, len)
                }
            },
            // SAFETY: as for the write above: the read's target memory is a registered local
            // region kept alive as long as the request can run.
            Prepared::Read { rkey, addr, lkey, local_addr, len } => unsafe {
                let h = handle.setup_read(rkey, addr);
                if len == 0 {
                    h.setup_sge_list(no_entries)
                } else {
                    h.setup_sge(lkey, local_addr, len)
                }
            },
            // SAFETY: as above: the result lands in this endpoint's scratch words, which live as
            // long as the endpoint.
            Prepared::CompareSwap { rkey, addr, expected, desired } => unsafe {
                handle
                    .setup_atomic_compare_swap(rkey, addr, expected, desired)
                    .setup_sge(scratch.0, scratch.1, 8)
            },
        }
        guard.post()
    }
}

impl Endpoint for VerbsEndpoint {
    fn attach(&mut self, conn: ConnId) -> Result<(), FabricError> {
        let node = &self.fabric.node;
        let side = Arc::clone(node.side(conn)?);
        let key = node.config.side_index(conn.peer, conn.channel).expect("checked by side()");
        if self.index[key] != u16::MAX {
            return Ok(());
        }
        if !lock(&node.attached).insert(conn) {
            return Err(FabricError::AlreadyAttached { conn });
        }
        let word = side.load();
        let binding = lock(&side.binding).clone();
        self.index[key] = self.conns.len() as u16;
        self.conns.push(AttachedConn {
            fifo: VecDeque::with_capacity(node.device.send_queue_depth as usize),
            unsignaled_run: 0,
            epoch: word.epoch,
            binding,
            side,
        });
        Ok(())
    }

    fn post(&mut self, conn: ConnId, wr: &WorkRequest<'_>) -> Result<(), PostError> {
        let node = Arc::clone(&self.fabric.node);
        let (at, word) = self.check_post(&node, conn, wr)?;
        let (request, preset) = self.request(&node, at, word, wr);
        let (slot, signaled) = self.take_slot(&node, at, wr, preset, word.epoch);
        match self.post_hw(at, slot, &request, signaled) {
            Ok(()) => {
                let ac = &mut self.conns[at];
                ac.fifo.push_back(slot);
                ac.unsignaled_run = if signaled { 0 } else { ac.unsignaled_run + 1 };
                Ok(())
            }
            Err(e) => {
                self.release(slot);
                if let Some(status) = preset {
                    // The failure is known; report it even though the marker could not go.
                    self.ready.push_back(Completion {
                        wr_id: wr.wr_id,
                        kind: wr.op.kind(),
                        status,
                        value: 0,
                    });
                    return Ok(());
                }
                match e {
                    PostSendError::NotEnoughResources(_) => Err(PostError::QueueFull),
                    // The queue pair refused the request: its state changed under us.
                    _ => Err(PostError::NotReadyToSend {
                        conn,
                        state: self.conns[at].side.load().state,
                    }),
                }
            }
        }
    }

    fn poll(&mut self, out: &mut [Completion]) -> usize {
        if self.ready.len() < out.len() {
            self.reap();
        }
        let mut n = 0;
        while n < out.len() {
            let Some(c) = self.ready.pop_front() else { break };
            out[n] = c;
            n += 1;
        }
        n
    }
}

impl Drop for VerbsEndpoint {
    fn drop(&mut self) {
        let mut attached = lock(&self.fabric.node.attached);
        for ac in &self.conns {
            attached.remove(&ac.side.conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::status_of;
    use mu_fabric::Status;
    use rdma_mummy_sys::ibv_wc_status::*;

    #[test]
    fn completion_statuses_map_as_documented() {
        assert_eq!(status_of(IBV_WC_SUCCESS), Status::Success);
        assert_eq!(status_of(IBV_WC_REM_ACCESS_ERR), Status::RemoteAccessDenied);
        assert_eq!(status_of(IBV_WC_RETRY_EXC_ERR), Status::PeerUnreachable);
        assert_eq!(status_of(IBV_WC_RNR_RETRY_EXC_ERR), Status::PeerUnreachable);
        assert_eq!(status_of(IBV_WC_WR_FLUSH_ERR), Status::Flushed);
        assert_eq!(status_of(IBV_WC_LOC_PROT_ERR), Status::LocalProtection);
        assert_eq!(status_of(IBV_WC_REM_INV_REQ_ERR), Status::RemoteInvalidRequest);
        assert_eq!(status_of(IBV_WC_FATAL_ERR), Status::PeerUnreachable);
    }
}
