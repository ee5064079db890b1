//! Pieces shared by the multi-process shm tests.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// A fresh, owner-only run directory for one test's replica processes, named by `tag` and this
/// process: in /dev/shm when there is one (the fabric's files are shared memory), else the
/// temporary directory. Whatever an earlier run left under that name is removed first.
pub fn fresh_run_dir(tag: &str) -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("mu-replica-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new().mode(0o700).create(&dir).expect("run dir");
    dir
}

/// Replica `id` of a cluster of replicas 0, 1 and 2 on `dir`, for tests that run all three in
/// this process: its fabric node, and a configuration with a small log (256 slots of 128
/// bytes) and the defaults otherwise.
#[allow(dead_code)] // not every test binary that shares this module starts replicas in-process
pub fn in_process_replica(
    dir: &Path,
    cluster_id: u64,
    id: u16,
) -> (mu_fabric_shm::ShmFabric, mu_replica::ReplicaConfig) {
    use mu_fabric::NodeId;
    let fabric = mu_fabric_shm::ShmFabric::create(mu_fabric_shm::ShmConfig::new(
        dir,
        cluster_id,
        NodeId(id),
    ))
    .expect("fabric");
    let mut config = mu_replica::ReplicaConfig::new(NodeId(id), (0..3).map(NodeId).collect());
    config.slots_count = 256;
    config.slot_bytes = 128;
    (fabric, config)
}
