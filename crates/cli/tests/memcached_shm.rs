//! Unmodified Memcached replicated by Mu (`app = "memcached"`, docs/apps/memcached.md): three
//! `mu replica` processes on the shm fabric, each with its own `memcached`. Replies through the
//! leader's front equal a bare memcached's; after each test every replica's server holds the
//! same items (key, value, flags, CAS) and every front the same expiry table, also when a
//! follower was stopped while keys expired; after the leader is killed under load, every
//! acknowledged write is read back through the new leader; `memccapable -a` passes against the
//! front; bad input costs only its own client.

mod common;

use mu_memcached::server::{Conn, MemcachedServer, ServerPaths};
use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(10);

fn connect(socket: &Path) -> std::io::Result<Conn> {
    Conn::connect(socket)?.with_timeout(TIMEOUT)
}

/// Connects to a front that may still be starting.
fn connect_when_up(socket: &Path) -> Conn {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match connect(socket) {
            Ok(conn) => return conn,
            Err(e) if Instant::now() > deadline => panic!("{}: {e}", socket.display()),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Sends `request` (with an `mn` after it) and returns the replies before the `MN`.
fn call(conn: &mut Conn, request: &[u8]) -> String {
    String::from_utf8_lossy(&conn.call(request).expect("a reply").concat()).into_owned()
}

fn memcached_installed() {
    if Command::new("memcached").arg("--version").output().is_err() {
        panic!("memcached is not installed (Debian package memcached; scripts/install-peers.sh)");
    }
}

/// One cluster at a time: seven clusters of three replicas and their servers at once starve a
/// small machine, elections flap and a starved follower falls a whole log behind (and then
/// needs a state transfer, which a test means to cause, not to meet by chance).
static ONE_CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Three replicas of a Memcached cluster in a private directory, killed and removed when
/// dropped.
struct McCluster {
    _one: std::sync::MutexGuard<'static, ()>,
    dir: PathBuf,
    run_dir: PathBuf,
    children: Vec<Option<Child>>,
    /// Each replica's TCP client address.
    addresses: Vec<String>,
}

impl McCluster {
    fn start(tag: &str, cluster_id: u64) -> McCluster {
        memcached_installed();
        let one = ONE_CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
        let dir =
            PathBuf::from("/dev/shm").join(format!("mu-memcached-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new().mode(0o700).create(&dir).expect("test directory");
        let run_dir = dir.join("run");
        let config = dir.join("cluster.toml");
        // Free now; taken by the replicas a moment later.
        let listeners: Vec<std::net::TcpListener> =
            (0..3).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
        let addresses: Vec<String> =
            listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
        drop(listeners);
        let text = format!(
            "cluster_id = {cluster_id}\napp = \"memcached\"\nrun_dir = \"{}\"\nreplicas = [0, 1, 2]\n\n\
             [log]\nslots = 2048\nslot_bytes = 16408\n\n[detector]\nread_period_us = 4000\n\n\
             [clients.addresses]\n0 = \"{}\"\n1 = \"{}\"\n2 = \"{}\"\n",
            run_dir.display(),
            addresses[0],
            addresses[1],
            addresses[2]
        );
        std::fs::write(&config, text).expect("config file");
        let children = vec![None, None, None];
        let mut cluster = McCluster { _one: one, dir, run_dir, children, addresses };
        for id in 0..3 {
            cluster.spawn(id, &[]);
        }
        cluster
    }

    /// Starts replica `id`'s process (`extra`: `--rejoin` for one that crashed), its stderr
    /// appended to its file.
    fn spawn(&mut self, id: u16, extra: &[&str]) {
        self.children[id as usize] = Some(common::spawn_replica(&self.dir, id, extra));
    }

    fn front(&self, id: u16) -> PathBuf {
        self.run_dir.join(format!("memcached-{id}.sock"))
    }

    /// Replica `id`'s front for the clients other fronts relay: it relays nothing further.
    fn direct(&self, id: u16) -> PathBuf {
        self.run_dir.join(format!("memcached-{id}.direct.sock"))
    }

    fn stderr(&self, id: u16) -> String {
        std::fs::read_to_string(self.dir.join(format!("replica-{id}.stderr"))).unwrap_or_default()
    }

    /// The replica among `ids` whose front answers a replicated read on its direct socket, once
    /// every other one of `ids` names it as the leader there (followers answer `SERVER_ERROR not
    /// the leader: replica <n> leads`): an election that settled.
    fn leader(&self, ids: &[u16], timeout: Duration) -> u16 {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let replies: Vec<String> = ids
                .iter()
                .map(|&id| {
                    connect(&self.direct(id))
                        .and_then(|mut c| {
                            c.call(b"get leader-probe\r\n").map_err(std::io::Error::other)
                        })
                        .map(|units| String::from_utf8_lossy(&units.concat()).into_owned())
                        .unwrap_or_default()
                })
                .collect();
            let leading: Vec<u16> = ids
                .iter()
                .zip(&replies)
                .filter(|(_, r)| *r == "END\r\n")
                .map(|(&id, _)| id)
                .collect();
            if let [leader] = leading[..] {
                let named = format!("replica {leader} leads");
                if replies.iter().all(|r| r == "END\r\n" || r.contains(&named)) {
                    return leader;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let logs: Vec<String> = ids.iter().map(|&id| self.stderr(id)).collect();
        panic!("no leader's front answered within {timeout:?}; logs: {logs:#?}");
    }

    /// Replica `id`'s state: every item its server holds (key, value, flags, CAS) and its
    /// front's expiry table.
    fn state(&self, id: u16) -> std::io::Result<(Vec<String>, String)> {
        mu_daemon::app_state::memcached_state(&self.run_dir, id)
    }

    /// Waits until the replicas `ids` hold the same state (followers apply a moment after the
    /// leader); returns it.
    fn converged(&self, ids: &[u16]) -> (Vec<String>, String) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let states: Vec<_> = ids.iter().map(|&id| self.state(id)).collect();
            if let Ok(first) = &states[0] {
                if states.iter().all(|s| matches!(s, Ok(s) if s == first)) {
                    return first.clone();
                }
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = ids.iter().map(|&id| self.stderr(id)).collect();
                panic!("the replicas differ: {states:#?}; logs: {logs:#?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `signal` to replica `id`'s process.
    fn signal(&self, id: u16, signal: libc::c_int) {
        let child = self.children[id as usize].as_ref().expect("a running replica");
        // SAFETY: `kill` takes no pointers; the pid is our own child's, not yet reaped.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
    }

    fn kill(&mut self, id: u16) {
        if let Some(mut child) = self.children[id as usize].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for McCluster {
    fn drop(&mut self) {
        for id in 0..3 {
            self.kill(id);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A bare memcached of the test's, on a socket in `dir`.
fn bare_server(dir: &Path) -> MemcachedServer {
    memcached_installed();
    std::fs::create_dir_all(dir).unwrap();
    let paths = ServerPaths::new(dir, 99);
    MemcachedServer::start(Path::new("memcached"), paths).expect("a bare memcached")
}

/// The command suite: each request, sent alone (with its `mn`, which every call of the test's
/// relies on: `mn` itself is not in the suite), to the bare server and to the front. `{cas}` is replaced by the CAS of the last `gets` reply.
const SUITE: &[&str] = &[
    "set a 5 0 3\r\nabc\r\n",
    "get a\r\n",
    "gets a\r\n",
    "add a 0 0 1\r\nx\r\n",
    "add b 0 1000 2\r\nbb\r\n",
    "replace a 7 0 3\r\nxyz\r\n",
    "replace nokey 0 0 1\r\nx\r\n",
    "append a 0 0 2\r\n12\r\n",
    "prepend a 0 0 2\r\n00\r\n",
    "gets a\r\n",
    "cas a 0 0 1 {cas}\r\nz\r\n",
    "cas a 0 0 1 {cas}\r\nw\r\n",
    "cas nokey 0 0 1 1\r\nz\r\n",
    "incr n 1\r\n",
    "set n 0 0 2\r\n10\r\n",
    "incr n 5\r\n",
    "decr n 20\r\n",
    "incr a 1\r\n",
    "touch a 1000\r\n",
    "touch nokey 10\r\n",
    "gat 1000 a b\r\n",
    "gats 0 a\r\n",
    "delete b\r\n",
    "delete b\r\n",
    "set q 0 0 1 noreply\r\n1\r\n",
    "get q\r\n",
    "delete q noreply\r\n",
    "incr n 1 noreply\r\n",
    "get a b q n nokey\r\n",
    "set neg 0 -1 1\r\nx\r\n",
    "get neg\r\n",
    "ms m 2 T1000 F3\r\nhi\r\n",
    "mg m v f c s k\r\n",
    "mg m s v q\r\n",
    "mg nokey v q\r\n",
    "mg nokey v\r\n",
    "ma cnt N1000 J10 v\r\n",
    "ma cnt MD D3 v c\r\n",
    "ms m 1 MA\r\n!\r\n",
    "mg m v\r\n",
    "md m q\r\n",
    "md m\r\n",
    "ms Zm9vIGJhcg== 1 b\r\nx\r\n",
    "mg Zm9vIGJhcg== b v k c\r\n",
    // A value that holds the front's own delimiter.
    "set framed 0 0 8\r\nab\r\nMN\r\n\r\n",
    "get framed\r\n",
    "mg framed v\r\n",
    "version\r\n",
    "bogus command\r\n",
    "set k 0 0 1\r\nab\r\n",
    "flush_all\r\n",
    "get a n cnt\r\n",
    "set after 1 0 1\r\n1\r\n",
    "gets after\r\n",
];

/// Runs the suite on `conn`, returning each reply.
fn run_suite(conn: &mut Conn) -> Vec<String> {
    let mut cas = String::from("0");
    let mut replies = Vec::new();
    for request in SUITE {
        let reply = call(conn, request.replace("{cas}", &cas).as_bytes());
        if let Some(line) = reply.lines().find(|l| l.starts_with("VALUE")) {
            if let Some(token) = line.split(' ').nth(4) {
                cas = token.to_string();
            }
        }
        replies.push(reply);
    }
    replies
}

#[test]
fn replies_through_the_front_match_a_bare_server_and_replicas_stay_identical() {
    let cluster = McCluster::start("suite", 0x3c01);
    let bare_dir = cluster.dir.join("bare");
    let bare = bare_server(&bare_dir);
    let mut bare_conn = connect(&bare.paths.socket).unwrap();
    let expected = run_suite(&mut bare_conn);
    let leader = cluster.leader(&[0, 1, 2], Duration::from_secs(30));
    let mut front = connect(&cluster.front(leader)).unwrap();
    let got = run_suite(&mut front);
    for ((request, want), have) in SUITE.iter().zip(&expected).zip(&got) {
        assert_eq!(have, want, "the reply to {request:?}");
    }
    // The whole suite again in one write (a pipeline), `{cas}` a token that matches nothing.
    let pipelined: String = SUITE.iter().map(|r| r.replace("{cas}", "1")).collect();
    let want = call(&mut bare_conn, pipelined.as_bytes());
    assert_eq!(call(&mut front, pipelined.as_bytes()), want);
    assert!(want.contains("VALUE framed 0 8\r\nab\r\nMN\r\n\r\n"), "{want}");
    // The suite did something: a CAS mismatch, a quiet miss, a multi-get.
    assert!(expected.iter().any(|r| r == "EXISTS\r\n"));
    assert!(expected[SUITE.iter().position(|r| r.starts_with("get a b q")).unwrap()]
        .contains("VALUE n"));

    // TTL flags are answered from the front's table: T1000 shows 1000 s at most.
    let ttl = call(&mut front, b"ms t 1 T1000\r\nx\r\nmg t t v\r\n");
    assert!(
        ttl.starts_with("HD\r\nVA 1 t1000\r\n") || ttl.starts_with("HD\r\nVA 1 t999\r\n"),
        "{ttl}"
    );
    // Refusals, with a reason.
    for (request, refusal) in [
        ("mg t h\r\n", "CLIENT_ERROR mg is refused by the replicated front"),
        ("md t I T30\r\n", "CLIENT_ERROR md is refused"),
        ("flush_all 10\r\n", "CLIENT_ERROR flush_all is refused"),
        ("shutdown\r\n", "CLIENT_ERROR shutdown is refused"),
        ("lru_crawler metadump all\r\n", "CLIENT_ERROR lru_crawler is refused"),
        ("slabs reassign 1 2\r\n", "CLIENT_ERROR slabs is refused"),
        ("me t\r\n", "CLIENT_ERROR me is refused"),
    ] {
        let reply = call(&mut front, request.as_bytes());
        assert!(reply.starts_with(refusal), "{request:?} answered {reply:?}");
    }
    assert!(call(&mut front, b"stats\r\n").starts_with("STAT pid "));
    // A follower relays its clients to the leader (over TCP too); on its direct socket, where
    // fronts relay to, it names the leader.
    let follower = (0..3).find(|&id| id != leader).unwrap();
    let mut relayed = connect_when_up(&cluster.front(follower));
    assert_eq!(call(&mut relayed, b"get after\r\n"), "VALUE after 1 1\r\n1\r\nEND\r\n");
    assert_eq!(call(&mut relayed, b"incr relayed 1\r\n"), "NOT_FOUND\r\n");
    let mut tcp = std::net::TcpStream::connect(&cluster.addresses[follower as usize]).unwrap();
    tcp.set_read_timeout(Some(TIMEOUT)).unwrap();
    tcp.write_all(b"get after\r\n").unwrap();
    let mut reply = [0u8; 25];
    tcp.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"VALUE after 1 1\r\n1\r\nEND\r\n");
    let reply = call(&mut connect(&cluster.direct(follower)).unwrap(), b"get a\r\n");
    let address = &cluster.addresses[leader as usize];
    assert_eq!(
        reply,
        format!(
            "SERVER_ERROR not the leader: replica {leader} leads, its clients connect to \
             {address}\r\n"
        )
    );
    let (items, expiries) = cluster.converged(&[0, 1, 2]);
    assert!(items.iter().any(|i| i.starts_with("VA 1 kafter f1 c")), "{items:?}");
    assert!(expiries.starts_with("STAT dA== "), "key t with its expiry: {expiries}");
}

#[test]
fn a_lagging_follower_applies_the_same_expiries() {
    let cluster = McCluster::start("ttl", 0x3c02);
    let all = [0, 1, 2];
    let leader = cluster.leader(&all, Duration::from_secs(30));
    let lagging = all.into_iter().find(|&id| id != leader).unwrap();
    let mut front = connect(&cluster.front(leader)).unwrap();
    // Memcached's TTLs are whole seconds: 1 s is the shortest.
    for i in 0..20 {
        let request = format!("set short{i} 0 1 1\r\n{}\r\nset long{i} 0 1000 1\r\nx\r\n", i % 10);
        assert_eq!(call(&mut front, request.as_bytes()), "STORED\r\nSTORED\r\n");
    }
    assert_eq!(call(&mut front, b"touch long0 1\r\n"), "TOUCHED\r\n");
    assert_eq!(call(&mut front, b"ms meta 1 T1\r\nm\r\n"), "HD\r\n");
    cluster.signal(lagging, libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(1200));
    // Entries after the expiries: every replica deletes the expired keys before applying them.
    for i in 0..20 {
        assert_eq!(call(&mut front, format!("get short{i}\r\n").as_bytes()), "END\r\n");
        let request = format!("set fresh{i} 0 100 1\r\nf\r\n");
        assert_eq!(call(&mut front, request.as_bytes()), "STORED\r\n");
    }
    assert_eq!(call(&mut front, b"get long0 long1 meta\r\n"), "VALUE long1 0 1\r\nx\r\nEND\r\n");
    std::thread::sleep(Duration::from_millis(100));
    cluster.signal(lagging, libc::SIGCONT);
    let (items, expiries) = cluster.converged(&all);
    assert_eq!(items.len(), 19 + 20, "long1..long19 and fresh0..fresh19: {items:?}");
    assert_eq!(expiries.lines().count(), 19 + 20 + 1, "{expiries}");
}

/// A replica that crashed lost its memcached with it: restarted with `--rejoin` once the log
/// has moved on by more than its slots, it gets by state transfer every item with its value,
/// flags and CAS, the expiry table and the server's CAS counter. It ends identical to the
/// others, CAS values included, also for items written after it came back (numbered from the
/// restored counter, which every way of taking a CAS moved before the crash: stores, an
/// append, an increment, an autovivify, a flush).
#[test]
fn a_crashed_replica_rejoins_by_state_transfer() {
    let mut cluster = McCluster::start("rejoin", 0x3c09);
    let all = [0, 1, 2];
    let leader = cluster.leader(&all, Duration::from_secs(30));
    let crashed = all.into_iter().find(|&id| id != leader).unwrap();
    let mut front = connect(&cluster.front(leader)).unwrap();
    for (request, reply) in [
        (&b"set gone 0 0 1\r\nx\r\n"[..], "STORED\r\n"),
        (b"flush_all\r\n", "OK\r\n"),
        (b"set a 5 0 1\r\nx\r\n", "STORED\r\n"),
        (b"append a 0 0 1\r\ny\r\n", "STORED\r\n"),
        (b"set n 0 0 1\r\n1\r\n", "STORED\r\n"),
        (b"incr n 5\r\n", "6\r\n"),
        (b"mg viv N300 s\r\n", "HD s0 W\r\n"),
        (b"ms AP9iaW4= 1 b T300\r\nz\r\n", "HD\r\n"),
    ] {
        assert_eq!(call(&mut front, request), reply, "{}", String::from_utf8_lossy(request));
    }
    cluster.converged(&all);
    cluster.kill(crashed);
    // More entries than the log's 2048 slots (one a request, one client at a time): the
    // restarted replica cannot catch up from the log alone.
    for i in 0..3000 {
        let request = format!("set k{} {i} 600 4\r\n{:04}\r\n", i % 300, i % 10_000);
        assert_eq!(call(&mut front, request.as_bytes()), "STORED\r\n");
    }
    cluster.spawn(crashed, &["--rejoin"]);
    let (items, expiries) = cluster.converged(&all);
    assert_eq!(items.len(), 300 + 4, "k0..k299, a, n, viv and the binary key: {items:?}");
    assert_eq!(expiries.lines().count(), 300 + 2 + 1, "{expiries}");
    let said = cluster.stderr(crashed);
    assert!(said.contains("restored from a state transfer"), "no state transfer: {said}");
    // Numbered alike on every replica from here: the counter came with the transfer.
    assert_eq!(call(&mut front, b"set after 0 0 1\r\nz\r\nincr n 1\r\n"), "STORED\r\n7\r\n");
    let (after, _) = cluster.converged(&all);
    assert!(after.iter().any(|item| item.contains(" kafter ")), "{after:?}");
    // The other follower, with a flush the last thing to take a CAS value before the
    // transfer: the counter counts it, or the next store is numbered otherwise there.
    let other = all.into_iter().find(|&id| id != leader && id != crashed).unwrap();
    cluster.kill(other);
    for i in 0..2100 {
        let request = format!("set j{} 0 0 1\r\nj\r\n", i % 10);
        assert_eq!(call(&mut front, request.as_bytes()), "STORED\r\n");
    }
    assert_eq!(call(&mut front, b"flush_all\r\n"), "OK\r\n");
    cluster.spawn(other, &["--rejoin"]);
    let said = cluster.stderr(other);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cluster.stderr(other).contains("restored from a state transfer") {
        assert!(Instant::now() < deadline, "no state transfer: {said}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(call(&mut front, b"set last 0 0 1\r\nz\r\n"), "STORED\r\n");
    let (last, _) = cluster.converged(&all);
    assert_eq!(last.len(), 1, "only the last item is left: {last:?}");
}

/// Sets keys through `address` until it fails; returns the keys acknowledged.
fn writer(
    address: String,
    prefix: &'static str,
    stop: &std::sync::atomic::AtomicBool,
) -> Vec<String> {
    let mut acked = Vec::new();
    let Ok(mut stream) = std::net::TcpStream::connect(&address) else { return acked };
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut reply = [0u8; 8];
    for i in 0.. {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let key = format!("{prefix}{i}");
        let request = format!("set {key} 0 0 {}\r\n{key}\r\n", key.len());
        if stream.write_all(request.as_bytes()).is_err() || stream.read_exact(&mut reply).is_err() {
            break;
        }
        if &reply != b"STORED\r\n" {
            break;
        }
        acked.push(key);
    }
    acked
}

#[test]
fn no_acknowledged_write_is_lost_when_the_leader_dies_under_load() {
    let mut cluster = McCluster::start("failover", 0x3c03);
    let all = [0, 1, 2];
    let leader = cluster.leader(&all, Duration::from_secs(30));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = ["w0-", "w1-"]
        .into_iter()
        .map(|prefix| {
            let (address, stop) = (cluster.addresses[leader as usize].clone(), stop.clone());
            std::thread::spawn(move || writer(address, prefix, &stop))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    cluster.kill(leader);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked: Vec<String> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    assert!(acked.len() > 10, "the writers got {} writes acknowledged", acked.len());
    let rest: Vec<u16> = all.into_iter().filter(|&id| id != leader).collect();
    let new_leader = cluster.leader(&rest, Duration::from_secs(30));
    let mut front = connect(&cluster.front(new_leader)).unwrap();
    for key in &acked {
        let reply = call(&mut front, format!("get {key}\r\n").as_bytes());
        assert_eq!(reply, format!("VALUE {key} 0 {}\r\n{key}\r\nEND\r\n", key.len()), "{key}");
    }
    // The new leader serves writes, and the survivors agree.
    assert_eq!(call(&mut front, b"set after 0 0 1\r\nx\r\n"), "STORED\r\n");
    let (items, _) = cluster.converged(&rest);
    assert!(items.len() > acked.len(), "{} items, {} acknowledged", items.len(), acked.len());
}

#[test]
fn a_leader_stopped_and_continued_loses_no_acknowledged_write() {
    let cluster = McCluster::start("stop", 0x3c06);
    let all = [0, 1, 2];
    let leader = cluster.leader(&all, Duration::from_secs(30));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = ["s0-", "s1-"]
        .into_iter()
        .map(|prefix| {
            let (address, stop) = (cluster.addresses[leader as usize].clone(), stop.clone());
            std::thread::spawn(move || writer(address, prefix, &stop))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // Stopped long enough for the others to elect another leader; its clients wait meanwhile,
    // and what it had in flight must not be acknowledged unless committed.
    cluster.signal(leader, libc::SIGSTOP);
    let rest: Vec<u16> = all.into_iter().filter(|&id| id != leader).collect();
    let interim = cluster.leader(&rest, Duration::from_secs(30));
    let mut front = connect(&cluster.front(interim)).unwrap();
    assert_eq!(call(&mut front, b"set during 0 0 1\r\nx\r\n"), "STORED\r\n");
    cluster.signal(leader, libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked: Vec<String> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    assert!(acked.len() > 10, "the writers got {} writes acknowledged", acked.len());
    let now_leader = cluster.leader(&all, Duration::from_secs(30));
    let mut front = connect(&cluster.front(now_leader)).unwrap();
    for key in acked.iter().chain(std::iter::once(&"during".to_string())) {
        let reply = call(&mut front, format!("get {key}\r\n").as_bytes());
        assert!(reply.starts_with(&format!("VALUE {key} 0 ")), "{key}: {reply}");
    }
    cluster.converged(&all);
}

#[test]
fn memccapable_passes_against_the_front() {
    if Command::new("memccapable").arg("-h").output().is_err() {
        panic!("memccapable is not installed (Debian package libmemcached-tools)");
    }
    let cluster = McCluster::start("capable", 0x3c04);
    let leader = cluster.leader(&[0, 1, 2], Duration::from_secs(30));
    let (host, port) = cluster.addresses[leader as usize].rsplit_once(':').unwrap();
    let output = Command::new("memccapable")
        .args(["-a", "-t", "10", "-h", host, "-p", port])
        .output()
        .expect("memccapable runs");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && text.contains("All tests passed"), "{text}");
    assert!(text.contains("ascii cas") && !text.contains("[FAIL]"), "{text}");
    cluster.converged(&[0, 1, 2]);
}

#[test]
fn memcslap_load_through_every_replica_leaves_identical_replicas() {
    if Command::new("memcslap").arg("--version").output().is_err() {
        panic!("memcslap is not installed (Debian package libmemcached-tools)");
    }
    let cluster = McCluster::start("memcslap", 0x3c07);
    let all = [0, 1, 2];
    cluster.leader(&all, Duration::from_secs(30));
    // Sets through one replica, gets through the others: followers relay to the leader.
    let runs: Vec<_> = [(0, "set"), (1, "get"), (2, "get")]
        .into_iter()
        .map(|(id, test)| {
            let servers = format!("--servers={}", cluster.addresses[id]);
            std::thread::spawn(move || {
                Command::new("memcslap")
                    .args([&servers, "--concurrency=4", "--execute-number=200"])
                    .arg(format!("--test={test}"))
                    .output()
                    .expect("memcslap runs")
            })
        })
        .collect();
    for run in runs {
        let output = run.join().unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success() && text.contains("Time total"), "{text}");
    }
    let (items, _) = cluster.converged(&all);
    assert!(items.len() >= 200, "{} items", items.len());
}

#[test]
fn a_full_server_refuses_the_same_stores_on_every_replica() {
    let cluster = McCluster::start("full", 0x3c08);
    let all = [0, 1, 2];
    let leader = cluster.leader(&all, Duration::from_secs(30));
    let mut front = connect(&cluster.front(leader)).unwrap();
    // 64 MiB of memory (-m 64 -M): 10 KiB values fill it after about 6000 stores, and memcached
    // then refuses stores instead of evicting.
    let value = "v".repeat(10 << 10);
    let mut refused = 0;
    for batch in 0..100 {
        let requests: String = (0..100)
            .map(|i| format!("set full{batch}-{i} 0 0 {}\r\n{value}\r\n", value.len()))
            .collect();
        let replies = call(&mut front, requests.as_bytes());
        refused += replies.matches("SERVER_ERROR out of memory").count();
        if refused > 100 {
            break;
        }
    }
    assert!(refused > 0, "memcached never ran out of memory");
    // Deleting some, then storing again, must give the same outcome everywhere too.
    let deletes: String = (0..50).map(|i| format!("delete full0-{i}\r\n")).collect();
    call(&mut front, deletes.as_bytes());
    let stores: String =
        (0..100).map(|i| format!("set again{i} 0 0 {}\r\n{value}\r\n", value.len())).collect();
    call(&mut front, stores.as_bytes());
    let (items, _) = cluster.converged(&all);
    assert!(items.len() > 1000, "{} items", items.len());
}

#[test]
fn bad_input_costs_only_its_own_client() {
    let cluster = McCluster::start("bad", 0x3c05);
    let leader = cluster.leader(&[0, 1, 2], Duration::from_secs(30));
    let mut good = connect(&cluster.front(leader)).unwrap();
    assert_eq!(call(&mut good, b"set k 0 0 1\r\nv\r\n"), "STORED\r\n");
    // A 1 GiB value: refused at once, nothing allocated; the client may go on.
    let mut huge = UnixStream::connect(cluster.front(leader)).unwrap();
    huge.set_read_timeout(Some(TIMEOUT)).unwrap();
    huge.write_all(b"set big 0 0 1073741824\r\nabc").unwrap();
    let mut reply = [0u8; 41];
    huge.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"SERVER_ERROR object too large for cache\r\n");
    // The binary protocol: refused, and the connection closed.
    let mut binary = UnixStream::connect(cluster.front(leader)).unwrap();
    binary.set_read_timeout(Some(TIMEOUT)).unwrap();
    binary.write_all(&[0x80, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]).unwrap();
    let mut answer = String::new();
    binary.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("SERVER_ERROR the binary protocol is not served"), "{answer}");
    // A line without end: refused, and the connection closed.
    let mut long = UnixStream::connect(cluster.front(leader)).unwrap();
    long.set_read_timeout(Some(TIMEOUT)).unwrap();
    long.write_all(&vec![b'x'; 20_000]).unwrap();
    let mut answer = String::new();
    long.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, "CLIENT_ERROR line too long\r\n");
    // Malformed lines: refused by the front, the connection stays.
    let mut malformed = connect(&cluster.front(leader)).unwrap();
    let refused = |reply: String| {
        (reply.starts_with("CLIENT_ERROR ") || reply == "ERROR\r\n") && reply.lines().count() == 1
    };
    let reply = call(&mut malformed, b"set k 0 0 -1\r\n");
    assert!(refused(reply.clone()), "{reply}");
    assert_eq!(call(&mut malformed, b"set k 0 0 1\r\nx!!"), "CLIENT_ERROR bad data chunk\r\n");
    assert_eq!(call(&mut malformed, b"\r\n"), "ERROR\r\n");
    assert_eq!(call(&mut malformed, b"get k\r\n"), "VALUE k 0 1\r\nv\r\nEND\r\n");
    // A key with an expiry, which a refused flush_all must leave in the table.
    assert_eq!(call(&mut malformed, b"set ttl 0 1000 1\r\nt\r\n"), "STORED\r\n");
    // Lines memcached reads otherwise than the front, or refuses without reading their data
    // block (which it would run as commands on every server: a delayed flush, an extra `mn`
    // that puts every later reply one behind, a `quit` that stops every replica, a set whose
    // data block swallows the front's `mn` and leaves every replica waiting for ever, a TTL
    // kept by one server's clock): one error each, and nothing reaches the servers.
    let long_key = "k".repeat(300);
    for request in [
        format!("set {long_key} 0 0 11\r\nflush_all 5\r\n"),
        "append k -1 0 2\r\nmn\r\n".into(),
        "cas k 0 0 4 x\r\nquit\r\n".into(),
        "set k 0 0 1 noreply extra\r\nx\r\n".into(),
        format!("ms k 2{}\r\nmn\r\n", " v".repeat(19)),
        "set hang 0 0 2\t\r\n".into(),
        "set z 0 10\t 1\r\nx\r\n".into(),
        "touch ttl 10\t\r\n".into(),
        "flush_all 10\r\r\n".into(),
        "flush_all noreply 5\r\n".into(),
        "flush_all abc\r\n".into(),
        "ms Zm9v! 1 b T30\r\nx\r\n".into(),
        format!("get{}\r\n", " k".repeat(129)),
    ] {
        let reply = call(&mut malformed, request.as_bytes());
        assert!(refused(reply.clone()), "{request:?} answered {reply:?}");
    }
    assert_eq!(call(&mut malformed, b"get k z\r\n"), "VALUE k 0 1\r\nv\r\nEND\r\n");
    let expiries = call(&mut malformed, b"stats expiries\r\n");
    assert!(expiries.starts_with("STAT dHRs "), "the expiry of ttl is kept: {expiries}");
    // A gat line over memcached's 2048 bytes: refused, and the connection closed.
    let mut gat = UnixStream::connect(cluster.front(leader)).unwrap();
    gat.set_read_timeout(Some(TIMEOUT)).unwrap();
    gat.write_all(format!("gat 10{}\r\n", " k".repeat(1100)).as_bytes()).unwrap();
    let mut answer = String::new();
    gat.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, "CLIENT_ERROR line too long\r\n");
    // The cluster goes on serving.
    assert_eq!(
        call(&mut good, b"incr k 1\r\n"),
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    assert_eq!(call(&mut good, b"set k 0 0 1\r\n7\r\nincr k 1\r\n"), "STORED\r\n8\r\n");
    drop(huge);
    cluster.converged(&[0, 1, 2]);
}
