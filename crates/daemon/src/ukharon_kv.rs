//! `mu replica` for a uKharon-KV cluster (`protocol = "ukharon-kv"`): the process of one of
//! its replicas, or of one of its coordinators (a Mu or Velos cluster with `reads = "lease"`
//! runs its coordinators here too).
//!
//! The group is a `mu ukharon` group ([`crate::ukharon`]) whose file is the cluster's
//! `[ukharon]` section completed from the cluster's own keys ([`group`]): its members are the
//! replicas, its run directory `<run_dir>/membership`, and every view names a primary
//! (`name_primary`). A coordinator runs as `mu ukharon node` runs one. A replica holds two shm
//! fabric nodes with its id: its membership node in `<run_dir>/membership` (the membership's
//! channels moved onto shm's four, `Shifted`) and its data node in `<run_dir>/data`, where the
//! primary writes its records into the backups; the server in front answers clients as a Mu
//! replica does ([`mu_service::ukharon_kv`]).

use crate::config::run_dir_warning;
use crate::interrupt;
use crate::replica_support::{serve_clients, write_private};
use crate::ukharon::config::UkharonConfig;
use crate::ukharon::node::SHM_PROTOCOL;
pub use crate::ukharon_kv_group::{data_dir, group, membership_dir};
use mu_fabric::NodeId;
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_membership::channels::{Shifted, SHIFT_TO_FOUR_CHANNELS};
use mu_membership::{JoinOptions, Membership, Polling};
use mu_procs::pid_file::pid_file_text;
use mu_service::ukharon_kv::UkharonKvBackend;
use mu_service::{Backend, ClusterConfig};
use mu_ukharon::restart::Memory;
use mu_ukharon_kv::{KvLayout, KvNode, KvSettings};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What runs on the data plane's shm fabric (a Mu replica or a membership node refuses it).
pub const DATA_PROTOCOL: &str = "ukharon-kv/1";
/// How often a primary reads the follow word of a backup whose snapshot it waits for.
const INSTALL_POLL_NS: u64 = 200_000;

/// How long a replica waits for a view that admits it (the coordinators may be starting).
pub(crate) const JOIN_WAIT: Duration = Duration::from_secs(30);
/// How often [`wait_serving`] asks.
const SERVING_POLL: Duration = Duration::from_millis(10);

/// Waits until replica `id` serves as the primary or a backup of a view, asking it for its
/// status; fails on what `check` fails on (the process exited, an interrupt) or after
/// `timeout`.
///
/// The replicas of a new group start one at a time, each once the one before serves: the
/// first member of a group starts the store and the others get it by snapshot, and a node
/// learns views, not the history before them. Members admitted in one view with the first,
/// or the first's node learning a later view before the one that admitted it alone, would
/// leave nobody that knows it holds the whole (empty) store, and a primary that cannot serve.
pub fn wait_serving(
    config: &ClusterConfig,
    id: u16,
    timeout: Duration,
    mut check: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut client = mu_service::Client::new(config.cluster_id, config.endpoints())
        .map_err(|e| e.to_string())?;
    loop {
        check()?;
        let last = match client.status(id) {
            Ok(r) if matches!(r.role.as_deref(), Some("primary" | "backup")) => return Ok(()),
            Ok(r) => {
                let role = format!("role {}", r.role.as_deref().unwrap_or("none"));
                r.problem.map_or(role.clone(), |problem| format!("{role} ({problem})"))
            }
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "replica {id} does not serve a view after {} s: {last}",
                timeout.as_secs()
            ));
        }
        std::thread::sleep(SERVING_POLL);
    }
}

/// Runs process `id` of the cluster, a replica or a coordinator, until SIGINT or SIGTERM; its
/// pid file is written once it takes part and removed when it stops cleanly. `rejoin`: a
/// coordinator restarts without its memory (it abstains until it is safe to vote); without
/// it, a coordinator starts with the whole group.
pub fn run(config: &ClusterConfig, id: u16, rejoin: bool) -> Result<(), String> {
    let group = group(config)?;
    private_dir(&membership_dir(config))?;
    if config.is_ukharon_kv() {
        private_dir(&data_dir(config))?;
    }
    if let Some(warning) = run_dir_warning(config) {
        tracing::warn!(replica = id, "{warning}");
    }
    let pid_path = config.pid_path(id);
    let write_pid = || {
        write_private(&pid_path, &pid_file_text(std::process::id(), config.cluster_id))
            .map_err(|e| format!("writing {}: {e}", pid_path.display()))
    };
    let polling = Polling::from_gap_ns(group.poll_gap_ns);
    let membership = membership_fabric(&group, id)?;
    let stopped = if group.membership.coordinators.contains(&id) {
        write_pid()?;
        tracing::info!(coordinator = id, cluster_id = config.cluster_id, "coordinating");
        let memory = if rejoin { Memory::Forgotten } else { Memory::Remembered };
        crate::ukharon::node::coordinator(&group, id, membership, polling, memory)
    } else if config.replicas.contains(&id) && config.is_ukharon_kv() {
        replica(config, &group, id, membership, polling, write_pid)
    } else {
        return Err(format!(
            "node {id} is neither a replica nor a coordinator of this cluster (replicas {:?}, \
             ukharon.coordinators {:?})",
            config.replicas, group.membership.coordinators
        ));
    };
    if stopped.is_ok() {
        let _ = std::fs::remove_file(&pid_path);
    }
    stopped
}

