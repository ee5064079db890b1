//! `mu demo --app redis` and `mu demo --app memcached`: the whole demo, one second before the
//! leader's kill and one after, with its JSON summary checked: no acknowledged write lost, the
//! live replicas' servers equal, a failover timed, and the application's load tool run.

use std::process::Command;

/// One demo at a time: two clusters of three replicas, their servers and a load tool starve a
/// small machine.
static ONE_DEMO: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn installed(binary: &str, package: &str) {
    if Command::new(binary).arg("--version").output().is_err() {
        panic!("{binary} is not installed (Debian package {package}; scripts/install-peers.sh)");
    }
}

/// Runs `mu demo --app <app> --seconds 1 --json` and returns its summary.
fn demo(app: &str) -> serde_json::Value {
    let _one = ONE_DEMO.lock().unwrap_or_else(|p| p.into_inner());
    let output = Command::new(env!("CARGO_BIN_EXE_mu"))
        .args(["demo", "--app", app, "--seconds", "1", "--json"])
        .output()
        .expect("mu demo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "mu demo --app {app} failed: {stderr}\n{stdout}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// What every run's summary must show.
fn check_summary(summary: &serde_json::Value, app: &str, tool: &str) {
    assert_eq!(summary["app"], app, "{summary}");
    assert_eq!(summary["lost_writes"], 0, "{summary}");
    let checked = summary["acknowledged_keys_checked"].as_u64().expect("keys checked");
    assert!(checked > 0, "no acknowledged key was read back: {summary}");
    let digests = summary["digests"].as_array().expect("digests");
    assert_eq!(digests.len(), 2, "the two live replicas: {summary}");
    assert_eq!(digests[0], digests[1], "{summary}");
    let failover_us = summary["failover_us"].as_u64().expect("failover_us");
    assert!(failover_us > 0, "{summary}");
    let operations = summary["operations"].as_u64().expect("operations");
    let checking = summary["checking_operations"].as_u64().expect("checking_operations");
    assert!(checking > 0 && operations >= checking, "{summary}");
    assert!(summary["latency_us"]["p50"].as_f64().is_some_and(|p| p > 0.0), "{summary}");
    // The load tool ran: each run finished or was cut short by the failover or the end.
    assert_eq!(summary["tool"]["name"], tool, "{summary}");
    let tool_operations = summary["tool"]["operations"].as_u64().expect("tool operations");
    assert_eq!(operations, checking + tool_operations, "{summary}");
}

#[test]
fn the_redis_demo_loses_no_acknowledged_write() {
    installed("redis-server", "redis-server");
    installed("redis-benchmark", "redis-tools");
    let summary = demo("redis");
    check_summary(&summary, "redis", "redis-benchmark");
    // A Redis digest is DEBUG DIGEST's 40 hex digits, with the key count after it.
    let digest = summary["digests"][0].as_str().expect("a digest");
    assert!(digest.len() > 40 && digest[..40].bytes().all(|b| b.is_ascii_hexdigit()), "{digest}");
    assert_ne!(&digest[..40], "0".repeat(40), "an empty server's digest");
}

#[test]
fn the_memcached_demo_loses_no_acknowledged_write() {
    installed("memcached", "memcached");
    installed("memcslap", "libmemcached-tools");
    let summary = demo("memcached");
    check_summary(&summary, "memcached", "memcslap");
    let digest = summary["digests"][0].as_str().expect("a digest");
    assert!(!digest.ends_with("(0 items)"), "{digest}");
}

#[test]
fn the_app_demos_refuse_what_they_do_not_run() {
    for (args, expected) in [
        (&["--app", "redis", "--protocol", "ukharon-kv"][..], "for --protocol mu or velos"),
        (&["--app", "memcached", "--reads", "lease"][..], "--reads and --transport"),
        (&["--app", "redis", "--transport", "fabric"][..], "--reads and --transport"),
        (&["--app", "memcached", "--protocol", "ukharon"][..], "--app is an option"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_mu"))
            .arg("demo")
            .args(args)
            .output()
            .expect("mu demo runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} ran");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    // A server the replicas could not start is named before any replica starts.
    let output = Command::new(env!("CARGO_BIN_EXE_mu"))
        .args(["demo", "--app", "memcached"])
        .env("MU_MEMCACHED_SERVER", "/nonexistent/memcached")
        .output()
        .expect("mu demo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("/nonexistent/memcached is not installed"), "{stderr}");
}
