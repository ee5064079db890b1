//! The key-value service end to end in one process: three replicas on the shared-memory fabric,
//! each serving its Unix socket, talked to through the client library and through raw
//! connections that send what the library never would.
//!
//! Each test starts its own cluster in a fresh private run directory and stops it at the end,
//! even if the test fails. Clusters run one at a time: on a small machine two clusters' polling
//! threads at once could starve a failure detector into a leader change a test did not ask for.
//! Waits are polls with generous deadlines, never fixed sleeps.

mod common;

use common::{poll, run_dir, stop_replica, Raw, PATIENCE};
use mu_fabric::NodeId;
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_kv::{Op, Reply, Request, KEY_BYTES_MAX};
use mu_replica::{Mode, Replica, ReplicaConfig};
use mu_service::wire::{ClientMessage, ServerMessage, FRAME_BYTES_MAX, WIRE_VERSION};
use mu_service::{App, Client, ClientError, Endpoint, ReplicaReport, Server, SharedMachine};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const REPLICAS: u16 = 3;
/// Log slots and their size: small (a test writes little), and room for the values below.
const SLOTS: u64 = 1024;
const SLOT_BYTES: u32 = 1024;
/// The failure detector's read period: four times the default, so that a replica whose threads
/// a loaded machine leaves unscheduled for a few tens of milliseconds is not taken for failed
/// (these tests are not about failover, and a leader change would only blur what they check).
const READ_PERIOD_NS: u64 = 4_000_000;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Three replicas, each with its server, in a private run directory; stopped and removed when
/// dropped.
struct Cluster {
    cluster_id: u64,
    dir: PathBuf,
    servers: Vec<Server>,
    replicas: Vec<Arc<Replica>>,
    _turn: MutexGuard<'static, ()>,
}

impl Cluster {
    fn start(tag: &str, cluster_id: u64) -> Cluster {
        Cluster::start_serving(tag, cluster_id, None)
    }

    /// A cluster whose replicas also listen for clients on `tcp` (`"127.0.0.1:0"`: a port of
    /// the system's choice each).
    fn start_serving(tag: &str, cluster_id: u64, tcp: Option<&str>) -> Cluster {
        Cluster::start_app(tag, cluster_id, tcp, App::Kv)
    }

    /// A cluster whose replicas also serve clients over the fabric (request rings, each on a
    /// node of its own in `clients-<id>` of the run directory).
    fn start_fabric(tag: &str, cluster_id: u64, app: App) -> Cluster {
        let mut cluster = Cluster::start_app(tag, cluster_id, None, app);
        for (id, server) in cluster.servers.iter_mut().enumerate() {
            let dir = cluster.dir.join(format!("clients-{id}"));
            let node = ShmFabric::create(ShmConfig::new(&dir, cluster_id, NodeId(0)))
                .expect("the fabric path's node");
            server.attach_fabric(node, &dir).expect("the fabric path");
        }
        cluster
    }

    /// A cluster replicating `app`.
    fn start_app(tag: &str, cluster_id: u64, tcp: Option<&str>, app: App) -> Cluster {
        // A test that failed while holding the turn poisons it; the next one still runs.
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let dir = run_dir(&format!("mu-svc-{tag}"));
        let mut cluster =
            Cluster { cluster_id, dir, servers: Vec::new(), replicas: Vec::new(), _turn: turn };
        let ids: Vec<NodeId> = (0..REPLICAS).map(NodeId).collect();
        for id in 0..REPLICAS {
            let mut config = ReplicaConfig::new(NodeId(id), ids.clone());
            config.slots_count = SLOTS;
            config.slot_bytes = SLOT_BYTES;
            config.detector.read_period_ns = READ_PERIOD_NS;
            let shm = ShmConfig::new(&cluster.dir, cluster_id, NodeId(id))
                .with_protocol(mu_replica::protocol_tag());
            let fabric = ShmFabric::create(shm).expect("fabric");
            let machine = SharedMachine::for_app(app);
            let replica = Arc::new(
                Replica::start_with_state(config, fabric, Mode::Direct, machine.clone())
                    .expect("replica starts"),
            );
            let socket = cluster.socket(id);
            let server =
                Server::start(cluster_id, replica.clone(), machine, (&socket, tcp), Instant::now())
                    .expect("server starts");
            cluster.replicas.push(replica);
            cluster.servers.push(server);
        }
        cluster
    }

    fn socket(&self, id: u16) -> PathBuf {
        self.dir.join(format!("kv-{id}.sock"))
    }

    fn endpoints(&self) -> Vec<(u16, PathBuf)> {
        (0..REPLICAS).map(|id| (id, self.socket(id))).collect()
    }

    /// Every replica's TCP address for clients (started with `start_serving`).
    fn tcp_endpoints(&self) -> Vec<(u16, Endpoint)> {
        let address = |s: &Server| s.tcp_address().expect("a TCP listener").to_string();
        (0..REPLICAS).map(|id| (id, Endpoint::Tcp(address(&self.servers[id as usize])))).collect()
    }

    fn client(&self) -> Client {
        let mut client = Client::new(self.cluster_id, self.endpoints()).expect("a client");
        client.set_timeout(PATIENCE);
        client
    }

