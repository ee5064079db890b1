//! `mu bench ukharon-kv`: the uKharon paper's Fig. 5 (§7.3) on this host, in one run.
//!
//! 1. GET and PUT latency (p50, p95, p99) through the client library, one operation at a time
//!    over a Unix socket, for each of [`System::LATENCY`]: the client transport alone (the
//!    floor), the bare store, the store behind `Active` checks, Mu, Velos and uKharon-KV.
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

/// GETs and PUTs of every system of [`System::LATENCY`], one system at a time; also how many
/// requests the active-checked server found inactive.
fn measure_latencies(
    report: &Report,
    payload: u32,
    samples: u64,
) -> Result<(Vec<Latency>, u64), String> {
    let value = vec![b'v'; payload as usize];
    let steps = System::LATENCY.len() as u64 * 2 * (samples + warmup(samples));
    let mut progress = report.progress("latency", steps);
    let (mut out, mut inactive) = (Vec::new(), 0);
    for system in System::LATENCY {
        progress.set_label(&format!("latency {}", system.name()));
        let mut served = system.start(payload)?;
        let measured = measure(&mut served.client, &value, samples, warmup(samples), &mut progress);
        // Stopped (and checked) whether or not the measure failed.
        let stopped = served.stop();
        let measured = measured?;
        inactive += stopped?;
        out.extend(OPS.iter().zip(measured).map(|(&op, h)| Latency { system, op, h }));
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
