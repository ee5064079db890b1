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
//! The same run measures what the targets compare with: the fabric's own write round trip
//! (`mu bench fabric`'s `write_rtt`) and Mu's standalone replication latency at the size of a
//! put's request (`replication_p50_us`).

use crate::cluster::{App, FabricChoice, ReplicaMode, ThreadsChoice};
use crate::interrupt;
use crate::kv_ops::{measure, warmup, OPS};
use crate::local_server::{Answering, LocalServer, ServiceServer};
use crate::suite::{quantiles_us, us, Report, SuiteArgs};
use hdrhistogram::Histogram;
use mu_daemon::kv_cluster::{KvCluster, LogShape};
use mu_figures::{Bar, BarChart, BarSeries, Table};
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
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum System {
    Transport,
    Unreplicated,
    Replicated,
}

impl System {
    const ALL: [System; 3] = [System::Transport, System::Unreplicated, System::Replicated];

    fn name(self) -> &'static str {
        match self {
            System::Transport => "transport",
            System::Unreplicated => "unreplicated",
            System::Replicated => "replicated",
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
    transport: Transport,
    system: System,
    op: &'static str,
    h: Histogram<u64>,
}

impl Measured {
    fn app(&self) -> &'static str {
        if self.op == ORDER_OP || self.op == PIPELINED_OP {
            "orderbook"
        } else {
            "kv"
        }
    }

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
    let mut report = Report::new(&args.suite, "e2e")?;
    let samples =
        args.samples.unwrap_or(if args.suite.quick { QUICK_SAMPLES } else { DEFAULT_SAMPLES });
    let value = vec![b'v'; args.payload as usize];
    let rows = Transport::ALL.len() * System::ALL.len() * (OPS.len() + 1) + System::ALL.len();
    let mut progress = report.progress("e2e", rows as u64 * (samples + warmup(samples)));
    let mut results = Vec::new();
    for transport in Transport::ALL {
        for system in System::ALL {
            progress.set_label(&format!("e2e {} {}", transport.name(), system.name()));
            let mut client = Connected::start(transport, system, &args, false)?;
            let measured =
                measure(client.client(), &value, samples, warmup(samples), &mut progress);
            client.check()?;
            // Stopped before the next starts: they share run directory names.
            drop(client);
            for (op, h) in OPS.iter().zip(measured?) {
                results.push(Measured { transport, system, op, h });
            }
            progress.set_label(&format!("e2e {} {} orderbook", transport.name(), system.name()));
            let mut client = Connected::start(transport, system, &args, true)?;
            let measured =
                crate::order_ops::measure(client.client(), samples, warmup(samples), &mut progress);
            client.check()?;
            results.push(Measured { transport, system, op: ORDER_OP, h: measured? });
            if transport == Transport::Fabric {
                let (c, w) = (client.client(), warmup(samples));
                let measured = crate::order_ops::measure_pipelined(c, samples, w, &mut progress);
                client.check()?;
                results.push(Measured { transport, system, op: PIPELINED_OP, h: measured? });
            }
        }
    }
    progress.finish();
    let references = References::measure(&args, samples)?;
    report.table(&table(&results, args.payload), "")?;
    let svg = report.path(".svg");
    chart(&results, args.payload).write_svg(&svg).map_err(|e| e.to_string())?;
    let targets = targets(&results, &references);
    if !args.suite.json {
        references.print();
        for t in &targets {
            println!("{}", t["line"].as_str().unwrap_or_default());
        }
    }
    let json = json!({
        "payload_bytes": args.payload,
        "replication_p50_us": references.replication_p50_us,
        "fabric_write_rtt_p50_us": references.write_rtt_p50_us,
        "results": results.iter().map(|m| {
            let [p1, p50, p99] = quantiles_us(&m.h);
            json!({"system": m.system.name(), "op": m.op, "app": m.app(),
                   "transport": m.transport.name(), "samples": m.h.len(),
                   "in_flight": m.in_flight(), "ops_per_s": m.ops_per_s(),
                   "p1_us": p1, "p50_us": p50, "p99_us": p99})
        }).collect::<Vec<_>>(),
        "targets": targets,
    });
    report.finish(json);
    Ok(())
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
            .find(|m| m.transport == t && m.system == s && m.op == op)
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

fn table(results: &[Measured], payload: u32) -> Table {
    let mut table = Table::new(
        &format!(
            "End-to-end latency: key-value operations on {payload}-byte values, order book \
             orders (µs)"
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
    let transport_p50 = |t: Transport, op: &str| {
        results
            .iter()
            .find(|m| m.transport == t && m.system == System::Transport && m.op == op)
            .map_or(f64::NAN, Measured::p50_us)
    };
    for m in results {
        let [p1, p50, p99] = quantiles_us(&m.h);
        table.row(vec![
            m.app().into(),
            m.transport.name().into(),
            m.system.name().into(),
            m.op.into(),
            m.in_flight().to_string(),
            m.h.len().to_string(),
            us(p1),
            us(p50),
            us(p99),
            format!("{:.0}", m.ops_per_s()),
            format!("{:.2}", p50 / transport_p50(m.transport, m.op)),
        ]);
    }
    table
}

fn chart(results: &[Measured], payload: u32) -> BarChart {
    let ops: Vec<&str> = OPS.iter().copied().chain([ORDER_OP, PIPELINED_OP]).collect();
    BarChart {
        title: format!("End-to-end latency, {payload}-byte values and orders (median, p1-p99)"),
        x_label: "operation".into(),
        y_label: "latency (µs)".into(),
        categories: ops.iter().map(|s| s.to_uppercase()).collect(),
        series: Transport::ALL
            .iter()
            .flat_map(|&t| System::ALL.iter().map(move |&s| (t, s)))
            .map(|(t, s)| BarSeries {
                name: format!("{} {}", t.name(), s.name()),
                points: ops
                    .iter()
                    .map(|op| {
                        results
                            .iter()
                            .find(|m| m.transport == t && m.system == s && m.op == *op)
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
