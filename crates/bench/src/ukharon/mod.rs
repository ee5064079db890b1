//! `mu bench ukharon`: the uKharon paper's figures on this host (§7), with the membership
//! service's threads in this process on the shared-memory fabric ([`group`]).
//!
//! 1. [`active`]: `Active` with a valid lease beside a bare clock read (paper: 38 ns p99).
//! 2. [`renewal`]: the share of `Active` calls that return true at once for leases δ of 18 to
//!    30 µs, idle and under CPU and memory load (paper's Fig. 3).
//! 3. [`failover`]: median failover time per kind of failure (paper's Table 2), threads in
//!    this process; [`processes`]: crash notification against the heartbeat ring, processes.
//! 4. [`bytes`]: bytes per lease renewal (paper: 240 B from three coordinators, 132 B from a
//!    cache), counted from the code path.
//!
//! Figures are printed, never asserted: on a host with few cores the microsecond settings may
//! fail, and that is the finding.

mod active;
mod bytes;
mod failover;
pub(crate) mod group;
mod processes;
mod renewal;

use crate::suite::{us, Report, SuiteArgs};
use crate::{counts, interrupt};
use mu_figures::{Bar, BarChart, BarSeries, LineChart, LineSeries, Table};
use serde_json::json;
use std::time::Duration;

const DEFAULT_CALLS: u64 = 10_000_000;
const QUICK_CALLS: u64 = 200_000;
const DEFAULT_RUNS: u32 = 100;
const QUICK_RUNS: u32 = 3;
const DEFAULT_WINDOW: Duration = Duration::from_millis(500);
const QUICK_WINDOW: Duration = Duration::from_millis(100);

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Timed `Active` calls (and clock reads) [default: 10000000; 200000 with --quick].
    #[arg(long, value_parser = counts::count)]
    calls: Option<u64>,
    /// Failovers per kind of failure [default: 100; 3 with --quick].
    #[arg(long, value_parser = counts::count_u32)]
    runs: Option<u32>,
}

pub fn run(args: Args) -> Result<(), String> {
    interrupt::catch();
    let quick = args.suite.quick;
    let mut report = Report::new(&args.suite, "ukharon")?;
    let calls = args.calls.unwrap_or(if quick { QUICK_CALLS } else { DEFAULT_CALLS });
    let runs = args.runs.unwrap_or(if quick { QUICK_RUNS } else { DEFAULT_RUNS });
    note!("mu bench ukharon: coordinators, caches and members as threads of this process on shm");

    note!("1. Active beside a clock read, {calls} calls each");
    let act = active::measure(calls)?;
    report.table(&active_table(&act), "-active")?;

    let deltas: &[u64] = if quick { &renewal::QUICK_DELTAS_US } else { &renewal::DELTAS_US };
    let host_deltas: &[u64] =
        if quick { &renewal::QUICK_HOST_DELTAS_US } else { &renewal::HOST_DELTAS_US };
    let window = if quick { QUICK_WINDOW } else { DEFAULT_WINDOW };
    note!(
        "2. Active true at once, δ {deltas:?} µs spinning and {host_deltas:?} µs sleeping, \
         x idle/cpu/memory, {window:?} each"
    );
    let mut points = Vec::new();
    for (spinning, deltas) in [(true, deltas), (false, host_deltas)] {
        for load in renewal::Load::ALL {
            for &delta_us in deltas {
                points.push(renewal::measure(spinning, delta_us, load, window)?);
            }
        }
    }
    report.table(&renewal_table(&points), "-renewal")?;
    let svg = report.path("-renewal.svg");
    renewal_chart(&points).write_svg(&svg).map_err(|e| e.to_string())?;

    note!("3. Failovers, {runs} per kind of failure");
    let mut failovers = Vec::new();
    for fault in failover::Fault::ALL {
        note!("  {}", fault.name());
        failovers.push(failover::measure(fault, runs)?);
    }
    for signal in processes::Signal::ALL {
        note!("  {}", signal.name());
        failovers.push(failover::repeat(signal.name(), runs, || processes::one(signal))?);
    }
    report.table(&failover_table(&failovers), "-failover")?;
    let svg = report.path("-failover.svg");
    failover_chart(&failovers).write_svg(&svg).map_err(|e| e.to_string())?;

    let renewals =
        [("coordinators", bytes::from_coordinators()), ("cache", bytes::through_cache())];
    report.table(&bytes_table(&renewals), "-bytes")?;

    report.finish(json!({
        "active_ns": act.active.json(),
        "clock_read_ns": act.clock_read.json(),
        "active_inactive_calls": act.inactive_calls,
        "renewal": points.iter().map(point_json).collect::<Vec<_>>(),
        "failover": failovers.iter().map(failover_json).collect::<Vec<_>>(),
        "renewal_bytes": renewals.iter().map(|(from, b)| json!({
            "from": from, "work_requests": b.work_requests,
            "payload_bytes": b.payload_bytes, "wire_bytes": b.wire_bytes,
        })).collect::<Vec<_>>(),
    }));
    Ok(())
}

