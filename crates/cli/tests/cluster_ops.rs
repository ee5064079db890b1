//! `mu cluster`, `mu replica` and `mu kv` as a user runs them: a cluster started in the
//! background, written to and read from the command line, and what happens when a replica or a
//! client of another cluster, or of another protocol version, tries to join it: a message naming
//! the problem and a non-zero exit, with the running cluster unharmed.

mod common;

use common::{mu, ok, refused, stderr, Setup};
use std::os::unix::fs::DirBuilderExt;

/// The clusters of this file go one at a time: each is three replica processes with busy
/// threads, on a machine that may have two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn replicas_and_clients_of_another_cluster_cannot_join() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("alien", 0x6a01);
    ok(mu(&["cluster", "up", "--config", setup.config()]));
    ok(mu(&["kv", "put", "color", "blue", "--config", setup.config()]));
    assert_eq!(ok(mu(&["kv", "get", "color", "--config", setup.config()])).trim(), "blue");

    // A replica of another cluster, configured on the same run directory: refused by the
    // directory's cluster file before it publishes anything.
    let alien = setup.dir.join("alien.toml");
    setup.write_config(&alien, 0x6a02, "[0, 1, 2, 3]");
    let alien = alien.to_str().unwrap();
    refused(
        mu(&["replica", "--config", alien, "--id", "3"]),
        &format!("belongs to cluster {:#x}, not to cluster {:#x}", 0x6a01, 0x6a02),
    );
    assert!(!setup.run_dir.join("n3.ctl").exists(), "the refused replica published itself");

    // A client of another cluster: the replicas refuse its hello; nothing is written.
    refused(
        mu(&["kv", "put", "color", "red", "--config", alien, "--timeout-ms", "3000"]),
        &format!("belongs to cluster {}, not to cluster {}", 0x6a01, 0x6a02),
    );
    let status = mu(&["cluster", "status", "--config", alien]);
    assert!(!stderr(&status).contains("is the cluster up"), "{}", stderr(&status));
    refused(status, "belongs to cluster");
    // Nor can the other cluster's configuration stop this one (it names the same run
    // directory and replica ids): every replica is left running.
    refused(
        mu(&["cluster", "down", "--config", alien]),
        "two clusters cannot share a run directory",
    );
    refused(mu(&["cluster", "up", "--config", alien]), "two clusters cannot share a run directory");

    // The cluster went on serving, its data untouched.
    assert_eq!(ok(mu(&["kv", "get", "color", "--config", setup.config()])).trim(), "blue");
    let status = ok(mu(&["cluster", "status", "--config", setup.config(), "--json"]));
    let status: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    assert!(status.to_string().contains("\"leader\""), "{status}");
    ok(mu(&["cluster", "down", "--config", setup.config()]));
}

/// A run directory left by a build that speaks another protocol version (its cluster file
/// says so, as that build wrote it): a replica of this build refuses to start in it, and says
/// which versions differ.
#[test]
fn a_replica_of_another_protocol_version_cannot_join() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("version", 0x6a03);
    std::fs::DirBuilder::new().mode(0o700).create(&setup.run_dir).expect("run directory");
    let layout = mu_fabric_shm::layout::LAYOUT_VERSION;
    let older = mu_replica::PROTOCOL_VERSION + 1;
    std::fs::write(
        setup.run_dir.join("cluster"),
        format!("mu-shm cluster {:#x} layout {layout} protocol mu/{older}\n", 0x6a03),
    )
    .expect("cluster file");
    refused(
        mu(&["replica", "--config", setup.config(), "--id", "0"]),
        &format!("runs protocol mu/{older}; this node speaks {}", mu_replica::protocol_tag()),
    );
    // `mu cluster up` starts none of them, and says why.
    refused(mu(&["cluster", "up", "--config", setup.config()]), "runs protocol");
    assert!(!setup.run_dir.join("n0.ctl").exists(), "a refused replica published itself");
}

