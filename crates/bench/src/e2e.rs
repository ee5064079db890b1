//! `mu bench e2e` (Mu paper §7.2, Figure 5): requests as a client sees them, end to end,
//! unreplicated beside replicated, with the client transport's own cost measured apart, over
//! two transports.
//!
//! Three servers, each measured with the real client library ([`mu_service::Client`]), one
//! operation at a time:
//!
//! * `transport`: a server that decodes each request and answers at once with a canned reply
//!   of the right kind, touching no store — the floor of any request on that transport.
//! * `unreplicated`: the same server applying each request to a key-value store
//!   ([`mu_kv::Store`]) or an order book, as an application without replication would.
//! * `replicated`: the service on three `mu replica` processes (shared-memory fabric), the
//!   client talking to the leader: every request, reads included, goes through the log.
//!
//! Transports: `unix` (a Unix socket; the in-process server is a thread of its own,
//! [`LocalServer`]), `tcp` (loopback; the service's own server on an unreplicated backend
//! for the first two systems, [`ServiceServer`], and `[clients.addresses]` for the replicas)
//! and `fabric` (the client path over the fabric, `docs/client-path.md`: the service's own
//! server and ring thread, on an unreplicated backend for the first two systems). Each is
//! measured for puts and gets of `--payload`-byte values over 1,000 keys, and for the order book (`app = "orderbook"`): limit orders
//! ([`crate::cluster::order`], 43 bytes each). Over the fabric, the order book is also measured
//! pipelined (`order-pipelined`: [`mu_service::PIPELINE_LANES`] orders in flight through
//! [`mu_service::Client::order_many`], each batch's time divided among its orders). Every row
//! says its `app`, `transport`, `in_flight` and `ops_per_s`.
//!
//! Then an unmodified Redis and Memcached ([`crate::e2e_apps`]): `SET`/`set` and `GET`/`get`
//! of `--payload`-byte values, over a Unix socket, on the bare server (`direct`), on the bare
//! server through a plain byte relay (`relayed`), through a one-replica cluster's front
//! (`front-unreplicated`) and through the leader's front of three replicas (`replicated`), with
//! four ratios per operation (replicated over front-unreplicated, bound 1.2; and with no bound
//! relayed over direct, front-unreplicated over relayed, front-unreplicated over direct) and the
//! applications' own load tools against the replicated front. `--apps` picks what is measured.
//!
//! The same run measures what the targets compare with: the fabric's own write round trip
//! (`mu bench fabric`'s `write_rtt`) and Mu's standalone replication latency at the size of a
//! put's request (`replication_p50_us`).

use crate::cluster::{App, FabricChoice, ReplicaMode, ThreadsChoice};
use crate::e2e_apps::{self, Way};
use crate::interrupt;
use crate::kv_ops::{measure, warmup, OPS};
use crate::local_server::{Answering, LocalServer, ServiceServer};
use crate::suite::{quantiles_us, us, Report, SuiteArgs};
use hdrhistogram::Histogram;
use mu_daemon::app_state::ExternalApp;
use mu_daemon::kv_cluster::{KvCluster, LogShape};
use mu_figures::{Bar, BarChart, BarSeries, Progress, Table};
use mu_procs::run_dir::RunDir;
use mu_service::Client;
use serde_json::json;
use std::time::Duration;

const DEFAULT_SAMPLES: u64 = 20_000;
const QUICK_SAMPLES: u64 = 2_000;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Value size in bytes.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    payload: u32,
    /// Timed operations per system and operation [default: 20000; 2000 with --quick].
    #[arg(long, value_parser = crate::counts::count)]
    samples: Option<u64>,
    /// The applications measured (the references and the key-value targets come with `kv`).
    #[arg(long, value_delimiter = ',', default_value = "kv,orderbook,redis,memcached")]
    apps: Vec<AppChoice>,
}

/// An application `mu bench e2e` measures.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum AppChoice {
    Kv,
    Orderbook,
    Redis,
    Memcached,
}

