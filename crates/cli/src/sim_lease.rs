//! `mu sim --protocol mu|velos --reads lease`: Mu or Velos replicas beside a uKharon group,
//! appointed by its views, answering reads from the leader's store under the lease
//! (`docs/protocols/lease-reads.md`), with uKharon's faults on whole member processes and
//! clients whose histories `lincheck` checks; one seed replayed or many swept (the sweep of
//! `mu sim --protocol ukharon-kv`). A failure prints its seed, what broke and the command that
//! replays it.

use crate::sim::Args;
use crate::sim_seeds::{
    failed_and_set_aside, failure_note, replay_flags, replay_verdict, sweep, SeedFlags, Seeds,
    Verdict,
};
use mu_replica::Protocol;
use mu_sim::lease_reads::{
    parse_mutation, protocol_name, run as run_seed, LeaseReport, LeaseRunConfig,
};
use mu_sim::ukharon::UkFaults;
use serde_json::json;

pub fn run(args: &Args) -> Result<(), String> {
    let protocol = match args.protocol.as_str() {
        "mu" => Protocol::Mu,
        "velos" => Protocol::Velos,
        other => {
            return Err(format!(
                "--reads lease is for --protocol mu or velos, not {other} (its reads are its own)"
            ))
        }
    };
    let faults = UkFaults::parse(&args.faults)
        .map_err(|e| format!("--reads lease injects uKharon's faults: {e}"))?;
    let mutation = args.mutation.as_deref().map(parse_mutation).transpose()?;
    if args.scenario.is_some() {
        return Err("--scenario is uKharon's: --reads lease injects the --faults".into());
    }
    if args.replicas.is_some() {
        return Err("--reads lease runs a replica beside each uKharon member: give --nodes".into());
    }
    let flags = SeedFlags::of(args)?;
    let config_of = |seed: u64| {
        let c = LeaseRunConfig::new(seed, protocol);
        LeaseRunConfig {
            setup: flags.apply(c.setup, faults),
            mutation: mutation.unwrap_or(c.mutation),
            check_answers: !args.no_answer_check,
            ..c
        }
    };
    if let Some(seed) = args.seed {
        let report = run_seed(&config_of(seed));
        print_one(&report, args.json);
        return replay_verdict(&report);
    }
    let seeds = Seeds::of(args)?;
    let failure = |r: &LeaseReport| failure_note(r, |seed| replay_command(seed, args));
    let reports = sweep(seeds, args.json, &|seed| run_seed(&config_of(seed)), &failure);
    summarize(&reports, protocol, seeds, flags.lincheck.is_some(), args)
}

impl Verdict for LeaseReport {
    fn seed(&self) -> u64 {
        self.seed
    }

    fn violation_text(&self) -> Option<String> {
        let (checker, message) = self.violation.as_ref()?;
        Some(format!("{checker}: {message}"))
    }

    fn set_aside(&self) -> Option<&'static str> {
        self.stands_aside().then_some("stopped at an appointed replica that stands aside")
    }
}

fn print_one(r: &LeaseReport, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(&report_json(r)).expect("JSON"));
        return;
    }
    println!(
        "seed {}: {} views, {} faults, {} answers ({} local reads, {} stalled between their \
         checks; {} operations returned, {} unknown), {} failovers, {} primaries handed on, \
         trace {:016x}: {}",
        r.seed,
        r.views,
        r.faults_injected,
        r.answers,
        r.local_answers,
        r.stalls,
        r.ops_returned,
        r.ops_unknown,
        r.failovers,
        r.handoffs,
        r.trace_hash,
        r.violation_text().as_deref().unwrap_or("ok")
    );
}

fn report_json(r: &LeaseReport) -> serde_json::Value {
    json!({
        "seed": r.seed,
        "views": r.views,
        "faults_injected": r.faults_injected,
        "answers": r.answers,
        "local_answers": r.local_answers,
        "stalls": r.stalls,
        "handoffs": r.handoffs,
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
    let mut cmd = format!(
        "mu sim --protocol {} --reads lease --seed {seed} --faults {}",
        args.protocol, args.faults
    );
    cmd.push_str(&replay_flags(args));
    if args.clients != 4 {
        cmd.push_str(&format!(" --clients {}", args.clients));
    }
    if args.no_answer_check {
        cmd.push_str(" --no-answer-check");
    }
    cmd
}

fn summarize(
    reports: &[LeaseReport],
    protocol: Protocol,
    seeds: Seeds,
    checked: bool,
    args: &Args,
) -> Result<(), String> {
    let Seeds { first, count, .. } = seeds;
    let (failed, aside) = failed_and_set_aside(reports);
    let sum = |f: fn(&LeaseReport) -> u64| reports.iter().map(f).sum::<u64>();
    let views = sum(|r| r.views);
    let faults = sum(|r| u64::from(r.faults_injected));
    let answers = sum(|r| r.answers);
    let local = sum(|r| r.local_answers);
    let stalls = sum(|r| r.stalls);
    let failovers = sum(|r| r.failovers as u64);
    let handoffs = sum(|r| r.handoffs);
    let name = protocol_name(protocol);
    if args.json {
        let out = json!({
            "protocol": name,
            "reads": "lease",
            "faults": args.faults,
            "mutation": args.mutation,
            "first_seed": first,
            "seeds": count,
            "linearizability_checked": checked,
            "failed": failed.iter().map(|r| report_json(r)).collect::<Vec<_>>(),
            "stands_aside_seeds": aside,
            "views": views,
            "faults_injected": faults,
            "answers": answers,
            "local_answers": local,
            "stalls": stalls,
            "ops_returned": sum(|r| r.ops_returned as u64),
            "failovers": failovers,
            "handoffs": handoffs,
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
    } else {
        println!(
            "{name} --reads lease, faults {}: {count} seeds from {first}, {} failed; {views} \
             views, {faults} faults injected, {answers} answers ({local} local reads, {stalls} \
             stalled between their checks), {failovers} failovers, {handoffs} primaries handed \
             on; histories {}",
            args.faults,
            failed.len(),
            if checked { "checked by lincheck" } else { "not checked" },
        );
        if !aside.is_empty() {
            println!(
                "{} seeds stopped at a view appointing a replica that stands aside (a known \
                 liveness gap of appointed leaders, docs/protocols/lease-reads.md): {aside:?}",
                aside.len()
            );
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("{} of {count} seeds failed", failed.len()))
    }
}
