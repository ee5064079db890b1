//! Starting a node: claiming the run directory, taking the node's lock, choosing its
//! incarnation and publishing its control segment.

use crate::config::ShmConfig;
use crate::fence::own_pid_namespace;
use crate::layout::{self, CtlHeader, CTL_BYTES, MAX_NODES};
use crate::liveness::Holder;
use crate::lock;
use crate::mapping::{ensure_private_dir, Mapping};
use crate::node::{Node, RunningHere, ShmFabric, RUNNING_HERE};
use crate::prefault::Prefaulter;
use mu_fabric::{FabricError, NodeId};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long `create` waits for a node lock held by someone else before reporting the node as
/// running: a child process forked by another thread holds a copy of the lock until it execs.
const LOCK_WAIT: Duration = Duration::from_secs(1);

impl ShmFabric {
    /// Starts node `config.node` in `config.run_dir`: claims the directory for the cluster, takes
    /// the node's lock, and publishes a fresh control segment (a new incarnation).
    pub fn create(config: ShmConfig) -> Result<ShmFabric, FabricError> {
        let node = config.node;
        if usize::from(node.0) >= MAX_NODES {
            return Err(FabricError::Config(format!(
                "node id {} is too large: ids go up to {}",
                node.0,
                MAX_NODES - 1
            )));
        }
        let dir = &config.run_dir;
        ensure_private_dir(dir)?;
        layout::claim_cluster(dir, config.cluster_id, &config.protocol)?;
        let key = (std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone()), node);
        {
            let mut running = lock(&RUNNING_HERE);
            if running.contains(&key) {
                return Err(FabricError::Config(format!(
                    "node {node} is already running in this run directory (in this process)"
                )));
            }
            running.push(key.clone());
        }
        let registered = RunningHere(key);
        let lock_file = take_node_lock(&layout::lock_file(dir, node), node)?;

        // An earlier incarnation's files: it is dead (we hold the lock), so its successor takes the
        // next incarnation number and its regions can go.
        let ctl_path = layout::ctl_file(dir, node);
        let previous =
            layout::open_ctl(dir, node, config.cluster_id).map_or(0, |(_, h)| h.incarnation);
        // The lock file keeps the last incarnation number: a node that shut down cleanly removed
        // its control file, and its successor must still not reuse its number, or peers would
        // take the new node for the dead one they have cached.
        let incarnation = next_incarnation(&lock_file, dir, node, previous)?;
        remove_stale_regions(dir, node);

        let tmp_path = dir.join(format!("n{}.ctl.new", node.0));
        let _ = std::fs::remove_file(&tmp_path);
        let ctl = Arc::new(Mapping::create(&tmp_path, CTL_BYTES)?);
        layout::write_ctl_header(
            &ctl,
            &CtlHeader {
                node,
                cluster_id: config.cluster_id,
                incarnation,
                pid: std::process::id(),
                pid_namespace: own_pid_namespace(),
            },
        );
        let holder = Holder::start(ctl.clone(), config.liveness_spin)?;
        std::fs::rename(&tmp_path, &ctl_path)
            .map_err(|e| FabricError::io(format!("publishing {}", ctl_path.display()), e))?;
        Ok(ShmFabric {
            node: Arc::new(Node {
                config,
                incarnation,
                ctl,
                holder: Mutex::new(Some(holder)),
                regions: Mutex::new(HashMap::new()),
                peers: Mutex::new(HashMap::new()),
                attached: Mutex::new(HashSet::new()),
                control: Mutex::new(()),
                prefault: Prefaulter::start(),
                _lock: lock_file,
                _running_here: registered,
            }),
        })
    }
}

fn take_node_lock(path: &std::path::Path, node: NodeId) -> Result<File, FabricError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| FabricError::io(format!("opening {}", path.display()), e))?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        // SAFETY: flock on a descriptor we own; no memory is passed.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(file);
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(FabricError::io(format!("locking {}", path.display()), err));
        }
        if Instant::now() >= deadline {
            return Err(FabricError::Config(format!(
                "node {node} is already running in this run directory (another process holds {})",
                path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Reads the last incarnation number from the (locked) lock file and stores the next one.
///
/// The number is written in place, at a fixed width, over the one before: truncating first
/// left an empty file to a start killed in between, and the next start took incarnation 1
/// again, which peers still bound to the first incarnation 1 let in. A file that holds
/// something else than a number is refused rather than read as 0. The incarnations in the
/// node's region files left behind count as well (a lock file lost with them still there).
fn next_incarnation(
    lock_file: &File,
    dir: &std::path::Path,
    node: NodeId,
    previous_ctl: u32,
) -> Result<u32, FabricError> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::FileExt;
    let mut f = lock_file;
    let mut bytes = Vec::new();
    f.seek(SeekFrom::Start(0))
        .and_then(|_| f.take(64).read_to_end(&mut bytes))
        .map_err(|e| FabricError::io("reading the node's lock file", e))?;
    // Bytes that are not text are garbled like any other non-number, below.
    let text = String::from_utf8_lossy(&bytes);
    let in_file = match text.trim() {
        "" => 0,
        number => number.parse::<u32>().map_err(|_| {
            FabricError::Config(format!(
                "node {node}'s lock file in {} holds {:?}, not an incarnation number: remove \
                 the run directory's files (`mu cluster down`) and start the cluster anew",
                dir.display(),
                number.chars().take(40).collect::<String>()
            ))
        })?,
    };
    let last = in_file.max(previous_ctl).max(region_incarnations(dir, node));
    let next = last.checked_add(1).ok_or_else(|| {
        FabricError::Config(
            "this node id has used up its incarnation numbers; use a new run directory".into(),
        )
    })?;
    // Ten digits hold any u32, so the new text covers the old whole.
    lock_file
        .write_all_at(format!("{next:010}\n").as_bytes(), 0)
        .and_then(|()| lock_file.sync_data())
        .map_err(|e| FabricError::io("writing the node's lock file", e))?;
    Ok(next)
}

/// The highest incarnation named by `node`'s region files in `dir` (`n<node>.i<inc>.r<id>`).
fn region_incarnations(dir: &std::path::Path, node: NodeId) -> u32 {
    let prefix = format!("n{}.i", node.0);
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(&prefix)?;
            rest.split_once(".r")?.0.parse::<u32>().ok()
        })
        .max()
        .unwrap_or(0)
}

fn remove_stale_regions(dir: &std::path::Path, node: NodeId) {
    let prefix = format!("n{}.i", node.0);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}
