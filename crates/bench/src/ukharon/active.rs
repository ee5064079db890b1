//! Figure 1: `Membership::active` with a valid lease beside a bare clock read, per call.
//!
//! Each sample is one call between two reads of the monotonic clock (`t1 − t0`), so both
//! figures carry the same timing overhead (one clock read); the bare clock read's figure is
//! that overhead plus the read timed. A call that found no valid lease (the renewal was late)
//! is counted apart and not timed.

use crate::measure::histogram;
use crate::ukharon::group::{Group, Timings};
use mu_membership::clock::now_ns;
use serde_json::json;
use std::time::Duration;

pub struct ActiveFigure {
    pub active: Percentiles,
    pub clock_read: Percentiles,
    /// Calls that returned false (no valid lease at that moment), not timed.
    pub inactive_calls: u64,
}

#[derive(Clone, Copy)]
pub struct Percentiles {
    pub p50: u64,
    pub p99: u64,
    pub p99999: u64,
    pub samples: u64,
}

impl Percentiles {
    fn of(h: &hdrhistogram::Histogram<u64>) -> Percentiles {
        Percentiles {
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p99999: h.value_at_quantile(0.99999),
            samples: h.len(),
        }
    }

    pub fn json(&self) -> serde_json::Value {
        json!({"p50": self.p50, "p99": self.p99, "p99999": self.p99999, "samples": self.samples})
    }
}

/// `calls` timed calls of each, on a member of an in-process group (three coordinators and
/// one member on shm, `mu ukharon`'s host timings: 3 ms leases renewed 1.5 ms before their end).
pub fn measure(calls: u64) -> Result<ActiveFigure, String> {
    let group = Group::start(Timings::host(), 0, 1)?;
    let (view, _) = group.converge(Duration::from_secs(5))?;
    let member = group.live().next().ok_or("no member")?;
    let mut active = histogram();
    let mut clock = histogram();
    let mut inactive_calls = 0;
    for i in 0..calls {
        if i % 65_536 == 0 {
            crate::interrupt::check()?;
        }
        let t0 = now_ns();
        let on = member.active(&view);
        let t1 = now_ns();
        if on {
            active.saturating_record((t1 - t0).max(1));
        } else {
            inactive_calls += 1;
        }
        let t0 = now_ns();
        std::hint::black_box(now_ns());
        let t1 = now_ns();
        clock.saturating_record((t1 - t0).max(1));
    }
    if active.is_empty() {
        return Err("no call of Active found a valid lease".into());
    }
    Ok(ActiveFigure {
        active: Percentiles::of(&active),
        clock_read: Percentiles::of(&clock),
        inactive_calls,
    })
}
