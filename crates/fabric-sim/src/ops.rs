//! The data path: posting work requests, landing them at their targets, and delivering
//! completions.
//!
//! An operation's life: `post` checks what verbs checks at post time and gives it a landing
//! schedule; its first landing runs when it reaches the head of its connection's flight queue and
//! its time comes; every landing (each chunk of a write) checks the target side *at that moment*,
//! which is what makes a revocation a barrier; once it has finished landing (or failed), its
//! completion is scheduled one trip later and the next operation on the connection may land.

use crate::node::{ConnSide, Node};
use crate::pending::{Body, PendingOp, WriteSource};
use crate::trace::{digest, TraceEvent, TraceKind};
use crate::world::{Event, World};
use mu_fabric::{
    check_bounds, Access, Completion, ConnId, NodeId, Op, OpKind, PostError, QpState, Source,
    Status, WorkRequest,
};

/// What `post` found, once it has accepted a request.
struct Accepted {
    from: NodeId,
    from_incarnation: u32,
    /// Ready to send, or in error (the request is flushed).
    state: QpState,
    /// The initiator side's epoch.
    epoch: u64,
}

impl World {
    /// Posts `wr` on `conn` through endpoint `ep`.
    pub(crate) fn post(
        &mut self,
        ep: u64,
        conn: ConnId,
        wr: &WorkRequest<'_>,
    ) -> Result<(), PostError> {
        let Accepted { from, from_incarnation, state, epoch } = self.check_post(ep, conn, wr)?;

        // Accepted: from here on the request will produce its completion (if any) in time.
        if let Some(cq) = self.endpoints.get_mut(&ep) {
            cq.outstanding += 1;
        }
        let body =
            if state == QpState::Error { Body::Flush(wr.op.kind()) } else { Body::of(wr.op) };
        let id = self.next_op_id;
        self.next_op_id += 1;
        let (land_start_ns, land_span_ns, chunks, order) = self.landing_schedule(from, conn, &body);
        let op = PendingOp {
            from,
            from_incarnation,
            conn,
            epoch,
            endpoint: ep,
            wr_id: wr.wr_id,
            signaled: wr.signaled,
            posted_ns: self.now_ns,
            body,
            land_start_ns,
            land_span_ns,
            chunks,
            next_chunk: 0,
            order,
            landed_bytes: 0,
            status: None,
            value: 0,
            read_data: Vec::new(),
        };
        let flush = matches!(op.body, Body::Flush(_));
        let len_bytes = op.body.len_bytes();
        self.ops.insert(id, op);
        self.note(
            TraceEvent::new(TraceKind::Post, from)
                .peer(conn.peer)
                .bytes(len_bytes)
                .detail(wr.wr_id),
        );
        self.queue_posted(id, from, conn, flush, land_start_ns);
        Ok(())
    }

    /// What verbs checks at post time, in its order: a node that can post, the connection
    /// attached to `ep`, its side ready to send (or in error, to flush), the inline size, and
    /// room in the queues.
    fn check_post(
        &self,
        ep: u64,
        conn: ConnId,
        wr: &WorkRequest<'_>,
    ) -> Result<Accepted, PostError> {
        let Some(cq) = self.endpoints.get(&ep) else {
            // The endpoint's node restarted: its connections are gone with it.
            return Err(PostError::NotAttached(conn));
        };
        let (from, depth, busy) = (cq.node, cq.depth, cq.outstanding + cq.queue.len());
        let Some(node) = self.nodes.get(&from) else {
            return Err(PostError::NotAttached(conn));
        };
        if node.crashed || node.paused {
            // A stopped or dead CPU posts nothing.
            return Err(PostError::Paused(from));
        }
        let from_incarnation = node.incarnation;
        let side = match node.conns.get(&conn) {
            Some(side) if side.attached == Some(ep) => side,
            _ => return Err(PostError::NotAttached(conn)),
        };
        let state = side.state;
        if !matches!(state, QpState::ReadyToSend | QpState::Error) {
            return Err(PostError::NotReadyToSend { conn, state });
        }
        if let Op::Write { source: Source::Inline(data), .. } = wr.op {
            let max = self.config.max_inline_bytes;
            if data.len() > max {
                return Err(PostError::InlineTooLarge { len: data.len(), max });
            }
        }
        if busy >= depth || side.unfinished >= self.config.connection_depth {
            return Err(PostError::QueueFull);
        }
        Ok(Accepted { from, from_incarnation, state, epoch: side.epoch })
    }

