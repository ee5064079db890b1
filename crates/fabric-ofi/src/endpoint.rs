//! The data path: posting writes, reads and compare-and-swaps on a channel's endpoint, and
//! turning the provider's completions into the fabric API's.

use crate::channel::{context, Channel, TOKEN_SHIFT};
use crate::ffi::{PostFailure, RawCompletion};
use crate::keys::{data_key, Kind};
use crate::node::OfiFabric;
use crate::region::OfiRegion;
use crate::side::Side;
use mu_fabric::{
    check_bounds, Completion, ConnId, Endpoint, FabricError, LocalRegion, Op, OpKind, PostError,
    QpState, RegionId, RemoteAddr, Source, Status, WorkRequest,
};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Attached {
    side: Arc<Side>,
    channel: Arc<Channel>,
    /// The peer's address in `channel`'s table, once looked up.
    dest: Option<u64>,
}

/// An operation the provider holds: what its completion must say, and what must stay put
/// until it comes.
struct Slot {
    wr_id: u64,
    kind: OpKind,
    signaled: bool,
    conn: ConnId,
    epoch: u64,
    /// The peer's incarnation the operation went to (see `Node::classify_cancel`).
    peer_incarnation: u32,
    /// `[desired, expected, previous]` of a compare-and-swap.
    words: Box<[u64; 3]>,
    /// The local region a write reads from or a read writes into.
    _region: Option<OfiRegion>,
}

/// A completion queue and the connections attached to it (see [`mu_fabric::Endpoint`]).
///
/// Every operation is posted with a provider completion, even when the caller asked for none:
/// the slot it holds is freed by it, and a successful unsignaled operation is simply not
/// reported.
pub struct OfiEndpoint {
    fabric: OfiFabric,
    token: u16,
    conns: HashMap<ConnId, Attached>,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    raw: VecDeque<RawCompletion>,
    ready: VecDeque<Completion>,
    regions: HashMap<RegionId, OfiRegion>,
    /// What the first "canceled" operation of a connection's epoch turned out to mean: the
    /// operations posted in the same epoch failed for the same reason (see `status`).
    cancel_verdicts: HashMap<ConnId, (u64, Status)>,
}

/// How a provider's error number reads in the fabric API.
fn status_of(err: i32) -> Status {
    match err {
        // Refused registration keys (the target has not granted this kind of access, or has
        // revoked it), and providers that report a remote refusal as a cancellation.
        libc::EACCES | libc::EPERM | libc::EINVAL | libc::ECANCELED | libc::EKEYREJECTED => {
            Status::RemoteAccessDenied
        }
        // Refused, reset or timed-out connections, unknown addresses: the peer cannot answer.
        _ => Status::PeerUnreachable,
    }
}

impl OfiEndpoint {
    pub(crate) fn new(fabric: OfiFabric, token: u16, depth: usize) -> OfiEndpoint {
        let slots_count = depth.max(16) * 4;
        OfiEndpoint {
            fabric,
            token,
            conns: HashMap::new(),
            slots: (0..slots_count).map(|_| None).collect(),
            free: (0..slots_count).rev().collect(),
            raw: VecDeque::new(),
            ready: VecDeque::new(),
            regions: HashMap::new(),
            cancel_verdicts: HashMap::new(),
        }
    }

    fn local_region(&mut self, id: RegionId) -> Option<OfiRegion> {
        if !self.regions.contains_key(&id) {
            self.regions = self.fabric.control_regions();
        }
        self.regions.get(&id).cloned()
    }

    /// Drives the provider and turns what completed into completions.
    fn drive(&mut self) {
        let mut seen: Vec<*const Channel> = Vec::new();
        let channels: Vec<Arc<Channel>> = self.conns.values().map(|a| a.channel.clone()).collect();
        for c in channels {
            if seen.contains(&Arc::as_ptr(&c)) {
                continue;
            }
            seen.push(Arc::as_ptr(&c));
            c.take(self.token, &mut self.raw);
        }
        while let Some(c) = self.raw.pop_front() {
            let index = (c.context & ((1 << TOKEN_SHIFT) - 1)) as usize;
            let Some(slot) = self.slots.get_mut(index).and_then(Option::take) else { continue };
            self.free.push(index);
            if c.err == 0 {
                if slot.signaled {
                    let value = if slot.kind == OpKind::CompareSwap { slot.words[2] } else { 0 };
                    self.ready.push_back(Completion {
                        wr_id: slot.wr_id,
                        kind: slot.kind,
                        status: Status::Success,
                        value,
                    });
                }
            } else {
                let status = self.status(&slot, c.err);
                self.break_side(slot.conn, slot.epoch);
                self.ready.push_back(Completion {
                    wr_id: slot.wr_id,
                    kind: slot.kind,
                    status,
                    value: 0,
                });
            }
        }
    }

