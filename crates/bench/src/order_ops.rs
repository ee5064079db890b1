//! Timing order book requests through the client library ([`mu_service::Client::order`]), one
//! at a time: the order book rows of `mu bench e2e`.

use crate::interrupt;
use crate::suite::latency_histogram;
use hdrhistogram::Histogram;
use mu_figures::Progress;
use mu_orderbook::{Event, Reply};
use mu_service::Client;
use std::time::Instant;

/// Times `samples` limit orders (after `warmup` untimed ones), the orders of
/// [`crate::cluster::order`]: each must be accepted. Latencies in nanoseconds.
pub fn measure(
    client: &mut Client,
    samples: u64,
    warmup: u64,
    progress: &mut Progress,
) -> Result<Histogram<u64>, String> {
    let mut h = latency_histogram();
    for i in 0..warmup + samples {
        if i % 256 == 0 {
            interrupt::check()?;
            progress.inc(256.min(warmup + samples - i));
        }
        let command = crate::cluster::order(i).command;
        let started = Instant::now();
        let reply = client.order(command).map_err(|e| format!("order: {e}"))?;
        let ns = started.elapsed().as_nanos() as u64;
        match reply {
            Reply::Events(events) if matches!(events.first(), Some(Event::Accepted { .. })) => {}
            other => return Err(format!("order {i} was not accepted: {other:?}")),
        }
        if i >= warmup {
            h.saturating_record(ns.max(1));
        }
    }
    Ok(h)
}
