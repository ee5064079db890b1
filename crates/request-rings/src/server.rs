//! The server: one request ring per admitted client on a fabric node of its own, polled; the
//! responses written into each client's response ring.

use crate::config::ServerConfig;
use crate::error::{AdmitError, ReleaseError, RespondError, ServerError};
use crate::frame::{Kind, Rejection};
use crate::grant::{ClientLayout, ClientSlot, Grant};
use crate::post::{Content, FramePoster, PostFailure, Target};
use crate::session::{Found, Session};
use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, FabricError, LocalRegion, NodeId, QpState,
    RegionId, RegionScope, RemoteAddr, Status,
};

/// Completions name a grant by its slot (high 16 bits) and the low 48 bits of the grant count.
const WR_GRANT_MASK: u64 = (1 << 48) - 1;

/// Why the server released a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseReason {
    /// [`RingServer::release`] or [`RingServer::leave`].
    Requested,
    /// The fabric reported the client's node crashed.
    CrashNotified,
    /// Nothing outstanding and nothing new for the configured idle time.
    Idle,
    /// A response write to the client failed: its node is gone, or it took the server's
    /// access away (it joined another server).
    ResponseFailed(Status),
}

/// A client the server released: the slot no longer answers to its generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released {
    pub slot: ClientSlot,
    pub client: NodeId,
    pub reason: ReleaseReason,
}

/// Counts since the server started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    pub admitted: u64,
    pub released: u64,
    /// Requests handed to the caller.
    pub delivered: u64,
    pub responded: u64,
    /// Requests refused with a rejection frame (an intact header announcing an oversized
    /// payload).
    pub rejected_oversized: u64,
    /// Intact frames of another generation or kind found where a client's next request was
    /// expected (each distinct frame counted once): a client writing with an old grant, or into
    /// a ring not its own.
    pub refused_frames: u64,
}

enum SlotState {
    Free,
    Admitted(Session),
    /// Released; the revocation of the client's access has not held yet.
    Revoking {
        client: NodeId,
    },
}

/// The server side of the client path. See the crate docs.
pub struct RingServer<F: Fabric> {
    fabric: F,
    config: ServerConfig,
    poster: FramePoster<F>,
    rings: Vec<F::Region>,
    slots: Vec<SlotState>,
    grants_issued: u64,
    zeros: Vec<u8>,
    payload: Vec<u8>,
    completions: Vec<Completion>,
    released: Vec<Released>,
    stats: ServerStats,
}