impl AppChoice {
    fn external(self) -> Option<ExternalApp> {
        match self {
            AppChoice::Redis => Some(ExternalApp::Redis),
            AppChoice::Memcached => Some(ExternalApp::Memcached),
            AppChoice::Kv | AppChoice::Orderbook => None,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum System {
    Transport,
    Unreplicated,
    Replicated,
    /// Redis or Memcached reached directly ([`Way::Direct`]).
    Direct,
    /// Redis or Memcached through a plain byte relay ([`Way::Relayed`]).
    Relayed,
    /// Redis or Memcached through a one-replica cluster's front ([`Way::FrontUnreplicated`]).
    FrontUnreplicated,
}

impl System {
    /// The key-value store's and the order book's systems.
    const ALL: [System; 3] = [System::Transport, System::Unreplicated, System::Replicated];

    fn name(self) -> &'static str {
        match self {
            System::Transport => "transport",
            System::Unreplicated => "unreplicated",
            System::Replicated => "replicated",
            System::Direct => "direct",
            System::Relayed => "relayed",
            System::FrontUnreplicated => "front-unreplicated",
        }
    }

    fn of_way(way: Way) -> System {
        match way {
            Way::Direct => System::Direct,
            Way::Relayed => System::Relayed,
            Way::FrontUnreplicated => System::FrontUnreplicated,
            Way::Replicated => System::Replicated,
        }
    }
}

/// How the client reaches the server.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Transport {
    Unix,
    Tcp,
    Fabric,
}

impl Transport {
    const ALL: [Transport; 3] = [Transport::Unix, Transport::Tcp, Transport::Fabric];

    fn name(self) -> &'static str {
        match self {
            Transport::Unix => "unix",
            Transport::Tcp => "tcp",
            Transport::Fabric => "fabric",
        }
    }
}

/// The order book's operation: one limit order.
const ORDER_OP: &str = "order";
/// Limit orders with [`mu_service::PIPELINE_LANES`] in flight (over the fabric only: the
/// socket takes one at a time).
const PIPELINED_OP: &str = "order-pipelined";

struct Measured {
    app: &'static str,
    transport: Transport,
    system: System,
    op: &'static str,
    h: Histogram<u64>,
}

impl Measured {
    fn in_flight(&self) -> usize {
        if self.op == PIPELINED_OP {
            mu_service::PIPELINE_LANES
        } else {
            1
        }
    }

    /// Operations a second at these figures (the inverse of the mean time an operation took).
    fn ops_per_s(&self) -> f64 {
        (1e9 / self.h.mean()).round()
    }

    fn p50_us(&self) -> f64 {
        quantiles_us(&self.h)[1]
    }
}

pub fn run(args: Args) -> Result<(), String> {
    interrupt::catch();
    let apps = &args.apps;
    let external: Vec<ExternalApp> = apps.iter().filter_map(|a| a.external()).collect();
    for app in &external {
        app.check_installed(&format!("mu bench e2e ({})", app.name()), false)?;
    }
    let mut report = Report::new(&args.suite, "e2e")?;
    let samples =
        args.samples.unwrap_or(if args.suite.quick { QUICK_SAMPLES } else { DEFAULT_SAMPLES });
    let (kv, orderbook) = (apps.contains(&AppChoice::Kv), apps.contains(&AppChoice::Orderbook));
    let per_transport = System::ALL.len() * (usize::from(kv) * OPS.len() + usize::from(orderbook));
    let rows = Transport::ALL.len() * per_transport
        + usize::from(orderbook) * System::ALL.len()
        + external.len() * Way::ALL.len() * e2e_apps::OPS.len();
    let mut progress = report.progress("e2e", rows as u64 * (samples + warmup(samples)));
    let mut results = Vec::new();
    measure_builtin(&args, (kv, orderbook), samples, &mut progress, &mut results)?;
    let tools = measure_external(&args, &external, samples, &mut progress, &mut results)?;
    progress.finish();
    let references = if kv { Some(References::measure(&args, samples)?) } else { None };
    report.table(&table(&results, args.payload), "")?;
    let svg = report.path(".svg");
    chart(&results, args.payload).write_svg(&svg).map_err(|e| e.to_string())?;
    let mut targets = references.as_ref().map_or_else(Vec::new, |r| targets(&results, r));
    let ratios = app_ratios(&results, &external);
    targets.extend(ratios.iter().filter(|r| r["bound"].is_string()).cloned());
    if !args.suite.json {
        if let Some(references) = &references {
            references.print();
        }
        for t in targets.iter().chain(ratios.iter().filter(|r| r["bound"].is_null())) {
            println!("{}", t["line"].as_str().unwrap_or_default());
        }
        for tool in &tools {
            println!("{}", tool["line"].as_str().unwrap_or_default());
        }
    }
    let json = json!({
        "payload_bytes": args.payload,
        "replication_p50_us": references.as_ref().map(|r| r.replication_p50_us),
        "fabric_write_rtt_p50_us": references.as_ref().map(|r| r.write_rtt_p50_us),
        "results": results.iter().map(|m| {
            let [p1, p50, p99] = quantiles_us(&m.h);
            json!({"system": m.system.name(), "op": m.op, "app": m.app,
                   "transport": m.transport.name(), "samples": m.h.len(),
                   "in_flight": m.in_flight(), "ops_per_s": m.ops_per_s(),
                   "p1_us": p1, "p50_us": p50, "p99_us": p99})
        }).collect::<Vec<_>>(),
        "targets": targets,
        "ratios": ratios,
        "tools": tools,
    });
    report.finish(json);
    Ok(())
}

