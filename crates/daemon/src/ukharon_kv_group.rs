//! A uKharon-KV cluster's group: the `mu ukharon` group its file's `[ukharon]` section makes,
//! completed from the cluster's own keys, and where its two planes keep their shared memory.
//! (Apart from the processes' code, so that the cluster file's checks can use it.)

use crate::ukharon::config::UkharonConfig;
use mu_service::ClusterConfig;
use std::path::PathBuf;
use toml::Value;

/// The keys of a group file that the cluster's own keys give.
const GIVEN_KEYS: [(&str, &str); 5] = [
    ("cluster", "cluster_id"),
    ("run_dir", "run_dir"),
    ("members", "replicas"),
    ("fabric", "fabric"),
    ("ofi", "[ofi]"),
];

/// Where the membership's shm fabric, and the coordinators' status files, are.
pub fn membership_dir(config: &ClusterConfig) -> PathBuf {
    config.run_dir.join("membership")
}

/// Where the data plane's shm fabric is.
pub fn data_dir(config: &ClusterConfig) -> PathBuf {
    config.run_dir.join("data")
}

/// The uKharon group of a uKharon-KV cluster: `[ukharon]` with the cluster's id, the
/// membership's run directory and the replicas as members, checked as a `mu ukharon` file is.
/// Errors name the key as the cluster's file has it (`ukharon.lease_ns`).
pub fn group(config: &ClusterConfig) -> Result<UkharonConfig, String> {
    let mut table = config.ukharon.clone().ok_or("ukharon: missing")?;
    for (key, instead) in GIVEN_KEYS {
        if table.contains_key(key) {
            return Err(format!(
                "ukharon.{key}: not a key of [ukharon] (the cluster's {instead} gives it)"
            ));
        }
    }
    let cluster = i64::try_from(config.cluster_id)
        .map_err(|_| format!("cluster_id: {} is too large for uKharon", config.cluster_id))?;
    let members = config.replicas.iter().map(|&r| Value::Integer(r.into())).collect();
    table.insert("cluster".into(), Value::Integer(cluster));
    table.insert("run_dir".into(), Value::String(membership_dir(config).display().to_string()));
    table.insert("members".into(), Value::Array(members));
    let mut group = UkharonConfig::from_table(&table).map_err(|e| format!("ukharon.{e}"))?;
    if !group.membership.caches.is_empty() {
        return Err("ukharon.caches: uKharon-KV's replicas renew with the coordinators".into());
    }
    group.membership.name_primary = true;
    Ok(group)
}
