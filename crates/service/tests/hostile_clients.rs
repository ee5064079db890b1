//! A replica's server against clients that misbehave: frames at and past the limits, garbage,
//! connections opened by the hundred and held, clients that send nothing or never read their
//! answers, half-closed connections, clients gone while their request replicates, sequence
//! numbers replayed, and the metrics endpoint under the same treatment. Each test checks that
//! the server neither panics nor hangs, holds bounded resources, and goes on serving others.
//!
//! Each test runs one replica (a cluster of one leads itself at once) with its server in a
//! fresh private run directory, stopped and removed at the end even if the test fails; they run
//! one at a time, so that what one measures (memory, connections) is its own.

mod common;

use common::{poll, run_dir, stop_replica, Raw, PATIENCE};
use mu_fabric::NodeId;
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_kv::{Op, Reply, Request, KEY_BYTES_MAX};
use mu_replica::{Mode, Replica, ReplicaConfig};
use mu_service::metrics::{self, MetricsServer, Sources, CLIENT_TIME_MAX, SCRAPES_MAX};
use mu_service::server::ServerLimits;
use mu_service::wire::{write_frame, ClientMessage, ServerMessage, FRAME_BYTES_MAX, WIRE_VERSION};
use mu_service::{Client, Endpoint, ReplicaBackend, Server, SharedMachine};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const CLUSTER_ID: u64 = 0x686f_7374;
const SLOTS: u64 = 1024;
/// Room for a request with the longest key (and a short value) in one entry.
const SLOT_BYTES: u32 = 4096;
/// Short limits, so that the tests see connections closed in well under a second.
const LIMITS: ServerLimits =
    ServerLimits { connections_max: 16, idle_timeout_ms: 600, io_timeout_ms: 300 };

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// One replica serving its Unix socket and a loopback TCP port; stopped and removed on drop.
struct Node {
    dir: PathBuf,
    server: Option<Server>,
    metrics: Option<MetricsServer>,
    replica: Option<Arc<Replica>>,
    machine: SharedMachine,
    _turn: MutexGuard<'static, ()>,
}

impl Node {
    fn start(tag: &str, limits: ServerLimits) -> Node {
        // A test that failed while holding the turn poisons it; the next one still runs.
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let dir = run_dir(&format!("mu-hostile-{tag}"));
        let mut config = ReplicaConfig::new(NodeId(0), vec![NodeId(0)]);
        config.slots_count = SLOTS;
        config.slot_bytes = SLOT_BYTES;
        let shm =
            ShmConfig::new(&dir, CLUSTER_ID, NodeId(0)).with_protocol(mu_replica::protocol_tag());
        let fabric = ShmFabric::create(shm).expect("fabric");
        let machine = SharedMachine::new();
        let replica = Arc::new(
            Replica::start_with_state(config, fabric, Mode::Direct, machine.clone())
                .expect("replica starts"),
        );
        let mut node = Node {
            dir,
            server: None,
            metrics: None,
            replica: Some(replica.clone()),
            machine: machine.clone(),
            _turn: turn,
        };
        let socket = node.socket();
        node.server = Some(
            Server::start_with_limits(
                CLUSTER_ID,
                replica,
                machine,
                (&socket, Some("127.0.0.1:0")),
                Instant::now(),
                limits,
            )
            .expect("server starts"),
        );
        node
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("serving")
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("kv.sock")
    }

    fn tcp(&self) -> std::net::SocketAddr {
        self.server().tcp_address().expect("a TCP listener")
    }

    fn client(&self) -> Client {
        let mut client = Client::new(CLUSTER_ID, vec![(0, self.socket())]).expect("a client");
        client.set_timeout(PATIENCE);
        client
    }

    /// A write and a read by a well-behaved client, within `PATIENCE`.
    fn still_serves(&self, key: &str) {
        let mut client = self.client();
        client.put(key.as_bytes(), b"fine").expect("put");
        assert_eq!(client.get(key.as_bytes()).expect("get"), Some(b"fine".to_vec()));
    }

    /// Waits until at most `n` connections are open on the server.
    fn wait_connections_at_most(&self, n: usize, why: &str) {
        poll(why, || (self.server().connections_open() <= n).then_some(()));
    }

