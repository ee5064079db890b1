//! A key-value cluster of three `mu replica` child processes on the shared-memory fabric, in a
//! private run directory: what `mu demo` and `mu bench e2e` run against. The processes die with
//! this one (they watch its pid) and are killed and reaped when the cluster is dropped; then the
//! run directory and its shared memory are removed.

use crate::interrupt;
use mu_procs::run_dir::RunDir;
use mu_service::{Client, ClusterConfig, ReplicaReport};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const REPLICAS: u16 = 3;

/// The log of each replica.
pub struct LogShape {
    pub slots: u64,
    pub slot_bytes: u32,
}

/// A running cluster. Fields drop in order: the processes before their run directory.
pub struct KvCluster {
    processes: Processes,
    pub config: ClusterConfig,
    _dir: RunDir,
}

impl KvCluster {
    /// Writes a configuration into a fresh run directory named after `tag` and starts the
    /// replicas; does not wait for them (see [`KvCluster::wait_for_leader`]).
    pub fn start(
        tag: &str,
        log: LogShape,
        protocol: mu_replica::Protocol,
    ) -> Result<KvCluster, String> {
        let dir = RunDir::create(tag)?;
        let config_path = dir.path().join("cluster.toml");
        let cluster_id = u64::from(std::process::id()) << 16 | 0xde;
        let text = format!(
            "# written by mu {tag}\ncluster_id = {cluster_id}\nprotocol = \"{protocol}\"\nfabric = \"shm\"\n\
             run_dir = \"{}\"\nreplicas = [0, 1, 2]\nmode = \"direct\"\n\n[log]\nslots = {}\n\
             slot_bytes = {}\nintegrity = \"checksum\"\n",
            dir.path().display(),
            log.slots,
            log.slot_bytes
        );
        std::fs::write(&config_path, text)
            .map_err(|e| format!("writing the configuration: {e}"))?;
        let config = ClusterConfig::load(&config_path)?;
        let processes = Processes::spawn(&config_path, &config)?;
        Ok(KvCluster { processes, config, _dir: dir })
    }

    pub fn run_dir(&self) -> &Path {
        &self.config.run_dir
    }

    /// A client of this cluster.
    pub fn client(&self) -> Result<Client, String> {
        Client::new(self.config.cluster_id, self.config.endpoints()).map_err(|e| e.to_string())
    }

    /// Waits until a majority of the replicas agree on a leader; fails if a replica exits, on
    /// an interrupt, or after `timeout`.
    pub fn wait_for_leader(&mut self, timeout: Duration) -> Result<u16, String> {
        let deadline = Instant::now() + timeout;
        loop {
            interrupt::check()?;
            self.processes.check_alive()?;
            if let Ok(leader) = self.current_leader() {
                return Ok(leader);
            }
            if Instant::now() > deadline {
                return Err(format!("no leader within {} s", timeout.as_secs()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The leader a majority of the replicas' detectors agree on.
    pub fn current_leader(&self) -> Result<u16, String> {
        let mut client = self.client()?;
        let reports: Vec<ReplicaReport> =
            self.config.replicas.iter().filter_map(|&id| client.status(id).ok()).collect();
        ReplicaReport::agreed_leader(&reports, self.config.replicas.len())
            .ok_or_else(|| "no leader agreed on yet".into())
    }

    /// Kills replica `id` (SIGKILL) and reaps it.
    pub fn kill(&mut self, id: u16) -> Result<(), String> {
        self.processes.kill(id)
    }

    /// Fails if a replica that was not killed has exited, with the end of its log.
    pub fn check_alive(&mut self) -> Result<(), String> {
        self.processes.check_alive()
    }
}

/// The replica processes; killed and reaped when dropped.
struct Processes {
    children: Vec<Option<Child>>,
    logs: Vec<PathBuf>,
}

impl Processes {
    fn spawn(config_path: &Path, config: &ClusterConfig) -> Result<Processes, String> {
        let exe = std::env::current_exe().map_err(|e| format!("finding the mu binary: {e}"))?;
        let mut p = Processes { children: Vec::new(), logs: Vec::new() };
        for id in 0..REPLICAS {
            let log_path = config.log_path(id);
            let log = std::fs::File::create(&log_path)
                .map_err(|e| format!("creating {}: {e}", log_path.display()))?;
            let err = log.try_clone().map_err(|e| format!("log file: {e}"))?;
            let mut cmd = Command::new(&exe);
            cmd.arg("replica")
                .arg("--config")
                .arg(config_path)
                .arg("--id")
                .arg(id.to_string())
                .arg("--parent")
                .arg(std::process::id().to_string())
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err);
            // Own process group: the terminal's Ctrl-C reaches only the demo, which stops them.
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
            let child = cmd.spawn().map_err(|e| format!("starting replica {id}: {e}"))?;
            p.children.push(Some(child));
            p.logs.push(log_path);
        }
        Ok(p)
    }

    fn kill(&mut self, id: u16) -> Result<(), String> {
        let child = self.children[id as usize].as_mut().ok_or("already gone")?;
        child.kill().map_err(|e| format!("killing replica {id}: {e}"))?;
        let _ = child.wait();
        self.children[id as usize] = None;
        Ok(())
    }

    /// Fails if a replica we did not kill has exited, with the end of its log.
    fn check_alive(&mut self) -> Result<(), String> {
        for (id, slot) in self.children.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(&self.logs[id]).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                *slot = None;
                return Err(format!(
                    "replica {id} exited unexpectedly ({status}); its last output:\n  {}",
                    tail.join("\n  ")
                ));
            }
        }
        Ok(())
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
