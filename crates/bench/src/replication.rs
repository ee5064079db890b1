//! `mu bench replication`: how long `Replica::propose` takes on the leader of three replicas on
//! the shared-memory fabric, standalone (the commit handler does nothing, as in the Mu paper
//! §7.1) or attached to the key-value store (`--app kv`), for payloads of 32 to 4096 bytes; beside the fabric's `write2` round trip measured in
//! the same run, the floor of a leader that writes to two followers.
//!
//! Placement: this process runs replica 0 (the lowest id, hence the leader once elected) and
//! times its proposals on a thread of its own; replicas 1 and 2 are `mu bench-replica` child
//! processes on the same run directory. Each payload size gets a fresh cluster whose log slots
//! fit it ([`log_shape`]). Replicas are not pinned: three processes with two threads each share
//! whatever CPUs the system gives them. `write2` is measured first, before any replica starts,
//! exactly as `mu bench fabric` measures it (same placement, same warm-up).
//!
//! On shared memory a one-sided write is a copy by the writer's CPU, so a proposal needs no
//! follower CPU at all, while `write2` needs both peers to answer: the ratio says how much of
//! the floor the protocol's own work (prepare omitted, accept on two followers and the own log,
//! commit) costs, not how fast a network is.

use crate::cluster::{App, Cluster, FabricChoice, ReplicaMode, Spec, ThreadsChoice};
use crate::fabric;
use crate::measure::Summary;
use crate::words::Words;
use crate::{interrupt, replica_child};
use hdrhistogram::Histogram;
use mu_daemon::app_state::ExternalApp;
use mu_fabric::NodeId;
use mu_procs::run_dir::RunDir;
use mu_replica::ProposeError;
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The payload sweep of the Mu paper's Figure 3, from 32 bytes to a page.
const SWEEP_BYTES: [usize; 8] = [32, 64, 128, 256, 512, 1024, 2048, 4096];
const MAX_PAYLOAD_BYTES: usize = 4096;
/// The payload the targets are stated for.
const TARGET_PAYLOAD_BYTES: usize = 64;
/// Mu's median at 64 B may be this many times the fabric's own write2 round: on shm (the Mu
/// issue), and on ofi (the real-fabrics issue); the p99 target is stated for shm only.
const TARGET_P50_OVER_WRITE2: f64 = 1.2;
const TARGET_P50_OVER_WRITE2_OFI: f64 = 1.3;
const TARGET_P99_OVER_WRITE2: f64 = 2.0;

/// The median target of `fabric` (`shm` or `ofi`).
fn p50_target(fabric: &str) -> f64 {
    if fabric == "ofi" {
        TARGET_P50_OVER_WRITE2_OFI
    } else {
        TARGET_P50_OVER_WRITE2
    }
}
const DEFAULT_SAMPLES: u64 = 100_000;
const QUICK_SAMPLES: u64 = 3_000;
const REPLICAS: u16 = 3;
/// At most about this much log per replica (see [`log_shape`]).
const LOG_BYTES: u64 = 64 << 20;
const LOG_SLOTS_MIN: u64 = 1 << 14;
const LOG_SLOTS_MAX: u64 = 1 << 16;
/// Untimed proposals before the timed ones, after a whole lap of the log: as many as the
/// samples, within these bounds.
const WARMUP_MIN: u64 = 1_000;
const WARMUP_MAX: u64 = 10_000;
/// How long replica 0 may take to be elected and to commit its first proposal.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the leader may go without finishing a proposal before the benchmark gives up.
const STALL_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// One payload size (bytes) instead of the sweep 32, 64, ..., 4096.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=MAX_PAYLOAD_BYTES as i64))]
    payload: Option<u16>,
    /// Timed proposals per payload size [default: 100000; 3000 with --quick].
    #[arg(long, value_parser = crate::counts::count)]
    samples: Option<u64>,
    /// A short run: 3000 samples per payload size (and for write2) unless --samples is given.
    #[arg(long)]
    quick: bool,
    /// Where proposals run: on the caller's thread (direct) or on a replication thread
    /// (handover).
    #[arg(long, value_enum, default_value_t = ReplicaMode::Direct)]
    mode: ReplicaMode,
    /// What every replica's commit handler does: nothing (standalone) or apply the entry to a
    /// key-value store (kv: the values are then key-value puts of the payload's size).
    #[arg(long, value_enum, default_value_t = App::Standalone)]
    app: App,
    /// The replication engines to measure, one after the other in this run: mu, velos, or
    /// both (mu,velos: Velos Fig. 1, with velos's p50 over mu's per payload size).
    #[arg(long, value_delimiter = ',', default_value = "mu")]
    protocol: Vec<mu_replica::Protocol>,
    /// With several engines: measure them in turn this many times, each time on fresh clusters
    /// with a share of the samples, and merge each engine's shares, so that a slow spell of
    /// the machine falls on every engine alike [default: 4 with several engines, else 1].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100))]
    rounds: Option<u64>,
    /// The fabric: shm (processes sharing memory) or ofi (libfabric over loopback TCP); the floor
    /// is that fabric's own write2 round.
    #[arg(long, default_value = "shm")]
    fabric: String,
    /// With `--fabric ofi`: the libfabric provider, `sockets` or `tcp;ofi_rxm` [default:
    /// sockets].
    #[arg(long)]
    provider: Option<String>,
    /// The failure detector's read period for every replica, in microseconds [default:
    /// ReplicaConfig's 1000 on shm; 100000 on ofi, whose round trips take about 100 µs and
    /// whose p99.9 takes milliseconds on a small machine]. At most 1000000 (1 s).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    read_period_us: Option<u64>,
    /// How every replica's threads wait when idle: back off (shared) or spin on cores of their
    /// own (dedicated: about four cores per replica, as in the Mu paper).
    #[arg(long, value_enum, default_value_t = ThreadsChoice::Shared)]
    threads: ThreadsChoice,
    /// Pin every replica thread and the proposing thread to a CPU of its own (9 CPUs): the
    /// leader's proposing thread and the followers' replication threads on the CPUs where
    /// `write2` ran (the first three allowed), the rest on the next six. Default: not pinned.
    #[arg(long)]
    pin: bool,
}