    fn serve_metrics(&mut self) -> std::net::SocketAddr {
        let sources = Sources {
            backend: Arc::new(ReplicaBackend {
                replica: self.replica.clone().expect("a replica"),
                machine: self.machine.clone(),
            }),
            counters: self.server().counters.clone(),
            started: Instant::now(),
            slots_count: SLOTS,
        };
        let endpoint = metrics::serve(0, sources).expect("metrics endpoint");
        let addr = endpoint.address();
        self.metrics = Some(endpoint);
        addr
    }

    /// Stops the server; panics if that takes longer than `PATIENCE`.
    fn stop_server_within_patience(&mut self) -> Duration {
        let server = self.server.take().expect("serving");
        let (tx, rx) = std::sync::mpsc::channel();
        let started = Instant::now();
        let stopper = std::thread::spawn(move || {
            drop(server);
            let _ = tx.send(());
        });
        let stopped = rx.recv_timeout(PATIENCE).is_ok();
        assert!(stopped, "the server did not stop within {PATIENCE:?} with clients connected");
        stopper.join().expect("the stopping thread");
        started.elapsed()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.metrics = None;
        self.server = None;
        if let Some(replica) = self.replica.take() {
            stop_replica(replica);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn unix_bare(node: &Node) -> Raw<UnixStream> {
    let stream = UnixStream::connect(node.socket()).expect("connect");
    // A server that never answers fails the test instead of hanging it.
    stream.set_read_timeout(Some(PATIENCE)).expect("read timeout");
    Raw::new(stream)
}

fn tcp_bare(node: &Node) -> Raw<TcpStream> {
    let stream = TcpStream::connect(node.tcp()).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("read timeout");
    Raw::new(stream)
}

fn hello() -> ClientMessage {
    ClientMessage::Hello { cluster_id: CLUSTER_ID, wire_version: WIRE_VERSION }
}

impl<S: Read + Write> Raw<S> {
    fn greeted(mut self) -> Raw<S> {
        assert_eq!(self.try_ask_message(&hello()), Some(ServerMessage::Welcome));
        self
    }

    /// Reads until the server closes the connection; how long that took. Answers still queued
    /// are skipped.
    fn time_until_closed(&mut self) -> Duration {
        let started = Instant::now();
        let mut sink = [0u8; 4096];
        loop {
            match self.stream.read(&mut sink) {
                Ok(0) => return started.elapsed(),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return started.elapsed()
                }
                Err(e) => panic!("the server did not close the connection: {e}"),
            }
        }
    }
}

fn kv(client: u64, seq: u64, op: Op) -> ClientMessage {
    ClientMessage::Kv(Request { client, seq, op }.encode().expect("a valid request"))
}

fn put(key: &str, value: &str) -> Op {
    Op::Put { key: key.into(), value: value.into() }
}

fn refused_because(answer: Option<ServerMessage>, why: &str) {
    match answer {
        Some(ServerMessage::Refused(text)) => assert!(text.contains(why), "refused with {text:?}"),
        other => panic!("expected a refusal ({why}), got {other:?}"),
    }
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// A length field claims the largest frame and nothing follows, on many connections at once:
/// the server holds a small buffer for each, not a frame's worth, and closes them once the
/// frame is overdue.
#[test]
fn a_frame_length_alone_holds_no_frame_of_memory() {
    let node = Node::start("length", LIMITS);
    const CONNECTIONS: usize = 12;
    let before = rss_bytes();
    let mut held: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let mut raw = unix_bare(&node).greeted();
            raw.stream.write_all(&(FRAME_BYTES_MAX as u32).to_le_bytes()).expect("a length");
            raw
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let grown = rss_bytes().saturating_sub(before);
    // A frame's worth each would be 12 × 2 MiB; a small buffer each is far below it.
    assert!(
        grown < (CONNECTIONS * FRAME_BYTES_MAX / 4) as u64,
        "{CONNECTIONS} connections that sent only a frame's length grew memory by {grown} bytes"
    );
    for raw in &mut held {
        let took = raw.time_until_closed();
        assert!(took < PATIENCE, "a frame cut off was held open {took:?}");
    }
    node.wait_connections_at_most(0, "the connections with overdue frames to close");
    node.still_serves("after-lengths");
}

/// Frames at and just past each limit, and bytes that are no message: each answered (a
/// refusal for what is wrong), the connection going on where it can, and others unharmed.
#[test]
fn frames_at_and_past_the_limits_are_answered() {
    let node = Node::start("edges", ServerLimits { io_timeout_ms: 5_000, ..LIMITS });
    let mut raw = unix_bare(&node).greeted();
    // A frame of no bytes.
    refused_because(raw.try_ask(&[]), "empty message");
    // A status request with bytes after it, and a hello of the wrong length: the wrong op.
    refused_because(raw.try_ask(&[2, 0]), "bytes after a status");
    refused_because(raw.try_ask(&[3, 1, 2]), "hello of the wrong length");
    // A second hello on a greeted connection.
    refused_because(raw.try_ask_message(&hello()), "a second hello");
    // A key-value request whose op code is none.
    let mut bad_op = Request { client: 9, seq: 1, op: put("k", "v") }.encode().unwrap();
    bad_op[1] = 77;
    refused_because(raw.try_ask_message(&ClientMessage::Kv(bad_op)), "malformed");
    // The longest key is served; one byte more is refused before the log.
    let longest = "k".repeat(KEY_BYTES_MAX);
    assert_eq!(
        raw.try_ask_message(&kv(9, 1, put(&longest, "v"))),
        Some(ServerMessage::Reply(Reply::Stored))
    );
    let mut too_long = Request { client: 9, seq: 2, op: put(&longest, "v") }.encode().unwrap();
    // Key length field (after the 18-byte header) one past the limit, and a key byte more.
    too_long[18..20].copy_from_slice(&((KEY_BYTES_MAX + 1) as u16).to_le_bytes());
    too_long.insert(20, b'k');
    refused_because(raw.try_ask_message(&ClientMessage::Kv(too_long)), "malformed");
    // A frame of exactly the largest size, of garbage: read whole, refused, connection open.
    let mut largest = vec![0xa5u8; FRAME_BYTES_MAX];
    largest[0] = 1;
    refused_because(raw.try_ask(&largest), "malformed");
    refused_because(raw.try_ask(&[0xff; 64]), "unknown message type");
    assert_eq!(
        raw.try_ask_message(&kv(9, 3, Op::Get { key: longest.clone().into() })),
        Some(ServerMessage::Reply(Reply::Value(Some(b"v".to_vec())))),
        "the connection that sent all this still works"
    );
    // One byte past the largest frame: refused, then closed (its body would follow).
    let mut huge = unix_bare(&node).greeted();
    huge.stream.write_all(&((FRAME_BYTES_MAX + 1) as u32).to_le_bytes()).unwrap();
    refused_because(huge.answer(), "larger than allowed");
    assert_eq!(huge.answer(), None, "a connection stayed open after an oversized frame");
    // A length field cut off, and a frame cut off, then the connection closed.
    let mut cut = unix_bare(&node).greeted();
    cut.stream.write_all(&[9, 0]).unwrap();
    drop(cut);
    let mut cut = unix_bare(&node).greeted();
    cut.stream.write_all(&[100, 0, 0, 0, 1, 2, 3]).unwrap();
    drop(cut);
    // Garbage from the first byte, over TCP: closed or refused, never a panic.
    let mut garbage = tcp_bare(&node);
    let noise: Vec<u8> =
        (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let _ = garbage.stream.write_all(&noise);
    let _ = garbage.time_until_closed();
    node.still_serves("after-edges");
}

/// Connections over the limit, Unix and TCP together, are told to retry and closed at once;
/// those admitted are served, and a place freed is taken by the next.
#[test]
fn connections_over_the_limit_are_told_to_retry() {
    let node = Node::start(
        "limit",
        ServerLimits { connections_max: 6, idle_timeout_ms: 60_000, io_timeout_ms: 60_000 },
    );
    let mut unix: Vec<_> = (0..3).map(|_| unix_bare(&node).greeted()).collect();
    let mut tcp: Vec<_> = (0..3).map(|_| tcp_bare(&node).greeted()).collect();
    assert_eq!(node.server().connections_open(), 6);
    for _ in 0..20 {
        let mut one_more = unix_bare(&node);
        match one_more.answer() {
            Some(ServerMessage::Retry(why)) => assert!(why.contains("limit"), "{why}"),
            other => panic!("a connection over the limit got {other:?}"),
        }
        assert_eq!(one_more.answer(), None, "a connection over the limit was kept");
        let mut one_more = tcp_bare(&node);
        assert!(matches!(one_more.answer(), Some(ServerMessage::Retry(_)) | None));
    }
    assert!(
        node.server().counters.connections_refused.load(std::sync::atomic::Ordering::Relaxed) >= 20
    );
    // The connections admitted are served all along.
    assert_eq!(
        unix[0].try_ask_message(&kv(5, 1, put("a", "1"))),
        Some(ServerMessage::Reply(Reply::Stored))
    );
    assert!(matches!(
        tcp[2].try_ask_message(&ClientMessage::Status),
        Some(ServerMessage::Status(_))
    ));
    // One closes: the next client gets its place.
    drop(unix.pop());
    node.wait_connections_at_most(5, "a closed connection to free its place");
    node.still_serves("after-limit");
}

/// A client that connects and sends nothing, one that stops between requests, and one that
/// sends a frame a byte at a time are each closed within their limits, over either transport.
#[test]
fn silent_and_slow_connections_are_closed() {
    let node = Node::start("silent", LIMITS);
    let io = Duration::from_millis(LIMITS.io_timeout_ms);
    let idle = Duration::from_millis(LIMITS.idle_timeout_ms);
    // Connects and says nothing, not even hello: closed after the I/O time.
    let took = unix_bare(&node).time_until_closed();
    assert!(took >= io / 2 && took < io * 4 + Duration::from_secs(1), "silent: {took:?}");
    let took = tcp_bare(&node).time_until_closed();
    assert!(took >= io / 2 && took < io * 4 + Duration::from_secs(1), "silent TCP: {took:?}");
    // Greeted, then idle: closed after the idle time.
    let took = unix_bare(&node).greeted().time_until_closed();
    assert!(took >= idle / 2 && took < idle * 4 + Duration::from_secs(1), "idle: {took:?}");
    // A frame a byte every 50 ms: closed when its time is up, not when the client stops.
    let mut slow = tcp_bare(&node).greeted();
    let mut body = Vec::new();
    kv(3, 1, put("slow", "x")).encode(&mut body);
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    let started = Instant::now();
    for byte in &frame {
        if slow.stream.write_all(&[*byte]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = started.elapsed() + slow.time_until_closed();
    assert!(took < io * 4 + Duration::from_secs(1), "a frame trickled in held on {took:?}");
    node.wait_connections_at_most(0, "the silent connections to close");
    // The client library, its connection closed while idle, opens a new one.
    let mut client = node.client();
    client.put(b"before-idle", b"1").expect("put");
    std::thread::sleep(idle * 2);
    client.put(b"after-idle", b"2").expect("put after the server closed an idle connection");
}

/// A client that sends requests and never reads the answers fills its socket: its connection
/// is closed, and nobody else waits meanwhile.
#[test]
fn a_client_that_never_reads_harms_nobody() {
    let node = Node::start("hog", LIMITS);
    let mut hog = unix_bare(&node).greeted();
    hog.stream.set_write_timeout(Some(Duration::from_millis(500))).unwrap();
    // A get of a large value makes each answer large: the hog's socket fills quickly.
    let value = "v".repeat(SLOT_BYTES as usize - 100);
    assert_eq!(
        hog.try_ask_message(&kv(4, 1, put("big", &value))),
        Some(ServerMessage::Reply(Reply::Stored))
    );
    let mut body = Vec::new();
    let started = Instant::now();
    let mut seq = 2;
    while started.elapsed() < PATIENCE {
        kv(4, seq, Op::Get { key: b"big".to_vec() }).encode(&mut body);
        seq += 1;
        if write_frame(&mut hog.stream, &body).is_err() {
            break; // the socket is full both ways, or the server closed it
        }
    }
    // Others are served while the hog's answers pile up.
    let served = Instant::now();
    node.still_serves("beside-the-hog");
    assert!(served.elapsed() < Duration::from_secs(5), "others waited {:?}", served.elapsed());
    // The server gave up writing to the hog and closed its connection.
    node.wait_connections_at_most(0, "the connection of a client that never reads to close");
    drop(hog);
}

/// Stopping the server closes the connections still open (idle, mid-frame, never reading)
/// instead of waiting for their clients to go.
#[test]
fn stopping_the_server_closes_connections_held_open() {
    let limits =
        ServerLimits { connections_max: 64, idle_timeout_ms: 600_000, io_timeout_ms: 600_000 };
    let mut node = Node::start("stop", limits);
    let idle: Vec<_> = (0..4).map(|_| unix_bare(&node).greeted()).collect();
    let mut mid = tcp_bare(&node).greeted();
    mid.stream.write_all(&[200, 0, 0, 0, 1]).unwrap();
    let mut hog = unix_bare(&node).greeted();
    hog.stream.set_write_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut status = Vec::new();
    ClientMessage::Status.encode(&mut status);
    while write_frame(&mut hog.stream, &status).is_ok() {}
    let took = node.stop_server_within_patience();
    assert!(took < Duration::from_secs(5), "stopping took {took:?}");
    let mut idle = idle;
    assert!(idle[0].time_until_closed() < PATIENCE);
    drop((idle, mid, hog));
}

/// A client that sends its request and half-closes gets its answer, then the server closes.
#[test]
fn a_half_closed_connection_gets_its_answer() {
    let node = Node::start("half", LIMITS);
    let mut b = Vec::new();
    let mut raw = unix_bare(&node).greeted();
    kv(6, 1, put("half", "1")).encode(&mut b);
    write_frame(&mut raw.stream, &b).unwrap();
    raw.stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(raw.answer(), Some(ServerMessage::Reply(Reply::Stored)));
    assert_eq!(raw.answer(), None);
    let mut raw = tcp_bare(&node).greeted();
    kv(6, 2, put("half", "2")).encode(&mut b);
    write_frame(&mut raw.stream, &b).unwrap();
    raw.stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(raw.answer(), Some(ServerMessage::Reply(Reply::Stored)));
    assert_eq!(raw.answer(), None);
    assert_eq!(node.client().get(b"half").unwrap(), Some(b"2".to_vec()));
}

/// Clients that send a request and are gone before its answer: the requests are applied, the
/// connections end, and others are served.
#[test]
fn clients_gone_while_their_request_replicates_harm_nobody() {
    let node = Node::start("gone", LIMITS);
    for i in 1..=50u64 {
        let mut raw = if i % 2 == 0 { None } else { Some(unix_bare(&node).greeted()) };
        let mut body = Vec::new();
        kv(7, i, put("gone", &i.to_string())).encode(&mut body);
        match raw.as_mut() {
            Some(r) => write_frame(&mut r.stream, &body).unwrap(),
            None => {
                let mut t = tcp_bare(&node).greeted();
                write_frame(&mut t.stream, &body).unwrap();
            }
        }
    }
    node.wait_connections_at_most(0, "the connections of clients gone to end");
    // The last request was applied, and once only: replaying it does not change the value.
    let mut raw = unix_bare(&node).greeted();
    let mut seq = 0;
    poll("the last request of the clients gone to be applied", || {
        seq += 1;
        match raw.try_ask_message(&kv(8, seq, Op::Get { key: b"gone".to_vec() })) {
            Some(ServerMessage::Reply(Reply::Value(Some(v)))) if v == b"50" => Some(()),
            _ => None,
        }
    });
    node.still_serves("after-gone");
}

/// Sequence numbers replayed, out of order, at the top of their range, and the same request
/// on two connections at once: each request takes effect once, older ones are stale.
#[test]
fn requests_replayed_or_out_of_order_are_applied_once() {
    let node = Node::start("seq", LIMITS);
    let mut raw = unix_bare(&node).greeted();
    let stored = Some(ServerMessage::Reply(Reply::Stored));
    let value = |raw: &mut Raw<UnixStream>, seq| match raw.try_ask_message(&kv(
        99,
        seq,
        Op::Get { key: b"s".to_vec() },
    )) {
        Some(ServerMessage::Reply(Reply::Value(v))) => v,
        other => panic!("a get answered {other:?}"),
    };
    assert_eq!(raw.try_ask_message(&kv(11, 1, put("s", "a"))), stored);
    // The same sequence number again, with another value: the first reply, no effect.
    assert_eq!(raw.try_ask_message(&kv(11, 1, put("s", "b"))), stored);
    assert_eq!(value(&mut raw, 1), Some(b"a".to_vec()));
    // A gap is allowed; an older one after it is stale.
    assert_eq!(raw.try_ask_message(&kv(11, 5, put("s", "c"))), stored);
    assert_eq!(
        raw.try_ask_message(&kv(11, 3, put("s", "d"))),
        Some(ServerMessage::Reply(Reply::Stale { applied_seq: 5 }))
    );
    assert_eq!(value(&mut raw, 2), Some(b"c".to_vec()));
    // The top of the range; nothing wraps to 0 (refused) or after it (stale).
    assert_eq!(raw.try_ask_message(&kv(11, u64::MAX, put("s", "e"))), stored);
    assert_eq!(
        raw.try_ask_message(&kv(11, 1, put("s", "f"))),
        Some(ServerMessage::Reply(Reply::Stale { applied_seq: u64::MAX }))
    );
    let mut zero = Request { client: 11, seq: 1, op: put("s", "g") }.encode().unwrap();
    zero[10..18].copy_from_slice(&0u64.to_le_bytes());
    refused_because(raw.try_ask_message(&ClientMessage::Kv(zero)), "malformed");
    assert_eq!(value(&mut raw, 3), Some(b"e".to_vec()));
    // One compare-and-set sent on many connections at once: it swaps once, and every copy
    // gets that reply.
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let mut r = unix_bare(&node).greeted();
            std::thread::spawn(move || {
                r.try_ask_message(&kv(
                    12,
                    1,
                    Op::Cas { key: b"once".to_vec(), expected: None, value: b"x".to_vec() },
                ))
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), Some(ServerMessage::Reply(Reply::Swapped(true))));
    }
    let mut client = node.client();
    assert!(!client.cas(b"once", None, b"y").unwrap(), "the key was set once, by client 12");
}

/// Metrics clients that send nothing, a request line of megabytes, or come many at once do not
/// hold up a scrape for long, and the endpoint stops when dropped.
#[test]
fn misbehaving_metrics_clients_do_not_hold_up_a_scrape() {
    let mut node = Node::start("metrics", LIMITS);
    let addr = node.serve_metrics();
    let scrape = || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n").unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text
    };
    assert!(scrape().contains("mu_requests_total"), "a plain scrape is served");
    // A client that sends only its request line and waits (no headers, no end of them) is
    // answered at once, not once the time for its headers is spent.
    let mut bare = TcpStream::connect(addr).expect("connect");
    bare.set_read_timeout(Some(PATIENCE)).unwrap();
    let started = Instant::now();
    bare.write_all(b"GET /metrics\r\n").unwrap();
    let mut text = String::new();
    let _ = bare.read_to_string(&mut text);
    assert!(text.contains("mu_requests_total"), "{text}");
    assert!(started.elapsed() < CLIENT_TIME_MAX / 2, "answered after {:?}", started.elapsed());
    // Clients that connect and send nothing, fewer than the scrapes served at once.
    let silent: Vec<_> = (0..SCRAPES_MAX - 2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // A request line of megabytes, sent from a thread (the server stops reading it).
    let flood = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut line = b"GET /".to_vec();
        line.resize(line.len() + (4 << 20), b'a');
        let _ = s.write_all(&line);
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        answer
    });
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    assert!(scrape().contains("mu_requests_total"));
    assert!(
        started.elapsed() < CLIENT_TIME_MAX,
        "a scrape behind silent clients took {:?}",
        started.elapsed()
    );
    let answer = flood.join().unwrap();
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.0 431"),
        "a request line of megabytes answered {:?}",
        String::from_utf8_lossy(&answer[..answer.len().min(80)])
    );
    // More clients at once than are served: the others are told so at once.
    let many: Vec<_> = (0..SCRAPES_MAX * 2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(100));
    let busy = scrape();
    assert!(busy.starts_with("HTTP/1.0 503") || busy.contains("mu_requests_total"), "{busy}");
    drop((silent, many));
    poll("a scrape once the crowd is gone", || {
        scrape().contains("mu_requests_total").then_some(())
    });
    let started = Instant::now();
    node.metrics = None;
    assert!(
        started.elapsed() < PATIENCE,
        "the metrics endpoint took {:?} to stop",
        started.elapsed()
    );
    assert!(
        TcpStream::connect(addr).is_err(),
        "the metrics endpoint still accepts after it stopped"
    );
}

/// A connection the server closed for being idle is opened anew to the same replica: the
/// client does not take the replica for failed and move on to the next.
#[test]
fn the_client_library_reconnects_after_an_idle_close() {
    let node = Node::start("reconnect", LIMITS);
    // A second replica that is not there: moving on to it would cost a failed connection.
    let absent = Endpoint::Unix(node.dir.join("absent.sock"));
    for endpoint in [Endpoint::Unix(node.socket()), Endpoint::Tcp(node.tcp().to_string())] {
        let mut client =
            Client::new(CLUSTER_ID, vec![(0, endpoint), (1, absent.clone())]).expect("a client");
        client.set_timeout(PATIENCE);
        client.put(b"t", b"1").expect("put");
        assert_eq!(client.resends, 0);
        std::thread::sleep(Duration::from_millis(LIMITS.idle_timeout_ms * 2));
        assert_eq!(client.get(b"t").expect("get after an idle close"), Some(b"1".to_vec()));
        assert_eq!(client.resends, 1, "the client did not reconnect to the same replica");
        assert_eq!(client.target(), 0);
    }
}
