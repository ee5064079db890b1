//! The nodes and links of a group's second plane (uKharon-KV's data nodes, the leased-reads
//! replicas): member `m`'s node there is `m + offset`, on the uKharon cluster's world; it is
//! stopped and resumed with its member's process, and a fault on a link between two members
//! strikes both planes. Cut and delayed links, and lease requests,
//! last one fault step ([`Transient`]).

use crate::ukharon::cluster::UkCluster;
use mu_fabric::NodeId;
use mu_fabric_sim::{LinkDelay, SimWorld};

/// Member `member`'s node on the second plane.
pub fn plane_node(member: u16, offset: u16) -> NodeId {
    NodeId(member + offset)
}

/// Stops or resumes a running process's `node` on the second plane as its membership node is
/// (`paused`): the two share the process.
pub fn follow_pause(world: &SimWorld, node: NodeId, paused: bool) -> Result<(), String> {
    if paused == world.is_paused(node) {
        return Ok(());
    }
    let result = match paused {
        true => world.pause(node),
        false => world.resume(node),
    };
    result.map_err(|e| e.to_string())
}

/// Cuts (or heals) the second plane's link between members `a` and `b`.
pub fn set_plane_partition(uk: &UkCluster, offset: u16, a: u16, b: u16, cut: bool) {
    let (a, b) = (plane_node(a, offset), plane_node(b, offset));
    match cut {
        true => uk.world.partition(a, b),
        false => uk.world.heal(a, b),
    }
}

/// Removes every delay and partition between the second plane's nodes of `members`.
pub fn heal_plane_links(uk: &UkCluster, offset: u16, members: &[u16]) {
    for (i, &a) in members.iter().enumerate() {
        for &b in &members[i + 1..] {
            let (a, b) = (plane_node(a, offset), plane_node(b, offset));
            uk.world.heal(a, b);
            uk.world.set_link_delay(a, b, LinkDelay::default());
        }
    }
}

/// The faults that last until the next fault step.
#[derive(Debug, Default)]
pub struct Transient {
    /// Links (membership node ids) cut or delayed.
    pub links: Vec<(u16, u16)>,
    /// Members that asked for another lease.
    pub leases: Vec<u16>,
}

impl Transient {
    /// Gives the members that asked for another lease the configured one back, and heals the
    /// links cut or delayed, on both planes where both ends are members (`is_member`).
    pub fn heal(&mut self, uk: &mut UkCluster, offset: u16, is_member: impl Fn(u16) -> bool) {
        let lease_ns = uk.config.lease_ns;
        for n in std::mem::take(&mut self.leases) {
            if let Some(core) = uk.nodes.get_mut(&n).and_then(|n| n.core.as_mut()) {
                core.ask_lease(lease_ns);
            }
        }
        for (a, b) in std::mem::take(&mut self.links) {
            uk.world.heal(NodeId(a), NodeId(b));
            uk.world.set_link_delay(NodeId(a), NodeId(b), LinkDelay::default());
            if is_member(a) && is_member(b) {
                set_plane_partition(uk, offset, a, b, false);
                let (pa, pb) = (plane_node(a, offset), plane_node(b, offset));
                uk.world.set_link_delay(pa, pb, LinkDelay::default());
            }
        }
    }
}
