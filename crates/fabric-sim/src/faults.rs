//! Fault injection: crashes, restarts, pauses, partitions, link delays, held writers, and a view
//! of what is in flight.

use crate::config::LinkDelay;
use crate::node::Node;
use crate::trace::{TraceEvent, TraceKind};
use crate::world::{link_key, lock, Event, SimWorld};
use mu_fabric::{ConnId, FabricError, NodeId, OpKind};

/// An operation that has been posted and has not finished landing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// The connection, as seen from the initiator.
    pub conn: ConnId,
    pub wr_id: u64,
    pub kind: OpKind,
    pub len_bytes: u64,
    /// Bytes that have landed at the target so far (a write lands chunk by chunk).
    pub landed_bytes: u64,
    /// Whether its next landing is parked by [`SimWorld::hold_outgoing`].
    pub parked: bool,
}

fn no_such_node(node: NodeId) -> FabricError {
    FabricError::Config(format!("node {node} does not exist in this simulated world"))
}

impl SimWorld {
    /// Crashes `node`. Its memory stays (tests may still read it through region handles), but it
    /// never acknowledges again: operations that reach it fail with `PeerUnreachable` once the
    /// retry timeout since their posting has passed, moving the initiator's side to the error
    /// state. Its CPU is gone: its posts fail with `PostError::Paused` and its control-plane
    /// calls fail with `FabricError::PeerUnreachable` naming itself. Operations it posted before
    /// the crash have left its NIC and still land (a dead leader's last writes may arrive).
    pub fn crash(&self, node: NodeId) -> Result<(), FabricError> {
        let mut w = lock(&self.shared);
        let now = w.now_ns;
        let n = w.nodes.get_mut(&node).ok_or_else(|| no_such_node(node))?;
        n.crashed = true;
        n.crashed_at_ns = now;
        w.note(TraceEvent::new(TraceKind::Crash, node));
        Ok(())
    }

    /// Whether `node` has crashed (and not restarted since).
    pub fn is_crashed(&self, node: NodeId) -> bool {
        lock(&self.shared).nodes.get(&node).is_some_and(|n| n.crashed)
    }

    /// Restarts `node` as a new incarnation: no regions (register them again, zeroed), every
    /// connection side in reset, no endpoints; regions and endpoints handles of the old
    /// incarnation are dead, and operations it had in flight vanish. Peers' connections bound to
    /// the old incarnation fail with `PeerUnreachable` until they are cycled through reset.
    pub fn restart(&self, node: NodeId) -> Result<(), FabricError> {
        let mut w = lock(&self.shared);
        let old = w.nodes.get(&node).ok_or_else(|| no_such_node(node))?;
        let incarnation = old.incarnation + 1;
        let mut fresh = Node::new(incarnation);
        fresh.busy_until_ns = old.busy_until_ns;
        w.nodes.insert(node, fresh);
        w.endpoints.retain(|_, cq| cq.node != node);
        w.ops.retain(|_, op| op.from != node);
        let ops = std::mem::take(&mut w.ops);
        w.parked.retain(|id| ops.contains_key(id));
        w.ops = ops;
        w.held.remove(&node);
        w.note(TraceEvent::new(TraceKind::Restart, node).detail(u64::from(incarnation)));
        Ok(())
    }

    /// Stops `node`'s CPU: its posts fail with `PostError::Paused` until [`SimWorld::resume`].
    /// What it already posted is up to its NIC and still lands and completes; its memory still
    /// takes remote operations. (The simulator has no threads of its own: a runtime built on it
    /// should also stop running the node's work while [`SimWorld::is_paused`].)
    pub fn pause(&self, node: NodeId) -> Result<(), FabricError> {
        let mut w = lock(&self.shared);
        w.nodes.get_mut(&node).ok_or_else(|| no_such_node(node))?.paused = true;
        w.note(TraceEvent::new(TraceKind::Pause, node));
        Ok(())
    }

    /// Lets a paused node run again.
    pub fn resume(&self, node: NodeId) -> Result<(), FabricError> {
        let mut w = lock(&self.shared);
        w.nodes.get_mut(&node).ok_or_else(|| no_such_node(node))?.paused = false;
        w.note(TraceEvent::new(TraceKind::Resume, node));
        Ok(())
    }

