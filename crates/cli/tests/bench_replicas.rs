//! `mu bench replication` and `mu bench failover`: the JSON object has every figure the docs
//! promise, nothing is left behind (replica processes, run directory), and bad input is a clear
//! error with a non-zero exit.

mod common;

use common::bench::{mu_with_pid, nothing_left_behind, OutDir};
use std::process::{Command, Output, Stdio};

/// The runs of this file go one at a time: each is three replica processes with busy threads,
/// on a machine that may have two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `mu` with `args`, one run at a time; returns its output and its pid.
fn mu(args: &[&str]) -> (Output, u32) {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    mu_with_pid(args)
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
}

/// No replica process of the benchmark `pid` runs, and its run directory is gone.
fn nothing_left(pid: u32, tag: &str) {
    nothing_left_behind(pid, "bench-replica", &[tag]);
}

impl OutDir {
    /// `NAME.csv` has a header and one row per failover; `NAME.svg` is a whole SVG document.
    fn has_figures(&self, name: &str, failovers: usize) {
        let csv = std::fs::read_to_string(self.0.join(format!("{name}.csv"))).expect("the CSV");
        assert_eq!(csv.lines().count(), 1 + failovers, "{csv}");
        assert!(self.is_svg(name), "{name}.svg is not a whole SVG document");
    }

    /// The new leaders' traced busy polls (`<name>-polls.csv`), by failover.
    fn polls(&self, name: &str) -> Vec<Vec<PollRow>> {
        let path = self.0.join(format!("{name}-polls.csv"));
        let csv = std::fs::read_to_string(path).expect("the polls CSV");
        let mut lines = csv.lines();
        let header = "failover,poll,thread,phase,start_us,busy_us,gap_us,idle_polls,idle_us";
        assert_eq!(lines.next(), Some(header));
        let mut failovers: Vec<Vec<_>> = Vec::new();
        for line in lines {
            let f: Vec<&str> = line.split(',').collect();
            let failover: usize = f[0].parse().unwrap();
            if failovers.len() < failover {
                failovers.resize(failover, Vec::new());
            }
            let us = |s: &str| s.parse::<f64>().unwrap();
            let row = (f[2].to_string(), f[3].to_string(), us(f[4]), us(f[5]), us(f[6]));
            assert_eq!(f[1].parse::<usize>().unwrap(), failovers[failover - 1].len() + 1, "{csv}");
            failovers[failover - 1].push(row);
        }
        failovers
    }
}

/// A row of a polls CSV: (thread, phase, start µs, busy µs, gap µs).
type PollRow = (String, String, f64, f64, f64);

#[test]
fn replication_json_has_every_figure() {
    let (out, pid) = mu(&["bench", "replication", "--payload", "64", "--samples", "300", "--json"]);
    let v = json(&out);
    assert_eq!(v["protocol"], "mu");
    assert_eq!(v["mode"], "direct");
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["payload_bytes"], 64);
    assert_eq!(results[0]["samples"], 300);
    for q in ["p1", "p50", "p99"] {
        assert!(results[0]["latency_ns"][q].as_u64().unwrap() > 0, "{q} in {v}");
    }
    for q in ["p50", "p99"] {
        assert!(v["fabric_write2_ns"][q].as_u64().unwrap() > 0, "write2 {q} in {v}");
    }
    assert!(v["target_64_bytes"]["p50_over_write2_p50"].as_f64().unwrap() > 0.0);
    // The proposing thread's CPU time per call: some, and no more than the calls' wall time
    // allows (plus the loop's own work around each call).
    let cpu_ns = results[0]["leader_cpu_ns_per_proposal"].as_u64().expect("cpu per proposal");
    let mean_ns = results[0]["latency_ns"]["mean"].as_f64().unwrap();
    assert!(cpu_ns > 0 && (cpu_ns as f64) < 2.0 * mean_ns + 10_000.0, "{cpu_ns} ns in {v}");
    nothing_left(pid, "replication");
}

/// A benchmark's stderr carries only its progress: with nowhere to write it (stderr full), the
/// run goes on and its results still reach stdout (a failed progress line used to panic and
/// stop it with status 101).
#[test]
fn replication_with_stderr_full_still_gives_its_results() {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    let serial = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let child = Command::new(env!("CARGO_BIN_EXE_mu"))
        .args(["bench", "replication", "--payload", "64", "--samples", "300", "--json"])
        .stdout(Stdio::piped())
        .stderr(full)
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["results"][0]["samples"], 300);
    drop(serial);
    nothing_left(pid, "replication");
}

