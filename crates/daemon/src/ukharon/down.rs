//! `mu ukharon down`: every node named by a pid file stopped (SIGTERM: a member leaves; then
//! SIGKILL after 5 s), then the pid and status files and the shm fabric's files of the group's
//! nodes removed (the logs too, and the run directory once empty, with `--purge`).

use super::config::UkharonConfig;
use super::pid::{inspect, NodePid};
use mu_fabric::NodeId;
use mu_fabric_shm::layout;
use std::path::Path;
use std::time::{Duration, Instant};

const TERM_WAIT: Duration = Duration::from_secs(5);
const KILL_WAIT: Duration = Duration::from_secs(2);

pub fn down(config_path: &Path, purge: bool) -> Result<(), String> {
    let config = UkharonConfig::load(config_path)?;
    let mut stopped = Vec::new();
    let mut targets = Vec::new();
    for id in config.nodes() {
        match inspect(&config, id)? {
            NodePid::Running(t) => {
                t.signal(libc::SIGCONT)?; // a stopped process acts on SIGTERM only once resumed
                t.signal(libc::SIGTERM)?;
                targets.push((id, t));
            }
            NodePid::Foreign(t, other) => {
                note!(
                    "mu ukharon down: node {id} (pid {}) is of cluster {other:#x}: left alone",
                    t.pid
                )
            }
            NodePid::Missing | NodePid::Stale(_) => {}
        }
    }
    for (id, t) in &targets {
        if !t.wait_exit(Instant::now() + TERM_WAIT) {
            t.signal(libc::SIGKILL)?;
            if !t.wait_exit(Instant::now() + KILL_WAIT) {
                return Err(format!("node {id} (pid {}) did not exit after SIGKILL", t.pid));
            }
        }
        stopped.push(id.to_string());
    }
    let removed = remove_files(&config, purge);
    if stopped.is_empty() {
        println!("no node was running");
    } else {
        println!("stopped nodes {}", stopped.join(", "));
    }
    println!("removed {removed} files from {}", config.run_dir.display());
    Ok(())
}

/// Removes the group's files; the count removed. A node whose fabric lock is held (it runs,
/// started by hand) keeps its fabric files.
fn remove_files(config: &UkharonConfig, purge: bool) -> usize {
    let dir = &config.run_dir;
    let mut removed = 0;
    let mut remove = |path: &Path| removed += usize::from(std::fs::remove_file(path).is_ok());
    for id in config.nodes() {
        remove(&config.pid_path(id));
        remove(&config.status_path(id));
        if purge {
            remove(&config.log_path(id));
        }
        if node_lock_held(&layout::lock_file(dir, NodeId(id))) {
            continue;
        }
        let prefix = format!("n{id}.");
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                remove(&entry.path());
            }
        }
    }
    let all_gone = config.nodes().iter().all(|&id| !layout::lock_file(dir, NodeId(id)).exists());
    if all_gone {
        remove(&layout::cluster_file(dir));
    }
    if purge {
        // Only once empty: the directory may hold files that are not the group's.
        let _ = std::fs::remove_dir(dir);
    }
    removed
}

fn node_lock_held(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else { return false };
    mu_procs::lock_file::try_lock(&file, false).is_ok_and(|free| !free)
}