/// The key-value store's and the order book's rows (those of `apps`), every transport and
/// system, appended to `results`.
fn measure_builtin(
    args: &Args,
    (kv, orderbook): (bool, bool),
    samples: u64,
    progress: &mut Progress,
    results: &mut Vec<Measured>,
) -> Result<(), String> {
    let value = vec![b'v'; args.payload as usize];
    for transport in Transport::ALL {
        for system in System::ALL {
            let label = format!("e2e {} {}", transport.name(), system.name());
            if kv {
                progress.set_label(&label);
                let mut client = Connected::start(transport, system, args, false)?;
                let measured = measure(client.client(), &value, samples, warmup(samples), progress);
                client.check()?;
                // Stopped before the next starts: they share run directory names.
                drop(client);
                for (op, h) in OPS.iter().zip(measured?) {
                    results.push(Measured { app: "kv", transport, system, op, h });
                }
            }
            if !orderbook {
                continue;
            }
            progress.set_label(&format!("{label} orderbook"));
            let mut client = Connected::start(transport, system, args, true)?;
            let (c, w) = (client.client(), warmup(samples));
            let measured = crate::order_ops::measure(c, samples, w, progress);
            client.check()?;
            let app = "orderbook";
            results.push(Measured { app, transport, system, op: ORDER_OP, h: measured? });
            if transport == Transport::Fabric {
                let (c, w) = (client.client(), warmup(samples));
                let measured = crate::order_ops::measure_pipelined(c, samples, w, progress);
                client.check()?;
                results.push(Measured { app, transport, system, op: PIPELINED_OP, h: measured? });
            }
        }
    }
    Ok(())
}

/// The unmodified applications' rows, each way (`e2e_apps`), appended to `results`; returns
/// their load tools' figures.
fn measure_external(
    args: &Args,
    external: &[ExternalApp],
    samples: u64,
    progress: &mut Progress,
    results: &mut Vec<Measured>,
) -> Result<Vec<serde_json::Value>, String> {
    let value = vec![b'v'; args.payload as usize];
    let mut tools = Vec::new();
    for &app in external {
        for way in Way::ALL {
            progress.set_label(&format!("e2e {} {}", app.name(), way.name()));
            let mut target = e2e_apps::Connected::start(app, way, args.payload)?;
            let mut attempt = 1;
            let measured = loop {
                let w = warmup(samples);
                match e2e_apps::measure(&mut target.conn, &value, samples, w, progress) {
                    Err(e) if attempt < e2e_apps::ATTEMPTS && target.may_retry() => {
                        // A leadership that moved under the client (elections flap on shared
                        // cores): measured again, whole, through the new leader.
                        note!(
                            "\nmu bench e2e: {} {}: {e}; measuring again",
                            app.name(),
                            way.name()
                        );
                        target.reconnect()?;
                        attempt += 1;
                    }
                    measured => break measured,
                }
            };
            target.check()?;
            let (transport, system) = (Transport::Unix, System::of_way(way));
            for (op, h) in e2e_apps::OPS.iter().zip(measured?) {
                results.push(Measured { app: app.name(), transport, system, op, h });
            }
            if way == Way::Replicated {
                progress.set_label(&format!("e2e {} {}", app.name(), app.tool()));
                tools.push(target.load_tool(app, args.payload));
            }
        }
    }
    Ok(tools)
}

