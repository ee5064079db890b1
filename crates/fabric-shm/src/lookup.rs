//! Finding a peer's current incarnation: the latest one reached while it lives, else its
//! control file.

use crate::crash_watch;
use crate::fence::PeerProcess;
use crate::guard::Slot;
use crate::layout::{self, MAX_CHANNELS};
use crate::liveness;
use crate::lock;
use crate::node::Node;
use crate::peer::Peer;
use mu_fabric::{FabricError, NodeId};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

impl Node {
    /// Whether the latest incarnation of `peer` we reached has died: its death flag, kept by the
    /// kernel, is one word in a mapping we hold already.
    pub(crate) fn crash_notified(&self, peer: NodeId) -> bool {
        self.latest_peer(peer).is_some_and(|p| !liveness::is_alive(&p.ctl))
    }

    /// The latest incarnation of `peer` we reached, if it lives.
    pub(crate) fn live_peer(&self, peer: NodeId) -> Option<Arc<Peer>> {
        self.latest_peer(peer).filter(|p| liveness::is_alive(&p.ctl))
    }

    /// The latest incarnation of `peer` we reached.
    fn latest_peer(&self, peer: NodeId) -> Option<Arc<Peer>> {
        let peers = lock(&self.peers);
        peers.values().filter(|p| p.node == peer).max_by_key(|p| p.incarnation).cloned()
    }

    /// The peer's current incarnation, checked alive, with the regions it registered mapped.
    ///
    /// The latest incarnation we reached, if it is still alive, is the current one: a node runs
    /// one incarnation at a time (its lock file), and the kernel marks an incarnation dead
    /// before the process lets go of that lock. So only when it died (or none is known) does
    /// this open the peer's control file, which costs tens of microseconds (most of a binding,
    /// and bindings are part of permission switches).
    pub(crate) fn lookup_peer(&self, peer: NodeId) -> Result<Arc<Peer>, FabricError> {
        let entry = match self.latest_peer(peer) {
            Some(known) if liveness::is_alive(&known.ctl) => known,
            // Died and not started again: its old control file is still there. Said without
            // mapping it, since the background plane asks about a dead peer once per read
            // period, on the thread that also serves permission requests.
            Some(dead)
                if layout::ctl_incarnation(&self.config.run_dir, peer)
                    == Some(dead.incarnation) =>
            {
                return Err(FabricError::PeerUnreachable(
                    peer,
                    format!("node {peer} (incarnation {}) is dead", dead.incarnation),
                ));
            }
            _ => self.open_peer(peer)?,
        };
        entry.map_registered(&self.config, &self.prefault);
        Ok(entry)
    }

    /// Opens the peer's current control segment, checks that it is ours to talk to and alive, and
    /// pins its process. Incarnations of the peer that no side of ours is bound to any more are
    /// forgotten, so that their memory goes back to the system once no endpoint uses it.
    fn open_peer(&self, peer: NodeId) -> Result<Arc<Peer>, FabricError> {
        let (ctl, header) =
            match layout::open_ctl(&self.config.run_dir, peer, self.config.cluster_id) {
                Ok(found) => found,
                Err(FabricError::Io { .. }) => {
                    return Err(FabricError::PeerUnreachable(
                        peer,
                        format!("no node {peer} in {}", self.config.run_dir.display()),
                    ))
                }
                Err(e) => return Err(e),
            };
        if !liveness::is_alive(&ctl) {
            return Err(FabricError::PeerUnreachable(
                peer,
                format!("node {peer} (incarnation {}) is dead", header.incarnation),
            ));
        }
        let mut peers = lock(&self.peers);
        let bound: Vec<u32> = (0..MAX_CHANNELS as u8)
            .map(|channel| {
                self.ctl
                    .atomics_at::<Slot>(layout::slot_offset(peer, channel))
                    .acl()
                    .peer_incarnation
            })
            .collect();
        peers.retain(|&(node, incarnation), _| node != peer || bound.contains(&incarnation));
        let entry = peers
            .entry((peer, header.incarnation))
            .or_insert_with(|| {
                let found = Arc::new(Peer {
                    node: peer,
                    incarnation: header.incarnation,
                    process: PeerProcess::pin(header.pid, header.pid_namespace, &ctl),
                    ctl,
                    regions: Mutex::new(HashMap::new()),
                    regions_seen: AtomicU64::new(0),
                });
                crash_watch::start(&found, &self.ctl);
                found
            })
            .clone();
        Ok(entry)
    }
}
