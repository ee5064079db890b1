//! `mu sim --protocol ukharon-kv`: uKharon-KV in the simulator (the uKharon cluster with a
//! primary-backup data plane beside each member, uKharon's faults, clients whose histories
//! `lincheck` checks), one seed replayed or many swept ([`crate::sim_seeds`]); a failure prints
//! its seed, what broke and the command that replays it. Runs that lost the group's state are
//! counted apart.

use crate::sim::Args;
use crate::sim_seeds::{
    failed_and_set_aside, failure_note, replay_flags, replay_verdict, sweep, SeedFlags, Seeds,
    Verdict,
};
use mu_sim::ukharon::UkFaults;
use mu_sim::ukharon_kv::{parse_mutation, run as run_seed, KvReport, KvRunConfig};
use serde_json::json;

pub fn run(args: &Args) -> Result<(), String> {
    let faults = UkFaults::parse(&args.faults)?;
    let mutation = args.mutation.as_deref().map(parse_mutation).transpose()?;
    if args.scenario.is_some() {
        return Err("--scenario is uKharon's: ukharon-kv injects the --faults".into());
    }
    let flags = SeedFlags::of(args)?;
    let config_of = |seed: u64| {
        let c = KvRunConfig::new(seed);
        let mutation = mutation.unwrap_or(c.mutation);
        KvRunConfig { setup: flags.apply(c.setup, faults), mutation }
    };
    if let Some(seed) = args.seed {
        let report = run_seed(&config_of(seed));
        print_one(&report, args.json);
        return replay_verdict(&report);
    }
    let seeds = Seeds::of(args)?;
    let failure = |r: &KvReport| failure_note(r, |seed| replay_command(seed, args));
    let reports = sweep(seeds, args.json, &|seed| run_seed(&config_of(seed)), &failure);
    summarize(&reports, seeds, flags.lincheck.is_some(), args)
}

impl Verdict for KvReport {
    fn seed(&self) -> u64 {
        self.seed
    }

    fn violation_text(&self) -> Option<String> {
        let (checker, message) = self.violation.as_ref()?;
        Some(format!("{checker}: {message}"))
    }

    fn set_aside(&self) -> Option<&'static str> {
        self.state_lost().then_some("stopped: the group lost its state")
    }
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
        r.violation_text().as_deref().unwrap_or("ok")
    );
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
    cmd.push_str(&replay_flags(args));
    if args.clients != 4 {
        cmd.push_str(&format!(" --clients {}", args.clients));
    }
    cmd
}

fn summarize(reports: &[KvReport], seeds: Seeds, checked: bool, args: &Args) -> Result<(), String> {
    let Seeds { first, count, .. } = seeds;
    let (failed, lost) = failed_and_set_aside(reports);
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
            "state_lost_seeds": lost,
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
        if !lost.is_empty() {
            println!(
                "{} seeds stopped when no member held the group's state any more (faults took \
                 every member that held it; docs/protocols/ukharon-kv.md): {lost:?}",
                lost.len()
            );
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("{} of {count} seeds failed", failed.len()))
    }
}
