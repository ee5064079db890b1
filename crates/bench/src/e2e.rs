//! `mu bench e2e` (Mu paper §7.2, Figure 5): key-value operations as a client sees them, end to
//! end, unreplicated beside replicated, with the client transport's own cost measured apart.
//!
//! Three servers, each measured with the real client library ([`mu_service::Client`]) over a
//! Unix socket, one operation at a time:
//!
//! * `transport`: a server thread in this process that decodes each request and answers at once
//!   with a canned reply of the right kind, touching no store — the framing, the socket and the
//!   two thread wake-ups: the floor of any request here.
//! * `unreplicated`: the same server thread applying each request to a key-value store
//!   ([`mu_kv::Store`]), as an application without replication would.
//! * `replicated`: the key-value service on three `mu replica` processes (shared-memory fabric),
//!   the client talking to the leader: every request, reads included, goes through the log.
//!
//! Each is measured for puts and gets of `--payload`-byte values over 1,000 keys, and then for
//! the order book (`app = "orderbook"`): limit orders ([`crate::cluster::order`], about 50
//! bytes each) to the transport server, to an unreplicated book, and to a replicated one.
//! Every row says its `app` (`kv` or `orderbook`) and `transport` (`unix`).

use crate::interrupt;
use crate::kv_ops::{measure, warmup, OPS};
use crate::local_server::{Answering, LocalServer};
use crate::suite::{quantiles_us, us, Report, SuiteArgs};
use hdrhistogram::Histogram;
use mu_daemon::kv_cluster::{KvCluster, LogShape};
use mu_figures::{Bar, BarChart, BarSeries, Progress, Table};
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

struct Measured {
    system: System,
    op: &'static str,
    h: Histogram<u64>,
}

impl Measured {
    fn app(&self) -> &'static str {
        if self.op == ORDER_OP {
            "orderbook"
        } else {
            "kv"
        }
    }
}

/// The order book's operation: one limit order.
const ORDER_OP: &str = "order";

pub fn run(args: Args) -> Result<(), String> {
    interrupt::catch();
    let mut report = Report::new(&args.suite, "e2e")?;
    let samples =
        args.samples.unwrap_or(if args.suite.quick { QUICK_SAMPLES } else { DEFAULT_SAMPLES });
    let value = vec![b'v'; args.payload as usize];
    let mut progress = report.progress("e2e", 3 * 3 * (samples + warmup(samples)));
    let mut results = Vec::new();
    for system in System::ALL {
        progress.set_label(&format!("e2e {}", system.name()));
        let measured = measure_system(system, &args, &value, samples, &mut progress)?;
        for (op, h) in OPS.iter().zip(measured) {
            results.push(Measured { system, op, h });
        }
    }
    for system in System::ALL {
        progress.set_label(&format!("e2e orderbook {}", system.name()));
        let h = measure_orders(system, samples, &mut progress)?;
        results.push(Measured { system, op: ORDER_OP, h });
    }
    progress.finish();
    report.table(&table(&results, args.payload), "")?;
    let svg = report.path(".svg");
    chart(&results, args.payload).write_svg(&svg).map_err(|e| e.to_string())?;
    let json = json!({
        "payload_bytes": args.payload,
        "results": results.iter().map(|m| {
            let [p1, p50, p99] = quantiles_us(&m.h);
            json!({"system": m.system.name(), "op": m.op, "app": m.app(), "transport": "unix",
                   "samples": m.h.len(),
                   "p1_us": p1, "p50_us": p50, "p99_us": p99})
        }).collect::<Vec<_>>(),
    });
    report.finish(json);
    Ok(())
}

/// Puts and gets against one system, started for them and stopped after.
fn measure_system(
    system: System,
    args: &Args,
    value: &[u8],
    samples: u64,
    progress: &mut Progress,
) -> Result<[Histogram<u64>; 2], String> {
    let warmup = warmup(samples);
    match system {
        System::Transport | System::Unreplicated => {
            let answering =
                if system == System::Unreplicated { Answering::Store } else { Answering::Canned };
            let server = LocalServer::start("e2e-local", answering)?;
            let mut client = server.client()?;
            measure(&mut client, value, samples, warmup, progress)
        }
        System::Replicated => {
            let slot_bytes = (args.payload + 256).next_multiple_of(8);
            let mut cluster = KvCluster::start(
                "e2e",
                LogShape { slots: 16_384, slot_bytes },
                mu_replica::Protocol::Mu,
            )?;
            cluster.wait_for_leader(Duration::from_secs(10))?;
            let mut client = cluster.client()?;
            let m = measure(&mut client, value, samples, warmup, progress);
            cluster.check_alive()?;
            m
        }
    }
}

/// Orders against one system, started for them and stopped after.
fn measure_orders(
    system: System,
    samples: u64,
    progress: &mut Progress,
) -> Result<Histogram<u64>, String> {
    let warmup = warmup(samples);
    match system {
        System::Transport | System::Unreplicated => {
            let answering =
                if system == System::Unreplicated { Answering::Store } else { Answering::Canned };
            let server = LocalServer::start("e2e-book", answering)?;
            let mut client = server.client()?;
            crate::order_ops::measure(&mut client, samples, warmup, progress)
        }
        System::Replicated => {
            let mut cluster = KvCluster::start_orderbook(
                "e2e-book",
                LogShape { slots: 16_384, slot_bytes: 320 },
                mu_replica::Protocol::Mu,
            )?;
            cluster.wait_for_leader(Duration::from_secs(10))?;
            let mut client = cluster.client()?;
            let m = crate::order_ops::measure(&mut client, samples, warmup, progress);
            cluster.check_alive()?;
            m
        }
    }
}

fn table(results: &[Measured], payload: u32) -> Table {
    let mut table = Table::new(
        &format!(
            "End-to-end latency: key-value operations on {payload}-byte values, order book \
             orders (µs)"
        ),
        &["app", "system", "op", "samples", "p1", "p50", "p99", "p50 / transport p50"],
    );
    let transport_p50 = |op: &str| {
        results
            .iter()
            .find(|m| m.system == System::Transport && m.op == op)
            .map_or(f64::NAN, |m| quantiles_us(&m.h)[1])
    };
    for m in results {
        let [p1, p50, p99] = quantiles_us(&m.h);
        table.row(vec![
            m.app().into(),
            m.system.name().into(),
            m.op.into(),
            m.h.len().to_string(),
            us(p1),
            us(p50),
            us(p99),
            format!("{:.2}", p50 / transport_p50(m.op)),
        ]);
    }
    table
}

fn chart(results: &[Measured], payload: u32) -> BarChart {
    BarChart {
        title: format!("End-to-end latency, {payload}-byte values and orders (median, p1-p99)"),
        x_label: "operation".into(),
        y_label: "latency (µs)".into(),
        categories: OPS.iter().chain(&[ORDER_OP]).map(|s| s.to_uppercase()).collect(),
        series: System::ALL
            .iter()
            .map(|&s| BarSeries {
                name: s.name().into(),
                points: OPS
                    .iter()
                    .chain(&[ORDER_OP])
                    .map(|op| {
                        results.iter().find(|m| m.system == s && m.op == *op).map(|m| {
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
