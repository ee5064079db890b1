//! `mu bench all`: every benchmark of the suite, one after another, into one output directory:
//! payload (Fig. 3), peers (Fig. 4), e2e (Fig. 5), failover in kill and pause mode (Fig. 6) and
//! throughput (Fig. 7). Each runs as a child process of this binary, so that one benchmark's
//! replicas, run directory and signal handling end before the next starts; with `--json` their
//! objects are gathered into one, keyed by benchmark.

use crate::interrupt;
use crate::suite::SuiteArgs;
use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    suite: SuiteArgs,
}

/// The benchmarks, in the order they run, each with its own arguments.
const BENCHES: [(&str, &[&str]); 6] = [
    ("payload", &["payload"]),
    ("peers", &["peers"]),
    ("e2e", &["e2e"]),
    ("failover-kill", &["failover", "--mode", "kill"]),
    ("failover-pause", &["failover", "--mode", "pause"]),
    ("throughput", &["throughput"]),
];

pub fn run(args: Args) -> Result<(), String> {
    interrupt::catch();
    // Fails now, not after the first benchmark, if the directory cannot be written.
    mu_figures::output_dir(&args.suite.out).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| format!("finding the mu binary: {e}"))?;
    let started = Instant::now();
    let mut gathered = serde_json::Map::new();
    for (i, (name, bench_args)) in BENCHES.iter().enumerate() {
        interrupt::check()?;
        note!("\n== mu bench all: {}/{}: {name}", i + 1, BENCHES.len());
        let mut bench: Vec<OsString> = bench_args.iter().map(OsString::from).collect();
        bench.extend(["--out".into(), args.suite.out.clone().into_os_string()]);
        if args.suite.quick {
            bench.push("--quick".into());
        }
        if args.suite.json {
            gathered.insert((*name).into(), crate::suite::child_json(&exe, &bench, name)?);
            continue;
        }
        // Progress, messages and the table go straight to this process's stderr and stdout.
        let status = Command::new(&exe)
            .arg("bench")
            .args(&bench)
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("starting mu bench {name}: {e}"))?;
        if !status.success() {
            return Err(format!("mu bench {name} failed ({status})"));
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    if args.suite.json {
        gathered.insert("seconds".into(), serde_json::json!(seconds));
        println!("{}", serde_json::Value::Object(gathered));
    } else {
        println!(
            "mu bench all: {} benchmarks in {seconds:.0} s; tables, CSV and SVG in {}",
            BENCHES.len(),
            args.suite.out.display()
        );
    }
    Ok(())
}
