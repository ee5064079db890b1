//! `mu sim`: whole clusters in the deterministic simulator, one seed replayed or many swept.
//!
//! Each seed runs a cluster of the production engines on the simulated fabric with key-value
//! clients and the chosen faults (a safety phase), then heals it and requires new commits within
//! a bound (a liveness phase); the checkers of `mu_sim::check` run throughout, and the client
//! history goes to `lincheck` when it can be found. A failure prints its seed, what broke, the
//! end of the readable trace, and the command that replays it.

use mu_sim::check::linearizability::find_lincheck;
use mu_sim::{Faults, Protocol, RunConfig, SeedReport};
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Replay one seed and print its whole trace.
    #[arg(long, conflicts_with_all = ["seeds", "first_seed"])]
    pub(crate) seed: Option<u64>,
    /// Sweep this many seeds (default 100).
    #[arg(long, value_parser = mu_procs::counts::count)]
    pub(crate) seeds: Option<u64>,
    /// The first seed of a sweep.
    #[arg(long, default_value_t = 0)]
    pub(crate) first_seed: u64,
    /// The protocol to run: mu, velos, ukharon (the membership service: coordinators and
    /// member nodes, its own faults and checkers), or ukharon-kv (primary-backup under
    /// uKharon's views: uKharon's faults, client histories checked as Mu's).
    #[arg(long, default_value = "mu", value_parser = parse_protocol)]
    pub(crate) protocol: String,
    /// How mu and velos answer a GET: log (the default: proposed like a write) or lease
    /// (answered from the appointed leader's store under uKharon's lease: replicas beside a
    /// uKharon group, its faults, docs/protocols/lease-reads.md).
    #[arg(long, default_value = "log", value_parser = ["log", "lease"])]
    pub(crate) reads: String,
    /// With --reads lease: do not check answers against the views active when they were
    /// given (stale-answer), only what clients saw (linearizability, lost writes, stores).
    #[arg(long)]
    pub(crate) no_answer_check: bool,
    /// Replicas per cluster, 1 to 9. Default: 3 for even seeds, 5 for odd ones.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=9))]
    pub(crate) replicas: Option<u16>,
    /// uKharon: member nodes, 2 to 32 (default 4; coordinators: 3).
    #[arg(long, value_parser = clap::value_parser!(u16).range(2..=32))]
    pub(crate) nodes: Option<u16>,
    /// uKharon: what the safety phase does. faults (the default): the --faults, at random.
    /// drift-edge: clocks at the drift bound, half the members slow and half fast, the slow
    /// ones learning new views late, and a fast member crashed and restarted in turn (6 members
    /// by default; --faults does not apply): the schedule that catches a lease engine without
    /// its drift margin.
    #[arg(long, value_parser = mu_sim::ukharon::UkScenario::parse)]
    pub(crate) scenario: Option<mu_sim::ukharon::UkScenario>,
    /// Faults to inject: none, or a comma-separated list of all (every fault but membership),
    /// crash, restart, pause, delay, partition, perm-failure, out-of-order, membership (replicas
    /// added and removed; --replicas is then how many there may be, at least 3 of them members
    /// at first). uKharon's: all, or some of crash, restart, pause, delay, partition, drift,
    /// lease, coordinator, coordinator-restart (a crashed coordinator back without its memory);
    /// uKharon-KV's are uKharon's (with crash and coordinator, the primary and the leading
    /// coordinator also crash together).
    #[arg(long, default_value = "all", value_parser = parse_faults)]
    pub(crate) faults: String,
    /// Steps of the safety phase per seed (each a fault or client operations, then up to
    /// 200 µs of virtual time; uKharon: a fault, then 50 to 300 µs). Default 60 (uKharon 40).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) steps: Option<u32>,
    /// Key-value clients per cluster, 1 to 64.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub(crate) clients: u64,
    /// The `lincheck` binary that checks client histories (default: $MU_LINCHECK, or
    /// target/lincheck/lincheck as scripts/lincheck.sh builds it).
    #[arg(long)]
    pub(crate) lincheck: Option<PathBuf>,
    /// Do not check client histories for linearizability.
    #[arg(long, conflicts_with = "lincheck")]
    pub(crate) no_lincheck: bool,
    /// Keep each seed's client history here, as DIR/seed-S.json.
    #[arg(long)]
    pub(crate) history_dir: Option<PathBuf>,
    /// Run a deliberately broken engine variant: skip-revoke or skip-prepare-adopt (builds with
    /// the `mutations` feature only); uKharon: start-at-t, timestamp-after-reads,
    /// no-drift-margin (caught by --scenario drift-edge) or compatible-shortcut; uKharon-KV:
    /// answer-before-complete, answer-without-active, get-from-speculative-state,
    /// follow-before-revoke or serve-before-scan (any build).
    #[arg(long)]
    pub(crate) mutation: Option<String>,
    /// Worker threads for a sweep (default: the cores available).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub(crate) jobs: Option<u64>,
    /// Print a summary as JSON on stdout instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// Requests a connection holds before a post on it is refused as a full queue, as an RDMA
    /// send queue (34 to 65536). Default: no limit.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=65536))]
    connection_depth: Option<u64>,
    /// With --seed: also trace every change of each replica's engine (phase, FUO, confirmed
    /// followers, prepare omitted), applied count, leader and log writers.
    #[arg(long, requires = "seed")]
    watch: bool,
}