    /// Puts posted operation `id` on its connection: a flush completes once the completions
    /// before it have; anything else waits its turn to land.
    fn queue_posted(&mut self, id: u64, from: NodeId, conn: ConnId, flush: bool, land_ns: u64) {
        let now = self.now_ns;
        let side = self.side_mut(from, conn);
        side.unfinished += 1;
        if flush {
            // Never executed: completes as soon as the completions before it have.
            let t = now.max(side.last_completion_ns.saturating_add(1));
            side.last_completion_ns = t;
            if let Some(op) = self.ops.get_mut(&id) {
                op.status = Some(Status::Flushed);
            }
            self.schedule(t, Event::Complete(id));
        } else {
            side.flight.push_back(id);
            if side.flight.len() == 1 {
                self.schedule(land_ns, Event::Land(id));
            }
        }
    }

    /// When an operation about to be posted starts landing, over how long, in how many chunks
    /// and in what order. Draws jitter (and the shuffle) from the world's generator.
    fn landing_schedule(
        &mut self,
        from: NodeId,
        conn: ConnId,
        body: &Body,
    ) -> (u64, u64, u32, Option<Vec<u32>>) {
        if matches!(body, Body::Flush(_)) {
            return (self.now_ns, 0, 0, None);
        }
        let trip = self.one_way_ns(from, conn.peer);
        let extra = match body {
            Body::CompareSwap { .. } => self.config.cas_extra_ns,
            Body::Write { source: WriteSource::Local(_), .. } => self.config.non_inline_extra_ns,
            _ => 0,
        };
        let departs = self.depart(from);
        let (chunks, span) = match body {
            Body::Write { len_bytes, .. } => {
                let chunks = len_bytes.div_ceil(self.chunk_bytes()).max(1);
                let chunks = u32::try_from(chunks).unwrap_or(u32::MAX);
                // Distinct times for distinct chunks, so that a reader can run between any two.
                let span = self.bytes_ns(*len_bytes).max(u64::from(chunks) - 1);
                (chunks, span)
            }
            _ => (1, 0),
        };
        let order = (self.config.faults.out_of_order_landing && chunks > 1).then(|| {
            let mut order: Vec<u32> = (0..chunks).collect();
            self.rng.shuffle(&mut order);
            order
        });
        let sent = self.port_send(from, departs.saturating_add(extra), span);
        let earliest = sent.saturating_add(trip);
        let side = self.side_mut(from, conn);
        // FIFO: never before the previous operation on this connection has finished landing.
        let start = earliest.max(side.last_land_ns.saturating_add(1));
        side.last_land_ns = start.saturating_add(span);
        (start, span, chunks, order)
    }

    /// When a post by `from` made now leaves its node: the CPU posts one request at a time,
    /// each [`crate::SimConfig::post_cpu_ns`] after the previous one, and none while a control
    /// call holds it if [`crate::SimConfig::control_blocks_posts`].
    fn depart(&mut self, from: NodeId) -> u64 {
        let (now, cost) = (self.now_ns, self.config.post_cpu_ns);
        let Some(node) = self.nodes.get_mut(&from) else {
            return now;
        };
        let mut free = node.post_free_ns.max(now);
        if self.config.control_blocks_posts {
            free = free.max(node.busy_until_ns);
        }
        let departs = free.saturating_add(cost);
        node.post_free_ns = departs;
        departs
    }