    /// What the failure of `slot`'s operation with the provider's error `err` says.
    fn status(&mut self, slot: &Slot, err: i32) -> Status {
        if err != libc::ECANCELED || !self.fabric.node.ways.cancel_is_ambiguous {
            return status_of(err);
        }
        match self.cancel_verdicts.get(&slot.conn) {
            Some(&(epoch, status)) if epoch == slot.epoch => status,
            _ => {
                let status =
                    self.fabric.node.classify_cancel(slot.conn.peer, slot.peer_incarnation);
                self.cancel_verdicts.insert(slot.conn, (slot.epoch, status));
                status
            }
        }
    }

    /// A failed operation moves the initiator's side to the error state, as on RDMA — unless
    /// the side was cycled since the operation was posted.
    fn break_side(&self, conn: ConnId, epoch: u64) {
        if let Some(a) = self.conns.get(&conn) {
            let mut st = a.side.st.lock().expect("side");
            if st.epoch == epoch && st.state != QpState::Error {
                st.state = QpState::Error;
                st.epoch += 1;
            }
        }
        self.fabric.node.refresh_registrations(conn);
    }

    fn fail_now(&mut self, wr: &WorkRequest<'_>, conn: ConnId, epoch: u64, status: Status) {
        self.break_side(conn, epoch);
        self.ready.push_back(Completion { wr_id: wr.wr_id, kind: wr.op.kind(), status, value: 0 });
    }
}

/// An operation that passed the checks before posting: where it goes, and what it reads or
/// writes locally.
struct Checked {
    channel: Arc<Channel>,
    dest: u64,
    /// The side's epoch when posted.
    epoch: u64,
    peer_incarnation: u32,
    remote: RemoteAddr,
    kind: Kind,
    /// The local region a write reads from or a read writes into, and the offset there.
    local: Option<(OfiRegion, usize)>,
}

/// What every kind of operation is posted with.
struct Posting<'a> {
    op: &'a Checked,
    key: u64,
    ctx: u64,
    /// Until when a provider that answers "again" is asked again.
    deadline: Instant,
}

