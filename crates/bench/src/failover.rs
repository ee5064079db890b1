//! `mu bench failover`: the leader fails again and again under load, and each failover is timed
//! from the replicas' own clocks (Mu paper §7.3, Figure 6).
//!
//! Three `mu bench-replica` processes run on the shared-memory fabric; whichever leads proposes
//! 64-byte values in a loop, and each publishes its commit times, its election and readiness
//! times and its commit count in a small shared file (`words::SharedWords`), on `CLOCK_MONOTONIC`,
//! which all processes of the host share. This process only injects failures and reads those
//! words, sleeping in between, so it takes no CPU from the replicas when it matters.
//!
//! For each failover of replica 0 (the leader: the lowest live id) to replica 1 or 2:
//! * **total** = the new leader's first commit − the old leader's last commit;
//! * **detect** = when the new leader's failure detector elected it − when the failure was
//!   injected (just before the signal is sent);
//! * **switch** = when the new leader was ready to replicate (write permission from a majority,
//!   its log caught up and its followers updated) − when it was elected;
//! * **permit** (Mu) = when the new leader held write permission from a majority − when it was
//!   elected: the part of the switch that revokes the old leader;
//! * **ramp** = the new leader's first commit − when it was ready: its first proposal, with
//!   whatever a new Velos leader decides again before it. Velos's steps within it (prepared,
//!   first decision, the application's first value submitted) are dated too.
//!
//! Failures: `kill` sends SIGKILL. A killed replica could come back only by restarting and
//! getting the others' state by a state transfer, and these replicas run a commit handler, not a
//! state machine that takes snapshots (a replica that needs a state transfer then stays out of
//! the cluster), so every failover runs on a fresh cluster. `pause` sends SIGSTOP, and SIGCONT
//! once the new leader has committed: the old leader's writes then fail, it steps down, and as
//! the lowest id it leads again once the others see its heartbeat (a fail-back, timed apart and
//! not counted as a failover). One cluster serves all the
//! pause failovers, unless the fabric fenced (killed) the stopped leader because it was stopped in
//! the middle of a write the new leader had to revoke; then a fresh cluster takes over.

use crate::cluster::{self, App, Cluster, FabricChoice, ReplicaMode, Spec, ThreadsChoice};
use crate::interrupt;
use crate::words::{self, Words};
use mu_fabric::NodeId;
use mu_procs::run_dir::RunDir;
use mu_replica::{ReplicaConfig, VelosStep};
use mu_replication::Phase;
use serde_json::json;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DEFAULT_COUNT: u32 = 1000;
const QUICK_COUNT: u32 = 100;
const REPLICAS: u16 = 3;
const OLD_LEADER: u16 = 0;
const PROPOSE_BYTES: usize = 64;
/// 64 bytes of value and 24 of framing, rounded up as the log wants (a multiple of 8) and to
/// two cache lines.
const SLOT_BYTES: u32 = 128;
/// Log slots in kill mode (2 MiB of log per replica), where a cluster lives for one failover.
/// Kept small on purpose: revoking a killed writer's access completes once its process is gone,
/// and tearing down a process takes longer the more shared memory it maps. On a two-core
/// machine, SIGKILL to reaped took about 1 ms with this log and 2 to 13 ms with 16 MiB logs,
/// whose failovers took 9 ms (median) instead of 4 to 6. The price: a follower starved for a
/// few tens of milliseconds falls a log behind more often, and the cluster is given up before
/// its failure (see [`wait_steady`]).
const KILL_MODE_SLOTS: u64 = 1 << 14;
/// A stopped leader must come back less than a log behind (these replicas take no snapshots, so
/// one further behind would need a state transfer it cannot have and stay out of the cluster), so
/// in pause mode the log holds what the interim leader commits before the old one leads again:
/// at most one entry per this many nanoseconds, for as long as [`interim_ns`] says. (On a
/// two-core machine a 64-byte proposal took about 1 µs at the median with two followers, and a
/// leader left with one follower committed one every 0.7 µs.)
const FASTEST_PROPOSAL_NS: u64 = 250;
/// The largest log in pause mode: 256 MiB of 128-byte slots per replica.
const PAUSE_MODE_SLOTS_MAX: u64 = 1 << 21;
/// The targets, reported and not asserted: median total failover time per mode.
const TARGET_PAUSE_P50_US: f64 = 150.0;
const TARGET_KILL_P50_US: f64 = 50.0;
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Replica 0 leads steadily once, over this window, every replica saw it lead, it stayed in one
/// term, it committed at least [`STEADY_COMMITS`] values, and no follower lags it by more than
/// a quarter of the log. The leader drops a follower that falls further behind than the log
/// holds; that follower then needs a state transfer, which these replicas cannot serve (they
/// take no snapshots), and with the leader gone no majority could go on.
const STEADY_WINDOW: Duration = Duration::from_millis(20);
const STEADY_COMMITS: u64 = 100;
/// Leader changes that the injected failure did not cause, and clusters given up before their
/// failure, tolerated beyond the count asked for.
const GIVE_UPS_ALLOWED: u32 = 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FailureMode {
    /// SIGKILL the leader; a fresh three-replica cluster for every failover.
    Kill,
    /// SIGSTOP the leader, SIGCONT it after the new leader's first commit; one cluster.
    Pause,
}

