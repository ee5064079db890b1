//! The data plane's connections: one pair per other member of the view (this node's side into
//! the peer, and the side the peer initiates into this node), set up again after
//! `reconnect_ns` when an operation on them failed or the peer's process died.
//!
//! What a peer may do through the side it initiates here is READ (the follow word), and WRITE
//! too for the primary this node follows: granted when the view names it, and taken away
//! (a barrier: no write of it lands after) before the ring is read for a new primary.

use crate::layout::channel;
use mu_fabric::{Access, ConnId, Endpoint, Fabric, FabricError, NodeId, PermError, QpState};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Up,
    Down { retry_at_ns: u64 },
}

/// See the module docs.
pub struct Links {
    /// This node's data fabric node.
    me: NodeId,
    /// A member `m`'s data fabric node is `m + offset` (`KvSettings::data_node_offset`).
    offset: u16,
    peers: BTreeMap<u16, State>,
    /// The unique id each peer has in the latest view: a new one is a new process.
    uids: BTreeMap<u16, u64>,
    /// The peer that may write here.
    writer: Option<u16>,
    reconnect_ns: u64,
}

/// Why a revocation has not finished.
#[derive(Debug)]
pub struct NotYet(pub String);

impl Links {
    /// The links of data node `me`, whose peers are members' nodes moved by `offset`.
    pub fn new(me: NodeId, offset: u16, reconnect_ns: u64) -> Links {
        Links {
            me,
            offset,
            peers: BTreeMap::new(),
            uids: BTreeMap::new(),
            writer: None,
            reconnect_ns,
        }
    }

    /// The side this node posts on to reach `peer`.
    pub fn conn(&self, peer: u16) -> ConnId {
        let to = self.node(peer);
        ConnId::new(to, channel(self.me, to))
    }

    fn incoming(&self, peer: u16) -> ConnId {
        let from = self.node(peer);
        ConnId::new(from, channel(from, self.me))
    }

    /// Member `peer`'s data fabric node.
    fn node(&self, peer: u16) -> NodeId {
        NodeId(peer + self.offset)
    }

    fn access_for(&self, peer: u16) -> Access {
        if self.writer == Some(peer) {
            Access::READ_WRITE
        } else {
            Access::READ
        }
    }

    pub fn is_up(&self, peer: u16) -> bool {
        self.peers.get(&peer) == Some(&State::Up)
    }

    /// The peers are now `members` (node and unique id; this node left out); those no longer
    /// among them are forgotten (their sides stay as they are: a revoked one stays revoked). A
    /// peer under a new unique id is a new process: both sides are set up again, even where
    /// this node never saw the old one die (it was stopped then), since a side bound to the old
    /// process takes nothing from the new one.
    pub fn set_peers(&mut self, members: impl Iterator<Item = (u16, u64)>) {
        let me = self.me.0 - self.offset;
        let mut next = BTreeMap::new();
        let mut uids = BTreeMap::new();
        for (n, uid) in members.filter(|&(n, _)| n != me) {
            let again = State::Down { retry_at_ns: 0 };
            let state = match self.uids.get(&n) {
                Some(&old) if old != uid => again,
                _ => self.peers.get(&n).copied().unwrap_or(again),
            };
            next.insert(n, state);
            uids.insert(n, uid);
        }
        self.peers = next;
        self.uids = uids;
    }

    /// An operation to `peer` failed: down until set up again.
    pub fn down(&mut self, peer: u16, now_ns: u64) {
        if let Some(s) = self.peers.get_mut(&peer) {
            if *s == State::Up {
                *s = State::Down { retry_at_ns: now_ns + self.reconnect_ns };
            }
        }
    }

