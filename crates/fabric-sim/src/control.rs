//! The control plane: regions, endpoints, queue-pair transitions and permission changes.
//!
//! These calls are synchronous and happen at the current virtual time. Those that cost time on
//! RDMA are charged to the node's `busy_until_ns` instead of moving the global clock, so that
//! one node's slow permission change does not stall the whole simulated cluster.

use crate::node::{CompletionQueue, Node, Region};
use crate::trace::{TraceEvent, TraceKind};
use crate::world::World;
use mu_fabric::{
    check_bounds, Access, ConnId, FabricError, NodeId, PermError, QpState, RegionId, RegionScope,
};
use std::collections::{BTreeSet, VecDeque};

/// The error for a control-plane call made by a node that has crashed: its CPU is gone.
pub(crate) fn crashed(node: NodeId) -> FabricError {
    FabricError::PeerUnreachable(node, "this node has crashed (simulated)".to_string())
}

impl World {
    /// The node, if it exists and has not crashed.
    pub(crate) fn live_node_mut(&mut self, node: NodeId) -> Result<&mut Node, FabricError> {
        match self.nodes.get_mut(&node) {
            Some(n) if !n.crashed => Ok(n),
            _ => Err(crashed(node)),
        }
    }

    pub(crate) fn scope_region(
        &mut self,
        node: NodeId,
        id: RegionId,
        scope: RegionScope,
    ) -> Result<(), FabricError> {
        let region = self.live_node_mut(node)?.regions.get_mut(&id);
        region.ok_or(FabricError::UnknownRegion(id))?.scope = scope;
        Ok(())
    }

    pub(crate) fn register_region(
        &mut self,
        node: NodeId,
        id: RegionId,
        len_bytes: usize,
        access: Access,
    ) -> Result<u32, FabricError> {
        let max = self.config.max_region_bytes;
        let n = self.live_node_mut(node)?;
        if len_bytes == 0 {
            return Err(FabricError::BadRegionSize { len_bytes, why: "a region cannot be empty" });
        }
        if len_bytes > max {
            return Err(FabricError::BadRegionSize {
                len_bytes,
                why: "larger than the simulator's max_region_bytes",
            });
        }
        if n.regions.contains_key(&id) {
            return Err(FabricError::RegionExists(id));
        }
        n.regions
            .insert(id, Region { bytes: vec![0; len_bytes], access, scope: RegionScope::Every });
        let incarnation = n.incarnation;
        self.note(
            TraceEvent::new(TraceKind::Register, node)
                .bytes(len_bytes as u64)
                .detail(u64::from(id.0) | u64::from(access.bits()) << 16),
        );
        Ok(incarnation)
    }

    /// The bytes of a region handle's region, if the handle's incarnation is still alive.
    fn region_bytes(
        &mut self,
        node: NodeId,
        incarnation: u32,
        id: RegionId,
    ) -> Result<&mut Vec<u8>, FabricError> {
        self.nodes
            .get_mut(&node)
            .filter(|n| n.incarnation == incarnation)
            .and_then(|n| n.regions.get_mut(&id))
            .map(|r| &mut r.bytes)
            .ok_or(FabricError::UnknownRegion(id))
    }

    /// The byte range `[offset, offset + len)` of a region, checked.
    fn range(
        &mut self,
        node: NodeId,
        incarnation: u32,
        id: RegionId,
        offset: usize,
        len: usize,
        word: bool,
    ) -> Result<(&mut Vec<u8>, std::ops::Range<usize>), FabricError> {
        let bytes = self.region_bytes(node, incarnation, id)?;
        if !check_bounds(offset as u64, len as u64, bytes.len() as u64) {
            return Err(FabricError::OutOfBounds {
                offset: offset as u64,
                len: len as u64,
                region_len: bytes.len() as u64,
            });
        }
        if word && offset & 7 != 0 {
            return Err(FabricError::Misaligned(offset as u64));
        }
        Ok((bytes, offset..offset + len))
    }

    pub(crate) fn region_read(
        &mut self,
        node: NodeId,
        incarnation: u32,
        id: RegionId,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), FabricError> {
        let (bytes, range) = self.range(node, incarnation, id, offset, out.len(), false)?;
        out.copy_from_slice(&bytes[range]);
        Ok(())
    }

