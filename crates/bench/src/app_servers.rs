//! The Redis and Memcached rows of `mu bench payload` (Mu paper §7.1, Figure 3): benchmark
//! replicas whose state machine is the project's own for that application, applying to a real,
//! unmodified server of their own, started in the cluster's run directory and stopped with the
//! replica (`docs/apps/redis.md`, `docs/apps/memcached.md`).
//!
//! What the leader proposes is what its front would: for Redis a `Leader` entry, then `Stream`
//! entries each holding the RESP of one `SET` (its pump's entries); for Memcached entries each
//! holding one `set` request. The payload is the value's size; the entry is some 40 bytes more
//! ([`entry_bytes`]).
//!
//! Redis: a follower's [`RedisMachine`] feeds its `redis-server`, a Redis replica of a master
//! this module runs ([`master::serve`], as `RedisNode` does). The leader has no server: its
//! entries are its own leadership's, which its server would have run before its pump proposed
//! them, and the benchmark proposes them directly; it applies them as a leader's machine does
//! (decoded, the stream's bytes appended), then drops the bytes. Memcached: every
//! replica, the leader included, applies each entry to its `memcached` ([`MemcachedMachine`]).

use mu_daemon::app_state::ExternalApp;
use mu_memcached::server::{MemcachedServer, ServerPaths as MemcachedPaths};
use mu_memcached::MemcachedMachine;
use mu_redis::entry::{Applier, Entry as RedisEntry, Leadership};
use mu_redis::master;
use mu_redis::server::{Conn as RedisConn, RedisServer, ServerPaths as RedisPaths};
use mu_redis::RedisMachine;
use mu_replica::StateMachine;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

/// The leadership of the benchmark's leader (replica 0), fixed: each cluster is fresh, and
/// replica 0 leads it throughout.
const LEADERSHIP: Leadership = Leadership { node: 0, term_ns: 1 };

/// Keys written in turn: the `i`-th value goes to key `i % KEYS`.
const KEYS: u64 = 1000;

/// How long a server may take to hold the last value once its replica applied the entry
/// before it (a Redis follower's server runs the stream fed to it asynchronously).
const REPLICATED_WAIT: Duration = Duration::from_secs(10);

/// A commit handler: applies entry `index` to the application.
pub type Handler = Box<dyn FnMut(u64, &[u8]) + Send>;

/// A replica's server, killed when dropped (and when the thread that started it ends).
pub enum Server {
    Redis(RedisServer),
    Memcached(MemcachedServer),
}

/// Fails, naming scripts/install-peers.sh, unless `app`'s server runs.
pub fn check_installed(app: ExternalApp) -> Result<(), String> {
    // Named by the rows that need it: `mu bench payload` and `mu bench replication --app`.
    app.check_installed(&format!("the {} rows", app.name()), false)
}

/// The key of the `i`-th value.
fn key(i: u64) -> Vec<u8> {
    format!("k{:03}", i % KEYS).into_bytes()
}

/// The `i`-th value, `payload_bytes` long: `i` in decimal, then `v`s (so that a stale value of
/// the same key differs from it, however short).
fn value_bytes(payload_bytes: usize, i: u64) -> Vec<u8> {
    let mut value = i.to_string().into_bytes();
    value.resize(payload_bytes.max(1), b'v');
    value
}

/// The `i`-th entry the leader proposes for `app`, with a value of `payload_bytes` (for Redis,
/// the 0-th is the leadership's `Leader` entry).
pub fn entry(app: ExternalApp, payload_bytes: usize, i: u64, out: &mut Vec<u8>) {
    out.clear();
    let (key, value) = (key(i), value_bytes(payload_bytes, i));
    match app {
        ExternalApp::Redis if i == 0 => RedisEntry::Leader(LEADERSHIP).encode(out),
        ExternalApp::Redis => {
            let mut set = Vec::with_capacity(payload_bytes + 32);
            mu_redis::resp::encode_command(&[b"SET", &key, &value], &mut set);
            RedisEntry::Stream(LEADERSHIP, &set).encode(out);
        }
        ExternalApp::Memcached => {
            let mut request = format!("set {} 0 0 {}\r\n", ascii(&key), value.len()).into_bytes();
            request.extend_from_slice(&value);
            request.extend_from_slice(b"\r\n");
            // Origin 0's incarnation 0 is no front's: every replica drops the reply, as the
            // ones no client of theirs waits for.
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let entry = mu_memcached::entry::Entry {
                origin: 0,
                incarnation: 0,
                seq: i,
                now_ms,
                request: &request,
            };
            entry.encode(out);
        }
    }
}

/// The size of a write's entry with a `payload_bytes` value.
pub fn entry_bytes(app: ExternalApp, payload_bytes: usize) -> usize {
    let mut out = Vec::new();
    entry(app, payload_bytes, 1, &mut out);
    out.len()
}

fn ascii(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("ASCII keys")
}

/// Replica `me`'s state machine for `app`, applying to a server of its own started in
/// `run_dir` (none for Redis's leader, see the module's comment), then calling
/// `applied(index)`. Call it from the thread that lives as long as the replica: the server
/// dies with it.
pub fn attach(
    app: ExternalApp,
    run_dir: &Path,
    me: u16,
    leads: bool,
    applied: impl Fn(u64) + Send + 'static,
) -> Result<(Handler, Option<Server>), String> {
    let binary = app.server_binary();
    match app {
        ExternalApp::Redis if leads => {
            let (mut applier, mut out) = (Applier::default(), Vec::new());
            let handler: Handler = Box::new(move |index, entry| {
                applier.apply(entry, &mut out);
                out.clear();
                applied(index);
            });
            Ok((handler, None))
        }
        ExternalApp::Redis => {
            // No history: a benchmark replica is never deposed, and it would only grow.
            let (machine, shared) = RedisMachine::new(false);
            let server = feed_redis(&binary, run_dir, me, shared)?;
            Ok((handler(machine, applied), Some(Server::Redis(server))))
        }
        ExternalApp::Memcached => {
            let server = MemcachedServer::start(&binary, MemcachedPaths::new(run_dir, me))?;
            let (machine, _) = MemcachedMachine::new(me, &server.paths.socket)?;
            Ok((handler(machine, applied), Some(Server::Memcached(server))))
        }
    }
}