impl FailureMode {
    fn name(self) -> &'static str {
        match self {
            FailureMode::Kill => "kill",
            FailureMode::Pause => "pause",
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Failovers to measure [default: 1000; 100 with --quick].
    #[arg(long, value_parser = crate::counts::count_u32)]
    count: Option<u32>,
    /// How the leader fails: kill (SIGKILL; a fresh cluster per failover, since a killed replica
    /// could rejoin only by a state transfer, which these replicas cannot serve) or pause
    /// (SIGSTOP, then SIGCONT; one cluster).
    #[arg(long, value_enum, default_value_t = FailureMode::Kill)]
    mode: FailureMode,
    /// The replication engines, one after the other in this run: mu, velos, or mu,velos (the
    /// failover histograms of both, and velos's median over mu's).
    #[arg(long, value_delimiter = ',', default_value = "mu")]
    protocol: Vec<mu_replica::Protocol>,
    /// Also record, across the first failover of each engine, the entries the surviving
    /// follower (replica 2) applies per 100 µs (Velos Fig. 2): `failover-timeline` CSV and SVG.
    #[arg(long)]
    timeline: bool,
    /// A short run: 100 failovers unless --count is given.
    #[arg(long)]
    quick: bool,
    /// The directory the CSV (one row per failover) and SVG (histograms) files go into, with a
    /// CSV of each new leader's busy polls (`-polls.csv`, one row per poll).
    #[arg(long, default_value = "bench-out")]
    out: std::path::PathBuf,
    /// The failure detector's read period for every replica, in microseconds [default:
    /// ReplicaConfig's, 1000, tuned for a two-core machine]. Pause detection takes about 15
    /// periods; a period shorter than a replica can go unscheduled makes false suspicions.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    read_period_us: Option<u64>,
    /// How every replica's threads wait when idle: back off (shared) or spin on cores of their
    /// own (dedicated: about four cores per replica, as in the Mu paper; the proposer then
    /// also waits for leadership by spinning).
    #[arg(long, value_enum, default_value_t = ThreadsChoice::Shared)]
    threads: ThreadsChoice,
    /// Pin every replica's threads to CPUs of their own (9 CPUs): each process's proposing
    /// thread, its replication thread and its background thread. Default: not pinned.
    #[arg(long)]
    pin: bool,
}

/// The fewest CPUs `--threads dedicated` runs on: a replication, a background and a proposing
/// or liveness thread spinning per replica.
const DEDICATED_CPUS_MIN: usize = 9;

/// One failover, in nanoseconds.
#[derive(Clone, Debug)]
struct Failover {
    total_ns: u64,
    detect_ns: u64,
    switch_ns: u64,
    /// Mu only: from election to a majority's permission.
    permission_ns: Option<u64>,
    ramp_ns: u64,
    /// Mu only: from election to the first entry into each phase (`Phase::ALL`).
    phases_ns: [Option<u64>; Phase::ALL.len()],
    /// Velos only: from readiness to each first step (`VelosStep::ALL`).
    velos_steps_ns: [Option<u64>; VelosStep::ALL.len()],
    /// Mu only: the new leader's polls until it was set up and had committed, by the phase each
    /// began in (`Phase::ALL`; `Follower`: the poll that took up the leadership): the time they
    /// took and how many there were (`None` where there was none).
    phase_busy_ns: [Option<u64>; Phase::ALL.len()],
    phase_polls: [Option<u64>; Phase::ALL.len()],
    /// The new leader's polls until its first commit, all phases together (Mu) or in all
    /// (Velos): the time they took and how many there were (`None` if none was timed).
    setup_busy: Option<(u64, u64)>,
    /// Mu only: attempts the new leader aborted before its first commit, and the last one's
    /// kind (`words::abort_kind`).
    setup_aborts: u64,
    last_abort_kind: u64,
    /// Either engine: the new leader's busy polls (`ReplicaStatus::setup_polls`), each one's
    /// start counted from its election.
    setup_polls: Vec<mu_replica::SetupPoll>,
}

/// What a replica published about its current term as leader.
#[derive(Clone, Debug)]
struct Term {
    first_commit_ns: u64,
    elected_ns: u64,
    ready_ns: u64,
    /// 0: unknown (Velos asks for no permission).
    permitted_ns: u64,
    /// Mu: when the engine first entered each phase (`Phase::ALL`); 0: not entered.
    phases_ns: [u64; Phase::ALL.len()],
    /// Velos: when the leader first took each step (`VelosStep::ALL`); 0: not taken.
    velos_steps_ns: [u64; VelosStep::ALL.len()],
    /// Mu: the set-up's polls by the phase each began in: time taken, and how many (0: none).
    phase_busy_ns: [u64; Phase::ALL.len()],
    phase_polls: [u64; Phase::ALL.len()],
    /// Velos: the polls until the first commit: time taken, and how many (0: none).
    velos_busy_ns: u64,
    velos_polls: u64,
    /// Mu: attempts aborted before the first commit, and the last one's kind.
    setup_aborts: u64,
    last_abort_kind: u64,
    /// The busy polls, each one's start as the other times.
    setup_polls: Vec<mu_replica::SetupPoll>,
}

/// Summaries of named moments, one per failover that reached each (`None` where it did not),
/// with the count of those failovers; `None` if no failover reached any.
fn moments_us(
    moments: impl IntoIterator<Item = (String, Vec<Option<u64>>)>,
) -> Option<serde_json::Value> {
    let mut out = serde_json::Map::new();
    for (name, at) in moments {
        let reached: Vec<u64> = at.into_iter().flatten().collect();
        if !reached.is_empty() {
            let mut s = summary_us(&reached);
            s["failovers"] = json!(reached.len());
            out.insert(name, s);
        }
    }
    (!out.is_empty()).then_some(serde_json::Value::Object(out))
}

/// A summary of counts, one per failover: p50 and max (nearest rank) and how many failovers;
/// `values` must not be empty.
fn count_summary(mut values: Vec<u64>) -> serde_json::Value {
    values.sort_unstable();
    let p50 = values[values.len().div_ceil(2) - 1];
    json!({"p50": p50, "max": values[values.len() - 1], "failovers": values.len()})
}

/// [`count_summary`] of each named list of counts that is not empty.
fn counts(named: impl IntoIterator<Item = (String, Vec<u64>)>) -> serde_json::Value {
    let out = named
        .into_iter()
        .filter(|(_, values)| !values.is_empty())
        .map(|(name, values)| (name, count_summary(values)))
        .collect();
    serde_json::Value::Object(out)
}

/// Reads a term's words consistently: the replica writes them before bumping its term count.
fn read_term(words: &Words) -> Term {
    loop {
        let terms = words.terms.get();
        let term = Term {
            first_commit_ns: words.first_commit_ns.get(),
            elected_ns: words.elected_ns.get(),
            ready_ns: words.ready_ns.get(),
            permitted_ns: words.permitted_ns.get(),
            phases_ns: std::array::from_fn(|i| words.phases_ns[i].get()),
            velos_steps_ns: std::array::from_fn(|i| words.velos_steps_ns[i].get()),
            phase_busy_ns: std::array::from_fn(|i| words.phase_busy_ns[i].get()),
            phase_polls: std::array::from_fn(|i| words.phase_polls[i].get()),
            velos_busy_ns: words.velos_busy_ns.get(),
            velos_polls: words.velos_polls.get(),
            setup_aborts: words.setup_aborts.get(),
            last_abort_kind: words.last_abort_kind.get(),
            setup_polls: (0..words.setup_polls_len.get() as usize)
                .take(mu_replica::SETUP_TRACE_POLLS)
                .filter_map(|i| {
                    let [start_ns, figures @ ..] = &words.setup_polls[i];
                    mu_replica::SetupPoll::unpack(
                        start_ns.get(),
                        figures.each_ref().map(|w| w.get()),
                    )
                })
                .collect(),
        };
        if words.terms.get() == terms {
            return term;
        }
    }
}

/// How long the interim leader commits in pause mode before the old leader leads again: the
/// benchmark noticing its first commit (1 ms polls), the others' detectors finding the continued
/// leader alive again (its score must climb from below 2 to above 6: 7 fresh reads), a few
/// periods of slack, and 50 ms for a loaded machine.
fn interim_ns(read_period_ns: u64) -> u64 {
    read_period_ns.saturating_mul(12).saturating_add(50_000_000)
}

/// Everything measured in one run.
#[derive(Default)]
struct Measured {
    failovers: Vec<Failover>,
    /// With --timeline: entries replica 2 applied per bucket, from before the first failure.
    timeline: Vec<(f64, f64)>,
    /// Pause mode: the old leader's first commit after SIGCONT − the interim leader's last.
    failbacks_ns: Vec<u64>,
    /// Leader changes the injected failure did not cause (the new leader was elected before it).
    discarded: u32,
    /// Pause mode: stopped leaders the fabric fenced (killed) to revoke a write they were in.
    fenced: u32,
    /// Clusters given up before their failure: a follower fell more than a log behind, or
    /// replica 0 did not lead steadily.
    abandoned: u32,
    clusters_started: u32,
}

pub fn run(args: Args) -> Result<(), String> {
    interrupt::catch();
    let count = args.count.unwrap_or(if args.quick { QUICK_COUNT } else { DEFAULT_COUNT });
    let default_period_ns = ReplicaConfig::new(NodeId(0), Vec::new()).detector.read_period_ns;
    let read_period_ns = args.read_period_us.map_or(default_period_ns, |us| us * 1000);
    let slots_count = match args.mode {
        FailureMode::Kill => KILL_MODE_SLOTS,
        FailureMode::Pause => (interim_ns(read_period_ns) / FASTEST_PROPOSAL_NS)
            .next_power_of_two()
            .clamp(KILL_MODE_SLOTS, PAUSE_MODE_SLOTS_MAX),
    };
    let spec = Spec {
        fabric: FabricChoice::Shm,
        replicas: REPLICAS,
        mode: ReplicaMode::Direct,
        read_period_us: args.read_period_us,
        threads: args.threads,
        slots_count,
        slot_bytes: SLOT_BYTES,
        propose_bytes: PROPOSE_BYTES,
        app: App::Standalone,
        protocol: mu_replica::Protocol::Mu,
        pin: args.pin,
    };
    if args.pin {
        crate::cluster::check_pin_cpus(REPLICAS)?;
    }
    let cpus = mu_cpu::allowed_cpus().len();
    if args.threads == ThreadsChoice::Dedicated && cpus < DEDICATED_CPUS_MIN {
        return Err(format!(
            "--threads dedicated makes about three threads per replica spin ({DEDICATED_CPUS_MIN} \
             for {REPLICAS} replicas), and this process may use {cpus} CPUs: the spinning threads \
             would starve the ones that must run, and the cluster would not come up. Use \
             --threads shared (the default) here"
        ));
    }
    // Every wait for the cluster allows for a slow detector and a loaded machine.
    let timeout =
        Duration::from_secs(20) + Duration::from_nanos(read_period_ns.saturating_mul(100));
    note!(
        "mu bench failover: {REPLICAS} replicas on shm ({}), {} mode, {count} failovers, read \
         period {} us, {} threads{}, {} CPUs allowed",
        args.protocol.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
        args.mode.name(),
        read_period_ns / 1000,
        args.threads.name(),
        if args.pin { ", each pinned to a CPU of its own" } else { "" },
        mu_cpu::allowed_cpus().len()
    );
    let out_dir = mu_figures::output_dir(&args.out).map_err(|e| e.to_string())?;
    let top = RunDir::create("failover")?;
    let mut protocols = args.protocol.clone();
    protocols.dedup();
    let mut runs = Vec::new();
    for &protocol in &protocols {
        // One engine keeps the files' plain names; several get one set each.
        let name = match protocols.len() {
            1 => format!("failover-{}", args.mode.name()),
            _ => format!("failover-{}-{protocol}", args.mode.name()),
        };
        let spec = Spec { protocol, ..spec.clone() };
        let dir = top.subdirectory(protocol.name())?;
        let m = measure(&args, &spec, &dir, &name, count, (timeout, read_period_ns))?;
        write_files(&out_dir, &name, &m)?;
        runs.push((protocol, m));
    }
    if args.timeline {
        write_timeline(&out_dir, args.mode, &runs)?;
    }
    if let [(protocol, m)] = &runs[..] {
        report(&args, *protocol, read_period_ns, m);
    } else {
        compare(&args, read_period_ns, &runs);
    }
    Ok(())
}

/// The replica whose applied entries the timeline counts: neither the old leader nor the next.
const SURVIVOR: u16 = 2;
/// The timeline starts this long before the failure and ends this long after the new leader's
/// first commit; its buckets are this wide (the Velos paper's Fig. 2 counts per 100 µs).
const TIMELINE_BEFORE: Duration = Duration::from_millis(2);
const TIMELINE_AFTER: Duration = Duration::from_millis(10);
const TIMELINE_BUCKET_NS: u64 = 100_000;

/// Samples a replica's applied count on a thread of its own, as fast as it can, from before
/// the failure until told to finish.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(u64, u64)>>,
}

