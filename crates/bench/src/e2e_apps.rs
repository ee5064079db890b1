//! `mu bench e2e`'s rows for an unmodified Redis and Memcached (`app = "redis"` and
//! `"memcached"`, `docs/apps/`): a small write (`SET`, `set`) and a read (`GET`, `get`) of
//! `--payload`-byte values over [`crate::kv_ops::KEYS`] keys, one at a time, timed from the
//! client, three ways:
//!
//! * `direct`: the bare server, started by the benchmark with no replication (Redis with no
//!   master; Memcached with the options every replica's server runs with).
//! * `relayed`: the same bare server through a plain byte relay ([`Relay`]): the hop a front
//!   adds (two more socket crossings, two thread wake-ups) and none of its work, so that the
//!   front's own cost is `front-unreplicated` over `relayed`.
//! * `front-unreplicated`: through the front of a one-replica cluster (`replicas = [0]`): the
//!   front and Mu's log, with no follower. What "replication off" means here: Mu has no switch
//!   that keeps the front and skips the log, so this is the front's own cost, and a commit that
//!   waits for no one.
//! * `replicated`: through the leader's front on a three-replica cluster (shared-memory fabric).
//!
//! All four over a Unix socket (the bare server's own, the relay's `relay.sock`, or the
//! front's `redis-N.sock` and `memcached-N.sock`), with the same client ([`AppConn`]), so the
//! rows compare.

use crate::interrupt;
use crate::kv_ops::timed_writes_and_reads;
use crate::relay::Relay;
use hdrhistogram::Histogram;
use mu_daemon::app_client::AppConn;
use mu_daemon::app_state::ExternalApp;
use mu_daemon::kv_cluster::{KvCluster, LogShape, REPLICAS};
use mu_figures::Progress;
use mu_procs::run_dir::RunDir;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The operations timed, in the order [`measure`] returns them.
pub const OPS: [&str; 2] = ["set", "get"];

/// How long a reply may take before the run fails (a stuck replica, say).
const REPLY_WAIT: Duration = Duration::from_secs(10);
/// How long a cluster may take to have a leader whose front serves.
const LEADER_WAIT: Duration = Duration::from_secs(30);
/// How long the same replica must lead, alone, before the client connects: elections flap
/// while replicas start on shared cores, and a leadership that ends closes or refuses its
/// clients.
const LEADER_STEADY: Duration = Duration::from_millis(500);
/// How many times a measurement through a front is begun before the run fails, should the
/// leadership move under it.
pub const ATTEMPTS: u32 = 3;

/// How the client reaches the application.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Way {
    Direct,
    Relayed,
    FrontUnreplicated,
    Replicated,
}

impl Way {
    pub const ALL: [Way; 4] = [Way::Direct, Way::Relayed, Way::FrontUnreplicated, Way::Replicated];

    pub fn name(self) -> &'static str {
        match self {
            Way::Direct => "direct",
            Way::Relayed => "relayed",
            Way::FrontUnreplicated => "front-unreplicated",
            Way::Replicated => "replicated",
        }
    }
}

/// A bare server of the benchmark's own, killed when dropped.
enum BareServer {
    Redis { _server: mu_redis::server::RedisServer },
    Memcached { _server: mu_memcached::server::MemcachedServer },
}

/// A client connected one way, and what it runs against. Fields drop in order: the client,
/// then the cluster or the relay and the server, then the server's run directory.
pub struct Connected {
    pub conn: AppConn,
    app: ExternalApp,
    /// The replicas of the cluster, if any.
    ids: Vec<u16>,
    cluster: Option<KvCluster>,
    _relay: Option<Relay>,
    _server: Option<BareServer>,
    _dir: Option<RunDir>,
}

impl Connected {
    /// Starts what `way` measures for `app`, with a log whose entries hold a write of
    /// `payload` bytes, and connects to it.
    pub fn start(app: ExternalApp, way: Way, payload: u32) -> Result<Connected, String> {
        let none = |conn| Connected {
            conn,
            app,
            ids: Vec::new(),
            cluster: None,
            _relay: None,
            _server: None,
            _dir: None,
        };
        match way {
            Way::Direct | Way::Relayed => {
                // The relayed way's run directory is the direct way's: they run one after the
                // other, never together.
                let dir = RunDir::create(&format!("e2e-{}", app.name()))?;
                let (server, socket) = start_bare(app, dir.path())?;
                let relay = match way {
                    Way::Relayed => Some(Relay::start(&dir.path().join("relay.sock"), &socket)?),
                    _ => None,
                };
                let socket = relay.as_ref().map_or(socket, |r| r.socket().to_path_buf());
                let conn = AppConn::connect_unix(app, 0, &socket, REPLY_WAIT)?;
                let (_relay, _server, _dir) = (relay, Some(server), Some(dir));
                Ok(Connected { _relay, _server, _dir, ..none(conn) })
            }
            Way::FrontUnreplicated | Way::Replicated => {
                let tag = format!("e2e-{}-{}", app.name(), way.name());
                let shape = log_shape(app, payload);
                let protocol = mu_replica::Protocol::Mu;
                let alone = way == Way::FrontUnreplicated;
                let mut cluster =
                    KvCluster::start_external_on_sockets(&tag, shape, protocol, app, alone)?;
                let ids: Vec<u16> = if alone { vec![0] } else { (0..REPLICAS).collect() };
                let conn = connect_to_steady_leader(&mut cluster, app, &ids)?;
                Ok(Connected { cluster: Some(cluster), ids, ..none(conn) })
            }
        }
    }

