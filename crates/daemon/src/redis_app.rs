//! `mu replica` with `app = "redis"`: the replica's state machine is its own `redis-server`,
//! fed Redis's effect stream, and clients speak RESP to its front (`docs/apps/redis.md`). Beside
//! the service's applications rather than one of them: there is no (client, seq) request and no
//! reply from the state machine, and the front speaks RESP, not the service's wire.

use crate::interrupt;
use crate::replica_support::write_private;
use mu_procs::pid_file::pid_file_text;
use mu_redis::{NodeConfig, RedisMachine, RedisNode};
use mu_replica::ReplicaConfig;
use mu_service::ClusterConfig;
use std::sync::Arc;
use std::time::Duration;
use tracing::info;

const LOG_TARGET: &str = "mu::serve";

/// Runs replica `id` of a Redis cluster until SIGINT or SIGTERM, or until it stops serving.
pub fn run(config: &ClusterConfig, id: u16, replica_config: ReplicaConfig) -> Result<(), String> {
    // A rejoining replica (not eligible until taken back) did not apply the log from its
    // start: it holds no history of the committed stream to rebuild its server from, until a
    // state transfer gives it one.
    let (machine, feed) = RedisMachine::new(replica_config.eligible);
    let replica =
        Arc::new(crate::replica_support::start_replica(config, id, replica_config, machine)?);
    let pid_path = config.pid_path(id);
    write_private(&pid_path, &pid_file_text(std::process::id(), config.cluster_id))
        .map_err(|e| format!("writing {}: {e}", pid_path.display()))?;
    let node_config = NodeConfig {
        id,
        run_dir: config.run_dir.clone(),
        server_binary: crate::app_state::ExternalApp::Redis.server_binary(),
        entry_bytes_max: (config.log.slot_bytes - mu_log::MIN_SLOT_BYTES) as usize,
        client_address: config.client_address(id),
        // A snapshot is the RDB and the stream after it: a quarter of the largest for the
        // stream leaves room for the RDB.
        compact_bytes: (config.snapshot_bytes() / 4) as usize,
    };
    let node = RedisNode::start(node_config, replica.clone(), feed)?;
    info!(
        target: LOG_TARGET,
        replica = id,
        front = %NodeConfig::front_socket(&config.run_dir, id).display(),
        pid = std::process::id(),
        "serving redis"
    );
    while interrupt::check().is_ok() {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(failure) = replica.failure() {
            return Err(format!("replica {id} stopped: {failure}"));
        }
        if let Some(failure) = node.failure() {
            // Its pid file stays: it restarts only with --rejoin, as after a crash.
            return Err(failure);
        }
    }
    drop(node);
    let _ = std::fs::remove_file(&pid_path);
    Ok(())
}
