//! Unmodified Redis replicated by Mu (`app = "redis"`, docs/apps/redis.md): three `mu replica`
//! processes on the shm fabric, each with its own `redis-server`. Commands whose effects Redis
//! makes deterministic only in its replication stream (relative TTLs, INCRBYFLOAT, SPOP, a
//! script using TIME and math.random, a transaction, XADD *) go through the leader's front;
//! then every replica's server gives the same `DEBUG DIGEST`, and after the leader is killed
//! every acknowledged write is read back through the new leader.

mod common;

use mu_redis::resp::{decode, encode_command, frame_len, Limits, Value};
use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A plain RESP client on a Unix socket.
struct Resp {
    stream: UnixStream,
    buf: Vec<u8>,
}

impl Resp {
    fn connect(socket: &Path) -> std::io::Result<Resp> {
        let stream = UnixStream::connect(socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(Resp { stream, buf: Vec::new() })
    }

    /// Sends every command at once (a pipeline) and reads a reply each.
    fn pipeline(&mut self, commands: &[&[&str]]) -> std::io::Result<Vec<Value>> {
        self.send(commands)?;
        let mut replies = Vec::new();
        while replies.len() < commands.len() {
            match decode(&self.buf, &Limits::SERVER).expect("well-formed replies") {
                Some((value, len)) => {
                    self.buf.drain(..len);
                    replies.push(value);
                }
                None => self.read_more()?,
            }
        }
        Ok(replies)
    }

    /// Writes every command at once, encoded as RESP arrays.
    fn send<C: AsRef<[S]>, S: AsRef<str>>(&mut self, commands: &[C]) -> std::io::Result<()> {
        let mut out = Vec::new();
        for args in commands {
            let args: Vec<&[u8]> = args.as_ref().iter().map(|a| a.as_ref().as_bytes()).collect();
            encode_command(&args, &mut out);
        }
        self.stream.write_all(&out)
    }

    /// Reads what the server sent next into the buffer; end of file is an error.
    fn read_more(&mut self) -> std::io::Result<()> {
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// Sends every command at once and returns each reply's bytes.
    fn pipeline_raw(&mut self, commands: &[Vec<String>]) -> std::io::Result<Vec<Vec<u8>>> {
        self.send(commands)?;
        let mut replies = Vec::new();
        while replies.len() < commands.len() {
            match frame_len(&self.buf, &Limits::SERVER).expect("well-formed replies") {
                Some(len) => replies.push(self.buf.drain(..len).collect()),
                None => self.read_more()?,
            }
        }
        Ok(replies)
    }

    fn call(&mut self, args: &[&str]) -> std::io::Result<Value> {
        Ok(self.pipeline(&[args])?.remove(0))
    }
}

fn bulk(text: &str) -> Value {
    Value::Bulk(text.as_bytes().to_vec())
}

fn ok() -> Value {
    Value::Simple(b"OK".to_vec())
}

/// Three replicas of a Redis cluster in a private directory, killed and removed when dropped.
struct RedisCluster {
    dir: PathBuf,
    run_dir: PathBuf,
    children: Vec<Option<Child>>,
    /// Each replica's TCP client address.
    addresses: Vec<String>,
}

impl RedisCluster {
    fn start(tag: &str, cluster_id: u64) -> RedisCluster {
        RedisCluster::start_with(tag, cluster_id, "")
    }

    /// A cluster whose `[log]` section also has `log` (lines).
    fn start_with(tag: &str, cluster_id: u64, log: &str) -> RedisCluster {
        let dir = PathBuf::from("/dev/shm").join(format!("mu-redis-{tag}-{}", std::process::id()));
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
            "cluster_id = {cluster_id}\napp = \"redis\"\nrun_dir = \"{}\"\nreplicas = [0, 1, 2]\n\n\
             [log]\nslots = 1024\nslot_bytes = 4096\n{log}\n[detector]\nread_period_us = 4000\n\n\
             [clients.addresses]\n0 = \"{}\"\n1 = \"{}\"\n2 = \"{}\"\n",
            run_dir.display(),
            addresses[0],
            addresses[1],
            addresses[2]
        );
        std::fs::write(&config, text).expect("config file");
        let mut cluster =
            RedisCluster { dir, run_dir, children: vec![None, None, None], addresses };
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
        self.run_dir.join(format!("redis-{id}.sock"))
    }

    fn stderr(&self, id: u16) -> String {
        std::fs::read_to_string(self.dir.join(format!("replica-{id}.stderr"))).unwrap_or_default()
    }

    /// Replica `id`'s front for the clients other fronts relay: it relays nothing further.
    fn direct(&self, id: u16) -> PathBuf {
        self.run_dir.join(format!("redis-{id}.direct.sock"))
    }

    /// The replica whose front answers `PING` itself (followers' relay their clients to the
    /// leader, and answer `-NOTLEADER` on their direct sockets), among `ids`.
    fn leader(&self, ids: &[u16], timeout: Duration) -> u16 {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            for &id in ids {
                let reply = Resp::connect(&self.direct(id)).and_then(|mut c| c.call(&["PING"]));
                if matches!(reply, Ok(Value::Simple(ref s)) if s == b"PONG") {
                    return id;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let logs: Vec<String> = ids.iter().map(|&id| self.stderr(id)).collect();
        panic!("no leader's front answered within {timeout:?}; logs: {logs:#?}");
    }

    /// `DEBUG DIGEST` and `DBSIZE` of replica `id`'s own server, asked directly: an error
    /// while that replica is still starting.
    fn digest(&self, id: u16) -> std::io::Result<(Value, Value)> {
        mu_daemon::app_state::redis_digest(&self.run_dir, id)
    }

    /// Waits until the servers of `ids` agree (a follower may still be starting, and followers
    /// apply the committed stream a moment after the leader's server ran it); returns their
    /// digest and key count.
    fn converged(&self, ids: &[u16]) -> (Value, Value) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let digests: Vec<std::io::Result<(Value, Value)>> =
                ids.iter().map(|&id| self.digest(id)).collect();
            if let Ok(first) = &digests[0] {
                if digests.iter().all(|d| matches!(d, Ok(d) if d == first)) {
                    return first.clone();
                }
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = ids.iter().map(|&id| self.stderr(id)).collect();
                panic!("the replicas' servers differ: {digests:?}; logs: {logs:#?}");
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

    /// Whether replica `id`'s process still runs.
    fn running(&mut self, id: u16) -> bool {
        let child = self.children[id as usize].as_mut().expect("a replica not killed");
        child.try_wait().expect("waiting on a child").is_none()
    }

    fn kill(&mut self, id: u16) {
        if let Some(mut child) = self.children[id as usize].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for id in 0..3 {
            self.kill(id);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The writes of the test, through the leader's front, with the replies a bare Redis gives.
fn write_nondeterministic_commands(front: &mut Resp) {
    assert_eq!(front.call(&["SET", "kept", "v", "PX", "600000"]).unwrap(), ok());
    assert_eq!(front.call(&["SET", "short", "v", "PX", "50"]).unwrap(), ok());
    let floats =
        front.pipeline(&[&["INCRBYFLOAT", "f", "1.1"], &["INCRBYFLOAT", "f", "2.2"]]).unwrap();
    assert_eq!(floats[1], bulk("3.3"));
    let members: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    let mut sadd = vec!["SADD", "set"];
    sadd.extend(members.iter().map(String::as_str));
    assert_eq!(front.call(&sadd).unwrap(), Value::Integer(10));
    match front.call(&["SPOP", "set", "3"]).unwrap() {
        Value::Array(popped) => assert_eq!(popped.len(), 3),
        other => panic!("SPOP answered {other:?}"),
    }
    let script = "local t = redis.call('TIME') \
                  redis.call('SET', 'script', t[1] .. '.' .. t[2] .. ':' .. math.random()) \
                  redis.call('PEXPIRE', 'script', 600000) return 1";
    assert_eq!(front.call(&["EVAL", script, "0"]).unwrap(), Value::Integer(1));
    let tx = front
        .pipeline(&[&["MULTI"], &["INCR", "n"], &["SET", "m", "x", "EX", "600"], &["EXEC"]])
        .unwrap();
    assert_eq!(tx[0], ok());
    assert_eq!(tx[3], Value::Array(vec![Value::Integer(1), ok()]));
    assert!(matches!(front.call(&["XADD", "stream", "*", "f", "v"]).unwrap(), Value::Bulk(_)));
    match front.call(&["CONFIG", "GET", "save"]).unwrap() {
        Value::Error(e) => assert!(e.starts_with(b"ERR CONFIG is refused"), "{e:?}"),
        other => panic!("CONFIG answered {other:?}"),
    }
    // Refused inside a transaction: the whole transaction is discarded, as Redis does.
    let tx =
        front.pipeline(&[&["MULTI"], &["INCR", "n"], &["DEBUG", "DIGEST"], &["EXEC"]]).unwrap();
    assert!(matches!(&tx[2], Value::Error(e) if e.starts_with(b"ERR DEBUG is refused")));
    assert!(matches!(&tx[3], Value::Error(e) if e.starts_with(b"EXECABORT")), "{:?}", tx[3]);
    assert_eq!(front.call(&["GET", "n"]).unwrap(), bulk("1"));
}

#[test]
fn replicas_stay_identical_and_acknowledged_writes_survive_the_leader() {
    if Command::new("redis-server").arg("--version").output().is_err() {
        panic!("redis-server is not installed (Debian package redis-server)");
    }
    let mut cluster = RedisCluster::start("digests", 0x7e01);
    let all = [0, 1, 2];
    let leader = cluster.leader(&all, Duration::from_secs(30));
    let mut front = Resp::connect(&cluster.front(leader)).unwrap();
    write_nondeterministic_commands(&mut front);
    // The key with a 50 ms TTL expires at the leader, whose DEL reaches the others as part of
    // the stream (a Redis replica never expires a key itself).
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(front.call(&["EXISTS", "short"]).unwrap(), Value::Integer(0));
    let (digest, keys) = cluster.converged(&all);
    assert_eq!(keys, Value::Integer(7), "kept, f, set, script, n, m, stream");
    assert_ne!(digest, bulk(&"0".repeat(40)), "an empty server's digest");

    // A 1 GiB bulk length: a protocol error for that client, nothing allocated, and the
    // front goes on serving the others (over TCP too, with an inline command).
    let mut bad = UnixStream::connect(cluster.front(leader)).unwrap();
    bad.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1073741824\r\nabc").unwrap();
    let mut answer = String::new();
    bad.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("-ERR Protocol error: bulk length 1073741824"), "{answer}");
    let mut tcp = std::net::TcpStream::connect(&cluster.addresses[leader as usize]).unwrap();
    tcp.write_all(b"GET kept\r\n").unwrap();
    let mut reply = [0u8; 7];
    tcp.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"$1\r\nv\r\n");

    // A follower's front relays its clients to the leader's; its direct socket (what other
    // fronts relay to) refuses them, naming the leader.
    let follower = all.into_iter().find(|&id| id != leader).unwrap();
    let mut relayed = Resp::connect(&cluster.front(follower)).unwrap();
    assert_eq!(relayed.call(&["GET", "kept"]).unwrap(), bulk("v"));
    assert_eq!(relayed.call(&["INCR", "relayed"]).unwrap(), Value::Integer(1));
    assert_eq!(relayed.call(&["DEL", "relayed"]).unwrap(), Value::Integer(1));
    match Resp::connect(&cluster.direct(follower)).unwrap().call(&["GET", "kept"]).unwrap() {
        Value::Error(e) => {
            let e = String::from_utf8(e).unwrap();
            assert!(e.starts_with("NOTLEADER") && e.contains(&format!("replica {leader}")), "{e}")
        }
        other => panic!("a follower answered {other:?}"),
    }

    // The leader dies: every write it acknowledged is read back through the new leader.
    cluster.kill(leader);
    let rest: Vec<u16> = all.into_iter().filter(|&id| id != leader).collect();
    let new_leader = cluster.leader(&rest, Duration::from_secs(30));
    let mut front = Resp::connect(&cluster.front(new_leader)).unwrap();
    let reads = front
        .pipeline(&[
            &["GET", "kept"],
            &["GET", "f"],
            &["SCARD", "set"],
            &["EXISTS", "script"],
            &["GET", "n"],
            &["GET", "m"],
            &["XLEN", "stream"],
            &["EXISTS", "short"],
        ])
        .unwrap();
    let expected = vec![
        bulk("v"),
        bulk("3.3"),
        Value::Integer(7),
        Value::Integer(1),
        bulk("1"),
        bulk("x"),
        Value::Integer(1),
        Value::Integer(0),
    ];
    assert_eq!(reads, expected);
    assert_eq!(front.call(&["INCRBYFLOAT", "f", "0.7"]).unwrap(), bulk("4"));
    let (after, _) = cluster.converged(&rest);
    assert_ne!(after, digest, "the write after the failover changed the state");
}

#[test]
fn a_lagging_follower_gets_the_leaders_expiries() {
    let cluster = RedisCluster::start("lag", 0x7e02);
    let all = [0, 1, 2];
    let leader = cluster.leader(&all, Duration::from_secs(30));
    let lagging = all.into_iter().find(|&id| id != leader).unwrap();
    let mut front = Resp::connect(&cluster.front(leader)).unwrap();
    // The follower stops applying the log (its process is stopped; its server runs on) while
    // the leader takes keys with 100 ms TTLs, then expires them.
    cluster.signal(lagging, libc::SIGSTOP);
    let names: Vec<(String, String)> =
        (0..100).map(|i| (format!("ttl:{i}"), format!("keep:{i}"))).collect();
    let mut commands: Vec<Vec<&str>> = Vec::new();
    for (ttl, keep) in &names {
        commands.push(vec!["SET", ttl, "v", "PX", "100"]);
        commands.push(vec!["SET", keep, "v"]);
        commands.push(vec!["INCR", "count"]);
    }
    let commands: Vec<&[&str]> = commands.iter().map(Vec::as_slice).collect();
    for reply in front.pipeline(&commands).unwrap() {
        assert!(matches!(reply, Value::Simple(_) | Value::Integer(_)), "{reply:?}");
    }
    std::thread::sleep(Duration::from_millis(300));
    // Every TTL key is gone at the leader: expired by its clock, sent to the log as DEL.
    let exists: Vec<[&str; 2]> = names.iter().map(|(ttl, _)| ["EXISTS", ttl.as_str()]).collect();
    let exists: Vec<&[&str]> = exists.iter().map(|c| &c[..]).collect();
    let gone = front.pipeline(&exists).unwrap();
    assert!(gone.iter().all(|r| *r == Value::Integer(0)), "{gone:?}");
    cluster.signal(lagging, libc::SIGCONT);
    let (_, keys) = cluster.converged(&all);
    assert_eq!(keys, Value::Integer(101), "the keep keys and the counter");
    assert_eq!(front.call(&["GET", "count"]).unwrap(), bulk("100"));
}

#[test]
fn a_deposed_leader_with_nothing_uncommitted_follows_again() {
    let mut cluster = RedisCluster::start("deposed", 0x7e03);
    let all = [0, 1, 2];
    let first = cluster.leader(&all, Duration::from_secs(30));
    let mut front = Resp::connect(&cluster.front(first)).unwrap();
    assert_eq!(front.call(&["INCR", "n"]).unwrap(), Value::Integer(1));
    // Stopped long enough for the others to elect one of them; everything its server ran was
    // committed, so once it runs again it follows the log (and may lead again).
    cluster.signal(first, libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(1500));
    let rest: Vec<u16> = all.into_iter().filter(|&id| id != first).collect();
    let second = cluster.leader(&rest, Duration::from_secs(30));
    let mut front = Resp::connect(&cluster.front(second)).unwrap();
    assert_eq!(front.call(&["INCR", "n"]).unwrap(), Value::Integer(2));
    cluster.signal(first, libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(1500));
    let third = cluster.leader(&all, Duration::from_secs(30));
    let mut front = Resp::connect(&cluster.front(third)).unwrap();
    assert_eq!(front.call(&["INCR", "n"]).unwrap(), Value::Integer(3));
    cluster.converged(&all);
    for id in all {
        assert!(cluster.running(id), "replica {id} stopped: {}", cluster.stderr(id));
    }
}

/// A replica that crashed lost its server's data with it: restarted with `--rejoin` once the
/// log has moved on by more than its slots, it gets the committed stream by state transfer
/// from a peer, its server starts over from it, and it ends identical to the others; with the
/// leader killed, it is one of the two left (a majority only with it), and every acknowledged
/// write is there. The snapshot may hold 64 KiB, less than the writes' stream: it fits only
/// because the replicas compact the stream behind RDBs of their servers.
#[test]
fn a_crashed_replica_rejoins_by_state_transfer() {
    let mut cluster = RedisCluster::start_with("rejoin", 0x7e05, "snapshot_bytes = 65536\n");
    let all = [0, 1, 2];
    let first = cluster.leader(&all, Duration::from_secs(30));
    // The lowest id of the other two: elected when the first leader dies.
    let crashed = all.into_iter().find(|&id| id != first).unwrap();
    let mut front = Resp::connect(&cluster.front(first)).unwrap();
    write_nondeterministic_commands(&mut front);
    cluster.converged(&all);
    cluster.kill(crashed);
    // More entries than the log's 1024 slots (one a write, one client at a time): the
    // restarted replica cannot catch up from the log alone.
    for i in 0..3000 {
        let reply = front.call(&["SET", &format!("k{}", i % 100), &i.to_string()]).unwrap();
        assert_eq!(reply, ok());
    }
    cluster.spawn(crashed, &["--rejoin"]);
    let (digest, keys) = cluster.converged(&all);
    assert_ne!(keys, Value::Integer(0));
    let said = cluster.stderr(crashed);
    assert!(said.contains("restored from a state transfer"), "no state transfer: {said}");
    let donor = cluster.stderr(first);
    assert!(donor.contains("compacted the kept stream"), "no compaction: {donor}");
    assert_eq!(front.call(&["INCR", "after"]).unwrap(), Value::Integer(1));
    cluster.converged(&all);
    // The rejoined replica counts in majorities again before its peer's death matters.
    std::thread::sleep(Duration::from_millis(1500));
    cluster.kill(first);
    let rest: Vec<u16> = all.into_iter().filter(|&id| id != first).collect();
    let next = cluster.leader(&rest, Duration::from_secs(30));
    let mut front = Resp::connect(&cluster.front(next)).unwrap();
    assert_eq!(front.call(&["GET", "k99"]).unwrap(), bulk("2999"));
    assert_eq!(front.call(&["INCR", "after"]).unwrap(), Value::Integer(2));
    let (after, _) = cluster.converged(&rest);
    assert_ne!(after, digest, "the last write changed the state");
    for id in rest {
        assert!(cluster.running(id), "replica {id} stopped: {}", cluster.stderr(id));
    }
}

/// A bare `redis-server` of the test's own, on a Unix socket in `dir`; killed when dropped.
struct BareServer(Child);

impl BareServer {
    fn start(dir: &Path) -> (BareServer, PathBuf) {
        let socket = dir.join("bare.sock");
        let child = Command::new("redis-server")
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(&socket)
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Resp::connect(&socket).and_then(|mut c| c.call(&["PING"])).is_err() {
            assert!(Instant::now() < deadline, "the bare server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        (BareServer(child), socket)
    }
}

impl Drop for BareServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Commands whose replies are the same on any server given the same commands before: each
/// line one pipeline, words split on spaces. Not `SMEMBERS` or `SINTER`: a set's order follows
/// its hash table, whose seed each server draws at random (two servers, or two replicas,
/// list the same set in different orders).
const DETERMINISTIC: &[&str] = &[
    "SET s v|GET s|APPEND s w|STRLEN s|GETRANGE s 0 0|SETNX s x|MSET a 1 b 2|MGET a b c",
    "INCR i|INCRBY i 5|DECR i|GETSET i 0|GETDEL i|EXISTS i",
    "HSET h f 1 g 2|HGET h f|HINCRBY h f 3|HGETALL h|HDEL h g|HLEN h|HKEYS h",
    "RPUSH l a b c|LPUSH l z|LRANGE l 0 -1|LPOP l|RPOP l|LLEN l|LINDEX l 0|LMOVE l l2 LEFT RIGHT",
    "SADD set a b c|SISMEMBER set a|SCARD set|SREM set a|SORT set ALPHA|SMISMEMBER set a b",
    "ZADD z 1 a 2 b 3 c|ZRANGE z 0 -1 WITHSCORES|ZINCRBY z 5 a|ZRANK z a|ZREM z b|ZCARD z",
    "XADD x 1-1 f v|XADD x 2-1 f w|XLEN x|XRANGE x - +|XDEL x 1-1|XLEN x",
    "SET t v EX 100|TTL t|EXPIRE t 50 NX|EXPIRE t 50 XX|EXPIRE t 500 GT|EXPIRE t 10 LT|TTL t",
    "PERSIST t|TTL t|SET t2 v KEEPTTL|SET t3 v EXAT 4102444800|TTL t3|PEXPIRETIME t3",
    "MULTI|INCR m|INCR m|EXEC|MULTI|INCR m|DISCARD|GET m",
    "MULTI|SET q 1|LPUSH q 2|SET q2 3|EXEC|GET q2",
    "SELECT 1|SET d1 v|DBSIZE|SELECT 0|EXISTS d1",
    "RPUSH bl x|BLPOP bl 1|BLPOP bl 0.1|PING|ECHO hi",
    "WATCH w|SET w 1|MULTI|SET w 2|EXEC|GET w",
    "HSET r a 1|HGETALL r|CLIENT GETNAME",
    "NOSUCHCOMMAND|SET|GET a b c",
];

#[test]
fn replies_through_the_front_match_a_bare_server() {
    let cluster = RedisCluster::start("conformance", 0x7e04);
    let leader = cluster.leader(&[0, 1, 2], Duration::from_secs(30));
    let (_bare, bare_socket) = BareServer::start(&cluster.dir);
    let mut front = Resp::connect(&cluster.front(leader)).unwrap();
    let mut bare = Resp::connect(&bare_socket).unwrap();
    for line in DETERMINISTIC {
        let commands: Vec<Vec<String>> =
            line.split('|').map(|c| c.split(' ').map(str::to_string).collect()).collect();
        let expected = bare.pipeline_raw(&commands).unwrap();
        let got = front.pipeline_raw(&commands).unwrap();
        for ((command, e), g) in commands.iter().zip(&expected).zip(&got) {
            assert_eq!(
                String::from_utf8_lossy(g),
                String::from_utf8_lossy(e),
                "{command:?} in {line:?}"
            );
        }
    }
    // RESP3 after HELLO 3: the same replies in the same protocol (HELLO's own reply names the
    // connection, so only its kind is compared).
    let hello = vec![vec!["HELLO".to_string(), "3".to_string()]];
    assert_eq!(bare.pipeline_raw(&hello).unwrap()[0][0], b'%');
    assert_eq!(front.pipeline_raw(&hello).unwrap()[0][0], b'%');
    let resp3: Vec<Vec<String>> = ["HGETALL h", "SORT set ALPHA", "ZSCORE z a", "GET nothing"]
        .iter()
        .map(|c| c.split(' ').map(str::to_string).collect())
        .collect();
    assert_eq!(front.pipeline_raw(&resp3).unwrap(), bare.pipeline_raw(&resp3).unwrap());
    // A BLPOP served by another client's push: its pop is an effect of the push's command in
    // the stream (Redis replicates it as an LPOP), committed before either is answered.
    let front_socket = cluster.front(leader);
    let blocked = std::thread::spawn(move || {
        let mut c = Resp::connect(&front_socket).unwrap();
        c.call(&["BLPOP", "queue", "5"]).unwrap()
    });
    // Pushed only once the BLPOP is blocked at the server (else the pop would find the job).
    let mut pusher = Resp::connect(&cluster.front(leader)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match pusher.call(&["INFO", "clients"]).unwrap() {
            Value::Bulk(info) if String::from_utf8_lossy(&info).contains("blocked_clients:1") => {
                break
            }
            other => assert!(Instant::now() < deadline, "the BLPOP never blocked: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(pusher.call(&["RPUSH", "queue", "job"]).unwrap(), Value::Integer(1));
    assert_eq!(blocked.join().unwrap(), Value::Array(vec![bulk("queue"), bulk("job")]));
    assert_eq!(pusher.call(&["LLEN", "queue"]).unwrap(), Value::Integer(0));
    cluster.converged(&[0, 1, 2]);
}

/// A client that increments its own counter through whichever front answers, and remembers
/// the last value a front acknowledged (also in `progress`); it stops when `stop` is set.
fn counting_client(
    fronts: Vec<PathBuf>,
    key: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    progress: std::sync::Arc<std::sync::atomic::AtomicI64>,
) -> i64 {
    let mut acknowledged = 0;
    let mut conn: Option<Resp> = None;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => {
                conn = fronts.iter().find_map(|f| {
                    let mut c = Resp::connect(f).ok()?;
                    matches!(c.call(&["PING"]), Ok(Value::Simple(_))).then_some(c)
                });
                if conn.is_none() {
                    std::thread::sleep(Duration::from_millis(20));
                }
                continue;
            }
        };
        match c.call(&["INCR", &key]) {
            Ok(Value::Integer(n)) => {
                assert!(n > acknowledged, "{key}: {n} after {acknowledged} was acknowledged");
                acknowledged = n;
                progress.store(n, std::sync::atomic::Ordering::Relaxed);
            }
            // A follower's refusal, or a connection the leadership's end closed: another front.
            _ => conn = None,
        }
    }
    acknowledged
}

#[test]
fn no_acknowledged_write_is_lost_when_the_leader_dies_under_load() {
    let mut cluster = RedisCluster::start("load", 0x7e05);
    let all = [0, 1, 2];
    let leader = cluster.leader(&all, Duration::from_secs(30));
    let fronts: Vec<PathBuf> = all.iter().map(|&id| cluster.front(id)).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let progress: Vec<_> =
        (0..4).map(|_| std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0))).collect();
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let (fronts, stop, progress) = (fronts.clone(), stop.clone(), progress[i].clone());
            let key = format!("counter:{i}");
            std::thread::spawn(move || counting_client(fronts, key, stop, progress))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let load = |p: &std::sync::Arc<std::sync::atomic::AtomicI64>| {
        p.load(std::sync::atomic::Ordering::Relaxed)
    };
    cluster.kill(leader);
    // Acknowledged by the killed leader at most (a reply in flight may land just after).
    let at_kill: Vec<i64> = progress.iter().map(load).collect();
    // Every client must be served again, by the new leader: else the check below would pass
    // with nothing written after the kill.
    let deadline = Instant::now() + Duration::from_secs(30);
    while progress.iter().zip(&at_kill).any(|(p, &at)| load(p) <= at + 1) {
        assert!(Instant::now() < deadline, "no progress after the kill: {at_kill:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acknowledged: Vec<i64> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let rest: Vec<u16> = all.into_iter().filter(|&id| id != leader).collect();
    let new_leader = cluster.leader(&rest, Duration::from_secs(30));
    let mut front = Resp::connect(&cluster.front(new_leader)).unwrap();
    for (i, &acked) in acknowledged.iter().enumerate() {
        assert_counter(&mut front, i, acked);
        assert!(acked > 0, "client {i} got nothing acknowledged");
    }
    cluster.converged(&rest);
}

/// Counting client `i`'s counter holds what it was acknowledged, or at most one more: the
/// increment that was running, unanswered, when the client stopped or its leader went.
fn assert_counter(front: &mut Resp, i: usize, acked: i64) {
    let value = match front.call(&["GET", &format!("counter:{i}")]).unwrap() {
        Value::Bulk(v) => String::from_utf8(v).unwrap().parse::<i64>().unwrap(),
        other => panic!("counter:{i} is {other:?}"),
    };
    assert!(
        value == acked || value == acked + 1,
        "counter:{i} is {value}, {acked} was acknowledged"
    );
}

/// `redis-benchmark` rounds (`SET`, `INCR`, pipelined) against the front at `address` until
/// `stop`; returns the rounds that ran to the end, and the last failure's output. A round
/// whose connections a leadership's end closed fails, and the next one starts on new ones.
fn benchmark_rounds(
    address: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (u32, String) {
    let (host, port) = address.rsplit_once(':').expect("host:port");
    let (mut completed, mut failure) = (0, String::new());
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        // Bounded: redis-benchmark waits for ever on a server that stopped answering.
        let out = Command::new("timeout")
            .args(["30", "redis-benchmark"])
            .args(["-h", host, "-p", port, "-t", "set,incr", "-r", "1000", "-n", "2000"])
            .args(["-c", "4", "-P", "4", "-q"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-benchmark runs (scripts/install-peers.sh installs it)");
        if out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("rror") {
            completed += 1;
        } else {
            failure = format!("{out:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    (completed, failure)
}

/// The leader stopped (SIGSTOP) for a while under `redis-benchmark` load and four counting
/// clients: the others elect a leader that serves the clients while it is stopped; once
/// continued, it follows the log again; no acknowledged increment is lost, and the three
/// servers end identical.
#[test]
fn a_stopped_leader_under_redis_benchmark_loses_no_acknowledged_write() {
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
    use std::sync::Arc;
    let mut cluster = RedisCluster::start("stop", 0x7e06);
    let all = [0, 1, 2];
    let leader = cluster.leader(&all, Duration::from_secs(30));
    let fronts: Vec<PathBuf> = all.iter().map(|&id| cluster.front(id)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let progress: Vec<_> = (0..4).map(|_| Arc::new(AtomicI64::new(0))).collect();
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let (fronts, stop, progress) = (fronts.clone(), stop.clone(), progress[i].clone());
            std::thread::spawn(move || {
                counting_client(fronts, format!("counter:{i}"), stop, progress)
            })
        })
        .collect();
    // The benchmark goes through a follower's front, which relays to whichever replica leads.
    let follower = all.into_iter().find(|&id| id != leader).expect("a follower");
    let benchmark = {
        let (address, stop) = (cluster.addresses[follower as usize].clone(), stop.clone());
        std::thread::spawn(move || benchmark_rounds(address, stop))
    };
    std::thread::sleep(Duration::from_millis(700));
    let load = |p: &Arc<AtomicI64>| p.load(Ordering::Relaxed);
    cluster.signal(leader, libc::SIGSTOP);
    // An effect the log will never hold: written straight into the stopped leader's own server
    // (still a master), whose replica cannot propose it. Once deposed, that server must start
    // over from the committed stream.
    let ahead = cluster.run_dir.join(format!("redis-server-{leader}.sock"));
    let mut ahead = Resp::connect(&ahead).expect("the stopped leader's own server");
    assert_eq!(
        ahead.call(&["SET", "ahead-of-the-log", "1"]).unwrap(),
        Value::Simple(b"OK".to_vec())
    );
    // Clients on the stopped leader's front wait (as Redis clients do, up to their timeout);
    // a client that comes to another front is served by the leader the others elect.
    let others: Vec<PathBuf> =
        all.iter().filter(|&&id| id != leader).map(|&id| cluster.front(id)).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut served_while_stopped = 0;
    while served_while_stopped < 10 {
        assert!(Instant::now() < deadline, "no front served while the leader was stopped");
        let served = others.iter().find_map(|f| {
            let mut c = Resp::connect(f).ok()?;
            // A relay to the stopped leader does not answer: another try soon.
            c.stream.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
            matches!(c.call(&["INCR", "probe"]), Ok(Value::Integer(_))).then_some(())
        });
        match served {
            Some(()) => served_while_stopped += 1,
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    cluster.signal(leader, libc::SIGCONT);
    // Every counting client is served again, wherever it waited.
    let at_continue: Vec<i64> = progress.iter().map(load).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while progress.iter().zip(&at_continue).any(|(p, &at)| load(p) <= at + 1) {
        assert!(Instant::now() < deadline, "no progress after the leader continued");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(700));
    stop.store(true, Ordering::Relaxed);
    let acknowledged: Vec<i64> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let (rounds, failure) = benchmark.join().unwrap();
    assert!(rounds > 0, "no redis-benchmark round completed; the last failure: {failure}");
    let now_leader = cluster.leader(&all, Duration::from_secs(30));
    let mut front = Resp::connect(&cluster.front(now_leader)).unwrap();
    for (i, &acked) in acknowledged.iter().enumerate() {
        assert_counter(&mut front, i, acked);
    }
    assert_eq!(front.call(&["EXISTS", "ahead-of-the-log"]).unwrap(), Value::Integer(0));
    cluster.converged(&all);
    for id in all {
        assert!(cluster.running(id), "replica {id} stopped: {}", cluster.stderr(id));
    }
    let log = cluster.stderr(leader);
    assert!(
        log.contains("its server starts over from the committed stream"),
        "the stopped leader's server was not rebuilt: {log}"
    );
}
