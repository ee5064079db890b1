//! A cluster file as every command reads it, and what the daemon derives from it: the
//! libfabric configuration of a replica, the wait of its fabric calls, and warnings about a
//! run directory or thread choice that will hurt.

#[cfg(feature = "ofi")]
use mu_fabric_ofi::OfiConfig;
use mu_service::ClusterConfig;

#[cfg(feature = "ofi")]
pub use crate::fabric_config::ofi_config_from;
pub use crate::fabric_config::{call_wait_us, OFI_NOT_BUILT};

/// Loads and checks a cluster configuration, the fabric's own checks included (an ofi
/// provider and its ports), so that every command that reads the file refuses the same
/// mistakes, not only the ones that start replicas.
pub fn load_config(path: &std::path::Path) -> Result<ClusterConfig, String> {
    let config = ClusterConfig::load(path)?;
    #[cfg(feature = "ofi")]
    if let (true, Some(&first)) = (config.fabric == "ofi", config.replicas.first()) {
        ofi_config(&config, first)?.validate().map_err(|e| format!("{}: {e}", path.display()))?;
    }
    #[cfg(not(feature = "ofi"))]
    if config.fabric == "ofi" {
        return Err(format!("{}: fabric = \"ofi\": {OFI_NOT_BUILT}", path.display()));
    }
    if config.has_group() {
        crate::ukharon_kv_group::group(&config).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(config)
}

/// Replica `id`'s configuration of the libfabric fabric (`fabric = "ofi"`).
#[cfg(feature = "ofi")]
pub fn ofi_config(config: &ClusterConfig, id: u16) -> Result<OfiConfig, String> {
    let addresses = config.ofi_addresses()?;
    let mut ofi = ofi_config_from(config.ofi_provider(), config.cluster_id, id, &addresses);
    ofi.call_wait_us = Some(call_wait_us(config.detector.read_period_us));
    Ok(ofi)
}

/// A warning for a run directory that the shm fabric would use on a disk file system (see
/// `mu_fabric_shm::layout::memory_backed`), if that is where it is.
pub fn run_dir_warning(config: &mu_service::ClusterConfig) -> Option<String> {
    if config.fabric != "shm" {
        return None;
    }
    match mu_fabric_shm::layout::memory_backed(&config.run_dir) {
        Ok(false) => Some(format!(
            "run_dir {} is not on tmpfs: the replicas' logs are shared memory in files there, \
             which the kernel writes back to disk, so every write to a log becomes disk traffic \
             and latency suffers; put it under /dev/shm or $XDG_RUNTIME_DIR",
            config.run_dir.display()
        )),
        _ => None,
    }
}

/// Spinning threads of a replica with `threads = "dedicated"`: its working thread, its
/// background thread and, on shm, the fabric's liveness thread.
const DEDICATED_SPINNERS_PER_REPLICA: usize = 3;

/// A warning for `threads = "dedicated"` where the replicas' spinning threads outnumber the
/// CPUs this process may use: they then starve the threads that must run, and failures are
/// suspected for no reason. On shm every replica of the cluster runs on this host.
pub fn threads_warning(config: &mu_service::ClusterConfig) -> Option<String> {
    if config.threads().ok()? != mu_replica::Threads::Dedicated {
        return None;
    }
    let here = if config.fabric == "shm" { config.replicas.len() } else { 1 };
    let spinning = DEDICATED_SPINNERS_PER_REPLICA * here;
    let cpus = mu_cpu::allowed_cpus().len();
    (cpus < spinning).then(|| {
        format!(
            "threads = \"dedicated\" spins about {DEDICATED_SPINNERS_PER_REPLICA} threads per \
             replica ({spinning} for the {here} on this host) and this process may use {cpus} \
             CPUs: the spinning threads will starve the others and replicas will be suspected \
             of failing; use threads = \"shared\" here"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replicas_fabric_calls_wait_a_quarter_of_its_read_period() {
        assert_eq!(call_wait_us(1000), 250);
        assert_eq!(call_wait_us(20_000), 1000, "at most 1 ms");
        assert_eq!(call_wait_us(100), 50, "at least 50 µs");
    }
}

#[cfg(test)]
mod ofi_feature_tests {
    use super::*;

    /// A cluster file that asks for the libfabric fabric.
    fn ofi_cluster_file(dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("cluster.toml");
        let text = format!(
            "cluster_id = 7\nfabric = \"ofi\"\nrun_dir = \"{}\"\nreplicas = [0, 1, 2]\n\n\
             [ofi]\nprovider = \"sockets\"\n[ofi.addresses]\n0 = \"127.0.0.1:7100\"\n\
             1 = \"127.0.0.1:7110\"\n2 = \"127.0.0.1:7120\"\n",
            dir.join("run").display()
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A build with the libfabric fabric loads an ofi cluster; one without refuses it with a
    /// message that says why and what to do, before any replica starts.
    #[test]
    fn an_ofi_cluster_is_loaded_only_where_libfabric_was_built_in() {
        let dir = std::env::temp_dir().join(format!("mu-ofi-feature-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let loaded = load_config(&ofi_cluster_file(&dir));
        let _ = std::fs::remove_dir_all(&dir);
        if cfg!(feature = "ofi") {
            assert_eq!(loaded.expect("an ofi cluster loads").fabric, "ofi");
        } else {
            let err = loaded.expect_err("refused without libfabric");
            assert!(err.contains("fabric = \"ofi\"") && err.contains(OFI_NOT_BUILT), "{err}");
        }
    }
}
