//! What `mu demo`'s client threads share (key-value clients and order book traders alike).

use hdrhistogram::Histogram;
use mu_daemon::kv_cluster::KvCluster;
use mu_daemon::kv_failover::FailoverClock;
use mu_procs::interrupt;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What the client threads share.
pub(crate) struct Shared {
    pub stop: AtomicBool,
    pub ops: AtomicU64,
    pub errors: AtomicU64,
    /// Each key's last acknowledged value, and values written with an unknown outcome since.
    pub truth: Mutex<BTreeMap<Vec<u8>, KeyTruth>>,
    /// The order book: the ids of the orders whose acceptance a trader saw.
    pub orders: Mutex<Vec<u64>>,
    /// The order book: trades the traders saw (each once, by its taker).
    pub trades: AtomicU64,
    /// Latencies in nanoseconds, merged from the threads now and then.
    pub latency: Mutex<Histogram<u64>>,
    /// The failover as the clients see it: from the kill to the first answer from another
    /// replica.
    pub clock: FailoverClock,
}

#[derive(Default, Clone)]
pub(crate) struct KeyTruth {
    pub acked: Option<Vec<u8>>,
    pub unknown: Vec<Vec<u8>>,
}

impl Shared {
    pub fn new() -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            ops: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            truth: Mutex::new(BTreeMap::new()),
            orders: Mutex::new(Vec::new()),
            trades: AtomicU64::new(0),
            latency: Mutex::new(Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds")),
            clock: FailoverClock::new(),
        }
    }
}

/// Runs for `phase` with a progress line, watching for Ctrl-C and dead replicas.
pub(crate) fn watch(
    shared: &Shared,
    cluster: &mut KvCluster,
    start: Instant,
    phase: Duration,
    what: &str,
) -> Result<(), String> {
    let until = Instant::now() + phase;
    let (mut last_ops, mut last_t) = (shared.ops.load(Ordering::Relaxed), Instant::now());
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(250));
        interrupt::check()?;
        cluster.check_alive()?;
        let ops = shared.ops.load(Ordering::Relaxed);
        let rate = (ops - last_ops) as f64 / last_t.elapsed().as_secs_f64();
        (last_ops, last_t) = (ops, Instant::now());
        let p50 = shared.latency.lock().unwrap_or_else(|p| p.into_inner()).value_at_quantile(0.5);
        note_part!(
            "\r[{:5.1} s] {what}: {ops} operations, {rate:8.0} ops/s, p50 {:7.1} µs, {} errors   ",
            start.elapsed().as_secs_f64(),
            p50 as f64 / 1000.0,
            shared.errors.load(Ordering::Relaxed)
        );
    }
    Ok(())
}
