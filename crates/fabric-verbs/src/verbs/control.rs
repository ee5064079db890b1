//! The control plane of the fabric API: regions, endpoints, connection states and rights.

use super::device::access_flags;
use super::endpoint::VerbsEndpoint;
use super::handles::Scoping;
use super::memory::Memory;
use super::node::{lock, Node, VerbsFabric, CRASH_CHECK_GAP, MAX_ENDPOINT_DEPTH};
use super::region::{LocalCas, RegionInner, VerbsRegion};
use super::side::SideWord;
use mu_fabric::{
    Access, ConnId, Fabric, FabricError, NodeId, PermError, QpState, RegionId, RegionScope,
};
use std::sync::{Arc, Mutex};

impl Fabric for VerbsFabric {
    type Region = VerbsRegion;
    type Endpoint = VerbsEndpoint;

    fn backend_name(&self) -> &'static str {
        "verbs"
    }

    fn node(&self) -> NodeId {
        self.node.config.node
    }

    fn max_inline_bytes(&self) -> usize {
        self.node.max_inline_bytes
    }

    fn register_region(
        &self,
        id: RegionId,
        len_bytes: usize,
        access: Access,
    ) -> Result<VerbsRegion, FabricError> {
        let node = &self.node;
        node.check_alive()?;
        if len_bytes == 0 {
            return Err(FabricError::BadRegionSize {
                len_bytes,
                why: "a region needs at least one byte",
            });
        }
        if len_bytes as u64 > node.device.max_mr_bytes {
            return Err(FabricError::BadRegionSize {
                len_bytes,
                why: "larger than the device registers",
            });
        }
        let mut regions = lock(&node.regions);
        if regions.contains_key(&id) {
            return Err(FabricError::RegionExists(id));
        }
        let memory = Memory::new(len_bytes)?;
        // SAFETY: stored in the same `RegionInner` as `memory`, in a field declared before it,
        // so deregistered before the memory is unmapped.
        let local_mr = unsafe { node.register_memory(&memory, len_bytes, node.local_flags(), id) }?;
        // SAFETY: as above (in `scoping`, declared before `memory`).
        let shared_mr =
            unsafe { node.register_memory(&memory, len_bytes, access_flags(access), id) }?;
        let cas_mr = match *node.local_cas {
            // SAFETY: as above (`cas_mr` is declared before `memory`).
            LocalCas::Nic(_) => Some(unsafe {
                node.register_memory(&memory, len_bytes, access_flags(Access::ATOMIC), id)
            }?),
            _ => None,
        };
        let region = VerbsRegion {
            inner: Arc::new(RegionInner {
                id,
                len_bytes,
                access,
                scoping: Mutex::new(Scoping {
                    scope: RegionScope::Every,
                    shared_mr: Some(shared_mr),
                    window: None,
                }),
                local_mr,
                cas_mr,
                memory,
                local_cas: Arc::clone(&node.local_cas),
            }),
        };
        regions.insert(id, region.clone());
        drop(regions);
        node.publish()?;
        Ok(region)
    }

    /// Kept by which keys exist (see `scope` for the table and `window` for when windows are
    /// bound): `Every` through a registration with the region's remote access, `Only(conn)`
    /// through a type 2 memory window bound on this node's side of `conn` (devices without type
    /// 2 windows refuse it with `Incompatible`), `Nobody` through no key at all. The new key is
    /// published before this returns; peers read it when they bind.
    fn scope_region(&self, region: RegionId, scope: RegionScope) -> Result<(), FabricError> {
        self.node.scope_region(region, scope)
    }

    fn endpoint(&self, depth: usize) -> Result<VerbsEndpoint, FabricError> {
        self.node.check_alive()?;
        if depth == 0 || depth > MAX_ENDPOINT_DEPTH {
            return Err(FabricError::Config(format!(
                "a completion queue depth of {depth} is out of range: 1 to {MAX_ENDPOINT_DEPTH}"
            )));
        }
        VerbsEndpoint::new(self.clone(), depth)
    }

    fn qp_state(&self, conn: ConnId) -> Result<QpState, FabricError> {
        Ok(self.node.side(conn)?.load().state)
    }

    fn qp_access(&self, conn: ConnId) -> Result<Access, FabricError> {
        Ok(self.node.side(conn)?.load().access)
    }

    /// Whether the latest incarnation of `peer` a side was bound to has died, as its lock file
    /// in the run directory says (see [`rundir::DeathWatch`]). Not the device's asynchronous
    /// events: on RC a peer's death raises none until a request to it runs out of retries,
    /// which is the timeout this notification is there to beat.
    fn crash_notified(&self, peer: NodeId) -> bool {
        lock(&self.node.deaths).get_mut(&peer).is_some_and(|w| w.died_within(CRASH_CHECK_GAP))
    }

    fn modify_qp(&self, conn: ConnId, to: QpState, access: Access) -> Result<(), FabricError> {
        let node = &self.node;
        node.check_alive()?;
        let side = node.side(conn)?;
        let _control = lock(&node.control);
        let before = side.load();
        if !before.state.can_move_to(to) {
            return Err(FabricError::InvalidTransition { conn, from: before.state, to });
        }
        let after = match to {
            QpState::Reset => {
                Node::hw(conn, "reset", side.raw.move_to_reset())?;
                SideWord { state: to, access: Access::NONE, epoch: before.epoch + 1 }
            }
            QpState::Error => {
                Node::hw(conn, "error", side.raw.move_to_error())?;
                SideWord { state: to, ..before }
            }
            QpState::Init => {
                Node::hw(conn, "init", side.raw.move_to_init(node.device.address.port, access))?;
                SideWord { state: to, access, ..before }
            }
            QpState::ReadyToReceive => {
                let binding = node.lookup_peer(conn)?;
                let destination = node.destination(&binding);
                Node::hw(
                    conn,
                    "ready-to-receive",
                    side.raw.move_to_rtr(&node.device.address, &destination, access),
                )?;
                node.watch_death(conn.peer, binding.peer.incarnation);
                *lock(&side.binding) = Some(Arc::new(binding));
                SideWord { state: to, access, epoch: before.epoch + 1 }
            }
            QpState::ReadyToSend => {
                if before.state == QpState::ReadyToSend {
                    Node::hw(conn, "ready-to-send", side.raw.change_access(access))?;
                } else {
                    Node::hw(
                        conn,
                        "ready-to-send",
                        side.raw.move_to_rts(side.psn, node.retry, access),
                    )?;
                }
                SideWord { state: to, access, ..before }
            }
        };
        side.store(after);
        // Memory windows of regions scoped to this side follow its state (see `window`).
        match to {
            QpState::Reset => node.renew_windows_after_reset(side),
            QpState::ReadyToSend => node.bind_pending_windows(side)?,
            _ => {}
        }
        Ok(())
    }

    fn set_access_fast(&self, conn: ConnId, access: Access) -> Result<(), PermError> {
        let node = &self.node;
        node.check_alive()?;
        let side = node.side(conn)?;
        let _control = lock(&node.control);
        let before = side.load();
        if before.state != QpState::ReadyToSend {
            // Verbs changes flags in place only in ready-to-send (RTS→RTS).
            return Err(FabricError::InvalidTransition {
                conn,
                from: before.state,
                to: before.state,
            }
            .into());
        }
        match side.raw.change_access(access) {
            Ok(()) => {
                side.store(SideWord { access, ..before });
                Ok(())
            }
            Err(_) => {
                // As the Mu paper saw on its NICs: a flag change that does not go through leaves
                // the queue pair unusable; the slow path (state cycling) finishes the job.
                let _ = side.raw.move_to_error();
                side.store(SideWord { state: QpState::Error, ..before });
                Err(PermError::Busy(conn))
            }
        }
    }

    fn set_access_slow(&self, conn: ConnId, access: Access) -> Result<(), FabricError> {
        let node = &self.node;
        node.check_alive()?;
        let side = node.side(conn)?;
        let _control = lock(&node.control);
        let before = side.load();
        let Some(binding) = lock(&side.binding).clone() else {
            return Err(FabricError::InvalidTransition {
                conn,
                from: before.state,
                to: QpState::ReadyToSend,
            });
        };
        // Reset is the barrier: once it returns the queue pair accepts nothing. Init,
        // ready-to-receive and ready-to-send re-open it with the new flags, toward the same peer
        // queue pair (the published information it was bound with).
        Node::hw(conn, "reset", side.raw.move_to_reset())?;
        let epoch = before.epoch + 1;
        side.store(SideWord { state: QpState::Reset, access: Access::NONE, epoch });
        node.renew_windows_after_reset(side);
        Node::hw(conn, "init", side.raw.move_to_init(node.device.address.port, access))?;
        side.store(SideWord { state: QpState::Init, access, epoch });
        let destination = node.destination(&binding);
        Node::hw(
            conn,
            "ready-to-receive",
            side.raw.move_to_rtr(&node.device.address, &destination, access),
        )?;
        side.store(SideWord { state: QpState::ReadyToReceive, access, epoch: epoch + 1 });
        Node::hw(conn, "ready-to-send", side.raw.move_to_rts(side.psn, node.retry, access))?;
        side.store(SideWord { state: QpState::ReadyToSend, access, epoch: epoch + 1 });
        node.bind_pending_windows(side)
    }
}
