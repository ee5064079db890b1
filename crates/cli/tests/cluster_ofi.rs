//! A key-value cluster on the libfabric fabric (`fabric = "ofi"`, over loopback TCP), once per
//! provider, as a user runs it: `mu cluster up`, writes, the leader killed, more writes, and
//! every acknowledged write read back from the survivors, whose states are equal.

#![cfg(feature = "ofi")]

mod common;

use common::{mu, ok, refused, stderr, Setup};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

/// Ports each replica uses from its base (its channels and its liveness port), rounded up.
const PORTS_PER_REPLICA: u16 = 10;

/// A base port with `3 * PORTS_PER_REPLICA` free ports after it, a different block for each
/// call of this process (the tests run at once, and a block is free until its cluster binds),
/// below the kernel's ports for outgoing connections, one of which could otherwise take a port
/// of the block before the replicas bind it.
fn free_ports() -> u16 {
    static CALLS: AtomicU16 = AtomicU16::new(0);
    const FIRST: u16 = 10_000;
    const BLOCK: u16 = 3 * PORTS_PER_REPLICA;
    let ephemeral: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768);
    let blocks = (ephemeral.clamp(FIRST + 20 * BLOCK, 60_000) - FIRST) / BLOCK;
    let spread =
        (std::process::id() % u32::from(blocks)) as u16 + CALLS.fetch_add(1, Ordering::Relaxed) * 7;
    (0..blocks)
        .map(|n| FIRST + ((spread + n) % blocks) * BLOCK)
        .find(|&base| {
            (0..3 * PORTS_PER_REPLICA).all(|p| TcpListener::bind(("127.0.0.1", base + p)).is_ok())
        })
        .expect("a block of free ports on loopback")
}

fn status(setup: &Setup) -> Vec<serde_json::Value> {
    let out = ok(mu(&["cluster", "status", "--config", setup.config(), "--json"]));
    serde_json::from_str(&out).expect("status JSON")
}

#[test]
fn a_kv_cluster_on_ofi_sockets_survives_its_leader() {
    kv_cluster_survives_its_leader("sockets", "ofi-sockets", 0x0f1);
}

#[test]
fn a_kv_cluster_on_ofi_rxm_survives_its_leader() {
    kv_cluster_survives_its_leader("tcp;ofi_rxm", "ofi-rxm", 0x0f2);
}

/// `mu kv` with `args` on the cluster of `setup`, allowed 30 s (its default is 5 s): the first
/// write after the kill waits for the failover, on a machine the replicas' provider threads
/// keep busy.
fn kv(setup: &Setup, args: &[&str]) -> std::process::Output {
    let mut all = vec!["kv"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--config", setup.config(), "--timeout-ms", "30000"]);
    mu(&all)
}

/// `tag` names the test's directory. One cluster at a time: two would share the machine's
/// CPUs with each other's provider threads, and on a small machine a replica's reads would
/// then come late enough to look like failures.
fn kv_cluster_survives_its_leader(provider: &str, tag: &str, cluster_id: u64) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let setup = Setup::new(tag, cluster_id);
    // `sockets` replicas share 127.0.0.1; `tcp;ofi_rxm` needs an address per replica.
    let host = |n: u8| {
        if provider == "sockets" {
            "127.0.0.1".to_string()
        } else {
            format!("127.0.0.{}", n + 1)
        }
    };
    let base = free_ports();
    let text = format!(
        "cluster_id = {}\nfabric = \"ofi\"\nrun_dir = \"{}\"\nreplicas = [0, 1, 2]\n\n\
         [log]\nslots = 1024\nslot_bytes = 1024\n\n\
         # Round trips cost about 100 µs here, and milliseconds at their tail.\n\
         [detector]\nread_period_us = 20000\n\n\
         [ofi]\nprovider = \"{provider}\"\n[ofi.addresses]\n\
         0 = \"{}:{}\"\n1 = \"{}:{}\"\n2 = \"{}:{}\"\n",
        cluster_id,
        setup.run_dir.display(),
        host(0),
        base,
        host(1),
        base + PORTS_PER_REPLICA,
        host(2),
        base + 2 * PORTS_PER_REPLICA
    );
    std::fs::write(&setup.config, text).expect("config file");
    ok(mu(&["cluster", "up", "--config", setup.config()]));
    let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    for k in &keys {
        ok(kv(&setup, &["put", k, &format!("v-{k}")]));
    }

    // Kill the replica the others agree leads. Asked until they all name the same one: on a
    // loaded machine a status answer can come during a leader change (or not in time).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (before, leader) = loop {
        let s = status(&setup);
        let named: Vec<Option<u64>> = s.iter().map(|r| r["leader"].as_u64()).collect();
        if let Some(l) = named[0].filter(|&l| named.iter().all(|&n| n == Some(l))) {
            break (s, l as usize);
        }
        assert!(Instant::now() < deadline, "the replicas never agreed on a leader: {s:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let pid = before[leader]["pid"].as_u64().expect("the leader's pid") as i32;
    // SAFETY: kill takes a pid and a signal, no memory; the pid is the leader replica's, which
    // `mu cluster status` just read from its live process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let killed = Instant::now();
    ok(kv(&setup, &["put", "after", "the-kill"]));
    eprintln!(
        "{provider}: first write after the kill acknowledged {:?} after it",
        killed.elapsed()
    );

    for k in &keys {
        assert_eq!(ok(kv(&setup, &["get", k])).trim(), format!("v-{k}"));
    }
    assert_eq!(ok(kv(&setup, &["get", "after"])).trim(), "the-kill");

    // The survivors apply the same entries: wait for them to agree, then compare digests.
    let start = Instant::now();
    loop {
        let now = status(&setup);
        let live: Vec<&serde_json::Value> =
            now.iter().filter(|r| r["up"].as_bool() == Some(true)).collect();
        assert_eq!(live.len(), 2, "{now:?}");
        let same_applied = live[0]["applied"] == live[1]["applied"];
        if same_applied && live[0]["digest"] == live[1]["digest"] {
            assert_ne!(live[0]["leader"].as_u64(), Some(leader as u64));
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "survivors differ: {now:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    ok(mu(&["cluster", "down", "--config", setup.config()]));
}

/// The fabric's own checks run before any replica starts: `tcp;ofi_rxm` needs an address per
/// replica, and an unknown provider is named with the known ones.
#[test]
fn bad_ofi_settings_are_refused_before_any_replica_starts() {
    let setup = Setup::new("ofi-refused", 0x0f3);
    let write = |provider: &str| {
        let text = format!(
            "cluster_id = 243\nfabric = \"ofi\"\nrun_dir = \"{}\"\nreplicas = [0, 1, 2]\n\n\
             [ofi]\nprovider = \"{provider}\"\n[ofi.addresses]\n\
             0 = \"127.0.0.1:41000\"\n1 = \"127.0.0.1:41010\"\n2 = \"127.0.0.1:41020\"\n",
            setup.run_dir.display()
        );
        std::fs::write(&setup.config, text).expect("config file");
    };
    for (provider, says) in [
        ("tcp;ofi_rxm", "nodes n0 and n1 share the address 127.0.0.1"),
        ("verbs", "use one of sockets, tcp;ofi_rxm"),
    ] {
        write(provider);
        let out = mu(&["cluster", "up", "--config", setup.config()]);
        assert!(!stderr(&out).contains("exited during start-up"), "{}", stderr(&out));
        refused(out, says);
    }
}