/// The detector's read period on the ofi fabric unless `--read-period-us` says otherwise. On
/// 2 vCPUs shared by three replica processes and the provider's threads, reads answered late
/// look like failures and move leadership: proposals lost at 64 B in 5,000 timed were 395,442
/// at a 1 ms period, 69,682 at 5 ms, 14,402 at 20 ms and 4 at 100 ms (one run each). This
/// benchmark measures replication, not failover, so it takes the quiet one.
pub const OFI_READ_PERIOD_US: u64 = 100_000;

/// Velos's median latency may be this many times Mu's, measured in the same run (its extra CAS
/// round).
const TARGET_VELOS_OVER_MU_P50: f64 = 1.6;

/// The detector's read period the replicas get: the one asked for, or the fabric's default
/// (`None`: `ReplicaConfig`'s).
fn read_period_us(args: &Args) -> Option<u64> {
    args.read_period_us.or((args.fabric == "ofi").then_some(OFI_READ_PERIOD_US))
}

/// Propose latencies for one payload size, and how its cluster fared.
pub struct PayloadResult {
    pub payload_bytes: usize,
    slot_bytes: u32,
    slots_count: u64,
    pub latency: Histogram<u64>,
    /// Proposals that failed because leadership moved (not timed; the run goes on once replica 0
    /// leads again).
    pub lost_proposals: u64,
    /// Followers that ended more than a log behind: the leader went on without them.
    pub followers_dropped: usize,
    /// Requests committed while timing, and how long that took: the throughput.
    pub requests: u64,
    pub timed_ns: u64,
    /// CPU time of the proposing thread while timing (the benchmark loop's own work and, in
    /// direct mode, the proposals' spinning included; in handover mode the replication thread's
    /// work is not in it), which time spent descheduled does not inflate.
    pub cpu_ns: u64,
}

impl PayloadResult {
    /// The proposing thread's CPU time per timed call, lost calls included (a few at most).
    fn cpu_ns_per_call(&self) -> u64 {
        self.cpu_ns / self.latency.len().max(1)
    }

    /// Adds another measurement of the same payload size (a later round) to this one.
    fn merge(&mut self, other: PayloadResult) -> Result<(), String> {
        debug_assert_eq!(self.payload_bytes, other.payload_bytes);
        self.latency.add(&other.latency).map_err(|e| format!("merging latencies: {e:?}"))?;
        self.lost_proposals += other.lost_proposals;
        self.followers_dropped += other.followers_dropped;
        self.requests += other.requests;
        self.timed_ns += other.timed_ns;
        self.cpu_ns += other.cpu_ns;
        Ok(())
    }
}

/// How the leader proposes: one value per `propose` call, or (Mu paper §7.4) `batch` requests
/// per entry and `outstanding` entries in flight, as `propose_many` calls of `batch ×
/// outstanding` requests, each call timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    pub batch: usize,
    pub outstanding: usize,
}

impl Load {
    /// One value per `propose` call.
    pub const SINGLE: Load = Load { batch: 1, outstanding: 1 };

    fn requests_per_call(self) -> usize {
        self.batch * self.outstanding
    }
}

/// What the leader's thread shares with the thread watching it.
#[derive(Default)]
struct Progress {
    proposals: AtomicU64,
    phase: Mutex<String>,
    stop: AtomicBool,
}

impl Progress {
    fn set_phase(&self, phase: impl Into<String>) {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner()) = phase.into();
    }

    fn phase(&self) -> String {
        self.phase.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn check_stop(&self) -> Result<(), String> {
        if self.stop.load(Ordering::Relaxed) {
            Err("stopped".into())
        } else {
            Ok(())
        }
    }
}

