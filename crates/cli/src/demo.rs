//! `mu demo`: a replicated key-value cluster in one command.
//!
//! Three `mu replica` processes on the shared-memory fabric, in a private run directory; client
//! threads put and get keys through the client library for a few seconds with a live progress
//! line; the leader is killed (SIGKILL); the clients carry on with the new leader; then every
//! acknowledged write is read back, the live replicas' state digests are compared, and a
//! summary with latency percentiles is printed. Nothing is left behind: the processes die with
//! the demo (also on Ctrl-C, and if a replica dies unexpectedly the demo stops with an error),
//! and the run directory and its shared memory are removed.
//!
//! `mu demo --protocol ukharon-kv` runs the same demo on uKharon-KV: three replica processes
//! and three coordinators, the view's primary killed, a backup taking over in the next view.
//!
//! `mu demo --reads lease` (with Mu or Velos) runs beside three uKharon coordinators, the
//! leader appointed from the group's views and answering GETs from its own store.
//!
//! `mu demo --app orderbook` (with Mu or Velos) replicates the order book instead: the client
//! threads are traders sending a random order flow (`demo_orderbook`).
//!
//! `mu demo --app redis` and `mu demo --app memcached` (with Mu or Velos) replicate an
//! unmodified Redis or Memcached instead: the application's own load tool and checking clients
//! speaking its protocol (`demo_apps`).
//!
//! `mu demo --protocol ukharon` is the membership service's demo instead (`mu ukharon demo`):
//! coordinators and members as processes, one member killed, the new view and how long it took.

use crate::demo_shared::{watch, Shared};
use hdrhistogram::Histogram;
use mu_daemon::kv_cluster::{KvCluster, LogShape, REPLICAS};
use mu_daemon::kv_failover::leader_serving_clients;
use mu_procs::interrupt;
use mu_service::{Client, ClientError, ClusterConfig};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest phase the demo runs.
const SECONDS_MAX: f64 = 86_400.0;
/// The shortest: a failover alone takes milliseconds, and a rate over less says nothing.
const SECONDS_MIN: f64 = 0.1;
/// The most client threads (each a thread and a connection to every replica).
const CLIENTS_MAX: i64 = 1024;
/// The most keys per client (the demo keeps each key's acknowledged values in memory).
const KEYS_MAX: i64 = 1_000_000;

/// `--seconds`: a finite number of seconds from [`SECONDS_MIN`] to [`SECONDS_MAX`].
fn seconds(text: &str) -> Result<f64, String> {
    let s: f64 = text.trim().parse().map_err(|_| format!("{text:?} is not a number"))?;
    if !s.is_finite() || !(SECONDS_MIN..=SECONDS_MAX).contains(&s) {
        return Err(format!("{text} is out of range: give {SECONDS_MIN} to {SECONDS_MAX} (a day)"));
    }
    Ok(s)
}

#[derive(clap::Args)]
pub struct Args {
    /// Seconds of workload before the leader is killed, and again after (0.1 to 86400;
    /// default 3).
    #[arg(long, value_parser = seconds, allow_negative_numbers = true)]
    seconds: Option<f64>,
    /// Client threads (1 to 1024; default 4).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=CLIENTS_MAX))]
    clients: Option<u16>,
    /// Keys each client writes (1 to 1000000; default 16).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=KEYS_MAX))]
    keys: Option<u32>,
    /// Print the summary as JSON (the progress line still goes to stderr).
    #[arg(long)]
    json: bool,
    /// The replication engine, mu or velos, or ukharon-kv (primary-backup under uKharon's
    /// views); or ukharon, the membership service's demo (`mu ukharon demo`, which takes none
    /// of the options above but --json).
    #[arg(long, default_value = "mu", value_parser = demo_protocol)]
    protocol: DemoProtocol,
    /// Mu and Velos: how GETs are answered, "log" or "lease" (the leader of a uKharon group's
    /// active view answers them from its store; three coordinators run besides).
    #[arg(long, default_value = "log", value_parser = ["log", "lease"])]
    reads: String,
    /// What the cluster replicates: "kv" (the key-value store), "orderbook" (the order
    /// matching engine), or an unmodified "redis" or "memcached" (each replica with its own
    /// redis-server or memcached; redis-benchmark or memcslap runs against a follower's port
    /// beside the demo's checking clients). All but kv: Mu or Velos, reads through the log;
    /// redis and memcached: clients over TCP on loopback, --transport and --reads not taken.
    #[arg(long, default_value = "kv", value_parser = ["kv", "orderbook", "redis", "memcached"])]
    app: String,
    /// How the clients reach the replicas: "socket" (Unix sockets) or "fabric" (request rings
    /// over the shared-memory fabric, joined through the socket; Mu and Velos, reads through
    /// the log).
    #[arg(long, default_value = "socket", value_parser = ["socket", "fabric"])]
    transport: String,
}

