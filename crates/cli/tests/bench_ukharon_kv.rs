//! `mu bench ukharon-kv` (the uKharon paper's Fig. 5): a short run's JSON object has every
//! system, operation, figure and target the docs promise, its CSV and SVG files are written,
//! nothing is left behind (replica and coordinator processes, run directories), and bad input
//! is a clear error with a non-zero exit.

mod common;

use common::bench::{mu_with_pid as mu, nothing_left_behind, OutDir};

const SYSTEMS: [&str; 8] = [
    "transport",
    "unreplicated",
    "active-checked",
    "mu",
    "velos",
    "mu-lease",
    "velos-lease",
    "ukharon-kv",
];
const FAILOVER_SYSTEMS: [&str; 3] = ["ukharon-kv", "mu", "velos"];

impl OutDir {
    /// `NAME.csv`: a header and `rows` rows.
    fn csv_rows(&self, name: &str) -> usize {
        let path = self.0.join(format!("{name}.csv"));
        let csv = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        csv.lines().count() - 1
    }
}

/// No process the benchmark `pid` started runs, and none of its run directories is left: the
/// clusters' and local servers', and the in-process uKharon group's.
fn nothing_left(pid: u32) {
    nothing_left_behind(pid, "replica", &["ukharon-kv", "bench-ukharon"]);
}

fn number(v: &serde_json::Value, what: &str) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{what} missing or not a number: {v}"))
}

#[test]
fn quick_json_has_every_system_figure_and_target() {
    let out_dir = OutDir::new("fig5");
    let (out, pid) = mu(&[
        "bench",
        "ukharon-kv",
        "--quick",
        "--samples",
        "200",
        "--failovers",
        "1",
        "--json",
        "--out",
        out_dir.path(),
    ]);
    nothing_left(pid);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let latency = v["latency"].as_array().expect("latency");
    assert_eq!(latency.len(), SYSTEMS.len() * 2, "{v}");
    for system in SYSTEMS {
        for op in ["get", "put"] {
            let row = latency
                .iter()
                .find(|r| r["system"] == system && r["op"] == op)
                .unwrap_or_else(|| panic!("no {system} {op} in {v}"));
            assert_eq!(row["samples"], 200, "{row}");
            let [p50, p95, p99] = ["p50_us", "p95_us", "p99_us"].map(|q| number(&row[q], q));
            assert!(0.0 < p50 && p50 <= p95 && p95 <= p99, "{row}");
            assert!(number(&row["p50_over_unreplicated"], "ratio") > 0.0, "{row}");
        }
    }
    let failover = v["failover"].as_array().expect("failover");
    assert_eq!(failover.len(), FAILOVER_SYSTEMS.len(), "{v}");
    for (row, system) in failover.iter().zip(FAILOVER_SYSTEMS) {
        assert_eq!(row["protocol"], system, "{v}");
        assert_eq!(row["failovers"], 1, "{row}");
        assert_eq!(row["each_us"].as_array().map(Vec::len), Some(1), "{row}");
        let [min, p50, p95, max] =
            ["min_us", "p50_us", "p95_us", "max_us"].map(|q| number(&row[q], q));
        // One failover: every figure is that one.
        assert!(min > 0.0 && min == p50 && p50 == p95 && p95 == max, "{row}");
    }
    for (target, bound) in [("get_p50_over_unreplicated", 1.1), ("failover_p50_over_mu", 0.2)] {
        let t = &v["targets"][target];
        let ratio = number(&t["ratio"], target);
        assert_eq!(t["at_most"], bound, "{v}");
        assert_eq!(t["met"], ratio <= bound, "{v}");
    }
    assert!(v["active_checked_inactive_answers"].is_u64(), "{v}");
    assert_eq!(out_dir.csv_rows("ukharon-kv"), SYSTEMS.len() * 2);
    assert_eq!(out_dir.csv_rows("ukharon-kv-failover"), FAILOVER_SYSTEMS.len());
    assert_eq!(out_dir.csv_rows("ukharon-kv-targets"), 2);
    assert!(out_dir.is_svg("ukharon-kv") && out_dir.is_svg("ukharon-kv-failover"));
}

#[test]
fn bad_counts_are_clear_errors() {
    for (option, value) in [("--failovers", "0"), ("--samples", "0"), ("--payload", "0")] {
        let (out, _) = mu(&["bench", "ukharon-kv", option, value]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{option} {value}: {stderr}");
        assert!(stderr.contains(option) && stderr.contains("0"), "{option} {value}: {stderr}");
        assert!(out.stdout.is_empty(), "{option} {value}");
    }
}