impl OfiEndpoint {
    /// The checks of a post, in order: the side's state (a side in error flushes at once), the
    /// inline size, the binding and the peer's address, and what the initiator can check itself,
    /// as a NIC checks its own scatter-gather list and the target's address range before
    /// sending. `Ok(None)`: the operation's completion is queued already.
    #[inline(always)]
    fn check(&mut self, conn: ConnId, wr: &WorkRequest<'_>) -> Result<Option<Checked>, PostError> {
        let Some(a) = self.conns.get(&conn) else { return Err(PostError::NotAttached(conn)) };
        let (state, epoch, binding) = {
            let st = a.side.st.lock().expect("side");
            (st.state, st.epoch, st.binding.clone())
        };
        match state {
            QpState::ReadyToSend => {}
            QpState::Error => {
                self.ready.push_back(Completion {
                    wr_id: wr.wr_id,
                    kind: wr.op.kind(),
                    status: Status::Flushed,
                    value: 0,
                });
                return Ok(None);
            }
            state => return Err(PostError::NotReadyToSend { conn, state }),
        }
        let channel = a.channel.clone();
        let dest = match a.dest {
            Some(d) => Some(d),
            None => channel.address(&self.fabric.node.config, conn.peer).ok(),
        };
        if let (Some(d), Some(a)) = (dest, self.conns.get_mut(&conn)) {
            a.dest = Some(d);
        }
        let max_inline = self.fabric.node.inject_bytes;
        if let Op::Write { source: Source::Inline(d), .. } = wr.op {
            if d.len() > max_inline {
                return Err(PostError::InlineTooLarge { len: d.len(), max: max_inline });
            }
        }
        let (Some(binding), Some(dest)) = (binding, dest) else {
            self.fail_now(wr, conn, epoch, Status::PeerUnreachable);
            return Ok(None);
        };
        let (remote, len, kind) = match wr.op {
            Op::Write { source, remote } => (remote, source.len() as u64, Kind::Write),
            Op::Read { local, remote } => (remote, local.len as u64, Kind::Read),
            Op::CompareSwap { remote, .. } => (remote, 8, Kind::Atomic),
        };
        let remote_ok = binding
            .peer_regions
            .get(&remote.region)
            .is_some_and(|&region_len| check_bounds(remote.offset, len, region_len as u64));
        if !remote_ok {
            self.fail_now(wr, conn, epoch, Status::RemoteOutOfBounds);
            return Ok(None);
        }
        if kind == Kind::Atomic && remote.offset % 8 != 0 {
            self.fail_now(wr, conn, epoch, Status::RemoteInvalidRequest);
            return Ok(None);
        }
        let local = match wr.op {
            Op::Write { source: Source::Local(s), .. } | Op::Read { local: s, .. } => {
                match self.local_region(s.region) {
                    Some(r) if check_bounds(s.offset, s.len as u64, r.len_bytes() as u64) => {
                        Some((r, s.offset as usize))
                    }
                    _ => {
                        self.fail_now(wr, conn, epoch, Status::LocalProtection);
                        return Ok(None);
                    }
                }
            }
            _ => None,
        };
        let peer_incarnation = binding.peer_incarnation;
        Ok(Some(Checked { channel, dest, epoch, peer_incarnation, remote, kind, local }))
    }

    /// Posts with `post` until the provider takes the operation, or refuses it otherwise, or
    /// `deadline` passes: "again" means its queue is full or its connection is still being set
    /// up.
    #[inline(always)]
    fn post_until_taken(
        &mut self,
        deadline: Instant,
        mut post: impl FnMut() -> Result<(), PostFailure>,
    ) -> Result<(), PostFailure> {
        loop {
            match post() {
                Err(PostFailure::Again) if Instant::now() < deadline => {
                    self.drive();
                    std::thread::yield_now();
                }
                other => return other,
            }
        }
    }

    /// A write of inline data.
    #[inline]
    fn write_inline(&mut self, to: &Posting<'_>, data: &[u8]) -> Result<(), PostFailure> {
        let (op, ep) = (to.op, &to.op.channel.ep);
        self.post_until_taken(to.deadline, || {
            // SAFETY: inline data is copied by the provider before the call returns (FI_INJECT).
            unsafe {
                ep.write(
                    data.as_ptr(),
                    data.len(),
                    op.dest,
                    op.remote.offset,
                    to.key,
                    to.ctx,
                    true,
                    true,
                )
            }
        })
    }

    /// A write from `len` bytes of a local region at an offset.
    #[inline]
    fn write_local(
        &mut self,
        to: &Posting<'_>,
        (region, at): &(OfiRegion, usize),
        len: u32,
    ) -> Result<(), PostFailure> {
        let (op, ep) = (to.op, &to.op.channel.ep);
        self.post_until_taken(to.deadline, || {
            // SAFETY: the bytes stay put until the operation completes: local region memory is
            // kept alive by the slot's region (and leaked with the slot if the endpoint drops
            // first).
            unsafe {
                let from = region.mem.ptr().add(*at);
                ep.write(from, len as usize, op.dest, op.remote.offset, to.key, to.ctx, true, false)
            }
        })
    }

    /// A read into `len` bytes of a local region at an offset.
    #[inline]
    fn read(
        &mut self,
        to: &Posting<'_>,
        (region, at): &(OfiRegion, usize),
        len: u32,
    ) -> Result<(), PostFailure> {
        let (op, ep) = (to.op, &to.op.channel.ep);
        self.post_until_taken(to.deadline, || {
            // SAFETY: the bytes stay put until the operation completes: local region memory is
            // kept alive by the slot's region (and leaked with the slot if the endpoint drops
            // first).
            unsafe {
                let into = region.mem.ptr().add(*at);
                ep.read(into, len as usize, op.dest, op.remote.offset, to.key, to.ctx)
            }
        })
    }