/// Up to a minute (a little more: the bound rounds up). Samples are recorded saturating: one
/// past it (the process stopped for that long, as by Ctrl-Z) counts as the bound rather than
/// ending the run on a panic.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// The log for `payload_bytes` under `protocol`: slots of the payload (or of the protocol's own
/// largest entry, where that is larger) plus 24 bytes of framing (rounded up to 8),
/// [`LOG_SLOTS_MAX`] of them if that fits in [`LOG_BYTES`], and never fewer than
/// [`LOG_SLOTS_MIN`]. Many slots, because a follower more than a log behind is dropped for good
/// (these replicas take no snapshots for a state transfer) and on two cores a follower can go
/// unscheduled for milliseconds; a
/// bounded number, because the warm-up goes once round the log: the leader maps its followers'
/// logs without touching them first, so the first lap takes page faults that a running
/// replica no longer takes.
fn log_shape(payload_bytes: usize, protocol: mu_replica::Protocol) -> (u64, u32) {
    // Room for the replicas' own entries too, which may be larger than a tiny payload.
    let value_bytes = payload_bytes.max(protocol.control_entry_bytes());
    let slot_bytes = (value_bytes + 24).next_multiple_of(8);
    let slots_count = (LOG_BYTES / slot_bytes as u64).clamp(LOG_SLOTS_MIN, LOG_SLOTS_MAX);
    (slots_count, slot_bytes as u32)
}

pub fn run(args: Args) -> Result<(), String> {
    interrupt::catch();
    let samples = args.samples.unwrap_or(if args.quick { QUICK_SAMPLES } else { DEFAULT_SAMPLES });
    let payloads: Vec<usize> = match args.payload {
        Some(bytes) => vec![usize::from(bytes)],
        None => SWEEP_BYTES.to_vec(),
    };
    let mut protocols = args.protocol.clone();
    protocols.dedup();
    let rounds = args.rounds.unwrap_or(if protocols.len() > 1 { 4 } else { 1 });
    if rounds > samples {
        return Err(format!(
            "--rounds {rounds} with --samples {samples}: each round takes at least one sample"
        ));
    }
    let run_dir = RunDir::create("replication")?;
    // Checked before anything starts.
    let fabric_choice = FabricChoice::parse(&args.fabric, args.provider.as_deref(), REPLICAS)?;
    if args.pin {
        crate::cluster::check_pin_cpus(REPLICAS)?;
    }
    note!(
        "mu bench replication: {REPLICAS} replicas on {}, {} mode, {} threads{}, {samples} \
         samples per payload size, {} CPUs allowed",
        fabric_choice.label(),
        args.mode.name(),
        args.threads.name(),
        if args.pin { ", each pinned to a CPU of its own" } else { "" },
        mu_cpu::allowed_cpus().len()
    );

    // The floor, first and on its own: the replicas' threads would take CPU time from it.
    let write2 = match fabric_choice {
        #[cfg(feature = "ofi")]
        FabricChoice::Ofi { provider, .. } => crate::ofi::write2_rtt(provider, samples)?,
        FabricChoice::Shm => {
            let dir = run_dir.subdirectory("fabric")?;
            fabric::write2_rtt(dir.path(), samples)?
        }
    };

    let read_period_us = read_period_us(&args);
    if let Some(us) = read_period_us {
        note!("mu bench replication: failure detector read period {us} µs");
    }
    let fabric = (fabric_choice, read_period_us, args.threads, args.pin);
    let mut runs: Vec<(mu_replica::Protocol, Vec<PayloadResult>)> = Vec::new();
    for round in 0..rounds {
        // The samples shared out among the rounds, the first ones taking the remainder.
        let share = samples / rounds + u64::from(round < samples % rounds);
        for (i, &protocol) in protocols.iter().enumerate() {
            if rounds > 1 {
                note!("mu bench replication: {protocol}, round {} of {rounds}", round + 1);
            } else {
                note!("mu bench replication: {protocol}");
            }
            let spec = (args.mode, args.app, protocol);
            let results = sweep(&run_dir, spec, fabric, &payloads, share, round)?;
            match runs.get_mut(i) {
                Some((_, merged)) => {
                    for (m, r) in merged.iter_mut().zip(results) {
                        m.merge(r)?;
                    }
                }
                None => runs.push((protocol, results)),
            }
        }
    }
    if let [(protocol, results)] = &runs[..] {
        report(&args, *protocol, samples, results, &write2);
    } else {
        compare(&args, (samples, rounds), &runs, &write2);
    }
    Ok(())
}