    /// When the bytes of a write ready to leave `from` at `ready_ns` start leaving, over
    /// `span_ns`: at once, or after the node's earlier writes if its port's bandwidth is shared
    /// ([`crate::SimConfig::port_bandwidth`]).
    fn port_send(&mut self, from: NodeId, ready_ns: u64, span_ns: u64) -> u64 {
        if !self.config.port_bandwidth || span_ns == 0 {
            return ready_ns;
        }
        let Some(node) = self.nodes.get_mut(&from) else {
            return ready_ns;
        };
        let start = ready_ns.max(node.port_free_ns);
        node.port_free_ns = start.saturating_add(span_ns);
        start
    }

    /// The side `conn` of `node`, created in reset if it was never touched.
    pub(crate) fn side_mut(&mut self, node: NodeId, conn: ConnId) -> &mut ConnSide {
        self.nodes
            .entry(node)
            .or_insert_with(|| crate::node::Node::new(0))
            .conns
            .entry(conn)
            .or_insert_with(ConnSide::new)
    }

    /// The next landing of operation `id` is due.
    pub(crate) fn land(&mut self, id: u64) {
        let Some(op) = self.ops.get(&id) else {
            // Its initiator restarted: the operation died with it.
            return;
        };
        if self.held.contains(&op.from) {
            let event = TraceEvent::new(TraceKind::Park, op.from).peer(op.conn.peer);
            let event = event.detail(op.wr_id);
            self.parked.push(id);
            self.note(event);
            return;
        }
        match self.check_landing(op) {
            Err(status) => self.finish_landing(id, status),
            Ok(()) => self.execute(id),
        }
    }

    /// The initiator's part of [`World::check_landing`]: its side still the one the operation
    /// was posted on, and (before the first landing) its local slice. Returns the initiator, its
    /// side, and the right the operation needs at the target.
    fn check_initiator(&self, op: &PendingOp) -> Result<(&Node, &ConnSide, Access), Status> {
        let Some(from_node) = self.nodes.get(&op.from) else {
            return Err(Status::Flushed);
        };
        let Some(side) = from_node.conns.get(&op.conn) else {
            return Err(Status::Flushed);
        };
        if side.epoch != op.epoch || side.broken {
            return Err(Status::Flushed);
        }
        let first = op.next_chunk == 0;
        let needed = match op.body {
            Body::Write { source: WriteSource::Local(local), .. } | Body::Read { local, .. } => {
                if first {
                    let ok = from_node.regions.get(&local.region).is_some_and(|r| {
                        check_bounds(local.offset, u64::from(local.len), r.bytes.len() as u64)
                    });
                    if !ok {
                        return Err(Status::LocalProtection);
                    }
                }
                if matches!(op.body, Body::Read { .. }) {
                    Access::READ
                } else {
                    Access::WRITE
                }
            }
            Body::Write { .. } => Access::WRITE,
            Body::CompareSwap { .. } => Access::ATOMIC,
            Body::Flush(_) => return Err(Status::Flushed),
        };
        Ok((from_node, side, needed))
    }