    /// A compare-and-swap whose `[desired, expected, previous]` words are the slot's box.
    #[inline]
    fn compare_swap(&mut self, to: &Posting<'_>, words: &mut [u64; 3]) -> Result<(), PostFailure> {
        let (op, ep) = (to.op, &to.op.channel.ep);
        let words: *mut [u64; 3] = words;
        self.post_until_taken(to.deadline, || {
            // SAFETY: the words are the slot's box, which stays put until the operation
            // completes (the slot is kept, or leaked with it if the endpoint drops first).
            unsafe { ep.compare_swap(words, op.dest, op.remote.offset, to.key, to.ctx) }
        })
    }
}

impl Endpoint for OfiEndpoint {
    fn attach(&mut self, conn: ConnId) -> Result<(), FabricError> {
        // Attached here already: nothing to do, as on the other backends (a driver that sets a
        // link up again attaches it again; only another endpoint's hold is an error).
        if self.conns.contains_key(&conn) {
            return Ok(());
        }
        let channel = self.fabric.node.channel(conn.channel)?;
        let side = self.fabric.attach_side(conn)?;
        channel.open_box(self.token);
        self.conns.insert(conn, Attached { side, channel, dest: None });
        Ok(())
    }

    fn post(&mut self, conn: ConnId, wr: &WorkRequest<'_>) -> Result<(), PostError> {
        let Some(op) = self.check(conn, wr)? else { return Ok(()) };
        if self.free.is_empty() {
            self.drive();
        }
        let Some(index) = self.free.pop() else { return Err(PostError::QueueFull) };
        let (expected, desired) = match wr.op {
            Op::CompareSwap { expected, desired, .. } => (expected, desired),
            _ => (0, 0),
        };
        let mut slot = Slot {
            wr_id: wr.wr_id,
            kind: wr.op.kind(),
            signaled: wr.signaled,
            conn,
            epoch: op.epoch,
            peer_incarnation: op.peer_incarnation,
            words: Box::new([desired, expected, 0]),
            _region: op.local.as_ref().map(|(r, _)| r.clone()),
        };
        let me = self.fabric.node.id;
        let node_incarnation = self.fabric.node.incarnation;
        let key = data_key(op.remote.region, op.kind, me, conn.channel, node_incarnation);
        let ctx = context(self.token, index as u64);
        let to = Posting { op: &op, key, ctx, deadline: Instant::now() + Duration::from_secs(2) };
        let posted = match (wr.op, &op.local) {
            (Op::Write { source: Source::Inline(d), .. }, _) => self.write_inline(&to, d),
            (Op::Write { source: Source::Local(s), .. }, Some(local)) => {
                self.write_local(&to, local, s.len)
            }
            (Op::Read { local: s, .. }, Some(local)) => self.read(&to, local, s.len),
            (Op::CompareSwap { .. }, _) => self.compare_swap(&to, &mut slot.words),
            _ => unreachable!("local slices were resolved above"),
        };
        match posted {
            Ok(()) => {
                self.slots[index] = Some(slot);
                Ok(())
            }
            Err(PostFailure::Again) => {
                self.free.push(index);
                self.fail_now(wr, conn, op.epoch, Status::PeerUnreachable);
                Ok(())
            }
            Err(PostFailure::Error(e)) => {
                self.free.push(index);
                self.fail_now(wr, conn, op.epoch, status_of(e));
                Ok(())
            }
        }
    }

    fn poll(&mut self, out: &mut [Completion]) -> usize {
        if self.ready.len() < out.len() {
            self.drive();
        }
        let n = out.len().min(self.ready.len());
        for (o, c) in out.iter_mut().zip(self.ready.drain(..n)) {
            *o = c;
        }
        n
    }
}

impl Drop for OfiEndpoint {
    fn drop(&mut self) {
        for a in self.conns.values() {
            a.side.st.lock().expect("side").attached = false;
            a.channel.close_box(self.token);
        }
        // Operations still held by the provider may yet write into their slots' words and
        // regions: those are leaked rather than freed under it.
        for slot in self.slots.drain(..).flatten() {
            std::mem::forget(slot);
        }
    }
}
