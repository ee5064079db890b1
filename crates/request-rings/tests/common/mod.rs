//! What the simulator tests share: a world with a ring server on node 0, clients joining it
//! through the grant's bytes (as the service's socket carries them), and a server loop that
//! answers each request with a transformation of it (so a response is never the request
//! read back).

#![allow(dead_code)]

use mu_fabric::NodeId;
use mu_fabric_sim::{SimConfig, SimFabric, SimWorld};
use mu_request_rings::{
    ClientLayout, ClientSlot, Geometry, Grant, Reply, RingClient, RingServer, ServerConfig,
};

pub const SERVER: NodeId = NodeId(0);

/// Settings for the tests: four clients, crash checks on every poll, no idle timeout.
pub fn config() -> ServerConfig {
    ServerConfig {
        clients_max: 4,
        instance: 0x5eed,
        crash_check_interval_ns: 0,
        ..ServerConfig::default()
    }
}

/// Settings whose requests are larger than an inline write: a frame lands chunk by chunk
/// from the client's staging region.
pub fn big_config() -> ServerConfig {
    ServerConfig {
        geometry: Geometry {
            slots_per_client: 4,
            request_slot_bytes: 1024,
            response_slot_bytes: 1024,
        },
        ..config()
    }
}

/// A request taken by the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    pub slot: ClientSlot,
    pub seq: u64,
    pub payload: Vec<u8>,
}

/// The server's answer to `payload`.
pub fn answer(payload: &[u8]) -> Vec<u8> {
    let mut out = b"re:".to_vec();
    out.extend(payload.iter().rev());
    out
}

pub struct Rig {
    pub world: SimWorld,
    pub server: RingServer<SimFabric>,
    /// Every request the server took, in order.
    pub taken: Vec<Taken>,
}

impl Rig {
    pub fn new(seed: u64, config: ServerConfig) -> Rig {
        Rig::in_world(SimWorld::new(SimConfig::default(), seed), config)
    }

    pub fn in_world(world: SimWorld, config: ServerConfig) -> Rig {
        Rig::on_node(world, SERVER, config)
    }

    /// A server on node `node` of `world`.
    pub fn on_node(world: SimWorld, node: NodeId, config: ServerConfig) -> Rig {
        let server = RingServer::new(world.node(node), config).expect("server");
        Rig { world, server, taken: Vec::new() }
    }

    /// Prepares node `node`'s client from the server's layout, admits it, and connects it
    /// with the grant's bytes: the order of the handshake (the server binds when it admits,
    /// and finds the client's regions registered).
    pub fn join(&mut self, node: u16) -> RingClient<SimFabric> {
        let fabric = self.world.node(NodeId(node));
        let layout = ClientLayout::from_bytes(&self.server.client_layout().to_bytes());
        let prepared =
            RingClient::prepare(fabric, &layout.expect("layout bytes")).expect("prepare");
        let grant = self.server.admit(NodeId(node)).expect("admit");
        let grant = Grant::from_bytes(&grant.to_bytes()).expect("grant bytes");
        prepared.connect(&grant).map_err(|(_, e)| e).expect("connect")
    }

    /// One server poll: takes new requests and, when `respond`, answers each at once.
    pub fn serve(&mut self, respond: bool) -> usize {
        let now = self.world.now_ns();
        let mut fresh = Vec::new();
        self.server.poll(now, &mut |slot, seq, payload| {
            fresh.push(Taken { slot, seq, payload: payload.to_vec() })
        });
        if respond {
            for t in &fresh {
                self.server.respond(t.slot, t.seq, &answer(&t.payload)).expect("respond");
            }
        }
        let n = fresh.len();
        self.taken.extend(fresh);
        n
    }
}

/// One client poll: the data responses found, as (seq, bytes); panics on a rejection.
pub fn replies(client: &mut RingClient<SimFabric>) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    client
        .poll(|seq, reply| match reply {
            Reply::Data(d) => out.push((seq, d.to_vec())),
            Reply::Rejected(r) => panic!("request {seq} rejected: {r:?}"),
        })
        .expect("client poll");
    out
}

/// Sends `payload` and runs the world, serving, until its answer comes; returns the virtual
/// nanoseconds it took. Panics after `limit_ns`.
pub fn round_trip(rig: &mut Rig, client: &mut RingClient<SimFabric>, payload: &[u8]) -> u64 {
    let start = rig.world.now_ns();
    let seq = client.send(payload).expect("send");
    loop {
        rig.serve(true);
        let got = replies(client);
        assert!(got.len() <= 1, "more answers than requests: {got:?}");
        if let Some((s, bytes)) = got.into_iter().next() {
            assert_eq!(s, seq, "an answer to a request not outstanding");
            assert_eq!(bytes, answer(payload));
            return rig.world.now_ns() - start;
        }
        assert!(rig.world.now_ns() - start < 10_000_000, "no answer within 10 ms of virtual time");
        rig.world.advance(20);
    }
}

/// splitmix64: a seeded generator for the tests.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}
