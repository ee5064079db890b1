//! `mu bench targets`: the replication and failover targets (seven), measured in one run on
//! this machine, each with its verdict. Left out: the comparison with peer systems (`mu bench
//! peers`, which needs Redis and etcd installed) and the throughput target (`mu bench
//! throughput`).
//!
//! The measurements are the benchmarks' own: each runs as a child process of this binary (`mu
//! bench replication`, `mu bench failover` or `mu bench fabric`, with `--json`), and its JSON object is kept as
//! `<name>.json` in the output directory, where the figures each target compares are read from.
//! Every ratio is of two figures from the same child, as the targets ask: these machines are
//! noisy, and only figures taken side by side compare.
//!
//! Threads. With at least [`DEDICATED_CPUS_MIN`] CPUs allowed, the failover measurements use
//! dedicated (spinning) threads, and pause mode a 5 µs read period, as the figures in
//! BENCHMARKS.md were taken; with fewer CPUs, shared threads and the default read period, since
//! spinning threads on too few cores measure the scheduler. Replication uses shared threads
//! unless `--replication-threads dedicated` says otherwise: on 16 vCPUs dedicated ones made it
//! slower, not faster (BENCHMARKS.md), before and after the replication plane's hot words moved
//! onto cache lines of their own.
//!
//! Rejected: running the benchmarks in this process. Each one starts replicas, a run directory
//! and a signal handler of its own, and one that fails must not leave them behind for the next;
//! `mu bench all` runs its benchmarks as children for the same reason.

use crate::cluster::ThreadsChoice;
use crate::interrupt;
use serde_json::{json, Value};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Instant;

/// CPUs from which the failover measurements use dedicated threads: about four threads for each
/// of three replicas.
pub const DEDICATED_CPUS_MIN: usize = 12;

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object instead of the table
    #[arg(long)]
    json: bool,
    /// A short run (fewer samples and failovers): a smoke test, not figures to quote
    #[arg(long)]
    quick: bool,
    /// The directory each measurement's JSON object is kept in (created if absent)
    #[arg(long, default_value = "bench-out/targets")]
    out: PathBuf,
    /// Leave out the libfabric measurement (the ofi target)
    #[arg(long)]
    no_ofi: bool,
    /// How the replicas' threads wait in the replication measurements (the failover ones
    /// follow the CPUs allowed)
    #[arg(long, value_enum, default_value_t = ThreadsChoice::Shared)]
    replication_threads: ThreadsChoice,
}

/// Printed, and put in the JSON, where too few CPUs are allowed for a core per thread.
const FEW_CPUS_NOTE: &str = "three replica processes share the cores: write2 then includes a \
    scheduler hand-off and the failovers wait for sleeping threads, so these verdicts say \
    little about a machine with a core per thread";

/// One child benchmark.
struct Measurement {
    name: &'static str,
    args: Vec<OsString>,
}

/// One target: a figure read from a measurement's JSON object, and the most it may be.
struct Target {
    what: &'static str,
    /// Where the target is set.
    issue: &'static str,
    measurement: &'static str,
    limit: f64,
    unit: &'static str,
    figure: fn(&Value) -> Option<f64>,
}

const TARGETS: [Target; 7] = [
    Target {
        what: "Mu propose p50 at 64 B / fabric write2 p50",
        issue: "Mu",
        measurement: "replication",
        limit: 1.2,
        unit: "x",
        figure: |v| number(run_of(v, "mu")?, &["target_64_bytes", "p50_over_write2_p50"]),
    },
    Target {
        what: "Mu propose p99 at 64 B / fabric write2 p50",
        issue: "Mu",
        measurement: "replication",
        limit: 2.0,
        unit: "x",
        figure: |v| number(run_of(v, "mu")?, &["target_64_bytes", "p99_over_write2_p50"]),
    },
    Target {
        what: "Velos propose p50 at 64 B / Mu's",
        issue: "Velos",
        measurement: "replication",
        limit: 1.6,
        unit: "x",
        figure: |v| {
            let rows = v.get("comparison")?.as_array()?;
            let row = rows.iter().find(|r| number(r, &["payload_bytes"]) == Some(64.0))?;
            number(row, &["velos_over_mu_p50"])
        },
    },
    Target {
        what: "Mu failover, kill mode, total p50",
        issue: "Mu",
        measurement: "failover-kill",
        limit: 50.0,
        unit: "us",
        figure: |v| number(run_of(v, "mu")?, &["total_us", "p50"]),
    },
    Target {
        what: "Velos failover total p50 / Mu's (kill mode)",
        issue: "Velos",
        measurement: "failover-kill",
        limit: 0.2,
        unit: "x",
        figure: |v| number(v, &["comparison", "velos_over_mu_total_p50"]),
    },
    Target {
        what: "Mu failover, pause mode, total p50",
        issue: "Mu",
        measurement: "failover-pause",
        limit: 150.0,
        unit: "us",
        figure: |v| number(run_of(v, "mu")?, &["total_us", "p50"]),
    },
    Target {
        what: "Mu on ofi: propose p50 at 64 B / ofi write2 p50",
        issue: "fabrics",
        measurement: "replication-ofi",
        limit: 1.3,
        unit: "x",
        figure: |v| number(run_of(v, "mu")?, &["target_64_bytes", "p50_over_write2_p50"]),
    },
];

