//! A group of node processes for the demo and tests: a private run directory with the group's
//! file ([`super::config::shared_host`], or any file), `mu ukharon node` children that die
//! with this process (started as they are, or through a wrapper such as `ip netns exec`),
//! their statuses, and signals to them. Dropping it kills every child and removes the
//! directory.

use super::config::{Role, UkharonConfig};
use super::status::NodeStatus;
use mu_procs::run_dir::RunDir;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// See the module docs.
pub struct LocalGroup {
    pub config: UkharonConfig,
    config_path: PathBuf,
    children: BTreeMap<u16, Child>,
    dir: RunDir,
}

impl LocalGroup {
    /// Starts `coordinators` and `members` as children of `exe` (the `mu` binary).
    pub fn start(
        exe: &Path,
        tag: &str,
        coordinators: &[u16],
        members: &[u16],
    ) -> Result<LocalGroup, String> {
        LocalGroup::start_with_caches(exe, tag, coordinators, members, &[])
    }

    /// [`LocalGroup::start`] with lease caches, through which the members renew.
    pub fn start_with_caches(
        exe: &Path,
        tag: &str,
        coordinators: &[u16],
        members: &[u16],
        caches: &[u16],
    ) -> Result<LocalGroup, String> {
        let cluster = cluster_id();
        let text = |dir: &Path| {
            super::config::shared_host_with_caches(cluster, dir, coordinators, members, caches)
        };
        LocalGroup::start_from(tag, text, |_| Command::new(exe))
    }

    /// A group from the file `text` makes for its run directory: each node started by
    /// `launch(id)` (a command that runs `mu` with the arguments this adds) and its output in
    /// its log.
    pub fn start_from(
        tag: &str,
        text: impl FnOnce(&Path) -> String,
        launch: impl Fn(u16) -> Command,
    ) -> Result<LocalGroup, String> {
        let dir = RunDir::create(tag)?;
        let config_path = dir.path().join("ukharon.toml");
        std::fs::write(&config_path, text(dir.path()))
            .map_err(|e| format!("writing {}: {e}", config_path.display()))?;
        let config = UkharonConfig::load(&config_path)?;
        let mut group = LocalGroup { config, config_path, children: BTreeMap::new(), dir };
        for id in group.config.nodes() {
            group.spawn(launch(id), id, true)?;
        }
        Ok(group)
    }

    /// Starts node `id` through `command`; `with_group`: it starts with the whole group (a
    /// coordinator then has nothing to forget), otherwise it restarts.
    fn spawn(&mut self, mut command: Command, id: u16, with_group: bool) -> Result<(), String> {
        let log_path = self.config.log_path(id);
        let log = std::fs::File::create(&log_path)
            .map_err(|e| format!("creating {}: {e}", log_path.display()))?;
        let err = log.try_clone().map_err(|e| format!("{}: {e}", log_path.display()))?;
        let shown = format!("{command:?}");
        let child = command
            .args(["ukharon", "node", "--config"])
            .arg(&self.config_path)
            .args(["--id", &id.to_string(), "--parent", &std::process::id().to_string()])
            .args(if with_group { self.new_group_flag(id) } else { &[] })
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting node {id} ({shown}): {e}"))?;
        self.children.insert(id, child);
        Ok(())
    }

