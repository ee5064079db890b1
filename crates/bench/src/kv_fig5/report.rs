//! What `mu bench ukharon-kv` prints and writes: three tables (latency, failover, targets),
//! each also a CSV, two figures as SVG, and one JSON object with every figure and ratio.

use super::systems::System;
use super::{Failovers, Latency};
use crate::kv_ops::OPS;
use crate::suite::{us, Report};
use mu_figures::{Bar, BarChart, BarSeries, Table};
use serde_json::{json, Value};

/// The bound on uKharon-KV's GET p50 over the bare store's.
const GET_BOUND: f64 = 1.1;
/// The bound on uKharon-KV's failover p50 over Mu's.
const FAILOVER_BOUND: f64 = 0.2;

/// Everything one run measured.
pub struct Run {
    pub payload: u32,
    pub samples: u64,
    pub latencies: Vec<Latency>,
    /// Requests the active-checked server found inactive (answered with a retry).
    pub inactive: u64,
    pub failovers: Vec<Failovers>,
}

impl Latency {
    /// p50, p95 and p99 in microseconds.
    fn quantiles_us(&self) -> [f64; 3] {
        [0.5, 0.95, 0.99].map(|q| self.h.value_at_quantile(q) as f64 / 1000.0)
    }
}

impl Failovers {
    /// The nearest-rank `q` quantile of the failovers, in microseconds.
    fn quantile_us(&self, q: f64) -> f64 {
        let mut sorted = self.each_ns.clone();
        sorted.sort_unstable();
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1] as f64 / 1000.0
    }
}

/// A target: a ratio of two figures of this run, and the bound it must not exceed.
struct Target {
    key: &'static str,
    what: &'static str,
    ratio: f64,
    bound: f64,
}

impl Target {
    fn met(&self) -> bool {
        self.ratio <= self.bound
    }
}

impl Run {
    fn p50_us(&self, system: System, op: &str) -> f64 {
        self.latencies
            .iter()
            .find(|l| l.system == system && l.op == op)
            .map_or(f64::NAN, |l| l.quantiles_us()[0])
    }

    fn failover_p50_us(&self, system: System) -> f64 {
        self.failovers.iter().find(|f| f.system == system).map_or(f64::NAN, |f| f.quantile_us(0.5))
    }

    fn targets(&self) -> [Target; 2] {
        [
            Target {
                key: "get_p50_over_unreplicated",
                what: "uKharon-KV GET p50 / bare store GET p50",
                ratio: self.p50_us(System::UkharonKv, "get")
                    / self.p50_us(System::Unreplicated, "get"),
                bound: GET_BOUND,
            },
            Target {
                key: "failover_p50_over_mu",
                what: "uKharon-KV failover p50 / Mu failover p50",
                ratio: self.failover_p50_us(System::UkharonKv) / self.failover_p50_us(System::Mu),
                bound: FAILOVER_BOUND,
            },
        ]
    }
}

/// Prints the tables (or, with `--json`, the JSON object) and writes the files.
pub fn write(mut report: Report, run: &Run) -> Result<(), String> {
    report.table(&latency_table(run), "")?;
    report.table(&failover_table(run), "-failover")?;
    report.table(&targets_table(run), "-targets")?;
    let svg = report.path(".svg");
    latency_chart(run).write_svg(&svg).map_err(|e| e.to_string())?;
    let svg = report.path("-failover.svg");
    failover_chart(run).write_svg(&svg).map_err(|e| e.to_string())?;
    report.finish(json(run));
    Ok(())
}

fn latency_table(run: &Run) -> Table {
    let mut table = Table::new(
        &format!("Key-value latency through the client library, {}-byte values (µs)", run.payload),
        &["system", "op", "samples", "p50", "p95", "p99", "p50 / unreplicated p50"],
    );
    for l in &run.latencies {
        let [p50, p95, p99] = l.quantiles_us();
        table.row(vec![
            l.system.name().into(),
            l.op.into(),
            l.h.len().to_string(),
            us(p50),
            us(p95),
            us(p99),
            format!("{:.2}", p50 / run.p50_us(System::Unreplicated, l.op)),
        ]);
    }
    table
}

