//! Node processes' pid files, `<run_dir>/ukharon-<id>.pid`: what a node writes, and what `up`,
//! `status` and `down` find in one. A pid is believed only once `/proc` shows it runs
//! `mu ukharon node ... --id <id>`, checked through a pidfd taken first, as `mu cluster` does.

use super::config::UkharonConfig;
pub use mu_procs::pid_file::PidFile as NodePid;
use mu_procs::pid_file::{inspect as inspect_file, pid_file_text, OurCommand};

pub fn inspect(config: &UkharonConfig, id: u16) -> Result<NodePid, String> {
    let ours = OurCommand { words: &["ukharon", "node"], id };
    inspect_file(&config.pid_path(id), config.membership.cluster, &ours)
}

/// Writes this process's pid file; it is removed when the returned guard is dropped.
pub fn write_own(config: &UkharonConfig, id: u16) -> Result<PidGuard, String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = config.pid_path(id);
    let text = pid_file_text(std::process::id(), config.membership.cluster);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    file.write_all(text.as_bytes()).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(PidGuard(path))
}

/// Removes a node's own pid file when dropped.
pub struct PidGuard(std::path::PathBuf);

impl Drop for PidGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
