//! Replicas' pid files: what `mu replica` writes, and what `mu cluster` finds in one (a
//! running replica of this cluster or of another one, or a stale file).

use mu_procs::pid_file::{read_pid, PidText, Target};
use mu_service::ClusterConfig;

/// What a replica's pid file says.
pub enum PidFile {
    Missing,
    /// It names no running replica (why).
    Stale(String),
    Running(Target),
    /// It names a running replica of another cluster (its id), which shares this run
    /// directory: left alone.
    Foreign(Target, u64),
}

pub fn inspect_pid_file(config: &ClusterConfig, id: u16) -> Result<PidFile, String> {
    let PidText { pid, cluster } = match read_pid(&config.pid_path(id))? {
        None => return Ok(PidFile::Missing),
        Some(Err(why)) => return Ok(PidFile::Stale(why)),
        Some(Ok(text)) => text,
    };
    let Some(target) = Target::open(pid)? else {
        return Ok(PidFile::Stale(format!("pid {pid} is not running")));
    };
    match is_replica(pid, id) {
        // The check read `/proc/<pid>` while the pidfd was open: if its process is still alive
        // now, the pid was not reused in between, and what was read is that process.
        Some(true) if !target.exited() => match cluster {
            Some(other) if other != config.cluster_id => Ok(PidFile::Foreign(target, other)),
            _ => Ok(PidFile::Running(target)),
        },
        Some(false) => {
            Ok(PidFile::Stale(format!("pid {pid} is another program, which was left alone")))
        }
        _ => Ok(PidFile::Stale(format!("pid {pid} is not running"))),
    }
}

/// Whether process `pid` runs `mu replica ... --id <id>`; `None` if it is gone.
fn is_replica(pid: u32, id: u16) -> Option<bool> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name, which is in parentheses and may hold anything.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    if matches!(state, Some('Z' | 'X') | None) {
        return None;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let id = id.to_string();
    let is_replica = argv.get(1) == Some(&&b"replica"[..])
        && argv.windows(2).any(|w| w[0] == b"--id" && w[1] == id.as_bytes());
    Some(is_replica)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_replica_process_counts_as_one() {
        // This test process is not `mu replica`.
        assert_eq!(is_replica(std::process::id(), 0), Some(false));
        let target = Target::open(std::process::id()).unwrap().expect("we run");
        assert!(!target.exited());
    }
}