    /// Whether a failed measurement may be begun again: through a cluster whose replicas all
    /// run (the leadership may have moved), not on a bare server.
    pub fn may_retry(&mut self) -> bool {
        self.cluster.is_some() && self.check().is_ok()
    }

    /// Connects again, to the leader once it is steady.
    pub fn reconnect(&mut self) -> Result<(), String> {
        let cluster = self.cluster.as_mut().ok_or("a bare server has no leader")?;
        self.conn = connect_to_steady_leader(cluster, self.app, &self.ids)?;
        Ok(())
    }

    /// Fails if a replica died while measuring.
    pub fn check(&mut self) -> Result<(), String> {
        self.cluster.as_mut().map_or(Ok(()), KvCluster::check_alive)
    }
}

/// Starts `app`'s bare server in `dir`; returns it and its socket.
fn start_bare(
    app: ExternalApp,
    dir: &std::path::Path,
) -> Result<(BareServer, std::path::PathBuf), String> {
    let binary = app.server_binary();
    Ok(match app {
        ExternalApp::Redis => {
            let paths = mu_redis::server::ServerPaths::new(dir, 0);
            let server = mu_redis::server::RedisServer::start_alone(&binary, paths)?;
            let socket = server.paths.socket.clone();
            (BareServer::Redis { _server: server }, socket)
        }
        ExternalApp::Memcached => {
            let paths = mu_memcached::server::ServerPaths::new(dir, 0);
            let server = mu_memcached::server::MemcachedServer::start(&binary, paths)?;
            let socket = server.paths.socket.clone();
            (BareServer::Memcached { _server: server }, socket)
        }
    })
}

/// Waits until one replica among `ids` has led alone for [`LEADER_STEADY`] and connects to
/// its front.
fn connect_to_steady_leader(
    cluster: &mut KvCluster,
    app: ExternalApp,
    ids: &[u16],
) -> Result<AppConn, String> {
    let deadline = Instant::now() + LEADER_WAIT;
    let mut leader = cluster.wait_for_app_leader(app, ids, LEADER_WAIT)?;
    let mut since = Instant::now();
    while since.elapsed() < LEADER_STEADY {
        std::thread::sleep(Duration::from_millis(20));
        let left = deadline.saturating_duration_since(Instant::now());
        let now = cluster.wait_for_app_leader(app, ids, left)?;
        if now != leader {
            (leader, since) = (now, Instant::now());
        }
    }
    let socket = front_socket(app, cluster.run_dir(), leader);
    AppConn::connect_unix(app, leader, &socket, REPLY_WAIT)
}

/// The log of each replica: entries that hold a write of `payload` bytes as the log carries it
/// (Redis's effect, Memcached's request), at least the size `mu demo --app` runs with.
fn log_shape(app: ExternalApp, payload: u32) -> LogShape {
    let least = match app {
        ExternalApp::Redis => 4096,
        ExternalApp::Memcached => 16_408,
    };
    LogShape { slots: 4096, slot_bytes: (payload + 1024).next_multiple_of(8).max(least) }
}

/// Replica `id`'s front socket (which relays to the leader on a follower).
pub fn front_socket(app: ExternalApp, run_dir: &std::path::Path, id: u16) -> std::path::PathBuf {
    match app {
        ExternalApp::Redis => mu_redis::NodeConfig::front_socket(run_dir, id),
        ExternalApp::Memcached => mu_memcached::NodeConfig::front_socket(run_dir, id),
    }
}

/// Times `samples` sets, then `samples` gets (each after `warmup` untimed ones) over
/// [`crate::kv_ops::KEYS`] keys; every get must find the value that was set. Latencies in
/// nanoseconds, in the order of [`OPS`].
pub fn measure(
    conn: &mut AppConn,
    value: &[u8],
    samples: u64,
    warmup: u64,
    progress: &mut Progress,
) -> Result<[Histogram<u64>; 2], String> {
    timed_writes_and_reads((samples, warmup), progress, |write, key| {
        if write {
            return conn.set(key, value).map_err(|e| format!("set: {e}"));
        }
        let got = conn.get(key).map_err(|e| format!("get: {e}"))?;
        if got.as_deref() != Some(value) {
            return Err(format!(
                "get of {} returned {} bytes, not the value set",
                String::from_utf8_lossy(key),
                got.map_or(0, |g| g.len())
            ));
        }
        Ok(())
    })
}