impl Sampler {
    fn start(words_path: &std::path::Path) -> Result<Sampler, String> {
        let words = Words::open(words_path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::with_capacity(1 << 16);
            let mut last = u64::MAX;
            while !flag.load(Ordering::Relaxed) {
                let applied = words.applied.get();
                if applied != last {
                    samples.push((cluster::monotonic_ns(), applied));
                    last = applied;
                }
                std::hint::spin_loop();
            }
            samples.push((cluster::monotonic_ns(), last));
            samples
        });
        std::thread::sleep(TIMELINE_BEFORE);
        Ok(Sampler { stop, thread })
    }

    /// Entries applied per bucket, at each bucket's start in ms from the first sample.
    fn finish(self) -> Vec<(f64, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread.join().unwrap_or_default();
        let (Some(&(t0, a0)), Some(&(t1, _))) = (samples.first(), samples.last()) else {
            return Vec::new();
        };
        let buckets = ((t1 - t0) / TIMELINE_BUCKET_NS + 1) as usize;
        let mut counts = vec![0u64; buckets];
        let mut before = a0;
        for &(t, applied) in &samples[1..] {
            counts[((t - t0) / TIMELINE_BUCKET_NS) as usize] += applied.saturating_sub(before);
            before = applied;
        }
        counts
            .iter()
            .enumerate()
            .map(|(i, &c)| ((i as u64 * TIMELINE_BUCKET_NS) as f64 / 1e6, c as f64))
            .collect()
    }
}

