//! What every replica process of the daemon shares, Mu, Velos, Redis or uKharon-KV: its
//! fabric and replica started as the configuration says, its client server, its metrics
//! endpoint and the private files it writes.

#[cfg(feature = "ofi")]
use crate::config::ofi_config;
use mu_fabric::NodeId;
#[cfg(feature = "ofi")]
use mu_fabric_ofi::OfiFabric;
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_replica::Replica;
use mu_service::config::Transport;
use mu_service::metrics::MetricsServer;
use mu_service::server::ServerLimits;
use mu_service::{ClusterConfig, Server};
use std::sync::Arc;
use std::time::Instant;
use tracing::info;

/// The target of the replica processes' logs.
const LOG_TARGET: &str = "mu::serve";

/// Serves Prometheus text on `port` until the endpoint is dropped, and says where.
fn serve_metrics(
    port: u16,
    sources: mu_service::metrics::Sources,
    id: u16,
) -> Result<mu_service::metrics::MetricsServer, String> {
    let endpoint = mu_service::metrics::serve(port, sources)?;
    let addr = endpoint.address();
    info!(target: LOG_TARGET, replica = id, url = %format_args!("http://{addr}/metrics"), "serving metrics");
    Ok(endpoint)
}

/// Writes `text` to `path`, readable and writable by the owner only, as everything else in a
/// run directory is.
pub(crate) fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
}

/// Serves `backend` to clients (the Unix socket, and TCP where configured) and, where
/// configured, metrics; both until dropped.
pub(crate) fn serve_clients(
    config: &ClusterConfig,
    id: u16,
    backend: Arc<dyn mu_service::Backend>,
    started: Instant,
) -> Result<(Server, Option<MetricsServer>), String> {
    let socket = config.socket_path(id);
    let tcp = config.client_address(id);
    let mut server = Server::start_backend(
        config.cluster_id,
        backend.clone(),
        (&socket, tcp.as_deref()),
        started,
        ServerLimits::default(),
    )?;
    if config.transport()? == Transport::Fabric {
        // A node of the server's own (id 0 of its directory), apart from the replica's: a
        // client's write access covers every region of the node it writes to.
        let dir = config.clients_fabric_dir(id);
        let node = ShmFabric::create(ShmConfig::new(&dir, config.cluster_id, NodeId(0)))
            .map_err(|e| format!("the fabric path's node in {}: {e}", dir.display()))?;
        server.attach_fabric(node, &dir)?;
    }
    let Some(base) = config.metrics.port_base else { return Ok((server, None)) };
    let port = base.checked_add(id).ok_or("metrics.port_base + id is above 65535")?;
    let sources = mu_service::metrics::Sources {
        backend,
        counters: server.counters.clone(),
        started,
        slots_count: config.log.slots,
    };
    let metrics = serve_metrics(port, sources, id)?;
    Ok((server, Some(metrics)))
}

/// Opens this replica's fabric as the configuration says and starts the replica on it.
pub(crate) fn start_replica(
    config: &ClusterConfig,
    id: u16,
    replica_config: mu_replica::ReplicaConfig,
    machine: impl mu_replica::StateMachine,
) -> Result<Replica, String> {
    let fabric_error = |e: mu_fabric::FabricError| format!("replica {id}: fabric: {e}");
    let started = match config.fabric.as_str() {
        #[cfg(not(feature = "ofi"))]
        "ofi" => return Err(crate::config::OFI_NOT_BUILT.into()),
        #[cfg(feature = "ofi")]
        "ofi" => {
            let fabric = OfiFabric::open(ofi_config(config, id)?).map_err(fabric_error)?;
            Replica::start_with_state(replica_config, fabric, config.mode(), machine)
        }
        _ => {
            let mut shm = ShmConfig::new(&config.run_dir, config.cluster_id, NodeId(id))
                .with_protocol(replica_config.protocol.tag());
            shm.liveness_spin = replica_config.threads == mu_replica::Threads::Dedicated;
            let fabric = ShmFabric::create(shm).map_err(fabric_error)?;
            Replica::start_with_state(replica_config, fabric, config.mode(), machine)
        }
    };
    started.map_err(|e| format!("replica {id}: {e}"))
}
