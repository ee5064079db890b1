//! Each peer system measured for real with a small run. The servers must be installed
//! (`scripts/install-peers.sh`): a missing one fails its test rather than skipping it, so that a
//! machine without them cannot pass for one that measured them.
//!
//! `measure` itself checks, at the end of every run, that the last write reads back with the
//! right value on every node (both Redis replicas, every etcd member through a local read, every
//! openraft state machine, every Aeron Cluster member's service), and fails otherwise: a passing
//! run proves replication happened.

use mu_peers::{measure, Options, PeerError, Samples, System};

const SAMPLES: u64 = 200;

/// One test's servers at a time: run together, the four tests start a dozen servers on a
/// machine that may have two CPUs, and an etcd member starved that long calls an election
/// (its default timeout is a second) in the middle of a run. Each run takes about a second.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static SERVERS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed while holding the lock leaves nothing behind that the next one uses.
    SERVERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn small_run(system: System) -> Samples {
    small_run_watched(system, |_| {})
}

/// A small run of `system` in which `watch` is called at each progress report, while the
/// servers run.
fn small_run_watched(system: System, mut watch: impl FnMut(u64)) -> Samples {
    let _turn = one_at_a_time();
    let opts = Options { payload_bytes: 64, samples: SAMPLES, warmup: 20 };
    let mut reported = Vec::new();
    let mut progress = |done| {
        watch(done);
        reported.push(done);
    };
    let samples = match measure(system, &opts, &mut progress) {
        Ok(samples) => samples,
        Err(error @ PeerError::NotInstalled { .. }) => {
            panic!("{system} is not installed: run scripts/install-peers.sh first ({error})")
        }
        Err(error) => panic!("{system}: {error}"),
    };
    assert_eq!(samples.system, system);
    assert_eq!(samples.latencies_ns.len() as u64, SAMPLES);
    assert!(samples.latencies_ns.iter().all(|&latency_ns| latency_ns > 0));
    // Every operation replicated to other nodes: none can be faster than a microsecond.
    assert!(samples.latencies_ns.iter().all(|&latency_ns| latency_ns >= 1_000));
    assert!(!samples.version.is_empty());
    assert!(samples.notes.contains("checked"), "{}", samples.notes);
    assert_eq!(reported.last(), Some(&SAMPLES));
    assert!(reported.windows(2).all(|pair| pair[0] < pair[1]));
    let mut sorted = samples.latencies_ns.clone();
    sorted.sort_unstable();
    eprintln!(
        "{system} ({}): p50 {} us, max {} us over {SAMPLES} samples; {}",
        samples.version,
        sorted[sorted.len() / 2] / 1_000,
        sorted[sorted.len() - 1] / 1_000,
        samples.notes
    );
    samples
}

#[test]
fn redis_wait_replicates_to_both_replicas() {
    small_run(System::RedisWait);
}

#[test]
fn etcd_replicates_to_every_member() {
    small_run(System::Etcd);
}

#[test]
fn openraft_replicates_to_every_state_machine() {
    small_run(System::Openraft);
}

/// Aeron Cluster's members and client are JVMs: while the run measures, all four are running
/// (found by the private directory in their command lines, whose name holds this process's id);
/// afterwards none is left and the directory is gone.
#[test]
fn aeron_cluster_replicates_to_every_member_and_stops() {
    let marker = format!("mu-peers-aeron-{}-", std::process::id());
    let mut running_counts = Vec::new();
    let samples = small_run_watched(System::AeronCluster, |_| {
        running_counts.push(processes_with(&marker));
    });
    assert!(samples.version.starts_with("Aeron Cluster 1.44."), "{}", samples.version);
    assert!(running_counts.iter().all(|&count| count == 4), "{running_counts:?}");
    assert_eq!(processes_with(&marker), 0, "an Aeron JVM outlived the run");
    for parent in [std::path::PathBuf::from("/dev/shm"), std::env::temp_dir()] {
        let leftovers: Vec<String> = std::fs::read_dir(&parent)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(&marker))
            .collect();
        assert!(leftovers.is_empty(), "left in {}: {leftovers:?}", parent.display());
    }
}

/// How many processes have `marker` in their command line (the JVMs get their directories as
/// arguments; a process that exits while being read is not counted).
fn processes_with(marker: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .filter(|cmdline| String::from_utf8_lossy(cmdline).contains(marker))
        .count()
}

/// The version is what the running server reports, not a constant.
#[test]
fn version_strings_name_the_system() {
    let _turn = one_at_a_time();
    let opts = Options { payload_bytes: 8, samples: 1, warmup: 0 };
    let redis = measure(System::RedisWait, &opts, &mut |_| {}).unwrap();
    assert!(redis.version.starts_with("Redis 7."), "{}", redis.version);
    let etcd = measure(System::Etcd, &opts, &mut |_| {}).unwrap();
    assert!(etcd.version.starts_with("etcd 3."), "{}", etcd.version);
}