/// The generation of the `grant_no`-th grant of server `instance`: distinct for distinct
/// counts of one server (an odd multiplier and splitmix64's finalizer are both one-to-one),
/// and never 0, which zeroed memory holds.
fn generation_of(instance: u64, grant_no: u64) -> u64 {
    let mut z = instance.wrapping_add(grant_no.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl<F: Fabric> RingServer<F> {
    /// Starts a server on `fabric`, a node that serves nothing else: it registers one request
    /// ring per client slot (remotely writable) and its staging area (not remotely accessible),
    /// and must register nothing else remotely writable (a connection's write flag covers every
    /// such region of the node).
    pub fn new(fabric: F, config: ServerConfig) -> Result<RingServer<F>, ServerError> {
        config.check()?;
        let g = config.geometry;
        let clients = usize::from(config.clients_max);
        let register = |region: RegionId, len: usize, access: Access| {
            fabric
                .register_region(region, len, access)
                .map_err(|source| ServerError::Register { region, source })
        };
        let mut rings = Vec::with_capacity(clients);
        for i in 0..config.clients_max {
            let region = RegionId(config.ring_region_base.0 + i);
            rings.push(register(region, g.request_ring_bytes(), Access::WRITE)?);
            // A ring no client holds is reachable through no connection.
            fabric
                .scope_region(region, RegionScope::Nobody)
                .map_err(|source| ServerError::Register { region, source })?;
        }
        let staging =
            register(config.staging_region, clients * g.response_ring_bytes(), Access::NONE)?;
        let depth = 2 * clients * g.slots_per_client as usize + 16;
        let endpoint = fabric.endpoint(depth).map_err(ServerError::Endpoint)?;
        let max_inline = fabric.max_inline_bytes();
        Ok(RingServer {
            poster: FramePoster::new(endpoint, staging, max_inline, g.response_slot_bytes as usize),
            slots: (0..clients).map(|_| SlotState::Free).collect(),
            grants_issued: 0,
            zeros: vec![0; g.request_ring_bytes()],
            payload: Vec::with_capacity(g.request_payload_bytes_max()),
            completions: vec![Completion::EMPTY; 64],
            released: Vec::new(),
            stats: ServerStats::default(),
            rings,
            fabric,
            config,
        })
    }

    /// The server's fabric node.
    pub fn fabric(&self) -> &F {
        &self.fabric
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// What a client registers before it asks to be admitted ([`crate::RingClient::prepare`]).
    pub fn client_layout(&self) -> ClientLayout {
        ClientLayout {
            response_region: self.config.client_response_region,
            staging_region: self.config.client_staging_region,
            geometry: self.config.geometry,
        }
    }

    pub fn stats(&self) -> ServerStats {
        self.stats
    }

    /// The clients admitted now.
    pub fn clients(&self) -> impl Iterator<Item = (ClientSlot, NodeId)> + '_ {
        self.slots.iter().filter_map(|s| match s {
            SlotState::Admitted(s) => Some((s.slot, s.client)),
            _ => None,
        })
    }

    /// Slots released whose revocation has not held yet (given to nobody meanwhile).
    pub fn revocations_pending(&self) -> usize {
        self.slots.iter().filter(|s| matches!(s, SlotState::Revoking { .. })).count()
    }

    /// The request ring of slot `index`, for diagnostics and tests.
    pub fn ring_region(&self, index: u16) -> Option<&F::Region> {
        self.rings.get(usize::from(index))
    }

    /// The clients released since the last call, oldest first.
    pub fn drain_released(&mut self) -> Vec<Released> {
        std::mem::take(&mut self.released)
    }

    fn conn(&self, client: NodeId) -> ConnId {
        ConnId::new(client, self.config.channel)
    }

    fn ring_id(&self, index: usize) -> RegionId {
        RegionId(self.config.ring_region_base.0 + index as u16)
    }

    /// Admits `client` (a fabric node already started): picks a free slot, connects the
    /// server's side of their connection with write access, and returns the grant the caller
    /// hands the client through its own channel.
    pub fn admit(&mut self, client: NodeId) -> Result<Grant, AdmitError> {
        if client == self.fabric.node() {
            return Err(AdmitError::ClientIsServer(client));
        }
        for state in &self.slots {
            match state {
                SlotState::Admitted(s) if s.client == client => {
                    return Err(AdmitError::AlreadyAdmitted { client, slot: s.slot });
                }
                SlotState::Revoking { client: c } if *c == client => {
                    return Err(AdmitError::StillReleasing { client });
                }
                _ => {}
            }
        }
        let index = self
            .slots
            .iter()
            .position(|s| matches!(s, SlotState::Free))
            .ok_or(AdmitError::SlotsFull { clients_max: self.config.clients_max })?;
        let conn = self.conn(client);
        let ring = self.ring_id(index);
        // The client's connection reaches its own ring and nothing else of this node.
        let connected = self.fabric.connect(conn, Access::WRITE);
        let scoped =
            connected.and_then(|()| self.fabric.scope_region(ring, RegionScope::Only(conn)));
        if let Err(source) = scoped.and_then(|()| self.poster.endpoint.attach(conn)) {
            // Leave nothing half open: the side goes back to reset and the ring to nobody.
            let _ = self.fabric.modify_qp(conn, QpState::Reset, Access::NONE);
            let _ = self.fabric.scope_region(ring, RegionScope::Nobody);
            return Err(AdmitError::Fabric { client, source });
        }
        self.grants_issued += 1;
        let mut generation = generation_of(self.config.instance, self.grants_issued);
        while generation == 0 {
            self.grants_issued += 1;
            generation = generation_of(self.config.instance, self.grants_issued);
        }
        let slot = ClientSlot { index: index as u16, generation };
        let g = self.config.geometry;
        self.slots[index] =
            SlotState::Admitted(Session::new(client, slot, self.grants_issued, g.slots_per_client));
        self.stats.admitted += 1;
        Ok(Grant {
            instance: self.config.instance,
            slot,
            server_node: self.fabric.node(),
            client_node: client,
            channel: self.config.channel,
            request_region: self.ring_id(index),
            response_region: self.config.client_response_region,
            client_staging_region: self.config.client_staging_region,
            geometry: g,
        })
    }

    /// Releases a client: takes its write access away through a revocation barrier (nothing it
    /// writes lands afterwards; its writes complete with an error), clears its ring, and frees
    /// the slot for another admission with a new generation. Requests of the slot not answered
    /// yet are dropped: [`RingServer::respond`] refuses them from now on.
    pub fn release(&mut self, slot: ClientSlot) -> Result<(), ReleaseError> {
        match self.slots.get(usize::from(slot.index)) {
            Some(SlotState::Admitted(s)) if s.slot == slot => {
                self.release_index(usize::from(slot.index), ReleaseReason::Requested)
            }
            _ => Err(ReleaseError::NotAdmitted(slot)),
        }
    }

    /// Releases the client holding `grant`, as it asks when it leaves: refused for a grant of
    /// another server, or of an admission already over.
    pub fn leave(&mut self, grant: &Grant) -> Result<(), ReleaseError> {
        if grant.instance != self.config.instance {
            return Err(ReleaseError::OtherServer {
                found: grant.instance,
                expected: self.config.instance,
            });
        }
        self.release(grant.slot)
    }

    fn release_index(&mut self, index: usize, reason: ReleaseReason) -> Result<(), ReleaseError> {
        let SlotState::Admitted(s) = &self.slots[index] else { return Ok(()) };
        let (slot, client) = (s.slot, s.client);
        self.slots[index] = SlotState::Revoking { client };
        self.released.push(Released { slot, client, reason });
        self.stats.released += 1;
        self.revoke(index)
    }

    /// Moves the server's side of a released client's connection to reset: a revocation
    /// barrier on every backend. Only then is the ring cleared and the slot free.
    fn revoke(&mut self, index: usize) -> Result<(), ReleaseError> {
        let SlotState::Revoking { client } = self.slots[index] else { return Ok(()) };
        let index16 = index as u16;
        let failed = |source: FabricError| ReleaseError::Revocation { index: index16, source };
        self.fabric.modify_qp(self.conn(client), QpState::Reset, Access::NONE).map_err(failed)?;
        // Behind the barrier: the ring is no connection's until its next admission.
        self.fabric.scope_region(self.ring_id(index), RegionScope::Nobody).map_err(failed)?;
        self.rings[index].write(0, &self.zeros).map_err(failed)?;
        self.slots[index] = SlotState::Free;
        Ok(())
    }

    /// Answers request `seq` of `slot` with `payload`, written into the client's response
    /// ring. Each request taken by [`RingServer::poll`] is answered once; a payload too large
    /// is refused and the request still waits for its answer.
    pub fn respond(
        &mut self,
        slot: ClientSlot,
        seq: u64,
        payload: &[u8],
    ) -> Result<(), RespondError> {
        let g = self.config.geometry;
        let index = usize::from(slot.index);
        let Some(SlotState::Admitted(s)) = self.slots.get(index) else {
            return Err(RespondError::StaleSlot(slot));
        };
        if s.slot != slot {
            return Err(RespondError::StaleSlot(slot));
        }
        if s.pending[g.slot_of(seq)] != Some(seq) {
            return Err(RespondError::NotPending { index: slot.index, seq });
        }
        let max = g.response_payload_bytes_max();
        if payload.len() > max {
            return Err(RespondError::TooLarge { len: payload.len(), max });
        }
        let target = self.response_target(index, s.client, s.grant_no, seq);
        let content = Content { kind: Kind::Response, generation: slot.generation, seq, payload };
        self.poster.post(&target, &content).map_err(|f| match f {
            PostFailure::Post(e) => RespondError::Post(e),
            PostFailure::Staging(e) => RespondError::Staging(e),
        })?;
        if let SlotState::Admitted(s) = &mut self.slots[index] {
            s.answer(&g, seq);
        }
        self.stats.responded += 1;
        Ok(())
    }

    fn response_target(&self, index: usize, client: NodeId, grant_no: u64, seq: u64) -> Target {
        let g = self.config.geometry;
        let staging_slot = index * g.slots_per_client as usize + g.slot_of(seq);
        Target {
            conn: self.conn(client),
            wr_id: (index as u64) << 48 | (grant_no & WR_GRANT_MASK),
            remote: RemoteAddr {
                region: self.config.client_response_region,
                offset: g.response_offset(seq),
            },
            staging_offset: (staging_slot * g.response_slot_bytes as usize) as u64,
        }
    }

    /// One round: reaps failed response writes, retries revocations that have not held, and
    /// takes every admitted client's new requests in order, handing each to `on_request` as
    /// (slot, transport seq, payload). Releases clients the fabric reports crashed and, with an
    /// idle timeout, quiet ones. `now_ns` is the caller's clock (any monotonic nanoseconds).
    /// Returns how many requests were handed over.
    pub fn poll(
        &mut self,
        now_ns: u64,
        on_request: &mut impl FnMut(ClientSlot, u64, &[u8]),
    ) -> usize {
        self.reap_completions();
        for index in 0..self.slots.len() {
            if matches!(self.slots[index], SlotState::Revoking { .. }) {
                let _ = self.revoke(index);
            }
        }
        let mut delivered = 0;
        for index in 0..self.slots.len() {
            delivered += self.poll_slot(index, now_ns, on_request);
        }
        delivered
    }

    fn reap_completions(&mut self) {
        loop {
            let n = self.poster.endpoint.poll(&mut self.completions);
            for i in 0..n {
                let c = self.completions[i];
                if c.status.is_success() {
                    continue;
                }
                let index = (c.wr_id >> 48) as usize;
                let current = match self.slots.get(index) {
                    Some(SlotState::Admitted(s)) => {
                        s.grant_no & WR_GRANT_MASK == c.wr_id & WR_GRANT_MASK
                    }
                    _ => false,
                };
                if current {
                    let _ = self.release_index(index, ReleaseReason::ResponseFailed(c.status));
                }
            }
            if n < self.completions.len() {
                return;
            }
        }
    }

    fn poll_slot(
        &mut self,
        index: usize,
        now_ns: u64,
        on_request: &mut impl FnMut(ClientSlot, u64, &[u8]),
    ) -> usize {
        let g = self.config.geometry;
        let SlotState::Admitted(s) = &mut self.slots[index] else { return 0 };
        s.last_activity_ns.get_or_insert(now_ns);
        let mut delivered = 0;
        let mut oversized = None;
        for _ in 0..g.slots_per_client {
            let ring = &self.rings[index];
            let found = s.next_request(
                ring,
                &g,
                self.config.checks,
                &mut self.payload,
                &mut self.stats.refused_frames,
            );
            match found {
                Found::Nothing => break,
                Found::Request { seq, len } => {
                    s.last_activity_ns = Some(now_ns);
                    delivered += 1;
                    on_request(s.slot, seq, &self.payload[..len]);
                }
                Found::Oversized { seq, len } => {
                    s.last_activity_ns = Some(now_ns);
                    oversized = Some((s.slot, s.client, s.grant_no, seq, len));
                    break;
                }
            }
        }
        self.stats.delivered += delivered as u64;
        if let Some((slot, client, grant_no, seq, len)) = oversized {
            let max = g.request_payload_bytes_max() as u32;
            self.reject(index, slot, client, grant_no, seq, Rejection::Oversized { len, max });
        } else if delivered == 0 {
            self.check_quiet_client(index, now_ns);
        }
        delivered
    }

    /// Refuses request `seq` with a rejection frame; a failed post leaves the client to the
    /// failure's completion or to the idle timeout.
    fn reject(
        &mut self,
        index: usize,
        slot: ClientSlot,
        client: NodeId,
        grant_no: u64,
        seq: u64,
        why: Rejection,
    ) {
        let target = self.response_target(index, client, grant_no, seq);
        let payload = why.to_bytes();
        let content =
            Content { kind: Kind::Rejected, generation: slot.generation, seq, payload: &payload };
        let _ = self.poster.post(&target, &content);
        self.stats.rejected_oversized += 1;
    }

    /// Releases a client that sent nothing this round if the fabric reports it crashed, or if
    /// it has been idle for the configured time.
    fn check_quiet_client(&mut self, index: usize, now_ns: u64) {
        let SlotState::Admitted(s) = &mut self.slots[index] else { return };
        let client = s.client;
        let reason = if s.crash_check_due(now_ns, self.config.crash_check_interval_ns)
            && self.fabric.crash_notified(client)
        {
            ReleaseReason::CrashNotified
        } else if s.idle(now_ns, self.config.idle_timeout_ns) {
            ReleaseReason::Idle
        } else {
            return;
        };
        let _ = self.release_index(index, reason);
    }
}

#[cfg(test)]
mod tests {
    use super::generation_of;

    #[test]
    fn generations_of_one_server_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for n in 1..100_000 {
            assert!(seen.insert(generation_of(42, n)), "grant {n} repeats a generation");
        }
        assert_ne!(generation_of(42, 1), generation_of(43, 1));
    }
}
