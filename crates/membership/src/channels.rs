//! The membership's channels on a fabric with four channels per pair of nodes.
//!
//! [`crate::layout`] puts the boards and the consensus on channels 4 to 7 (the replica's
//! planes use 0 to 3, so that both could share a fabric node), but the shm fabric offers four
//! channels per pair (`mu_fabric_shm::layout::MAX_CHANNELS`). A membership group on shm runs
//! in a run directory of its own, where channels 0 to 3 are free: [`Shifted`] moves every
//! channel the drivers name down by a fixed amount, and is the fabric the runtime gives them
//! there. (The lasting fix belongs to the layout or to shm: channels below 4, or eight per
//! pair; this adaptor then goes.)

use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, FabricError, NodeId, PermError, PostError,
    QpState, RegionId, RegionScope, WorkRequest,
};

/// `inner` with every channel moved down by `shift` (see the module docs).
#[derive(Clone)]
pub struct Shifted<F: Fabric> {
    inner: F,
    shift: u8,
}

/// The shift that puts the layout's channels (4 to 7) on 0 to 3.
pub const SHIFT_TO_FOUR_CHANNELS: u8 = 4;

impl<F: Fabric> Shifted<F> {
    pub fn new(inner: F, shift: u8) -> Shifted<F> {
        Shifted { inner, shift }
    }

    pub fn inner(&self) -> &F {
        &self.inner
    }
}

fn shift(conn: ConnId, by: u8) -> Result<ConnId, FabricError> {
    match conn.channel.checked_sub(by) {
        Some(channel) => Ok(ConnId::new(conn.peer, channel)),
        None => Err(FabricError::UnknownConnection(conn, "below the shifted channels")),
    }
}

impl<F: Fabric> Fabric for Shifted<F> {
    type Region = F::Region;
    type Endpoint = ShiftedEndpoint<F::Endpoint>;

    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }

    fn node(&self) -> NodeId {
        self.inner.node()
    }

    fn max_inline_bytes(&self) -> usize {
        self.inner.max_inline_bytes()
    }

    fn register_region(
        &self,
        id: RegionId,
        len_bytes: usize,
        access: Access,
    ) -> Result<F::Region, FabricError> {
        self.inner.register_region(id, len_bytes, access)
    }

    fn scope_region(&self, region: RegionId, scope: RegionScope) -> Result<(), FabricError> {
        let scope = match scope {
            RegionScope::Only(conn) => RegionScope::Only(shift(conn, self.shift)?),
            other => other,
        };
        self.inner.scope_region(region, scope)
    }

    fn endpoint(&self, depth: usize) -> Result<Self::Endpoint, FabricError> {
        Ok(ShiftedEndpoint { inner: self.inner.endpoint(depth)?, shift: self.shift })
    }

    fn qp_state(&self, conn: ConnId) -> Result<QpState, FabricError> {
        self.inner.qp_state(shift(conn, self.shift)?)
    }

    fn qp_access(&self, conn: ConnId) -> Result<Access, FabricError> {
        self.inner.qp_access(shift(conn, self.shift)?)
    }

    fn doorbell(&self) -> u64 {
        self.inner.doorbell()
    }

    fn wait_doorbell(&self, seen: u64, timeout_ns: u64) -> u64 {
        self.inner.wait_doorbell(seen, timeout_ns)
    }

    fn ring_doorbell(&self, peer: NodeId) {
        self.inner.ring_doorbell(peer)
    }

    fn crash_notified(&self, peer: NodeId) -> bool {
        self.inner.crash_notified(peer)
    }

    fn modify_qp(&self, conn: ConnId, to: QpState, access: Access) -> Result<(), FabricError> {
        self.inner.modify_qp(shift(conn, self.shift)?, to, access)
    }

    fn set_access_fast(&self, conn: ConnId, access: Access) -> Result<(), PermError> {
        self.inner.set_access_fast(shift(conn, self.shift)?, access)
    }

    fn set_access_slow(&self, conn: ConnId, access: Access) -> Result<(), FabricError> {
        self.inner.set_access_slow(shift(conn, self.shift)?, access)
    }

    fn connect(&self, conn: ConnId, access: Access) -> Result<(), FabricError> {
        self.inner.connect(shift(conn, self.shift)?, access)
    }
}

/// The endpoint of a [`Shifted`] fabric.
pub struct ShiftedEndpoint<E: Endpoint> {
    inner: E,
    shift: u8,
}

impl<E: Endpoint> Endpoint for ShiftedEndpoint<E> {
    fn attach(&mut self, conn: ConnId) -> Result<(), FabricError> {
        self.inner.attach(shift(conn, self.shift)?)
    }

    fn post(&mut self, conn: ConnId, wr: &WorkRequest<'_>) -> Result<(), PostError> {
        // A channel below the shift was never attached, here or anywhere.
        let shifted = shift(conn, self.shift).map_err(|_| PostError::NotAttached(conn))?;
        self.inner.post(shifted, wr)
    }

    fn poll(&mut self, out: &mut [Completion]) -> usize {
        self.inner.poll(out)
    }
}