/// The timelines of every engine measured: CSV (one row per bucket) and one line chart.
fn write_timeline(
    dir: &std::path::Path,
    mode: FailureMode,
    runs: &[(mu_replica::Protocol, Measured)],
) -> Result<(), String> {
    let name = format!("failover-{}-timeline", mode.name());
    let mut columns = vec!["ms".to_string()];
    columns.extend(runs.iter().map(|(p, _)| format!("{p}_entries_per_100us")));
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut table = mu_figures::Table::new("entries applied at replica 2 per 100 µs", &columns);
    let rows = runs.iter().map(|(_, m)| m.timeline.len()).max().unwrap_or(0);
    for i in 0..rows {
        let mut row = vec![format!("{:.1}", i as f64 * TIMELINE_BUCKET_NS as f64 / 1e6)];
        for (_, m) in runs {
            row.push(m.timeline.get(i).map_or(String::new(), |&(_, c)| format!("{c}")));
        }
        table.row(row);
    }
    let csv = dir.join(format!("{name}.csv"));
    table.write_csv(&csv).map_err(|e| format!("writing {}: {e}", csv.display()))?;
    let chart = mu_figures::LineChart {
        title: format!(
            "Entries applied at a surviving replica per 100 µs; leader {} at {} ms",
            match mode {
                FailureMode::Kill => "killed",
                FailureMode::Pause => "stopped",
            },
            TIMELINE_BEFORE.as_millis()
        ),
        x_label: "time (ms)".into(),
        y_label: "entries per 100 µs".into(),
        series: runs
            .iter()
            .map(|(p, m)| mu_figures::LineSeries {
                name: p.to_string(),
                points: m.timeline.clone(),
            })
            .collect(),
        log_x: false,
        log_y: false,
    };
    let svg = dir.join(format!("{name}.svg"));
    chart.write_svg(&svg).map_err(|e| e.to_string())?;
    note!("wrote {}, {}", csv.display(), svg.display());
    Ok(())
}

/// Velos's median failover may be at most this fraction of Mu's, measured in the same run.
const TARGET_VELOS_OVER_MU_TOTAL_P50: f64 = 0.2;

/// Several engines in one run: each one's figures, then the median totals side by side.
fn compare(args: &Args, read_period_ns: u64, runs: &[(mu_replica::Protocol, Measured)]) {
    let p50_us = |m: &Measured| {
        let totals: Vec<u64> = m.failovers.iter().map(|f| f.total_ns).collect();
        summary_us(&totals)["p50"].as_f64().unwrap_or(f64::NAN)
    };
    let (base, base_m) = &runs[0];
    let base_p50 = p50_us(base_m);
    if args.json {
        let docs: Vec<serde_json::Value> =
            runs.iter().map(|(p, m)| document(args, *p, read_period_ns, m)).collect();
        let mut comparison = json!({ format!("{base}_total_p50_us"): base_p50 });
        for (p, m) in &runs[1..] {
            comparison[format!("{p}_total_p50_us")] = json!(p50_us(m));
            comparison[format!("{p}_over_{base}_total_p50")] = json!(p50_us(m) / base_p50);
        }
        comparison["target_velos_over_mu_total_p50"] = json!(TARGET_VELOS_OVER_MU_TOTAL_P50);
        println!("{}", json!({"runs": docs, "comparison": comparison}));
        return;
    }
    for (p, m) in runs {
        report(args, *p, read_period_ns, m);
        println!();
    }
    for (p, m) in &runs[1..] {
        let r = p50_us(m) / base_p50;
        println!(
            "median total failover: {p} {:.1} us, {base} {base_p50:.1} us: {p}/{base} {r:.2} \
             (target for velos/mu: at most {TARGET_VELOS_OVER_MU_TOTAL_P50}, {})",
            p50_us(m),
            if r <= TARGET_VELOS_OVER_MU_TOTAL_P50 { "met" } else { "not met" }
        );
    }
}

/// `count` failovers of one engine's clusters, in `top`.
fn measure(
    args: &Args,
    spec: &Spec,
    top: &RunDir,
    name: &str,
    count: u32,
    (timeout, read_period_ns): (Duration, u64),
) -> Result<Measured, String> {
    let mut progress = mu_figures::Progress::new(name, u64::from(count));
    let mut m = Measured::default();
    let mut cluster: Option<Cluster> = None;
    while m.failovers.len() < count as usize {
        interrupt::check()?;
        if m.discarded + m.abandoned > count + GIVE_UPS_ALLOWED {
            return Err(format!(
                "{} leader changes were not caused by the injected failure and {} clusters were \
                 given up before it (see the messages above): the replicas suspect each other \
                 without a failure; is a read period of {} us too short for this machine's \
                 load?",
                m.discarded,
                m.abandoned,
                read_period_ns / 1000
            ));
        }
        let c = match &mut cluster {
            Some(c) => c,
            None => {
                let dir = top.subdirectory(&format!("cluster-{}", m.clusters_started))?;
                m.clusters_started += 1;
                cluster.insert(start_cluster(dir, spec)?)
            }
        };
        if let Some(why) = wait_steady(c, spec.slots_count, timeout)? {
            m.abandoned += 1;
            note!("  giving up a cluster before its failure: {why}");
            cluster = None; // kills and reaps the processes, removes their directory
            continue;
        }
        let attempt = m.failovers.len() + 1;
        let sampler = (args.timeline && m.timeline.is_empty())
            .then(|| Sampler::start(&c.dir().join(format!("words-{SURVIVOR}.mem"))))
            .transpose()?;
        let (new_leader, failover) = inject(c, args.mode, timeout)?;
        if let Some(sampler) = sampler {
            std::thread::sleep(TIMELINE_AFTER);
            m.timeline = sampler.finish();
        }
        match failover {
            Ok(f) => {
                m.failovers.push(f);
                progress.set(m.failovers.len() as u64);
            }
            Err(why) => {
                m.discarded += 1;
                note!("failover {attempt}/{count}: not counted: {why}");
            }
        }
        let fresh_cluster = match args.mode {
            FailureMode::Kill => true,
            FailureMode::Pause => match fail_back(c, spec.protocol, new_leader, timeout)? {
                Some(failback_ns) => {
                    m.failbacks_ns.push(failback_ns);
                    false
                }
                None => {
                    m.fenced += 1;
                    note!(
                        "  the stopped leader was fenced (killed by the fabric to revoke a write \
                         it was in): starting a fresh cluster"
                    );
                    true
                }
            },
        };
        if fresh_cluster {
            cluster = None;
        }
    }
    drop(cluster);
    progress.finish();
    Ok(m)
}

