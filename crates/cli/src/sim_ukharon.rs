//! `mu sim --protocol ukharon`: the membership service in the simulator, one seed replayed or
//! many swept on worker threads, with a progress line on long sweeps; a failure prints its seed,
//! what broke and the command that replays it.

use crate::sim::Args;
use mu_procs::note;
use mu_sim::ukharon::{
    parse_mutation, run as run_seed, UkFaults, UkReport, UkRunConfig, UkScenario,
};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub fn run(args: &Args) -> Result<(), String> {
    let faults = UkFaults::parse(&args.faults)?;
    let mutation = args.mutation.as_deref().map(parse_mutation).transpose()?;
    let scenario = args.scenario.unwrap_or_default();
    if scenario == UkScenario::DriftEdge && args.faults != "all" {
        return Err("--faults chooses the faults scenario's faults: --scenario drift-edge \
                    injects its own"
            .into());
    }
    let config_of = |seed: u64| {
        let mut c = match scenario {
            UkScenario::Faults => UkRunConfig { faults, ..UkRunConfig::new(seed) },
            UkScenario::DriftEdge => UkRunConfig::drift_edge(seed),
        };
        if let Some(n) = args.nodes {
            c.nodes = n;
        }
        if let Some(s) = args.steps {
            c.steps = s;
        }
        if let Some(m) = mutation {
            c.mutation = m;
        }
        c
    };
    if let Some(seed) = args.seed {
        let report = run_seed(&config_of(seed));
        print_one(&report, args.json);
        return match report.violation {
            None => Ok(()),
            Some(_) => Err(format!("seed {seed} broke a checker")),
        };
    }
    let count = args.seeds.unwrap_or(100);
    let first = args.first_seed;
    if first.checked_add(count - 1).is_none() {
        return Err(format!("--first-seed {first} with --seeds {count} runs past the last seed"));
    }
    let jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |j| j as usize,
    );
    sweep(first, count, jobs.min(count as usize).max(1), args, &config_of)
}

fn print_one(r: &UkReport, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(&report_json(r)).expect("JSON"));
        return;
    }
    println!(
        "seed {}: {} views decided, {} active somewhere, {} faults, slack {} ns, trace {:016x}: {}",
        r.seed,
        r.views,
        r.active_views,
        r.faults_injected,
        r.slack_ns.map_or("-".to_string(), |s| s.to_string()),
        r.trace_hash,
        r.violation.as_deref().unwrap_or("ok")
    );
}

fn report_json(r: &UkReport) -> serde_json::Value {
    json!({
        "seed": r.seed,
        "views": r.views,
        "active_views": r.active_views,
        "faults_injected": r.faults_injected,
        "coordinator_rejoins": r.coordinator_rejoins,
        "slack_ns": r.slack_ns,
        "trace_hash": format!("{:016x}", r.trace_hash),
        "violation": r.violation,
    })
}

fn replay_command(seed: u64, args: &Args) -> String {
    let mut cmd = match args.scenario.unwrap_or_default() {
        UkScenario::Faults => {
            format!("mu sim --protocol ukharon --seed {seed} --faults {}", args.faults)
        }
        s => format!("mu sim --protocol ukharon --seed {seed} --scenario {}", s.name()),
    };
    if let Some(n) = args.nodes {
        cmd.push_str(&format!(" --nodes {n}"));
    }
    if let Some(s) = args.steps {
        cmd.push_str(&format!(" --steps {s}"));
    }
    if let Some(m) = &args.mutation {
        cmd.push_str(&format!(" --mutation {m}"));
    }
    cmd
}

/// Seeds `first..first + count` on `jobs` threads.
fn sweep(
    first: u64,
    count: u64,
    jobs: usize,
    args: &Args,
    config_of: &(dyn Fn(u64) -> UkRunConfig + Sync),
) -> Result<(), String> {
    let started = Instant::now();
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let reports: Mutex<Vec<UkReport>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        return;
                    }
                    let report = run_seed(&config_of(first + i));
                    if let (Some(v), false) = (&report.violation, args.json) {
                        let replay = replay_command(report.seed, args);
                        note!("seed {} FAILED: {v}\n  replay: {replay}", report.seed);
                    }
                    reports.lock().expect("no worker panics holding it").push(report);
                    done.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        // A progress line every few seconds until every worker is done (a panicking one
        // included: the scope then passes its panic on).
        let mut last = Instant::now();
        while !workers.iter().all(|w| w.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
            if last.elapsed() >= Duration::from_secs(5) && !args.json {
                last = Instant::now();
                let (d, secs) = (done.load(Ordering::Relaxed), started.elapsed().as_secs_f64());
                note!("mu sim: {d} of {count} seeds ({secs:.0} s)");
            }
        }
    });
    let mut reports = reports.into_inner().expect("workers done");
    reports.sort_by_key(|r| r.seed);
    summarize(&reports, first, count, started, args)
}

fn summarize(
    reports: &[UkReport],
    first: u64,
    count: u64,
    started: Instant,
    args: &Args,
) -> Result<(), String> {
    let failed: Vec<&UkReport> = reports.iter().filter(|r| r.violation.is_some()).collect();
    let views: u64 = reports.iter().map(|r| r.views).sum();
    let faults: u64 = reports.iter().map(|r| u64::from(r.faults_injected)).sum();
    let slack = reports.iter().filter_map(|r| r.slack_ns).min();
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        let out = json!({
            "protocol": "ukharon",
            "scenario": args.scenario.unwrap_or_default().name(),
            "first_seed": first,
            "seeds": count,
            "failed": failed.iter().map(|r| report_json(r)).collect::<Vec<_>>(),
            "views": views,
            "faults_injected": faults,
            "slack_ns_min": slack,
            "seconds": seconds,
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
    } else {
        println!(
            "ukharon, {}: {count} seeds from {first}, {} failed; {views} views decided, {faults} \
             faults injected, smallest slack between incompatible views {} ns; {seconds:.1} s",
            args.scenario.unwrap_or_default().name(),
            failed.len(),
            slack.map_or("-".to_string(), |s| s.to_string()),
        );
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("{} of {count} seeds failed", failed.len()))
    }
}