/// The object of `protocol`'s run: `v` itself for a benchmark of one engine, else the one in
/// its `runs`.
fn run_of<'a>(v: &'a Value, protocol: &str) -> Option<&'a Value> {
    let is = |r: &Value| r.get("protocol").and_then(Value::as_str) == Some(protocol);
    if is(v) {
        return Some(v);
    }
    v.get("runs")?.as_array()?.iter().find(|r| is(r))
}

fn number(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, key| v.get(key))?.as_f64()
}

fn measurements(args: &Args, dedicated: bool) -> Vec<Measurement> {
    let (samples, failovers, ofi_samples) =
        if args.quick { (2_000, 10, 300) } else { (20_000, 100, 5_000) };
    let threads = if dedicated { "dedicated" } else { "shared" };
    let failover = |mode: &str, protocol: &str| {
        let mut a = vec!["failover", "--mode", mode, "--protocol", protocol, "--threads", threads];
        if dedicated && mode == "pause" {
            a.extend(["--read-period-us", "5"]);
        }
        let mut a: Vec<OsString> = a.into_iter().map(OsString::from).collect();
        a.extend(["--count".into(), failovers.to_string().into()]);
        a.extend(["--out".into(), args.out.clone().into_os_string()]);
        a
    };
    let replication = |extra: &[&str], samples: u64| {
        let threads = args.replication_threads.name();
        let mut a: Vec<OsString> = ["replication", "--payload", "64", "--threads", threads]
            .into_iter()
            .chain(extra.iter().copied())
            .map(OsString::from)
            .collect();
        a.extend(["--samples".into(), samples.to_string().into()]);
        a
    };
    let mut all = vec![
        Measurement {
            name: "replication",
            args: replication(&["--protocol", "mu,velos"], samples),
        },
        Measurement { name: "failover-kill", args: failover("kill", "mu,velos") },
        Measurement { name: "failover-pause", args: failover("pause", "mu") },
    ];
    // Not a target: the floor under the kill-mode one (no killed leader is detected before the
    // fabric reports it dead), printed beside it.
    let (pair_samples, crash_samples) = if args.quick { (2_000, 20) } else { (10_000, 100) };
    all.push(Measurement {
        name: "fabric",
        args: ["fabric", "--perm-samples", "100"]
            .into_iter()
            .map(OsString::from)
            .chain([
                "--samples".into(),
                pair_samples.to_string().into(),
                "--crash-samples".into(),
                crash_samples.to_string().into(),
            ])
            .collect(),
    });
    if !args.no_ofi {
        all.push(Measurement {
            name: "replication-ofi",
            args: replication(&["--fabric", "ofi"], ofi_samples),
        });
    }
    all
}

pub fn run(args: Args) -> Result<(), String> {
    interrupt::catch();
    let out = mu_figures::output_dir(&args.out).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| format!("finding the mu binary: {e}"))?;
    let cpus = mu_cpu::allowed_cpus().len();
    let dedicated = cpus >= DEDICATED_CPUS_MIN;
    note!(
        "mu bench targets: {cpus} CPUs allowed: failover with {} threads{}; replication with \
         {} threads",
        if dedicated { "dedicated" } else { "shared" },
        if dedicated { "" } else { " (dedicated threads need about four cores per replica)" },
        args.replication_threads.name()
    );
    let started = Instant::now();
    let plan = measurements(&args, dedicated);
    // Each measurement's object, or why there is none.
    let results = run_measurements(&plan, &exe, &out)?;

    let rows = verdicts(&results);
    let floor = kill_mode_floor(&results);
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        let measurements: serde_json::Map<String, Value> = results
            .iter()
            .filter_map(|(name, r)| Some(((*name).to_string(), r.as_ref().ok()?.clone())))
            .collect();
        println!(
            "{}",
            json!({
                "cpus_allowed": cpus,
                "failover_threads": if dedicated { "dedicated" } else { "shared" },
                "replication_threads": args.replication_threads.name(),
                "note": (!dedicated).then_some(FEW_CPUS_NOTE),
                "quick": args.quick,
                "seconds": seconds,
                "targets": rows,
                "kill_mode_floor": floor,
                "measurements": measurements,
            })
        );
    } else {
        print_table(&rows);
        if let (Some(notice), Some(detect)) =
            (floor["crash_notice_p50_us"].as_f64(), floor["mu_detect_p50_us"].as_f64())
        {
            println!(
                "Under the kill-mode target: SIGKILL to the fabric's report of the peer's death \
                 (mu bench fabric's crash_notice, the victim's liveness thread spinning where it \
                 has a CPU) took {notice:.1} us at the median; Mu's kill-mode detection, \
                 {detect:.1} us."
            );
        }
        if !dedicated {
            println!("With fewer than {DEDICATED_CPUS_MIN} CPUs, {FEW_CPUS_NOTE}.");
        }
        println!(
            "mu bench targets: {} measurements in {seconds:.0} s; their JSON objects in {}",
            plan.len(),
            out.display()
        );
    }
    // The fabric's figures are not a target: without them the targets still stand.
    let failed: Vec<&str> = results
        .iter()
        .filter(|(name, r)| r.is_err() && *name != "fabric")
        .map(|(name, _)| *name)
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("not measured: {}", failed.join(", ")))
    }
}