fn active_table(a: &active::ActiveFigure) -> Table {
    let title = format!(
        "Active with a valid lease and a bare clock read, ns per call with one clock read of \
         timing ({} calls found no valid lease, not timed)",
        a.inactive_calls
    );
    let mut table = Table::new(&title, &["call", "samples", "p50", "p99", "p99.999"]);
    for (name, p) in [("Active", a.active), ("clock read", a.clock_read)] {
        let cells = [p.samples, p.p50, p.p99, p.p99999].map(|v| v.to_string());
        table.row(std::iter::once(name.to_string()).chain(cells).collect());
    }
    table
}

fn renewal_table(points: &[renewal::Point]) -> Table {
    let mut table = Table::new(
        "Share of Active calls true at once (lease valid), 3 coordinators, 1 member",
        &["threads", "load", "δ (µs)", "calls", "true (%)", "note"],
    );
    for p in points {
        let share = p.share_true.map_or("-".into(), |s| format!("{:.4}", s * 100.0));
        let note = p.problem.clone().unwrap_or_default();
        let threads = if p.spinning { "spin" } else { "sleep 200 µs" };
        let (load, delta, calls) = (p.load.name(), p.delta_us.to_string(), p.calls.to_string());
        table.row(vec![threads.into(), load.into(), delta, calls, share, note]);
    }
    table
}

fn renewal_chart(points: &[renewal::Point]) -> LineChart {
    let mut series = Vec::new();
    for spinning in [true, false] {
        for load in renewal::Load::ALL {
            let threads = if spinning { "spin" } else { "sleep" };
            series.push(LineSeries {
                name: format!("{threads}, {}", load.name()),
                points: points
                    .iter()
                    .filter(|p| p.load == load && p.spinning == spinning)
                    .map(|p| (p.delta_us as f64, p.share_true.unwrap_or(0.0) * 100.0))
                    .collect(),
            });
        }
    }
    LineChart {
        title: "Active true at once against the lease δ (3 coordinators, shm)".into(),
        x_label: "δ (µs)".into(),
        y_label: "calls true at once (%)".into(),
        series,
        log_x: true,
        ..LineChart::default()
    }
}

fn point_json(p: &renewal::Point) -> serde_json::Value {
    json!({"spinning": p.spinning, "load": p.load.name(), "delta_us": p.delta_us, "calls": p.calls,
           "share_true": p.share_true, "problem": p.problem})
}

fn failover_table(failovers: &[failover::Failovers]) -> Table {
    let mut table = Table::new(
        "Failover time (ms): crash to every live member active in the new view",
        &["failure", "runs", "failed runs", "p50", "min", "max", "last problem"],
    );
    for f in failovers {
        let ms = |ns: Option<u64>| ns.map_or("-".into(), |ns| us(ns as f64 / 1e6));
        table.row(vec![
            f.name.into(),
            f.times_ns.len().to_string(),
            f.failed_runs.to_string(),
            ms(f.median_ns()),
            ms(f.times_ns.iter().min().copied()),
            ms(f.times_ns.iter().max().copied()),
            f.last_problem.clone().unwrap_or_default(),
        ]);
    }
    table
}

fn failover_chart(failovers: &[failover::Failovers]) -> BarChart {
    let bar = |f: &failover::Failovers| {
        let ms = |ns: u64| ns as f64 / 1e6;
        let (min, max) = (f.times_ns.iter().min(), f.times_ns.iter().max());
        Some(Bar::new(ms(f.median_ns()?), ms(*min?), ms(*max?)))
    };
    BarChart {
        title: "uKharon failover time on shm, median (min to max)".into(),
        x_label: "failure".into(),
        y_label: "failover (ms)".into(),
        series: vec![BarSeries {
            name: "crash".into(),
            points: failovers.iter().map(bar).collect(),
        }],
        categories: failovers.iter().map(|f| f.name.into()).collect(),
        log_y: false,
    }
}

fn failover_json(f: &failover::Failovers) -> serde_json::Value {
    json!({"failure": f.name, "runs": f.times_ns.len(), "failed_runs": f.failed_runs,
           "p50_ns": f.median_ns(), "times_ns": f.times_ns, "last_problem": f.last_problem})
}

fn bytes_table(renewals: &[(&str, bytes::RenewalBytes)]) -> Table {
    let mut table = Table::new(
        "Bytes per lease renewal, counted from the code path (wire: with InfiniBand headers)",
        &["from", "work requests", "payload (B)", "wire (B)"],
    );
    for (from, b) in renewals {
        let cells = [b.work_requests, b.payload_bytes, b.wire_bytes].map(|v| v.to_string());
        table.row(std::iter::once(from.to_string()).chain(cells).collect());
    }
    table
}
