//! Node processes' pid files, `<run_dir>/ukharon-<id>.pid`: what a node writes, and what `up`,
//! `status` and `down` find in one. A pid is believed only once `/proc` shows it runs
//! `mu ukharon node ... --id <id>`, checked through a pidfd taken first, as `mu cluster` does.

use super::config::UkharonConfig;
use mu_procs::pid_file::{pid_file_text, read_pid, PidText, Target};

/// What a node's pid file says.
pub enum NodePid {
    Missing,
    /// It names no running node (why).
    Stale(String),
    Running(Target),
    /// A running node of another cluster (its id) shares the run directory: left alone.
    Foreign(Target, u64),
}

pub fn inspect(config: &UkharonConfig, id: u16) -> Result<NodePid, String> {
    let PidText { pid, cluster } = match read_pid(&config.pid_path(id))? {
        None => return Ok(NodePid::Missing),
        Some(Err(why)) => return Ok(NodePid::Stale(why)),
        Some(Ok(text)) => text,
    };
    let Some(target) = Target::open(pid)? else {
        return Ok(NodePid::Stale(format!("pid {pid} is not running")));
    };
    match is_node(pid, id) {
        // Read while the pidfd was open: if the process still lives, the pid was not reused.
        Some(true) if !target.exited() => match cluster {
            Some(other) if other != config.membership.cluster => {
                Ok(NodePid::Foreign(target, other))
            }
            _ => Ok(NodePid::Running(target)),
        },
        Some(false) => Ok(NodePid::Stale(format!("pid {pid} is another program, left alone"))),
        _ => Ok(NodePid::Stale(format!("pid {pid} is not running"))),
    }
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

/// Whether process `pid` runs `mu ukharon node ... --id <id>`; `None` if it is gone.
fn is_node(pid: u32, id: u16) -> Option<bool> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name, which is in parentheses and may hold anything.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    if matches!(state, Some('Z' | 'X') | None) {
        return None;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let id = id.to_string();
    let is_node = argv.get(1) == Some(&&b"ukharon"[..])
        && argv.get(2) == Some(&&b"node"[..])
        && argv.windows(2).any(|w| w[0] == b"--id" && w[1] == id.as_bytes());
    Some(is_node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_node_process_counts_as_one() {
        assert_eq!(is_node(std::process::id(), 0), Some(false));
    }
}
