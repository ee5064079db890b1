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
    seed: Option<u64>,
    /// Sweep this many seeds (default 100).
    #[arg(long, value_parser = mu_procs::counts::count)]
    seeds: Option<u64>,
    /// The first seed of a sweep.
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// The protocol to run: mu or velos.
    #[arg(long, default_value = "mu", value_parser = parse_protocol)]
    protocol: Protocol,
    /// Replicas per cluster, 1 to 9. Default: 3 for even seeds, 5 for odd ones.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=9))]
    replicas: Option<u16>,
    /// Faults to inject: none, or a comma-separated list of all (every fault but membership),
    /// crash, restart, pause, delay, partition, perm-failure, out-of-order, membership (replicas
    /// added and removed; --replicas is then how many there may be, at least 3 of them members
    /// at first).
    #[arg(long, default_value = "all", value_parser = Faults::parse)]
    faults: Faults,
    /// Steps of the safety phase per seed (each a fault or client operations, then up to
    /// 200 µs of virtual time).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    steps: u32,
    /// Key-value clients per cluster, 1 to 64.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    clients: u64,
    /// The `lincheck` binary that checks client histories (default: $MU_LINCHECK, or
    /// target/lincheck/lincheck as scripts/lincheck.sh builds it).
    #[arg(long)]
    lincheck: Option<PathBuf>,
    /// Do not check client histories for linearizability.
    #[arg(long, conflicts_with = "lincheck")]
    no_lincheck: bool,
    /// Keep each seed's client history here, as DIR/seed-S.json.
    #[arg(long)]
    history_dir: Option<PathBuf>,
    /// Run a deliberately broken engine variant: skip-revoke or skip-prepare-adopt (builds with
    /// the `mutations` feature only).
    #[arg(long)]
    mutation: Option<String>,
    /// Worker threads for a sweep (default: the cores available).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    jobs: Option<u64>,
    /// Print a summary as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
    /// Requests a connection holds before a post on it is refused as a full queue, as an RDMA
    /// send queue (34 to 65536). Default: no limit.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=65536))]
    connection_depth: Option<u64>,
    /// With --seed: also trace every change of each replica's engine (phase, FUO, confirmed
    /// followers, prepare omitted), applied count, leader and log writers.
    #[arg(long, requires = "seed")]
    watch: bool,
}

fn parse_protocol(name: &str) -> Result<Protocol, String> {
    Protocol::parse(name)
}

/// Trace lines shown with a failure found by a sweep (a replay shows them all).
const TRACE_TAIL_LINES: usize = 40;

pub fn run(args: Args) -> Result<(), String> {
    let lincheck = if args.no_lincheck {
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
    };
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
        c.protocol = args.protocol;
        if let Some(r) = args.replicas {
            c.replicas = r;
        }
        c.faults = args.faults;
        c.steps = args.steps;
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
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let failures: Mutex<Vec<(SeedReport, RunConfig)>> = Mutex::new(Vec::new());
    // acked, answered, unknown, leader changes, refused, membership changes
    let totals = Mutex::new([0u64; 6]);
    let jobs = jobs.min(count as usize).max(1);
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
                    {
                        let mut t = totals.lock().expect("totals");
                        t[0] += report.acked as u64;
                        t[1] += report.ops_returned as u64;
                        t[2] += report.ops_unknown as u64;
                        t[3] += report.leader_changes as u64;
                        t[4] += report.ops_refused as u64;
                        t[5] += report.membership_changes as u64;
                    }
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
        {
            // Progress, once a second, on stderr (with --json too: the object goes to stdout
            // at the end, and a long sweep should not look hung meanwhile).
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
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    let mut failures = failures.into_inner().expect("failures");
    failures.sort_by_key(|(r, _)| r.seed);
    let t = totals.into_inner().expect("totals");
    let rate = count as f64 / seconds;
    if json {
        let f: Vec<_> = failures
            .iter()
            .map(|(r, c)| {
                let v = r.violation.as_ref().expect("a failure");
                json!({"seed": r.seed, "replicas": r.replicas, "checker": v.checker,
                       "message": v.message, "replay": replay_command(r, c)})
            })
            .collect();
        let doc = json!({
            "protocol": config_of(first).protocol.name(),
            "first_seed": first,
            "seeds": count,
            "faults": config_of(first).faults.describe(),
            "jobs": jobs,
            "seconds": seconds,
            "seeds_per_second": rate,
            "acked": t[0],
            "ops_answered": t[1],
            "ops_unknown": t[2],
            "ops_refused": t[4],
            "leader_changes": t[3],
            "membership_changes": t[5],
            "linearizability_checked": lincheck,
            "failures": f,
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("JSON of plain values"));
    } else {
        println!(
            "mu sim: {count} seed{} ({first}..{}) in {seconds:.1} s, {rate:.1} seeds/s on {jobs} \
             thread{}: {} proposals acknowledged, {} client operations answered, {} unknown, \
             {} refused, {} leader changes, {} membership changes; histories {}; {} failed",
            if count == 1 { "" } else { "s" },
            first + (count - 1),
            if jobs == 1 { "" } else { "s" },
            t[0],
            t[1],
            t[2],
            t[4],
            t[3],
            t[5],
            if lincheck { "checked by lincheck" } else { "NOT checked for linearizability" },
            failures.len()
        );
        for (r, c) in &failures {
            let v = r.violation.as_ref().expect("a failure");
            println!("  seed {} ({}): replay with: {}", r.seed, v.checker, replay_command(r, c));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{} of {count} seeds failed", failures.len()))
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
