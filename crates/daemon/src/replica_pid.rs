//! Replicas' pid files: what `mu cluster` finds in one (a running replica of this cluster or of
//! another one, or a stale file).

pub use mu_procs::pid_file::PidFile;
use mu_procs::pid_file::{inspect, OurCommand};
use mu_service::ClusterConfig;

pub fn inspect_pid_file(config: &ClusterConfig, id: u16) -> Result<PidFile, String> {
    inspect(&config.pid_path(id), config.cluster_id, &OurCommand { words: &["replica"], id })
}