fn failover_table(run: &Run) -> Table {
    let mut table = Table::new(
        "Failover, leader or primary killed (SIGKILL), as a client looping puts sees it (µs)",
        &["protocol", "failovers", "p50", "p95", "min", "max"],
    );
    for f in &run.failovers {
        table.row(vec![
            f.system.name().into(),
            f.each_ns.len().to_string(),
            us(f.quantile_us(0.5)),
            us(f.quantile_us(0.95)),
            us(f.quantile_us(0.0)),
            us(f.quantile_us(1.0)),
        ]);
    }
    table
}

fn targets_table(run: &Run) -> Table {
    let mut table =
        Table::new("Targets, as ratios of this run", &["target", "ratio", "at most", "verdict"]);
    for t in run.targets() {
        table.row(vec![
            t.what.into(),
            format!("{:.2}", t.ratio),
            format!("{:.2}", t.bound),
            if t.met() { "met" } else { "missed" }.into(),
        ]);
    }
    table
}

fn latency_chart(run: &Run) -> BarChart {
    BarChart {
        title: format!("Key-value latency, {}-byte values (median, p50-p99)", run.payload),
        x_label: "operation".into(),
        y_label: "latency (µs)".into(),
        categories: OPS.iter().map(|s| s.to_uppercase()).collect(),
        series: System::LATENCY
            .iter()
            .map(|&s| BarSeries {
                name: s.name().into(),
                points: OPS
                    .iter()
                    .map(|op| {
                        run.latencies.iter().find(|l| l.system == s && l.op == *op).map(|l| {
                            let [p50, _, p99] = l.quantiles_us();
                            Bar::new(p50, p50, p99)
                        })
                    })
                    .collect(),
            })
            .collect(),
        log_y: true,
    }
}

fn failover_chart(run: &Run) -> BarChart {
    BarChart {
        title: "Failover, kill mode (median, min-p95)".into(),
        x_label: "protocol".into(),
        y_label: "failover (µs)".into(),
        categories: run.failovers.iter().map(|f| f.system.name().to_string()).collect(),
        series: vec![BarSeries {
            name: "failover".into(),
            points: run
                .failovers
                .iter()
                .map(|f| {
                    Some(Bar::new(f.quantile_us(0.5), f.quantile_us(0.0), f.quantile_us(0.95)))
                })
                .collect(),
        }],
        log_y: true,
    }
}

fn json(run: &Run) -> Value {
    let latency: Vec<Value> = run
        .latencies
        .iter()
        .map(|l| {
            let [p50, p95, p99] = l.quantiles_us();
            json!({"system": l.system.name(), "op": l.op, "samples": l.h.len(),
                   "p50_us": p50, "p95_us": p95, "p99_us": p99,
                   "p50_over_unreplicated": p50 / run.p50_us(System::Unreplicated, l.op)})
        })
        .collect();
    let failover: Vec<Value> = run
        .failovers
        .iter()
        .map(|f| {
            let each_us: Vec<f64> = f.each_ns.iter().map(|&ns| ns as f64 / 1000.0).collect();
            json!({"protocol": f.system.name(), "failovers": f.each_ns.len(),
                   "p50_us": f.quantile_us(0.5), "p95_us": f.quantile_us(0.95),
                   "min_us": f.quantile_us(0.0), "max_us": f.quantile_us(1.0), "each_us": each_us})
        })
        .collect();
    let targets: serde_json::Map<String, Value> = run
        .targets()
        .iter()
        .map(|t| (t.key.to_string(), json!({"ratio": t.ratio, "at_most": t.bound, "met": t.met()})))
        .collect();
    json!({
        "payload_bytes": run.payload,
        "samples": run.samples,
        "latency": latency,
        "active_checked_inactive_answers": run.inactive,
        "failover": failover,
        "targets": targets,
    })
}