    /// Everything the initiator's NIC and the target check before a landing, in the order they
    /// would find it. Done again for every chunk of a write: a right revoked in the middle of a
    /// write stops its remaining chunks.
    fn check_landing(&self, op: &PendingOp) -> Result<(), Status> {
        let from = op.from;
        let (from_node, side, needed) = self.check_initiator(op)?;

        // Reachability: a dead, restarted or cut-off target never acknowledges.
        let target = op.conn.peer;
        let Some(target_node) = self.nodes.get(&target) else {
            return Err(Status::PeerUnreachable);
        };
        if target_node.crashed
            || self.is_partitioned(from, target)
            || side.peer_incarnation != Some(target_node.incarnation)
        {
            return Err(Status::PeerUnreachable);
        }

        // The target's side of the connection.
        let (state, conn_access, bound) = target_node
            .conns
            .get(&ConnId::new(from, op.conn.channel))
            .map_or((QpState::Reset, Access::NONE, None), |s| {
                (s.state, s.access, s.peer_incarnation)
            });
        if !state.accepts_remote() {
            return Err(Status::RemoteAccessDenied);
        }
        if bound != Some(from_node.incarnation) {
            // Bound to an earlier incarnation of the initiator: on RDMA the packets would not
            // match its queue pair and would be dropped until the retries ran out.
            return Err(Status::PeerUnreachable);
        }
        if !conn_access.contains(needed) {
            return Err(Status::RemoteAccessDenied);
        }

        // The target region.
        let remote = match op.body {
            Body::Write { remote, .. } | Body::Read { remote, .. } => remote,
            Body::CompareSwap { remote, .. } => remote,
            Body::Flush(_) => return Err(Status::Flushed),
        };
        let Some(region) = target_node.regions.get(&remote.region) else {
            return Err(Status::RemoteOutOfBounds);
        };
        if !check_bounds(remote.offset, op.body.len_bytes(), region.bytes.len() as u64) {
            return Err(Status::RemoteOutOfBounds);
        }
        if matches!(op.body, Body::CompareSwap { .. }) && remote.offset & 7 != 0 {
            return Err(Status::RemoteInvalidRequest);
        }
        if !region.access.contains(needed)
            || !region.scope.admits(ConnId::new(from, op.conn.channel))
        {
            return Err(Status::RemoteAccessDenied);
        }
        Ok(())
    }

    /// Applies the next landing of `id` (checked already).
    fn execute(&mut self, id: u64) {
        let chunk_bytes = self.chunk_bytes();
        let World { ops, nodes, .. } = self;
        let Some(op) = ops.get_mut(&id) else { return };
        let (from, target) = (op.from, op.conn.peer);
        let event = TraceEvent::new(TraceKind::Land, from).peer(target);
        let event = match &op.body {
            Body::Write { source, remote, len_bytes } => {
                let k = op.next_chunk;
                let chunk = op.order.as_ref().map_or(k, |order| order[k as usize]);
                let start = u64::from(chunk) * chunk_bytes;
                let end = (start + chunk_bytes).min(*len_bytes);
                let (start, end) = (start as usize, end as usize);
                // Copied out first: the source and target may be the same node (loopback).
                let data: Vec<u8> = match source {
                    WriteSource::Inline(data) => data[start..end].to_vec(),
                    WriteSource::Local(local) => {
                        let bytes = &nodes[&from].regions[&local.region].bytes;
                        let base = local.offset as usize;
                        bytes[base + start..base + end].to_vec()
                    }
                };
                let bytes = &mut nodes
                    .get_mut(&target)
                    .and_then(|n| n.regions.get_mut(&remote.region))
                    .expect("checked at landing")
                    .bytes;
                let base = remote.offset as usize;
                bytes[base + start..base + end].copy_from_slice(&data);
                op.next_chunk += 1;
                op.landed_bytes += data.len() as u64;
                event.bytes(data.len() as u64).detail(digest(&data) ^ start as u64)
            }
            Body::Read { remote, local } => {
                let bytes = &nodes[&target].regions[&remote.region].bytes;
                let base = remote.offset as usize;
                op.read_data = bytes[base..base + local.len as usize].to_vec();
                op.next_chunk = op.chunks;
                op.landed_bytes = u64::from(local.len);
                event.bytes(op.landed_bytes).detail(digest(&op.read_data))
            }
            Body::CompareSwap { remote, expected, desired } => {
                let bytes = &mut nodes
                    .get_mut(&target)
                    .and_then(|n| n.regions.get_mut(&remote.region))
                    .expect("checked at landing")
                    .bytes;
                let at = remote.offset as usize;
                let mut word = [0u8; 8];
                word.copy_from_slice(&bytes[at..at + 8]);
                let old = u64::from_le_bytes(word);
                if old == *expected {
                    bytes[at..at + 8].copy_from_slice(&desired.to_le_bytes());
                }
                op.value = old;
                op.next_chunk = op.chunks;
                op.landed_bytes = 8;
                event.bytes(8).detail(old)
            }
            Body::Flush(_) => return,
        };
        let more = op.next_chunk < op.chunks;
        let next_time = op.chunk_time_ns(op.next_chunk);
        self.note(event);
        if more {
            self.schedule(next_time, Event::Land(id));
        } else {
            self.finish_landing(id, Status::Success);
        }
    }

