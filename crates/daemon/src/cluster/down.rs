//! `mu cluster down`: every replica named by a pid file stopped, and what the cluster left in
//! its run directory removed.

use super::*;

pub(super) fn down(args: &DownArgs) -> Result<(), String> {
    let config = crate::config::load_config(&args.config)?;
    let dir = &config.run_dir;
    if dir.exists() && !dir.is_dir() {
        return Err(format!("run_dir {} is not a directory", dir.display()));
    }
    if !dir.is_dir() {
        println!("nothing to stop: the run directory {} does not exist", dir.display());
        return Ok(());
    }
    // `up` runs nothing in a directory others may enter or that is not ours; `down` removes
    // nothing from one (a run_dir mistyped as /tmp, or another user's).
    check_run_dir_is_ours(dir).map_err(|e| format!("{e}; nothing was stopped or removed"))?;
    // Every pid file is read before anything is done, so that a run directory another
    // cluster's replicas use is left as it is.
    let mut found = Vec::new();
    for id in config.processes() {
        match inspect_pid_file(&config, id)? {
            PidFile::Foreign(target, other) => return Err(foreign(&config, id, &target, other)),
            pid_file => found.push((id, pid_file)),
        }
    }
    // Everything is signalled first and waited for after, so that stopping takes one wait, not
    // one per replica.
    let mut signalled: Vec<(u16, Target)> = Vec::new();
    for (id, pid_file) in found {
        match pid_file {
            PidFile::Missing => println!("replica {id}: not running (no pid file)"),
            PidFile::Stale(why) => {
                remove_if_exists(&config.pid_path(id))?;
                println!("replica {id}: not running; removed its stale pid file ({why})");
            }
            PidFile::Running(target) => match target.signal(libc::SIGTERM) {
                Ok(()) => signalled.push((id, target)),
                Err(e) => return Err(format!("replica {id}: {e}")),
            },
            PidFile::Foreign(..) => unreachable!("returned above"),
        }
    }
    let term_deadline = Instant::now() + TERM_WAIT;
    let mut left = Vec::new();
    for (id, target) in signalled {
        if target.wait_exit(term_deadline) {
            println!("replica {id}: stopped (pid {}, SIGTERM)", target.pid);
            // It removes its own pid file and socket as it stops; these are for one that
            // died of the signal before it could.
            remove_own_pid_file(&config, id, target.pid);
            continue;
        }
        let killed = target.signal(libc::SIGKILL);
        if killed.is_ok() && target.wait_exit(Instant::now() + KILL_WAIT) {
            println!(
                "replica {id}: killed (pid {}, still running {} s after SIGTERM)",
                target.pid,
                TERM_WAIT.as_secs()
            );
            remove_own_pid_file(&config, id, target.pid);
            let _ = std::fs::remove_file(config.socket_path(id));
        } else {
            let why = killed.err().unwrap_or_else(|| "it did not exit".into());
            left.push(format!("replica {id} (pid {}): {why}", target.pid));
        }
    }
    if !left.is_empty() {
        return Err(format!("still running: {}", left.join("; ")));
    }
    // Whatever runs without a pid file still holds its node's lock in the run directory.
    let held = remove_shared_memory(&config)?;
    if !held.is_empty() {
        return Err(format!(
            "{} still running without a pid file (it holds its lock in {}): stop it by hand",
            held.join(", "),
            dir.display()
        ));
    }
    if let Some(app) = crate::app_state::ExternalApp::of(&config) {
        for &id in &config.replicas {
            super::external::remove_app_files(&config, app, id, args.purge)?;
        }
    }
    if args.purge {
        purge(&config)?;
    }
    Ok(())
}

/// `dir` is owner-only and belongs to this user (or we are root), as `up` made it: checked
/// without writing anything (`ClusterConfig::prepare_run_dir` writes a probe), so that `down`
/// also works on a full or read-only file system.
fn check_run_dir_is_ours(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir).map_err(|e| format!("run_dir {}: {e}", dir.display()))?;
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "run_dir {} is open to other users (mode {:o}): no cluster runs in one, as it must \
             be owner-only",
            dir.display(),
            meta.mode() & 0o777
        ));
    }
    let me = mu_procs::user::euid();
    if me != 0 && meta.uid() != me {
        return Err(format!(
            "run_dir {} belongs to another user (uid {})",
            dir.display(),
            meta.uid()
        ));
    }
    Ok(())
}