/// A client connected to one system over one transport, and what it runs against. Fields
/// drop in order: the client before its server.
struct Connected {
    client: Client,
    cluster: Option<KvCluster>,
    _local: Option<LocalServer>,
    _service: Option<ServiceServer>,
}

impl Connected {
    fn start(
        transport: Transport,
        system: System,
        args: &Args,
        orderbook: bool,
    ) -> Result<Connected, String> {
        let answering =
            if system == System::Unreplicated { Answering::Store } else { Answering::Canned };
        let app = if orderbook { mu_service::App::Orderbook } else { mu_service::App::Kv };
        let none = |client| Connected { client, cluster: None, _local: None, _service: None };
        match (system, transport) {
            (System::Replicated, _) => {
                let slot_bytes = (args.payload + 256).next_multiple_of(8);
                let shape = LogShape { slots: 16_384, slot_bytes };
                let protocol = mu_replica::Protocol::Mu;
                let mut cluster = match transport {
                    Transport::Fabric => {
                        KvCluster::start_over_fabric("e2e", shape, protocol, orderbook)?
                    }
                    Transport::Tcp => KvCluster::start_over_tcp("e2e", shape, protocol, orderbook)?,
                    Transport::Unix if orderbook => {
                        KvCluster::start_orderbook("e2e", shape, protocol)?
                    }
                    Transport::Unix => KvCluster::start("e2e", shape, protocol)?,
                };
                cluster.wait_for_leader(Duration::from_secs(10))?;
                let client = cluster.client()?;
                Ok(Connected { cluster: Some(cluster), ..none(client) })
            }
            (_, Transport::Unix) => {
                let server = LocalServer::start("e2e-local", answering)?;
                let client = server.client()?;
                Ok(Connected { _local: Some(server), ..none(client) })
            }
            (_, Transport::Fabric | Transport::Tcp) => {
                let fabric = transport == Transport::Fabric;
                let server = ServiceServer::start("e2e-service", answering, app, fabric)?;
                let client = server.client()?;
                Ok(Connected { _service: Some(server), ..none(client) })
            }
        }
    }

    fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Fails if a replica died while measuring.
    fn check(&mut self) -> Result<(), String> {
        self.cluster.as_mut().map_or(Ok(()), KvCluster::check_alive)
    }
}

/// What the targets compare with, measured in the same run.
struct References {
    /// Mu standalone, direct mode, at the size of a put's request: the propose p50.
    replication_p50_us: f64,
    /// The fabric's write round trip (`mu bench fabric`'s `write_rtt`), p50.
    write_rtt_p50_us: f64,
    put_bytes: usize,
}

impl References {
    fn measure(args: &Args, samples: u64) -> Result<References, String> {
        let run_dir = RunDir::create("e2e-references")?;
        // A put as the benchmark's client sends it: the bytes the leader proposes.
        let value = vec![b'v'; args.payload as usize];
        let op = mu_kv::Op::Put { key: b"key-000".to_vec(), value };
        let put = mu_kv::Request { client: 1, seq: 1, op }.encode().map_err(|e| e.to_string())?;
        let put_bytes = put.len();
        note!("mu bench e2e: references: Mu standalone at {put_bytes} B, the fabric's write");
        let results = crate::replication::sweep(
            &run_dir,
            (ReplicaMode::Direct, App::Standalone, mu_replica::Protocol::Mu),
            (FabricChoice::Shm, None, ThreadsChoice::Shared, false),
            &[put_bytes],
            samples,
            0,
        )?;
        let replication_p50_us = results
            .first()
            .map(|r| quantiles_us(&r.latency)[1])
            .ok_or("the replication reference gave no result")?;
        let dir = run_dir.subdirectory("fabric")?;
        let write = crate::fabric::write_rtt(dir.path(), samples)?;
        Ok(References {
            replication_p50_us,
            write_rtt_p50_us: write.p50 as f64 / 1000.0,
            put_bytes,
        })
    }