/// Several engines in one run (Velos Fig. 1): each one's results, then the medians side by
/// side with the ratio to the first engine's.
fn compare(
    args: &Args,
    (samples, rounds): (u64, u64),
    runs: &[(mu_replica::Protocol, Vec<PayloadResult>)],
    write2: &Summary,
) {
    let (base, base_results) = &runs[0];
    let p50 = |r: &PayloadResult| r.latency.value_at_quantile(0.5);
    let rows: Vec<(usize, Vec<u64>)> = base_results
        .iter()
        .enumerate()
        .map(|(i, r)| (r.payload_bytes, runs.iter().map(|(_, rs)| p50(&rs[i])).collect()))
        .collect();
    if args.json {
        let docs: Vec<serde_json::Value> =
            runs.iter().map(|(p, rs)| document(args, *p, samples, rs, write2)).collect();
        let comparison: Vec<serde_json::Value> = rows
            .iter()
            .map(|(payload, p50s)| {
                let mut row = json!({"payload_bytes": payload});
                for ((p, _), &v) in runs.iter().zip(p50s) {
                    row[format!("{p}_p50_ns")] = json!(v);
                    row[format!("{p}_over_{base}_p50")] = json!(ratio(v, p50s[0]));
                }
                row
            })
            .collect();
        let out = json!({
            "runs": docs,
            "comparison": comparison,
            "rounds": rounds,
            "target_velos_over_mu_p50": TARGET_VELOS_OVER_MU_P50,
            "fabric_write2_ns": write2.json(),
        });
        println!("{out}");
        return;
    }
    for (p, rs) in runs {
        report(args, *p, samples, rs, write2);
        println!();
    }
    print!("median propose latency (ns) {:>13}", "payload_bytes");
    for (p, _) in runs {
        print!(" {:>9}", p.name());
    }
    for (p, _) in &runs[1..] {
        print!(" {:>14}", format!("{p}/{base}"));
    }
    println!();
    for (payload, p50s) in &rows {
        print!("{:>41}", payload);
        for v in p50s {
            print!(" {v:>9}");
        }
        for v in &p50s[1..] {
            print!(" {:>14.2}", ratio(*v, p50s[0]));
        }
        println!();
    }
    println!("target: velos p50 at most {TARGET_VELOS_OVER_MU_P50}× mu's (Velos issue)");
}

/// Measures propose latency on a fresh three-replica cluster for each payload size; `round`
/// names the clusters' directories apart when the sweep is repeated.
pub fn sweep(
    run_dir: &RunDir,
    (mode, app, protocol): (ReplicaMode, App, mu_replica::Protocol),
    (fabric, read_period_us, threads, pin): (FabricChoice, Option<u64>, ThreadsChoice, bool),
    payloads: &[usize],
    samples: u64,
    round: u64,
) -> Result<Vec<PayloadResult>, String> {
    if let Some(server) = app.external() {
        crate::app_servers::check_installed(server)?;
    }
    let mut results = Vec::new();
    for &payload_bytes in payloads {
        // Slots that fit the entry, which for an application with a server is some 40 bytes
        // more than the payload (its value).
        let entry_bytes = app.entry_bytes(payload_bytes).max(payload_bytes);
        let (slots_count, slot_bytes) = log_shape(entry_bytes, protocol);
        let spec = Spec {
            replicas: REPLICAS,
            // A fresh block of ports for each cluster.
            fabric: fabric.fresh(REPLICAS)?,
            mode,
            read_period_us,
            threads,
            slots_count,
            slot_bytes,
            propose_bytes: 0,
            app,
            protocol,
            pin,
        };
        let mut name = format!("{}-{}-{}-{payload_bytes}", protocol, app.name(), mode.name());
        if round > 0 {
            name.push_str(&format!("-round{}", round + 1));
        }
        let mut cluster = Cluster::new(run_dir.subdirectory(&name)?);
        cluster.spawn(&spec, 1..REPLICAS)?;
        cluster.wait_started(ELECTION_TIMEOUT)?;
        results.push(lead_and_watch(&mut cluster, &spec, payload_bytes, samples, Load::SINGLE)?);
    }
    Ok(results)
}

/// Throughput and call latency of `propose_many` on a fresh three-replica cluster under `load`,
/// `payload_bytes` per request; `calls` timed calls.
pub fn throughput(
    run_dir: &RunDir,
    app: App,
    payload_bytes: usize,
    load: Load,
    calls: u64,
) -> Result<PayloadResult, String> {
    let entry_bytes = mu_log::batch::item_bytes(payload_bytes.max(28)) * load.batch + 64;
    let slot_bytes = (entry_bytes + 24).next_multiple_of(8);
    let slots_count = (LOG_BYTES / slot_bytes as u64).clamp(LOG_SLOTS_MIN / 4, LOG_SLOTS_MAX);
    let spec = Spec {
        replicas: REPLICAS,
        fabric: FabricChoice::Shm,
        mode: ReplicaMode::Direct,
        read_period_us: None,
        threads: ThreadsChoice::Shared,
        slots_count,
        slot_bytes: slot_bytes as u32,
        propose_bytes: 0,
        app,
        protocol: mu_replica::Protocol::Mu,
        pin: false,
    };
    let name = format!("throughput-{}-{}", load.batch, load.outstanding);
    let mut cluster = Cluster::new(run_dir.subdirectory(&name)?);
    cluster.spawn(&spec, 1..REPLICAS)?;
    cluster.wait_started(ELECTION_TIMEOUT)?;
    lead_and_watch(&mut cluster, &spec, payload_bytes, calls, load)
}