/// A protocol the simulator runs: mu, velos, ukharon or ukharon-kv.
fn parse_protocol(name: &str) -> Result<String, String> {
    if name == "ukharon" || name == "ukharon-kv" {
        return Ok(name.to_string());
    }
    Protocol::parse(name)
        .map(|_| name.to_string())
        .map_err(|e| format!("{e} (or ukharon, ukharon-kv)"))
}

/// Faults one of the protocols knows (each protocol checks its own list again when it runs).
fn parse_faults(text: &str) -> Result<String, String> {
    match (Faults::parse(text), mu_sim::ukharon::UkFaults::parse(text)) {
        (Err(mu), Err(ukharon)) => Err(format!("{mu}; for --protocol ukharon: {ukharon}")),
        _ => Ok(text.to_string()),
    }
}

/// Trace lines shown with a failure found by a sweep (a replay shows them all).
const TRACE_TAIL_LINES: usize = 40;

pub fn run(args: Args) -> Result<(), String> {
    let protocol = Protocol::parse(&args.protocol)
        .map_err(|e| format!("{e} (or ukharon, the membership service)"))?;
    let faults = Faults::parse(&args.faults)?;
    if args.nodes.is_some() {
        return Err("--nodes is uKharon's: give --replicas for mu and velos".into());
    }
    if args.scenario.is_some() {
        return Err("--scenario is uKharon's: mu and velos inject the --faults".into());
    }
    let lincheck = lincheck_of(&args)?;
    if let Some(dir) = &args.history_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create the history directory {}: {e}", dir.display()))?;
    }
    let mutation = match &args.mutation {
        None => None,
        Some(name) => Some(mu_replication::mutation::Mutation::parse(name).ok_or_else(|| {
            format!("unknown mutation {name:?}: the mutations are skip-revoke, skip-prepare-adopt")
        })?),
    };
    let config_of = |seed: u64| {
        let mut c = RunConfig::new(seed);
        c.protocol = protocol;
        if let Some(r) = args.replicas {
            c.replicas = r;
        }
        c.faults = faults;
        c.steps = args.steps.unwrap_or(60);
        c.clients = args.clients as usize;
        c.lincheck = lincheck.clone();
        c.history_dir = args.history_dir.clone();
        c.mutation = mutation;
        c.watch = args.watch;
        c.connection_depth = args.connection_depth.map(|d| d as usize);
        c
    };
    config_of(args.first_seed).check()?;
    if let Some(seed) = args.seed {
        return replay(config_of(seed), args.json);
    }
    if args.watch {
        return Err("--watch traces one seed: give it with --seed".into());
    }
    let seeds = args.seeds.unwrap_or(100);
    if args.first_seed.checked_add(seeds - 1).is_none() {
        return Err(format!(
            "--first-seed {} with --seeds {seeds} runs past the last seed, {}",
            args.first_seed,
            u64::MAX
        ));
    }
    let jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |j| j as usize,
    );
    sweep(args.first_seed, seeds, jobs, lincheck.is_some(), args.json, &config_of)
}

fn replay(config: RunConfig, json: bool) -> Result<(), String> {
    let started = Instant::now();
    let report = mu_sim::run(&config);
    if json {
        println!("{}", serde_json::to_string_pretty(&report).expect("JSON of plain values"));
    } else {
        for line in &report.trace {
            println!("{line}");
        }
        println!("{}", summary_line(&report));
        println!("ran in {:.3} s", started.elapsed().as_secs_f64());
    }
    match &report.violation {
        None => Ok(()),
        Some(v) => {
            if !json {
                println!("\nVIOLATION ({}): {}", v.checker, v.message);
            }
            Err(format!("seed {} broke {}", report.seed, v.checker))
        }
    }
}

