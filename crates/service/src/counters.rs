//! What a server counts, for status and metrics: requests and their outcomes, connections, and
//! a latency histogram. Written by the connections, the proposer and the fabric path's ring
//! thread; read by the metrics endpoint.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the request latency histogram's buckets, in microseconds.
pub const LATENCY_BUCKETS_US: [u64; 12] =
    [10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 50_000, 100_000];

/// Counters the server keeps, for status and metrics.
#[derive(Default)]
pub struct ServerCounters {
    pub requests: AtomicU64,
    pub committed: AtomicU64,
    pub refused: AtomicU64,
    pub not_leader: AtomicU64,
    pub retries: AtomicU64,
    pub connections: AtomicU64,
    /// Connections closed at once because [`ServerLimits::connections_max`] were open.
    pub connections_refused: AtomicU64,
    /// Requests that came over the fabric (counted in `requests` too).
    pub fabric_requests: AtomicU64,
    latency_buckets: [AtomicU64; LATENCY_BUCKETS_US.len()],
    latency_overflow: AtomicU64,
    latency_sum_ns: AtomicU64,
}

/// A copy of the latency histogram: per-bucket counts (not cumulative).
pub struct LatencySnapshot {
    pub buckets: Vec<(u64, u64)>,
    pub overflow: u64,
    pub sum_ns: u64,
}

impl ServerCounters {
    /// Counts one request answered `ns` after it arrived.
    pub fn record_latency(&self, ns: u64) {
        self.latency_sum_ns.fetch_add(ns, Ordering::Relaxed);
        match LATENCY_BUCKETS_US.iter().position(|&b| ns <= b * 1000) {
            Some(i) => self.latency_buckets[i].fetch_add(1, Ordering::Relaxed),
            None => self.latency_overflow.fetch_add(1, Ordering::Relaxed),
        };
    }

    pub fn latency_snapshot(&self) -> LatencySnapshot {
        LatencySnapshot {
            buckets: LATENCY_BUCKETS_US
                .iter()
                .zip(&self.latency_buckets)
                .map(|(&b, c)| (b, c.load(Ordering::Relaxed)))
                .collect(),
            overflow: self.latency_overflow.load(Ordering::Relaxed),
            sum_ns: self.latency_sum_ns.load(Ordering::Relaxed),
        }
    }
}
