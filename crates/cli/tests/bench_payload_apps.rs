//! `mu bench payload`'s Redis and Memcached rows (`--apps redis,memcached`): handover mode at
//! each size asked for, with positive quantiles and the entry's size; the CSV and SVG written;
//! nothing left behind (replica processes, servers, run directory); and a missing server named
//! with the script that installs it.

mod common;

use common::bench::{mu_with_pid, nothing_left_behind, OutDir};
use std::process::Command;

const APPS: [&str; 2] = ["redis", "memcached"];
const SIZES: [u64; 2] = [32, 4096];

#[test]
fn redis_and_memcached_rows_at_each_size() {
    let out_dir = OutDir::new("payload-apps");
    let (out, pid) = mu_with_pid(&[
        "bench",
        "payload",
        "--quick",
        "--apps",
        "redis,memcached",
        "--payloads",
        "32,4096",
        "--samples",
        "200",
        "--json",
        "--out",
        out_dir.path(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), APPS.len() * SIZES.len(), "{v}");
    for app in APPS {
        for size in SIZES {
            let row = results
                .iter()
                .find(|r| r["app"] == app && r["payload_bytes"] == size)
                .unwrap_or_else(|| panic!("no row {app} {size} B in {v}"));
            assert_eq!(row["mode"], "handover", "{row}");
            assert_eq!(row["samples"], 200, "{row}");
            for q in ["p1", "p50", "p99"] {
                assert!(row["latency_ns"][q].as_u64().is_some_and(|ns| ns > 0), "{q}: {row}");
            }
            // The value is the payload; the entry holds the write around it.
            let entry = row["entry_bytes"].as_u64().expect("entry_bytes");
            assert!(entry > size && entry < size + 100, "{row}");
        }
    }
    let csv = std::fs::read_to_string(out_dir.0.join("payload.csv")).expect("the CSV");
    assert_eq!(csv.lines().count(), 1 + results.len(), "{csv}");
    assert!(out_dir.is_svg("payload"), "payload.svg is not a whole SVG document");
    nothing_left_behind(pid, "bench-replica", &["payload"]);
    no_server_left(pid);
}

/// No process (a replica's redis-server or memcached) still names the run directory.
fn no_server_left(pid: u32) {
    let run_dir = format!("mu-bench-payload-{pid}");
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        assert!(!cmdline.contains(&run_dir), "a server of benchmark {pid} runs: {cmdline:?}");
    }
}

#[test]
fn a_follower_server_that_is_never_fed_fails_the_run() {
    // redis-server without its `--replicaof`: it runs, and never gets the stream.
    let out_dir = OutDir::new("payload-unfed");
    std::fs::create_dir_all(&out_dir.0).unwrap();
    let wrapper = out_dir.0.join("redis-server-unfed");
    let script = "#!/bin/sh\nfor a; do shift; [ \"$skip\" ] && { skip=${skip#?}; continue; }; \
                  [ \"$a\" = --replicaof ] && { skip=xx; continue; }; set -- \"$@\" \"$a\"; done\n\
                  exec redis-server \"$@\"\n";
    std::fs::write(&wrapper, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mu"))
        .args(["bench", "payload", "--apps", "redis", "--payloads", "64", "--samples", "100"])
        .args(["--json", "--out", out_dir.path()])
        .env("MU_REDIS_SERVER", &wrapper)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("does not hold the last value written"), "{stderr}");
    assert!(stderr.contains("replication did not reach the server"), "{stderr}");
}

#[test]
fn a_missing_server_is_named_with_the_script_that_installs_it() {
    for (app, variable) in [("redis", "MU_REDIS_SERVER"), ("memcached", "MU_MEMCACHED_SERVER")] {
        let out_dir = OutDir::new(&format!("payload-missing-{app}"));
        let out = Command::new(env!("CARGO_BIN_EXE_mu"))
            .args(["bench", "payload", "--quick", "--apps", app, "--json", "--out", out_dir.path()])
            .env(variable, "/nonexistent/server")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{app}: {stderr}");
        assert!(stderr.contains("/nonexistent/server is not installed"), "{app}: {stderr}");
        assert!(stderr.contains("scripts/install-peers.sh"), "{app}: {stderr}");
    }
}
