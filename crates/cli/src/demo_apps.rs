//! `mu demo --app redis` and `mu demo --app memcached`: an unmodified Redis or Memcached
//! replicated by Mu or Velos. Three replica processes, each with its own server as a child;
//! the application's own load tool (`redis-benchmark`, `memcslap`) runs against a follower's
//! client port (followers relay to the leader), beside the demo's checking clients, which speak
//! RESP or memcached's text protocol to the leader's port and remember each acknowledged write;
//! the leader is killed; the checking clients go on through any live replica; then every
//! acknowledged key is read back and the live replicas' own servers are compared (Redis's
//! `DEBUG DIGEST`, or every item Memcached holds and the front's expiry table).

use crate::demo_shared::Shared;
use hdrhistogram::Histogram;
use mu_daemon::app_client::AppConn;
use mu_daemon::app_state::ExternalApp;
use mu_daemon::kv_cluster::{KvCluster, LogShape, REPLICAS};
use mu_procs::interrupt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a checking client waits for a connection to a replica.
const CONNECT_WAIT: Duration = Duration::from_secs(1);
/// How long a checking client waits for one reply before it gives the connection up.
const REPLY_WAIT: Duration = Duration::from_secs(5);
/// How long the live replicas' servers may take to agree after the run.
const CONVERGE_WAIT: Duration = Duration::from_secs(20);
/// Requests of each of `redis-benchmark`'s runs, per test: short runs (about half a second
/// here), started again until the demo ends, so that one cut by the failover costs little and
/// every finished one prints its summary.
const REDIS_BENCHMARK_REQUESTS: u32 = 2000;
/// The same for `memcslap`, per connection (of 4): it goes about half as fast.
const MEMCSLAP_REQUESTS: u32 = 200;

/// What `mu demo --app redis|memcached` runs.
pub(crate) struct AppDemo {
    pub app: ExternalApp,
    pub protocol: mu_replica::Protocol,
    pub seconds: f64,
    pub clients: u16,
    pub keys: u32,
    pub json: bool,
}

/// The load tool's runs, as the tool thread counts them.
#[derive(Default)]
struct ToolStats {
    runs_done: AtomicU64,
    runs_failed: AtomicU64,
    /// Requests of the finished runs, as the tool reports them.
    operations: AtomicU64,
    /// The latest finished run's summary line, as the tool printed it.
    summary: Mutex<String>,
    /// The first failed run's last line of output.
    first_failure: Mutex<Option<String>>,
}

/// Runs the demo (see the module docs); an error if it could not, or if an acknowledged write
/// was lost (after the summary).
pub(crate) fn run(demo: AppDemo) -> Result<(), String> {
    interrupt::catch();
    let mut cluster = start_cluster(&demo)?;
    let start = Instant::now();
    let all: Vec<u16> = (0..REPLICAS).collect();
    let leader = cluster.wait_for_app_leader(demo.app, &all, Duration::from_secs(30))?;
    note!(
        "mu demo: replica {leader} is the leader ({} ms after start)",
        start.elapsed().as_millis()
    );
    let addresses = cluster.client_addresses();
    let follower = addresses.iter().find(|(id, _)| *id != leader).ok_or("no follower")?.clone();

    let shared = Arc::new(Shared::new());
    let stats = Arc::new(ToolStats::default());
    let workers = start_clients(&demo, &shared, &addresses, leader);
    let tool_thread = {
        let (shared, stats, app) = (shared.clone(), stats.clone(), demo.app);
        let out = cluster.run_dir().join("tool.out");
        std::thread::spawn(move || tool_loop(app, &follower.1, &out, &shared, &stats))
    };
    let phase = Duration::from_secs_f64(demo.seconds);
    let result = (|| -> Result<u16, String> {
        crate::demo_shared::watch(&shared, &mut cluster, start, phase, "before the kill")?;
        // The leader now, should leadership have moved under the load (the checking clients
        // then reach it through the others' relays).
        let leader = cluster.wait_for_app_leader(demo.app, &all, Duration::from_secs(5))?;
        shared.clock.killing(leader);
        cluster.kill(leader)?;
        note!("\nmu demo: killed the leader, replica {leader} (SIGKILL)");
        crate::demo_shared::watch(&shared, &mut cluster, start, phase, "after the kill")?;
        Ok(leader)
    })();
    shared.stop.store(true, Ordering::Release);
    for w in workers {
        let _ = w.join();
    }
    let _ = tool_thread.join();
    note!();
    let killed = result?;
    let Some(failover_ns) = shared.clock.failover_ns() else {
        return Err("no operation completed after the leader was killed".into());
    };
    let live: Vec<u16> = all.iter().copied().filter(|&id| id != killed).collect();
    let (checked, lost) = read_back_acknowledged(demo.app, &shared, &addresses, &live)?;
    let digests = wait_for_same_state(demo.app, cluster.run_dir(), &live)?;
    let outcome = Outcome { killed, failover_us: failover_ns / 1000, checked, lost };
    print_summary(&demo, &shared, &stats, &outcome, &digests);
    if !outcome.lost.is_empty() {
        let lost = &outcome.lost;
        return Err(format!("{} acknowledged writes lost: {}", lost.len(), lost.join("; ")));
    }
    Ok(())
}