/// Each busy poll's gap: the time from the end of the busy poll before it (from the election,
/// for the first) to its start, of which its idle polls took `SetupPoll::idle_ns`.
fn poll_gaps_ns(polls: &[mu_replica::SetupPoll]) -> impl Iterator<Item = u64> + '_ {
    let ends = std::iter::once(0).chain(polls.iter().map(|p| p.start_ns + p.busy_ns));
    polls.iter().zip(ends).map(|(p, end)| p.start_ns.saturating_sub(end))
}

/// A traced poll's phase as the files name it (`velos` under Velos, which has none).
fn poll_phase(p: &mu_replica::SetupPoll) -> String {
    p.phase.map_or("velos".to_string(), |phase| format!("{phase:?}"))
}

/// Where a new leader's time went between its busy polls, over the failovers that traced any:
/// the largest gap of each and the poll that ended it (its phase says what was awaited), and
/// per failover the time between busy polls spent in idle polls and in no poll at all.
fn setup_trace_json(failovers: &[Failover]) -> Option<serde_json::Value> {
    let traced: Vec<&Failover> = failovers.iter().filter(|f| !f.setup_polls.is_empty()).collect();
    if traced.is_empty() {
        return None;
    }
    let (mut largest, mut idle, mut unpolled) = (Vec::new(), Vec::new(), Vec::new());
    let mut ended_by = serde_json::Map::new();
    let mut by_thread: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    for f in &traced {
        let gaps: Vec<u64> = poll_gaps_ns(&f.setup_polls).collect();
        let (at, gap) = gaps.iter().copied().enumerate().max_by_key(|&(_, g)| g).expect("traced");
        largest.push(gap);
        let p = &f.setup_polls[at];
        let label = format!("{}/{}", poll_phase(p), p.poller.name());
        let count = ended_by.get(&label).and_then(|v| v.as_u64()).unwrap_or(0);
        ended_by.insert(label, json!(count + 1));
        let idle_ns: u64 = f.setup_polls.iter().map(|p| p.idle_ns).sum();
        idle.push(idle_ns);
        unpolled.push(gaps.iter().sum::<u64>().saturating_sub(idle_ns));
        for poller in mu_replica::Poller::ALL {
            let n = f.setup_polls.iter().filter(|p| p.poller == poller).count() as u64;
            by_thread.entry(poller.name()).or_default().push(n);
        }
    }
    Some(json!({
        "failovers": traced.len(),
        "busy_polls": count_summary(traced.iter().map(|f| f.setup_polls.len() as u64).collect()),
        "busy_polls_by_thread": counts(by_thread.into_iter().map(|(k, v)| (k.to_string(), v))),
        "largest_gap_us": summary_us(&largest),
        "largest_gap_ended_by": ended_by,
        "idle_polls_us": summary_us(&idle),
        "unpolled_us": summary_us(&unpolled),
    }))
}

/// One row per traced busy poll of each failover's new leader (`<name>-polls.csv`).
fn write_polls(dir: &std::path::Path, name: &str, m: &Measured) -> Result<(), String> {
    let mut table = mu_figures::Table::new(
        "new leaders' busy polls (µs from election)",
        &[
            "failover",
            "poll",
            "thread",
            "phase",
            "start_us",
            "busy_us",
            "gap_us",
            "idle_polls",
            "idle_us",
        ],
    );
    let us = |ns: u64| format!("{:.2}", ns as f64 / 1000.0);
    for (i, f) in m.failovers.iter().enumerate() {
        for (j, (p, gap)) in f.setup_polls.iter().zip(poll_gaps_ns(&f.setup_polls)).enumerate() {
            table.row(vec![
                (i + 1).to_string(),
                (j + 1).to_string(),
                p.poller.name().to_string(),
                poll_phase(p),
                us(p.start_ns),
                us(p.busy_ns),
                us(gap),
                p.idle_polls.to_string(),
                us(p.idle_ns),
            ]);
        }
    }
    let csv = dir.join(format!("{name}-polls.csv"));
    table.write_csv(&csv).map_err(|e| format!("writing {}: {e}", csv.display()))?;
    note!("wrote {}", csv.display());
    Ok(())
}

/// One CSV row per failover and an SVG of the total and switch histograms (Mu paper Fig. 6).
fn write_files(dir: &std::path::Path, name: &str, m: &Measured) -> Result<(), String> {
    let mut table = mu_figures::Table::new(
        "failovers (µs)",
        &["failover", "total_us", "detect_us", "switch_us", "permission_us", "ramp_us"],
    );
    for (i, f) in m.failovers.iter().enumerate() {
        table.row(vec![
            (i + 1).to_string(),
            format!("{:.1}", f.total_ns as f64 / 1000.0),
            format!("{:.1}", f.detect_ns as f64 / 1000.0),
            format!("{:.1}", f.switch_ns as f64 / 1000.0),
            f.permission_ns.map_or(String::new(), |ns| format!("{:.1}", ns as f64 / 1000.0)),
            format!("{:.1}", f.ramp_ns as f64 / 1000.0),
        ]);
    }
    let csv = dir.join(format!("{name}.csv"));
    table.write_csv(&csv).map_err(|e| format!("writing {}: {e}", csv.display()))?;
    let values = |pick: fn(&Failover) -> u64| -> Vec<f64> {
        m.failovers.iter().map(|f| pick(f) as f64 / 1000.0).collect()
    };
    let histogram = mu_figures::Histogram {
        title: format!("Failover times, {} failovers ({name})", m.failovers.len()),
        x_label: "time (µs)".into(),
        series: vec![
            ("total".into(), values(|f| f.total_ns)),
            ("detect".into(), values(|f| f.detect_ns)),
            ("switch".into(), values(|f| f.switch_ns)),
        ],
        bins: 40,
    };
    let svg = dir.join(format!("{name}.svg"));
    histogram.write_svg(&svg).map_err(|e| e.to_string())?;
    note!("wrote {}, {}", csv.display(), svg.display());
    if m.failovers.iter().any(|f| !f.setup_polls.is_empty()) {
        write_polls(dir, name, m)?;
    }
    Ok(())
}

