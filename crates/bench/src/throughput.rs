//! `mu bench throughput` (Mu paper §7.4, Figure 7): throughput against latency on the leader of
//! three replicas on shm, for every combination of outstanding entries {1, 2, 4, 8} and requests
//! per entry {1, 2, 4, ..., 128}, 64-byte requests. Each point is a fresh cluster whose leader
//! calls `propose_many` with `outstanding × batch` requests again and again; the latency is that
//! of a call (the time every request in it waits at most), the throughput requests committed per
//! second over the timed calls.

use crate::cluster::App;
use crate::interrupt;
use crate::replication::{self, Load};
use crate::suite::{us, Report, SuiteArgs};
use mu_figures::{LineChart, LineSeries, Table};
use mu_procs::run_dir::RunDir;
use serde_json::json;

const OUTSTANDING: [usize; 4] = [1, 2, 4, 8];
const BATCHES: [usize; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
const PAYLOAD_BYTES: usize = 64;
/// Timed calls per point: about the same number of requests per point would give the small
/// batches too few samples, so the number of calls is fixed.
const DEFAULT_CALLS: u64 = 20_000;
const QUICK_CALLS: u64 = 500;
/// The target of the suite: 20 million operations per second at 64 B.
const TARGET_MOPS: f64 = 20.0;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Timed calls per point [default: 20000; 500 with --quick].
    #[arg(long, value_parser = crate::counts::count)]
    calls: Option<u64>,
    /// Only this point, as OUTSTANDINGxBATCH (e.g. 8x128: 8 outstanding entries of 128
    /// requests), any outstanding 1 to 8 and batch 1 to 1024; for a profile of one point.
    #[arg(long, value_parser = parse_point)]
    point: Option<Load>,
}

/// `OUTSTANDINGxBATCH` as a load.
fn parse_point(text: &str) -> Result<Load, String> {
    let bad = || format!("{text:?}: expected OUTSTANDINGxBATCH, e.g. 8x128");
    let (outstanding, batch) = text.split_once(['x', 'X']).ok_or_else(bad)?;
    let outstanding: usize = outstanding.trim().parse().map_err(|_| bad())?;
    let batch: usize = batch.trim().parse().map_err(|_| bad())?;
    if !(1..=8).contains(&outstanding) || !(1..=1024).contains(&batch) {
        return Err(format!("{text:?}: outstanding 1 to 8, batch 1 to 1024"));
    }
    Ok(Load { batch, outstanding })
}

struct Point {
    load: Load,
    mops: f64,
    p50_us: f64,
    p99_us: f64,
    calls: u64,
}

pub fn run(args: Args) -> Result<(), String> {
    interrupt::catch();
    let mut report = Report::new(&args.suite, "throughput")?;
    let calls = args.calls.unwrap_or(if args.suite.quick { QUICK_CALLS } else { DEFAULT_CALLS });
    let run_dir = RunDir::create("throughput")?;
    let loads: Vec<Load> = match args.point {
        Some(load) => vec![load],
        None => OUTSTANDING
            .iter()
            .flat_map(|&outstanding| BATCHES.iter().map(move |&batch| Load { batch, outstanding }))
            .collect(),
    };
    note!(
        "mu bench throughput: 3 replicas on shm, {PAYLOAD_BYTES}-byte requests, {} points of \
         {calls} calls",
        loads.len()
    );
    let mut points = Vec::new();
    for &load in &loads {
        let Load { batch, outstanding } = load;
        interrupt::check()?;
        note_part!("outstanding {outstanding} batch {batch:>3}:");
        let r = replication::throughput(&run_dir, App::Standalone, PAYLOAD_BYTES, load, calls)?;
        let mops = r.requests as f64 / (r.timed_ns.max(1) as f64 / 1e9) / 1e6;
        points.push(Point {
            load,
            mops,
            p50_us: r.latency.value_at_quantile(0.5) as f64 / 1000.0,
            p99_us: r.latency.value_at_quantile(0.99) as f64 / 1000.0,
            calls: r.latency.len(),
        });
    }

    let mut table = Table::new(
        &format!("Throughput against latency, {PAYLOAD_BYTES}-byte requests, 3 replicas on shm"),
        &["outstanding", "batch", "calls", "Mops/s", "call p50 (µs)", "call p99 (µs)"],
    );
    for p in &points {
        table.row(vec![
            p.load.outstanding.to_string(),
            p.load.batch.to_string(),
            p.calls.to_string(),
            format!("{:.3}", p.mops),
            us(p.p50_us),
            us(p.p99_us),
        ]);
    }
    report.table(&table, "")?;
    let best = points.iter().max_by(|a, b| a.mops.total_cmp(&b.mops));
    if let (Some(best), false) = (best, args.suite.json) {
        println!(
            "best: {:.3} Mops/s at outstanding {} batch {} (p50 {} µs); target {TARGET_MOPS} Mops/s: {}",
            best.mops,
            best.load.outstanding,
            best.load.batch,
            us(best.p50_us),
            if best.mops >= TARGET_MOPS { "met" } else { "not met" }
        );
    }
    let chart = LineChart {
        title: format!("Throughput vs latency, {PAYLOAD_BYTES}-byte requests (batch 1 to 128)"),
        x_label: "throughput (million requests/s)".into(),
        y_label: "call latency p50 (µs)".into(),
        series: OUTSTANDING
            .iter()
            .map(|&o| LineSeries {
                name: format!("{o} outstanding"),
                points: points
                    .iter()
                    .filter(|p| p.load.outstanding == o)
                    .map(|p| (p.mops, p.p50_us))
                    .collect(),
            })
            .collect(),
        log_x: false,
        log_y: true,
    };
    let svg = report.path(".svg");
    chart.write_svg(&svg).map_err(|e| e.to_string())?;
    report.finish(json!({
        "payload_bytes": PAYLOAD_BYTES,
        "results": points.iter().map(|p| json!({
            "outstanding": p.load.outstanding, "batch": p.load.batch, "calls": p.calls,
            "mops": p.mops, "p50_us": p.p50_us, "p99_us": p.p99_us,
        })).collect::<Vec<_>>(),
        "best_mops": best.map(|b| b.mops),
        "target_mops": TARGET_MOPS,
    }));
    Ok(())
}
