//! Measuring the client path, for the benchmarks and the `rings_rtt` example: a client's
//! request→response round trips, and an echo loop for the server side. The rings themselves
//! read no clock; this module does (it times them).

use crate::client::{Reply, RingClient};
use crate::error::{ClientError, RespondError, SendError};
use crate::grant::ClientSlot;
use crate::server::RingServer;
use mu_fabric::Fabric;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Percentiles of a set of round trips, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundTrips {
    pub samples: usize,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

impl RoundTrips {
    /// The percentiles of `samples_ns` (sorted here); `None` when empty.
    pub fn of(mut samples_ns: Vec<u64>) -> Option<RoundTrips> {
        if samples_ns.is_empty() {
            return None;
        }
        samples_ns.sort_unstable();
        let at = |p: usize| samples_ns[(samples_ns.len() - 1) * p / 100];
        Some(RoundTrips {
            samples: samples_ns.len(),
            min_ns: samples_ns[0],
            p50_ns: at(50),
            p90_ns: at(90),
            p99_ns: at(99),
            max_ns: samples_ns[samples_ns.len() - 1],
        })
    }
}

/// Why a measurement stopped.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MeasureError {
    #[error("sending: {0}")]
    Send(#[from] SendError),
    #[error("polling: {0}")]
    Poll(#[from] ClientError),
    #[error("request {seq} had no response within {timeout_ms} ms")]
    Timeout { seq: u64, timeout_ms: u128 },
    #[error("the server rejected request {seq}")]
    Rejected { seq: u64 },
    #[error("no samples asked for")]
    NoSamples,
}

/// Times `warmup + samples` round trips of `payload`, one request outstanding at a time, from
/// the send to the poll that finds its response (busy-polling); keeps the last `samples`.
/// The client must have nothing outstanding; a server must answer (an echo, say).
pub fn measure_round_trip<F: Fabric>(
    client: &mut RingClient<F>,
    payload: &[u8],
    warmup: usize,
    samples: usize,
    timeout: Duration,
) -> Result<RoundTrips, MeasureError> {
    let times_ns = round_trip_samples(client, payload, warmup, samples, timeout)?;
    RoundTrips::of(times_ns).ok_or(MeasureError::NoSamples)
}

/// As [`measure_round_trip`], the samples themselves (nanoseconds, in the order taken), for a
/// caller that merges them with others or keeps its own histogram.
pub fn round_trip_samples<F: Fabric>(
    client: &mut RingClient<F>,
    payload: &[u8],
    warmup: usize,
    samples: usize,
    timeout: Duration,
) -> Result<Vec<u64>, MeasureError> {
    if samples == 0 {
        return Err(MeasureError::NoSamples);
    }
    let mut times_ns = Vec::with_capacity(samples);
    for i in 0..warmup + samples {
        let start = Instant::now();
        let seq = client.send(payload)?;
        let mut answer = None;
        while answer.is_none() {
            client.poll(|s, reply| {
                if s == seq {
                    answer = Some(matches!(reply, Reply::Data(_)));
                }
            })?;
            if answer.is_none() && start.elapsed() > timeout {
                return Err(MeasureError::Timeout { seq, timeout_ms: timeout.as_millis() });
            }
        }
        let elapsed_ns = start.elapsed().as_nanos() as u64;
        if answer == Some(false) {
            return Err(MeasureError::Rejected { seq });
        }
        if i >= warmup {
            times_ns.push(elapsed_ns);
        }
    }
    Ok(times_ns)
}

/// A server loop's body that answers every request with its own payload: for tests, examples
/// and the benchmarks' unreplicated figure. Keeps the requests of one poll in buffers it
/// reuses (the server's poll lends each payload only for the callback).
#[derive(Default)]
pub struct Echo {
    taken: Vec<(ClientSlot, u64, usize, usize)>,
    bytes: Vec<u8>,
}

impl Echo {
    /// One server poll at `now_ns`, each request taken answered with its payload; returns how
    /// many. Requests of a client released meanwhile are dropped (their slot is stale).
    pub fn poll<F: Fabric>(
        &mut self,
        server: &mut RingServer<F>,
        now_ns: u64,
    ) -> Result<usize, RespondError> {
        self.taken.clear();
        self.bytes.clear();
        let (taken, bytes) = (&mut self.taken, &mut self.bytes);
        server.poll(now_ns, &mut |slot, seq, payload| {
            taken.push((slot, seq, bytes.len(), payload.len()));
            bytes.extend_from_slice(payload);
        });
        for &(slot, seq, at, len) in &self.taken {
            match server.respond(slot, seq, &self.bytes[at..at + len]) {
                Ok(()) | Err(RespondError::StaleSlot(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.taken.len())
    }
}