/// What `mu demo` shows: a key-value cluster on a replication engine, or uKharon.
#[derive(Clone, Copy)]
enum DemoProtocol {
    Replica(mu_replica::Protocol),
    UkharonKv,
    Ukharon,
}

fn demo_protocol(text: &str) -> Result<DemoProtocol, String> {
    match text {
        "ukharon" => Ok(DemoProtocol::Ukharon),
        mu_service::config::UKHARON_KV => Ok(DemoProtocol::UkharonKv),
        other => other.parse().map(DemoProtocol::Replica).map_err(|_| {
            format!(
                "unknown protocol {other:?}: expected \"mu\", \"velos\", \"ukharon-kv\" or \
                 \"ukharon\""
            )
        }),
    }
}

/// `mu demo --protocol ukharon`: the membership demo, which has no clients, keys or phases, so
/// an option given for them is refused rather than ignored.
fn ukharon(args: &Args) -> Result<(), String> {
    let given = [
        ("--seconds", args.seconds.is_some()),
        ("--clients", args.clients.is_some()),
        ("--keys", args.keys.is_some()),
        ("--app", args.app != "kv"),
    ];
    if let Some((option, _)) = given.iter().find(|(_, given)| *given) {
        return Err(format!(
            "{option} is an option of the key-value demo: `mu demo --protocol ukharon` takes \
             only --json"
        ));
    }
    mu_daemon::ukharon::demo::demo(&mu_daemon::ukharon::demo::DemoArgs { json: args.json })
}

pub fn run(args: Args) -> Result<(), String> {
    let leased = args.reads == "lease";
    let protocol = match args.protocol {
        DemoProtocol::Replica(protocol) => Some(protocol),
        DemoProtocol::UkharonKv | DemoProtocol::Ukharon if leased => {
            return Err("--reads lease: for --protocol mu or velos (uKharon-KV's primary always \
                        reads locally)"
                .into())
        }
        DemoProtocol::UkharonKv => None,
        DemoProtocol::Ukharon => return ukharon(&args),
    };
    if let Some(app) = external_app(&args.app) {
        return crate::demo_apps::run(app_settings(&args, app, protocol)?);
    }
    let kv = settings(&args, protocol, leased)?;
    let orderbook = kv.app == "orderbook";
    let (seconds, clients, keys) = (kv.seconds, kv.clients, kv.keys);
    interrupt::catch();
    let mut cluster = start_cluster(&kv, protocol)?;
    let start = Instant::now();
    let leader = cluster.wait_for_leader(Duration::from_secs(10))?;
    // uKharon-KV's views name a primary, which serves as a leader does.
    let leads = if protocol.is_some() { "leader" } else { "primary" };
    note!(
        "mu demo: replica {leader} is the {leads} ({} ms after start)",
        start.elapsed().as_millis()
    );
    let config = cluster.config.clone();

    let shared = Arc::new(Shared::new());
    let workers = start_clients(&shared, &config, clients, keys, orderbook);
    let phase = Duration::from_secs_f64(seconds);
    let result = (|| -> Result<u16, String> {
        watch(&shared, &mut cluster, start, phase, "before the kill")?;
        let leader = leader_serving_clients(&shared.clock, &cluster)?;
        shared.clock.killing(leader);
        cluster.kill(leader)?;
        note!("\nmu demo: killed the {leads}, replica {leader} (SIGKILL)");
        watch(&shared, &mut cluster, start, phase, "after the kill")?;
        Ok(leader)
    })();
    shared.stop.store(true, Ordering::Release);
    for w in workers {
        let _ = w.join();
    }
    note!();
    let killed = result?;
    let Some(failover_ns) = shared.clock.failover_ns() else {
        return Err(format!("no operation completed after the {leads} was killed"));
    };
    let failover_us = failover_ns / 1000;

    // Every acknowledged write is there: read each key back through the log (or, for the
    // order book, every accepted order's id is known to it).
    let checked = if orderbook {
        crate::demo_orderbook::check_acknowledged(&shared, &config)?
    } else {
        read_back_acknowledged(&shared, &config)?
    };
    // The live replicas end in the same state.
    let digests = wait_for_same_state(&config, killed, Duration::from_secs(10))?;
    print_summary(&kv, &shared, killed, failover_us, checked, &digests);
    Ok(())
}