pub(crate) fn private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("creating {}: {e}", dir.display()))
}

pub(crate) fn membership_fabric(
    group: &UkharonConfig,
    id: u16,
) -> Result<Shifted<ShmFabric>, String> {
    let shm = ShmConfig::new(&group.run_dir, group.membership.cluster, NodeId(id))
        .with_protocol(SHM_PROTOCOL);
    let shm = ShmFabric::create(shm).map_err(|e| format!("node {id}: membership fabric: {e}"))?;
    Ok(Shifted::new(shm, SHIFT_TO_FOUR_CHANNELS))
}

/// The sizes and timings of a replica's data plane.
fn settings(config: &ClusterConfig, group: &UkharonConfig) -> Result<KvSettings, String> {
    let ring = mu_primary_backup::Ring::new(config.log.slots, config.log.slot_bytes as usize)
        .map_err(|e| format!("log: {e}"))?;
    let snapshot_bytes_max = usize::try_from(config.snapshot_bytes())
        .map_err(|_| "log.snapshot_bytes: too large for this host".to_string())?;
    let layout = KvLayout { ring, snapshot_bytes_max, nodes_max: group.membership.nodes_max };
    Ok(KvSettings {
        layout,
        reconnect_ns: group.membership.reconnect_ns,
        install_poll_ns: INSTALL_POLL_NS,
        data_node_offset: 0,
    })
}

/// A replica: its membership joins the group, its node serves the data plane, and the server
/// answers clients, until interrupted.
fn replica(
    config: &ClusterConfig,
    group: &UkharonConfig,
    id: u16,
    membership: Shifted<ShmFabric>,
    polling: Polling,
    write_pid: impl Fn() -> Result<(), String>,
) -> Result<(), String> {
    let started = Instant::now();
    // Admitted before its node starts, so that the node learns the view that admitted it
    // (the first member's starts the store).
    let options = JoinOptions { polling, timeout: JOIN_WAIT, incarnation: None };
    let membership =
        Membership::join_watching(membership, group.membership.clone(), group.lease, options)
            .map_err(|e| format!("replica {id}: joining the group: {e}"))?;
    let data = ShmConfig::new(data_dir(config), config.cluster_id, NodeId(id))
        .with_protocol(DATA_PROTOCOL);
    let data = ShmFabric::create(data).map_err(|e| format!("replica {id}: data fabric: {e}"))?;
    let node = KvNode::start(data, membership, settings(config, group)?, polling)
        .map_err(|e| format!("replica {id}: {e}"))?;
    write_pid()?;
    let backend: Arc<dyn Backend> = Arc::new(UkharonKvBackend { node });
    let (server, metrics) = serve_clients(config, id, backend.clone(), started)?;
    tracing::info!(
        replica = id,
        cluster_id = config.cluster_id,
        socket = %config.socket_path(id).display(),
        pid = std::process::id(),
        "serving (ukharon-kv)"
    );
    while interrupt::check().is_ok() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = backend.report(started);
    tracing::info!(replica = id, role = report.role, epoch = report.epoch, "stopping");
    drop(metrics);
    drop(server);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(ukharon: &str) -> ClusterConfig {
        let text = format!(
            "cluster_id = 9\nprotocol = \"ukharon-kv\"\nrun_dir = \"/dev/shm/x\"\n\
             replicas = [3, 4, 5]\n[ukharon]\ncoordinators = [0, 1, 2]\n{ukharon}"
        );
        ClusterConfig::parse(&text).unwrap()
    }

    #[test]
    fn the_group_is_the_cluster_file_with_the_replicas_as_members() {
        let g = group(&cluster("lease_ns = 3_000_000\n[ukharon.lease]\nlease_max_ns = 9_000_000"))
            .unwrap();
        assert_eq!(g.members, vec![3, 4, 5]);
        assert_eq!(g.membership.coordinators, vec![0, 1, 2]);
        assert_eq!(g.membership.cluster, 9);
        assert_eq!(g.membership.lease_ns, 3_000_000);
        assert_eq!(g.lease.lease_max_ns, 9_000_000);
        assert!(g.membership.name_primary, "every view names a primary");
        assert_eq!(g.run_dir, Path::new("/dev/shm/x/membership"));
    }

    #[test]
    fn group_errors_name_the_key_as_the_cluster_file_has_it() {
        let key_of = |ukharon: &str| {
            let e = group(&cluster(ukharon)).unwrap_err();
            e.split(':').next().unwrap().to_string()
        };
        assert_eq!(key_of("members = [3]"), "ukharon.members");
        assert_eq!(key_of("run_dir = \"/tmp\""), "ukharon.run_dir");
        assert_eq!(key_of("lease_nss = 5"), "ukharon.lease_nss");
        assert_eq!(key_of("beat_timeout_ns = -1"), "ukharon.beat_timeout_ns");
        assert_eq!(key_of("[ukharon.lease]\ndrift_ppm = 900000"), "ukharon.lease.drift_ppm");
        assert_eq!(key_of("caches = [6]"), "ukharon.caches");
    }
}