    pub(crate) fn region_write(
        &mut self,
        node: NodeId,
        incarnation: u32,
        id: RegionId,
        offset: usize,
        data: &[u8],
        word: bool,
    ) -> Result<(), FabricError> {
        let (bytes, range) = self.range(node, incarnation, id, offset, data.len(), word)?;
        bytes[range].copy_from_slice(data);
        self.note(
            TraceEvent::new(TraceKind::LocalWrite, node)
                .bytes(data.len() as u64)
                .detail(offset as u64 ^ u64::from(id.0) << 48),
        );
        Ok(())
    }

    pub(crate) fn region_load_u64(
        &mut self,
        node: NodeId,
        incarnation: u32,
        id: RegionId,
        offset: usize,
    ) -> Result<u64, FabricError> {
        let (bytes, range) = self.range(node, incarnation, id, offset, 8, true)?;
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[range]);
        Ok(u64::from_le_bytes(word))
    }

    pub(crate) fn open_endpoint(&mut self, node: NodeId, depth: usize) -> Result<u64, FabricError> {
        if depth == 0 {
            return Err(FabricError::Config("an endpoint's depth must be at least 1".to_string()));
        }
        self.live_node_mut(node)?;
        let id = self.next_endpoint_id;
        self.next_endpoint_id += 1;
        self.endpoints.insert(
            id,
            CompletionQueue {
                node,
                depth,
                outstanding: 0,
                queue: VecDeque::new(),
                conns: BTreeSet::new(),
            },
        );
        self.note(TraceEvent::new(TraceKind::Endpoint, node).bytes(depth as u64).detail(id));
        Ok(id)
    }

    pub(crate) fn attach(&mut self, ep: u64, conn: ConnId) -> Result<(), FabricError> {
        let Some(node) = self.endpoints.get(&ep).map(|cq| cq.node) else {
            return Err(FabricError::UnknownConnection(
                conn,
                "the endpoint belongs to an earlier incarnation of its node",
            ));
        };
        self.live_node_mut(node)?;
        let holder = self.side_mut(node, conn).attached;
        match holder {
            Some(other) if other != ep && self.endpoints.contains_key(&other) => {
                return Err(FabricError::AlreadyAttached { conn });
            }
            _ => {}
        }
        self.side_mut(node, conn).attached = Some(ep);
        if let Some(cq) = self.endpoints.get_mut(&ep) {
            cq.conns.insert(conn);
        }
        self.note(TraceEvent::new(TraceKind::Endpoint, node).peer(conn.peer).detail(ep));
        Ok(())
    }

    /// An endpoint handle was dropped: its connections are free for another endpoint, and
    /// completions still due to it are dropped.
    pub(crate) fn close_endpoint(&mut self, ep: u64) {
        let Some(cq) = self.endpoints.remove(&ep) else { return };
        if let Some(node) = self.nodes.get_mut(&cq.node) {
            for conn in cq.conns {
                if let Some(side) = node.conns.get_mut(&conn) {
                    if side.attached == Some(ep) {
                        side.attached = None;
                    }
                }
            }
        }
    }

    pub(crate) fn poll(&mut self, ep: u64, out: &mut [mu_fabric::Completion]) -> usize {
        let Some(cq) = self.endpoints.get_mut(&ep) else { return 0 };
        let n = out.len().min(cq.queue.len());
        for (slot, completion) in out.iter_mut().zip(cq.queue.drain(..n)) {
            *slot = completion;
        }
        n
    }

    pub(crate) fn qp_side(
        &self,
        node: NodeId,
        conn: ConnId,
    ) -> Result<(QpState, Access), FabricError> {
        let n = self.nodes.get(&node).ok_or_else(|| crashed(node))?;
        Ok(n.conns.get(&conn).map_or((QpState::Reset, Access::NONE), |s| (s.state, s.access)))
    }

    pub(crate) fn modify_qp(
        &mut self,
        node: NodeId,
        conn: ConnId,
        to: QpState,
        access: Access,
    ) -> Result<(), FabricError> {
        self.live_node_mut(node)?;
        let from = self.side_mut(node, conn).state;
        if !from.can_move_to(to) {
            return Err(FabricError::InvalidTransition { conn, from, to });
        }
        let peer_incarnation = if to == QpState::ReadyToReceive {
            // Binding needs the peer's queue-pair details; a missing or dead peer has none.
            match self.nodes.get(&conn.peer) {
                None => return Err(FabricError::PeerUnreachable(conn.peer, "no such node".into())),
                Some(p) if p.crashed => {
                    return Err(FabricError::PeerUnreachable(conn.peer, "it has crashed".into()))
                }
                Some(p) => Some(p.incarnation),
            }
        } else {
            None
        };
        if to == QpState::ReadyToReceive
            && self.rng.chance(self.config.faults.control_under_way_probability)
        {
            return Err(FabricError::InProgress(conn.peer, "binding (simulated)".into()));
        }
        let side = self.side_mut(node, conn);
        match to {
            QpState::Reset | QpState::Error => {
                // Operations this side posted and that have not landed are flushed, and nothing
                // lands here any more: the state itself is the revocation barrier.
                side.epoch += 1;
                if to == QpState::Reset {
                    side.broken = false;
                    side.peer_incarnation = None;
                }
            }
            QpState::ReadyToReceive => side.peer_incarnation = peer_incarnation,
            QpState::Init | QpState::ReadyToSend => {}
        }
        side.state = to;
        side.access = access;
        let cost = if (from, to) == (QpState::ReadyToSend, QpState::ReadyToSend) {
            self.config.fast_access_change_ns
        } else {
            self.config.slow_access_change_ns / 4
        };
        self.charge(node, cost);
        self.note(
            TraceEvent::new(TraceKind::ModifyQp, node)
                .peer(conn.peer)
                .detail(to as u64 | u64::from(access.bits()) << 8 | u64::from(conn.channel) << 16),
        );
        Ok(())
    }

    pub(crate) fn set_access_fast(
        &mut self,
        node: NodeId,
        conn: ConnId,
        access: Access,
    ) -> Result<(), PermError> {
        self.live_node_mut(node)?;
        let state = self.side_mut(node, conn).state;
        if state != QpState::ReadyToSend {
            return Err(PermError::Fabric(FabricError::InvalidTransition {
                conn,
                from: state,
                to: QpState::ReadyToSend,
            }));
        }
        self.charge(node, self.config.fast_access_change_ns);
        // Operations the peer has posted to us on this connection that have not finished landing.
        let in_flight = self
            .nodes
            .get(&conn.peer)
            .and_then(|p| p.conns.get(&ConnId::new(node, conn.channel)))
            .is_some_and(|s| !s.flight.is_empty());
        let faults = self.config.faults.clone();
        let busy = self.rng.chance(faults.fast_perm_failure_probability)
            || (in_flight && self.rng.chance(faults.fast_perm_busy_in_flight_probability));
        let side = self.side_mut(node, conn);
        let event = TraceEvent::new(TraceKind::AccessFast, node)
            .peer(conn.peer)
            .bytes(u64::from(in_flight))
            .detail(u64::from(access.bits()) | u64::from(conn.channel) << 16);
        if busy {
            // As on a NIC that breaks the queue pair: nothing lands here until it is cycled.
            side.state = QpState::Error;
            side.epoch += 1;
            self.note(event.status(mu_fabric::Status::Flushed));
            return Err(PermError::Busy(conn));
        }
        side.access = access;
        self.note(event);
        Ok(())
    }

    pub(crate) fn set_access_slow(
        &mut self,
        node: NodeId,
        conn: ConnId,
        access: Access,
    ) -> Result<(), FabricError> {
        self.live_node_mut(node)?;
        self.note(
            TraceEvent::new(TraceKind::AccessSlow, node)
                .peer(conn.peer)
                .detail(u64::from(access.bits()) | u64::from(conn.channel) << 16),
        );
        // Moving to reset is itself the barrier: every landing checks the state it finds. No
        // fencing is needed here, as a held writer's operations are checked when they land.
        self.modify_qp(node, conn, QpState::Reset, Access::NONE)?;
        if self.rng.chance(self.config.faults.control_under_way_probability) {
            // As a fence not answered yet: the rights are gone, the side is not usable.
            let side = self.side_mut(node, conn);
            side.state = QpState::Error;
            side.epoch += 1;
            return Err(FabricError::InProgress(conn.peer, "fence (simulated)".into()));
        }
        self.modify_qp(node, conn, QpState::Init, access)?;
        self.modify_qp(node, conn, QpState::ReadyToReceive, access)?;
        self.modify_qp(node, conn, QpState::ReadyToSend, access)
    }
}
