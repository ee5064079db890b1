//! What the daemon's commands share about fabrics, and nothing else of the crate: what a build
//! without libfabric says, a node's libfabric configuration from an `[ofi]` section, and the
//! wait of a fabric control call. (A leaf, so that the cluster file's checks and the uKharon
//! group's can both use it.)

#[cfg(feature = "ofi")]
use mu_fabric::NodeId;
#[cfg(feature = "ofi")]
use mu_fabric_ofi::{NodeAddr, OfiConfig};

/// What a build without the libfabric fabric says when asked for it.
pub const OFI_NOT_BUILT: &str = "this mu was built without the libfabric fabric (cargo feature \
    `ofi` of mu-cli, on by default; it needs the system's libfabric, Debian libfabric-dev): \
    rebuild with default features, or use the shm fabric";

/// Node `id`'s configuration of the libfabric fabric, with the default timeouts, from an
/// `[ofi]` section's provider and addresses (a cluster's file, or a uKharon group's).
#[cfg(feature = "ofi")]
pub fn ofi_config_from(
    provider: &str,
    cluster_id: u64,
    id: u16,
    addresses: &[mu_service::config::OfiAddress],
) -> OfiConfig {
    let nodes = addresses
        .iter()
        .map(|a| (NodeId(a.id), NodeAddr { host: a.host.clone(), base_port: a.base_port }))
        .collect();
    OfiConfig::new(provider, cluster_id, NodeId(id), nodes)
}

/// How long one of a replica's fabric control calls may wait on the network: a quarter of the
/// heartbeat read period, within [50 µs, 1 ms]. The background plane beats its heartbeat on
/// the thread that binds connections and fences peers, and a poll may make a few such calls;
/// together they must stay within about a read period, or the other replicas read the same
/// counter twice and lower this one's score. A binding or fence not done by then goes on in
/// the fabric and is taken up on the next poll.
pub fn call_wait_us(read_period_us: u64) -> u64 {
    (read_period_us / 4).clamp(50, 1000)
}
