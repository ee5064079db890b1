//! Bad input that the argument parser cannot see: each command must refuse it at once, with a
//! message that names the problem, and exit with a failure (never a panic, never a hang).

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Runs `mu` with `args` and returns its output; fails the test if it runs for more than 30 s.
fn mu(args: &[&str]) -> Output {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_mu"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run mu: {e}"));
    assert!(started.elapsed() < Duration::from_secs(30), "mu {args:?} took too long");
    out
}

/// `mu args` fails with exit status `status`, says `expected` on stderr, and does not panic.
fn refused_with(status: i32, args: &[&str], expected: &str) {
    let out = mu(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(status), "mu {args:?} must fail with {status}: {stderr}");
    assert!(stderr.contains(expected), "mu {args:?} should say {expected:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "mu {args:?} panicked: {stderr}");
}

/// `mu args` is refused as an error (status 1).
fn refused(args: &[&str], expected: &str) {
    refused_with(1, args, expected);
}

#[test]
fn a_sweep_past_the_last_seed_is_refused() {
    refused(
        &["sim", "--first-seed", "18446744073709551615", "--seeds", "2", "--no-lincheck"],
        "runs past the last seed",
    );
}

/// The last seed there is may be swept: its summary names it (computing the range's end
/// overflowed after the run).
#[test]
fn a_sweep_ending_at_the_last_seed_is_summed_up() {
    let out = mu(&[
        "sim",
        "--first-seed",
        "18446744073709551615",
        "--seeds",
        "1",
        "--steps",
        "20",
        "--no-lincheck",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("(18446744073709551615..18446744073709551615)"), "{stdout}");
}

#[test]
fn watch_needs_one_seed() {
    refused(&["sim", "--watch", "--seeds", "2", "--no-lincheck"], "give it with --seed");
}

#[test]
fn a_connection_smaller_than_what_mu_writes_at_once_is_refused() {
    refused(
        &["sim", "--connection-depth", "16", "--seeds", "1", "--no-lincheck"],
        "so choose at least 34",
    );
}

#[test]
fn ukharon_sims_refuse_what_they_do_not_know() {
    // The parser refuses what no protocol knows (status 2); each protocol refuses the rest.
    refused_with(
        2,
        &["sim", "--protocol", "ukharon", "--faults", "crush"],
        "unknown fault \"crush\"",
    );
    refused(&["sim", "--protocol", "ukharon", "--faults", "perm-failure"], "unknown fault");
    refused(&["sim", "--protocol", "ukharon", "--mutation", "skip-revoke"], "start-at-t");
    refused_with(2, &["sim", "--protocol", "paxos", "--seeds", "1"], "or ukharon");
    refused(&["sim", "--faults", "drift", "--seeds", "1", "--no-lincheck"], "unknown fault");
    refused(&["sim", "--nodes", "4", "--seeds", "1", "--no-lincheck"], "--nodes is uKharon's");
}

#[test]
fn membership_changes_need_three_replicas() {
    refused(
        &["sim", "--faults", "membership", "--replicas", "2", "--seeds", "1", "--no-lincheck"],
        "at least 3 members",
    );
}

#[test]
fn a_lincheck_that_does_not_work_is_named_before_any_seed() {
    let dir = std::env::temp_dir().join(format!("mu-bad-lincheck-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Runs, succeeds, and checks nothing.
    let fake = dir.join("lincheck");
    std::fs::write(&fake, "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let fake_text = fake.display().to_string();
    refused(&["sim", "--seeds", "1", "--lincheck", &fake_text], "is not a working lincheck");
    // Not executable at all.
    let plain = dir.join("plain");
    std::fs::write(&plain, "not a program").unwrap();
    let plain_text = plain.display().to_string();
    refused(&["sim", "--seeds", "1", "--lincheck", &plain_text], "cannot run lincheck");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `mu args` is refused as a usage error (status 2, as the argument parser's own refusals).
fn usage_refused(args: &[&str], expected: &str) {
    refused_with(2, args, expected);
}

#[test]
fn a_demo_out_of_range_is_a_usage_error() {
    usage_refused(&["demo", "--seconds", "99999999999999999999"], "give 0.1 to 86400");
    for seconds in ["0", "1e-9", "NaN", "inf", "-1"] {
        usage_refused(&["demo", "--seconds", seconds], "--seconds");
    }
    usage_refused(&["demo", "--clients", "100000"], "1..=1024");
    usage_refused(&["demo", "--keys", "0"], "1..=1000000");
    usage_refused(
        &["demo", "--protocol", "raft"],
        "\"mu\", \"velos\", \"ukharon-kv\" or \"ukharon\"",
    );
}

/// The membership demo has no clients: an option of the key-value demo is refused, not ignored.
#[test]
fn a_key_value_option_with_the_membership_demo_is_refused() {
    refused(&["demo", "--protocol", "ukharon", "--clients", "3"], "--clients is an option");
}

#[test]
fn a_cas_with_the_wrong_number_of_values_is_a_usage_error() {
    // Refused before any cluster is looked for: the configuration need not exist.
    usage_refused(&["kv", "cas", "k", "v", "--config", "/nonexistent.toml"], "got 2 arguments");
    usage_refused(
        &["kv", "cas", "--absent", "k", "--config", "/nonexistent.toml"],
        "cas --absent takes KEY VALUE",
    );
}

#[test]
fn dedicated_failover_threads_need_cpus_of_their_own() {
    // On one CPU (`taskset`, util-linux), whatever this machine has.
    let out = Command::new("taskset")
        .args(["-c", "0", env!("CARGO_BIN_EXE_mu")])
        .args(["bench", "failover", "--threads", "dedicated", "--count", "1"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run taskset: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("may use 1 CPUs") && stderr.contains("--threads shared"), "{stderr}");
}

#[test]
fn more_rounds_than_samples_are_refused() {
    refused(
        &["bench", "replication", "--protocol", "mu,velos", "--rounds", "100", "--samples", "5"],
        "each round takes at least one sample",
    );
}

#[test]
fn shm_only_figures_are_refused_on_ofi() {
    refused(
        &["bench", "fabric", "--fabric", "ofi", "--crash-samples", "5"],
        "are for the shm fabric",
    );
}

/// The fabric's own checks apply to every command that reads a cluster file, not only to the
/// ones that start replicas.
#[test]
fn an_ofi_provider_that_is_not_supported_is_refused_by_every_command() {
    let dir = std::env::temp_dir().join(format!("mu-bad-ofi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("cluster.toml");
    std::fs::write(
        &config,
        format!(
            "cluster_id = 7\nrun_dir = \"{}\"\nreplicas = [0, 1, 2]\nfabric = \"ofi\"\n\
             [ofi]\nprovider = \"verbs\"\n[ofi.addresses]\n\
             0 = \"127.0.0.1:41000\"\n1 = \"127.0.0.1:41010\"\n2 = \"127.0.0.1:41020\"\n",
            dir.join("run").display()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    refused(&["cluster", "status", "--config", &config], "is not supported");
    refused(&["kv", "get", "k", "--config", &config], "is not supported");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run directory off tmpfs works but is slow (every log write becomes disk traffic): `mu
/// replica` says so as it starts, and says nothing of the kind on tmpfs. (The replica here
/// stops at once, on an id the configuration does not have, after the warning.)
#[test]
fn a_run_directory_off_tmpfs_is_warned_about() {
    use std::os::unix::fs::DirBuilderExt;
    let mut bases = vec![std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))];
    if std::path::Path::new("/dev/shm").is_dir() {
        bases.push("/dev/shm".into());
    }
    for base in bases {
        let dir = base.join(format!("mu-bad-input-tmpfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new().mode(0o700).create(&dir).expect("test directory");
        let run_dir = dir.join("run");
        let config = dir.join("cluster.toml");
        std::fs::write(
            &config,
            format!("cluster_id = 7\nrun_dir = \"{}\"\nreplicas = [0, 1, 2]\n", run_dir.display()),
        )
        .expect("config file");
        let out = mu(&["replica", "--config", config.to_str().unwrap(), "--id", "9"]);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        let in_memory = mu_fabric_shm::layout::memory_backed(&dir).expect("statfs");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(stderr.contains("replica 9 is not in this cluster"), "{stderr}");
        assert_eq!(
            stderr.contains("is not on tmpfs"),
            !in_memory,
            "{} (in memory: {in_memory}): {stderr}",
            base.display()
        );
    }
}

/// `threads = "dedicated"` where the spinning threads would outnumber the CPUs: `mu replica`
/// warns as it starts (three replicas on shm spin about nine threads), and only then.
#[test]
fn dedicated_threads_on_too_few_cpus_are_warned_about() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("mu-bad-input-dedicated-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("test directory");
    let config = dir.join("cluster.toml");
    for threads in ["dedicated", "shared"] {
        std::fs::write(
            &config,
            format!(
                "cluster_id = 7\nrun_dir = \"{}\"\nreplicas = [0, 1, 2]\nthreads = \"{threads}\"\n",
                dir.join("run").display()
            ),
        )
        .expect("config file");
        let out = mu(&["replica", "--config", config.to_str().unwrap(), "--id", "9"]);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(stderr.contains("replica 9 is not in this cluster"), "{stderr}");
        let few = mu_cpu::allowed_cpus().len() < 9;
        assert_eq!(
            stderr.contains("starve"),
            threads == "dedicated" && few,
            "threads {threads}, {} CPUs: {stderr}",
            mu_cpu::allowed_cpus().len()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An error with nowhere to say it (stderr full) still exits with the error's status, not a
/// panic's (101).
#[test]
fn an_error_with_stderr_full_exits_with_its_status() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        panic!("/dev/full is missing: this test needs a Linux /dev");
    };
    let out = Command::new(env!("CARGO_BIN_EXE_mu"))
        .args(["kv", "get", "k", "--config", "/nonexistent/cluster.toml"])
        .stderr(full)
        .output()
        .expect("mu runs");
    assert_eq!(out.status.code(), Some(1));
}

/// With stdout failing (full), a command stops at its first result line, says so in one line
/// and exits with an error's status, not a panic's (101).
#[test]
fn a_result_with_stdout_full_stops_with_an_error() {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    let out = Command::new(env!("CARGO_BIN_EXE_mu"))
        .args(["sim", "--seeds", "1", "--steps", "20", "--no-lincheck"])
        .stdout(full)
        .output()
        .expect("mu runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("mu: cannot write to stdout"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The drift-edge scenario is uKharon's, with a fixed fault schedule of its own.
#[test]
fn a_scenario_where_it_does_not_apply_is_refused() {
    refused(
        &["sim", "--protocol", "ukharon", "--scenario", "drift-edge", "--faults", "crash"],
        "--scenario drift-edge",
    );
    refused(
        &["sim", "--scenario", "drift-edge", "--seeds", "1", "--no-lincheck"],
        "--scenario is uKharon's",
    );
    refused_with(2, &["sim", "--protocol", "ukharon", "--scenario", "drift"], "faults, drift-edge");
}
