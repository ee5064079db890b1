//! `mu bench e2e`'s Redis and Memcached rows (`--apps redis,memcached`): each application
//! measured direct, through a plain byte relay, through a one-replica cluster's front and
//! through the leader's front of a three-replica cluster, every row with positive, ordered
//! quantiles; the ratios and the load tools' figures in the JSON object; the CSV and SVG
//! written; nothing left behind; and a missing server named with the script that installs it.

mod common;

use common::bench::{mu_with_pid, nothing_left_behind, OutDir};
use std::process::Command;

const APPS: [&str; 2] = ["redis", "memcached"];
const WAYS: [&str; 4] = ["direct", "relayed", "front-unreplicated", "replicated"];
const OPS: [&str; 2] = ["set", "get"];

#[test]
fn redis_and_memcached_rows_have_ordered_quantiles_for_every_way() {
    let out_dir = OutDir::new("e2e-apps");
    let (out, pid) = mu_with_pid(&[
        "bench",
        "e2e",
        "--quick",
        "--apps",
        "redis,memcached",
        "--samples",
        "300",
        "--json",
        "--out",
        out_dir.path(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), APPS.len() * WAYS.len() * OPS.len(), "{v}");
    for app in APPS {
        for way in WAYS {
            for op in OPS {
                let row = results
                    .iter()
                    .find(|r| r["app"] == app && r["system"] == way && r["op"] == op)
                    .unwrap_or_else(|| panic!("no row {app} {way} {op} in {v}"));
                assert_eq!(row["transport"], "unix", "{row}");
                assert_eq!(row["samples"], 300, "{row}");
                let q = |name: &str| row[name].as_f64().unwrap_or(f64::NAN);
                let (p1, p50, p99) = (q("p1_us"), q("p50_us"), q("p99_us"));
                assert!(p1 > 0.0 && p1 <= p50 && p50 <= p99, "{app} {way} {op}: {row}");
                assert!(q("ops_per_s") > 0.0, "{row}");
            }
        }
    }
    // Per app and operation, replicated over front-unreplicated (with its bound), and with no
    // bound the breakdown: relayed over direct, front-unreplicated over relayed and over direct.
    let ratios = v["ratios"].as_array().expect("ratios");
    assert_eq!(ratios.len(), APPS.len() * OPS.len() * 4, "{v}");
    for app in APPS {
        for op in OPS {
            for what in ["relay-hop", "front-work", "front-cost", "replication-added"] {
                let name = format!("{app}-{op}-{what}");
                assert!(ratios.iter().any(|r| r["name"] == name), "no ratio {name} in {v}");
            }
        }
    }
    for r in ratios {
        assert!(r["ratio"].as_f64().is_some_and(|x| x > 0.0), "{r}");
        assert_eq!(r["met"].is_boolean(), r["bound"].is_string(), "{r}");
    }
    let bounded = ratios.iter().filter(|r| r["bound"].is_string()).count();
    assert_eq!(bounded, APPS.len() * OPS.len(), "{v}");
    assert_eq!(v["targets"].as_array().map(Vec::len), Some(bounded), "{v}");
    // The load tools ran against the replicated fronts and gave their own figures.
    let tools = v["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), APPS.len(), "{v}");
    for t in tools {
        assert_eq!(t["ok"], true, "{t}");
        assert_eq!(t["figures"].as_array().map(Vec::len), Some(OPS.len()), "{t}");
    }
    let csv = std::fs::read_to_string(out_dir.0.join("e2e.csv")).expect("the CSV");
    assert_eq!(csv.lines().count(), 1 + results.len(), "{csv}");
    assert!(out_dir.is_svg("e2e"), "e2e.svg is not a whole SVG document");
    // The relayed way runs in the direct way's run directory (`e2e-<app>`).
    let mut tags = Vec::new();
    for app in APPS {
        tags.push(format!("e2e-{app}"));
        tags.extend(["front-unreplicated", "replicated"].map(|w| format!("e2e-{app}-{w}")));
    }
    let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
    nothing_left_behind(pid, "replica", &tags);
}

#[test]
fn a_missing_server_is_named_with_the_script_that_installs_it() {
    for (app, variable) in [("redis", "MU_REDIS_SERVER"), ("memcached", "MU_MEMCACHED_SERVER")] {
        let out = Command::new(env!("CARGO_BIN_EXE_mu"))
            .args(["bench", "e2e", "--quick", "--apps", app, "--json"])
            .env(variable, "/nonexistent/server")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{app}: {stderr}");
        assert!(stderr.contains("/nonexistent/server is not installed"), "{app}: {stderr}");
        assert!(stderr.contains("scripts/install-peers.sh"), "{app}: {stderr}");
    }
}