/// A replica killed (SIGKILL) leaves its pid file behind and loses its log with its memory:
/// started again as a new replica it is refused, with --rejoin named, and with that file gone
/// the other replicas refuse it; with --rejoin it comes back and the cluster serves on.
#[test]
fn a_crashed_replica_restarts_only_with_rejoin() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("crashed", 0x6a04);
    ok(mu(&["cluster", "up", "--config", setup.config()]));
    ok(mu(&["kv", "put", "color", "green", "--config", setup.config()]));
    let pid_path = setup.run_dir.join("replica-2.pid");
    // The pid file's first line is the pid; the next names the cluster.
    let first_line = |text: String| text.lines().next().unwrap_or("").to_string();
    let pid_text = std::fs::read_to_string(&pid_path).unwrap();
    assert!(pid_text.contains(&format!("cluster {:#x}", 0x6a04)), "{pid_text:?}");
    let pid: i32 = first_line(pid_text).parse().unwrap();
    // SAFETY: kill takes a pid and a signal number, no memory.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    // Gone once the pid no longer answers signal 0 (`mu cluster up` reaps its children).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // SAFETY: as above; signal 0 only checks that the process exists.
    while unsafe { libc::kill(pid, 0) } == 0 {
        assert!(std::time::Instant::now() < deadline, "replica 2 (pid {pid}) did not die");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(pid_path.exists(), "a killed replica's pid file stays");
    let status = mu(&["cluster", "status", "--config", setup.config()]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("crashed") && text.contains("--rejoin"), "status says so: {text}");
    assert!(text.contains(setup.config()), "status names the configuration file: {text}");

    // `mu cluster up` refuses while the rest of the cluster runs, and leaves the crashed
    // replica's pid file: that file is what refuses a restart without --rejoin below.
    refused(mu(&["cluster", "up", "--config", setup.config()]), "already running");
    assert!(pid_path.exists(), "a refused `mu cluster up` removed the crashed replica's pid file");

    // Without --rejoin: refused at once (`timeout` ends it if it were to serve instead).
    let out = std::process::Command::new("timeout")
        .args(["20", env!("CARGO_BIN_EXE_mu"), "replica", "--config", setup.config(), "--id", "2"])
        .env_remove("MU_LOG")
        .output()
        .expect("timeout runs");
    refused(out, "start it with --rejoin");

    // With its pid file removed by hand, it starts as a member in good standing: the replicas
    // that saw its earlier run refuse it, and it stops, saying why (its log is gone).
    std::fs::remove_file(&pid_path).unwrap();
    let out = std::process::Command::new("timeout")
        .args(["20", env!("CARGO_BIN_EXE_mu"), "replica", "--config", setup.config(), "--id", "2"])
        .env_remove("MU_LOG")
        .output()
        .expect("timeout runs");
    assert_ne!(out.status.code(), Some(124), "served on for 20 s instead of stopping");
    refused(out, "had seen an earlier run of it");
    let status = mu(&["cluster", "status", "--config", setup.config()]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("refuses replica(s) 2"), "status names the refusal: {text}");

    // With --rejoin it serves again, and so does the cluster.
    let mut rejoined = std::process::Command::new(env!("CARGO_BIN_EXE_mu"))
        .args(["replica", "--config", setup.config(), "--id", "2", "--rejoin"])
        .env_remove("MU_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("mu replica starts");
    let new_pid = rejoined.id().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::fs::read_to_string(&pid_path).map_or(true, |text| first_line(text) != new_pid) {
        assert!(rejoined.try_wait().unwrap().is_none(), "the rejoining replica stopped");
        assert!(std::time::Instant::now() < deadline, "the rejoining replica never served");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    ok(mu(&["kv", "put", "color", "teal", "--config", setup.config()]));
    assert_eq!(ok(mu(&["kv", "get", "color", "--config", setup.config()])).trim(), "teal");
    ok(mu(&["cluster", "down", "--config", setup.config()]));
    let _ = rejoined.wait();
}

/// A start that fails (here replica 0's metrics port is taken) stops the replicas it started
/// and leaves no shared memory, socket or lock behind: only the replicas' logs, which say why.
#[test]
fn a_failed_start_cleans_up_after_itself() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("failed-start", 0x6a05);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().unwrap().port();
    let mut text = std::fs::read_to_string(&setup.config).unwrap();
    text.push_str(&format!("\n[metrics]\nport_base = {port}\n"));
    std::fs::write(&setup.config, text).unwrap();
    let out = mu(&["cluster", "up", "--config", setup.config()]);
    assert!(!out.status.success(), "started with a metrics port taken");
    assert!(stderr(&out).contains(&port.to_string()), "the port is named: {}", stderr(&out));
    let left: Vec<String> = std::fs::read_dir(&setup.run_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.ends_with(".log"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    drop(taken);
}

/// A replica started by hand that fails once it has started taking part (here its metrics port
/// is taken) leaves its pid file, and says to restart it with --rejoin; a restart without it is
/// refused. The pid file used to be written last: the restart passed the check, and the
/// replicas that had seen its first run refused it.
#[test]
fn a_replica_that_fails_after_starting_needs_rejoin() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("late-failure", 0x6a08);
    // Replica 2 serves its metrics on port_base + 2: this one.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().unwrap().port();
    let mut text = std::fs::read_to_string(&setup.config).unwrap();
    text.push_str(&format!("\n[metrics]\nport_base = {}\n", port - 2));
    std::fs::write(&setup.config, text).unwrap();
    let replica_2 = || {
        std::process::Command::new("timeout")
            .args(["20", env!("CARGO_BIN_EXE_mu"), "replica", "--config", setup.config()])
            .args(["--id", "2"])
            .env_remove("MU_LOG")
            .output()
            .expect("timeout runs")
    };
    let out = replica_2();
    assert!(!out.status.success(), "served with its metrics port taken");
    let said = stderr(&out);
    assert!(said.contains(&port.to_string()) && said.contains("--rejoin"), "{said}");
    assert!(setup.run_dir.join("replica-2.pid").exists(), "its pid file went");
    refused(replica_2(), "start it with --rejoin");
    drop(taken);
}

/// Replicas reached over TCP that do not answer are said to be so, not "not running (no
/// socket)": the socket is on their host, which may be another.
#[test]
fn status_over_tcp_does_not_look_for_sockets() {
    let setup = Setup::new("status-tcp", 0x6a09);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let mut text = std::fs::read_to_string(&setup.config).unwrap();
    text.push_str(&format!(
        "\n[clients.addresses]\n0 = \"{addr}\"\n1 = \"{addr}\"\n2 = \"{addr}\"\n"
    ));
    std::fs::write(&setup.config, text).unwrap();
    let out = mu(&["cluster", "status", "--config", setup.config()]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(said.contains("replica 2: no answer over TCP"), "{said}");
    assert!(!said.contains("no socket"), "{said}");
}

/// `mu cluster down` removes nothing from a run directory `up` would not have run in (open to
/// other users: a run_dir mistyped as a shared directory), and in its own it leaves a file named
/// like the fabric's claim that the fabric did not write. It removed both before.
#[test]
fn down_removes_only_what_a_cluster_left() {
    use std::os::unix::fs::PermissionsExt;
    let setup = Setup::new("down-guard", 0x6a07);
    std::fs::create_dir_all(&setup.run_dir).unwrap();
    let put = |name: &str, text: &str| std::fs::write(setup.run_dir.join(name), text).unwrap();
    let names = |dir: &std::path::Path| {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    put("cluster", "my own notes\n");
    put("n3.ctl", "");
    put("notes", "kept\n");
    std::fs::set_permissions(&setup.run_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    refused(mu(&["cluster", "down", "--config", setup.config(), "--purge"]), "owner-only");
    assert_eq!(names(&setup.run_dir), ["cluster", "n3.ctl", "notes"]);

    std::fs::set_permissions(&setup.run_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    ok(mu(&["cluster", "down", "--config", setup.config(), "--purge"]));
    assert_eq!(names(&setup.run_dir), ["cluster", "notes"], "only the fabric's file went");
    // A claim the fabric wrote goes.
    put("cluster", "mu-shm cluster 0x6a07 layout 1 protocol mu/2\n");
    ok(mu(&["cluster", "down", "--config", setup.config(), "--purge"]));
    assert_eq!(names(&setup.run_dir), ["notes"]);
}

/// Three consecutive loopback ports free now, the first returned (replica `id` serves its
/// metrics on `port_base + id`).
fn free_port_base() -> u16 {
    for _ in 0..100 {
        let first = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let base = first.local_addr().unwrap().port();
        let rest: Vec<_> = (1..3)
            .filter_map(|i| base.checked_add(i))
            .filter_map(|port| std::net::TcpListener::bind(("127.0.0.1", port)).ok())
            .collect();
        if rest.len() == 2 {
            return base;
        }
    }
    panic!("no three consecutive free ports");
}

/// Sends `GET /metrics` to `port` and returns the whole answer.
fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer before the read timeout");
    answer
}

/// The metrics endpoint answers a scrape with the replica's figures. It serves one client at
/// a time, so one that sends nothing, or a request line without end, gets a bounded share of
/// it: the scrape behind them is answered in seconds (it waited for ever behind the first).
#[test]
fn the_metrics_endpoint_answers_past_stalled_clients() {
    use std::io::Write;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("metrics", 0x6a06);
    let port = free_port_base();
    let mut text = std::fs::read_to_string(&setup.config).unwrap();
    text.push_str(&format!("\n[metrics]\nport_base = {port}\n"));
    std::fs::write(&setup.config, text).unwrap();
    ok(mu(&["cluster", "up", "--config", setup.config()]));
    ok(mu(&["kv", "put", "color", "green", "--config", setup.config()]));
    let answer = scrape(port);
    assert!(answer.starts_with("HTTP/1.0 200 OK"), "{answer}");
    assert!(answer.contains("\nmu_requests_total "), "{answer}");

    let silent = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut endless = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    endless.set_write_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    // As much as the socket takes: the endpoint reads a few KiB of it at most.
    let _ = endless.write_all(&[b'x'; 1 << 20]);
    let started = std::time::Instant::now();
    let answer = scrape(port);
    assert!(answer.starts_with("HTTP/1.0 200 OK"), "{answer}");
    let waited = started.elapsed();
    assert!(waited < std::time::Duration::from_secs(15), "answered after {waited:?}");
    drop((silent, endless));
    ok(mu(&["cluster", "down", "--config", setup.config()]));
}