    /// Whether `node` is paused.
    pub fn is_paused(&self, node: NodeId) -> bool {
        lock(&self.shared).nodes.get(&node).is_some_and(|n| n.paused)
    }

    /// Cuts the link between `a` and `b` (both directions; the nodes need not exist yet).
    /// Operations between them that try to land while it is cut fail with `PeerUnreachable`
    /// after the retry timeout; a write cut in the middle keeps the chunks that landed before.
    pub fn partition(&self, a: NodeId, b: NodeId) {
        let mut w = lock(&self.shared);
        w.partitions.insert(link_key(a, b));
        w.note(TraceEvent::new(TraceKind::Partition, a).peer(b));
    }

    /// Restores the link between `a` and `b`. Connections broken by the partition stay in the
    /// error state until cycled.
    pub fn heal(&self, a: NodeId, b: NodeId) {
        let mut w = lock(&self.shared);
        w.partitions.remove(&link_key(a, b));
        w.note(TraceEvent::new(TraceKind::Heal, a).peer(b));
    }

    /// Whether the link between `a` and `b` is cut.
    pub fn is_partitioned(&self, a: NodeId, b: NodeId) -> bool {
        lock(&self.shared).is_partitioned(a, b)
    }

    /// Sets the extra delay and jitter of the link between `a` and `b` (both directions), for
    /// operations posted from now on. `LinkDelay::default()` removes it.
    pub fn set_link_delay(&self, a: NodeId, b: NodeId, delay: LinkDelay) {
        let mut w = lock(&self.shared);
        if delay == LinkDelay::default() {
            w.links.remove(&link_key(a, b));
        } else {
            w.links.insert(link_key(a, b), delay);
        }
        w.note(
            TraceEvent::new(TraceKind::LinkDelay, a)
                .peer(b)
                .bytes(delay.extra_ns)
                .detail(delay.jitter_ns),
        );
    }

    /// The extra delay of the link between `a` and `b`.
    pub fn link_delay(&self, a: NodeId, b: NodeId) -> LinkDelay {
        lock(&self.shared).links.get(&link_key(a, b)).copied().unwrap_or_default()
    }

    /// Freezes `node`'s operations where they are, as if its NIC stalled mid-transfer: landings
    /// that come due are parked (a write may be left half landed) until
    /// [`SimWorld::release_outgoing`]. Parked landings are not scheduled events, so
    /// [`SimWorld::run_until_idle`] returns while they wait. On release each lands only if the
    /// target still allows it then — this is how a test stops a writer in the middle of a write
    /// and checks that a revocation done meanwhile is a barrier.
    pub fn hold_outgoing(&self, node: NodeId) {
        let mut w = lock(&self.shared);
        w.held.insert(node);
        w.note(TraceEvent::new(TraceKind::Hold, node).detail(1));
    }

    /// Lets `node`'s parked landings go on, from now, in the order they were parked.
    pub fn release_outgoing(&self, node: NodeId) {
        let mut w = lock(&self.shared);
        w.held.remove(&node);
        let parked = std::mem::take(&mut w.parked);
        let mut still = Vec::new();
        let now = w.now_ns;
        for id in parked {
            if w.ops.get(&id).is_some_and(|op| op.from == node) {
                w.schedule(now, Event::Land(id));
            } else {
                still.push(id);
            }
        }
        w.parked = still;
        w.note(TraceEvent::new(TraceKind::Hold, node).detail(0));
    }

    /// Whether `node`'s operations are held.
    pub fn is_held(&self, node: NodeId) -> bool {
        lock(&self.shared).held.contains(&node)
    }

    /// The operations `node` has posted that have not finished landing, oldest first per
    /// connection (connections in id order).
    pub fn in_flight(&self, node: NodeId) -> Vec<InFlight> {
        let w = lock(&self.shared);
        let Some(n) = w.nodes.get(&node) else { return Vec::new() };
        let mut out = Vec::new();
        for (conn, side) in &n.conns {
            for id in &side.flight {
                if let Some(op) = w.ops.get(id) {
                    out.push(InFlight {
                        conn: *conn,
                        wr_id: op.wr_id,
                        kind: op.body.kind(),
                        len_bytes: op.body.len_bytes(),
                        landed_bytes: op.landed_bytes,
                        parked: w.parked.contains(id),
                    });
                }
            }
        }
        out
    }
}