    /// Operation `id` has finished landing (or failed with `status`): schedules its completion
    /// and lets the next operation on its connection land.
    fn finish_landing(&mut self, id: u64, status: Status) {
        let Some(op) = self.ops.get_mut(&id) else { return };
        op.status = Some(status);
        let (from, conn, epoch, posted_ns, wr_id) =
            (op.from, op.conn, op.epoch, op.posted_ns, op.wr_id);
        let read_len = match op.body {
            Body::Read { local, .. } if status.is_success() => u64::from(local.len),
            _ => 0,
        };
        let now = self.now_ns;
        let done = match status {
            // Retransmissions went unanswered until the retry budget ran out.
            Status::PeerUnreachable => {
                now.max(posted_ns.saturating_add(self.config.retry_timeout_ns))
            }
            // Found by the initiator's own NIC: no trip back.
            Status::Flushed | Status::LocalProtection => now,
            _ => {
                let trip = self.one_way_ns(conn.peer, from);
                now.saturating_add(trip).saturating_add(self.bytes_ns(read_len))
            }
        };
        self.note(
            TraceEvent::new(TraceKind::LandEnd, from).peer(conn.peer).status(status).detail(wr_id),
        );

        let side = self.side_mut(from, conn);
        if side.flight.front() == Some(&id) {
            side.flight.pop_front();
        }
        if !matches!(status, Status::Success | Status::Flushed) && side.epoch == epoch {
            side.broken = true;
        }
        let done = done.max(side.last_completion_ns.saturating_add(1));
        side.last_completion_ns = done;
        let next = side.flight.front().copied();
        self.schedule(done, Event::Complete(id));
        if let Some(next) = next {
            let t = self.ops.get(&next).map_or(now, |op| op.land_start_ns);
            self.schedule(t, Event::Land(next));
        }
    }

    /// Operation `id`'s completion reaches its initiator.
    pub(crate) fn complete(&mut self, id: u64) {
        let Some(mut op) = self.ops.remove(&id) else { return };
        let mut status = op.status.unwrap_or(Status::Flushed);
        let Some(node) = self.nodes.get_mut(&op.from) else { return };
        if node.incarnation != op.from_incarnation {
            return;
        }
        if let Some(side) = node.conns.get_mut(&op.conn) {
            side.unfinished = side.unfinished.saturating_sub(1);
        }
        if status.is_success() {
            if let Body::Read { local, .. } = op.body {
                // The response's data is written where the read asked for it.
                match node.regions.get_mut(&local.region) {
                    Some(region) => {
                        let base = local.offset as usize;
                        region.bytes[base..base + op.read_data.len()]
                            .copy_from_slice(&op.read_data);
                    }
                    None => status = Status::LocalProtection,
                }
            }
        }
        if !matches!(status, Status::Success | Status::Flushed) {
            // The error state is what the initiator learns from the failed completion, unless it
            // has cycled the connection since posting.
            if let Some(side) = node.conns.get_mut(&op.conn) {
                if side.epoch == op.epoch {
                    side.state = QpState::Error;
                }
            }
        }
        let kind = op.body.kind();
        let value = if status.is_success() && kind == OpKind::CompareSwap { op.value } else { 0 };
        let completion = Completion { wr_id: op.wr_id, kind, status, value };
        if let Some(cq) = self.endpoints.get_mut(&op.endpoint) {
            cq.outstanding = cq.outstanding.saturating_sub(1);
            if op.signaled || !status.is_success() {
                cq.queue.push_back(completion);
            }
        }
        op.read_data = Vec::new();
        self.note(
            TraceEvent::new(TraceKind::Complete, op.from)
                .peer(op.conn.peer)
                .status(status)
                .bytes(op.landed_bytes)
                .detail(op.wr_id ^ value.rotate_left(32)),
        );
    }
}
