//! The cluster configuration file: every bad configuration is refused with a message that names
//! the problem, and a good one comes back with its defaults filled in.

use mu_fabric::NodeId;
use mu_log::Integrity;
use mu_service::{ClusterConfig, Endpoint};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A configuration that is good but for `extra` (TOML appended after the required keys, so
/// it may add sections) and the keys it replaces.
fn config_with(cluster_id: &str, run_dir: &str, replicas: &str, extra: &str) -> String {
    format!("cluster_id = {cluster_id}\nrun_dir = \"{run_dir}\"\nreplicas = {replicas}\n{extra}\n")
}

fn good(extra: &str) -> String {
    config_with("7", "/tmp/mu-config-test", "[0, 1, 2]", extra)
}

/// Parses `text`, which must be refused, and checks that the message holds every one of
/// `words`.
fn refused(text: &str, words: &[&str]) -> String {
    let e = match ClusterConfig::parse(text) {
        Ok(c) => panic!("accepted a bad configuration: {c:?}\n{text}"),
        Err(e) => e,
    };
    for w in words {
        assert!(e.contains(w), "the message {e:?} does not name {w:?}\n{text}");
    }
    e
}

#[test]
fn duplicate_replica_ids_are_refused() {
    refused(&config_with("7", "/tmp/x", "[0, 1, 1]", ""), &["replicas", "id 1 appears twice"]);
}

#[test]
fn replica_ids_of_64_and_above_are_refused() {
    refused(&config_with("7", "/tmp/x", "[0, 64]", ""), &["replicas", "64", "too large"]);
    refused(&config_with("7", "/tmp/x", "[1000]", ""), &["1000", "0 to 63"]);
}

#[test]
fn a_metrics_port_base_without_room_for_every_replica_is_refused() {
    refused(&good("[metrics]\nport_base = 65535"), &["metrics.port_base 65535", "1 to 65533"]);
    refused(&good("[metrics]\nport_base = 0"), &["metrics.port_base 0"]);
    ClusterConfig::parse(&good("[metrics]\nport_base = 65533")).expect("room for ids 0 to 2");
}

#[test]
fn a_detector_that_reads_less_than_once_a_second_is_refused() {
    // Named as the file names it.
    refused(
        &good("[detector]\nread_period_us = 1000001"),
        &["detector.read_period_us is 1000001", "at most 1000000"],
    );
    // Far beyond: no overflow on the way to the refusal.
    refused(&good("[detector]\nread_period_us = 18446744073709551"), &["detector.read_period_us"]);
    refused(&good("[detector]\nread_period_us = 0"), &["detector.read_period_us is 0"]);
    ClusterConfig::parse(&good("[detector]\nread_period_us = 1000000")).expect("once a second");
}

#[test]
fn a_cluster_without_replicas_is_refused() {
    refused(&config_with("7", "/tmp/x", "[]", ""), &["replicas", "at least one"]);
}

#[test]
fn an_unknown_protocol_is_refused() {
    refused(&good("protocol = \"raft\""), &["protocol", "\"raft\"", "\"mu\"", "\"velos\""]);
}

#[test]
fn velos_is_a_protocol_and_its_replicas_run_it() {
    let c = ClusterConfig::parse(&good("protocol = \"velos\"")).expect("a good configuration");
    let r = c.replica_config(1).unwrap();
    assert_eq!(r.protocol, mu_replica::Protocol::Velos);
    assert_eq!(r.protocol.tag(), "velos/7");
    // A velos replica may rejoin after a restart (through a rejoin entry a majority decides
    // without it), except in a cluster of one or two.
    let mut rejoining = r.clone();
    rejoining.eligible = false;
    rejoining.validate().expect("a velos replica rejoins");
    for (count, me) in [(2, 1), (1, 0)] {
        rejoining.replicas.truncate(count);
        rejoining.me = rejoining.replicas[me];
        let e = rejoining.validate().unwrap_err().to_string();
        assert!(e.contains("velos") && e.contains(&format!("a cluster of {count}")), "{e}");
    }
}

#[test]
fn an_unknown_fabric_is_refused() {
    refused(&good("fabric = \"rdma\""), &["fabric", "\"rdma\"", "\"shm\""]);
}

#[test]
fn an_unknown_mode_is_refused() {
    refused(&good("mode = \"sideways\""), &["mode", "\"sideways\"", "direct", "handover"]);
}

#[test]
fn an_unknown_threads_setting_is_refused() {
    refused(&good("threads = \"many\""), &["threads", "\"many\"", "shared", "dedicated"]);
    let c = ClusterConfig::parse(&good("")).unwrap();
    assert_eq!(c.replica_config(0).unwrap().threads, mu_replica::Threads::Shared, "the default");
}

#[test]
fn a_misspelt_key_is_refused() {
    refused(&good("protocl = \"mu\""), &["unknown field", "protocl"]);
    refused(
        &good("[log]\nslots = 64\nslot_byte = 128\nintegrity = \"checksum\""),
        &["unknown field", "slot_byte"],
    );
    refused(&good("[detector]\nread_period = 5"), &["unknown field", "read_period"]);
    refused(&good("[metrics]\nport = 9400"), &["unknown field", "port"]);
}

#[test]
fn a_missing_key_is_refused() {
    refused("run_dir = \"/tmp/x\"\nreplicas = [0]\n", &["missing field", "cluster_id"]);
    refused("cluster_id = 1\nreplicas = [0]\n", &["missing field", "run_dir"]);
    refused("cluster_id = 1\nrun_dir = \"/tmp/x\"\n", &["missing field", "replicas"]);
}

#[test]
fn a_section_may_name_only_some_settings() {
    let c = ClusterConfig::parse(&good("[log]\nslots = 64\n[detector]\nread_period_us = 250\n"))
        .expect("a partial section");
    assert_eq!(c.log.slots, 64);
    assert_eq!(c.log.slot_bytes, 4096 + 24, "the default slot size");
    assert_eq!(c.log.integrity, "checksum");
    assert_eq!(c.detector.read_period_us, 250);
    assert_eq!((c.detector.failure_threshold, c.detector.recovery_threshold), (2, 6));
}

#[test]
fn a_value_of_the_wrong_type_is_refused() {
    refused(&config_with("\"seven\"", "/tmp/x", "[0]", ""), &["cluster_id"]);
    refused(&config_with("7", "/tmp/x", "[-1]", ""), &["replicas"]);
}

#[test]
fn a_relative_run_dir_is_refused() {
    refused(&config_with("7", "run/mu", "[0]", ""), &["run_dir", "run/mu", "absolute"]);
}

#[test]
fn a_log_too_large_to_map_is_refused() {
    // 2^20 slots of 8 KiB: 8 GiB, above what a replica may map.
    let e = refused(
        &good("[log]\nslots = 1048576\nslot_bytes = 8192\nintegrity = \"checksum\""),
        &["log", "1048576 slots", "8192 bytes"],
    );
    assert!(e.contains("more than a replica may map"), "{e}");
    // So large that slots times bytes overflows (TOML integers are 64-bit signed).
    refused(
        &good("[log]\nslots = 9223372036854775807\nslot_bytes = 4120\nintegrity = \"checksum\""),
        &["log", "more than a replica may map"],
    );
}

#[test]
fn slots_too_small_for_an_entry_are_refused() {
    // An entry's framing alone takes 24 bytes.
    refused(
        &good("[log]\nslots = 64\nslot_bytes = 16\nintegrity = \"checksum\""),
        &["log", "slot", "16"],
    );
    // Slots are whole 8-byte words.
    refused(
        &good("[log]\nslots = 64\nslot_bytes = 1001\nintegrity = \"checksum\""),
        &["log", "multiple of 8", "1001"],
    );
    // Named as the file names it, zero included.
    refused(
        &good("[log]\nslots = 64\nslot_bytes = 0\nintegrity = \"checksum\""),
        &["log.slot_bytes is 0", "at least 24"],
    );
    // Framing and nothing else, or room for less than the smallest put: no request would
    // ever fit (a put of an empty key and value takes 24 bytes).
    for slot_bytes in [24, 32, 40] {
        refused(
            &good(&format!("[log]\nslots = 64\nslot_bytes = {slot_bytes}")),
            &[&format!("log.slot_bytes is {slot_bytes}"), "smallest put"],
        );
    }
    ClusterConfig::parse(&good("[log]\nslots = 64\nslot_bytes = 48")).expect("a put fits");
    // A log of one slot cannot hold an entry while the next is written.
    refused(
        &good("[log]\nslots = 1\nslot_bytes = 128\nintegrity = \"checksum\""),
        &["log", "2 slots"],
    );
}

#[test]
fn an_unknown_integrity_check_is_refused() {
    refused(
        &good("[log]\nslots = 64\nslot_bytes = 128\nintegrity = \"crc\""),
        &["log.integrity", "\"crc\"", "checksum", "canary"],
    );
}

#[test]
fn detector_settings_out_of_range_are_refused() {
    let detector = |period: u64, failure: u8, recovery: u8| {
        good(&format!(
            "[detector]\nread_period_us = {period}\nfailure_threshold = {failure}\n\
             recovery_threshold = {recovery}"
        ))
    };
    // No gap between failed and alive again: a replica on the edge would flap.
    refused(
        &detector(1000, 6, 6),
        &["failure detector", "failure_threshold (6)", "recovery_threshold (6)"],
    );
    refused(&detector(1000, 7, 3), &["failure_threshold (7)", "below recovery_threshold (3)"]);
    // Scores never drop below 0: no replica would ever be found failed.
    refused(&detector(1000, 0, 6), &["failure detector", "failure_threshold is 0"]);
    // Scores top out at 15: a failed replica could never recover.
    refused(&detector(1000, 2, 15), &["failure detector", "recovery_threshold (15)", "score_max"]);
    // Heartbeats must be read at some period.
    refused(&detector(0, 2, 6), &["detector.read_period_us is 0"]);
    // Thresholds are 8-bit scores.
    refused(
        &good("[detector]\nread_period_us = 1000\nfailure_threshold = 2\nrecovery_threshold = 300"),
        &["recovery_threshold"],
    );
}

#[test]
fn a_good_configuration_gets_its_defaults() {
    let c = ClusterConfig::parse(&config_with("7", "/tmp/mu-good", "[2, 0, 1]", ""))
        .expect("a good configuration");
    assert_eq!(c.cluster_id, 7);
    assert_eq!(c.protocol, "mu");
    assert_eq!(c.fabric, "shm");
    assert_eq!(c.mode, "direct");
    assert_eq!(c.mode(), mu_replica::Mode::Direct);
    assert_eq!(c.run_dir, PathBuf::from("/tmp/mu-good"));
    assert_eq!(c.replicas, vec![2, 0, 1]);
    assert_eq!((c.log.slots, c.log.slot_bytes, c.log.integrity.as_str()), (4096, 4120, "checksum"));
    assert_eq!(
        (c.detector.read_period_us, c.detector.failure_threshold, c.detector.recovery_threshold),
        (1000, 2, 6)
    );
    assert_eq!(c.metrics.port_base, None);

    let r = c.replica_config(1).expect("replica 1 is in the cluster");
    assert_eq!(r.me, NodeId(1));
    assert_eq!(r.replicas, vec![NodeId(2), NodeId(0), NodeId(1)]);
    assert_eq!((r.slots_count, r.slot_bytes, r.integrity), (4096, 4120, Integrity::Checksum));
    assert_eq!(r.detector.read_period_ns, 1_000_000);
    assert_eq!((r.detector.failure_threshold, r.detector.recovery_threshold), (2, 6));
    r.validate().expect("the replica configuration is valid");
    let e = c.replica_config(3).expect_err("replica 3 is not in the cluster");
    assert!(e.contains("replica 3 is not in this cluster"), "{e}");

    assert_eq!(c.socket_path(0), Path::new("/tmp/mu-good/kv-0.sock"));
    assert_eq!(c.pid_path(2), Path::new("/tmp/mu-good/replica-2.pid"));
    assert_eq!(c.log_path(1), Path::new("/tmp/mu-good/replica-1.log"));
    let endpoints = c.endpoints();
    assert_eq!(endpoints.len(), 3);
    let socket = PathBuf::from("/tmp/mu-good/kv-2.sock");
    assert_eq!(endpoints[0], (2, Endpoint::Unix(socket.clone())));
    assert_eq!(c.socket_endpoints()[0], (2, socket));
    assert_eq!(c.client_address(2), None, "no [clients]: Unix sockets only");
}

#[test]
fn every_setting_is_read() {
    let text = r#"
        cluster_id = 9
        protocol = "mu"
        fabric = "shm"
        run_dir = "/tmp/mu-full"
        replicas = [0, 1, 2, 3, 4]
        mode = "handover"
        threads = "dedicated"

        [log]
        slots = 256
        slot_bytes = 1024
        integrity = "canary"

        [detector]
        read_period_us = 250
        failure_threshold = 3
        recovery_threshold = 9

        [metrics]
        port_base = 9400
    "#;
    let c = ClusterConfig::parse(text).expect("a full configuration");
    assert_eq!(c.mode(), mu_replica::Mode::Handover);
    assert_eq!(c.replicas.len(), 5);
    assert_eq!(c.metrics.port_base, Some(9400));
    let r = c.replica_config(4).unwrap();
    assert_eq!((r.slots_count, r.slot_bytes, r.integrity), (256, 1024, Integrity::Canary));
    assert_eq!(r.detector.read_period_ns, 250_000);
    assert_eq!((r.detector.failure_threshold, r.detector.recovery_threshold), (3, 9));
    assert_eq!(r.threads, mu_replica::Threads::Dedicated);
}

// ---------------------------------------------------------------------------------------------
// Files and run directories
// ---------------------------------------------------------------------------------------------

/// A scratch directory for one test, removed (whatever modes the test left) when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("mu-config-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("scratch directory");
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Give back write permission wherever a test took it away, so that it can be removed.
        if let Ok(entries) = std::fs::read_dir(&self.0) {
            for e in entries.flatten() {
                if e.path().is_dir() {
                    let _ =
                        std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(0o700));
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn with_run_dir(run_dir: &Path) -> ClusterConfig {
    ClusterConfig::parse(&config_with("7", &run_dir.display().to_string(), "[0, 1, 2]", ""))
        .expect("a good configuration")
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

#[test]
fn load_reads_a_file_and_names_it_in_errors() {
    let s = Scratch::new("load");
    let path = s.0.join("cluster.toml");
    std::fs::write(&path, config_with("7", "/tmp/mu-load", "[0, 1, 2]", "")).unwrap();
    let c = ClusterConfig::load(&path).expect("loads");
    assert_eq!(c.cluster_id, 7);

    std::fs::write(&path, config_with("7", "/tmp/mu-load", "[0, 0]", "")).unwrap();
    let e = ClusterConfig::load(&path).expect_err("a bad file");
    assert!(e.contains(&path.display().to_string()) && e.contains("appears twice"), "{e}");

    let missing = s.0.join("absent.toml");
    let e = ClusterConfig::load(&missing).expect_err("no such file");
    assert!(e.contains("reading the configuration") && e.contains("absent.toml"), "{e}");

    std::fs::write(&path, "this is not toml [").unwrap();
    let e = ClusterConfig::load(&path).expect_err("not TOML");
    assert!(e.contains(&path.display().to_string()), "{e}");
}

#[test]
fn prepare_run_dir_creates_a_private_directory() {
    let s = Scratch::new("create");
    let run = s.0.join("a").join("b");
    let c = with_run_dir(&run);
    c.prepare_run_dir().expect("creates it");
    assert!(run.is_dir());
    assert_eq!(mode_of(&run), 0o700, "the run directory is not owner-only");
    // A second time: it is there already, and fine.
    c.prepare_run_dir().expect("an existing private directory");
    let left = entries(&run);
    assert!(left.is_empty(), "the write probe was left behind: {left:?}");
}

/// The names in `dir`.
fn entries(dir: &std::path::Path) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name()).collect()
}

/// The replicas of `mu cluster up` prepare one run directory at the same moment: none may see
/// another's probe vanish under it (a shared probe name once failed start-up that way).
#[test]
fn prepare_run_dir_at_the_same_moment_from_many_callers() {
    let s = Scratch::new("concurrent");
    let run = s.0.join("run");
    let c = std::sync::Arc::new(with_run_dir(&run));
    let start = std::sync::Arc::new(std::sync::Barrier::new(8));
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let (c, start) = (c.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                (0..300).map(|_| c.prepare_run_dir()).find(|r| r.is_err())
            })
        })
        .collect();
    for caller in callers {
        if let Some(Err(e)) = caller.join().expect("a caller panicked") {
            panic!("prepare_run_dir failed beside other callers: {e}");
        }
    }
    let left = entries(&run);
    assert!(left.is_empty(), "write probes were left behind: {left:?}");
}

