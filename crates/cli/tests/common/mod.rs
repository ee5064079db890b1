//! What the command-line tests share: running `mu`, and a private run directory with a
//! three-replica configuration that is stopped and removed when dropped.

#![allow(dead_code)] // each test file uses its own part

pub mod bench;
pub mod load;

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `mu ARGS`, with `MU_LOG` unset.
pub fn mu(args: &[&str]) -> Output {
    mu_with_log(args, None)
}

/// `mu ARGS` with `MU_LOG` set to `log`, or removed.
pub fn mu_with_log(args: &[&str], log: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mu"));
    cmd.args(args);
    match log {
        Some(log) => cmd.env("MU_LOG", log),
        None => cmd.env_remove("MU_LOG"),
    };
    cmd.output().expect("mu runs")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The standard output of a run that must succeed.
pub fn ok(out: Output) -> String {
    assert!(out.status.success(), "exit {:?}: {}", out.status, stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A failure whose message says `why`.
pub fn refused(out: Output, why: &str) {
    assert!(!out.status.success(), "succeeded, expected a refusal ({why})");
    assert!(stderr(&out).contains(why), "expected {why:?} in: {}", stderr(&out));
}

/// A private directory holding a run directory and the configuration of cluster `cluster_id`
/// (replicas 0, 1, 2, a small log, a patient failure detector); the cluster is stopped and
/// everything removed when dropped.
pub struct Setup {
    pub dir: PathBuf,
    pub run_dir: PathBuf,
    pub config: PathBuf,
}

impl Setup {
    pub fn new(tag: &str, cluster_id: u64) -> Setup {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("mu-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new().mode(0o700).create(&dir).expect("test directory");
        let run_dir = dir.join("run");
        let config = dir.join("cluster.toml");
        let setup = Setup { dir, run_dir, config };
        setup.write_config(&setup.config, cluster_id, "[0, 1, 2]");
        setup
    }

    /// A configuration of cluster `cluster_id` with `replicas` on this setup's run directory.
    pub fn write_config(&self, path: &Path, cluster_id: u64, replicas: &str) {
        let text = format!(
            "cluster_id = {cluster_id}\nrun_dir = \"{}\"\nreplicas = {replicas}\n\n\
             [log]\nslots = 1024\nslot_bytes = 1024\n\n[detector]\nread_period_us = 4000\n",
            self.run_dir.display()
        );
        std::fs::write(path, text).expect("config file");
    }

    pub fn config(&self) -> &str {
        self.config.to_str().expect("a UTF-8 path")
    }

    /// Replica `id`'s log file.
    pub fn log(&self, id: u16) -> String {
        let path = self.run_dir.join(format!("replica-{id}.log"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = mu(&["cluster", "down", "--config", self.config(), "--purge"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts replica `id` of the cluster in `dir/cluster.toml` (`extra`: `--rejoin` for one that
/// crashed), a child that dies with this test process, its stderr appended to
/// `dir/replica-<id>.stderr`.
pub fn spawn_replica(dir: &Path, id: u16, extra: &[&str]) -> std::process::Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("replica-{id}.stderr")))
        .unwrap();
    let config = dir.join("cluster.toml");
    Command::new(env!("CARGO_BIN_EXE_mu"))
        .args(["replica", "--config", config.to_str().unwrap(), "--id", &id.to_string()])
        .args(extra)
        .args(["--parent", &std::process::id().to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("mu replica starts")
}
