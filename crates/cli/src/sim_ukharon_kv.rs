//! `mu sim --protocol ukharon-kv`: uKharon-KV in the simulator (the uKharon cluster with a
//! primary-backup data plane beside each member, uKharon's faults, clients whose histories
//! `lincheck` checks), one seed replayed or many swept on worker threads, with a progress line
//! on long sweeps; a failure prints its seed, what broke and the command that replays it.

use crate::sim::{lincheck_of, Args};
use mu_procs::note;
use mu_sim::ukharon::UkFaults;
use mu_sim::ukharon_kv::{parse_mutation, run as run_seed, KvReport, KvRunConfig};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub fn run(args: &Args) -> Result<(), String> {
    let faults = UkFaults::parse(&args.faults)?;
    let mutation = args.mutation.as_deref().map(parse_mutation).transpose()?;
    if args.scenario.is_some() {
        return Err("--scenario is uKharon's: ukharon-kv injects the --faults".into());
    }
    let lincheck = lincheck_of(args)?;
    if let Some(dir) = &args.history_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create the history directory {}: {e}", dir.display()))?;
    }
    let config_of = |seed: u64| {
        let mut c = KvRunConfig { faults, ..KvRunConfig::new(seed) };
        if let Some(n) = args.nodes {
            c.nodes = n;
        }
        if let Some(s) = args.steps {
            c.steps = s;
        }
        if let Some(m) = mutation {
            c.mutation = m;
        }
        c.clients = args.clients as usize;
        c.lincheck = lincheck.clone();
        c.history_dir = args.history_dir.clone();
        c
    };
    if let Some(seed) = args.seed {
        let report = run_seed(&config_of(seed));
        print_one(&report, args.json);
        return match report.violation {
            None => Ok(()),
            Some(_) if report.incomplete_primary() => {
                Err(format!("seed {seed} stopped at a primary without a whole state"))
            }
            Some(_) => Err(format!("seed {seed} broke a checker")),
        };
    }
    let count = args.seeds.unwrap_or(100);
    let first = args.first_seed;
    if first.checked_add(count - 1).is_none() {
        return Err(format!("--first-seed {first} with --seeds {count} runs past the last seed"));
    }
    let failure = |r: &KvReport| {
        let v = violation_text(r).filter(|_| !r.incomplete_primary())?;
        Some(format!("seed {} FAILED: {v}\n  replay: {}", r.seed, replay_command(r.seed, args)))
    };
    let reports = sweep(first, count, args, &|seed| run_seed(&config_of(seed)), &failure);
    summarize(&reports, first, count, lincheck.is_some(), args)
}

fn print_one(r: &KvReport, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(&report_json(r)).expect("JSON"));
        return;
    }
    println!(
        "seed {}: {} views, {} faults, {} answers ({} operations returned, {} unknown), {} \
         failovers, trace {:016x}: {}",
        r.seed,
        r.views,
        r.faults_injected,
        r.answers,
        r.ops_returned,
        r.ops_unknown,
        r.failovers,
        r.trace_hash,
        violation_text(r).as_deref().unwrap_or("ok")
    );
}

fn violation_text(r: &KvReport) -> Option<String> {
    r.violation.as_ref().map(|(checker, message)| format!("{checker}: {message}"))
}

fn report_json(r: &KvReport) -> serde_json::Value {
    json!({
        "seed": r.seed,
        "views": r.views,
        "faults_injected": r.faults_injected,
        "answers": r.answers,
        "ops_returned": r.ops_returned,
        "ops_unknown": r.ops_unknown,
        "failovers": r.failovers,
        "virtual_ns": r.virtual_ns,
        "trace_hash": format!("{:016x}", r.trace_hash),
        "violation": r.violation.as_ref().map(|(checker, message)| json!({
            "checker": checker,
            "message": message,
        })),
    })
}

fn replay_command(seed: u64, args: &Args) -> String {
    let mut cmd = format!("mu sim --protocol ukharon-kv --seed {seed} --faults {}", args.faults);
    if let Some(n) = args.nodes {
        cmd.push_str(&format!(" --nodes {n}"));
    }
    if let Some(s) = args.steps {
        cmd.push_str(&format!(" --steps {s}"));
    }
    if args.clients != 4 {
        cmd.push_str(&format!(" --clients {}", args.clients));
    }
    if let Some(m) = &args.mutation {
        cmd.push_str(&format!(" --mutation {m}"));
    }
    cmd
}

/// Seeds `first..first + count` on `--jobs` threads (default: the cores available), run by
/// `run_one`; their reports in seed order. `failure` is what a failed seed prints at once.
pub(crate) fn sweep<R: Send>(
    first: u64,
    count: u64,
    args: &Args,
    run_one: &(dyn Fn(u64) -> R + Sync),
    failure: &(dyn Fn(&R) -> Option<String> + Sync),
) -> Vec<R> {
    let jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |j| j as usize,
    );
    let jobs = jobs.min(count as usize).max(1);
    let started = Instant::now();
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let reports: Mutex<Vec<(u64, R)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        return;
                    }
                    let report = run_one(first + i);
                    if let (Some(line), false) = (failure(&report), args.json) {
                        note!("{line}");
                    }
                    reports.lock().expect("no worker panics holding it").push((i, report));
                    done.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        // A progress line every few seconds until every worker is done.
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
    reports.sort_by_key(|(i, _)| *i);
    reports.into_iter().map(|(_, r)| r).collect()
}

fn summarize(
    reports: &[KvReport],
    first: u64,
    count: u64,
    checked: bool,
    args: &Args,
) -> Result<(), String> {
    let failed: Vec<&KvReport> =
        reports.iter().filter(|r| r.violation.is_some() && !r.incomplete_primary()).collect();
    let incomplete: Vec<u64> =
        reports.iter().filter(|r| r.incomplete_primary()).map(|r| r.seed).collect();
    let sum = |f: fn(&KvReport) -> u64| reports.iter().map(f).sum::<u64>();
    let views = sum(|r| r.views);
    let faults = sum(|r| u64::from(r.faults_injected));
    let answers = sum(|r| r.answers);
    let returned = sum(|r| r.ops_returned as u64);
    let failovers = sum(|r| r.failovers as u64);
    if args.json {
        let out = json!({
            "protocol": "ukharon-kv",
            "faults": args.faults,
            "first_seed": first,
            "seeds": count,
            "linearizability_checked": checked,
            "failed": failed.iter().map(|r| report_json(r)).collect::<Vec<_>>(),
            "incomplete_primary_seeds": incomplete,
            "views": views,
            "faults_injected": faults,
            "answers": answers,
            "ops_returned": returned,
            "failovers": failovers,
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
    } else {
        println!(
            "ukharon-kv, faults {}: {count} seeds from {first}, {} failed; {views} views, \
             {faults} faults injected, {answers} answers, {failovers} failovers; histories {}",
            args.faults,
            failed.len(),
            if checked { "checked by lincheck" } else { "not checked" },
        );
        if !incomplete.is_empty() {
            println!(
                "{} seeds stopped at a view naming a primary without a whole state (a known gap \
                 of the coordinators' choice, docs/protocols/ukharon-kv.md): {incomplete:?}",
                incomplete.len()
            );
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("{} of {count} seeds failed", failed.len()))
    }
}