#[test]
fn a_run_dir_under_a_regular_file_is_refused() {
    let s = Scratch::new("under-file");
    let file = s.0.join("plain");
    std::fs::write(&file, b"not a directory").unwrap();
    let run = file.join("run");
    let e = with_run_dir(&run).prepare_run_dir().expect_err("cannot be created");
    assert!(e.contains("run_dir") && e.contains(&run.display().to_string()), "{e}");
    assert!(e.contains("cannot create it"), "{e}");
}

#[test]
fn a_run_dir_that_is_a_file_is_refused() {
    let s = Scratch::new("is-file");
    let file = s.0.join("plain");
    std::fs::write(&file, b"not a directory").unwrap();
    let e = with_run_dir(&file).prepare_run_dir().expect_err("a file is no run directory");
    assert!(e.contains("run_dir") && e.contains(&file.display().to_string()), "{e}");
    assert!(e.contains("is not a directory"), "{e}");
}

#[test]
fn an_unwritable_run_dir_is_refused() {
    let s = Scratch::new("unwritable");
    let run = s.0.join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o500)).unwrap();
    // Whoever may write where its mode says no (root, or a process with CAP_DAC_OVERRIDE) cannot
    // see that refused: it gets a directory that cannot exist instead, one under /proc, where
    // nobody may create anything.
    let privileged = std::fs::write(run.join("probe"), b"").is_ok();
    let run = if privileged {
        let _ = std::fs::remove_file(run.join("probe"));
        PathBuf::from(format!("/proc/mu-config-test-{}", std::process::id()))
    } else {
        run
    };
    let e = with_run_dir(&run).prepare_run_dir().expect_err("cannot be written to");
    assert!(e.contains("run_dir") && e.contains(&run.display().to_string()), "{e}");
    if privileged {
        assert!(e.contains("cannot create it"), "{e}");
    } else {
        assert!(e.contains("not writable"), "{e}");
    }
}