fn handler(
    mut machine: impl StateMachine + 'static,
    applied: impl Fn(u64) + Send + 'static,
) -> Handler {
    Box::new(move |index, entry| {
        machine.apply(index, entry);
        applied(index);
    })
}

/// Starts replica `me`'s `redis-server` as a replica of a master fed by `shared`'s feed.
fn feed_redis(
    binary: &Path,
    run_dir: &Path,
    me: u16,
    shared: std::sync::Arc<mu_redis::node::NodeShared>,
) -> Result<RedisServer, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("master port: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    // Bound before the server starts: its link waits in the backlog until accepted.
    std::thread::Builder::new()
        .name("redis-master".into())
        .spawn(move || loop {
            // A link the server dropped before its answer ends `Ok`: it asks again.
            let served = listener.accept().map_err(|e| format!("master port: {e}")).and_then(
                |(stream, _)| master::serve(stream, &shared.feed, shared.feed.link_generation()),
            );
            // A broken link is a failure the benchmark sees as this replica's exit (its
            // message on stderr): the server would miss the stream from there.
            if let Err(why) = served {
                eprintln!("replica {me}: the feed to its redis-server stopped: {why}");
                std::process::exit(1);
            }
        })
        .map_err(|e| format!("starting the master's thread: {e}"))?;
    RedisServer::start(binary, RedisPaths::new(run_dir, me), port)
}

/// Waits until the servers of `nodes` in `run_dir` hold the `i`-th value of `payload_bytes`:
/// an error naming the first that does not within [`REPLICATED_WAIT`].
pub fn check_replicated(
    app: ExternalApp,
    run_dir: &Path,
    nodes: &[u16],
    payload_bytes: usize,
    i: u64,
) -> Result<(), String> {
    let (key, expected) = (key(i), value_bytes(payload_bytes, i));
    // One deadline for all: the benchmark's own stall timeout is not much longer.
    let deadline = Instant::now() + REPLICATED_WAIT;
    for &node in nodes {
        loop {
            let held = match app {
                ExternalApp::Redis => redis_get(run_dir, node, &key)?,
                ExternalApp::Memcached => memcached_get(run_dir, node, &key)?,
            };
            if held.as_deref() == Some(&expected[..]) {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "replica {node}'s {} does not hold the last value written ({}: {} bytes \
                     expected, {} held) {REPLICATED_WAIT:?} after the next value committed: \
                     replication did not reach the server",
                    app.name(),
                    ascii(&key),
                    expected.len(),
                    held.map_or("nothing".into(), |v| format!("{} bytes", v.len())),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Ok(())
}

fn redis_get(run_dir: &Path, node: u16, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let socket = RedisPaths::new(run_dir, node).socket;
    let mut conn = RedisConn::connect(&socket)
        .map_err(|e| format!("connecting to replica {node}'s redis-server: {e}"))?;
    match conn.call(&[b"GET", key])? {
        mu_redis::resp::Value::Bulk(value) => Ok(Some(value)),
        _ => Ok(None),
    }
}

fn memcached_get(run_dir: &Path, node: u16, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let socket = MemcachedPaths::new(run_dir, node).socket;
    let mut conn = mu_memcached::server::Conn::connect(&socket)
        .and_then(|c| c.with_timeout(REPLICATED_WAIT))
        .map_err(|e| format!("connecting to replica {node}'s memcached: {e}"))?;
    let units = conn.call(format!("get {}\r\n", ascii(key)).as_bytes())?;
    // `VALUE <key> <flags> <bytes>\r\n<data>\r\n`, then `END\r\n`.
    let value = units.first().and_then(|unit| {
        let line_end = unit.iter().position(|&b| b == b'\n')? + 1;
        unit.starts_with(b"VALUE ").then(|| unit[line_end..unit.len() - 2].to_vec())
    });
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_entries_are_a_leader_then_sets_of_the_payload() {
        let mut out = Vec::new();
        entry(ExternalApp::Redis, 64, 0, &mut out);
        assert_eq!(RedisEntry::decode(&out), Some(RedisEntry::Leader(LEADERSHIP)));
        entry(ExternalApp::Redis, 64, 1001, &mut out);
        let Some(RedisEntry::Stream(l, set)) = RedisEntry::decode(&out) else { panic!() };
        assert_eq!(l, LEADERSHIP);
        let mut expected = Vec::new();
        let value = value_bytes(64, 1001);
        assert_eq!((value.len(), &value[..5]), (64, &b"1001v"[..]));
        mu_redis::resp::encode_command(&[b"SET", b"k001", &value], &mut expected);
        assert_eq!(set, &expected[..]);
        assert_eq!(entry_bytes(ExternalApp::Redis, 64), out.len());
    }

    #[test]
    fn memcached_entries_are_sets_of_the_payload() {
        let mut out = Vec::new();
        entry(ExternalApp::Memcached, 32, 7, &mut out);
        let decoded = mu_memcached::entry::Entry::decode(&out).expect("an entry");
        let value = value_bytes(32, 7);
        let mut request = b"set k007 0 0 32\r\n".to_vec();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        assert_eq!(decoded.request, &request[..]);
        assert!(entry_bytes(ExternalApp::Memcached, 32) < 32 + 64);
    }
}