fn external_app(app: &str) -> Option<mu_daemon::app_state::ExternalApp> {
    use mu_daemon::app_state::ExternalApp;
    match app {
        "redis" => Some(ExternalApp::Redis),
        "memcached" => Some(ExternalApp::Memcached),
        _ => None,
    }
}

/// `mu demo --app redis|memcached`'s settings; an error for a combination it does not run
/// (the applications' fronts are built for Mu and Velos with reads through the log, and serve
/// their own protocols over TCP).
fn app_settings(
    args: &Args,
    app: mu_daemon::app_state::ExternalApp,
    protocol: Option<mu_replica::Protocol>,
) -> Result<crate::demo_apps::AppDemo, String> {
    let Some(protocol) = protocol else {
        return Err(format!(
            "--app {}: for --protocol mu or velos (uKharon-KV replicates the key-value store only)",
            app.name()
        ));
    };
    if args.reads != "log" || args.transport != "socket" {
        return Err(format!(
            "--app {}: reads go through the log and clients connect over TCP: --reads and --transport are not taken",
            app.name()
        ));
    }
    Ok(crate::demo_apps::AppDemo {
        app,
        protocol,
        seconds: args.seconds.unwrap_or(3.0),
        clients: args.clients.unwrap_or(4),
        keys: args.keys.unwrap_or(16),
        json: args.json,
    })
}

/// The demo's settings, defaults filled in; an error for a combination it does not run.
fn settings(
    args: &Args,
    protocol: Option<mu_replica::Protocol>,
    leased: bool,
) -> Result<KvDemo, String> {
    let orderbook = args.app == "orderbook";
    let over_fabric = args.transport == "fabric";
    if over_fabric && (protocol.is_none() || leased) {
        return Err(
            "--transport fabric: for --protocol mu or velos with reads through the log".into()
        );
    }
    if orderbook && (protocol.is_none() || leased || args.keys.is_some()) {
        return Err("--app orderbook: for --protocol mu or velos with reads through the log, \
                    and without --keys (traders send orders, not keys)"
            .into());
    }
    Ok(KvDemo {
        app: if orderbook { "orderbook" } else { "kv" },
        transport: if over_fabric { "fabric" } else { "socket" },
        protocol: protocol.map_or(mu_service::config::UKHARON_KV, |p| p.name()),
        reads: match (protocol, leased) {
            (None, _) => "primary",
            (Some(_), true) => "lease",
            (Some(_), false) => "log",
        },
        seconds: args.seconds.unwrap_or(3.0),
        clients: args.clients.unwrap_or(4),
        keys: args.keys.unwrap_or(16),
        json: args.json,
    })
}

/// The client threads: key-value clients or traders, until `shared.stop`.
fn start_clients(
    shared: &Arc<Shared>,
    config: &ClusterConfig,
    clients: u16,
    keys: u32,
    orderbook: bool,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..usize::from(clients))
        .map(|t| {
            let (shared, config) = (shared.clone(), config.clone());
            let keys = keys as usize;
            std::thread::spawn(move || {
                if orderbook {
                    crate::demo_orderbook::trader_loop(t, &config, &shared)
                } else {
                    client_loop(t, keys, &config, &shared)
                }
            })
        })
        .collect()
}

