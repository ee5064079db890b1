//! `mu cluster up`, `status` and `down` for clusters of an unmodified Redis and Memcached, as a
//! user runs them: up returns once a leader's front serves, status shows each replica's role and
//! its server's digest (and a crashed replica, with the way back), down removes what the
//! replicas and their servers left.

mod common;

use common::{mu, ok, Setup};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Sends `request` on `socket` and reads until the reply ends with `end`.
fn call(socket: &std::path::Path, request: &[u8], end: &[u8]) -> Vec<u8> {
    let mut stream = UnixStream::connect(socket).expect("the front's socket");
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(request).unwrap();
    let mut reply = Vec::new();
    let mut chunk = [0u8; 256];
    while !reply.ends_with(end) {
        let n = stream.read(&mut chunk).expect("a reply");
        assert!(n > 0, "the front closed after {:?}", String::from_utf8_lossy(&reply));
        reply.extend_from_slice(&chunk[..n]);
    }
    reply
}

fn status_json(setup: &Setup) -> Vec<serde_json::Value> {
    let text = ok(mu(&["cluster", "status", "--config", setup.config(), "--json"]));
    serde_json::from_str::<serde_json::Value>(&text)
        .expect("status JSON")
        .as_array()
        .unwrap()
        .clone()
}

fn up_status_down(app: &str, cluster_id: u64, write: &[u8], written: &[u8], empty: &str) {
    let setup = Setup::new(&format!("apps-{app}"), cluster_id);
    let text = format!(
        "cluster_id = {cluster_id}\napp = \"{app}\"\nrun_dir = \"{}\"\nreplicas = [0, 1, 2]\n\n\
         [log]\nslots = 1024\nslot_bytes = 16416\n\n[detector]\nread_period_us = 4000\n",
        setup.run_dir.display()
    );
    std::fs::write(&setup.config, text).unwrap();
    let up = ok(mu(&["cluster", "up", "--config", setup.config()]));
    assert!(up.contains("leader: replica"), "{up}");
    assert!(up.contains(&format!("{app} front")), "{up}");
    // A write through a follower's front (it relays to the leader): every server holds it.
    let rows = status_json(&setup);
    let follower = rows.iter().find(|r| r["leads"] == false).expect("a follower")["id"].as_u64();
    let front = setup.run_dir.join(format!("{app}-{}.sock", follower.unwrap()));
    assert!(call(&front, write, b"\r\n").ends_with(written));
    let deadline = Instant::now() + Duration::from_secs(20);
    let rows = loop {
        let rows = status_json(&setup);
        assert_eq!(rows.iter().filter(|r| r["leads"] == true).count(), 1, "{rows:?}");
        let digests: Vec<&serde_json::Value> = rows.iter().map(|r| &r["digest"]).collect();
        let applied = digests.iter().all(|d| d.as_str().is_some_and(|d| !d.contains(empty)));
        if applied && digests.iter().all(|d| *d == digests[0]) {
            break rows;
        }
        assert!(Instant::now() < deadline, "the servers never agreed: {rows:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    // A crashed replica: shown down, with the way back.
    let crashed = rows.iter().find(|r| r["leads"] == false).unwrap();
    let pid = crashed["pid"].as_i64().expect("a pid") as libc::pid_t;
    // SAFETY: `kill` takes no pointers; the pid is a replica this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let table = loop {
        let table = ok(mu(&["cluster", "status", "--config", setup.config()]));
        if table.contains("--rejoin") {
            break table;
        }
        assert!(Instant::now() < deadline, "the crash never showed: {table}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(table.contains(" down "), "{table}");
    assert!(table.contains("leader: replica"), "two of three still agree: {table}");
    ok(mu(&["cluster", "down", "--config", setup.config(), "--purge"]));
    assert!(!setup.run_dir.exists(), "down --purge left files behind");
}

#[test]
fn a_redis_cluster_comes_up_shows_its_state_and_goes_down() {
    let set = b"*3\r\n$3\r\nSET\r\n$5\r\ncolor\r\n$4\r\nblue\r\n";
    up_status_down("redis", 0x7c01, set, b"+OK\r\n", "(0 keys)");
}

#[test]
fn a_memcached_cluster_comes_up_shows_its_state_and_goes_down() {
    let set = b"set color 0 0 4\r\nblue\r\n";
    up_status_down("memcached", 0x7c02, set, b"STORED\r\n", "(0 items)");
}