/// Starts three replica processes and lets replica 0 lead them at full speed.
fn start_cluster(dir: RunDir, spec: &Spec) -> Result<Cluster, String> {
    let mut c = Cluster::new(dir);
    // The followers first: when replica 0 starts and is elected, its first round of permission
    // requests finds both running.
    c.spawn(spec, 1..REPLICAS)?;
    c.wait_started(START_TIMEOUT)?;
    c.spawn(spec, 0..1)?;
    c.wait_started(START_TIMEOUT)?;
    c.wait_leader(OLD_LEADER, START_TIMEOUT)?;
    // Slowly until both followers apply: a follower whose grant came after the leader's
    // permission round is admitted at a later one, which at full speed would find it more than
    // a log behind.
    c.set_go(words::GO_SLOW);
    cluster::poll_until("both followers to apply replica 0's first values", START_TIMEOUT, || {
        c.check_alive(&[])?;
        Ok((1..REPLICAS).all(|r| c.words(r).applied.get() >= 2).then_some(()))
    })
    .map_err(|e| format!("{e}:{}", describe(&c)))?;
    c.set_go(words::GO_FULL_SPEED);
    Ok(c)
}

/// Waits until replica 0 leads steadily (see [`STEADY_WINDOW`]). Returns why the cluster must be
/// given up instead, if it must: a follower fell more than a log behind (it would need a state
/// transfer), or replica 0 did not lead steadily within `timeout`.
fn wait_steady(
    c: &mut Cluster,
    slots_count: u64,
    timeout: Duration,
) -> Result<Option<String>, String> {
    let start = Instant::now();
    loop {
        c.check_alive(&[])?;
        let leader = c.words(OLD_LEADER);
        let (terms, commits) = (leader.terms.get(), leader.commits.get());
        let window = Instant::now();
        while window.elapsed() < STEADY_WINDOW {
            interrupt::check()?;
            std::thread::sleep(Duration::from_millis(1));
        }
        let all_see_0 =
            (0..REPLICAS).all(|r| c.words(r).leader_seen.get() == u64::from(OLD_LEADER) + 1);
        let leader = c.words(OLD_LEADER);
        let applied = leader.applied.get();
        let (lag_max, laggard) = (1..REPLICAS)
            .map(|r| (applied.saturating_sub(c.words(r).applied.get()), r))
            .max()
            .unwrap_or((0, 0));
        if lag_max > slots_count {
            return Ok(Some(format!(
                "replica {laggard} fell {lag_max} entries behind the leader, more than the log \
                 holds ({slots_count})"
            )));
        }
        if all_see_0
            && lag_max <= slots_count / 4
            && terms >= 1
            && leader.terms.get() == terms
            && leader.commits.get() >= commits + STEADY_COMMITS
        {
            return Ok(None);
        }
        if start.elapsed() > timeout {
            return Ok(Some(format!(
                "replica 0 did not lead steadily within {timeout:?}:{}",
                describe(c)
            )));
        }
    }
}

/// What each replica published, and its last status, for error messages.
fn describe(c: &Cluster) -> String {
    (0..REPLICAS)
        .map(|r| {
            let w = c.words(r);
            let status = std::fs::read_to_string(c.dir().join(format!("status-{r}.txt")))
                .unwrap_or_else(|_| "none".into());
            format!(
                "\n  replica {r}: sees leader {}, {} terms, {} commits, {} lost proposals, {} \
                 waits for a full log, {} applied; last status: {status}",
                match w.leader_seen.get() {
                    0 => "none".to_string(),
                    l => (l - 1).to_string(),
                },
                w.terms.get(),
                w.commits.get(),
                w.lost_proposals.get(),
                w.log_full_waits.get(),
                w.applied.get()
            )
        })
        .collect()
}

/// Fails replica 0 and waits for another replica's first commit. Returns the new leader and the
/// failover, or why it does not count (a leader change that began before the failure).
fn inject(
    c: &mut Cluster,
    mode: FailureMode,
    timeout: Duration,
) -> Result<(u16, Result<Failover, String>), String> {
    let terms_before: Vec<u64> = (0..REPLICAS).map(|r| c.words(r).terms.get()).collect();
    let injected_ns = cluster::monotonic_ns();
    match mode {
        FailureMode::Kill => {
            c.signal(OLD_LEADER, libc::SIGKILL)?;
            c.reap(OLD_LEADER)?;
        }
        FailureMode::Pause => c.signal(OLD_LEADER, libc::SIGSTOP)?,
    }
    let new_leader = cluster::poll_until("a new leader's first commit", timeout, || {
        // Replica 0 is dead, or stopped (and maybe fenced); the others must live.
        c.check_alive(&[OLD_LEADER]).map_err(|e| format!("{e} after replica 0 failed"))?;
        Ok((1..REPLICAS).find(|&r| c.words(r).terms.get() > terms_before[usize::from(r)]))
    })
    .map_err(|e| format!("{e}:{}", describe(c)))?;
    let term = read_term(c.words(new_leader));
    let old_last_commit_ns = c.words(OLD_LEADER).last_commit_ns.get();
    let counted = if term.elected_ns == 0 || term.ready_ns == 0 {
        Err(format!("replica {new_leader} did not report its election and readiness times"))
    } else if term.elected_ns < injected_ns {
        Err(format!(
            "replica {new_leader} was elected {} us before the failure was injected",
            micros(injected_ns - term.elected_ns)
        ))
    } else {
        Ok(Failover {
            total_ns: term.first_commit_ns.saturating_sub(old_last_commit_ns),
            detect_ns: term.elected_ns - injected_ns,
            // Saturating: the detector publishes the new leader a moment before it dates the
            // election, so a replication thread that wins that race can be ready "first".
            switch_ns: term.ready_ns.saturating_sub(term.elected_ns),
            permission_ns: (term.permitted_ns != 0)
                .then(|| term.permitted_ns.saturating_sub(term.elected_ns)),
            ramp_ns: term.first_commit_ns.saturating_sub(term.ready_ns),
            phases_ns: term
                .phases_ns
                .map(|at| (at != 0).then(|| at.saturating_sub(term.elected_ns))),
            velos_steps_ns: term
                .velos_steps_ns
                .map(|at| (at != 0).then(|| at.saturating_sub(term.ready_ns))),
            phase_busy_ns: std::array::from_fn(|i| {
                (term.phase_polls[i] != 0).then_some(term.phase_busy_ns[i])
            }),
            phase_polls: term.phase_polls.map(|polls| (polls != 0).then_some(polls)),
            setup_busy: {
                let polls = term.phase_polls.iter().sum::<u64>() + term.velos_polls;
                let ns = term.phase_busy_ns.iter().sum::<u64>() + term.velos_busy_ns;
                (polls != 0).then_some((ns, polls))
            },
            setup_aborts: term.setup_aborts,
            last_abort_kind: term.last_abort_kind,
            setup_polls: term
                .setup_polls
                .iter()
                .map(|p| mu_replica::SetupPoll {
                    start_ns: p.start_ns.saturating_sub(term.elected_ns),
                    ..*p
                })
                .collect(),
        })
    };
    Ok((new_leader, counted))
}

