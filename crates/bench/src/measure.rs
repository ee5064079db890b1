//! Statistics of a measured loop: warm-up, a latency histogram, and its summary.

use hdrhistogram::Histogram;
use serde_json::json;
use std::time::Instant;

pub const WARMUP_ITERATIONS: u64 = 10_000;

pub struct Summary {
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub mean: f64,
    pub samples: u64,
}

impl Summary {
    pub fn of(h: &Histogram<u64>) -> Summary {
        Summary {
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            mean: h.mean(),
            samples: h.len(),
        }
    }

    pub fn json(&self) -> serde_json::Value {
        json!({"p50": self.p50, "p99": self.p99, "p999": self.p999, "mean": (self.mean * 10.0).round() / 10.0, "samples": self.samples})
    }
}

/// Up to a minute (a little more: the bound rounds up). Samples are recorded saturating: one
/// past it (the process stopped for that long, as by Ctrl-Z) counts as the bound rather than
/// ending the run on a panic.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

pub fn measure(
    name: &str,
    samples: u64,
    mut iteration: impl FnMut(u64) -> Result<(), String>,
) -> Result<Summary, String> {
    let mut h = histogram();
    let total = WARMUP_ITERATIONS + samples;
    let step = (total / 10).max(1);
    note_part!("  {name:<14} ");
    for i in 1..=total {
        let start = Instant::now();
        iteration(i)?;
        let ns = start.elapsed().as_nanos() as u64;
        if i > WARMUP_ITERATIONS {
            h.saturating_record(ns.max(1));
        }
        if i % step == 0 {
            note_part!(".");
            crate::interrupt::check()?;
        }
    }
    let s = Summary::of(&h);
    note!(" p50 {} ns", s.p50);
    Ok(s)
}
