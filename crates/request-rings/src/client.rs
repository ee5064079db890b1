//! The client: writes requests into its own ring on the server with one-sided writes, and finds
//! the responses the server writes into its response ring.

use crate::config::Geometry;
use crate::error::{ClientError, OpenError, SendError};
use crate::frame::{self, Checks, Expect, Kind, Rejection, HEADER_BYTES};
use crate::grant::{ClientLayout, ClientSlot, Grant};
use crate::post::{Content, FramePoster, PostFailure, Target};
use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, LocalRegion, QpState, RegionId, RegionScope,
    RemoteAddr, Status,
};

/// What the server answered to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// The application's response.
    Data(&'a [u8]),
    /// The server refused the request (only a client that bypassed [`RingClient::send`]'s
    /// checks gets one).
    Rejected(Rejection),
}

/// The client side of the client path. See the crate docs.
pub struct RingClient<F: Fabric> {
    fabric: F,
    grant: Grant,
    conn: ConnId,
    /// Whether `conn` names a server this node connected to, or tried to: a later grant
    /// revokes it first.
    has_server: bool,
    /// Whether `conn` is connected for the current grant (not after a failed `reopen`).
    connected: bool,
    poster: FramePoster<F>,
    responses: F::Region,
    /// The staging region's id and length as registered (a later grant must fit them).
    staging: (RegionId, usize),
    /// Per ring slot: the request sent from it and not answered yet.
    in_flight: Vec<Option<u64>>,
    /// Per ring slot: a copy of that request's payload, for [`RingClient::unanswered`].
    sent: Vec<Vec<u8>>,
    next_seq: u64,
    failed: Option<Status>,
    completions: Vec<Completion>,
    reply: Vec<u8>,
}

impl<F: Fabric> RingClient<F> {
    /// Registers what a client needs on this node, laid out as the server says (its
    /// [`crate::RingServer::client_layout`], sent through the caller's own channel), without
    /// connecting: the response ring (remotely writable, through the server's connection only)
    /// and a staging area (not remotely accessible). A client does this before it asks to be
    /// admitted, since some backends (ofi, verbs) read a peer's regions when they bind and the
    /// server binds when it admits; [`PreparedClient::connect`] then takes the grant.
    pub fn prepare(fabric: F, layout: &ClientLayout) -> Result<PreparedClient<F>, OpenError> {
        layout.geometry.check().map_err(OpenError::Geometry)?;
        let g = layout.geometry;
        let register = |region: RegionId, len: usize, access: Access| {
            fabric
                .register_region(region, len, access)
                .map_err(|source| OpenError::Register { region, source })
        };
        let responses = register(layout.response_region, g.response_ring_bytes(), Access::WRITE)?;
        fabric
            .scope_region(layout.response_region, RegionScope::Nobody)
            .map_err(|source| OpenError::Register { region: layout.response_region, source })?;
        let staging = register(layout.staging_region, g.request_ring_bytes(), Access::NONE)?;
        let endpoint =
            fabric.endpoint(2 * g.slots_per_client as usize + 8).map_err(OpenError::Endpoint)?;
        let max_inline = fabric.max_inline_bytes();
        let staging_at = (staging.id(), staging.len_bytes());
        let slots = g.slots_per_client as usize;
        let unadmitted = unadmitted(fabric.node(), layout);
        Ok(PreparedClient {
            client: Box::new(RingClient {
                poster: FramePoster::new(
                    endpoint,
                    staging,
                    max_inline,
                    g.request_slot_bytes as usize,
                ),
                conn: ConnId::new(unadmitted.server_node, unadmitted.channel),
                has_server: false,
                connected: false,
                staging: staging_at,
                in_flight: vec![None; slots],
                sent: vec![Vec::new(); slots],
                next_seq: 0,
                failed: None,
                completions: vec![Completion::EMPTY; 16],
                reply: Vec::with_capacity(g.response_payload_bytes_max()),
                grant: unadmitted,
                responses,
                fabric,
            }),
        })
    }

