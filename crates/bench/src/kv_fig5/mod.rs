//! `mu bench ukharon-kv`: the uKharon paper's Fig. 5 (§7.3) on this host, in one run.
//!
//! 1. GET and PUT latency (p50, p95, p99) through the client library, one operation at a time
//!    over a Unix socket, for each of [`System::LATENCY`]: the client transport alone (the
//!    floor), the bare store, the store behind `Active` checks, Mu, Velos, Mu and Velos with
//!    leased reads (`docs/protocols/lease-reads.md`) and uKharon-KV, taking turns in
//!    [`ROUNDS`] rounds.
//! 2. Failover time (p50, p95) of uKharon-KV, Mu and Velos, kill mode on shm, as a client
//!    looping puts sees it ([`failover`]).
//! 3. The targets as ratios of figures of this run: uKharon-KV's GET p50 at most 1.1 ×
//!    the bare store's, its failover p50 at most 1/5 of Mu's, each met or missed.

mod failover;
mod report;
mod systems;

use crate::kv_ops::{measure, warmup, OPS};
use crate::suite::{Report, SuiteArgs};
use crate::{counts, interrupt};
use hdrhistogram::Histogram;
use systems::System;

const DEFAULT_SAMPLES: u64 = 20_000;
const QUICK_SAMPLES: u64 = 2_000;
const DEFAULT_FAILOVERS: u32 = 30;
const QUICK_FAILOVERS: u32 = 3;
/// The latencies are taken in rounds, every system measured in each (a fresh start each time,
/// its share of the samples), so that a change of load on a shared machine falls on every
/// system alike rather than on the one measured at that moment.
const ROUNDS: u64 = 4;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Value size in bytes.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    payload: u32,
    /// Timed operations per system and operation [default: 20000; 2000 with --quick].
    #[arg(long, value_parser = counts::count)]
    samples: Option<u64>,
    /// Failovers per protocol, each on a fresh cluster [default: 30; 3 with --quick].
    #[arg(long, value_parser = counts::count_u32)]
    failovers: Option<u32>,
}

/// One system's latencies for one operation.
pub struct Latency {
    system: System,
    op: &'static str,
    h: Histogram<u64>,
}

/// One protocol's failovers, nanoseconds each, in the order they ran.
pub struct Failovers {
    system: System,
    each_ns: Vec<u64>,
}

pub fn run(args: Args) -> Result<(), String> {
    interrupt::catch();
    let report = Report::new(&args.suite, "ukharon-kv")?;
    let quick = args.suite.quick;
    let samples = args.samples.unwrap_or(if quick { QUICK_SAMPLES } else { DEFAULT_SAMPLES });
    let failovers =
        args.failovers.unwrap_or(if quick { QUICK_FAILOVERS } else { DEFAULT_FAILOVERS });
    note!(
        "mu bench ukharon-kv: {} systems × {samples} puts and gets, {failovers} failovers each of {}",
        System::LATENCY.len(),
        System::FAILOVER.map(System::name).join(", ")
    );
    let (latencies, inactive) = measure_latencies(&report, args.payload, samples)?;
    let failovers = measure_failovers(&report, args.payload, failovers)?;
    let run = report::Run { payload: args.payload, samples, latencies, inactive, failovers };
    report::write(report, &run)
}

/// GETs and PUTs of every system of [`System::LATENCY`], in [`ROUNDS`] rounds (fewer where
/// there are fewer samples) whose histograms are merged; also how many requests the
/// active-checked server found inactive.
fn measure_latencies(
    report: &Report,
    payload: u32,
    samples: u64,
) -> Result<(Vec<Latency>, u64), String> {
    let value = vec![b'v'; payload as usize];
    let rounds = ROUNDS.min(samples);
    // The first rounds take one more sample each where `rounds` does not divide `samples`.
    let share = |round: u64| samples / rounds + u64::from(round < samples % rounds);
    let steps: u64 = (0..rounds).map(|r| share(r) + warmup(share(r))).sum();
    let mut progress = report.progress("latency", System::LATENCY.len() as u64 * 2 * steps);
    let mut out: Vec<Latency> = Vec::new();
    let mut inactive = 0;
    for round in 0..rounds {
        for system in System::LATENCY {
            progress.set_label(&format!("latency {} ({}/{rounds})", system.name(), round + 1));
            let n = share(round);
            let mut served = system.start(payload)?;
            let measured = measure(&mut served.client, &value, n, warmup(n), &mut progress);
            // Stopped (and checked) whether or not the measure failed.
            let stopped = served.stop();
            let measured = measured?;
            inactive += stopped?;
            for (&op, h) in OPS.iter().zip(measured) {
                match out.iter_mut().find(|l| l.system == system && l.op == op) {
                    Some(l) => l.h.add(&h).map_err(|e| e.to_string())?,
                    None => out.push(Latency { system, op, h }),
                }
            }
        }
    }
    progress.finish();
    Ok((out, inactive))
}

/// `count` failovers of every system of [`System::FAILOVER`].
fn measure_failovers(report: &Report, payload: u32, count: u32) -> Result<Vec<Failovers>, String> {
    let mut progress =
        report.progress("failover", System::FAILOVER.len() as u64 * u64::from(count));
    let mut out = Vec::new();
    for system in System::FAILOVER {
        progress.set_label(&format!("failover {}", system.name()));
        let mut each_ns = Vec::new();
        for _ in 0..count {
            each_ns.push(failover::once(system, payload)?);
            progress.inc(1);
        }
        out.push(Failovers { system, each_ns });
    }
    progress.finish();
    Ok(out)
}
