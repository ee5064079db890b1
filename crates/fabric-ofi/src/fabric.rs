//! The control plane of the fabric API: regions, endpoints, connection states and rights.

use crate::channel::CONTROL_TOKEN;
use crate::config::MAX_REGION_ID;
use crate::endpoint::OfiEndpoint;
use crate::keys::MAX_REGIONS;
use crate::node::{Node, OfiFabric, RegionEntry};
use crate::region::{Memory, OfiRegion};
use crate::side::Side;
use mu_fabric::{
    Access, ConnId, Fabric, FabricError, NodeId, PermError, QpState, RegionId, RegionScope,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl Fabric for OfiFabric {
    type Region = OfiRegion;
    type Endpoint = OfiEndpoint;

    fn backend_name(&self) -> &'static str {
        "ofi"
    }

    fn node(&self) -> NodeId {
        self.node.id
    }

    fn max_inline_bytes(&self) -> usize {
        self.node.inject_bytes
    }

    fn register_region(
        &self,
        id: RegionId,
        len_bytes: usize,
        access: Access,
    ) -> Result<OfiRegion, FabricError> {
        if id.0 > MAX_REGION_ID {
            return Err(FabricError::Config(format!(
                "region id {} is above the ofi backend's limit {MAX_REGION_ID}",
                id.0
            )));
        }
        let mut control = self.node.control.lock().expect("control");
        if control.regions.contains_key(&id) {
            return Err(FabricError::RegionExists(id));
        }
        if control.regions.len() >= MAX_REGIONS {
            return Err(FabricError::Config(format!("more than {MAX_REGIONS} regions")));
        }
        let region = OfiRegion { id, len_bytes, mem: Arc::new(Memory::new(len_bytes)?) };
        control
            .regions
            .insert(id, RegionEntry { region: region.clone(), access, scope: RegionScope::Every });
        self.node.publish_identity(&control);
        let sides: Vec<Arc<Side>> = control.sides.values().cloned().collect();
        for side in sides {
            let mut st = side.st.lock().expect("side");
            self.node.sync_registrations(&control, side.conn, &mut st);
        }
        Ok(region)
    }

    fn doorbell(&self) -> u64 {
        self.node.liveness.doorbell().count()
    }

    fn wait_doorbell(&self, seen: u64, timeout_ns: u64) -> u64 {
        self.node.liveness.doorbell().wait(seen, timeout_ns)
    }

    /// A peer's ring goes on the liveness watch this node holds to it (one is opened when a
    /// connection to the peer binds): a peer never bound is not rung.
    fn ring_doorbell(&self, peer: NodeId) {
        if peer == self.node.id {
            self.node.liveness.doorbell().ring();
        } else {
            self.node.liveness.ring(peer);
        }
    }

    /// A side outside the scope holds no registration of the region: closing one takes the
    /// right away from that peer at once, and the side's next revocation fences as after any
    /// right taken away.
    fn scope_region(&self, region: RegionId, scope: RegionScope) -> Result<(), FabricError> {
        let mut control = self.node.control.lock().expect("control");
        let entry = control.regions.get_mut(&region).ok_or(FabricError::UnknownRegion(region))?;
        entry.scope = scope;
        let sides: Vec<Arc<Side>> = control.sides.values().cloned().collect();
        for side in sides {
            let mut st = side.st.lock().expect("side");
            if self.node.sync_registrations(&control, side.conn, &mut st) && st.binding.is_some() {
                st.unfenced = true;
            }
        }
        Ok(())
    }

    fn endpoint(&self, depth: usize) -> Result<OfiEndpoint, FabricError> {
        let token = loop {
            let t = self.node.next_token.fetch_add(1, Ordering::Relaxed);
            if t != CONTROL_TOKEN {
                break t;
            }
        };
        Ok(OfiEndpoint::new(self.clone(), token, depth))
    }

    fn qp_state(&self, conn: ConnId) -> Result<QpState, FabricError> {
        Ok(self.node.side(conn).st.lock().expect("side").state)
    }

    fn qp_access(&self, conn: ConnId) -> Result<Access, FabricError> {
        Ok(self.node.side(conn).st.lock().expect("side").access)
    }

    fn crash_notified(&self, peer: NodeId) -> bool {
        self.node.liveness.dead(peer)
    }

    fn modify_qp(&self, conn: ConnId, to: QpState, access: Access) -> Result<(), FabricError> {
        let node = &self.node;
        // Binding reads the peer's identity over the network: done before any lock is taken,
        // so that a peer slow to answer (or cut off) holds up only this call, never the node's
        // other connections or its data path.
        let binding = if to == QpState::ReadyToReceive {
            let from = node.side(conn).st.lock().expect("side").state;
            if !from.can_move_to(to) {
                return Err(FabricError::InvalidTransition { conn, from, to });
            }
            Some(node.bind(conn)?)
        } else {
            None
        };
        let mut control = node.control.lock().expect("control");
        let side = Node::lock_side(&mut control, conn).clone();
        let mut st = side.st.lock().expect("side");
        if !st.state.can_move_to(to) {
            return Err(FabricError::InvalidTransition { conn, from: st.state, to });
        }
        let slow = Duration::from_millis(node.config.slow_fence_ms);
        match to {
            QpState::Reset | QpState::Error => {
                st.state = to;
                st.epoch += 1;
                node.revoke(control, conn, &mut st, slow).map_err(|wait| {
                    // Not reset: a reset side reads as one that never let the peer in.
                    st.state = QpState::Error;
                    wait.into_error(conn.peer)
                })?;
                if to == QpState::Reset {
                    st.binding = None;
                    st.access = Access::NONE;
                    st.fence_refused_since = None;
                    st.cut.clear();
                }
            }
            QpState::Init => {
                st.state = to;
                st.access = access;
            }
            QpState::ReadyToReceive => {
                st.binding = binding;
                st.state = to;
                st.access = access;
                node.sync_registrations(&control, conn, &mut st);
            }
            QpState::ReadyToSend => {
                st.state = to;
                st.access = access;
                node.revoke(control, conn, &mut st, slow)
                    .map_err(|wait| wait.into_error(conn.peer))?;
            }
        }
        Ok(())
    }

    fn set_access_fast(&self, conn: ConnId, access: Access) -> Result<(), PermError> {
        let node = &self.node;
        let control = node.control.lock().expect("control");
        let Some(side) = control.sides.get(&conn).cloned() else {
            return Err(FabricError::UnknownConnection(conn, "never connected").into());
        };
        let mut st = side.st.lock().expect("side");
        if st.state != QpState::ReadyToSend {
            return Err(
                FabricError::InvalidTransition { conn, from: st.state, to: st.state }.into()
            );
        }
        st.access = access;
        let fast = Duration::from_micros(node.config.fast_fence_us);
        if node.revoke(control, conn, &mut st, fast).is_err() {
            // As RDMA may when flags change under load: the side is now in error, and stays
            // unfenced (its fence read still under way) until the slow path's wait ends.
            st.state = QpState::Error;
            st.epoch += 1;
            // The control lock comes before a side's: let go of the side to take both.
            drop(st);
            let control = node.control.lock().expect("control");
            let mut st = side.st.lock().expect("side");
            node.sync_registrations(&control, conn, &mut st);
            return Err(PermError::Busy(conn));
        }
        Ok(())
    }

    fn set_access_slow(&self, conn: ConnId, access: Access) -> Result<(), FabricError> {
        let node = &self.node;
        let control = node.control.lock().expect("control");
        let Some(side) = control.sides.get(&conn).cloned() else {
            return Err(FabricError::UnknownConnection(conn, "never connected"));
        };
        let mut st = side.st.lock().expect("side");
        if st.binding.is_none() {
            return Err(FabricError::UnknownConnection(conn, "never bound to a peer"));
        }
        // Reset: every registration of the side closes, then the fence. A peer that cannot
        // answer within `slow_fence_ms` (stopped, or cut off while its connection lives) may
        // still have an operation half received, whose bytes would land when it goes on: no
        // barrier can be claimed, and the side stays in error, unfenced, until a later call's
        // wait sees the fence answered — or failed because the connection broke (the peer
        // died, or the kernel gave up retransmitting to it), which ends every operation it
        // had under way on it.
        st.state = QpState::Reset;
        st.epoch += 1;
        let slow = Duration::from_millis(node.config.slow_fence_ms);
        node.revoke(control, conn, &mut st, slow).map_err(|wait| {
            // Left in error, not reset: a reset side reads as one that never let the peer in,
            // and a caller could skip the revocation it still owes.
            st.state = QpState::Error;
            wait.into_error(conn.peer)
        })?;
        // Init, ready-to-receive (still bound to the same incarnation), ready-to-send.
        st.state = QpState::ReadyToSend;
        st.access = access;
        // The control lock comes before a side's: let go of the side to take both.
        drop(st);
        let control = node.control.lock().expect("control");
        let mut st = side.st.lock().expect("side");
        node.sync_registrations(&control, conn, &mut st);
        Ok(())
    }
}