/// Each measurement's object, or why there is none.
type Results = Vec<(&'static str, Result<Value, String>)>;

/// Runs each measurement of `plan` as a child `mu bench` and keeps its JSON object (also
/// written to `out`).
fn run_measurements(
    plan: &[Measurement],
    exe: &std::path::Path,
    out: &std::path::Path,
) -> Result<Results, String> {
    let mut results: Vec<(&'static str, Result<Value, String>)> = Vec::new();
    for (i, m) in plan.iter().enumerate() {
        interrupt::check()?;
        note!(
            "\n== mu bench targets: {}/{}: {} (mu bench {})",
            i + 1,
            plan.len(),
            m.name,
            m.args.join(" ".as_ref()).to_string_lossy()
        );
        let result = crate::suite::child_json(exe, &m.args, m.name).and_then(|value| {
            let path = out.join(format!("{}.json", m.name));
            std::fs::write(&path, format!("{value}\n"))
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            Ok(value)
        });
        if let Err(e) = &result {
            note!("mu bench targets: {}: {e}", m.name);
        }
        results.push((m.name, result));
    }
    Ok(results)
}

/// Each target's figure, limit and verdict, from the measurements' objects.
fn verdicts(results: &Results) -> Vec<Value> {
    TARGETS
        .iter()
        .filter_map(|t| {
            let (_, result) = results.iter().find(|(name, _)| *name == t.measurement)?;
            let (measured, why) = match result {
                Ok(v) => match (t.figure)(v) {
                    Some(x) => (Some(x), None),
                    None => (None, Some("its JSON object lacks the figure".to_string())),
                },
                Err(e) => (None, Some(e.clone())),
            };
            Some(json!({
                "target": t.what,
                "issue": t.issue,
                "measurement": t.measurement,
                "measured": measured,
                "limit": t.limit,
                "unit": t.unit,
                "met": measured.map(|x| x <= t.limit),
                "not_measured": why,
            }))
        })
        .collect()
}

/// The kill-mode failover's floor beside Mu's detection, from the `fabric` and `failover-kill`
/// measurements (each figure `null` when its measurement failed).
fn kill_mode_floor(results: &[(&'static str, Result<Value, String>)]) -> Value {
    let of = |name: &str| results.iter().find(|(n, _)| *n == name)?.1.as_ref().ok();
    let notice_ns = of("fabric").and_then(|v| number(v, &["crash_notice_ns", "p50"]));
    let detect_us =
        of("failover-kill").and_then(|v| number(run_of(v, "mu")?, &["detect_us", "p50"]));
    json!({
        "crash_notice_p50_us": notice_ns.map(|ns| (ns / 100.0).round() / 10.0),
        "mu_detect_p50_us": detect_us,
    })
}

fn print_table(rows: &[Value]) {
    let mut table = mu_figures::Table::new(
        "Targets, each measured on this machine in this run",
        &["target", "issue", "measured", "limit", "verdict"],
    );
    for r in rows {
        let unit = r["unit"].as_str().unwrap_or("");
        let text = |x: f64| match unit {
            // Two significant digits for ratios far under 1 (write2 with a scheduler hand-off
            // in it), two decimals otherwise.
            "x" => {
                let decimals = 1i32.saturating_sub(x.abs().log10().floor() as i32).clamp(2, 6);
                let decimals = decimals as usize;
                format!("{x:.decimals$} x")
            }
            _ => format!("{x:.1} {unit}"),
        };
        let (measured, verdict) = match r["measured"].as_f64() {
            Some(x) => (text(x), if r["met"] == json!(true) { "met" } else { "not met" }.into()),
            None => {
                ("-".into(), format!("not measured: {}", r["not_measured"].as_str().unwrap_or("")))
            }
        };
        table.row(vec![
            r["target"].as_str().unwrap_or("").into(),
            r["issue"].as_str().unwrap_or("").into(),
            measured,
            format!("<= {}", text(r["limit"].as_f64().unwrap_or(0.0))),
            verdict,
        ]);
    }
    println!("{}", table.render());
}