/// Checks that the application's server and load tool are installed, and starts the cluster.
fn start_cluster(demo: &AppDemo) -> Result<KvCluster, String> {
    // The replicas take the server from the environment when it names one, as this does.
    demo.app.check_installed(&format!("mu demo --app {}", demo.app.name()), true)?;
    let slot_bytes = match demo.app {
        ExternalApp::Redis => 4096,
        // Memcached's largest request in one entry: the tests' size.
        ExternalApp::Memcached => 16_408,
    };
    let shape = LogShape { slots: 4096, slot_bytes };
    let cluster = KvCluster::start_external("demo", shape, demo.protocol, demo.app)?;
    note!(
        "mu demo: 3 replica processes ({}, {}: each with its own {}) on the shared-memory \
         fabric, clients over TCP on loopback, run directory {}",
        demo.protocol.name(),
        demo.app.name(),
        demo.app.server_binary().display(),
        cluster.run_dir().display()
    );
    Ok(cluster)
}

/// The checking clients, each on its own keys, starting at the leader's port.
fn start_clients(
    demo: &AppDemo,
    shared: &Arc<Shared>,
    addresses: &[(u16, String)],
    leader: u16,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..usize::from(demo.clients))
        .map(|t| {
            let (shared, addresses) = (shared.clone(), addresses.to_vec());
            let (app, keys) = (demo.app, demo.keys as usize);
            std::thread::spawn(move || checking_client(t, app, keys, &addresses, leader, &shared))
        })
        .collect()
}

/// A connection to the first replica, from `first` on in turn, that takes one.
fn connect_any(app: ExternalApp, addresses: &[(u16, String)], first: usize) -> Option<AppConn> {
    (0..addresses.len()).find_map(|i| {
        let (id, address) = &addresses[(first + i) % addresses.len()];
        AppConn::connect_tcp(app, *id, address, (CONNECT_WAIT, REPLY_WAIT)).ok()
    })
}

