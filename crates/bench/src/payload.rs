//! `mu bench payload` (Mu paper §7.1, Figure 3): replication latency against payload size, 32 to
//! 4096 bytes, for Mu standalone and attached to the key-value store, each in direct and
//! handover mode, and attached to an unmodified Redis and Memcached in handover mode (as the
//! paper measures them: [`crate::app_servers`]): six sweeps of `mu bench replication` in one
//! run, beside the fabric's write2 round trip measured first. Then the order book attached, in
//! direct mode, at the size of its orders' encoding, beside standalone at the same size (the
//! paper's Liquibook rows).

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
const CONFIGS: [(App, ReplicaMode); 6] = [
    (App::Standalone, ReplicaMode::Direct),
    (App::Standalone, ReplicaMode::Handover),
    (App::Kv, ReplicaMode::Direct),
    (App::Kv, ReplicaMode::Handover),
    (App::Redis, ReplicaMode::Handover),
    (App::Memcached, ReplicaMode::Handover),
];

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Timed proposals per payload size and configuration [default: 100000; 3000 with --quick].
    #[arg(long, value_parser = crate::counts::count)]
    samples: Option<u64>,
    /// Only these applications' rows (comma-separated: standalone, kv, orderbook, redis,
    /// memcached) [default: all]. The order book's rows are its own and standalone's at its
    /// order's size.
    #[arg(long, value_enum, value_delimiter = ',')]
    apps: Vec<App>,
    /// Only these payload sizes of the sweep, in bytes (comma-separated) [default: 32, 64,
    /// ..., 4096].
    #[arg(long, value_delimiter = ',', value_parser = sweep_size)]
    payloads: Vec<usize>,
}

/// A size of the sweep.
fn sweep_size(text: &str) -> Result<usize, String> {
    let bytes: usize = text.parse().map_err(|e| format!("{text:?}: {e}"))?;
    if SWEEP_BYTES.contains(&bytes) {
        Ok(bytes)
    } else {
        Err(format!("{bytes} is not a size of the sweep {SWEEP_BYTES:?}"))
    }
}

impl Args {
    fn wants(&self, app: App) -> bool {
        self.apps.is_empty() || self.apps.contains(&app)
    }

    /// The sweep's sizes asked for, in the sweep's order.
    fn sizes(&self) -> Vec<usize> {
        let wanted = |b: &usize| self.payloads.is_empty() || self.payloads.contains(b);
        SWEEP_BYTES.iter().copied().filter(wanted).collect()
    }
}

pub fn run(args: Args) -> Result<(), String> {
    interrupt::catch();
    let mut report = Report::new(&args.suite, "payload")?;
    let samples =
        args.samples.unwrap_or(if args.suite.quick { QUICK_SAMPLES } else { DEFAULT_SAMPLES });
    let run_dir = RunDir::create("payload")?;
    let configs: Vec<(App, ReplicaMode)> =
        CONFIGS.into_iter().filter(|(app, _)| args.wants(*app)).collect();
    let sizes = args.sizes();
    // Before anything is measured: a missing server fails the run at once.
    for server in configs.iter().filter_map(|(app, _)| app.external()) {
        crate::app_servers::check_installed(server)?;
    }
    note!(
        "mu bench payload: 3 replicas on shm; {} payload sizes x {} configurations, {samples} \
         samples each",
        sizes.len(),
        configs.len()
    );
    let write2 = {
        let dir = run_dir.subdirectory("fabric")?;
        fabric::write2_rtt(dir.path(), samples)?
    };
    let mut all: Vec<((App, ReplicaMode), Vec<PayloadResult>)> = Vec::new();
    for config in configs {
        note!("{} {}:", config.0.name(), config.1.name());
        all.push((config, sweep(&run_dir, config, &sizes, samples)?));
    }
    // The figure's categories are the sweep's sizes: the order book's one size is in the table.
    let swept = all.len();
    if args.wants(App::Orderbook) {
        // The order book's requests have one size: measured there, beside standalone.
        let order_bytes = crate::cluster::order(0).encode().len();
        for app in [App::Standalone, App::Orderbook] {
            note!("{} direct, {order_bytes} B (the order book's order):", app.name());
            let config = (app, ReplicaMode::Direct);
            all.push((config, sweep(&run_dir, config, &[order_bytes], samples)?));
        }
    }
    report.table(&table(&all, &write2), "")?;
    if !args.suite.json {
        print_notes(&all, &write2);
    }
    let chart = chart(&all[..swept], &sizes);
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

/// One configuration at `sizes`, each on a fresh cluster on shm.
fn sweep(
    run_dir: &RunDir,
    (app, mode): (App, ReplicaMode),
    sizes: &[usize],
    samples: u64,
) -> Result<Vec<PayloadResult>, String> {
    replication::sweep(
        run_dir,
        (mode, app, mu_replica::Protocol::Mu),
        (FabricChoice::Shm, None, ThreadsChoice::Shared, false),
        sizes,
        samples,
        0,
    )
}

/// The write2 floor, and which sizes ran with a follower dropped.
fn print_notes(all: &Sweeps, write2: &crate::measure::Summary) {
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

/// Each configuration's results, in the order measured.
type Sweeps = [((App, ReplicaMode), Vec<PayloadResult>)];

/// Every configuration and size: percentiles and the ratio to the fabric's write2.
fn table(sweeps: &Sweeps, write2: &crate::measure::Summary) -> Table {
    let mut table = Table::new(
        "Propose latency on the leader of 3 replicas on shm (µs); ratio to the write2 round trip",
        &["app", "mode", "payload", "entry", "samples", "p1", "p50", "p99", "p50 / write2"],
    );
    for ((app, mode), results) in sweeps {
        for r in results {
            let [p1, p50, p99] = quantiles_us(&r.latency);
            table.row(vec![
                app.name().into(),
                mode.name().into(),
                format!("{} B", r.payload_bytes),
                format!("{} B", app.entry_bytes(r.payload_bytes)),
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
fn chart(sweeps: &Sweeps, sizes: &[usize]) -> BarChart {
    BarChart {
        title: "Replication latency vs payload (median, p1-p99)".into(),
        x_label: "payload".into(),
        y_label: "propose latency (µs)".into(),
        categories: sizes.iter().map(|b| format!("{b} B")).collect(),
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
                    "entry_bytes": app.entry_bytes(r.payload_bytes),
                    "samples": r.latency.len(),
                    "latency_ns": {"p1": p1, "p50": p50, "p99": p99},
                    "lost_proposals": r.lost_proposals, "followers_dropped": r.followers_dropped,
                })
            })
        })
        .collect()
}