    /// Sets up the connections that are down and due; returns the peers that came up.
    pub fn upkeep<F: Fabric>(
        &mut self,
        fabric: &F,
        endpoint: &mut F::Endpoint,
        now_ns: u64,
    ) -> Vec<u16> {
        let mut up = Vec::new();
        let peers: Vec<(u16, State)> = self.peers.iter().map(|(&n, &s)| (n, s)).collect();
        for (peer, state) in peers {
            let state = match state {
                State::Up if fabric.crash_notified(self.node(peer)) => {
                    State::Down { retry_at_ns: now_ns }
                }
                s => s,
            };
            let State::Down { retry_at_ns } = state else { continue };
            if now_ns < retry_at_ns {
                self.peers.insert(peer, state);
                continue;
            }
            let outgoing = self.conn(peer);
            let ok = fabric.connect(self.incoming(peer), self.access_for(peer)).is_ok()
                && fabric.connect(outgoing, Access::NONE).is_ok()
                && endpoint.attach(outgoing).is_ok();
            let next = if ok {
                up.push(peer);
                State::Up
            } else {
                State::Down { retry_at_ns: now_ns + self.reconnect_ns }
            };
            self.peers.insert(peer, next);
        }
        up
    }

    /// `peer` may write here from now on (the view names it this node's primary).
    pub fn grant_write<F: Fabric>(&mut self, fabric: &F, peer: u16) {
        self.writer = Some(peer);
        if self.is_up(peer) {
            // A failure leaves it down; the next upkeep connects it with the right access.
            if set_access(fabric, self.incoming(peer), Access::READ_WRITE).is_err() {
                self.peers.insert(peer, State::Down { retry_at_ns: 0 });
            }
        }
    }

    /// Takes `peer`'s right to write here away, as a barrier: once this returns `Ok`, no write
    /// of it lands here any more. A side never bound to it gave it no right.
    pub fn revoke_write<F: Fabric>(&mut self, fabric: &F, peer: u16) -> Result<(), NotYet> {
        if self.writer == Some(peer) {
            self.writer = None;
        }
        let side = self.incoming(peer);
        if set_access(fabric, side, Access::READ).is_ok() {
            return Ok(());
        }
        // Moving a side to the error state waits for the peer's operations in flight: a
        // barrier too. The side is set up again (READ only) by a later upkeep.
        if let Some(s) = self.peers.get_mut(&peer) {
            *s = State::Down { retry_at_ns: 0 };
        }
        match fabric.modify_qp(side, QpState::Error, Access::NONE) {
            Ok(()) | Err(FabricError::UnknownConnection(..)) => Ok(()),
            Err(e) => Err(NotYet(e.to_string())),
        }
    }
}

/// The fast change, and the slow one when the fast one finds operations in flight.
fn set_access<F: Fabric>(fabric: &F, conn: ConnId, access: Access) -> Result<(), FabricError> {
    match fabric.set_access_fast(conn, access) {
        Ok(()) => Ok(()),
        Err(PermError::Busy(_)) => fabric.set_access_slow(conn, access),
        Err(PermError::Fabric(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer under a new unique id is set up again, even where this node never saw the old
    /// process die: a side bound to the old one takes nothing from the new one.
    #[test]
    fn a_peer_under_a_new_unique_id_is_set_up_again() {
        let mut links = Links::new(NodeId(10 + 2), 10, 1_000);
        links.set_peers([(2, 20), (3, 30), (4, 40)].into_iter());
        for peer in [3, 4] {
            links.peers.insert(peer, State::Up);
        }
        assert!(!links.peers.contains_key(&2), "this node is no peer of its own");
        links.set_peers([(2, 20), (3, 30), (4, 41)].into_iter());
        assert!(links.is_up(3), "the same process stays connected");
        assert!(!links.is_up(4), "a new process under node 4 is connected anew");
        links.peers.insert(4, State::Up);
        // Left out of a view and back: set up again whatever its id.
        links.set_peers([(3, 30)].into_iter());
        links.set_peers([(3, 30), (4, 41)].into_iter());
        assert!(!links.is_up(4));
    }
}
