//! The data path: an endpoint posts one-sided operations and executes them under the guard.

use crate::config::{COPY_CHUNK_BYTES, MAX_INLINE_BYTES};
use crate::guard::{Refusal, Slot};
use crate::layout::{self, HEADER_BYTES, MAX_CHANNELS, MAX_NODES};
use crate::liveness;
use crate::lock;
use crate::mapping::Mapping;
use crate::node::{Node, ShmFabric};
use crate::peer::Peer;
use crate::region::ShmRegion;
use crate::remote_region::RemoteRegion;
use mu_fabric::{
    check_bounds, Access, Completion, ConnId, Endpoint, FabricError, Op, PostError, QpState,
    RegionId, Source, Status, WorkRequest,
};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A completion queue and the connections bound to it.
pub struct ShmEndpoint {
    fabric: ShmFabric,
    depth: usize,
    cq: VecDeque<Completion>,
    /// (peer, channel) -> index into `conns`, or u16::MAX.
    index: Vec<u16>,
    conns: Vec<AttachedConn>,
    /// Local regions used as sources and destinations, looked up once.
    locals: Vec<ShmRegion>,
}

impl ShmEndpoint {
    /// An endpoint of `fabric` holding up to `depth` completions (validated by the caller).
    pub(crate) fn new(fabric: ShmFabric, depth: usize) -> ShmEndpoint {
        ShmEndpoint {
            fabric,
            depth,
            cq: VecDeque::with_capacity(depth),
            index: vec![u16::MAX; MAX_NODES * MAX_CHANNELS],
            conns: Vec::new(),
            locals: Vec::new(),
        }
    }
}

struct AttachedConn {
    conn: ConnId,
    /// The peer incarnation this endpoint has mapped.
    bound: Option<Bound>,
    /// This writer's guard sequence number on the peer's slot (even between operations).
    seq: u64,
}

struct Bound {
    peer: Arc<Peer>,
    regions: Vec<(RegionId, Arc<RemoteRegion>)>,
}

/// The outcome of executing one operation.
struct Executed {
    status: Status,
    value: u64,
}

impl Executed {
    fn fail(status: Status) -> Executed {
        Executed { status, value: 0 }
    }
}

/// Finds a local region by id, caching it in `locals` (the fast path takes no lock and clones
/// nothing).
fn local_index(node: &Node, locals: &mut Vec<ShmRegion>, id: RegionId) -> Option<usize> {
    if let Some(i) = locals.iter().position(|r| r.id == id) {
        return Some(i);
    }
    let r = lock(&node.regions).get(&id).cloned()?;
    locals.push(r);
    Some(locals.len() - 1)
}

/// Executes one operation on an attached connection whose side is ready to send and bound to
/// `peer_incarnation`. Borrows everything it needs: no reference count is touched on the fast path.
///
/// The checks come first ([`check`]), then the operation's guarded section (one function per
/// kind), then the liveness check that keeps a dead target from acknowledging.
fn execute(
    node: &Node,
    ac: &mut AttachedConn,
    locals: &mut Vec<ShmRegion>,
    wr: &WorkRequest<'_>,
    peer_incarnation: u32,
) -> Executed {
    let me = node.config.node;
    let conn = ac.conn;

    // Make sure the endpoint has mapped the incarnation the connection is bound to.
    if ac.bound.as_ref().is_none_or(|b| b.peer.incarnation != peer_incarnation) {
        let Some(peer) = node.bound_peer(conn.peer, peer_incarnation) else {
            return Executed::fail(Status::PeerUnreachable);
        };
        ac.seq =
            peer.ctl.atomics_at::<Slot>(layout::slot_offset(me, conn.channel)).writer_start_seq();
        ac.bound = Some(Bound { peer, regions: Vec::new() });
    }
    let bound = ac.bound.as_mut().expect("bound above");
    let target = match check(node, conn.channel, bound, locals, wr) {
        Ok(target) => target,
        Err(status) => return Executed::fail(status),
    };

    // The guarded section: the target's side is checked and the bytes move while we are marked
    // in flight, so a revoke either stops us here or waits for us.
    let mut guard = Guard {
        slot: target.peer_ctl.atomics_at::<Slot>(layout::slot_offset(me, conn.channel)),
        seq: &mut ac.seq,
        incarnation: node.incarnation,
        needed: target.needed,
    };
    let done = match wr.op {
        Op::Write { source: Source::Inline(data), .. } => {
            write_inline(&mut guard, &target, data).map(|()| 0)
        }
        Op::Write { .. } => write_local(&mut guard, &target).map(|()| 0),
        Op::Read { .. } => read(&mut guard, &target).map(|()| 0),
        Op::CompareSwap { expected, desired, .. } => {
            compare_swap(&mut guard, &target, expected, desired)
        }
    };
    let value = match done {
        Ok(value) => value,
        Err(status) => return Executed::fail(status),
    };

    // A dead target cannot acknowledge: the bytes may have gone into the memory of a process that
    // no longer exists.
    if !liveness::is_alive(target.peer_ctl) {
        return Executed::fail(Status::PeerUnreachable);
    }
    Executed { status: Status::Success, value }
}

