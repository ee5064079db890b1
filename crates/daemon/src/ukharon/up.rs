//! `mu ukharon up`: every node started in a session of its own, detached from the terminal,
//! its output appended to `<run_dir>/ukharon-<id>.log`; returns once every member is in one
//! view and `Active` on it. If a node exits during start-up, or the view does not come in
//! time, it stops the ones it started and shows why.

use super::config::{Role, UkharonConfig};
use super::demo::agreed_active;
use super::pid::{inspect, NodePid};
use super::status::{node_list, NodeStatus, ViewSummary};
use crate::interrupt;
use crate::node_log::{log_tail, spawn_logged};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub fn up(config_path: &Path, timeout: Duration) -> Result<(), String> {
    interrupt::catch();
    // The nodes run with `/` as their directory, so they are given the absolute path.
    let config_path = std::fs::canonicalize(config_path)
        .map_err(|e| format!("reading the configuration {}: {e}", config_path.display()))?;
    let config = UkharonConfig::load(&config_path)?;
    config.prepare_run_dir()?;
    refuse_if_running(&config)?;
    let exe = std::env::current_exe().map_err(|e| format!("finding the mu binary: {e}"))?;
    let mut started: Vec<(u16, Child)> = Vec::new();
    for id in config.nodes() {
        match spawn(&exe, &config_path, &config, id) {
            Ok(child) => started.push((id, child)),
            Err(e) => {
                stop_started(&mut started);
                return Err(e);
            }
        }
    }
    match wait_until_up(&config, &mut started, timeout) {
        Ok((view, statuses)) => {
            for (id, child) in &started {
                let s = &statuses[id];
                let role = config.role(*id).expect("a node of the file").name();
                let view =
                    s.view.as_ref().map_or("no view".into(), |v| format!("view {}", v.epoch));
                println!(
                    "{role} {id}: pid {}, {view}, log {}",
                    child.id(),
                    config.log_path(*id).display()
                );
            }
            println!(
                "view {}: members {}, active on every member",
                view.epoch,
                node_list(&view.nodes())
            );
            // The children run in sessions of their own and outlive this process.
            Ok(())
        }
        Err(e) => {
            stop_started(&mut started);
            Err(e)
        }
    }
}

fn refuse_if_running(config: &UkharonConfig) -> Result<(), String> {
    let mut running = Vec::new();
    for id in config.nodes() {
        match inspect(config, id)? {
            NodePid::Missing => {}
            NodePid::Stale(why) => {
                let _ = std::fs::remove_file(config.pid_path(id));
                note!("mu ukharon up: node {id}: removed a stale pid file ({why})");
            }
            NodePid::Running(t) => running.push(format!("node {id} (pid {})", t.pid)),
            NodePid::Foreign(t, other) => {
                return Err(format!(
                    "node {id} running in {} (pid {}) belongs to cluster {other:#x}: two \
                     groups cannot share a run directory",
                    config.run_dir.display(),
                    t.pid
                ))
            }
        }
    }
    if running.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} already running: see `mu ukharon status`, or stop them with `mu ukharon down`",
        running.join(", ")
    ))
}

/// The first words of what `up` appends to a node's log before starting it, so that the tail
/// shown after a failed start is this start's output only.
const LOG_MARK: &str = "--- mu ukharon up: starting node";

fn spawn(exe: &Path, config_path: &Path, config: &UkharonConfig, id: u16) -> Result<Child, String> {
    let mut cmd = Command::new(exe);
    cmd.args(["ukharon", "node", "--config"]).arg(config_path).args(["--id", &id.to_string()]);
    if config.role(id) == Some(Role::Coordinator) {
        cmd.arg("--new-group"); // every coordinator starts now, with nothing decided yet
    }
    spawn_logged(cmd, &config.log_path(id), &format!("{LOG_MARK} {id}"), &format!("node {id}"))
}

fn wait_until_up(
    config: &UkharonConfig,
    started: &mut [(u16, Child)],
    timeout: Duration,
) -> Result<(ViewSummary, BTreeMap<u16, NodeStatus>), String> {
    let start = Instant::now();
    loop {
        interrupt::check()?;
        for (id, child) in started.iter_mut() {
            if let Ok(Some(exit)) = child.try_wait() {
                return Err(format!(
                    "node {id} exited during start-up ({exit}); the end of {}:\n{}",
                    config.log_path(*id).display(),
                    log_tail(&config.log_path(*id), LOG_MARK)
                ));
            }
        }
        let statuses: BTreeMap<u16, NodeStatus> = started
            .iter()
            .filter_map(|(id, c)| {
                let s = NodeStatus::read(&config.status_path(*id))?;
                (s.pid == c.id()).then_some((*id, s))
            })
            .collect();
        if let Some(view) = agreed_active(&statuses, &config.members) {
            return Ok((view, statuses));
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "the members were not all active in one view after {} s; see the logs in {}",
                timeout.as_secs(),
                config.run_dir.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn stop_started(started: &mut Vec<(u16, Child)>) {
    for (_, mut child) in started.drain(..) {
        let _ = child.kill();
        let _ = child.wait();
    }
}
