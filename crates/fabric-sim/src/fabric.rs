//! The handles that implement the fabric API on top of the world.

use crate::node::Node;
use crate::world::{lock, Shared, SimWorld};
use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, FabricError, LocalRegion, NodeId, PermError,
    PostError, QpState, RegionId, RegionScope, WorkRequest,
};
use std::fmt;

/// One simulated node's control plane. Cheap to clone; every clone is the same node.
///
/// The handle names the node, not one incarnation of it: after [`SimWorld::restart`] it works on
/// the new incarnation (while regions and endpoints of the old one are dead).
#[derive(Clone)]
pub struct SimFabric {
    shared: Shared,
    node: NodeId,
}

impl SimFabric {
    pub(crate) fn new(shared: Shared, node: NodeId) -> SimFabric {
        SimFabric { shared, node }
    }

    /// The world this node lives in.
    pub fn world(&self) -> SimWorld {
        SimWorld { shared: self.shared.clone() }
    }
}

impl SimWorld {
    /// The node `id`, created (with no regions and every connection in reset) on first use.
    pub fn node(&self, id: NodeId) -> SimFabric {
        let mut w = lock(&self.shared);
        w.nodes.entry(id).or_insert_with(|| Node::new(0));
        SimFabric::new(self.shared.clone(), id)
    }
}

impl fmt::Debug for SimFabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFabric").field("node", &self.node).finish()
    }
}

impl Fabric for SimFabric {
    type Region = SimRegion;
    type Endpoint = SimEndpoint;

    fn backend_name(&self) -> &'static str {
        "sim"
    }

    fn node(&self) -> NodeId {
        self.node
    }

    fn max_inline_bytes(&self) -> usize {
        lock(&self.shared).config.max_inline_bytes
    }

    fn register_region(
        &self,
        id: RegionId,
        len_bytes: usize,
        access: Access,
    ) -> Result<SimRegion, FabricError> {
        let incarnation = lock(&self.shared).register_region(self.node, id, len_bytes, access)?;
        Ok(SimRegion { shared: self.shared.clone(), node: self.node, incarnation, id, len_bytes })
    }

    fn scope_region(&self, region: RegionId, scope: RegionScope) -> Result<(), FabricError> {
        lock(&self.shared).scope_region(self.node, region, scope)
    }

    fn endpoint(&self, depth: usize) -> Result<SimEndpoint, FabricError> {
        let id = lock(&self.shared).open_endpoint(self.node, depth)?;
        Ok(SimEndpoint { shared: self.shared.clone(), node: self.node, id })
    }

    fn qp_state(&self, conn: ConnId) -> Result<QpState, FabricError> {
        lock(&self.shared).qp_side(self.node, conn).map(|(state, _)| state)
    }

    fn qp_access(&self, conn: ConnId) -> Result<Access, FabricError> {
        lock(&self.shared).qp_side(self.node, conn).map(|(_, access)| access)
    }

    /// A crashed node is notified [`crate::SimConfig::crash_notice_ns`] after its crash (at
    /// once by default, like the shared-memory fabric's death flag); a paused or partitioned
    /// one is not: those are what timeouts are for.
    fn crash_notified(&self, peer: NodeId) -> bool {
        let w = lock(&self.shared);
        let notice_ns = w.config.crash_notice_ns;
        w.nodes
            .get(&peer)
            .is_some_and(|n| n.crashed && w.now_ns >= n.crashed_at_ns.saturating_add(notice_ns))
    }

    fn modify_qp(&self, conn: ConnId, to: QpState, access: Access) -> Result<(), FabricError> {
        lock(&self.shared).modify_qp(self.node, conn, to, access)
    }

    fn set_access_fast(&self, conn: ConnId, access: Access) -> Result<(), PermError> {
        lock(&self.shared).set_access_fast(self.node, conn, access)
    }

    fn set_access_slow(&self, conn: ConnId, access: Access) -> Result<(), FabricError> {
        lock(&self.shared).set_access_slow(self.node, conn, access)
    }
}

/// A region registered on a simulated node. Its bytes live in the world; local reads and writes
/// happen at once, at the current virtual time, so a reader between two world events sees exactly
/// what has landed so far. Dead (every call fails with `UnknownRegion`) once its node restarts.
#[derive(Clone)]
pub struct SimRegion {
    shared: Shared,
    node: NodeId,
    incarnation: u32,
    id: RegionId,
    len_bytes: usize,
}

impl fmt::Debug for SimRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimRegion")
            .field("node", &self.node)
            .field("incarnation", &self.incarnation)
            .field("id", &self.id)
            .field("len_bytes", &self.len_bytes)
            .finish()
    }
}

impl LocalRegion for SimRegion {
    fn id(&self) -> RegionId {
        self.id
    }

    fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), FabricError> {
        lock(&self.shared).region_read(self.node, self.incarnation, self.id, offset, out)
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<(), FabricError> {
        lock(&self.shared).region_write(self.node, self.incarnation, self.id, offset, data, false)
    }

    fn load_u64(&self, offset: usize) -> Result<u64, FabricError> {
        lock(&self.shared).region_load_u64(self.node, self.incarnation, self.id, offset)
    }

    fn store_u64(&self, offset: usize, value: u64) -> Result<(), FabricError> {
        let bytes = value.to_le_bytes();
        lock(&self.shared).region_write(self.node, self.incarnation, self.id, offset, &bytes, true)
    }

    fn compare_swap_u64(
        &self,
        offset: usize,
        expected: u64,
        desired: u64,
    ) -> Result<u64, FabricError> {
        // Under the world's lock, as remote compare-and-swaps land: atomic with them.
        let mut world = lock(&self.shared);
        let old = world.region_load_u64(self.node, self.incarnation, self.id, offset)?;
        if old == expected {
            let bytes = desired.to_le_bytes();
            world.region_write(self.node, self.incarnation, self.id, offset, &bytes, true)?;
        }
        Ok(old)
    }
}

/// A completion queue of a simulated node and the connections attached to it. Dropping it frees
/// its connections for another endpoint; completions still due to it are then dropped.
pub struct SimEndpoint {
    shared: Shared,
    node: NodeId,
    id: u64,
}

impl fmt::Debug for SimEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimEndpoint").field("node", &self.node).field("id", &self.id).finish()
    }
}

impl SimEndpoint {
    /// The node this endpoint belongs to.
    pub fn node(&self) -> NodeId {
        self.node
    }
}

impl Endpoint for SimEndpoint {
    fn attach(&mut self, conn: ConnId) -> Result<(), FabricError> {
        lock(&self.shared).attach(self.id, conn)
    }

    fn post(&mut self, conn: ConnId, wr: &WorkRequest<'_>) -> Result<(), PostError> {
        lock(&self.shared).post(self.id, conn, wr)
    }

    fn poll(&mut self, out: &mut [Completion]) -> usize {
        lock(&self.shared).poll(self.id, out)
    }
}

impl Drop for SimEndpoint {
    fn drop(&mut self) {
        lock(&self.shared).close_endpoint(self.id);
    }
}
