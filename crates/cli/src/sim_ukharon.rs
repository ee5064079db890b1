//! `mu sim --protocol ukharon`: the membership service in the simulator, one seed replayed or
//! many swept ([`crate::sim_seeds`]); a failure prints its seed, what broke and the command
//! that replays it.

use crate::sim::Args;
use crate::sim_seeds::{failure_note, replay_flags, replay_verdict, sweep, Seeds, Verdict};
use mu_sim::ukharon::{
    parse_mutation, run as run_seed, UkFaults, UkReport, UkRunConfig, UkScenario,
};
use serde_json::json;
use std::time::Instant;

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
        return replay_verdict(&report);
    }
    let seeds = Seeds::of(args)?;
    let started = Instant::now();
    let failure = |r: &UkReport| failure_note(r, |seed| replay_command(seed, args));
    let reports = sweep(seeds, args.json, &|seed| run_seed(&config_of(seed)), &failure);
    summarize(&reports, seeds, started, args)
}

impl Verdict for UkReport {
    fn seed(&self) -> u64 {
        self.seed
    }

    fn violation_text(&self) -> Option<String> {
        self.violation.clone()
    }
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
    let what = match args.scenario.unwrap_or_default() {
        UkScenario::Faults => format!("--faults {}", args.faults),
        s => format!("--scenario {}", s.name()),
    };
    format!("mu sim --protocol ukharon --seed {seed} {what}{}", replay_flags(args))
}

fn summarize(
    reports: &[UkReport],
    seeds: Seeds,
    started: Instant,
    args: &Args,
) -> Result<(), String> {
    let Seeds { first, count, .. } = seeds;
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