/// Reads every key the clients wrote back through the log, and fails on one that does not hold
/// its last acknowledged value (or a value whose write's outcome is unknown); how many it
/// checked.
fn read_back_acknowledged(shared: &Shared, config: &ClusterConfig) -> Result<usize, String> {
    let truth = shared.truth.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut reader =
        Client::new(config.cluster_id, config.endpoints()).map_err(|e| e.to_string())?;
    let mut checked = 0;
    for (key, t) in &truth {
        let got = reader.get(key).map_err(|e| format!("reading back {:?}: {e}", lossy(key)))?;
        let ok = got == t.acked || got.as_ref().is_some_and(|g| t.unknown.contains(g));
        if !ok {
            return Err(format!(
                "LOST WRITE: key {:?} holds {:?}, its last acknowledged value is {:?}",
                lossy(key),
                got.as_deref().map(lossy),
                t.acked.as_deref().map(lossy)
            ));
        }
        checked += 1;
    }
    Ok(checked)
}

/// The key-value demo's settings, defaults filled in.
/// Starts the demo's cluster (`protocol` none: uKharon-KV) and says so.
fn start_cluster(kv: &KvDemo, protocol: Option<mu_replica::Protocol>) -> Result<KvCluster, String> {
    let shape = LogShape { slots: 4096, slot_bytes: 1024 };
    let leased = kv.reads == "lease";
    let orderbook = kv.app == "orderbook";
    let cluster = match protocol {
        Some(protocol) if kv.transport == "fabric" => {
            KvCluster::start_over_fabric("demo", shape, protocol, orderbook)?
        }
        Some(protocol) if orderbook => KvCluster::start_orderbook("demo", shape, protocol)?,
        Some(protocol) if leased => KvCluster::start_leased("demo", shape, protocol)?,
        Some(protocol) => KvCluster::start("demo", shape, protocol)?,
        // Each backup holds a ring of the records it has not applied yet, each primary one per
        // backup for records too long to write inline: a few hundred is plenty here.
        None => KvCluster::start_ukharon_kv("demo", LogShape { slots: 256, slot_bytes: 1024 })?,
    };
    let coordinators = match protocol {
        Some(_) if !leased => "",
        _ => " and 3 uKharon coordinators",
    };
    note!(
        "mu demo: 3 replica processes ({}, {}, clients over the {}){coordinators} on the \
         shared-memory fabric, run directory {}",
        kv.protocol,
        kv.app,
        kv.transport,
        cluster.run_dir().display()
    );
    Ok(cluster)
}

struct KvDemo {
    /// "kv" or "orderbook".
    app: &'static str,
    /// "socket" or "fabric".
    transport: &'static str,
    /// "mu", "velos" or "ukharon-kv".
    protocol: &'static str,
    /// How GETs are answered: "log", "lease", or "primary" (uKharon-KV's).
    reads: &'static str,
    seconds: f64,
    clients: u16,
    keys: u32,
    json: bool,
}

