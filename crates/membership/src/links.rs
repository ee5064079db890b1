//! The connections a driver initiates, one per peer and channel: set up, marked down when an
//! operation on them fails, set up again after `reconnect_ns`. The sides peers initiate into
//! this node are bound once and again whenever a peer's connection needs it (a restarted peer
//! binds anew).

use mu_fabric::{Access, ConnId, Endpoint, Fabric, NodeId};

/// One initiated connection's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Up,
    /// Down; try again at this time.
    Down {
        retry_at_ns: u64,
    },
}

/// The connections to a set of peers on one channel function.
pub struct Links {
    channel: fn(NodeId, NodeId) -> u8,
    /// What peers may do through the sides they initiate into this node.
    incoming: Access,
    me: NodeId,
    peers: Vec<NodeId>,
    states: Vec<State>,
    reconnect_ns: u64,
}

impl Links {
    pub fn new(
        me: NodeId,
        peers: Vec<NodeId>,
        channel: fn(NodeId, NodeId) -> u8,
        incoming: Access,
        reconnect_ns: u64,
    ) -> Links {
        let states = vec![State::Down { retry_at_ns: 0 }; peers.len()];
        Links { channel, incoming, me, peers, states, reconnect_ns }
    }

    /// The connection this node initiates to `peer`.
    pub fn conn(&self, peer: NodeId) -> ConnId {
        ConnId::new(peer, (self.channel)(self.me, peer))
    }

    /// Whether the connection to the `i`th peer is up.
    pub fn is_up(&self, i: usize) -> bool {
        self.states[i] == State::Up
    }

    pub fn peers(&self) -> &[NodeId] {
        &self.peers
    }

    /// The index of `peer`.
    pub fn index_of(&self, peer: NodeId) -> Option<usize> {
        self.peers.iter().position(|&p| p == peer)
    }

    /// An operation on the connection to the `i`th peer failed: it is down until set up again.
    pub fn down(&mut self, i: usize, now_ns: u64) {
        if self.states[i] == State::Up {
            self.states[i] = State::Down { retry_at_ns: now_ns + self.reconnect_ns };
        }
    }

    /// Sets up the connections that are down and due, both this node's initiating side and
    /// the side the peer initiates into this node; returns the indices that came up.
    pub fn upkeep<F: Fabric>(
        &mut self,
        fabric: &F,
        endpoint: &mut F::Endpoint,
        now_ns: u64,
    ) -> Vec<usize> {
        let mut up = Vec::new();
        for i in 0..self.peers.len() {
            // A peer whose process died: both sides are bound to that incarnation, and
            // whatever its next incarnation initiates into this node would be dropped until
            // they are bound again. Binding fails while it is dead, so this rebinds to the
            // next one as soon as it runs.
            if self.states[i] == State::Up && fabric.crash_notified(self.peers[i]) {
                self.states[i] = State::Down { retry_at_ns: now_ns };
            }
            let State::Down { retry_at_ns } = self.states[i] else { continue };
            if now_ns < retry_at_ns {
                continue;
            }
            let peer = self.peers[i];
            let incoming = ConnId::new(peer, (self.channel)(peer, self.me));
            let outgoing = self.conn(peer);
            let ok = fabric.connect(incoming, self.incoming).is_ok()
                && fabric.connect(outgoing, Access::NONE).is_ok()
                && endpoint.attach(outgoing).is_ok();
            self.states[i] = if ok {
                up.push(i);
                State::Up
            } else {
                State::Down { retry_at_ns: now_ns + self.reconnect_ns }
            };
        }
        up
    }
}