    /// A coordinator starts with the whole group: nothing decided yet for it to forget.
    fn new_group_flag(&self, id: u16) -> &'static [&'static str] {
        match self.config.role(id) {
            Some(Role::Coordinator) => &["--new-group"],
            _ => &[],
        }
    }

    /// Starts node `id` again, after it was killed, as `mu ukharon node` run by hand would: a
    /// coordinator rejoins without its memory (the fabric kept none).
    pub fn restart(&mut self, exe: &Path, id: u16) -> Result<(), String> {
        if self.children.contains_key(&id) {
            return Err(format!("node {id} still runs"));
        }
        self.spawn(Command::new(exe), id, false)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The latest status node `id` wrote, if any.
    pub fn status(&self, id: u16) -> Option<NodeStatus> {
        NodeStatus::read(&self.config.status_path(id))
    }

    pub fn pid(&self, id: u16) -> Option<u32> {
        self.children.get(&id).map(Child::id)
    }

    /// Sends `signal` to node `id`.
    pub fn signal(&self, id: u16, signal: libc::c_int) -> Result<(), String> {
        let child = self.children.get(&id).ok_or(format!("no node {id}"))?;
        mu_procs::child::signal(child, signal).map_err(|e| format!("signal to node {id}: {e}"))
    }

    /// Kills node `id` (SIGKILL) and reaps it.
    pub fn kill(&mut self, id: u16) -> Result<(), String> {
        let mut child = self.children.remove(&id).ok_or(format!("no node {id}"))?;
        let _ = mu_procs::child::signal(&child, libc::SIGCONT);
        child.kill().map_err(|e| format!("killing node {id}: {e}"))?;
        let _ = child.wait();
        Ok(())
    }

    /// Asks node `id` to stop (SIGTERM: a member leaves first) and reaps it; fails if it has
    /// not exited within `wait` (it is then killed) or exited with an error.
    pub fn terminate(&mut self, id: u16, wait: Duration) -> Result<(), String> {
        let mut child = self.children.remove(&id).ok_or(format!("no node {id}"))?;
        let _ = mu_procs::child::signal(&child, libc::SIGTERM);
        let deadline = Instant::now() + wait;
        loop {
            match child.try_wait() {
                Ok(Some(exit)) if exit.success() => return Ok(()),
                Ok(Some(exit)) => return Err(format!("node {id} exited with {exit}")),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("node {id} did not exit within {wait:?} of SIGTERM"));
                }
            }
        }
    }

    /// Fails if a node exited: its log's last lines say why.
    pub fn check_alive(&mut self) -> Result<(), String> {
        for (&id, child) in self.children.iter_mut() {
            if let Ok(Some(exit)) = child.try_wait() {
                let log = std::fs::read_to_string(self.config.log_path(id)).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(8).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                return Err(format!("node {id} exited ({exit}):\n{}", tail.join("\n")));
            }
        }
        Ok(())
    }

    /// Polls the statuses until `ready` returns something, or fails after `timeout` (saying
    /// what `describe` says of the statuses then) or when a node exits.
    pub fn wait_for<T>(
        &mut self,
        timeout: Duration,
        mut ready: impl FnMut(&BTreeMap<u16, NodeStatus>) -> Option<T>,
        describe: &str,
    ) -> Result<T, String> {
        let start = Instant::now();
        loop {
            let statuses = self.statuses();
            if let Some(v) = ready(&statuses) {
                return Ok(v);
            }
            self.check_alive()?;
            crate::interrupt::check()?;
            if start.elapsed() > timeout {
                let seen: Vec<String> = statuses
                    .values()
                    .map(|s| {
                        let view = s.view.as_ref().map(|v| (v.epoch, v.nodes()));
                        format!("node {}: view {view:?} active {}", s.id, s.active)
                    })
                    .collect();
                return Err(format!(
                    "no {describe} after {} s; {}",
                    timeout.as_secs(),
                    seen.join("; ")
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The statuses of the nodes still running as this group's children.
    pub fn statuses(&self) -> BTreeMap<u16, NodeStatus> {
        self.children.keys().filter_map(|&id| self.status(id).map(|s| (id, s))).collect()
    }

    /// The running members.
    pub fn live_members(&self) -> Vec<u16> {
        let members = &self.config.members;
        self.children.keys().copied().filter(|id| members.contains(id)).collect()
    }

    /// Stops every node: SIGTERM (members leave), then SIGKILL for any left after `wait`.
    pub fn stop(&mut self, wait: Duration) {
        for child in self.children.values() {
            let _ = mu_procs::child::signal(child, libc::SIGCONT);
            let _ = mu_procs::child::signal(child, libc::SIGTERM);
        }
        let deadline = Instant::now() + wait;
        for (_, mut child) in std::mem::take(&mut self.children) {
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A cluster id of this process's own, for a test's or the demo's group.
pub fn cluster_id() -> u64 {
    0x756b_0000 | u64::from(std::process::id() & 0xFFFF)
}

impl Drop for LocalGroup {
    fn drop(&mut self) {
        for (_, mut child) in std::mem::take(&mut self.children) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