/// The demo's outcome: one JSON object, or a few lines for a person.
fn print_summary(
    args: &KvDemo,
    shared: &Shared,
    killed: u16,
    failover_us: u64,
    checked: usize,
    digests: &[String],
) {
    let h = shared.latency.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let ops = shared.ops.load(Ordering::Relaxed);
    let elapsed = 2.0 * args.seconds;
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    if args.json {
        let json = serde_json::json!({
            "protocol": args.protocol,
            "app": args.app,
            "transport": args.transport,
            "reads": args.reads,
            "replicas": REPLICAS,
            "clients": args.clients,
            "operations": ops,
            "errors": shared.errors.load(Ordering::Relaxed),
            "ops_per_s": ops as f64 / elapsed,
            "latency_us": {"p50": us(0.5), "p90": us(0.9), "p99": us(0.99), "p999": us(0.999),
                            "max": h.max() as f64 / 1000.0},
            "killed_leader": killed,
            "failover_us": failover_us,
            "trades": shared.trades.load(Ordering::Relaxed),
            "lost_writes": 0,
            "digests": digests,
        });
        let mut json = json;
        let checked_field = if args.app == "orderbook" {
            "acknowledged_orders_checked"
        } else {
            "acknowledged_keys_checked"
        };
        json[checked_field] = checked.into();
        println!("{json}");
    } else {
        println!("mu demo summary ({}, {})", args.protocol, args.app);
        println!(
            "  operations     {ops} in {elapsed:.1} s ({:.0} ops/s) from {} clients, {} errors",
            ops as f64 / elapsed,
            args.clients,
            shared.errors.load(Ordering::Relaxed)
        );
        println!(
            "  latency        p50 {:.1} µs, p90 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs",
            us(0.5),
            us(0.9),
            us(0.99),
            us(0.999),
            h.max() as f64 / 1000.0
        );
        println!(
            "  failover       {} {killed} killed; clients served again after {:.3} ms",
            if args.protocol == mu_service::config::UKHARON_KV { "primary" } else { "leader" },
            failover_us as f64 / 1000.0
        );
        if args.app == "orderbook" {
            println!(
                "  durability     {checked} acknowledged orders known to the book after the \
                 failover; {} trades",
                shared.trades.load(Ordering::Relaxed)
            );
        } else {
            println!("  durability     {checked} keys read back: no acknowledged write lost");
        }
        println!("  state          live replicas' digests equal: {}", digests.join(" = "));
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// One client thread: puts and gets on its own keys until told to stop.
fn client_loop(t: usize, keys: usize, config: &ClusterConfig, shared: &Shared) {
    let Ok(mut client) = config.client() else { return };
    client.set_timeout(Duration::from_secs(5));
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
    let mut n: u64 = 0;
    while !shared.stop.load(Ordering::Acquire) {
        n += 1;
        // Each key is put and then read back by the next operation, and the keys go round in
        // turn, so that every one of them is written.
        let key = format!("c{t}-k{}", ((n - 1) / 2) as usize % keys).into_bytes();
        let put = n % 2 == 1;
        let value = format!("c{t}-v{n}").into_bytes();
        let began = Instant::now();
        let outcome = if put { client.put(&key, &value).map(|()| None) } else { client.get(&key) };
        let done = shared.clock.now_ns();
        match outcome {
            Ok(_) => {
                h.saturating_record(began.elapsed().as_nanos() as u64);
                shared.ops.fetch_add(1, Ordering::Relaxed);
                shared.clock.answered(client.target(), done);
                if put {
                    let mut truth = shared.truth.lock().unwrap_or_else(|p| p.into_inner());
                    let k = truth.entry(key).or_default();
                    k.acked = Some(value);
                    k.unknown.clear();
                }
            }
            Err(e) => {
                shared.errors.fetch_add(1, Ordering::Relaxed);
                if put && matches!(e, ClientError::Timeout { .. }) {
                    let mut truth = shared.truth.lock().unwrap_or_else(|p| p.into_inner());
                    truth.entry(key).or_default().unknown.push(value);
                }
            }
        }
        if n % 64 == 0 {
            shared.latency.lock().unwrap_or_else(|p| p.into_inner()).add(&h).ok();
            h.reset();
        }
    }
    shared.latency.lock().unwrap_or_else(|p| p.into_inner()).add(&h).ok();
}

/// Waits until the live replicas have applied the same entries and returns their digests.
fn wait_for_same_state(
    config: &ClusterConfig,
    killed: u16,
    timeout: Duration,
) -> Result<Vec<String>, String> {
    let mut client =
        Client::new(config.cluster_id, config.endpoints()).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + timeout;
    loop {
        let reports: Vec<_> = config
            .replicas
            .iter()
            .filter(|&&id| id != killed)
            .map(|&id| client.status(id))
            .collect::<Result<_, _>>()?;
        let same_index = reports.windows(2).all(|w| w[0].applied == w[1].applied);
        if same_index {
            let digests: Vec<String> = reports.iter().map(|r| r.digest.clone()).collect();
            if digests.windows(2).all(|w| w[0] == w[1]) {
                return Ok(digests);
            }
            return Err(format!(
                "replicas applied the same entries but their states differ: {digests:?}"
            ));
        }
        if Instant::now() > deadline {
            let applied: Vec<u64> = reports.iter().map(|r| r.applied).collect();
            return Err(format!("live replicas did not converge: applied {applied:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