/// What the checks before an operation found: where it goes and what it needs there.
struct Target<'a> {
    /// The target incarnation's control segment (its guard slots and death flag).
    peer_ctl: &'a Mapping,
    region: &'a RemoteRegion,
    /// Where the operation starts in `region`'s mapping (past its header).
    at_remote: usize,
    len: u64,
    needed: Access,
    /// The local region a write copies from or a read into, and the offset there.
    local: Option<(&'a ShmRegion, usize)>,
}

/// The checks of an operation, in the order a responder would make them, before anything moves:
/// the local slice, the remote region and its bounds, alignment, rights, and the target's life.
#[inline(always)]
fn check<'a>(
    node: &Node,
    channel: u8,
    bound: &'a mut Bound,
    locals: &'a mut Vec<ShmRegion>,
    wr: &WorkRequest<'_>,
) -> Result<Target<'a>, Status> {
    let (remote, len, needed) = match wr.op {
        Op::Write { source, remote } => (remote, source.len() as u64, Access::WRITE),
        Op::Read { local, remote } => (remote, u64::from(local.len), Access::READ),
        Op::CompareSwap { remote, .. } => (remote, 8, Access::ATOMIC),
    };
    let local_at = match wr.op {
        Op::Write { source: Source::Local(s), .. } | Op::Read { local: s, .. } => {
            match local_index(node, locals, s.region) {
                Some(i) if check_bounds(s.offset, u64::from(s.len), locals[i].len_bytes as u64) => {
                    Some((i, s.offset as usize))
                }
                _ => return Err(Status::LocalProtection),
            }
        }
        _ => None,
    };
    let region_at = match bound.regions.iter().position(|(id, _)| *id == remote.region) {
        Some(i) => i,
        // A dead peer's region is not worth opening: say so at once (a new leader's first
        // round goes to the dead old leader too).
        None if !liveness::is_alive(&bound.peer.ctl) => return Err(Status::PeerUnreachable),
        None => match bound.peer.region(&node.config, &node.prefault, remote.region) {
            Some(r) => {
                bound.regions.push((remote.region, r));
                bound.regions.len() - 1
            }
            None => {
                let alive = liveness::is_alive(&bound.peer.ctl);
                return Err(if alive {
                    Status::RemoteOutOfBounds
                } else {
                    Status::PeerUnreachable
                });
            }
        },
    };
    let bound: &'a Bound = bound;
    let locals: &'a Vec<ShmRegion> = locals;
    let region = &bound.regions[region_at].1;
    if !check_bounds(remote.offset, len, region.len_bytes) {
        return Err(Status::RemoteOutOfBounds);
    }
    if matches!(wr.op, Op::CompareSwap { .. }) && remote.offset % 8 != 0 {
        return Err(Status::RemoteInvalidRequest);
    }
    // The scope names the target's side of the connection: this node and the channel.
    let through = ConnId::new(node.config.node, channel);
    if !region.access.contains(needed) || !layout::region_admits(&region.map, through) {
        return Err(Status::RemoteAccessDenied);
    }
    // A dead peer's memory is left alone, as a dead host's would be; the check after the copy is
    // the one that keeps a peer that dies meanwhile from acknowledging.
    let peer_ctl = &bound.peer.ctl;
    if !liveness::is_alive(peer_ctl) {
        return Err(Status::PeerUnreachable);
    }
    Ok(Target {
        peer_ctl,
        region,
        at_remote: HEADER_BYTES + remote.offset as usize,
        len,
        needed,
        local: local_at.map(|(i, offset)| (&locals[i], offset)),
    })
}

/// This writer's in-flight marker on the target's side of the connection.
struct Guard<'a> {
    slot: &'a Slot,
    seq: &'a mut u64,
    incarnation: u32,
    needed: Access,
}

impl Guard<'_> {
    /// Marks us in flight and checks the target's side: refused, we stay out.
    #[inline(always)]
    fn enter(&mut self) -> Result<(), Status> {
        self.slot.enter(self.seq, self.incarnation, self.needed).map_err(|refusal| match refusal {
            Refusal::WrongIncarnation => Status::PeerUnreachable,
            Refusal::Denied => Status::RemoteAccessDenied,
        })
    }

    #[inline(always)]
    fn exit(&mut self) {
        self.slot.exit(self.seq, self.incarnation);
    }
}

/// Copies `len` bytes with `copy(done, n)` in guarded sections.
///
/// Long copies go chunk by chunk, each its own guarded section, as an RDMA NIC checks each
/// packet: a revoke then waits for one chunk at most, never for a multi-gigabyte copy, and the
/// rest of a revoked write does not land (its completion reports the refusal).
#[inline(always)]
fn copy_chunks(
    guard: &mut Guard<'_>,
    len: u64,
    mut copy: impl FnMut(usize, usize),
) -> Result<(), Status> {
    let len = len as usize;
    let mut done = 0;
    // A zero-length operation still checks the rights once, as on RDMA.
    while done < len || (len == 0 && done == 0) {
        let n = (len - done).min(COPY_CHUNK_BYTES);
        guard.enter()?;
        copy(done, n);
        guard.exit();
        if len == 0 {
            break;
        }
        done += n;
    }
    Ok(())
}

