//! `mu bench peers` (Mu paper §7.1, Figure 4): Mu's replication latency beside real systems a user
//! would otherwise replicate with, all measured in the same run on this machine: Redis with two
//! replicas (`SET` then `WAIT`), etcd with three members, openraft with three in-process nodes,
//! and Aeron Cluster with three member JVMs and an echo service ([`mu_peers`] starts, measures and
//! stops them). Mu's figure is propose latency on the
//! leader of three replicas on shm, standalone and in direct mode, as `mu bench replication`
//! measures it.

use crate::cluster::{App, FabricChoice, ReplicaMode, ThreadsChoice};
use crate::interrupt;
use crate::replication;
use crate::suite::{latency_histogram, quantiles_us, us, Report, SuiteArgs};
use hdrhistogram::Histogram;
use mu_figures::{Bar, BarChart, BarSeries, Table};
use mu_peers::{Options, System};
use mu_procs::run_dir::RunDir;
use serde_json::json;

const DEFAULT_SAMPLES: u64 = 10_000;
const QUICK_SAMPLES: u64 = 1_000;
/// The target: Mu's p50 at least this many times lower than the fastest peer's.
const TARGET_FACTOR: f64 = 50.0;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Value size in bytes.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
    payload: u16,
    /// Timed operations per system [default: 10000; 1000 with --quick].
    #[arg(long, value_parser = crate::counts::count)]
    samples: Option<u64>,
    /// The peers to measure, comma-separated [default: all of redis-wait, etcd, openraft,
    /// aeron-cluster].
    #[arg(long, value_delimiter = ',')]
    systems: Vec<System>,
}

struct Row {
    system: String,
    version: String,
    notes: String,
    h: Histogram<u64>,
}

pub fn run(args: Args) -> Result<(), String> {
    interrupt::catch();
    let mut report = Report::new(&args.suite, "peers")?;
    let samples =
        args.samples.unwrap_or(if args.suite.quick { QUICK_SAMPLES } else { DEFAULT_SAMPLES });
    let payload = usize::from(args.payload);
    let systems = if args.systems.is_empty() { System::ALL.to_vec() } else { args.systems.clone() };
    let mut rows = Vec::new();

    // Mu first, alone on the machine as every peer is.
    rows.push(measure_mu(payload, samples)?);

    let warmup = (samples / 10).clamp(100, 2_000);
    for system in systems {
        interrupt::check()?;
        rows.push(measure_peer(&report, system, payload, samples, warmup)?);
    }

    let mu_p50 = quantiles_us(&rows[0].h)[1];
    let mut table = Table::new(
        &format!("Replication latency, {payload}-byte values, 3 nodes on this machine (µs)"),
        &["system", "version", "samples", "p1", "p50", "p99", "p50 / mu p50"],
    );
    for r in &rows {
        let [p1, p50, p99] = quantiles_us(&r.h);
        table.row(vec![
            r.system.clone(),
            r.version.clone(),
            r.h.len().to_string(),
            us(p1),
            us(p50),
            us(p99),
            format!("{:.0}", p50 / mu_p50),
        ]);
    }
    report.table(&table, "")?;
    let fastest_peer = rows[1..]
        .iter()
        .map(|r| (quantiles_us(&r.h)[1], r.system.as_str()))
        .min_by(|a, b| a.0.total_cmp(&b.0));
    let target = fastest_peer.map(|(p50, name)| {
        let factor = p50 / mu_p50;
        (name.to_string(), factor, factor >= TARGET_FACTOR)
    });
    if !args.suite.json {
        for r in &rows[1..] {
            if !r.notes.is_empty() {
                println!("{}: {}", r.system, r.notes);
            }
        }
        if let Some((name, factor, met)) = &target {
            println!(
                "target: mu p50 at least {TARGET_FACTOR:.0}x lower than the fastest peer ({name}): \
                 {factor:.0}x ({})",
                if *met { "met" } else { "not met" }
            );
        }
    }
    let chart = chart(&rows, payload);
    let svg = report.path(".svg");
    chart.write_svg(&svg).map_err(|e| e.to_string())?;
    report.finish(json!({
        "payload_bytes": payload,
        "results": rows.iter().map(|r| {
            let [p1, p50, p99] = quantiles_us(&r.h);
            json!({"system": r.system, "version": r.version, "samples": r.h.len(),
                   "p1_us": p1, "p50_us": p50, "p99_us": p99, "notes": r.notes})
        }).collect::<Vec<_>>(),
        "target": target.map(|(name, factor, met)| json!({
            "fastest_peer": name, "fastest_peer_p50_over_mu_p50": factor,
            "required": TARGET_FACTOR, "met": met})),
    }));
    Ok(())
}

/// Mu's replication latency: three replicas on shm, standalone, direct mode.
fn measure_mu(payload: usize, samples: u64) -> Result<Row, String> {
    note!("mu bench peers: mu (3 replicas on shm, standalone, direct):");
    let run_dir = RunDir::create("peers")?;
    let mu = replication::sweep(
        &run_dir,
        (ReplicaMode::Direct, App::Standalone, mu_replica::Protocol::Mu),
        (FabricChoice::Shm, None, ThreadsChoice::Shared, false),
        &[payload],
        samples,
        0,
    )?;
    drop(run_dir);
    let mu = mu.into_iter().next().ok_or("no result for mu")?;
    Ok(Row {
        system: "mu".into(),
        version: format!(
            "mu {} (protocol {})",
            env!("CARGO_PKG_VERSION"),
            mu_replica::protocol_tag()
        ),
        notes: "propose on the leader, 3 replicas on shm".into(),
        h: mu.latency,
    })
}

/// One peer's replication latency, with a progress bar.
fn measure_peer(
    report: &Report,
    system: System,
    payload: usize,
    samples: u64,
    warmup: u64,
) -> Result<Row, String> {
    let mut progress = report.progress(&format!("peers {}", system.name()), samples);
    let options = Options { payload_bytes: payload, samples, warmup };
    let measured = mu_peers::measure(system, &options, &mut |done| progress.set(done))
        .map_err(|e| format!("{}: {e}", system.name()))?;
    progress.finish();
    let mut h = latency_histogram();
    for ns in &measured.latencies_ns {
        h.record((*ns).max(1)).map_err(|e| e.to_string())?;
    }
    Ok(Row { system: system.name().into(), version: measured.version, notes: measured.notes, h })
}

/// The figure: every system's median with its p1-p99 range, on a log scale.
fn chart(rows: &[Row], payload: usize) -> BarChart {
    BarChart {
        title: format!("Replication latency, {payload}-byte values (median, p1-p99)"),
        x_label: "system".into(),
        y_label: "latency (µs)".into(),
        categories: vec![format!("{payload} B")],
        series: rows
            .iter()
            .map(|r| {
                let [p1, p50, p99] = quantiles_us(&r.h);
                BarSeries { name: r.system.clone(), points: vec![Some(Bar::new(p50, p1, p99))] }
            })
            .collect(),
        log_y: true,
    }
}
