//! `mu replica` with `app = "memcached"`: the replica's state machine applies each committed
//! request to its own `memcached`, and clients speak memcached's text protocol to its front
//! (`docs/apps/memcached.md`). Beside the service's applications rather than one of them, as
//! Redis is: the front speaks memcached's protocol, not the service's wire.

use crate::interrupt;
use crate::replica_support::write_private;
use mu_memcached::server::{MemcachedServer, ServerPaths};
use mu_memcached::{MemcachedMachine, MemcachedNode, NodeConfig};
use mu_procs::pid_file::pid_file_text;
use mu_replica::ReplicaConfig;
use mu_service::ClusterConfig;
use std::sync::Arc;
use std::time::Duration;
use tracing::info;

const LOG_TARGET: &str = "mu::serve";

/// Runs replica `id` of a Memcached cluster until SIGINT or SIGTERM, or until it stops serving.
pub fn run(config: &ClusterConfig, id: u16, replica_config: ReplicaConfig) -> Result<(), String> {
    // The server first: the state machine applies to it from the first entry on. It dies with
    // this thread.
    let server = MemcachedServer::start(
        &crate::app_state::ExternalApp::Memcached.server_binary(),
        ServerPaths::new(&config.run_dir, id),
    )?;
    let (machine, shared) = MemcachedMachine::new(id, &server.paths.socket)?;
    let replica =
        Arc::new(crate::replica_support::start_replica(config, id, replica_config, machine)?);
    let pid_path = config.pid_path(id);
    write_private(&pid_path, &pid_file_text(std::process::id(), config.cluster_id))
        .map_err(|e| format!("writing {}: {e}", pid_path.display()))?;
    let node_config = NodeConfig {
        id,
        run_dir: config.run_dir.clone(),
        server_socket: server.paths.socket.clone(),
        entry_bytes_max: (config.log.slot_bytes - mu_log::MIN_SLOT_BYTES) as usize,
        client_address: config.client_address(id),
        client_addresses: config.client_addresses()?.unwrap_or_default(),
    };
    let node = MemcachedNode::start(node_config, replica.clone(), shared)?;
    info!(
        target: LOG_TARGET,
        replica = id,
        front = %NodeConfig::front_socket(&config.run_dir, id).display(),
        pid = std::process::id(),
        "serving memcached"
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