    /// Every replica's status report.
    fn reports(&self) -> Result<Vec<ReplicaReport>, String> {
        let mut client = self.client();
        (0..REPLICAS).map(|id| client.status(id)).collect()
    }

    /// Waits until every replica answers and names the same leader; returns it.
    fn wait_leader(&self) -> u16 {
        poll("every replica to name the same leader", || {
            let reports = self.reports().ok()?;
            let leader = reports[0].leader?;
            reports.iter().all(|r| r.leader == Some(leader)).then_some(leader)
        })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The servers first: they stop accepting and their threads end once their clients
        // have gone (the tests' clients are dropped before the cluster).
        self.servers.clear();
        for replica in self.replicas.drain(..) {
            stop_replica(replica);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Raw<UnixStream> {
    /// A connection to replica `id` of `cluster`, greeted as a client of that cluster.
    fn connect(cluster: &Cluster, id: u16) -> Raw<UnixStream> {
        let mut raw = Raw::connect_bare(&cluster.socket(id));
        let hello =
            ClientMessage::Hello { cluster_id: cluster.cluster_id, wire_version: WIRE_VERSION };
        assert_eq!(raw.ask_message(&hello), ServerMessage::Welcome);
        raw
    }

    /// A connection that has said nothing yet.
    fn connect_bare(path: &Path) -> Raw<UnixStream> {
        let stream = UnixStream::connect(path).expect("connect");
        // A server that never answers fails the test instead of hanging it.
        stream.set_read_timeout(Some(PATIENCE)).expect("read timeout");
        Raw::new(stream)
    }
}

fn kv(client: u64, seq: u64, op: Op) -> ClientMessage {
    ClientMessage::Kv(Request { client, seq, op }.encode().expect("a valid request"))
}

fn put(key: &str, value: &str) -> Op {
    Op::Put { key: key.into(), value: value.into() }
}

/// A client's write and read still work: the cluster serves.
fn still_serves(cluster: &Cluster, key: &str) {
    let mut client = cluster.client();
    client.put(key.as_bytes(), b"fine").expect("put after bad input");
    assert_eq!(client.get(key.as_bytes()).expect("get after bad input"), Some(b"fine".to_vec()));
}

fn refused_because(answer: ServerMessage, why: &str) {
    match answer {
        ServerMessage::Refused(text) => assert!(text.contains(why), "refused with {text:?}"),
        other => panic!("expected a refusal ({why}), got {other:?}"),
    }
}

#[test]
fn operations_give_the_right_answers_and_clients_follow_the_leader() {
    let cluster = Cluster::start("ops", 0x7376_6301);
    let leader = cluster.wait_leader();
    let followers: Vec<u16> = (0..REPLICAS).filter(|&id| id != leader).collect();

    // A follower answers with a hint naming the leader.
    let mut raw = Raw::connect(&cluster, followers[0]);
    assert_eq!(
        raw.ask_message(&kv(77, 1, put("hint", "x"))),
        ServerMessage::NotLeader { leader: Some(leader) }
    );

    // A client that tries a follower first ends at the leader.
    let mut endpoints = cluster.endpoints();
    endpoints.sort_by_key(|&(id, _)| if id == followers[0] { 0 } else { 1 + u32::from(id) });
    assert_eq!(endpoints[0].0, followers[0]);
    let mut client = Client::new(cluster.cluster_id, endpoints).expect("a client");
    client.set_timeout(PATIENCE);
    client.put(b"a", b"1").expect("put");
    assert!(client.resends >= 1, "the client never followed a hint");
    assert_eq!(client.target(), cluster.wait_leader(), "the client did not move to the leader");

    assert_eq!(client.get(b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(client.get(b"missing").unwrap(), None);
    client.put(b"a", b"2").expect("overwrite");
    assert_eq!(client.get(b"a").unwrap(), Some(b"2".to_vec()));
    client.put(b"empty", b"").expect("an empty value");
    assert_eq!(client.get(b"empty").unwrap(), Some(Vec::new()));

    assert!(client.cas(b"a", Some(b"2"), b"3").unwrap(), "cas with the right value");
    assert!(!client.cas(b"a", Some(b"2"), b"4").unwrap(), "cas with a stale value");
    assert_eq!(client.get(b"a").unwrap(), Some(b"3".to_vec()));
    assert!(client.cas(b"new", None, b"x").unwrap(), "cas of an absent key");
    assert!(!client.cas(b"new", None, b"y").unwrap(), "cas expecting absent, key present");
    assert!(!client.cas(b"nothing", Some(b"x"), b"y").unwrap(), "cas of an absent key");
    assert_eq!(client.get(b"new").unwrap(), Some(b"x".to_vec()));
    assert_eq!(client.get(b"nothing").unwrap(), None);

    assert!(client.delete(b"a").unwrap(), "delete of a present key");
    assert!(!client.delete(b"a").unwrap(), "delete of an absent key");
    assert_eq!(client.get(b"a").unwrap(), None);

    // A second client sees what the first wrote.
    let mut other = cluster.client();
    assert_eq!(other.get(b"new").unwrap(), Some(b"x".to_vec()));
}

#[test]
fn bad_input_is_refused_and_the_cluster_keeps_serving() {
    let cluster = Cluster::start("bad", 0x7376_6302);
    let leader = cluster.wait_leader();
    let mut raw = Raw::connect(&cluster, leader);

    // Bytes that are no request: refused, and the connection goes on.
    refused_because(raw.ask_message(&ClientMessage::Kv(vec![1, 2, 3])), "malformed");
    still_serves(&cluster, "after-malformed");
    // A request with a byte too many: one request has one encoding.
    let mut request = Request { client: 5, seq: 1, op: put("k", "v") }.encode().unwrap();
    request.push(0);
    refused_because(raw.ask_message(&ClientMessage::Kv(request)), "malformed");
    // A message type nobody knows, and an empty message.
    refused_because(raw.ask(&[9, 1, 2]), "unknown message type");
    refused_because(raw.ask(&[]), "empty message");
    still_serves(&cluster, "after-unknown");
    // The same connection still answers a good request.
    match raw.ask_message(&ClientMessage::Status) {
        ServerMessage::Status(json) => {
            let report = ReplicaReport::from_json(&json).expect("a report");
            assert_eq!(report.id, leader);
        }
        other => panic!("expected a status report, got {other:?}"),
    }

    // A key over the limit never leaves the client.
    let mut client = cluster.client();
    let long_key = vec![b'k'; KEY_BYTES_MAX + 1];
    match client.put(&long_key, b"v") {
        Err(ClientError::Invalid(why)) => assert!(why.contains("key"), "{why}"),
        other => panic!("expected an invalid request, got {other:?}"),
    }
    // A value that does not fit in a log slot is refused by the replica, before the log.
    match client.put(b"big", &vec![b'v'; SLOT_BYTES as usize * 2]) {
        // The size named is the request's in the log, not the value's, and it says so.
        Err(ClientError::Refused(why)) => {
            assert!(why.contains("its key, any values and a header"), "{why}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    still_serves(&cluster, "after-too-large");

    // A frame longer than any message: refused, then the connection is closed (its body would
    // still be on the way).
    let mut huge = Raw::connect(&cluster, leader);
    huge.stream.write_all(&((FRAME_BYTES_MAX + 1) as u32).to_le_bytes()).expect("send a length");
    refused_because(huge.answer().expect("an answer"), "larger than allowed");
    assert_eq!(huge.answer(), None, "the connection stayed open after an oversized frame");
    still_serves(&cluster, "after-oversized");

    // A connection cut in the middle of a frame harms nobody else.
    let mut cut = UnixStream::connect(cluster.socket(leader)).expect("connect");
    cut.write_all(&[100, 0, 0, 0, 1, 2]).expect("half a frame");
    drop(cut);
    still_serves(&cluster, "after-cut");

    // Followers refuse bad input the same way.
    let follower = (0..REPLICAS).find(|&id| id != leader).unwrap();
    let mut raw_follower = Raw::connect(&cluster, follower);
    refused_because(raw_follower.ask_message(&ClientMessage::Kv(vec![0xff])), "malformed");
}

/// A client of another cluster, or of another version of the client protocol, or one that does
/// not introduce itself, is refused at once with a message naming the problem, and its
/// connection closed: it can neither read nor write this cluster's data.
#[test]
fn clients_of_another_cluster_cannot_attach() {
    let cluster = Cluster::start("alien", 0x7376_6305);
    let leader = cluster.wait_leader();
    let other_cluster = cluster.cluster_id + 1;

    let mut alien = Raw::connect_bare(&cluster.socket(leader));
    let hello = ClientMessage::Hello { cluster_id: other_cluster, wire_version: WIRE_VERSION };
    refused_because(
        alien.ask_message(&hello),
        &format!("belongs to cluster {}, not to cluster {other_cluster}", cluster.cluster_id),
    );
    assert_eq!(alien.answer(), None, "the connection of another cluster's client stayed open");

    let mut newer = Raw::connect_bare(&cluster.socket(leader));
    let hello =
        ClientMessage::Hello { cluster_id: cluster.cluster_id, wire_version: WIRE_VERSION + 1 };
    refused_because(newer.ask_message(&hello), "client protocol version");
    assert_eq!(newer.answer(), None, "the connection of a client of another version stayed open");

    // A request before any hello: refused and closed, and nothing was applied.
    let mut rude = Raw::connect_bare(&cluster.socket(leader));
    refused_because(rude.ask_message(&kv(9, 1, put("rude", "x"))), "must open with a hello");
    assert_eq!(rude.answer(), None, "a connection without a hello stayed open");
    let mut status = Raw::connect_bare(&cluster.socket(leader));
    refused_because(status.ask_message(&ClientMessage::Status), "must open with a hello");

    // A second hello on a greeted connection is refused; the connection goes on.
    let mut twice = Raw::connect(&cluster, leader);
    let hello = ClientMessage::Hello { cluster_id: cluster.cluster_id, wire_version: WIRE_VERSION };
    refused_because(twice.ask_message(&hello), "a second hello");
    assert!(matches!(twice.ask_message(&ClientMessage::Status), ServerMessage::Status(_)));

    // The client library of another cluster gets the refusal as an error, not a timeout.
    let mut client = Client::new(other_cluster, cluster.endpoints()).expect("a client");
    client.set_timeout(PATIENCE);
    let started = Instant::now();
    match client.put(b"rude", b"y") {
        Err(ClientError::Refused(why)) => assert!(why.contains("belongs to cluster"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(started.elapsed() < PATIENCE / 2, "the refusal took {:?}", started.elapsed());
    assert!(client.status(leader).is_err(), "another cluster's client read a status report");

    assert_eq!(
        cluster.client().get(b"rude").unwrap(),
        None,
        "a refused client's write was applied"
    );
    still_serves(&cluster, "after-aliens");
}

#[test]
fn a_request_sent_twice_is_applied_once() {
    let cluster = Cluster::start("once", 0x7376_6303);
    let leader = cluster.wait_leader();
    let mut raw = Raw::connect(&cluster, leader);
    let mut client = cluster.client();
    const ME: u64 = 0x00c0_ffee;

    // A compare-and-set on an absent key, twice: applied twice, the second would fail.
    let cas = kv(ME, 1, Op::Cas { key: "once".into(), expected: None, value: "first".into() });
    let first = raw.ask_message(&cas);
    assert_eq!(first, ServerMessage::Reply(Reply::Swapped(true)));
    let again = raw.ask_message(&cas);
    assert_eq!(again, first, "a retry got another answer than the original");
    assert_eq!(client.get(b"once").unwrap(), Some(b"first".to_vec()));

    // A put, then someone else's write, then the put again: applied twice, it would undo the
    // other write.
    let write = kv(ME, 2, put("twice", "old"));
    assert_eq!(raw.ask_message(&write), ServerMessage::Reply(Reply::Stored));
    client.put(b"twice", b"new").expect("another client's write");
    assert_eq!(raw.ask_message(&write), ServerMessage::Reply(Reply::Stored));
    assert_eq!(client.get(b"twice").unwrap(), Some(b"new".to_vec()), "the retry was applied again");

    // A retry on another connection is the same request.
    let mut raw2 = Raw::connect(&cluster, leader);
    assert_eq!(raw2.ask_message(&write), ServerMessage::Reply(Reply::Stored));
    assert_eq!(client.get(b"twice").unwrap(), Some(b"new".to_vec()));

    // An older request of the same client, after a newer one was applied: stale, no effect.
    match raw.ask_message(&cas) {
        ServerMessage::Reply(Reply::Stale { applied_seq: 2 }) => {}
        other => panic!("expected a stale answer, got {other:?}"),
    }
    assert_eq!(client.get(b"once").unwrap(), Some(b"first".to_vec()));
}

#[test]
fn every_replica_reports_and_they_converge() {
    let cluster = Cluster::start("status", 0x7376_6304);
    cluster.wait_leader();
    let mut client = cluster.client();
    const WRITES: u64 = 20;
    for i in 0..WRITES {
        client.put(format!("key-{i}").as_bytes(), format!("value-{i}").as_bytes()).expect("put");
    }
    let reports = poll("every replica to apply the same entries under one leader", || {
        let reports = cluster.reports().ok()?;
        let (applied, leader) = (reports[0].applied, reports[0].leader);
        let converged = applied > 0
            && leader.is_some()
            && reports
                .iter()
                .all(|r| r.applied == applied && r.keys == WRITES && r.leader == leader);
        converged.then_some(reports)
    });
    // Normally the leader of the start; another one if the machine was slow enough that a
    // replica was taken for failed.
    let leader = reports[0].leader.expect("a leader");
    let digest = &reports[0].digest;
    for (id, r) in reports.iter().enumerate() {
        assert_eq!(r.id, id as u16);
        assert_eq!(&r.digest, digest, "replica {id} applied the same entries into another state");
        assert_eq!(r.members, vec![0, 1, 2]);
        assert_eq!(r.pid, std::process::id());
        assert!(r.heartbeat_on && r.eligible, "replica {id}: {r:?}");
        assert_eq!(ReplicaReport::from_json(&r.to_json()).as_ref(), Ok(r), "JSON round trip");
        if r.id == leader {
            assert!(r.confirmed.contains(&leader), "confirmed {:?}", r.confirmed);
            assert!(r.confirmed.len() >= 2, "the leader writes to a majority: {:?}", r.confirmed);
            assert!(r.fuo >= r.applied, "fuo {} below applied {}", r.fuo, r.applied);
        } else {
            assert!(r.confirmed.is_empty(), "follower {id} has confirmed followers");
        }
    }
    // Each put was committed by whichever replica led then: one entry each, at least (a
    // client's requests go one at a time, so none share an entry).
    let commits: u64 = reports.iter().map(|r| r.commits).sum();
    assert!(commits >= WRITES, "{commits} entries committed for {WRITES} writes");
    // Every replica holds the writes: read through the leader, as a client does.
    for i in 0..WRITES {
        assert_eq!(
            client.get(format!("key-{i}").as_bytes()).unwrap(),
            Some(format!("value-{i}").into_bytes())
        );
    }
}

/// Clients on other hosts reach the replicas over TCP (`[clients]`): the same protocol, the same
/// hints to the leader, the same refusal of another cluster's client.
#[test]
fn clients_over_tcp_are_served_like_local_ones() {
    let cluster = Cluster::start_serving("tcp", 0x7376_6310, Some("127.0.0.1:0"));
    let leader = cluster.wait_leader();
    let follower = (0..REPLICAS).find(|&id| id != leader).expect("a follower");
    let mut endpoints = cluster.tcp_endpoints();
    endpoints.sort_by_key(|&(id, _)| if id == follower { 0 } else { 1 + u32::from(id) });
    let mut client = Client::new(cluster.cluster_id, endpoints.clone()).expect("a client");
    client.set_timeout(PATIENCE);
    client.put(b"over-tcp", b"1").expect("put over TCP");
    assert!(client.resends >= 1, "the client started at a follower and followed its hint");
    assert_eq!(client.get(b"over-tcp").expect("get over TCP"), Some(b"1".to_vec()));
    // What a TCP client wrote, a local one reads.
    assert_eq!(cluster.client().get(b"over-tcp").expect("local get"), Some(b"1".to_vec()));
    let report = client.status(follower).expect("a status report over TCP");
    assert_eq!(report.leader, Some(leader));

    let mut stranger = Client::new(0x0bad, endpoints).expect("a client of another cluster");
    stranger.set_timeout(PATIENCE);
    match stranger.put(b"k", b"v") {
        Err(ClientError::Refused(why)) => assert!(why.contains("belongs to cluster"), "{why}"),
        other => panic!("a client of another cluster was not refused over TCP: {other:?}"),
    }
}

/// Whatever else listens where a replica should (an HTTP server, say) is named as not a mu
/// replica, not reported as a frame of a gigabyte.
#[test]
fn a_server_that_is_not_a_replica_is_named_so() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let mut client = Client::new(1, vec![(0, Endpoint::Tcp(addr))]).expect("a client");
    // The answer is the server's first bytes, at once; the timeout only bounds a machine too
    // loaded to run the listener's thread in time.
    client.set_timeout(Duration::from_secs(5));
    let e = client.get(b"k").expect_err("no replica there");
    assert!(e.to_string().contains("is not a mu replica"), "{e}");
}

/// A TCP address that accepts connections and never answers (a stopped replica, as far as a
/// client can tell), and the connections it holds (kept open while the result lives).
fn silent_replica() -> (String, Arc<Mutex<Vec<std::net::TcpStream>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = listener.local_addr().unwrap().to_string();
    let held = Arc::new(Mutex::new(Vec::new()));
    let holder = held.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            holder.lock().unwrap().push(stream); // accepted, never answered
        }
    });
    (addr, held)
}

/// A client's timeout bounds its wait for a replica that accepts and never answers: it gave
/// up on such a replica only after the half-second read timeout, whatever its own timeout.
#[test]
fn a_short_timeout_is_kept_with_a_silent_replica() {
    let (addr, _held) = silent_replica();
    let mut client = Client::new(1, vec![(0, Endpoint::Tcp(addr))]).expect("a client");
    client.set_timeout(Duration::from_millis(50));
    let started = Instant::now();
    let e = client.get(b"k").expect_err("nobody answers");
    let took = started.elapsed();
    assert!(matches!(e, ClientError::Timeout { timeout_ms: 50, .. }), "{e}");
    // Half the old wait, with room for a loaded machine.
    assert!(took < Duration::from_millis(250), "gave up after {took:?}");
}

/// A client whose target accepts and never answers (a stopped leader, as far as a client can
/// tell) asks the other replicas once its attempt wait has passed, and the leader among them
/// answers its request: the call costs milliseconds, not the half-second read timeout after
/// which it used to move on. The request is applied once: the next compare-and-set, which
/// expects its value, succeeds.
#[test]
fn a_silent_target_costs_a_client_its_attempt_wait_not_the_read_timeout() {
    let (addr, _held) = silent_replica();
    let cluster = Cluster::start("silent-target", 0x5174);
    cluster.wait_leader();
    // The silent one first: the client's first target.
    let mut endpoints = vec![(9, Endpoint::Tcp(addr))];
    endpoints.extend(cluster.endpoints().into_iter().map(|(id, path)| (id, path.into())));
    let mut client = Client::new(cluster.cluster_id, endpoints).expect("a client");
    client.set_timeout(PATIENCE);
    assert_eq!(client.target(), 9);
    let started = Instant::now();
    assert!(client.cas(b"silent", None, b"1").expect("an answer"), "stored once");
    let took = started.elapsed();
    assert!(client.asked >= 1, "answered without asking the others");
    assert_ne!(client.target(), 9, "still on the silent replica");
    // Under half of the read timeout, with room for a loaded machine.
    assert!(took < Duration::from_millis(250), "answered after {took:?}");
    assert!(client.cas(b"silent", Some(b"1"), b"2").expect("an answer"), "applied once");
    eprintln!("answered past a silent target in {took:?} ({} askings)", client.asked);
}

/// A request too large for an entry is refused alone. The server proposes what several clients
/// sent meanwhile in one call, and one request too large fails such a call whole: the others,
/// batched with it, were refused with it, and a client does not send a refused request again.
#[test]
fn a_request_too_large_is_refused_alone() {
    let cluster = Cluster::start("too-large", 0x70a1);
    cluster.wait_leader();
    let done = std::sync::atomic::AtomicBool::new(false);
    let shared = &cluster;
    let refused = std::thread::scope(|s| {
        let big = s.spawn(|| {
            let mut client = cluster.client();
            let value = vec![b'v'; SLOT_BYTES as usize * 2];
            let mut refused = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                match client.put(b"big", &value) {
                    Err(ClientError::Refused(_)) => refused += 1,
                    other => panic!("expected a refusal, got {other:?}"),
                }
            }
            refused
        });
        let writers: Vec<_> = (0..4)
            .map(|t| {
                s.spawn(move || {
                    let mut client = shared.client();
                    for i in 0..150 {
                        let key = format!("w{t}-{i}");
                        if let Err(e) = client.put(key.as_bytes(), b"fits") {
                            return Err(format!("{key}: {e}"));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        let results: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        for result in results {
            result.expect("a request that fits is committed, whatever was batched with it");
        }
        big.join().unwrap()
    });
    assert!(refused > 0, "the large request was never sent");
    still_serves(&cluster, "after-batches");
}

/// `app = "orderbook"`: the same service replicates the order book. Orders from two clients
/// cross and trade; a retried order is applied once; a key-value request is refused with a
/// message naming the application; every replica ends with the same book.
#[test]
fn an_order_book_cluster_matches_orders_and_refuses_key_value_requests() {
    use mu_orderbook::{Command, Event, NewOrder, OrderId, Price, Qty, Reply as OrderReply, Side};
    let cluster = Cluster::start_app("orderbook", 0x7376_6320, None, App::Orderbook);
    let leader = cluster.wait_leader();
    let (mut seller, mut buyer) = (cluster.client(), cluster.client());
    let events = |reply: OrderReply| match reply {
        OrderReply::Events(events) => events,
        other => panic!("expected events, got {other:?}"),
    };

    let ask =
        events(seller.order(Command::Submit(NewOrder::limit(1, Side::Sell, 101, 5))).unwrap());
    assert_eq!(ask[0], Event::Accepted { id: OrderId(1) }, "{ask:?}");
    let bid = events(buyer.order(Command::Submit(NewOrder::limit(2, Side::Buy, 102, 3))).unwrap());
    assert!(
        bid.contains(&Event::Fill {
            trade_id: 1,
            maker: OrderId(1),
            taker: OrderId(2),
            price: Price(101),
            qty: Qty(3),
            maker_side: Side::Sell,
        }),
        "the buy crosses the resting sell at its price: {bid:?}"
    );

    // The same request twice (same client, same sequence number): one trade, the same answer.
    let mut raw = Raw::connect(&cluster, leader);
    let order = mu_orderbook::Request {
        client: 0x0bad_cafe,
        seq: 1,
        command: Command::Submit(NewOrder::limit(3, Side::Buy, 101, 1)),
    };
    let message = ClientMessage::Order(order.encode());
    let first = raw.ask_message(&message);
    assert!(
        matches!(&first, ServerMessage::Events(OrderReply::Events(e)) if e.len() > 1),
        "{first:?}"
    );
    assert_eq!(raw.ask_message(&message), first, "a retry got another answer");
    let left = events(seller.cancel(1).unwrap());
    assert_eq!(left[0], Event::Cancelled { id: OrderId(1), remaining: Qty(1) }, "{left:?}");

    // A call per order type.
    use mu_orderbook::TimeInForce;
    let rests = events(seller.limit(10, Side::Sell, 110, 4).unwrap());
    assert_eq!(rests[0], Event::Accepted { id: OrderId(10) }, "{rests:?}");
    let moved = events(seller.replace(10, 109, 4).unwrap());
    assert!(moved.contains(&Event::Replaced { id: OrderId(10), price: Price(109), qty: Qty(4) }));
    let fok = events(buyer.limit_now(11, Side::Buy, (109, 5), TimeInForce::Fok).unwrap());
    assert!(fok.contains(&Event::Cancelled { id: OrderId(11), remaining: Qty(5) }), "{fok:?}");
    let stop = events(buyer.stop(NewOrder::market(12, Side::Buy, 1), 500).unwrap());
    assert_eq!(stop[0], Event::Accepted { id: OrderId(12) }, "a stop waits: {stop:?}");
    let market = events(buyer.market(13, Side::Buy, 2).unwrap());
    assert!(market.iter().any(|e| matches!(e, Event::Fill { qty: Qty(2), .. })), "{market:?}");
    assert!(events(buyer.cancel(12).unwrap())
        .contains(&Event::Cancelled { id: OrderId(12), remaining: Qty(1) }));
    events(seller.cancel(10).unwrap());

    // A key-value request to an order book: refused, by the library and on the wire.
    refused_because(raw.ask_message(&kv(7, 1, put("k", "v"))), "order book");
    match cluster.client().put(b"k", b"v") {
        Err(ClientError::Refused(why)) => assert!(why.contains("order book"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }

    let reports = poll("every replica to apply the same entries", || {
        let reports = cluster.reports().ok()?;
        let applied = reports[0].applied;
        reports.iter().all(|r| r.applied == applied && r.applied > 0).then_some(reports)
    });
    for r in &reports {
        assert_eq!(r.digest, reports[0].digest, "replica {} holds another book", r.id);
        assert_eq!(r.keys, 0, "no order rests: {r:?}");
    }
}

/// `transport = "fabric"`: clients write requests into rings on the replica and read answers
/// from their own, joining through the socket. Started at a follower, a client is sent to the
/// leader and joins its rings; a value too large for a ring slot goes by the socket; an order
/// book cluster serves orders the same way; a cluster without the fabric path serves a client
/// that asks for it over the socket.
#[test]
fn clients_over_the_fabric_are_served_like_socket_ones() {
    let cluster = Cluster::start_fabric("fabric", 0x7376_6330, App::Kv);
    let leader = cluster.wait_leader();
    let follower = (0..REPLICAS).find(|&id| id != leader).expect("a follower");
    let mut endpoints = cluster.endpoints();
    endpoints.sort_by_key(|&(id, _)| if id == follower { 0 } else { 1 + u32::from(id) });
    let mut client = Client::new(cluster.cluster_id, endpoints).expect("a client");
    client.set_timeout(PATIENCE);
    client.over_fabric(true);
    for i in 0..200u32 {
        client.put(format!("f{i}").as_bytes(), format!("v{i}").as_bytes()).expect("put");
    }
    assert_eq!(client.target(), leader, "the client follows the leader's hint");
    for i in 0..200u32 {
        assert_eq!(client.get(format!("f{i}").as_bytes()).unwrap(), Some(format!("v{i}").into()));
    }
    let big = vec![b'x'; 900];
    client.put(b"big", &big).expect("a put larger than a ring slot, by the socket");
    assert_eq!(cluster.client().get(b"big").unwrap(), Some(big));
    let over_fabric =
        |id: u16| cluster.servers[usize::from(id)].counters.fabric_requests.load(Ordering::Relaxed);
    assert_eq!(over_fabric(leader), 400, "every put and get but the large one, by the rings");
    assert!(over_fabric(follower) >= 1, "the first request went to the follower's rings");

    // Pipelined: 8 requests in flight at once, each under a lane's session of its own.
    let before = over_fabric(leader);
    let puts = (0..50u32).map(|i| put(&format!("p{i}"), &format!("w{i}"))).collect();
    let replies = client.call_many(puts);
    assert!(replies.iter().all(|r| r == &Ok(Reply::Stored)), "{replies:?}");
    let gets = (0..50u32).map(|i| Op::Get { key: format!("p{i}").into() }).collect();
    let replies = client.call_many(gets);
    for (i, r) in replies.into_iter().enumerate() {
        assert_eq!(r, Ok(Reply::Value(Some(format!("w{i}").into()))), "get {i}");
    }
    assert_eq!(over_fabric(leader) - before, 100, "the pipelined requests went by the rings");

    // Another client on the same rings' server: its own slot and node.
    let mut second = cluster.client();
    second.over_fabric(true);
    second.put(b"second", b"yes").expect("a second fabric client");
    assert_eq!(client.get(b"second").unwrap(), Some(b"yes".to_vec()));
    drop(client);
    drop(second);

    // Without the fabric path, a client that asks for it is served by the socket.
    drop(cluster);
    let plain = Cluster::start("fabric-none", 0x7376_6331);
    plain.wait_leader();
    let mut client = plain.client();
    client.over_fabric(true);
    client.put(b"k", b"v").expect("served by the socket");
    assert_eq!(client.get(b"k").unwrap(), Some(b"v".to_vec()));
    let replies = client.call_many(vec![put("a", "1"), put("b", "2")]);
    assert_eq!(replies, vec![Ok(Reply::Stored), Ok(Reply::Stored)], "one at a time by the socket");
}

/// The order book over the fabric: orders and their events through the rings.
#[test]
fn orders_over_the_fabric() {
    use mu_orderbook::{Command, Event, NewOrder, OrderId, Reply as OrderReply, Side};
    let cluster = Cluster::start_fabric("fabric-book", 0x7376_6332, App::Orderbook);
    cluster.wait_leader();
    let mut trader = cluster.client();
    trader.over_fabric(true);
    for id in 1..=50u64 {
        let side = if id % 2 == 0 { Side::Buy } else { Side::Sell };
        match trader.order(Command::Submit(NewOrder::limit(id, side, 100, 1))).unwrap() {
            OrderReply::Events(e) => assert_eq!(e[0], Event::Accepted { id: OrderId(id) }, "{e:?}"),
            other => panic!("{other:?}"),
        }
    }
    // Pipelined: 8 orders in flight, each under a lane's session; one id sent twice in the
    // same call is accepted once and rejected as a duplicate once, whichever came first.
    let mut commands: Vec<_> =
        (300..340u64).map(|id| Command::Submit(NewOrder::limit(id, Side::Buy, 10, 1))).collect();
    commands.push(Command::Submit(NewOrder::limit(339, Side::Buy, 10, 1)));
    let replies = trader.order_many(commands);
    assert_eq!(replies.len(), 41);
    let accepted = |r: &Result<OrderReply, _>| matches!(r, Ok(OrderReply::Events(e)) if matches!(e[0], Event::Accepted { .. }));
    assert!(replies[..39].iter().all(accepted), "{replies:?}");
    let last_two: Vec<bool> = replies[39..].iter().map(accepted).collect();
    assert_eq!(last_two.iter().filter(|a| **a).count(), 1, "{:?}", &replies[39..]);
    let cancels = (300..340u64).map(|id| Command::Cancel { id: OrderId(id) }).collect();
    for (id, r) in (300u64..).zip(trader.order_many(cancels)) {
        match r.unwrap() {
            OrderReply::Events(e) => assert!(
                e.iter().any(|e| matches!(e, Event::Cancelled { id: i, .. } if *i == OrderId(id))),
                "{e:?}"
            ),
            other => panic!("{other:?}"),
        }
    }

    // An order that trades with 150 resting ones: its answer is larger than a response slot,
    // so the library asks again over the socket and gets the answer kept for it, once.
    for id in 100..250u64 {
        trader.order(Command::Submit(NewOrder::limit(id, Side::Sell, 200 + id, 1))).unwrap();
    }
    let sweep = NewOrder::limit(1000, Side::Buy, 1000, 150);
    match trader.order(Command::Submit(sweep)).unwrap() {
        OrderReply::Events(e) => {
            let fills = e.iter().filter(|e| matches!(e, Event::Fill { .. })).count();
            assert_eq!(fills, 150, "{e:?}");
        }
        other => panic!("{other:?}"),
    }
    let reports = poll("every replica to apply the orders", || {
        let reports = cluster.reports().ok()?;
        reports.iter().all(|r| r.applied == reports[0].applied && r.applied > 0).then_some(reports)
    });
    assert!(reports.iter().all(|r| r.digest == reports[0].digest && r.keys == 0), "{reports:?}");
}

/// Bad input on the fabric path: garbage, a status request and the other application's
/// request written into a ring are refused to that client only; joining with a node nobody
/// started is refused; a socket-only cluster refuses joins; the cluster serves on throughout.
#[test]
fn bad_input_on_the_fabric_path_is_refused_to_its_client() {
    use mu_service::fabric_link::FabricLink;
    let cluster = Cluster::start_fabric("fabric-bad", 0x7376_6333, App::Kv);
    let leader = cluster.wait_leader();
    let mut raw = Raw::connect(&cluster, leader);
    let ServerMessage::FabricNode { node, layout, dir } =
        raw.ask_message(&ClientMessage::FabricReserve)
    else {
        panic!("no node reserved")
    };
    let fabric = FabricLink::start_node(cluster.cluster_id, &dir, node).expect("the node starts");
    let damaged = [&layout[..layout.len() - 1], &[layout[layout.len() - 1] ^ 1]].concat();
    let refused = FabricLink::prepare(fabric.clone(), &damaged).err().expect("a damaged layout");
    assert!(refused.contains("layout"), "{refused}");
    let prepared = FabricLink::prepare(fabric, &layout).expect("the regions register");
    let ServerMessage::FabricGrant(grant) = raw.ask_message(&ClientMessage::FabricJoin { node })
    else {
        panic!("not admitted")
    };
    let mut link = FabricLink::open(leader, prepared, &grant).expect("the rings open");
    let soon = || Instant::now() + PATIENCE;
    refused_because(link.exchange(&[0xff, 1, 2, 3], soon()).unwrap(), "unknown message type");
    refused_because(link.exchange(&[], soon()).unwrap(), "empty message");
    let mut status = Vec::new();
    ClientMessage::Status.encode(&mut status);
    refused_because(link.exchange(&status, soon()).unwrap(), "not a request on the fabric path");
    let mut order = Vec::new();
    ClientMessage::Order(vec![1, 2, 3]).encode(&mut order);
    refused_because(link.exchange(&order, soon()).unwrap(), "not the order book");
    let mut malformed = Vec::new();
    ClientMessage::Kv(vec![1, 2, 3]).encode(&mut malformed);
    refused_because(link.exchange(&malformed, soon()).unwrap(), "malformed request");
    // After all that, the same rings serve a good request.
    let mut good = Vec::new();
    kv(0x0bad, 1, put("after-garbage", "fine")).encode(&mut good);
    assert_eq!(link.exchange(&good, soon()).unwrap(), ServerMessage::Reply(Reply::Stored));

    // A node reserved by nobody and started by nobody: not admitted.
    refused_because(raw.ask_message(&ClientMessage::FabricJoin { node: 63 }), "admitting");
    still_serves(&cluster, "after-fabric-garbage");
    drop(link);
    drop(cluster);

    let plain = Cluster::start("fabric-refused", 0x7376_6334);
    let leader = plain.wait_leader();
    let mut raw = Raw::connect(&plain, leader);
    refused_because(raw.ask_message(&ClientMessage::FabricReserve), "serves no clients over");
}
