//! The control plane of the fabric API: regions, endpoints, connection states and rights.

use crate::barrier::BarrierWait;
use crate::config::{MAX_CQ_DEPTH, MAX_INLINE_BYTES, MAX_REGION_BYTES};
use crate::doorbell;
use crate::endpoint::ShmEndpoint;
use crate::guard::Acl;
use crate::layout::{self, RegionHeader, HEADER_BYTES};
use crate::lock;
use crate::mapping::Mapping;
use crate::node::ShmFabric;
use crate::region::ShmRegion;
use mu_fabric::{
    Access, ConnId, Fabric, FabricError, NodeId, PermError, QpState, RegionId, RegionScope,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn fabric_error(e: PermError) -> FabricError {
    match e {
        PermError::Fabric(e) => e,
        PermError::Busy(conn) => FabricError::FenceFailed { node: conn.peer, why: "busy".into() },
    }
}

impl Fabric for ShmFabric {
    type Region = ShmRegion;
    type Endpoint = ShmEndpoint;

    fn backend_name(&self) -> &'static str {
        "shm"
    }

    fn node(&self) -> NodeId {
        self.node.config.node
    }

    fn max_inline_bytes(&self) -> usize {
        MAX_INLINE_BYTES
    }

    fn register_region(
        &self,
        id: RegionId,
        len_bytes: usize,
        access: Access,
    ) -> Result<ShmRegion, FabricError> {
        if len_bytes == 0 {
            return Err(FabricError::BadRegionSize {
                len_bytes,
                why: "a region needs at least one byte",
            });
        }
        if len_bytes > MAX_REGION_BYTES {
            return Err(FabricError::BadRegionSize { len_bytes, why: "larger than 1 TiB" });
        }
        let mut regions = lock(&self.node.regions);
        if regions.contains_key(&id) {
            return Err(FabricError::RegionExists(id));
        }
        let cfg = &self.node.config;
        let path = layout::region_file(&cfg.run_dir, cfg.node, self.node.incarnation, id);
        let map = Mapping::create(&path, HEADER_BYTES + len_bytes)?;
        layout::write_region_header(
            &map,
            &RegionHeader {
                node: cfg.node,
                cluster_id: cfg.cluster_id,
                incarnation: self.node.incarnation,
                region: id,
                len_bytes: len_bytes as u64,
                access,
            },
        );
        self.node.ctl.u64_at(layout::H_REGIONS).fetch_add(1, Ordering::Release);
        let region = ShmRegion { id, len_bytes, map: Arc::new(map) };
        regions.insert(id, region.clone());
        Ok(region)
    }

    /// The scope lives in the region's header, which writers read at every operation.
    fn scope_region(&self, region: RegionId, scope: RegionScope) -> Result<(), FabricError> {
        let regions = lock(&self.node.regions);
        let found = regions.get(&region).ok_or(FabricError::UnknownRegion(region))?;
        layout::store_region_scope(&found.map, scope);
        Ok(())
    }

    fn endpoint(&self, depth: usize) -> Result<ShmEndpoint, FabricError> {
        if depth == 0 || depth > MAX_CQ_DEPTH {
            return Err(FabricError::Config(format!(
                "a completion queue depth of {depth} is out of range: 1 to {MAX_CQ_DEPTH}"
            )));
        }
        Ok(ShmEndpoint::new(self.clone(), depth))
    }

    fn qp_state(&self, conn: ConnId) -> Result<QpState, FabricError> {
        Ok(self.node.my_slot(conn)?.acl().state)
    }

    fn crash_notified(&self, peer: NodeId) -> bool {
        self.node.crash_notified(peer)
    }

    fn doorbell(&self) -> u64 {
        doorbell::count(&self.node.ctl)
    }

    fn wait_doorbell(&self, seen: u64, timeout_ns: u64) -> u64 {
        doorbell::wait(&self.node.ctl, seen, timeout_ns)
    }

    /// Rings the latest incarnation of `peer` this node reached, if it lives (a lookup in a
    /// map, no file opened): a peer never reached is asleep on nothing of ours to act on.
    fn ring_doorbell(&self, peer: NodeId) {
        if peer == self.node.config.node {
            doorbell::ring(&self.node.ctl);
        } else if let Some(peer) = self.node.live_peer(peer) {
            doorbell::ring(&peer.ctl);
        }
    }

    fn qp_access(&self, conn: ConnId) -> Result<Access, FabricError> {
        Ok(self.node.my_slot(conn)?.acl().access)
    }

    fn modify_qp(&self, conn: ConnId, to: QpState, access: Access) -> Result<(), FabricError> {
        let node = &self.node;
        let _control = lock(&node.control);
        // Binding to the peer's current incarnation happens before the change, outside the
        // compare-and-swap loop: it opens files.
        let bind = if to == QpState::ReadyToReceive {
            let from = node.my_slot(conn)?.acl().state;
            if !from.can_move_to(to) {
                return Err(FabricError::InvalidTransition { conn, from, to });
            }
            Some(node.lookup_peer(conn.peer)?.incarnation)
        } else {
            None
        };
        node.change_side(conn, BarrierWait::Slow, |before| {
            if !before.state.can_move_to(to) {
                return Err(FabricError::InvalidTransition { conn, from: before.state, to });
            }
            Ok(match to {
                QpState::Reset => Acl { state: QpState::Reset, access: Access::NONE, ..before },
                QpState::Error => Acl { state: QpState::Error, ..before },
                QpState::Init => Acl { state: QpState::Init, access, ..before },
                QpState::ReadyToReceive => Acl {
                    peer_incarnation: bind.expect("bound above"),
                    state: QpState::ReadyToReceive,
                    access,
                },
                QpState::ReadyToSend => Acl { state: QpState::ReadyToSend, access, ..before },
            })
        })
        .map_err(fabric_error)
    }

    fn set_access_fast(&self, conn: ConnId, access: Access) -> Result<(), PermError> {
        let _control = lock(&self.node.control);
        self.node.change_side(conn, BarrierWait::Fast, |before| {
            if !matches!(before.state, QpState::ReadyToSend | QpState::ReadyToReceive) {
                return Err(FabricError::InvalidTransition {
                    conn,
                    from: before.state,
                    to: before.state,
                });
            }
            Ok(Acl { access, ..before })
        })
    }

    fn set_access_slow(&self, conn: ConnId, access: Access) -> Result<(), FabricError> {
        let node = &self.node;
        let _control = lock(&node.control);
        // Reset is the barrier; init, ready-to-receive and ready-to-send then re-open the side with
        // the new flags, bound to the same peer incarnation (as verbs re-supplies the same remote
        // queue pair number).
        node.change_side(conn, BarrierWait::Slow, |before| {
            if before.peer_incarnation == 0 {
                return Err(FabricError::InvalidTransition {
                    conn,
                    from: before.state,
                    to: QpState::ReadyToSend,
                });
            }
            Ok(Acl { state: QpState::Reset, access: Access::NONE, ..before })
        })
        .map_err(fabric_error)?;
        for state in [QpState::Init, QpState::ReadyToReceive, QpState::ReadyToSend] {
            node.change_side(conn, BarrierWait::Slow, |before| Ok(Acl { state, access, ..before }))
                .map_err(fabric_error)?;
        }
        Ok(())
    }
}