/// One checking client: sets and gets its own keys until told to stop, remembering each key's
/// last acknowledged value (and the values whose outcome it does not know); on an error it
/// goes to another replica.
fn checking_client(
    t: usize,
    app: ExternalApp,
    keys: usize,
    addresses: &[(u16, String)],
    leader: u16,
    shared: &Shared,
) {
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
    let mut next = addresses.iter().position(|(id, _)| *id == leader).unwrap_or(0);
    let mut conn: Option<AppConn> = None;
    let mut n: u64 = 0;
    while !shared.stop.load(Ordering::Acquire) {
        let Some(c) = conn.as_mut() else {
            conn = connect_any(app, addresses, next);
            if conn.is_none() {
                std::thread::sleep(Duration::from_millis(1));
            }
            continue;
        };
        n += 1;
        // Each key is set and then read back by the next operation; the keys go round in turn.
        let key = format!("demo:c{t}:k{}", ((n - 1) / 2) as usize % keys);
        let set = n % 2 == 1;
        let value = format!("c{t}-v{n}");
        let began = Instant::now();
        let outcome = if set {
            c.set(key.as_bytes(), value.as_bytes()).map(|()| None)
        } else {
            c.get(key.as_bytes())
        };
        let done = shared.clock.now_ns();
        match outcome {
            Ok(_) => {
                h.saturating_record(began.elapsed().as_nanos() as u64);
                shared.ops.fetch_add(1, Ordering::Relaxed);
                shared.clock.answered(c.target, done);
                if set {
                    let mut truth = shared.truth.lock().unwrap_or_else(|p| p.into_inner());
                    let k = truth.entry(key.into_bytes()).or_default();
                    k.acked = Some(value.into_bytes());
                    k.unknown.clear();
                }
            }
            Err(_) => {
                shared.errors.fetch_add(1, Ordering::Relaxed);
                if set {
                    // Lost with the connection, or refused: it may still have been committed.
                    let mut truth = shared.truth.lock().unwrap_or_else(|p| p.into_inner());
                    truth.entry(key.into_bytes()).or_default().unknown.push(value.into_bytes());
                }
                next = addresses.iter().position(|(id, _)| *id == c.target).unwrap_or(0) + 1;
                conn = None;
            }
        }
        if n % 64 == 0 {
            shared.latency.lock().unwrap_or_else(|p| p.into_inner()).add(&h).ok();
            h.reset();
        }
    }
    shared.latency.lock().unwrap_or_else(|p| p.into_inner()).add(&h).ok();
}

