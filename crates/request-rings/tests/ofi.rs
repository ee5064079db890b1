//! The client path on libfabric: the `tcp;ofi_rxm` and `sockets` providers over loopback, each
//! node on an address of its own, every node in this process. A server thread serves clients in threads,
//! and a client that does not use the library writes into another's ring: the fabric denies
//! it, since each ring is scoped to its own client's connection.

mod threaded;

use mu_fabric::{
    Access, ConnId, Endpoint, Fabric, NodeId, RemoteAddr, Source, Status, WorkRequest,
};
use mu_fabric_ofi::{NodeAddr, OfiConfig, OfiFabric, PORTS_PER_NODE};
use mu_request_rings::Grant;
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Instant;
use threaded::{round_trips, Ask, ServerThread, WAIT};

const CLUSTER: u64 = 0x7269_6e67_6f66;
const NODES: u16 = 5;

/// A block of free ports, one stride per node; each call of this process takes another.
fn port_block() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let first = std::process::id() % 1_000 * 10;
    let stride = u32::from(NODES * PORTS_PER_NODE) * 97;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let base = (first + n * stride) % 30_000 + 10_000;
        let base = base as u16;
        let free =
            (0..NODES * PORTS_PER_NODE).all(|p| TcpListener::bind(("127.0.0.1", base + p)).is_ok());
        if free {
            return base;
        }
    }
}

fn node(provider: &str, base: u16, n: u16) -> OfiFabric {
    let nodes: BTreeMap<NodeId, NodeAddr> = (0..NODES)
        .map(|i| {
            let host = std::net::Ipv4Addr::new(127, 0, 0, 1 + i as u8).to_string();
            (NodeId(i), NodeAddr { host, base_port: base + i * PORTS_PER_NODE })
        })
        .collect();
    let mut config = OfiConfig::new(provider, CLUSTER, NodeId(n), nodes);
    config.connect_timeout_ms = 5_000;
    OfiFabric::open(config).unwrap_or_else(|e| panic!("open node {n}: {e}"))
}

#[test]
fn clients_are_served_and_kept_out_of_each_others_rings_rxm() {
    served_and_kept_apart("tcp;ofi_rxm");
}

#[test]
fn clients_are_served_and_kept_out_of_each_others_rings_sockets() {
    served_and_kept_apart("sockets");
}

fn served_and_kept_apart(provider: &'static str) {
    let base = port_block();
    let node = |n| node(provider, base, n);
    let server = ServerThread::start(node(0));
    let clients: Vec<_> = (1..=2u16)
        .map(|n| {
            let (asks, layout, fabric) = (server.asks.clone(), server.layout, node(n));
            std::thread::spawn(move || {
                let mut client = ServerThread::join(&asks, &layout, fabric, n);
                round_trips(&mut client, n, 0..200);
                client
            })
        })
        .collect();
    let mut clients: Vec<_> = clients.into_iter().map(|c| c.join().expect("client")).collect();

    // Node 3 registers its response ring and is admitted, then writes into client 1's ring.
    let intruder = node(3);
    let g = server.layout.geometry;
    intruder
        .register_region(server.layout.response_region, g.response_ring_bytes(), Access::WRITE)
        .expect("response ring");
    let (tx, rx) = mpsc::channel();
    server.asks.send(Ask::Join { node: 3, grant: tx }).expect("server");
    let bytes = rx.recv_timeout(WAIT).expect("no grant").expect("admit");
    let grant = Grant::from_bytes(&bytes).expect("grant");
    let conn = ConnId::new(grant.server_node, grant.channel);
    intruder.connect(conn, Access::WRITE).expect("connect");
    let mut endpoint = intruder.endpoint(16).expect("endpoint");
    endpoint.attach(conn).expect("attach");
    let victim = clients[0].grant();
    let at = RemoteAddr { region: victim.request_region, offset: g.request_offset(200) };
    endpoint.post(conn, &WorkRequest::write(1, Source::Inline(&[0x5a; 64]), at)).expect("post");
    let deadline = Instant::now() + WAIT;
    let mut out = [mu_fabric::Completion::EMPTY; 1];
    while endpoint.poll(&mut out) == 0 {
        assert!(Instant::now() < deadline, "the intruder's write never completed");
        std::thread::yield_now();
    }
    assert_eq!(out[0].status, Status::RemoteAccessDenied, "another client's ring is out of reach");

    // The clients go on as before.
    for (n, client) in (1..=2u16).zip(clients.iter_mut()) {
        round_trips(client, n, 200..300);
    }
}