/// Pause mode: continues the stopped replica 0 and waits until it leads again. Returns the
/// fail-back time, or `None` if the fabric had fenced it (the cluster must be replaced).
fn fail_back(
    c: &mut Cluster,
    protocol: mu_replica::Protocol,
    interim: u16,
    timeout: Duration,
) -> Result<Option<u64>, String> {
    let fenced = |status: std::process::ExitStatus| -> Result<Option<u64>, String> {
        if status.signal() == Some(libc::SIGKILL) {
            Ok(None)
        } else {
            Err(format!("replica 0 exited unexpectedly while stopped or after ({status})"))
        }
    };
    if let Some(status) = c.exit_status(OLD_LEADER)? {
        return fenced(status);
    }
    let terms_before = c.words(OLD_LEADER).terms.get();
    let resumes_before = c.words(OLD_LEADER).resumes.get();
    c.signal(OLD_LEADER, libc::SIGCONT)?;
    let what = "replica 0 to lead again after SIGCONT (if it fell more than a log behind, it \
                needs a state transfer, which these replicas cannot serve)";
    let led = cluster::poll_until(what, timeout, || {
        if let Some(status) = c.exit_status(OLD_LEADER)? {
            return Ok(Some(Err(status)));
        }
        c.check_alive(&[OLD_LEADER])?;
        // Mu: a new term (it stepped down, and took permission again), dated by its first
        // commit. Velos: commits again in its old term (it never saw the others lead; when its
        // CAS fails it prepares again under a higher number without stepping down), dated by
        // the first commit after the pause.
        let words = c.words(OLD_LEADER);
        let back_ns = match protocol {
            mu_replica::Protocol::Mu => {
                (words.terms.get() > terms_before).then(|| read_term(words).first_commit_ns)
            }
            mu_replica::Protocol::Velos => {
                (words.resumes.get() > resumes_before).then(|| words.resumed_ns.get())
            }
        };
        Ok(back_ns.map(Ok))
    })
    .map_err(|e| format!("{e}:{}", describe(c)))?;
    let back_ns = match led {
        Ok(ns) => ns,
        Err(status) => return fenced(status),
    };
    let interim_last_ns = c.words(interim).last_commit_ns.get();
    Ok(Some(back_ns.saturating_sub(interim_last_ns)))
}

fn micros(ns: u64) -> f64 {
    (ns as f64 / 1000.0 * 1000.0).round() / 1000.0
}

/// p50, p99 and max (nearest rank), with min and mean, in microseconds.
fn summary_us(values_ns: &[u64]) -> serde_json::Value {
    let mut sorted = values_ns.to_vec();
    sorted.sort_unstable();
    let rank = |q: f64| {
        let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
        micros(sorted[i])
    };
    let mean_ns = sorted.iter().map(|&v| v as f64).sum::<f64>() / sorted.len() as f64;
    json!({
        "p50": rank(0.5),
        "p99": rank(0.99),
        "max": micros(*sorted.last().expect("at least one value")),
        "min": micros(sorted[0]),
        "mean": (mean_ns / 1000.0 * 1000.0).round() / 1000.0,
    })
}

/// One engine's figures as JSON (`{"failovers": N, "total_us": {..}, ..}`).
fn document(
    args: &Args,
    protocol: mu_replica::Protocol,
    read_period_ns: u64,
    m: &Measured,
) -> serde_json::Value {
    let totals: Vec<u64> = m.failovers.iter().map(|f| f.total_ns).collect();
    let detects: Vec<u64> = m.failovers.iter().map(|f| f.detect_ns).collect();
    let switches: Vec<u64> = m.failovers.iter().map(|f| f.switch_ns).collect();
    let ramps: Vec<u64> = m.failovers.iter().map(|f| f.ramp_ns).collect();
    let permissions: Vec<u64> = m.failovers.iter().filter_map(|f| f.permission_ns).collect();
    let target_us = match args.mode {
        FailureMode::Kill => TARGET_KILL_P50_US,
        FailureMode::Pause => TARGET_PAUSE_P50_US,
    };
    let mut out = json!({
        "protocol": protocol.name(),
        "failovers": m.failovers.len(),
        "mode": args.mode.name(),
        "read_period_us": read_period_ns / 1000,
        "threads": args.threads.name(),
        "total_us": summary_us(&totals),
        "detect_us": summary_us(&detects),
        "switch_us": summary_us(&switches),
        "ramp_us": summary_us(&ramps),
        "backend": "shm",
        "replicas": REPLICAS,
        "cpus_allowed": mu_cpu::allowed_cpus().len(),
        "pinned": args.pin,
        "payload_bytes": PROPOSE_BYTES,
        "clusters_started": m.clusters_started,
        "discarded": m.discarded,
        "clusters_abandoned": m.abandoned,
        "target_total_p50_us": target_us,
    });
    if !permissions.is_empty() {
        out["permission_us"] = summary_us(&permissions);
    }
    add_setup_figures(&mut out, &m.failovers);
    if args.mode == FailureMode::Pause {
        out["fenced"] = json!(m.fenced);
        out["failbacks"] = json!(m.failbacks_ns.len());
        if !m.failbacks_ns.is_empty() {
            out["failback_total_us"] = summary_us(&m.failbacks_ns);
        }
    }
    out
}