/// Velos Fig. 1: both engines in one run, taking turns; each engine's turns are merged, so
/// every sample taken is in its figures.
#[test]
fn replication_of_both_engines_merges_their_rounds() {
    let (out, pid) = mu(&[
        "bench",
        "replication",
        "--protocol",
        "mu,velos",
        "--payload",
        "64",
        "--samples",
        "301",
        "--rounds",
        "3",
        "--json",
    ]);
    let v = json(&out);
    assert_eq!(v["rounds"], 3);
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    for (run, protocol) in runs.iter().zip(["mu", "velos"]) {
        assert_eq!(run["protocol"], protocol);
        assert_eq!(run["results"][0]["samples"], 301, "{protocol}: every round's samples");
        // A leader change on a loaded two-core machine loses a proposal or two (debug builds,
        // three busy processes): the figure is reported, not promised to be zero.
        assert!(run["results"][0]["lost_proposals"].as_u64().is_some(), "{protocol}: {run}");
    }
    let row = &v["comparison"][0];
    assert_eq!(row["payload_bytes"], 64);
    assert!(row["velos_over_mu_p50"].as_f64().unwrap() > 0.0, "{row}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("velos, round 3 of 3"), "progress names the rounds: {stderr}");
    nothing_left(pid, "replication");
}

#[test]
fn failover_kill_json_has_every_figure() {
    let files = OutDir::new("kill");
    let (out, pid) = mu(&["bench", "failover", "--count", "2", "--json", "--out", files.path()]);
    let v = json(&out);
    files.has_figures("failover-kill", 2);
    assert_eq!(v["failovers"], 2);
    assert_eq!(v["mode"], "kill");
    assert_eq!(v["read_period_us"], 1000);
    for key in ["total_us", "detect_us", "switch_us"] {
        for q in ["p50", "p99", "max"] {
            assert!(v[key][q].as_f64().unwrap() > 0.0, "{key}.{q} in {v}");
        }
    }
    // The switch's parts: Mu's permission round and the first proposal after readiness, each
    // within the total.
    let total_max = v["total_us"]["max"].as_f64().unwrap();
    for key in ["permission_us", "ramp_us"] {
        let max = v[key]["max"].as_f64().unwrap_or_else(|| panic!("{key} in {v}"));
        assert!((0.0..=total_max).contains(&max), "{key}.max in {v}");
    }
    assert!(
        v["permission_us"]["max"].as_f64() <= v["switch_us"]["max"].as_f64(),
        "permission within the switch: {v}"
    );
    // Mu's phases as the new leader entered them: the permission round first, then prepare.
    let entered = |phase: &str| v["phase_entered_us"][phase]["p50"].as_f64();
    let (asking, preparing) = (entered("Permissions"), entered("PrepareRead"));
    assert!(asking.is_some() && preparing.is_some(), "phase_entered_us in {v}");
    assert!(asking <= preparing, "permissions asked before prepare: {v}");
    // The new leader's polls until its first commit: exactly one took up the leadership, at
    // least one asked for permission, and together they took part of the failover.
    assert_eq!(v["phase_polls"]["Follower"]["max"], 1, "one poll takes up the leadership: {v}");
    assert!(v["phase_polls"]["Permissions"]["p50"].as_u64() >= Some(1), "phase_polls in {v}");
    assert!(v["phase_busy_us"]["Permissions"]["max"].as_f64() > Some(0.0), "phase_busy in {v}");
    let busy_max = v["setup_busy_us"]["max"].as_f64().unwrap_or_else(|| panic!("{v}"));
    assert!(busy_max > 0.0 && busy_max <= total_max, "setup_busy_us within the total: {v}");
    assert!(v["setup_aborts"]["aborts"].as_u64().is_some(), "setup_aborts in {v}");
    // The busy polls traced: the first takes up the leadership, on the application's thread or
    // the helper's; the phases follow the engine's order; the polls and the gaps between them
    // lie within the failover.
    let trace = &v["setup_trace"];
    assert_eq!(trace["failovers"], 2, "setup_trace in {v}");
    let largest = trace["largest_gap_us"]["max"].as_f64().unwrap_or_else(|| panic!("{v}"));
    assert!((0.0..=total_max).contains(&largest), "largest gap within the total: {v}");
    assert!(trace["unpolled_us"]["max"].as_f64() <= Some(total_max), "{v}");
    let polls = files.polls("failover-kill");
    assert_eq!(polls.len(), 2, "both failovers traced");
    let order = ["Follower", "Permissions", "ReadFuos", "CatchUp", "UpdateFollowers"];
    let aborted = v["setup_aborts"]["aborts"] != 0;
    for failover in &polls {
        assert_eq!(failover[0].1, "Follower", "{failover:?}");
        assert!(["application", "helper"].contains(&failover[0].0.as_str()), "{failover:?}");
        if failover.len() < mu_replica::SETUP_TRACE_POLLS {
            // Not cut at the trace's length: it goes on to the first proposal.
            assert!(failover.iter().any(|p| p.1 == "PrepareRead"), "{failover:?}");
        }
        let set_up: Vec<usize> =
            failover.iter().map_while(|p| order.iter().position(|&o| o == p.1)).collect();
        // An aborted attempt starts again from the permission round.
        let in_order = set_up.windows(2).all(|w| w[0] <= w[1]);
        assert!(in_order || aborted, "set-up in order: {failover:?}");
        let end = failover.iter().map(|p| p.2 + p.3).fold(0.0, f64::max);
        let gaps: f64 = failover.iter().map(|p| p.4).sum();
        let busy: f64 = failover.iter().map(|p| p.3).sum();
        assert!(end <= total_max + 1.0 && gaps + busy <= end + 1.0, "{failover:?}");
    }
    nothing_left(pid, "failover");
}

/// A new Velos leader's steps between readiness and its first commit, in order.
#[test]
fn failover_kill_of_velos_dates_its_steps() {
    let files = OutDir::new("kill-velos");
    let args = ["bench", "failover", "--protocol", "velos", "--count", "2", "--json", "--out"];
    let (out, pid) = mu(&[&args[..], &[files.path()]].concat());
    let v = json(&out);
    assert_eq!(v["failovers"], 2);
    assert!(v.get("phase_entered_us").is_none(), "Mu's phases are Mu's: {v}");
    assert!(v.get("phase_busy_us").is_none(), "Mu's phases are Mu's: {v}");
    // The new leader's polls until its first commit: at least the one that took up the
    // leadership and the one that answered, within the failover.
    assert!(v["setup_polls"]["p50"].as_u64() >= Some(2), "setup_polls in {v}");
    let busy_max = v["setup_busy_us"]["max"].as_f64().unwrap_or_else(|| panic!("{v}"));
    assert!(busy_max > 0.0 && busy_max <= v["total_us"]["max"].as_f64().unwrap(), "{v}");
    let step = |name: &str, q: &str| {
        v["velos_step_after_ready_us"][name][q]
            .as_f64()
            .unwrap_or_else(|| panic!("velos_step_after_ready_us.{name}.{q} in {v}"))
    };
    let ramp_max = v["ramp_us"]["max"].as_f64().unwrap();
    for name in ["Prepared", "Decided", "Submitted"] {
        assert_eq!(v["velos_step_after_ready_us"][name]["failovers"], 2, "{name} in {v}");
        assert!((0.0..=ramp_max).contains(&step(name, "max")), "{name} within the ramp: {v}");
    }
    assert!(step("Prepared", "min") <= step("Decided", "min"), "prepared before decided: {v}");
    let polls = files.polls("failover-kill");
    assert_eq!(polls.len(), 2, "both failovers traced");
    assert!(polls.iter().flatten().all(|p| p.1 == "velos"), "Velos has no phases: {polls:?}");
    nothing_left(pid, "failover");
}

#[test]
fn failover_pause_json_has_every_figure() {
    let files = OutDir::new("pause");
    let args = ["bench", "failover", "--mode", "pause", "--count", "1", "--json", "--out"];
    let (out, pid) = mu(&[&args[..], &[files.path()]].concat());
    let v = json(&out);
    files.has_figures("failover-pause", 1);
    assert_eq!(v["failovers"], 1);
    assert_eq!(v["mode"], "pause");
    for key in ["total_us", "detect_us"] {
        assert!(v[key]["p50"].as_f64().unwrap() > 0.0, "{key} in {v}");
    }
    // The stopped leader either led again or was fenced.
    let failbacks = v["failbacks"].as_u64().unwrap();
    assert_eq!(failbacks + v["fenced"].as_u64().unwrap(), 1, "{v}");
    nothing_left(pid, "failover");
}

#[test]
fn bad_input_is_a_clear_error() {
    for (args, flag) in [
        (&["bench", "failover", "--count", "0"][..], "--count"),
        (&["bench", "replication", "--payload", "5000"], "--payload"),
    ] {
        let (out, _) = mu(args);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{err}");
    }
}
