//! `mu bench payload` (Mu paper §7.1, Figure 3): replication latency against payload size, 32 to
//! 4096 bytes, for Mu standalone and attached to the key-value store, each in direct and
//! handover mode: four sweeps of `mu bench replication` in one run, beside the fabric's write2
//! round trip measured first. Then the order book attached, in direct mode, at the size of its
//! orders' encoding, beside standalone at the same size (the paper's Liquibook rows).

use crate::cluster::{App, FabricChoice, ReplicaMode, ThreadsChoice};
use crate::fabric;
use crate::interrupt;
use crate::replication::{self, PayloadResult};
use crate::suite::{quantiles_us, us, Report, SuiteArgs};
use mu_figures::{Bar, BarChart, BarSeries, Table};
use mu_procs::run_dir::RunDir;
use serde_json::json;

const SWEEP_BYTES: [usize; 8] = [32, 64, 128, 256, 512, 1024, 2048, 4096];
const DEFAULT_SAMPLES: u64 = 100_000;
const QUICK_SAMPLES: u64 = 3_000;
const CONFIGS: [(App, ReplicaMode); 4] = [
    (App::Standalone, ReplicaMode::Direct),
    (App::Standalone, ReplicaMode::Handover),
    (App::Kv, ReplicaMode::Direct),
    (App::Kv, ReplicaMode::Handover),
];

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Timed proposals per payload size and configuration [default: 100000; 3000 with --quick].
    #[arg(long, value_parser = crate::counts::count)]
    samples: Option<u64>,
}

pub fn run(args: Args) -> Result<(), String> {
    interrupt::catch();
    let mut report = Report::new(&args.suite, "payload")?;
    let samples =
        args.samples.unwrap_or(if args.suite.quick { QUICK_SAMPLES } else { DEFAULT_SAMPLES });
    let run_dir = RunDir::create("payload")?;
    note!(
        "mu bench payload: 3 replicas on shm; {} payload sizes x {} configurations, {samples} \
         samples each",
        SWEEP_BYTES.len(),
        CONFIGS.len()
    );
    let write2 = {
        let dir = run_dir.subdirectory("fabric")?;
        fabric::write2_rtt(dir.path(), samples)?
    };
    let mut sweeps: Vec<((App, ReplicaMode), Vec<PayloadResult>)> = Vec::new();
    for config in CONFIGS {
        note!("{} {}:", config.0.name(), config.1.name());
        let results = replication::sweep(
            &run_dir,
            (config.1, config.0, mu_replica::Protocol::Mu),
            (FabricChoice::Shm, None, ThreadsChoice::Shared, false),
            &SWEEP_BYTES,
            samples,
            0,
        )?;
        sweeps.push((config, results));
    }
    // The order book's requests have one size: measured there, beside standalone.
    let order_bytes = crate::cluster::order(0).encode().len();
    let mut order_sweeps: Vec<((App, ReplicaMode), Vec<PayloadResult>)> = Vec::new();
    for app in [App::Standalone, App::Orderbook] {
        note!("{} direct, {order_bytes} B (the order book's order):", app.name());
        let results = replication::sweep(
            &run_dir,
            (ReplicaMode::Direct, app, mu_replica::Protocol::Mu),
            (FabricChoice::Shm, None, ThreadsChoice::Shared, false),
            &[order_bytes],
            samples,
            0,
        )?;
        order_sweeps.push(((app, ReplicaMode::Direct), results));
    }

    let swept = sweeps.len();
    let mut all = sweeps;
    all.extend(order_sweeps);
    report.table(&table(&all, &write2), "")?;
    if !args.suite.json {
        println!(
            "fabric write2 round trip: p50 {} µs, p99 {} µs ({} samples, before any replica \
             started)",
            us(write2.p50 as f64 / 1000.0),
            us(write2.p99 as f64 / 1000.0),
            write2.samples
        );
        let warnings: Vec<String> = all
            .iter()
            .flat_map(|((app, mode), rs)| {
                rs.iter()
                    .filter(|r| r.followers_dropped > 0)
                    .map(move |r| format!("{} {} {} B", app.name(), mode.name(), r.payload_bytes))
            })
            .collect();
        if !warnings.is_empty() {
            println!(
                "warning: a follower fell more than a log behind (later proposals went to one \
                 follower) in: {}",
                warnings.join(", ")
            );
        }
    }
    // The figure's categories are the sweep's sizes: the order book's one size is in the table.
    let chart = chart(&all[..swept]);
    let svg = report.path(".svg");
    chart.write_svg(&svg).map_err(|e| e.to_string())?;
    let results = results_json(&all);
    report.finish(json!({
        "protocol": "mu",
        "results": results,
        "fabric_write2_ns": {"p50": write2.p50, "p99": write2.p99},
    }));
    Ok(())
}

/// Each configuration's results, in the order measured.
type Sweeps = [((App, ReplicaMode), Vec<PayloadResult>)];

/// Every configuration and size: percentiles and the ratio to the fabric's write2.
fn table(sweeps: &Sweeps, write2: &crate::measure::Summary) -> Table {
    let mut table = Table::new(
        "Propose latency on the leader of 3 replicas on shm (µs); ratio to the write2 round trip",
        &["app", "mode", "payload", "samples", "p1", "p50", "p99", "p50 / write2"],
    );
    for ((app, mode), results) in sweeps {
        for r in results {
            let [p1, p50, p99] = quantiles_us(&r.latency);
            table.row(vec![
                app.name().into(),
                mode.name().into(),
                format!("{} B", r.payload_bytes),
                r.latency.len().to_string(),
                us(p1),
                us(p50),
                us(p99),
                format!("{:.3}", p50 * 1000.0 / write2.p50.max(1) as f64),
            ]);
        }
    }
    table
}

/// The figure: every configuration's median with its p1-p99 range, by payload.
fn chart(sweeps: &Sweeps) -> BarChart {
    BarChart {
        title: "Replication latency vs payload (median, p1-p99)".into(),
        x_label: "payload".into(),
        y_label: "propose latency (µs)".into(),
        categories: SWEEP_BYTES.iter().map(|b| format!("{b} B")).collect(),
        series: sweeps
            .iter()
            .map(|((app, mode), results)| BarSeries {
                name: format!("{} {}", app.name(), mode.name()),
                points: results
                    .iter()
                    .map(|r| {
                        let [p1, p50, p99] = quantiles_us(&r.latency);
                        Some(Bar::new(p50, p1, p99))
                    })
                    .collect(),
            })
            .collect(),
        log_y: true,
    }
}

fn results_json(sweeps: &Sweeps) -> Vec<serde_json::Value> {
    sweeps
        .iter()
        .flat_map(|((app, mode), results)| {
            results.iter().map(move |r| {
                let [p1, p50, p99] = [0.01, 0.5, 0.99].map(|x| r.latency.value_at_quantile(x));
                json!({
                    "app": app.name(), "mode": mode.name(), "payload_bytes": r.payload_bytes,
                    "samples": r.latency.len(),
                    "latency_ns": {"p1": p1, "p50": p50, "p99": p99},
                    "lost_proposals": r.lost_proposals, "followers_dropped": r.followers_dropped,
                })
            })
        })
        .collect()
}
