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

/// Where the pipelined orders' ids start: after any the one-at-a-time rows use on the same
/// book, since a book refuses an id it has seen.
const PIPELINED_FIRST: u64 = 1 << 40;

/// Times `samples` limit orders sent [`mu_service::PIPELINE_LANES`] at a time
/// ([`mu_service::Client::order_many`]), after `warmup` untimed ones: each batch's time
/// divided among its orders, so that a row's figures are what an order costs when a trader
/// keeps that many in flight. Each must be accepted. Nanoseconds.
pub fn measure_pipelined(
    client: &mut Client,
    samples: u64,
    warmup: u64,
    progress: &mut Progress,
) -> Result<Histogram<u64>, String> {
    let lanes = mu_service::PIPELINE_LANES as u64;
    let mut h = latency_histogram();
    let mut i = 0;
    while i < warmup + samples {
        interrupt::check()?;
        let batch = lanes.min(warmup + samples - i);
        progress.inc(batch);
        let commands =
            (i..i + batch).map(|k| crate::cluster::order(PIPELINED_FIRST + k).command).collect();
        let started = Instant::now();
        let replies = client.order_many(commands);
        let ns = started.elapsed().as_nanos() as u64;
        for (k, reply) in (i..).zip(replies) {
            match reply.map_err(|e| format!("pipelined order {k}: {e}"))? {
                Reply::Events(events) if matches!(events.first(), Some(Event::Accepted { .. })) => {
                }
                other => return Err(format!("pipelined order {k} was not accepted: {other:?}")),
            }
        }
        if i >= warmup {
            for _ in 0..batch {
                h.saturating_record((ns / batch).max(1));
            }
        }
        i += batch;
    }
    Ok(h)
}