    fn print(&self) {
        println!(
            "references: Mu standalone replication p50 {} µs at {} B; the fabric's write round \
             trip p50 {} µs",
            us(self.replication_p50_us),
            self.put_bytes,
            us(self.write_rtt_p50_us)
        );
    }
}

/// The three ratios, from this run: each an object with its figures, its bound and a
/// line for the person reading.
fn targets(results: &[Measured], r: &References) -> Vec<serde_json::Value> {
    let p50 = |t: Transport, s: System, op: &str| {
        results
            .iter()
            .find(|m| m.app == "kv" && m.transport == t && m.system == s && m.op == op)
            .map_or(f64::NAN, Measured::p50_us)
    };
    let fabric_unreplicated = p50(Transport::Fabric, System::Unreplicated, "get");
    let added = p50(Transport::Fabric, System::Replicated, "put")
        - p50(Transport::Fabric, System::Unreplicated, "put");
    let unix_unreplicated = p50(Transport::Unix, System::Unreplicated, "get");
    let target = |name: &str, ratio: f64, bound: &str, met: bool, what: String| {
        json!({"name": name, "ratio": (ratio * 100.0).round() / 100.0, "bound": bound,
               "met": met, "line": format!("target {name}: {what} = {ratio:.2} ({bound}): {}",
                                          if met { "met" } else { "missed" })})
    };
    let a = fabric_unreplicated / r.write_rtt_p50_us;
    let b = added / r.replication_p50_us;
    let c = unix_unreplicated / fabric_unreplicated;
    vec![
        target(
            "fabric-path-vs-write",
            a,
            "at most 3",
            a.is_finite() && a <= 3.0,
            format!("fabric unreplicated get p50 / fabric write round trip p50 ({fabric_unreplicated:.2} / {:.2} µs)", r.write_rtt_p50_us),
        ),
        target(
            "replication-added",
            b,
            "at most 1.2",
            // Replicated below unreplicated is noise (a loaded machine), not a result.
            added >= 0.0 && b <= 1.2,
            format!("(fabric replicated - unreplicated put p50) / replication p50 ({added:.2} / {:.2} µs)", r.replication_p50_us),
        ),
        target(
            "unix-vs-fabric",
            c,
            "at least 5",
            c.is_finite() && c >= 5.0,
            format!("unix unreplicated get p50 / fabric unreplicated get p50 ({unix_unreplicated:.2} / {fabric_unreplicated:.2} µs)"),
        ),
    ]
}

/// Redis's and Memcached's ratios, for each app and operation, p50 over p50, as a breakdown
/// of the front's cost over the bare server: relayed over direct (the extra hop),
/// front-unreplicated over relayed (the front's own work), front-unreplicated over direct (the
/// two together), none with a bound; and replicated over front-unreplicated (what replication
/// adds; the bound, at most 1.2). Each an object with its figures, its bound (null where
/// none) and a line for the person reading.
fn app_ratios(results: &[Measured], apps: &[ExternalApp]) -> Vec<serde_json::Value> {
    let p50 = |app: &str, s: System, op: &str| {
        results
            .iter()
            .find(|m| m.app == app && m.system == s && m.op == op)
            .map_or(f64::NAN, Measured::p50_us)
    };
    // (name, over, under, what the quotient is spent on)
    let unbounded = [
        ("relay-hop", System::Relayed, System::Direct, "the extra hop"),
        ("front-work", System::FrontUnreplicated, System::Relayed, "the front's own work"),
        ("front-cost", System::FrontUnreplicated, System::Direct, "the front's own cost"),
    ];
    let mut out = Vec::new();
    for app in apps.iter().map(|a| a.name()) {
        for op in e2e_apps::OPS {
            for (what, over, under, spent) in unbounded {
                let (a, b) = (p50(app, over, op), p50(app, under, op));
                let ratio = a / b;
                let name = format!("{app}-{op}-{what}");
                let (over, under) = (over.name(), under.name());
                out.push(json!({
                    "name": name, "app": app, "op": op,
                    "ratio": (ratio * 100.0).round() / 100.0, "bound": null, "met": null,
                    "line": format!(
                        "ratio {name}: {app} {over} {op} p50 / {under} {op} p50 \
                         ({a:.2} / {b:.2} µs) = {ratio:.2} ({spent}; no target)"
                    ),
                }));
            }
            let front = p50(app, System::FrontUnreplicated, op);
            let replicated = p50(app, System::Replicated, op);
            let ratio = replicated / front;
            let met = ratio.is_finite() && ratio <= 1.2;
            let name = format!("{app}-{op}-replication-added");
            out.push(json!({
                "name": name, "app": app, "op": op,
                "ratio": (ratio * 100.0).round() / 100.0, "bound": "at most 1.2", "met": met,
                "line": format!(
                    "target {name}: {app} replicated {op} p50 / front-unreplicated {op} p50 \
                     ({replicated:.2} / {front:.2} µs) = {ratio:.2} (at most 1.2): {}",
                    if met { "met" } else { "missed" }
                ),
            }));
        }
    }
    out
}