fn remove_own_pid_file(config: &ClusterConfig, id: u16, pid: u32) {
    let path = config.pid_path(id);
    if pid_in(&path) == Some(pid) {
        let _ = std::fs::remove_file(&path);
    }
}

/// Removes the fabric's files (each node's control segment, regions and lock, and the
/// directory's cluster file) and the replicas' sockets, node by node while holding the node's
/// lock, so that nothing a running node uses is removed. Returns the nodes whose lock is held.
pub(super) fn remove_shared_memory(config: &ClusterConfig) -> Result<Vec<String>, String> {
    let mut held = remove_fabric_files(config, &config.run_dir)?;
    // The fabric path's nodes (`transport = "fabric"`): each replica's and its clients', in a
    // directory per replica.
    for &id in &config.replicas {
        let dir = config.clients_fabric_dir(id);
        if dir.is_dir() {
            let here = remove_fabric_files(config, &dir)?;
            if here.is_empty() {
                let _ = std::fs::remove_dir(&dir);
            }
            held.extend(here);
        }
    }
    if config.has_group() {
        // uKharon-KV's two planes, each a fabric of its own in a subdirectory; the membership's
        // holds the coordinators' status files too.
        let membership = crate::ukharon_kv::membership_dir(config);
        for dir in [membership.clone(), crate::ukharon_kv::data_dir(config)] {
            if dir.is_dir() {
                held.extend(remove_fabric_files(config, &dir)?);
            }
        }
        for id in config.coordinators().unwrap_or_default() {
            let _ = std::fs::remove_file(membership.join(format!("ukharon-{id}.status.json")));
        }
        if held.is_empty() {
            for dir in [membership, crate::ukharon_kv::data_dir(config)] {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
    Ok(held)
}

/// [`remove_shared_memory`] in one directory.
fn remove_fabric_files(config: &ClusterConfig, dir: &Path) -> Result<Vec<String>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("reading the run directory {}: {e}", dir.display()))?;
    // Node ids named by the fabric's files: `n<id>.lock`, `n<id>.ctl`, `n<id>.i<inc>.r<region>`.
    let mut nodes: Vec<u16> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(id) = fabric_node_of(&name) {
            if !nodes.contains(&id) {
                nodes.push(id);
            }
        }
        names.push(name);
    }
    nodes.sort_unstable();
    let mut held = Vec::new();
    let mut removed = 0usize;
    for &id in &nodes {
        let lock_path = layout::lock_file(dir, NodeId(id));
        let _lock = match NodeLock::take(&lock_path)? {
            NodeLock::Held => {
                held.push(format!("replica {id}"));
                continue;
            }
            NodeLock::Free(lock) => lock,
        };
        for name in names.iter().filter(|n| fabric_node_of(n) == Some(id)) {
            if std::fs::remove_file(dir.join(name)).is_ok() {
                removed += 1;
            }
        }
        if config.replicas.contains(&id) && std::fs::remove_file(config.socket_path(id)).is_ok() {
            removed += 1;
        }
    }
    if held.is_empty() {
        for name in names.iter().filter(|n| is_cluster_file(n) && shm_wrote(&dir.join(n))) {
            if std::fs::remove_file(dir.join(name)).is_ok() {
                removed += 1;
            }
        }
        for &id in &config.replicas {
            if std::fs::remove_file(config.socket_path(id)).is_ok() {
                removed += 1;
            }
        }
    }
    if removed > 0 {
        println!(
            "removed the cluster's shared memory and sockets ({removed} files) from {}",
            dir.display()
        );
    }
    Ok(held)
}

/// The node a file of the fabric belongs to, from its name: `n<id>.lock`, `n<id>.ctl`,
/// `n<id>.ctl.new` (being published) and `n<id>.i<incarnation>.r<region>`, the names
/// `mu_fabric_shm::layout` gives them.
fn fabric_node_of(name: &str) -> Option<u16> {
    /// The number at the start of `s`, and what follows it.
    fn number(s: &str) -> Option<(u64, &str)> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        Some((s[..end].parse().ok()?, &s[end..]))
    }
    let (id, suffix) = number(name.strip_prefix('n')?)?;
    let id = u16::try_from(id).ok()?;
    let is_fabric = match suffix {
        ".lock" | ".ctl" | ".ctl.new" => true,
        _ => suffix
            .strip_prefix(".i")
            .and_then(number)
            .and_then(|(_, rest)| rest.strip_prefix(".r"))
            .and_then(number)
            .is_some_and(|(_, rest)| rest.is_empty()),
    };
    is_fabric.then_some(id)
}

