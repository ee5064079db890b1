//! `mu bench ukharon --quick --json`: the JSON object has every figure the docs promise, with
//! positive numbers (nothing about speed), and the CSV and SVG files are written.

use std::process::Command;

fn mu() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mu"))
}

fn positive(v: &serde_json::Value, path: &str) -> u64 {
    let x = v.pointer(path).and_then(serde_json::Value::as_u64);
    let x = x.unwrap_or_else(|| panic!("{path} missing or not a count in {v}"));
    assert!(x > 0, "{path} = 0 in {v}");
    x
}

#[test]
fn quick_json_has_every_figure() {
    let out_dir = std::env::temp_dir().join(format!("mu-bench-ukharon-{}", std::process::id()));
    let out = mu()
        .args(["bench", "ukharon", "--quick", "--json", "--calls", "20000", "--runs", "1"])
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap();
    let files: Vec<_> = ["active.csv", "renewal.csv", "renewal.svg", "failover.csv", "bytes.csv"]
        .iter()
        .map(|f| out_dir.join(format!("ukharon-{f}")))
        .collect();
    let written = files.iter().all(|f| f.is_file());
    let _ = std::fs::remove_dir_all(&out_dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(written, "not every file was written: {files:?}");
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    for key in ["active_ns", "clock_read_ns"] {
        for q in ["p50", "p99", "p99999", "samples"] {
            positive(&v, &format!("/{key}/{q}"));
        }
    }
    let points = v["renewal"].as_array().expect("renewal points");
    assert!(!points.is_empty(), "no renewal points in {v}");
    for p in points {
        positive(p, "/delta_us");
        let share = &p["share_true"];
        let in_range = share.as_f64().is_some_and(|s| (0.0..=1.0).contains(&s));
        assert!(in_range || p["problem"].is_string(), "bad point {p}");
    }
    let failovers = v["failover"].as_array().expect("failovers");
    let names: Vec<&str> = failovers.iter().filter_map(|f| f["failure"].as_str()).collect();
    assert_eq!(names[..4], ["member", "member+leader", "member+cache", "member+leader+cache"]);
    assert_eq!(names.len(), 6, "{names:?}");
    for f in failovers {
        let runs = f["runs"].as_u64().unwrap() + f["failed_runs"].as_u64().unwrap();
        assert_eq!(runs, 1, "{f}");
        if f["runs"].as_u64() > Some(0) {
            positive(f, "/p50_ns");
        }
    }
    let bytes = v["renewal_bytes"].as_array().expect("renewal_bytes");
    assert_eq!(bytes.len(), 2, "{v}");
    for b in bytes {
        for key in ["/work_requests", "/payload_bytes", "/wire_bytes"] {
            positive(b, key);
        }
    }
}

#[test]
fn zero_calls_is_a_clear_error() {
    let out = mu().args(["bench", "ukharon", "--calls", "0"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--calls"), "expected --calls in: {err}");
}