fn table(results: &[Measured], payload: u32) -> Table {
    let mut table = Table::new(
        &format!(
            "End-to-end latency: key-value, Redis and Memcached operations on {payload}-byte \
             values, order book orders (µs)"
        ),
        &[
            "app",
            "transport",
            "system",
            "op",
            "in flight",
            "samples",
            "p1",
            "p50",
            "p99",
            "ops/s",
            "p50 / transport p50",
        ],
    );
    // The floor each row is divided by: the transport row of its transport and operation, or
    // for Redis and Memcached the bare server's (direct) row of its operation.
    let floor_p50 = |m: &Measured| {
        let floor =
            if m.app == "kv" || m.app == "orderbook" { System::Transport } else { System::Direct };
        results
            .iter()
            .find(|f| {
                f.app == m.app && f.transport == m.transport && f.system == floor && f.op == m.op
            })
            .map_or(f64::NAN, Measured::p50_us)
    };
    for m in results {
        let [p1, p50, p99] = quantiles_us(&m.h);
        table.row(vec![
            m.app.into(),
            m.transport.name().into(),
            m.system.name().into(),
            m.op.into(),
            m.in_flight().to_string(),
            m.h.len().to_string(),
            us(p1),
            us(p50),
            us(p99),
            format!("{:.0}", m.ops_per_s()),
            format!("{:.2}", p50 / floor_p50(m)),
        ]);
    }
    table
}

fn chart(results: &[Measured], payload: u32) -> BarChart {
    // Categories: the key-value operations and the orders, then each application's.
    let mut categories: Vec<(&str, &str)> = OPS
        .iter()
        .map(|&op| ("kv", op))
        .chain([("orderbook", ORDER_OP), ("orderbook", PIPELINED_OP)])
        .collect();
    for app in ["redis", "memcached"] {
        if results.iter().any(|m| m.app == app) {
            categories.extend(e2e_apps::OPS.iter().map(|&op| (app, op)));
        }
    }
    let mut series: Vec<(Transport, System)> =
        Transport::ALL.iter().flat_map(|&t| System::ALL.iter().map(move |&s| (t, s))).collect();
    let apps_only = [System::Direct, System::Relayed, System::FrontUnreplicated];
    series.extend(apps_only.map(|s| (Transport::Unix, s)));
    series.retain(|&(t, s)| results.iter().any(|m| m.transport == t && m.system == s));
    categories.retain(|&(app, op)| results.iter().any(|m| m.app == app && m.op == op));
    BarChart {
        title: format!("End-to-end latency, {payload}-byte values and orders (median, p1-p99)"),
        x_label: "operation".into(),
        y_label: "latency (µs)".into(),
        categories: categories
            .iter()
            .map(|(app, op)| match *app {
                "kv" | "orderbook" => op.to_uppercase(),
                _ => format!("{} {}", app.to_uppercase(), op.to_uppercase()),
            })
            .collect(),
        series: series
            .iter()
            .map(|&(t, s)| BarSeries {
                name: format!("{} {}", t.name(), s.name()),
                points: categories
                    .iter()
                    .map(|&(app, op)| {
                        results
                            .iter()
                            .find(|m| {
                                m.app == app && m.transport == t && m.system == s && m.op == op
                            })
                            .map(|m| {
                                let [p1, p50, p99] = quantiles_us(&m.h);
                                Bar::new(p50, p1, p99)
                            })
                    })
                    .collect(),
            })
            .collect(),
        log_y: true,
    }
}