/// The file that claims the run directory for a cluster, and its temporary forms.
fn is_cluster_file(name: &str) -> bool {
    let cluster = layout::cluster_file(Path::new(""));
    let cluster = cluster.to_string_lossy();
    name == cluster || name.starts_with(&format!("{cluster}.new."))
}

/// Whether the file at `path` is one the shared-memory fabric wrote (its claim on the run
/// directory, or the temporary form of one), or empty (a claim cut short): a file of that name
/// that someone else put there is left alone.
fn shm_wrote(path: &Path) -> bool {
    use std::io::Read;
    const MARK: &[u8] = b"mu-shm cluster ";
    use std::os::unix::fs::OpenOptionsExt;
    let mut start = Vec::new();
    // Not through a link, and not waiting on a FIFO put there.
    let read = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .and_then(|f| f.take(MARK.len() as u64).read_to_end(&mut start));
    read.is_ok() && (start.is_empty() || start == MARK)
}

/// Removes the replicas' logs, then the run directory if nothing else is in it.
fn purge(config: &ClusterConfig) -> Result<(), String> {
    let dir = &config.run_dir;
    for id in config.processes() {
        remove_if_exists(&config.log_path(id))?;
        remove_if_exists(&config.pid_path(id))?;
    }
    // A probe is left behind only by a process killed while preparing the directory.
    let probes: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(ClusterConfig::WRITE_PROBE))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    for probe in probes {
        remove_if_exists(&probe)?;
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => println!("removed the run directory {}", dir.display()),
        Err(_) => {
            let others: Vec<String> = std::fs::read_dir(dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            println!(
                "removed the replicas' logs; kept the run directory {}, which holds other files: {}",
                dir.display(),
                others.join(", ")
            );
        }
    }
    Ok(())
}

pub(super) fn remove_if_exists(path: &Path) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("removing {}: {e}", path.display())),
    }
}

/// A node's lock file, taken (the node does not run) or held by a running node.
enum NodeLock {
    Free(Option<File>),
    Held,
}

impl NodeLock {
    fn take(path: &Path) -> Result<NodeLock, String> {
        let file = match std::fs::OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(NodeLock::Free(None)),
            Err(e) => return Err(format!("opening {}: {e}", path.display())),
        };
        match mu_procs::lock_file::try_lock(&file, true) {
            Ok(true) => Ok(NodeLock::Free(Some(file))),
            Ok(false) => Ok(NodeLock::Held),
            Err(err) => Err(format!("locking {}: {err}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fabric_files_are_recognised_by_name() {
        // The names the fabric gives its files.
        let base = Path::new("");
        let name = |p: PathBuf| p.to_string_lossy().into_owned();
        assert_eq!(fabric_node_of(&name(layout::lock_file(base, NodeId(4)))), Some(4));
        assert_eq!(fabric_node_of(&name(layout::ctl_file(base, NodeId(5)))), Some(5));
        let region = layout::region_file(base, NodeId(6), 3, mu_fabric::RegionId(2));
        assert_eq!(fabric_node_of(&name(region)), Some(6));
        assert!(is_cluster_file(&name(layout::cluster_file(base))));
        assert_eq!(fabric_node_of("n0.lock"), Some(0));
        assert_eq!(fabric_node_of("n12.ctl"), Some(12));
        assert_eq!(fabric_node_of("n3.ctl.new"), Some(3));
        assert_eq!(fabric_node_of("n2.i7.r1"), Some(2));
        for other in
            ["notes.txt", "n.lock", "nx.ctl", "n1.log", "n1.i7", "n1.i7.rx", "kv-0.sock", "cluster"]
        {
            assert_eq!(fabric_node_of(other), None, "{other}");
        }
        assert!(is_cluster_file("cluster"));
        assert!(is_cluster_file("cluster.new.123.ThreadId(1)"));
        assert!(!is_cluster_file("cluster.toml"));
    }
}
