//! Timing key-value operations through the client library ([`mu_service::Client`]), one at a
//! time, against any server: what `mu bench e2e` and `mu bench ukharon-kv` measure.

use crate::interrupt;
use crate::suite::latency_histogram;
use hdrhistogram::Histogram;
use mu_figures::Progress;
use mu_service::Client;
use std::time::Instant;

/// The keys the operations go round.
pub const KEYS: u64 = 1_000;

/// The operations timed, in the order [`measure`] returns them.
pub const OPS: [&str; 2] = ["put", "get"];

/// Untimed operations before the timed ones: a fifth of them, from 200 to 5,000.
pub fn warmup(samples: u64) -> u64 {
    (samples / 5).clamp(200, 5_000)
}

/// Times `samples` puts, then `samples` gets (each after `warmup` untimed ones) over [`KEYS`]
/// keys; every get must find the value that was put (a server without a store may find none).
/// Latencies in nanoseconds, in the order of [`OPS`].
pub fn measure(
    client: &mut Client,
    value: &[u8],
    samples: u64,
    warmup: u64,
    progress: &mut Progress,
) -> Result<[Histogram<u64>; 2], String> {
    timed_writes_and_reads((samples, warmup), progress, |write, key| {
        if write {
            return client.put(key, value).map_err(|e| format!("put: {e}"));
        }
        let got = client.get(key).map_err(|e| format!("get: {e}"))?;
        // The transport server answers without a store: whatever it says is accepted.
        if got.as_deref().is_some_and(|g| g != value) {
            return Err(format!(
                "get of {:?} returned another value",
                String::from_utf8_lossy(key)
            ));
        }
        Ok(())
    })
}

/// Times `samples` writes (`op(true, key)`), then `samples` reads (`op(false, key)`), each
/// after `warmup` untimed ones, over [`KEYS`] keys: latencies in nanoseconds, writes first.
pub fn timed_writes_and_reads(
    (samples, warmup): (u64, u64),
    progress: &mut Progress,
    mut op: impl FnMut(bool, &[u8]) -> Result<(), String>,
) -> Result<[Histogram<u64>; 2], String> {
    let mut out = [latency_histogram(), latency_histogram()];
    let key = |i: u64| format!("key-{}", i % KEYS).into_bytes();
    for (which, h) in out.iter_mut().enumerate() {
        for i in 0..warmup + samples {
            if i % 256 == 0 {
                interrupt::check()?;
                progress.inc(256.min(warmup + samples - i));
            }
            let k = key(i);
            let started = Instant::now();
            op(which == 0, &k)?;
            let ns = started.elapsed().as_nanos() as u64;
            if i >= warmup {
                h.saturating_record(ns.max(1));
            }
        }
    }
    Ok(out)
}
