//! The charts of a `mu bench sim` run (`--svg DIR`): histograms of the samples behind each
//! median, the throughput–latency curve, and uKharon's failovers by case.

use super::{Failovers, Point};
use mu_figures::{BarChart, Histogram, LineChart, LineSeries};
use std::path::Path;

/// Bins of every histogram.
const BINS: usize = 40;

/// One chart and the name its file takes after the profile's (`sim-PROFILE-NAME.svg`).
#[derive(Clone, Debug, PartialEq)]
pub enum Chart {
    Histogram(&'static str, Histogram),
    Line(&'static str, LineChart),
    Bar(&'static str, BarChart),
}

impl Chart {
    /// Writes the chart into `dir` as `sim-PROFILE-NAME.svg`.
    pub fn write(&self, dir: &Path, profile: &str) -> Result<(), String> {
        let file = |name: &str| dir.join(format!("sim-{profile}-{name}.svg"));
        let result = match self {
            Chart::Histogram(name, h) => h.write_svg(&file(name)),
            Chart::Line(name, l) => l.write_svg(&file(name)),
            Chart::Bar(name, b) => b.write_svg(&file(name)),
        };
        result.map_err(|e| e.to_string())
    }
}

/// Replication latencies of each series, in µs.
pub fn replication(name: &'static str, title: &str, series: Vec<(String, Vec<f64>)>) -> Chart {
    Chart::Histogram(
        name,
        Histogram {
            title: title.into(),
            x_label: "replication latency (µs, virtual time)".into(),
            series,
            bins: BINS,
        },
    )
}

/// A Mu failover's total, detection and (with `switch`) permission switch, run by run.
pub fn failover(title: &str, f: &Failovers, switch: bool) -> Chart {
    let mut series = vec![
        ("total".to_string(), f.totals_us.clone()),
        ("detection (total − switch)".to_string(), f.detections_us.clone()),
    ];
    if switch {
        series.push(("permission switch".to_string(), f.switches_us.clone()));
    }
    Chart::Histogram(
        "failover",
        Histogram {
            title: title.into(),
            x_label: "time from the failure (µs, virtual time)".into(),
            series,
            bins: BINS,
        },
    )
}

/// Velos's failovers (at the remaining replica, under load, µs) beside Mu's on the same
/// profile (Velos Fig. 2).
pub fn failovers_compared(velos_us: Vec<f64>, mu: &Failovers) -> Chart {
    Chart::Histogram(
        "failover",
        Histogram {
            title: "Velos (leader crashed, notified) against Mu (leader stopped), simulated".into(),
            x_label: "failover: failure to the first new value (µs, virtual time)".into(),
            series: vec![
                ("Velos, at the remaining replica under load".to_string(), velos_us),
                ("Mu, at the new leader".to_string(), mu.totals_us.clone()),
            ],
            bins: BINS,
        },
    )
}

/// Mu Fig. 7: median call latency against throughput, a line per outstanding count through
/// its batch sizes.
pub fn curve(points: &[Point]) -> Chart {
    let mut outstanding: Vec<usize> = points.iter().map(|p| p.outstanding).collect();
    outstanding.dedup();
    let series = outstanding
        .iter()
        .map(|&o| LineSeries {
            name: format!("{o} outstanding"),
            points: points
                .iter()
                .filter(|p| p.outstanding == o)
                .map(|p| (p.ops_per_us, p.call_p50_us))
                .collect(),
        })
        .collect();
    Chart::Line(
        "throughput",
        LineChart {
            title: "Mu throughput against latency, batches of 1 to 128 (simulated)".into(),
            x_label: "throughput (requests/µs)".into(),
            y_label: "median call latency (µs)".into(),
            series,
            log_x: false,
            log_y: true,
        },
    )
}