/// A write of inline data (copied in when posted).
#[inline(always)]
fn write_inline(guard: &mut Guard<'_>, target: &Target<'_>, data: &[u8]) -> Result<(), Status> {
    copy_chunks(guard, target.len, |done, n| {
        target.region.map.copy_in(target.at_remote + done, &data[done..done + n])
    })
}

/// A write from a local region.
#[inline(always)]
fn write_local(guard: &mut Guard<'_>, target: &Target<'_>) -> Result<(), Status> {
    let (src, off) = target.local.expect("checked above");
    copy_chunks(guard, target.len, |done, n| {
        target.region.map.copy_from(target.at_remote + done, &src.map, HEADER_BYTES + off + done, n)
    })
}

/// A read into a local region.
#[inline(always)]
fn read(guard: &mut Guard<'_>, target: &Target<'_>) -> Result<(), Status> {
    let (dst, off) = target.local.expect("checked above");
    copy_chunks(guard, target.len, |done, n| {
        dst.map.copy_from(HEADER_BYTES + off + done, &target.region.map, target.at_remote + done, n)
    })
}

/// A compare-and-swap: one atomic instruction on the target's word, in one guarded section.
/// Returns the word's previous value.
#[inline(always)]
fn compare_swap(
    guard: &mut Guard<'_>,
    target: &Target<'_>,
    expected: u64,
    desired: u64,
) -> Result<u64, Status> {
    guard.enter()?;
    let word = target.region.map.u64_at(target.at_remote);
    let value = match word.compare_exchange(expected, desired, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(v) | Err(v) => v,
    };
    guard.exit();
    Ok(value)
}

impl Endpoint for ShmEndpoint {
    fn attach(&mut self, conn: ConnId) -> Result<(), FabricError> {
        self.fabric.node.check_conn(conn)?;
        let key = layout::slot_index(conn.peer, conn.channel).expect("checked above");
        if self.index[key] != u16::MAX {
            return Ok(());
        }
        if !lock(&self.fabric.node.attached).insert(conn) {
            return Err(FabricError::AlreadyAttached { conn });
        }
        self.index[key] = self.conns.len() as u16;
        self.conns.push(AttachedConn { conn, bound: None, seq: 0 });
        Ok(())
    }

    fn post(&mut self, conn: ConnId, wr: &WorkRequest<'_>) -> Result<(), PostError> {
        let at = match layout::slot_index(conn.peer, conn.channel).map(|key| self.index[key]) {
            Some(i) if i != u16::MAX => usize::from(i),
            _ => return Err(PostError::NotAttached(conn)),
        };
        if let Op::Write { source: Source::Inline(data), .. } = wr.op {
            if data.len() > MAX_INLINE_BYTES {
                return Err(PostError::InlineTooLarge { len: data.len(), max: MAX_INLINE_BYTES });
            }
        }
        if self.cq.len() >= self.depth {
            return Err(PostError::QueueFull);
        }
        let node: &Node = &self.fabric.node;
        let my_slot = node.my_slot(conn).map_err(|_| PostError::NotAttached(conn))?;
        let acl = my_slot.acl();
        let done = match acl.state {
            QpState::ReadyToSend => {
                execute(node, &mut self.conns[at], &mut self.locals, wr, acl.peer_incarnation)
            }
            QpState::Error => Executed::fail(Status::Flushed),
            state => return Err(PostError::NotReadyToSend { conn, state }),
        };
        if done.status != Status::Success && done.status != Status::Flushed {
            my_slot.move_to_error(acl);
        }
        if wr.signaled || done.status != Status::Success {
            self.cq.push_back(Completion {
                wr_id: wr.wr_id,
                kind: wr.op.kind(),
                status: done.status,
                value: done.value,
            });
        }
        Ok(())
    }

    fn poll(&mut self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        while n < out.len() {
            let Some(c) = self.cq.pop_front() else { break };
            out[n] = c;
            n += 1;
        }
        // An emptied queue starts again at the front of its buffer (std's `VecDeque::clear`
        // resets the ring's head). Otherwise each completion goes one entry further round a
        // ring of `depth` entries (the replica's: up to 65,536 of 24 bytes), and each push lands
        // on a line evicted since its last lap: on 2 vCPUs a profile of `mu bench replication`
        // put 14 % of the leader's samples on that one store. On a 16-vCPU machine the push
        // cost about the same with or without this (`BENCHMARKS.md`).
        if self.cq.is_empty() {
            self.cq.clear();
        }
        n
    }
}

impl Drop for ShmEndpoint {
    fn drop(&mut self) {
        let mut attached = lock(&self.fabric.node.attached);
        for c in &self.conns {
            attached.remove(&c.conn);
        }
    }
}