/// Runs the load tool against `address` again and again until `shared.stop`, counting what
/// each run reports; a run still going at the end is stopped (and counted as neither).
fn tool_loop(app: ExternalApp, address: &str, out: &Path, shared: &Shared, stats: &ToolStats) {
    let (host, port) = address.rsplit_once(':').unwrap_or((address, ""));
    let mut run = 0u64;
    while !shared.stop.load(Ordering::Acquire) {
        run += 1;
        let mut command = tool_command(app, host, port, run);
        let Some((success, output)) = run_until_stopped(&mut command, out, shared) else { break };
        match parse_tool_output(app, &output) {
            Some((operations, summary)) if success => {
                stats.runs_done.fetch_add(1, Ordering::Relaxed);
                stats.operations.fetch_add(operations, Ordering::Relaxed);
                *stats.summary.lock().unwrap_or_else(|p| p.into_inner()) = summary;
            }
            _ => {
                stats.runs_failed.fetch_add(1, Ordering::Relaxed);
                let mut first = stats.first_failure.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert_with(|| failure_line(&output));
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// What a failed run said: its first line that names an error, else its last line
/// (`redis-benchmark`'s progress lines end in carriage returns).
fn failure_line(output: &str) -> String {
    let lines: Vec<&str> =
        output.split(['\r', '\n']).map(str::trim).filter(|l| !l.is_empty()).collect();
    let error = lines.iter().find(|l| l.to_ascii_lowercase().contains("error"));
    error.or(lines.last()).map_or_else(String::new, |l| l.to_string())
}

/// The tool's command line for run number `run`: `redis-benchmark` with SET, GET and INCR on a
/// keyspace of 10000 keys, 4 connections pipelining 4 requests each; `memcslap` with 4
/// connections, setting on odd runs and getting on even ones.
fn tool_command(app: ExternalApp, host: &str, port: &str, run: u64) -> Command {
    match app {
        ExternalApp::Redis => {
            let requests = REDIS_BENCHMARK_REQUESTS.to_string();
            let mut c = Command::new("redis-benchmark");
            c.args(["-h", host, "-p", port, "-t", "set,get,incr", "-r", "10000"])
                .args(["-n", &requests, "-c", "4", "-P", "4", "-q"]);
            c
        }
        ExternalApp::Memcached => {
            let mut c = Command::new("memcslap");
            let requests = MEMCSLAP_REQUESTS.to_string();
            let test = if run % 2 == 1 { "set" } else { "get" };
            c.arg(format!("--servers={host}:{port}"))
                .args(["--concurrency=4", &format!("--execute-number={requests}")])
                .arg(format!("--test={test}"));
            c
        }
    }
}

/// Runs `command` with its output in the file `out`, stopping it if `shared.stop` is set first:
/// whether it succeeded, and its output; `None` if it was stopped or did not start.
fn run_until_stopped(command: &mut Command, out: &Path, shared: &Shared) -> Option<(bool, String)> {
    let file = std::fs::File::create(out).ok()?;
    let err = file.try_clone().ok()?;
    let mut child = command.stdin(Stdio::null()).stdout(file).stderr(err).spawn().ok()?;
    let status = loop {
        if shared.stop.load(Ordering::Acquire) {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => return None,
        }
    };
    let output = std::fs::read(out).ok()?;
    Some((status.success(), String::from_utf8_lossy(&output).into_owned()))
}

/// The requests a finished run reports, and its summary as one line; `None` for a run that
/// did not finish every test or reported errors.
fn parse_tool_output(app: ExternalApp, output: &str) -> Option<(u64, String)> {
    match app {
        ExternalApp::Redis => {
            // `-q` prints "SET: 12345.67 requests per second, p50=0.167 msec" per test, after
            // progress lines that end in carriage returns.
            let lines: Vec<&str> = output
                .split(['\r', '\n'])
                .map(str::trim)
                .filter(|l| l.contains(" requests per second"))
                .collect();
            (lines.len() == 3).then(|| (3 * u64::from(REDIS_BENCHMARK_REQUESTS), lines.join("; ")))
        }
        ExternalApp::Memcached => {
            if output.contains("Fatal error") || output.contains("Failure") {
                return None;
            }
            // "Time to set      2000 keys by    4 threads:     0.120 seconds." (a get run
            // first sets the keys it gets).
            let mut operations = 0;
            let mut summary = Vec::new();
            for line in output
                .lines()
                .filter(|l| l.starts_with("Time to set") || l.starts_with("Time to get"))
            {
                let words: Vec<&str> = line.split_whitespace().collect();
                operations += words.get(3)?.parse::<u64>().ok()?;
                summary.push(words.join(" "));
            }
            (operations > 0).then(|| (operations, summary.join("; ")))
        }
    }
}

/// Reads every key the checking clients wrote back through the live replicas: how many it
/// checked, and each one that does not hold its last acknowledged value (or a value whose
/// write's outcome is unknown).
fn read_back_acknowledged(
    app: ExternalApp,
    shared: &Shared,
    addresses: &[(u16, String)],
    live: &[u16],
) -> Result<(usize, Vec<String>), String> {
    let truth = shared.truth.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let live: Vec<(u16, String)> =
        addresses.iter().filter(|(id, _)| live.contains(id)).cloned().collect();
    let mut reader = connect_any(app, &live, 0).ok_or("no live replica takes a connection")?;
    let mut lost = Vec::new();
    for (key, t) in &truth {
        let key = String::from_utf8_lossy(key).into_owned();
        let got = reader.get(key.as_bytes()).map_err(|e| format!("reading back {key}: {e}"))?;
        let ok = got == t.acked || got.as_ref().is_some_and(|g| t.unknown.contains(g));
        if !ok {
            lost.push(format!(
                "key {key} holds {:?}, its last acknowledged value is {:?}",
                got.as_deref().map(String::from_utf8_lossy),
                t.acked.as_deref().map(String::from_utf8_lossy)
            ));
        }
    }
    Ok((truth.len(), lost))
}

/// Waits until the live replicas' own servers hold the same state (followers apply a moment
/// after the leader); their digests.
fn wait_for_same_state(
    app: ExternalApp,
    run_dir: &Path,
    live: &[u16],
) -> Result<Vec<String>, String> {
    let deadline = Instant::now() + CONVERGE_WAIT;
    loop {
        interrupt::check()?;
        let digests: Vec<std::io::Result<String>> =
            live.iter().map(|&id| app.state_digest(run_dir, id)).collect();
        if let Ok(first) = &digests[0] {
            if digests.iter().all(|d| matches!(d, Ok(d) if d == first)) {
                return Ok(digests.into_iter().map(Result::unwrap_or_default).collect());
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the live replicas' servers differ after {} s: {digests:?}",
                CONVERGE_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What the run found.
struct Outcome {
    killed: u16,
    failover_us: u64,
    checked: usize,
    lost: Vec<String>,
}

/// The demo's outcome: one JSON object, or a few lines for a person.
fn print_summary(
    demo: &AppDemo,
    shared: &Shared,
    stats: &ToolStats,
    outcome: &Outcome,
    digests: &[String],
) {
    let h = shared.latency.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let checking_ops = shared.ops.load(Ordering::Relaxed);
    let tool_ops = stats.operations.load(Ordering::Relaxed);
    let ops = checking_ops + tool_ops;
    let elapsed = 2.0 * demo.seconds;
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let tool = demo.app.tool();
    let summary = stats.summary.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let first_failure = stats.first_failure.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let (runs_done, runs_failed) =
        (stats.runs_done.load(Ordering::Relaxed), stats.runs_failed.load(Ordering::Relaxed));
    if demo.json {
        let json = serde_json::json!({
            "protocol": demo.protocol.name(),
            "app": demo.app.name(),
            "transport": "tcp",
            "reads": "log",
            "replicas": REPLICAS,
            "clients": demo.clients,
            "operations": ops,
            "checking_operations": checking_ops,
            "errors": shared.errors.load(Ordering::Relaxed),
            "ops_per_s": ops as f64 / elapsed,
            "latency_us": {"p50": us(0.5), "p90": us(0.9), "p99": us(0.99), "p999": us(0.999),
                            "max": h.max() as f64 / 1000.0},
            "killed_leader": outcome.killed,
            "failover_us": outcome.failover_us,
            "acknowledged_keys_checked": outcome.checked,
            "lost_writes": outcome.lost.len(),
            "digests": digests,
            "tool": {"name": tool, "runs": runs_done, "failed_runs": runs_failed,
                     "operations": tool_ops, "summary": summary,
                     "first_failure": first_failure},
        });
        println!("{json}");
        return;
    }
    println!("mu demo summary ({}, {})", demo.protocol.name(), demo.app.name());
    println!(
        "  operations     {ops} in {elapsed:.1} s ({:.0} ops/s): {checking_ops} from {} checking \
         clients ({} errors), {tool_ops} from {tool}",
        ops as f64 / elapsed,
        demo.clients,
        shared.errors.load(Ordering::Relaxed)
    );
    println!(
        "  latency        checking clients: p50 {:.1} µs, p90 {:.1} µs, p99 {:.1} µs, p99.9 \
         {:.1} µs, max {:.1} µs",
        us(0.5),
        us(0.9),
        us(0.99),
        us(0.999),
        h.max() as f64 / 1000.0
    );
    let latest = if summary.is_empty() { "none finished".to_string() } else { summary };
    println!(
        "  {tool:<14} {runs_done} runs finished, {runs_failed} cut short; the latest: {latest}"
    );
    if let Some(failure) = first_failure {
        println!("  {:<14} the first run cut short ended with: {failure}", "");
    }
    println!(
        "  failover       leader {} killed; clients served again after {:.3} ms",
        outcome.killed,
        outcome.failover_us as f64 / 1000.0
    );
    println!(
        "  durability     {} keys read back: {} acknowledged writes lost",
        outcome.checked,
        outcome.lost.len()
    );
    println!("  state          live replicas' servers: {}", digests.join(" = "));
}