fn summary_line(r: &SeedReport) -> String {
    format!(
        "seed {} replicas {} faults {} integrity {}: {} proposals acknowledged, {} client \
         operations answered, {} unknown, {} refused, {} leader changes, {} membership changes, {:.3} \
         ms virtual, trace {:016x}: {}",
        r.seed,
        r.replicas,
        r.faults,
        r.integrity,
        r.acked,
        r.ops_returned,
        r.ops_unknown,
        r.ops_refused,
        r.leader_changes,
        r.membership_changes,
        r.virtual_ns as f64 / 1e6,
        r.trace_hash,
        r.violation.as_ref().map_or("ok".to_string(), |v| format!("VIOLATION ({})", v.checker))
    )
}

fn replay_command(r: &SeedReport, config: &RunConfig) -> String {
    let mut cmd = format!(
        "mu sim --protocol {} --seed {} --replicas {} --faults {}",
        r.protocol.name(),
        r.seed,
        r.replicas,
        r.faults
    );
    if config.steps != 60 {
        cmd.push_str(&format!(" --steps {}", config.steps));
    }
    if config.clients != 4 {
        cmd.push_str(&format!(" --clients {}", config.clients));
    }
    if let Some(m) = config.mutation {
        cmd.push_str(&format!(" --mutation {}", m.name()));
    }
    if let Some(depth) = config.connection_depth {
        cmd.push_str(&format!(" --connection-depth {depth}"));
    }
    cmd
}

fn sweep(
    first: u64,
    count: u64,
    jobs: usize,
    lincheck: bool,
    json: bool,
    config_of: &(dyn Fn(u64) -> RunConfig + Sync),
) -> Result<(), String> {
    let started = Instant::now();
    let jobs = jobs.min(count as usize).max(1);
    let (totals, mut failures) = run_seeds(first, count, jobs, json, config_of, started);
    failures.sort_by_key(|(r, _)| r.seed);
    let done = SweepDone { first, count, jobs, seconds: started.elapsed().as_secs_f64(), lincheck };
    if json {
        print_sweep_json(&done, &totals, &failures, config_of);
    } else {
        print_sweep_text(&done, &totals, &failures);
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{} of {count} seeds failed", failures.len()))
    }
}

/// What a sweep's seeds add up to.
#[derive(Default)]
struct Totals {
    acked: u64,
    answered: u64,
    unknown: u64,
    leader_changes: u64,
    refused: u64,
    membership_changes: u64,
}

impl Totals {
    fn add(&mut self, report: &SeedReport) {
        self.acked += report.acked as u64;
        self.answered += report.ops_returned as u64;
        self.unknown += report.ops_unknown as u64;
        self.leader_changes += report.leader_changes as u64;
        self.refused += report.ops_refused as u64;
        self.membership_changes += report.membership_changes as u64;
    }
}

/// A finished sweep's shape, for its report.
struct SweepDone {
    first: u64,
    count: u64,
    jobs: usize,
    seconds: f64,
    lincheck: bool,
}

type Failures = Vec<(SeedReport, RunConfig)>;

/// Runs seeds `first..first + count` on `jobs` threads, with a progress line on stderr once a
/// second; failures are printed as they come unless `json`.
fn run_seeds(
    first: u64,
    count: u64,
    jobs: usize,
    json: bool,
    config_of: &(dyn Fn(u64) -> RunConfig + Sync),
    started: Instant,
) -> (Totals, Failures) {
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let failures: Mutex<Failures> = Mutex::new(Vec::new());
    let totals = Mutex::new(Totals::default());
    // Workers still running: the progress loop ends when they do, even if one panicked (the
    // scope then passes the panic on) rather than waiting for seeds nobody will finish.
    let running = AtomicU64::new(jobs as u64);
    struct Running<'a>(&'a AtomicU64);
    impl Drop for Running<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Release);
        }
    }
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                let _running = Running(&running);
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= count {
                        return;
                    }
                    let config = config_of(first + k);
                    let report = mu_sim::run(&config);
                    totals.lock().expect("totals").add(&report);
                    if report.violation.is_some() {
                        if !json {
                            print_failure(&report, &config);
                        }
                        failures.lock().expect("failures").push((report, config));
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Progress, once a second, on stderr (with --json too: the object goes to stdout at
        // the end, and a long sweep should not look hung meanwhile).
        let mut last = Instant::now();
        while done.load(Ordering::Relaxed) < count && running.load(Ordering::Acquire) > 0 {
            std::thread::sleep(Duration::from_millis(50));
            if last.elapsed() >= Duration::from_secs(1) {
                last = Instant::now();
                let d = done.load(Ordering::Relaxed);
                note!(
                    "mu sim: {d}/{count} seeds, {:.1} seeds/s, {} failed",
                    d as f64 / started.elapsed().as_secs_f64(),
                    failures.lock().expect("failures").len()
                );
            }
        }
    });
    (totals.into_inner().expect("totals"), failures.into_inner().expect("failures"))
}