#[test]
fn a_run_dir_open_to_other_users_is_refused() {
    let s = Scratch::new("open");
    for mode in [0o755, 0o770, 0o701] {
        let run = s.0.join(format!("run-{mode:o}"));
        std::fs::create_dir(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = with_run_dir(&run).prepare_run_dir().expect_err("open to others");
        assert!(e.contains("open to other users"), "{e}");
        assert!(e.contains(&format!("mode {mode:o}")) && e.contains("chmod 700"), "{e}");
        // It was left as it was: fixing modes is the owner's call.
        assert_eq!(mode_of(&run), mode);
    }
}

const OFI: &str = "fabric = \"ofi\"\n[ofi]\nprovider = \"sockets\"\n[ofi.addresses]\n\
                   0 = \"10.1.0.1:7100\"\n1 = \"10.1.0.2:7100\"\n2 = \"host-c:7200\"\n";

#[test]
fn an_ofi_cluster_lists_every_replica_address() {
    let c = ClusterConfig::parse(&good(OFI)).expect("a good ofi configuration");
    let addrs = c.ofi_addresses().unwrap();
    let seen: Vec<(u16, &str, u16)> =
        addrs.iter().map(|a| (a.id, a.host.as_str(), a.base_port)).collect();
    assert_eq!(seen, [(0, "10.1.0.1", 7100), (1, "10.1.0.2", 7100), (2, "host-c", 7200)]);
    assert_eq!(c.ofi_provider(), "sockets");
}

#[test]
fn ofi_settings_are_checked() {
    refused(&good("fabric = \"ofi\""), &["fabric \"ofi\" needs an [ofi] section"]);
    refused(&good(&OFI.replace("fabric = \"ofi\"", "")), &["[ofi] is set but fabric is \"shm\""]);
    refused(&good(&OFI.replace("2 = \"host-c:7200\"\n", "")), &["no address for replica 2"]);
    refused(&good(&OFI.replace("2 = ", "5 = ")), &["replica 5 is not in replicas"]);
    refused(&good(&OFI.replace("host-c:7200", "host-c")), &["write \"host:port\""]);
    refused(&good(&OFI.replace("host-c:7200", "host-c:0")), &["bad port"]);
    refused(&good(&OFI.replace("host-c:7200", "host-c:70000")), &["bad port"]);
    refused(&good(&OFI.replace("host-c:7200", ":7200")), &["empty host"]);
    refused(&good(&OFI.replace("2 = ", "two = ")), &["\"two\" is not a replica id"]);
    // Another spelling of an id would be a second address for the same replica.
    let twice =
        OFI.replace("2 = \"host-c:7200\"\n", "2 = \"host-c:7200\"\n\"02\" = \"host-d:7200\"\n");
    refused(&good(&twice), &["write key \"02\" as \"2\""]);
    refused(&good(&OFI.replace("2 = ", "\"+2\" = ")), &["write key \"+2\" as \"2\""]);
}

const CLIENTS: &str =
    "[clients.addresses]\n0 = \"10.1.0.1:7200\"\n1 = \"10.1.0.2:7200\"\n2 = \"host-c:7300\"\n";

#[test]
fn clients_over_tcp_get_every_replica_address() {
    let c = ClusterConfig::parse(&good(CLIENTS)).expect("a good configuration with [clients]");
    let endpoints = c.endpoints();
    assert_eq!(
        endpoints,
        [
            (0, Endpoint::Tcp("10.1.0.1:7200".into())),
            (1, Endpoint::Tcp("10.1.0.2:7200".into())),
            (2, Endpoint::Tcp("host-c:7300".into())),
        ]
    );
    assert_eq!(c.client_address(2).as_deref(), Some("host-c:7300"));
    // The Unix sockets stay: the replicas serve both.
    assert_eq!(c.socket_endpoints()[1], (1, PathBuf::from("/tmp/mu-config-test/kv-1.sock")));
}

#[test]
fn client_addresses_are_checked_as_ofi_addresses_are() {
    refused(
        &good(&CLIENTS.replace("2 = \"host-c:7300\"\n", "")),
        &["clients.addresses", "replica 2"],
    );
    refused(&good(&CLIENTS.replace("2 = ", "5 = ")), &["replica 5 is not in replicas"]);
    refused(&good(&CLIENTS.replace("host-c:7300", "host-c")), &["write \"host:port\""]);
    refused(&good(&CLIENTS.replace("host-c:7300", "host-c:0")), &["bad port"]);
    refused(&good(&CLIENTS.replace("host-c:7300", ":7300")), &["empty host"]);
    refused(&good("[clients]\nport = 7\n"), &["unknown field"]);
}

/// A uKharon-KV cluster: replicas 3 to 5, coordinators as `coordinators` says, and `extra`.
fn ukharon_kv(coordinators: &str, extra: &str) -> String {
    config_with(
        "8",
        "/tmp/x",
        "[3, 4, 5]",
        &format!("protocol = \"ukharon-kv\"\n{extra}\n[ukharon]\ncoordinators = {coordinators}\n"),
    )
}

#[test]
fn a_ukharon_kv_cluster_has_coordinators_beside_its_replicas() {
    let c = ClusterConfig::parse(&ukharon_kv("[0, 1, 2]", "")).unwrap();
    assert!(c.is_ukharon_kv());
    assert_eq!(c.coordinators().unwrap(), vec![0, 1, 2]);
    assert_eq!(c.processes(), vec![0, 1, 2, 3, 4, 5], "coordinators first");
    assert_eq!(c.snapshot_bytes(), mu_service::config::SNAPSHOT_BYTES_DEFAULT);
    let mu = ClusterConfig::parse(&good("")).unwrap();
    assert_eq!(mu.processes(), vec![0, 1, 2], "Mu has no coordinators");
}

#[test]
fn ukharon_kv_errors_name_the_key() {
    refused(&config_with("8", "/tmp/x", "[3]", "protocol = \"ukharon-kv\""), &["ukharon: missing"]);
    refused(&ukharon_kv("[0, 3]", ""), &["ukharon.coordinators: node 3 is also a replica"]);
    refused(&ukharon_kv("[]", ""), &["ukharon.coordinators"]);
    refused(&ukharon_kv("[0, 99]", ""), &["ukharon.coordinators", "99"]);
    refused(&ukharon_kv("[0]", "fabric = \"ofi\""), &["fabric", "shm"]);
    refused(&ukharon_kv("[0]", "[log]\nslots = 0"), &["log:", "at least one slot"]);
    refused(&ukharon_kv("[0]", "[log]\nsnapshot_bytes = 0"), &["log.snapshot_bytes"]);
    refused(&good("[ukharon]\ncoordinators = [5]"), &["ukharon: a section for protocol"]);
    refused(&good("[log]\nsnapshot_bytes = 0"), &["log.snapshot_bytes: 0"]);
}

/// `log.snapshot_bytes` sizes every protocol's state transfer: 1 MiB by default for the
/// built-in applications under Mu and Velos, 16 MiB for Redis and Memcached.
#[test]
fn every_protocol_sizes_its_state_transfer() {
    use mu_service::config::{SNAPSHOT_BYTES_BUILT_IN, SNAPSHOT_BYTES_DEFAULT};
    let replica = |text: &str| ClusterConfig::parse(text).unwrap().replica_config(0).unwrap();
    assert_eq!(replica(&good("")).snapshot_bytes_max as u64, SNAPSHOT_BYTES_BUILT_IN);
    assert_eq!(replica(&good("app = \"redis\"")).snapshot_bytes_max as u64, SNAPSHOT_BYTES_DEFAULT);
    let set = good("app = \"memcached\"\n[log]\nsnapshot_bytes = 4096");
    assert_eq!(replica(&set).snapshot_bytes_max, 4096);
}

/// A Mu or Velos cluster with `reads = "lease"`: replicas 3 to 5, coordinators 0 to 2, and
/// `extra`.
fn leased(protocol: &str, extra: &str) -> String {
    config_with(
        "9",
        "/tmp/x",
        "[3, 4, 5]",
        &format!(
            "protocol = \"{protocol}\"\nreads = \"lease\"\n{extra}\n[ukharon]\ncoordinators = [0, 1, 2]\n"
        ),
    )
}

#[test]
fn leased_reads_appoint_the_leader_and_bring_a_group() {
    use mu_service::config::Reads;
    for protocol in ["mu", "velos"] {
        let c = ClusterConfig::parse(&leased(protocol, "")).unwrap();
        assert_eq!(c.reads().unwrap(), Reads::Lease);
        assert!(c.has_group() && !c.is_ukharon_kv());
        assert_eq!(c.processes(), vec![0, 1, 2, 3, 4, 5], "coordinators first");
        let r = c.replica_config(4).unwrap();
        assert_eq!(r.leaders, mu_replica::Leaders::Appointed, "{protocol}");
    }
    let log = ClusterConfig::parse(&good("")).unwrap();
    assert_eq!(log.reads().unwrap(), Reads::Log, "log is the default");
    assert_eq!(log.replica_config(0).unwrap().leaders, mu_replica::Leaders::Elected);
    assert!(!log.has_group());
}

#[test]
fn leased_reads_errors_name_the_key() {
    refused(&good("reads = \"cache\""), &["reads \"cache\"", "\"log\"", "\"lease\""]);
    refused(&good("reads = \"lease\""), &["ukharon: missing", "reads = \"lease\""]);
    refused(&leased("mu", "fabric = \"ofi\""), &["fabric", "shm"]);
    refused(
        &leased("mu", "").replace("coordinators = [0, 1, 2]", "coordinators = [0, 3]"),
        &["ukharon.coordinators: node 3 is also a replica"],
    );
    refused(&ukharon_kv("[0]", "reads = \"lease\""), &["reads: for Mu and Velos"]);
    refused(&good("reads = \"log\"\n[ukharon]\ncoordinators = [5]"), &["reads = \"lease\""]);
}

#[test]
fn the_application_is_kv_by_default_and_orderbook_on_request() {
    use mu_service::App;
    assert_eq!(ClusterConfig::parse(&good("")).unwrap().app(), Ok(App::Kv));
    let c = ClusterConfig::parse(&good("app = \"orderbook\"\nprotocol = \"velos\"")).unwrap();
    assert_eq!(c.app(), Ok(App::Orderbook));
    // The application is part of what replicas must agree on.
    let kv = ClusterConfig::parse(&good("protocol = \"velos\"")).unwrap();
    let (book, kv) = (c.replica_config(0).unwrap(), kv.replica_config(0).unwrap());
    assert_eq!((book.application, kv.application), ("orderbook", ""));
    assert_ne!(book.fingerprint(), kv.fingerprint());
    refused(&good("app = \"mongodb\""), &["app \"mongodb\"", "\"kv\"", "\"orderbook\""]);
    refused(&leased("mu", "app = \"orderbook\""), &["reads = \"lease\"", "orderbook"]);
    refused(
        &ukharon_kv("[0, 1, 2]", "app = \"orderbook\""),
        &["ukharon-kv", "key-value store only"],
    );
}

#[test]
fn the_transport_is_the_socket_by_default_and_the_fabric_on_shm() {
    use mu_service::config::Transport;
    assert_eq!(ClusterConfig::parse(&good("")).unwrap().transport(), Ok(Transport::Socket));
    let c = ClusterConfig::parse(&good("transport = \"fabric\"")).unwrap();
    assert_eq!(c.transport(), Ok(Transport::Fabric));
    assert!(c.clients_fabric_dir(2).ends_with("clients-2"));
    refused(&good("transport = \"rdma\""), &["transport \"rdma\"", "\"socket\"", "\"fabric\""]);
    refused(&good(&format!("transport = \"fabric\"\n{OFI}")), &["transport = \"fabric\"", "shm"]);
}

#[test]
fn memcached_runs_beside_the_services_applications_on_shm_through_the_log() {
    let c = ClusterConfig::parse(&good("app = \"memcached\"")).unwrap();
    assert!(c.is_memcached() && !c.is_redis());
    assert!(c.app().is_err(), "not one of the service's applications");
    assert_eq!(c.replica_config(0).unwrap().application, "memcached");
    refused(
        &good("app = \"memcached\"\nreads = \"lease\""),
        &["app = \"memcached\"", "memcached.md"],
    );
}

#[test]
fn redis_runs_beside_the_services_applications_on_shm_through_the_log() {
    let c = ClusterConfig::parse(&good("app = \"redis\"")).unwrap();
    assert!(c.is_redis());
    assert!(c.app().is_err(), "not one of the service's applications");
    assert_eq!(c.replica_config(0).unwrap().application, "redis");
    let kv = ClusterConfig::parse(&good("")).unwrap();
    assert!(!kv.is_redis());
    assert_ne!(
        c.replica_config(0).unwrap().fingerprint(),
        kv.replica_config(0).unwrap().fingerprint()
    );
    refused(&leased("mu", "app = \"redis\""), &["app = \"redis\"", "reads through the log"]);
    refused(&ukharon_kv("[0, 1, 2]", "app = \"redis\""), &["app = \"redis\"", "protocol"]);
}
