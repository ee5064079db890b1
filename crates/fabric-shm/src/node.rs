//! The node: the state its control plane ([`ShmFabric`], `control`) and its data path
//! ([`ShmEndpoint`](crate::ShmEndpoint)) share.

use crate::config::ShmConfig;
use crate::guard::Slot;
use crate::layout::{self, MAX_CHANNELS, MAX_NODES};
use crate::liveness::Holder;
use crate::lock;
use crate::mapping::Mapping;
use crate::peer::Peer;
use crate::prefault::Prefaulter;
use crate::region::ShmRegion;
use mu_fabric::{ConnId, FabricError, NodeId, RegionId};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The nodes running in this process, by (run directory, node id): a second start of one of them
/// is refused at once, without waiting for the lock.
pub(crate) static RUNNING_HERE: Mutex<Vec<(PathBuf, NodeId)>> = Mutex::new(Vec::new());

/// A node on the shared-memory fabric. Cheap to clone; the node lives until the last clone and
/// every endpoint of it are dropped, and then reads as dead to its peers (a region handle keeps
/// its memory mapped, not the node alive).
#[derive(Clone)]
pub struct ShmFabric {
    pub(crate) node: Arc<Node>,
}

pub(crate) struct Node {
    pub(crate) config: ShmConfig,
    pub(crate) incarnation: u32,
    pub(crate) ctl: Arc<Mapping>,
    pub(crate) holder: Mutex<Option<Holder>>,
    pub(crate) regions: Mutex<HashMap<RegionId, ShmRegion>>,
    pub(crate) peers: Mutex<HashMap<(NodeId, u32), Arc<Peer>>>,
    pub(crate) attached: Mutex<HashSet<ConnId>>,
    /// Serializes control-plane changes (and their barriers) to this node's connection sides: a
    /// change decides whether to wait from the `acl` it replaces, so two at once could each see
    /// the other's state and neither wait for a writer admitted in between.
    pub(crate) control: Mutex<()>,
    /// Fills in the page tables of peers' regions as they are mapped (see `crate::prefault`).
    pub(crate) prefault: Prefaulter,
    /// Held for the node's life: a second process (or a second `create` in this one) for the same
    /// node id fails instead of running beside it.
    pub(crate) _lock: File,
    /// Dropped after `_lock` (fields drop in declaration order), so that a restart in this
    /// process finds the lock free once the registry says the node is gone.
    pub(crate) _running_here: RunningHere,
}

impl ShmFabric {
    /// This node's incarnation number.
    pub fn incarnation(&self) -> u32 {
        self.node.incarnation
    }

    /// The node's configuration.
    pub fn config(&self) -> &ShmConfig {
        &self.node.config
    }

    /// Makes the node read as dead to its peers at once, as if its process had been killed (for
    /// tests that keep several nodes in one process). Its memory stays mapped by its peers.
    pub fn crash(&self) {
        drop(lock(&self.node.holder).take());
    }

    /// The in-flight sequence number of `conn`'s peer on this node's side of `conn`: odd while the
    /// peer has an operation in flight into this node. For tests and diagnostics.
    pub fn peer_inflight_seq(&self, conn: ConnId) -> Result<u64, FabricError> {
        Ok(self.node.my_slot(conn)?.inflight_seq())
    }
}

/// A node's entry in [`RUNNING_HERE`], removed when the node is dropped.
pub(crate) struct RunningHere(pub(crate) (PathBuf, NodeId));

impl Drop for RunningHere {
    fn drop(&mut self) {
        lock(&RUNNING_HERE).retain(|k| *k != self.0);
    }
}

impl Node {
    pub(crate) fn check_conn(&self, conn: ConnId) -> Result<(), FabricError> {
        if usize::from(conn.peer.0) >= MAX_NODES {
            return Err(FabricError::UnknownConnection(conn, "peer id too large"));
        }
        if usize::from(conn.channel) >= MAX_CHANNELS {
            return Err(FabricError::UnknownConnection(conn, "channel too large"));
        }
        if conn.peer == self.config.node {
            return Err(FabricError::UnknownConnection(conn, "a node does not connect to itself"));
        }
        Ok(())
    }

    pub(crate) fn my_slot(&self, conn: ConnId) -> Result<&Slot, FabricError> {
        self.check_conn(conn)?;
        Ok(self.ctl.atomics_at::<Slot>(layout::slot_offset(conn.peer, conn.channel)))
    }

    pub(crate) fn bound_peer(&self, peer: NodeId, incarnation: u32) -> Option<Arc<Peer>> {
        lock(&self.peers).get(&(peer, incarnation)).cloned()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        drop(lock(&self.holder).take());
        // Remove our files if they are still ours (a successor may have replaced the control file).
        let cfg = &self.config;
        for id in lock(&self.regions).keys() {
            let _ = std::fs::remove_file(layout::region_file(
                &cfg.run_dir,
                cfg.node,
                self.incarnation,
                *id,
            ));
        }
        let ctl_path = layout::ctl_file(&cfg.run_dir, cfg.node);
        let ours = layout::open_ctl(&cfg.run_dir, cfg.node, cfg.cluster_id)
            .is_ok_and(|(_, h)| h.incarnation == self.incarnation);
        if ours {
            let _ = std::fs::remove_file(ctl_path);
        }
    }
}