/// Runs replica 0 on a thread of its own and watches it from this one: the followers must stay
/// alive, proposals must keep finishing, and an interrupt stops the run. On an error the leader's
/// thread is told to stop but not waited for (it may be stuck inside `propose`); the process
/// exits after the caller's guards have cleaned up.
fn lead_and_watch(
    cluster: &mut Cluster,
    spec: &Spec,
    payload_bytes: usize,
    samples: u64,
    load: Load,
) -> Result<PayloadResult, String> {
    let progress = Arc::new(Progress::default());
    let (tx, rx) = mpsc::channel();
    let dir: PathBuf = cluster.dir().to_path_buf();
    let shared = progress.clone();
    let leader_spec = spec.clone();
    let leader = std::thread::Builder::new()
        .name("mu-bench-leader".into())
        .spawn(move || {
            let _ = tx.send(lead(&dir, &leader_spec, payload_bytes, samples, load, &shared));
        })
        .map_err(|e| format!("starting the leader's thread: {e}"))?;
    let mut last_progress = (0, Instant::now());
    let result = loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(outcome) => break outcome,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                break Err("the leader's thread ended without a result".into())
            }
        }
        if let Err(e) = cluster.check_alive(&[]).and_then(|()| interrupt::check()) {
            break Err(e);
        }
        let done = progress.proposals.load(Ordering::Relaxed);
        if done != last_progress.0 {
            last_progress = (done, Instant::now());
        } else if last_progress.1.elapsed() > STALL_TIMEOUT {
            break Err(format!(
                "replica 0 finished no proposal for {STALL_TIMEOUT:?} ({})",
                progress.phase()
            ));
        }
    };
    match result {
        Ok(outcome) => {
            let _ = leader.join();
            Ok(outcome)
        }
        Err(e) => {
            progress.stop.store(true, Ordering::Relaxed);
            Err(e)
        }
    }
}

/// Replica 0: waits to lead and for both followers to follow, warms up, then times
/// `samples` proposals (calls of `load`) of `payload_bytes` each.
fn lead(
    run_dir: &std::path::Path,
    spec: &Spec,
    payload_bytes: usize,
    samples: u64,
    load: Load,
    progress: &Progress,
) -> Result<PayloadResult, String> {
    // The server, if any, lives until this function returns.
    let (replica, _server) = start_leader(run_dir, spec, load)?;
    let mut value = Vec::new();
    spec.app.value(payload_bytes, 0, &mut value);
    let followers: Vec<Words> = (1..REPLICAS)
        .map(|r| Words::open(&run_dir.join(format!("words-{r}.mem"))))
        .collect::<Result<_, _>>()?;
    let lags = |leader_applied: u64| -> Vec<u64> {
        followers.iter().map(|w| leader_applied.saturating_sub(w.applied.get())).collect()
    };
    wait_until_followed(&replica, &value, &lags, progress)?;
    let mut proposer = TimedProposer {
        replica: &replica,
        load,
        progress,
        outcomes: Vec::with_capacity(load.requests_per_call()),
        lost_proposals: 0,
    };

    // Once round the log (see `log_shape`), then caches, branch predictors and the followers'
    // replayers warm up.
    progress.set_phase(format!("warming up with {payload_bytes}-byte proposals"));
    let mut values = vec![value; load.requests_per_call()];
    let fill = |values: &mut [Vec<u8>], call: u64| {
        for (j, v) in values.iter_mut().enumerate() {
            spec.app.value(payload_bytes, call * load.requests_per_call() as u64 + j as u64, v);
        }
    };
    let laps_calls = spec.slots_count / load.outstanding as u64;
    for i in 0..laps_calls + samples.clamp(WARMUP_MIN, WARMUP_MAX) {
        progress.check_stop()?;
        fill(&mut values, i);
        proposer.propose(&values)?;
    }

    progress.set_phase(format!("measuring {payload_bytes}-byte proposals"));
    let mut latency = histogram();
    let step = (samples / 10).max(1);
    note_part!("  payload {payload_bytes:>4} B   ");
    let mut i: u64 = laps_calls + WARMUP_MAX;
    let timed = Instant::now();
    let cpu_start_ns = mu_procs::clock::thread_cpu_ns();
    while latency.len() < samples {
        progress.check_stop()?;
        i += 1;
        fill(&mut values, i);
        if let Some(ns) = proposer.propose(&values)? {
            latency.saturating_record(ns);
            if latency.len() % step == 0 {
                note_part!(".");
            }
        }
    }
    let timed_ns = timed.elapsed().as_nanos() as u64;
    let cpu_ns = mu_procs::clock::thread_cpu_ns().saturating_sub(cpu_start_ns);
    note!(" p50 {} ns", latency.value_at_quantile(0.5));
    if let Some(server) = spec.app.external() {
        // The last value of the last call.
        let last = (i + 1) * load.requests_per_call() as u64 - 1;
        check_servers(&replica, (spec, server), run_dir, payload_bytes, last, progress)?;
    }
    // A follower more than a log behind was dropped on the way (the leader does not wait for a
    // follower that slow): later proposals went to one follower only, and the report says so.
    let committed = replica.status().fuo;
    let followers_dropped = lags(committed).iter().filter(|&&lag| lag > spec.slots_count).count();
    let lost_proposals = proposer.lost_proposals;
    replica.shutdown();
    Ok(PayloadResult {
        payload_bytes,
        slot_bytes: spec.slot_bytes,
        slots_count: spec.slots_count,
        lost_proposals,
        followers_dropped,
        requests: latency.len() * load.requests_per_call() as u64,
        timed_ns,
        cpu_ns,
        latency,
    })
}