/// The new leader's set-up as the engines traced it: Mu's phases and the polls in each,
/// either engine's busy polls, Velos's steps, and Mu's aborted attempts.
fn add_setup_figures(out: &mut serde_json::Value, failovers: &[Failover]) {
    // Mu: when the new leader first entered each phase, counted from its election.
    let phases = Phase::ALL.map(|phase| {
        (format!("{phase:?}"), failovers.iter().map(|f| f.phases_ns[phase as usize]).collect())
    });
    if let Some(phases) = moments_us(phases) {
        out["phase_entered_us"] = phases;
    }
    // Mu: the time the new leader's polls took, and how many there were, by the phase each
    // began in ("Follower": the poll that took up the leadership), until it was set up and had
    // committed. Set beside `switch_us` + `ramp_us`, the rest of the time lay between polls.
    let busy = Phase::ALL.map(|phase| {
        (format!("{phase:?}"), failovers.iter().map(|f| f.phase_busy_ns[phase as usize]).collect())
    });
    if let Some(busy) = moments_us(busy) {
        out["phase_busy_us"] = busy;
        let polls = Phase::ALL.map(|phase| {
            let polls: Vec<u64> =
                failovers.iter().filter_map(|f| f.phase_polls[phase as usize]).collect();
            (format!("{phase:?}"), polls)
        });
        out["phase_polls"] = counts(polls);
    }
    // Either engine: the new leader's polls until its first commit, all together.
    let busy: Vec<(u64, u64)> = failovers.iter().filter_map(|f| f.setup_busy).collect();
    if !busy.is_empty() {
        out["setup_busy_us"] = summary_us(&busy.iter().map(|b| b.0).collect::<Vec<_>>());
        out["setup_polls"] = count_summary(busy.iter().map(|b| b.1).collect());
    }
    if let Some(trace) = setup_trace_json(failovers) {
        out["setup_trace"] = trace;
    }
    // Velos: when the new leader first took each step, counted from its readiness.
    let steps = VelosStep::ALL.map(|step| {
        let taken = failovers.iter().map(|f| f.velos_steps_ns[step as usize]).collect();
        (format!("{step:?}"), taken)
    });
    if let Some(steps) = moments_us(steps) {
        out["velos_step_after_ready_us"] = steps;
    }
    // Mu: how often a new leader's set-up or first proposal was aborted and started again.
    let mut kinds = serde_json::Map::new();
    for f in failovers.iter().filter(|f| f.setup_aborts > 0) {
        let name = words::ABORT_KINDS.get(f.last_abort_kind as usize).copied().unwrap_or("unknown");
        let count = kinds.get(name).and_then(|v| v.as_u64()).unwrap_or(0);
        kinds.insert(name.to_string(), json!(count + 1));
    }
    out["setup_aborts"] = json!({
        "failovers_with_aborts": failovers.iter().filter(|f| f.setup_aborts > 0).count(),
        "aborts": failovers.iter().map(|f| f.setup_aborts).sum::<u64>(),
        "last_kind_counts": kinds,
    });
}

fn report(args: &Args, protocol: mu_replica::Protocol, read_period_ns: u64, m: &Measured) {
    let figures: [(&str, Vec<u64>); 5] = [
        ("total", m.failovers.iter().map(|f| f.total_ns).collect()),
        ("detect", m.failovers.iter().map(|f| f.detect_ns).collect()),
        ("switch", m.failovers.iter().map(|f| f.switch_ns).collect()),
        ("permit", m.failovers.iter().filter_map(|f| f.permission_ns).collect()),
        ("ramp", m.failovers.iter().map(|f| f.ramp_ns).collect()),
    ];
    let target_us = match args.mode {
        FailureMode::Kill => TARGET_KILL_P50_US,
        FailureMode::Pause => TARGET_PAUSE_P50_US,
    };
    let total = summary_us(&figures[0].1);
    let total_p50_us = total["p50"].as_f64().unwrap_or(f64::NAN);
    if args.json {
        println!("{}", document(args, protocol, read_period_ns, m));
        return;
    }
    let how = match args.mode {
        FailureMode::Kill => "leader killed (SIGKILL), a fresh cluster per failover",
        FailureMode::Pause => "leader stopped (SIGSTOP), continued after the new leader's commit",
    };
    println!(
        "{protocol} failover: {REPLICAS} replicas on shm, {how}; {} failovers, read period {} us",
        m.failovers.len(),
        read_period_ns as f64 / 1000.0
    );
    println!("{:<8} {:>11} {:>11} {:>11} {:>11}   (us)", "figure", "p50", "p99", "max", "min");
    let mut rows: Vec<(&str, serde_json::Value)> = figures
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(name, v)| (*name, summary_us(v)))
        .collect();
    if !m.failbacks_ns.is_empty() {
        rows.push(("failback", summary_us(&m.failbacks_ns)));
    }
    for (name, s) in rows {
        let us = |q: &str| s[q].as_f64().unwrap_or(f64::NAN);
        println!(
            "{name:<8} {:>11.1} {:>11.1} {:>11.1} {:>11.1}",
            us("p50"),
            us("p99"),
            us("max"),
            us("min")
        );
    }
    println!(
        "total = new leader's first commit - old leader's last; detect = election - failure; \
         switch = ready - election; permit (Mu) = a majority's permission - election; ramp = \
         first commit - ready"
    );
    if m.discarded > 0 {
        println!(
            "leader changes not caused by the injected failure (not counted): {}",
            m.discarded
        );
    }
    if m.abandoned > 0 {
        println!(
            "clusters given up before their failure (a follower a log behind, or no steady \
             leader): {}",
            m.abandoned
        );
    }
    if args.mode == FailureMode::Pause {
        println!(
            "fail-backs (old leader leads again; not counted): {}; stopped leaders fenced: {}",
            m.failbacks_ns.len(),
            m.fenced
        );
    }
    println!(
        "target ({} mode): median total <= {target_us} us: {total_p50_us:.1} us ({})",
        args.mode.name(),
        if total_p50_us <= target_us { "met" } else { "not met" }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_takes_nearest_rank_percentiles_in_microseconds() {
        let values_ns: Vec<u64> = (1..=100).rev().map(|us| us * 1000).collect();
        let s = summary_us(&values_ns);
        assert_eq!(s["p50"], 50.0);
        assert_eq!(s["p99"], 99.0);
        assert_eq!(s["max"], 100.0);
        assert_eq!(s["min"], 1.0);
        // Three failovers (the smoke run): p99 is the largest.
        let s = summary_us(&[3_000, 1_500, 2_250]);
        assert_eq!(s["p50"], 2.25);
        assert_eq!(s["p99"], 3.0);
    }

    #[test]
    fn pause_mode_log_holds_the_interim_leaders_entries() {
        let slots = |period_ns: u64| {
            (interim_ns(period_ns) / FASTEST_PROPOSAL_NS)
                .next_power_of_two()
                .clamp(KILL_MODE_SLOTS, PAUSE_MODE_SLOTS_MAX)
        };
        let default_period_ns = ReplicaConfig::new(NodeId(0), Vec::new()).detector.read_period_ns;
        assert!(slots(default_period_ns) * FASTEST_PROPOSAL_NS >= interim_ns(default_period_ns));
        assert_eq!(slots(u64::MAX / 1000), PAUSE_MODE_SLOTS_MAX);
    }
}