    /// Moves to a new grant (after a release, or from another server after a leader change)
    /// on the regions already registered: first takes the old server's write access away
    /// through a revocation barrier and clears the response ring, so nothing of the old
    /// admission can land in the new one. Requests not answered are forgotten: take them with
    /// [`RingClient::unanswered`] first and send them again.
    pub fn reopen(&mut self, grant: &Grant) -> Result<(), OpenError> {
        check_grant_for(&self.fabric, grant)?;
        let g = grant.geometry;
        for ((region, have), (named, needed)) in [
            (
                (self.responses.id(), self.responses.len_bytes()),
                (grant.response_region, g.response_ring_bytes()),
            ),
            (self.staging, (grant.client_staging_region, g.request_ring_bytes())),
        ] {
            if named != region {
                return Err(OpenError::RegionDiffers { grant: named, registered: region });
            }
            if needed > have {
                return Err(OpenError::DoesNotFit { region, needed, registered: have });
            }
        }
        if self.has_server {
            let old = self.conn;
            self.fabric
                .modify_qp(old, QpState::Reset, Access::NONE)
                .map_err(|source| OpenError::Connect { conn: old, source })?;
        }
        let zeros = vec![0u8; self.responses.len_bytes()];
        self.responses
            .write(0, &zeros)
            .map_err(|source| OpenError::Register { region: self.responses.id(), source })?;
        self.conn = ConnId::new(grant.server_node, grant.channel);
        self.has_server = true;
        self.grant = *grant;
        self.start(grant)
    }

    /// Connects to the grant's server and starts its sequence from 0.
    fn start(&mut self, grant: &Grant) -> Result<(), OpenError> {
        self.connected = false;
        let conn = self.conn;
        // Only the grant's server reaches the response ring (the old one's connection, if any,
        // was revoked before): another node this one talks to cannot write answers into it.
        let scope = RegionScope::Only(conn);
        self.fabric
            .connect(conn, Access::WRITE)
            .and_then(|()| self.fabric.scope_region(self.responses.id(), scope))
            .and_then(|()| self.poster.endpoint.attach(conn))
            .map_err(|source| OpenError::Connect { conn, source })?;
        let slots = grant.geometry.slots_per_client as usize;
        self.in_flight = vec![None; slots];
        self.sent = (0..slots)
            .map(|_| Vec::with_capacity(grant.geometry.request_payload_bytes_max()))
            .collect();
        self.next_seq = 0;
        self.failed = None;
        self.connected = true;
        Ok(())
    }

    /// Takes the server's write access to this node away (a revocation barrier). The caller
    /// tells the server it leaves through its own channel ([`crate::RingServer::leave`]).
    pub fn close(self) -> Result<(), mu_fabric::FabricError> {
        self.fabric.modify_qp(self.conn, QpState::Reset, Access::NONE)
    }

    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    pub fn fabric(&self) -> &F {
        &self.fabric
    }

    pub fn geometry(&self) -> Geometry {
        self.grant.geometry
    }

    /// The largest payload [`RingClient::send`] takes.
    pub fn payload_bytes_max(&self) -> usize {
        self.grant.geometry.request_payload_bytes_max()
    }

    /// Requests sent and not answered yet.
    pub fn outstanding(&self) -> usize {
        self.in_flight.iter().filter(|s| s.is_some()).count()
    }

    /// Whether a request can be sent now (a ring slot is free).
    pub fn can_send(&self) -> bool {
        self.in_flight[self.grant.geometry.slot_of(self.next_seq)].is_none()
    }

    /// The requests sent and not answered yet, oldest first, as (seq, payload): what to send
    /// again after joining another server.
    pub fn unanswered(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.seqs_in_order().map(|(at, seq)| (seq, self.sent[at].as_slice()))
    }

    /// (ring slot, seq) of the requests in flight, oldest first: they lie within the last
    /// `slots_per_client` sequence numbers.
    fn seqs_in_order(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        let n = self.in_flight.len() as u64;
        (0..n).filter_map(move |k| {
            let at = self.grant.geometry.slot_of(self.next_seq + k);
            self.in_flight[at].map(|seq| (at, seq))
        })
    }

    /// Writes `payload` as the next request into this client's ring on the server and returns
    /// its transport sequence number. Up to `slots_per_client` requests may be outstanding.
    pub fn send(&mut self, payload: &[u8]) -> Result<u64, SendError> {
        if !self.connected {
            return Err(SendError::NotConnected);
        }
        if let Some(status) = self.failed {
            return Err(SendError::Disconnected(status));
        }
        let g = self.grant.geometry;
        let max = g.request_payload_bytes_max();
        if payload.len() > max {
            return Err(SendError::TooLarge { len: payload.len(), max });
        }
        let seq = self.next_seq;
        let at = g.slot_of(seq);
        if self.in_flight[at].is_some() {
            return Err(SendError::WindowFull { slots: g.slots_per_client });
        }
        let target = Target {
            conn: self.conn,
            wr_id: seq,
            remote: RemoteAddr { region: self.grant.request_region, offset: g.request_offset(seq) },
            staging_offset: g.request_offset(seq),
        };
        let content =
            Content { kind: Kind::Request, generation: self.grant.slot.generation, seq, payload };
        self.poster.post(&target, &content).map_err(|f| match f {
            PostFailure::Post(e) => SendError::Post(e),
            PostFailure::Staging(e) => SendError::Staging(e),
        })?;
        self.in_flight[at] = Some(seq);
        self.sent[at].clear();
        self.sent[at].extend_from_slice(payload);
        self.next_seq += 1;
        Ok(seq)
    }