/// Starts replica 0, with `load`'s batching, and pins the calling (proposing) thread where
/// `spec` says.
fn start_leader(
    run_dir: &std::path::Path,
    spec: &Spec,
    load: Load,
) -> Result<(mu_replica::Replica, Option<crate::app_servers::Server>), String> {
    let mut config = replica_child::config(
        0,
        REPLICAS,
        (spec.slots_count, spec.slot_bytes),
        spec.read_period_us,
        spec.threads,
        spec.protocol,
    );
    if load != Load::SINGLE {
        config.batch_requests_max = load.batch;
        config.outstanding_max = load.outstanding;
    }
    let cpus = spec.node_cpus(0, true);
    config.cpus = cpus.replica;
    let (on_commit, server) = spec.app.attach(run_dir, 0, true, |_| {})?;
    let replica = spec.fabric.start_replica(run_dir, config, spec.mode.mode(), on_commit)?;
    // Once the replica's threads run: they would inherit this thread's CPU.
    if let Some(cpu) = cpus.proposer {
        mu_cpu::pin_to(cpu).map_err(|e| format!("replica 0: the proposing thread: {e}"))?;
    }
    Ok((replica, server))
}

/// After the timed proposals, the last of which was the `last`-th value: checks that every
/// replica's server holds it (replication reached the servers, not only the logs). One more
/// value is proposed first: a follower applies an entry once it learns it was decided, which
/// for the last one waits for the next.
fn check_servers(
    replica: &mu_replica::Replica,
    (spec, server): (&Spec, ExternalApp),
    run_dir: &std::path::Path,
    payload_bytes: usize,
    last: u64,
    progress: &Progress,
) -> Result<(), String> {
    progress.set_phase("checking that every replica's server holds the last value");
    let mut value = Vec::new();
    spec.app.value(payload_bytes, last + 1, &mut value);
    replica.propose(&value).map_err(|e| format!("replica 0: the closing proposal: {e}"))?;
    // Redis's leader runs no server: its entries are its own (`crate::app_servers`).
    let first = if server == ExternalApp::Redis { 1 } else { 0 };
    let nodes: Vec<u16> = (first..REPLICAS).collect();
    crate::app_servers::check_replicated(server, run_dir, &nodes, payload_bytes, last)?;
    progress.proposals.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Elected, then a first value committed, then slowly until both followers apply: a
/// follower whose grant came after the leader's permission round is admitted at a later
/// one, which at full speed would find it more than a log behind (and the benchmark would
/// measure a leader with one follower). `lags` says how far behind each follower is.
fn wait_until_followed(
    replica: &mu_replica::Replica,
    value: &[u8],
    lags: &dyn Fn(u64) -> Vec<u64>,
    progress: &Progress,
) -> Result<(), String> {
    progress.set_phase("waiting for replica 0 to be elected and both followers to apply");
    let start = Instant::now();
    let mut index = 0;
    loop {
        progress.check_stop()?;
        if start.elapsed() > ELECTION_TIMEOUT {
            return Err(format!(
                "replica 0 did not commit values that both followers applied within \
                 {ELECTION_TIMEOUT:?} (followers behind by {:?} entries; status: {:?})",
                lags(index + 1),
                replica.status()
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
        // A follower applies an entry once it knows it decided, which for the last one can
        // wait for the next (with Velos, the empty entry an idle leader decides): one behind
        // is following.
        if index > 0 && lags(index + 1).iter().all(|&lag| lag <= 1) {
            return Ok(());
        }
        if replica.leader() != Some(NodeId(0)) {
            continue;
        }
        match replica.propose(value) {
            Ok(i) => index = i,
            Err(ProposeError::NotLeader { .. } | ProposeError::Aborted) => {}
            Err(e) => return Err(format!("replica 0: first proposals: {e}")),
        }
    }
}

/// Replica 0's timed proposals, one call of the load each.
struct TimedProposer<'a> {
    replica: &'a mu_replica::Replica,
    load: Load,
    progress: &'a Progress,
    outcomes: Vec<Result<u64, ProposeError>>,
    /// Proposals that failed because leadership moved.
    lost_proposals: u64,
}

impl TimedProposer<'_> {
    /// One proposal (one call of the load), timed; `None` if leadership moved (then it waits
    /// until replica 0 leads again).
    fn propose(&mut self, values: &[Vec<u8>]) -> Result<Option<u64>, String> {
        let t = Instant::now();
        let outcome = if self.load == Load::SINGLE {
            self.replica.propose(&values[0]).map(|_| ())
        } else {
            let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
            self.replica.propose_many(&refs, &mut self.outcomes);
            self.outcomes.drain(..).find_map(Result::err).map_or(Ok(()), Err)
        };
        let ns = t.elapsed().as_nanos() as u64;
        self.progress.proposals.fetch_add(1, Ordering::Relaxed);
        match outcome {
            Ok(()) => Ok(Some(ns.max(1))),
            Err(ProposeError::NotLeader { .. } | ProposeError::Aborted) => {
                self.lost_proposals += 1;
                self.wait_to_lead_again().map(|()| None)
            }
            Err(e) => Err(format!("replica 0: propose failed: {e}")),
        }
    }

    fn wait_to_lead_again(&self) -> Result<(), String> {
        let since = Instant::now();
        while self.replica.leader() != Some(NodeId(0)) {
            self.progress.check_stop()?;
            if since.elapsed() > ELECTION_TIMEOUT {
                return Err(format!(
                    "replica 0 lost leadership and did not regain it within \
                     {ELECTION_TIMEOUT:?} (status: {:?})",
                    self.replica.status()
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

/// `a / b` to four significant digits (a fixed number of decimals turned a small ratio, with
/// write2 slowed by a loaded machine, into 0).
fn ratio(a: u64, b: u64) -> f64 {
    let r = a as f64 / b.max(1) as f64;
    if r == 0.0 {
        return 0.0;
    }
    let scale = 10f64.powi(3 - r.log10().floor() as i32);
    (r * scale).round() / scale
}

fn quantiles(h: &Histogram<u64>) -> (u64, u64, u64) {
    (h.value_at_quantile(0.01), h.value_at_quantile(0.5), h.value_at_quantile(0.99))
}

/// One engine's results as JSON: `{"protocol": .., "results": [..], "fabric_write2_ns": ..}`.
fn document(
    args: &Args,
    protocol: mu_replica::Protocol,
    samples: u64,
    results: &[PayloadResult],
    write2: &Summary,
) -> serde_json::Value {
    let at_target = results.iter().find(|r| r.payload_bytes == TARGET_PAYLOAD_BYTES);
    let results: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            let (p1, p50, p99) = quantiles(&r.latency);
            json!({
                "payload_bytes": r.payload_bytes,
                "samples": r.latency.len(),
                "latency_ns": {
                    "p1": p1,
                    "p50": p50,
                    "p99": p99,
                    "p999": r.latency.value_at_quantile(0.999),
                    "max": r.latency.max(),
                    "mean": (r.latency.mean() * 10.0).round() / 10.0,
                },
                "leader_cpu_ns_per_proposal": r.cpu_ns_per_call(),
                "slot_bytes": r.slot_bytes,
                "slots_count": r.slots_count,
                "lost_proposals": r.lost_proposals,
                "followers_dropped": r.followers_dropped,
            })
        })
        .collect();
    let mut out = json!({
        "protocol": protocol.name(),
        "mode": args.mode.name(),
        "app": args.app.name(),
        "backend": args.fabric,
        "provider": provider_of(args),
        "replicas": REPLICAS,
        "cpus_allowed": mu_cpu::allowed_cpus().len(),
        "pinned": args.pin,
        "read_period_us": read_period_us(args),
        "threads": args.threads.name(),
        "samples_per_payload": samples,
        "results": results,
        "fabric_write2_ns": write2.json(),
    });
    if let Some(r) = at_target {
        let (_, p50, p99) = quantiles(&r.latency);
        out["target_64_bytes"] = json!({
            "p50_over_write2_p50": ratio(p50, write2.p50),
            "p50_target": p50_target(&args.fabric),
            "p99_over_write2_p50": ratio(p99, write2.p50),
            "p99_over_write2_p99": ratio(p99, write2.p99),
            "p99_target": TARGET_P99_OVER_WRITE2,
        });
    }
    out
}

/// The ofi provider the run used; none on shm.
fn provider_of(args: &Args) -> Option<&'static str> {
    // Checked when the run began (`FabricChoice::parse`).
    crate::cluster::fabric_provider(&args.fabric, args.provider.as_deref()).ok().flatten()
}

fn report(
    args: &Args,
    protocol: mu_replica::Protocol,
    samples: u64,
    results: &[PayloadResult],
    write2: &Summary,
) {
    let lost_proposals: u64 = results.iter().map(|r| r.lost_proposals).sum();
    let dropped: Vec<usize> =
        results.iter().filter(|r| r.followers_dropped > 0).map(|r| r.payload_bytes).collect();
    let at_target = results.iter().find(|r| r.payload_bytes == TARGET_PAYLOAD_BYTES);
    if args.json {
        println!("{}", document(args, protocol, samples, results, write2));
        return;
    }
    println!(
        "{protocol} replication: {REPLICAS} replicas on {}{}, {} mode, {}",
        args.fabric,
        provider_of(args).map(|p| format!(" ({p})")).unwrap_or_default(),
        args.mode.name(),
        match args.app {
            App::Standalone => "standalone (the commit handler does nothing)",
            App::Kv => "attached (every replica applies each entry to a key-value store)",
            App::Orderbook => "attached (every replica applies each entry to an order book)",
            App::Redis => "attached (every follower feeds each entry to its redis-server)",
            App::Memcached => "attached (every replica applies each entry to its memcached)",
        }
    );
    println!(
        "propose latency on the leader (ns); ratios are to the write2 round trip's p50; cpu/call: \
         the proposing thread's CPU time per call (ns)"
    );
    println!(
        "{:>13} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8}",
        "payload_bytes", "p1", "p50", "p99", "samples", "p50/write2", "p99/write2", "cpu/call"
    );
    for r in results {
        let (p1, p50, p99) = quantiles(&r.latency);
        println!(
            "{:>13} {p1:>9} {p50:>9} {p99:>9} {:>9} {:>10.2} {:>10.2} {:>8}",
            r.payload_bytes,
            r.latency.len(),
            ratio(p50, write2.p50),
            ratio(p99, write2.p50),
            r.cpu_ns_per_call()
        );
    }
    println!(
        "fabric write2 round trip (ns): p50 {}, p99 {} ({} samples, measured before the replicas \
         started)",
        write2.p50, write2.p99, write2.samples
    );
    if !dropped.is_empty() {
        println!(
            "warning: a follower fell more than a log behind and was dropped while measuring \
             payloads of {dropped:?} bytes: later proposals went to one follower"
        );
    }
    if lost_proposals > 0 {
        println!("proposals lost to a leader change and not timed: {lost_proposals}");
    }
    match at_target {
        Some(r) => {
            let (_, p50, p99) = quantiles(&r.latency);
            let verdict = |ratio: f64, target: f64| if ratio <= target { "met" } else { "not met" };
            let p50_ratio = ratio(p50, write2.p50);
            let p99_ratio = ratio(p99, write2.p50);
            let p50_target = p50_target(&args.fabric);
            println!(
                "target at 64 B: p50 <= {p50_target} x write2 p50: {p50_ratio:.2} ({}); p99 <= \
                 {TARGET_P99_OVER_WRITE2} x write2 p50: {p99_ratio:.2} ({}); p99 / write2 p99: \
                 {:.2}",
                verdict(p50_ratio, p50_target),
                verdict(p99_ratio, TARGET_P99_OVER_WRITE2),
                ratio(p99, write2.p99)
            );
        }
        None => println!("target at 64 B: not measured in this run (--payload)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every payload the command accepts fits its log's slots, and the configuration is valid.
    #[test]
    fn every_payload_fits_its_log() {
        use mu_replica::Protocol;
        for protocol in [Protocol::Mu, Protocol::Velos] {
            for payload_bytes in 1..=MAX_PAYLOAD_BYTES {
                let (slots_count, slot_bytes) = log_shape(payload_bytes, protocol);
                let config = replica_child::config(
                    0,
                    REPLICAS,
                    (slots_count, slot_bytes),
                    None,
                    ThreadsChoice::Shared,
                    protocol,
                );
                let (_, layout) = config.validate().expect("a valid configuration");
                assert!(layout.max_value_bytes() >= payload_bytes, "{payload_bytes}");
                assert!((LOG_SLOTS_MIN..=LOG_SLOTS_MAX).contains(&slots_count));
            }
        }
        assert_eq!(log_shape(4096, Protocol::Mu), (LOG_SLOTS_MIN, 4096 + 24));
        assert_eq!(log_shape(64, Protocol::Mu), (LOG_SLOTS_MAX, 88));
        assert_eq!(log_shape(1, Protocol::Mu).1, 32);
        assert_eq!(log_shape(1, Protocol::Velos).1, 40, "a rejoin entry takes 10 bytes");
    }

    #[test]
    fn values_have_the_payload_size() {
        let mut v = Vec::new();
        for payload_bytes in [1, 7, 28, 32, 64, 4096] {
            App::Standalone.value(payload_bytes, 7, &mut v);
            assert_eq!(v.len(), payload_bytes);
            App::Kv.value(payload_bytes, 7, &mut v);
            assert_eq!(v.len(), payload_bytes.max(28), "{payload_bytes}");
            assert!(mu_kv::Request::decode(&v).is_ok());
            App::Orderbook.value(payload_bytes, 7, &mut v);
            assert_eq!(mu_orderbook::Request::decode(&v), Ok(crate::cluster::order(7)));
        }
        let mut other = Vec::new();
        App::Standalone.value(64, 8, &mut other);
        App::Standalone.value(64, 7, &mut v);
        assert_ne!(v, other, "consecutive values must differ");
    }
}