fn print_sweep_json(
    done: &SweepDone,
    t: &Totals,
    failures: &Failures,
    config_of: &(dyn Fn(u64) -> RunConfig + Sync),
) {
    let f: Vec<_> = failures
        .iter()
        .map(|(r, c)| {
            let v = r.violation.as_ref().expect("a failure");
            json!({"seed": r.seed, "replicas": r.replicas, "checker": v.checker,
                   "message": v.message, "replay": replay_command(r, c)})
        })
        .collect();
    let doc = json!({
        "protocol": config_of(done.first).protocol.name(),
        "first_seed": done.first,
        "seeds": done.count,
        "faults": config_of(done.first).faults.describe(),
        "jobs": done.jobs,
        "seconds": done.seconds,
        "seeds_per_second": done.count as f64 / done.seconds,
        "acked": t.acked,
        "ops_answered": t.answered,
        "ops_unknown": t.unknown,
        "ops_refused": t.refused,
        "leader_changes": t.leader_changes,
        "membership_changes": t.membership_changes,
        "linearizability_checked": done.lincheck,
        "failures": f,
    });
    println!("{}", serde_json::to_string_pretty(&doc).expect("JSON of plain values"));
}

fn print_sweep_text(done: &SweepDone, t: &Totals, failures: &Failures) {
    let SweepDone { first, count, jobs, seconds, lincheck } = *done;
    let rate = count as f64 / seconds;
    println!(
        "mu sim: {count} seed{} ({first}..{}) in {seconds:.1} s, {rate:.1} seeds/s on {jobs} \
         thread{}: {} proposals acknowledged, {} client operations answered, {} unknown, \
         {} refused, {} leader changes, {} membership changes; histories {}; {} failed",
        if count == 1 { "" } else { "s" },
        first + (count - 1),
        if jobs == 1 { "" } else { "s" },
        t.acked,
        t.answered,
        t.unknown,
        t.refused,
        t.leader_changes,
        t.membership_changes,
        if lincheck { "checked by lincheck" } else { "NOT checked for linearizability" },
        failures.len()
    );
    for (r, c) in failures {
        let v = r.violation.as_ref().expect("a failure");
        println!("  seed {} ({}): replay with: {}", r.seed, v.checker, replay_command(r, c));
    }
}

fn print_failure(r: &SeedReport, config: &RunConfig) {
    let v = r.violation.as_ref().expect("a failure");
    let tail = r.trace.len().saturating_sub(TRACE_TAIL_LINES);
    let mut text = format!(
        "\nmu sim: seed {} FAILED: {} violated\n{}\nlast {} trace lines:\n",
        r.seed,
        v.checker,
        v.message,
        r.trace.len() - tail
    );
    for line in &r.trace[tail..] {
        text.push_str(line);
        text.push('\n');
    }
    text.push_str(&format!("replay with: {}\n", replay_command(r, config)));
    note_part!("{text}");
}

/// The `lincheck` that checks histories: `--lincheck`, or where it is found, probed first;
/// none with `--no-lincheck`, or (said on stderr) when none is found.
pub(crate) fn lincheck_of(args: &Args) -> Result<Option<PathBuf>, String> {
    Ok(if args.no_lincheck {
        None
    } else {
        match args.lincheck.clone().or_else(find_lincheck) {
            Some(p) if p.is_file() => {
                mu_sim::check::linearizability::probe(&p)?;
                Some(p)
            }
            Some(p) => return Err(format!("lincheck not found at {}", p.display())),
            None => {
                note!(
                    "mu sim: client histories will not be checked for linearizability: lincheck \
                     was not found (scripts/lincheck.sh builds it; or pass --lincheck PATH, or \
                     --no-lincheck to say so)"
                );
                None
            }
        }
    })
}