/// Requests of each of the load tool's tests.
const TOOL_REQUESTS: u32 = 2000;
/// How long one run of the load tool may take.
const TOOL_WAIT: Duration = Duration::from_secs(60);

impl Connected {
    /// Runs the application's own load tool against the front this client talks to, one
    /// connection, one request at a time: `redis-benchmark -t set,get -n 2000 -c 1 -q` with
    /// `--payload`-byte values, or `memcslap` setting, then getting, 2000 keys with one thread.
    /// Its own figures, as an object with a `line` for the person reading; a tool that fails
    /// says so there (and in `ok`), without failing the benchmark.
    pub fn load_tool(&self, app: ExternalApp, payload: u32) -> serde_json::Value {
        let Some(cluster) = &self.cluster else {
            return serde_json::json!({"tool": app.tool(), "ok": false, "line": "no front"});
        };
        let socket = front_socket(app, cluster.run_dir(), self.conn.target);
        let requests = TOOL_REQUESTS.to_string();
        let runs: Vec<Command> = match app {
            ExternalApp::Redis => {
                let mut c = Command::new(app.tool());
                c.arg("-s").arg(&socket).args(["-t", "set,get", "-n", &requests, "-c", "1"]);
                c.args(["-d", &payload.to_string(), "-q"]);
                vec![c]
            }
            ExternalApp::Memcached => ["set", "get"]
                .iter()
                .map(|test| {
                    let mut c = Command::new(app.tool());
                    c.arg(format!("--servers={}", socket.display()))
                        .args(["--concurrency=1", &format!("--execute-number={requests}")])
                        .arg(format!("--test={test}"));
                    c
                })
                .collect(),
        };
        let mut figures = Vec::new();
        for mut run in runs {
            match run_tool(&mut run).and_then(|out| tool_figures(app, &out)) {
                Ok(mut f) => figures.append(&mut f),
                Err(e) => {
                    let line = format!("{} against the replicated front: failed: {e}", app.tool());
                    return serde_json::json!({"tool": app.tool(), "app": app.name(),
                                              "ok": false, "line": line});
                }
            }
        }
        let line = format!(
            "{} against the {} replicated front (its own figures, 1 connection): {}",
            app.tool(),
            app.name(),
            figures.iter().map(|(_, text)| text.as_str()).collect::<Vec<_>>().join("; ")
        );
        serde_json::json!({
            "tool": app.tool(), "app": app.name(), "ok": true, "line": line,
            "figures": figures.iter().map(|(op, text)| serde_json::json!({"op": op, "summary": text}))
                .collect::<Vec<_>>(),
        })
    }
}

/// Runs `command` to its end (at most [`TOOL_WAIT`]); its output, stdout then stderr.
fn run_tool(command: &mut Command) -> Result<String, String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "not installed (scripts/install-peers.sh)".into(),
            _ => format!("starting it: {e}"),
        })?;
    let deadline = Instant::now() + TOOL_WAIT;
    // The tools write little; their pipes never fill before they end.
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline && interrupt::check().is_ok() => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("stopped after {} s", TOOL_WAIT.as_secs()));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let last = text.lines().last().unwrap_or_default().to_string();
        return Err(format!("{}: {last}", out.status));
    }
    Ok(text)
}

/// The figures a tool's run printed, by operation: `redis-benchmark -q`'s lines ("SET:
/// 12345.67 requests per second, p50=0.167 msec"), or `memcslap`'s time for its test, as
/// microseconds an operation.
fn tool_figures(app: ExternalApp, output: &str) -> Result<Vec<(String, String)>, String> {
    let lines = output.split(['\r', '\n']).map(str::trim);
    let figures: Vec<(String, String)> = match app {
        ExternalApp::Redis => lines
            .filter(|l| l.contains(" requests per second"))
            .filter_map(|l| l.split_once(": ").map(|(op, _)| (op.to_lowercase(), l.into())))
            .collect(),
        ExternalApp::Memcached => {
            if let Some(error) = output.lines().find(|l| l.contains("Fatal error")) {
                return Err(error.into());
            }
            // "Time to set      2000 keys by    1 threads:     0.120 seconds."
            lines
                .filter(|l| l.starts_with("Time to set") || l.starts_with("Time to get"))
                .filter_map(|l| {
                    let words: Vec<&str> = l.split_whitespace().collect();
                    let keys: f64 = words.get(3)?.parse().ok()?;
                    let seconds: f64 = words.get(words.len().checked_sub(2)?)?.parse().ok()?;
                    (keys > 0.0 && l.contains(" by ")).then(|| {
                        let us = seconds * 1e6 / keys;
                        (words[2].to_string(), format!("{} {keys} keys, mean {us:.1} µs", words[2]))
                    })
                })
                .collect()
        }
    };
    if figures.is_empty() {
        return Err(format!("no figures in its output: {:?}", output.lines().last()));
    }
    Ok(figures)
}
