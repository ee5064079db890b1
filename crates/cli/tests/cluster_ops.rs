//! `mu cluster`, `mu replica` and `mu kv` as a user runs them: a cluster started in the
//! background, written to and read from the command line, and what happens when a replica or a
//! client of another cluster, or of another protocol version, tries to join it: a message naming
//! the problem and a non-zero exit, with the running cluster unharmed.

mod common;

use common::{mu, ok, refused, Setup};
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
    refused(mu(&["cluster", "status", "--config", alien]), "belongs to cluster");

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