    /// Hands every response that has arrived whole to `on_response` as (seq, reply), oldest
    /// first, and returns how many. Once a write of this client failed (released, or the
    /// server gone), returns [`ClientError::Disconnected`] after the last response found.
    pub fn poll(
        &mut self,
        mut on_response: impl FnMut(u64, Reply<'_>),
    ) -> Result<usize, ClientError> {
        self.reap_completions();
        let g = self.grant.geometry;
        let mut delivered = 0;
        // Oldest first, as `seqs_in_order`, without holding a borrow of `self`.
        for k in 0..u64::from(g.slots_per_client) {
            let at = g.slot_of(self.next_seq + k);
            let Some(seq) = self.in_flight[at] else { continue };
            if let Some(kind) = self.read_reply(&g, seq) {
                self.in_flight[at] = None;
                delivered += 1;
                let reply = match kind {
                    Kind::Rejected => Reply::Rejected(Rejection::from_bytes(&self.reply)),
                    _ => Reply::Data(&self.reply),
                };
                on_response(seq, reply);
            }
        }
        match self.failed {
            Some(status) if delivered == 0 => Err(ClientError::Disconnected(status)),
            _ => Ok(delivered),
        }
    }

    /// The reply to `seq` into `self.reply` if it has landed whole; its kind.
    fn read_reply(&mut self, g: &Geometry, seq: u64) -> Option<Kind> {
        let offset = g.response_offset(seq) as usize;
        let mut bytes = [0u8; HEADER_BYTES];
        self.responses.read(offset, &mut bytes).ok()?;
        let header = frame::read_header(&bytes).ok()?;
        let expect = Expect {
            kinds: &[Kind::Response, Kind::Rejected],
            generation: self.grant.slot.generation,
            seq,
            payload_bytes_max: g.response_payload_bytes_max(),
        };
        frame::check_header(&header, &expect).ok()?;
        self.reply.resize(header.len as usize, 0);
        self.responses.read(offset + HEADER_BYTES, &mut self.reply).ok()?;
        frame::payload_matches(&header, &self.reply, Checks::Full).then_some(header.kind)
    }

    fn reap_completions(&mut self) {
        loop {
            let n = self.poster.endpoint.poll(&mut self.completions);
            if let Some(c) = self.completions[..n].iter().find(|c| !c.status.is_success()) {
                self.failed.get_or_insert(c.status);
            }
            if n < self.completions.len() {
                return;
            }
        }
    }
}

/// What a prepared client holds in place of a grant until it is admitted: its own node on both
/// ends (no connection is ever made to it) and generation 0, which no admission has.
fn unadmitted(node: mu_fabric::NodeId, layout: &ClientLayout) -> Grant {
    Grant {
        instance: 0,
        slot: ClientSlot { index: 0, generation: 0 },
        server_node: node,
        client_node: node,
        channel: 0,
        request_region: RegionId(0),
        response_region: layout.response_region,
        client_staging_region: layout.staging_region,
        geometry: layout.geometry,
    }
}

/// A client's regions registered, before its admission: see [`RingClient::prepare`].
pub struct PreparedClient<F: Fabric> {
    /// Boxed: it travels back in a failed connection's error.
    client: Box<RingClient<F>>,
}

impl<F: Fabric> PreparedClient<F> {
    /// Connects to the server of `grant` (the answer to this node's admission). On failure the
    /// prepared regions come back with the error, for another grant.
    pub fn connect(self, grant: &Grant) -> Result<RingClient<F>, (PreparedClient<F>, OpenError)> {
        let mut client = self.client;
        match client.reopen(grant) {
            Ok(()) => Ok(*client),
            Err(e) => Err((PreparedClient { client }, e)),
        }
    }

    pub fn fabric(&self) -> &F {
        &self.client.fabric
    }
}

fn check_grant_for<F: Fabric>(fabric: &F, grant: &Grant) -> Result<(), OpenError> {
    if grant.client_node != fabric.node() {
        return Err(OpenError::NotForThisNode { grant: grant.client_node, node: fabric.node() });
    }
    grant.geometry.check().map_err(OpenError::Geometry)
}
