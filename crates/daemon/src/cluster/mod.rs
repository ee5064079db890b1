//! `mu cluster up|status|down --config FILE`: the replicas of a key-value cluster as background
//! processes on this host.
//!
//! * `up` checks the configuration, starts every replica (`mu replica --config FILE --id N`) in
//!   its own session, detached from the terminal, with its output appended to
//!   `<run_dir>/replica-<id>.log`, and returns once every replica answers and a majority agree
//!   on a leader. If a replica exits during start-up, or none is agreed in time, it stops the
//!   ones it started and shows why. A cluster of an unmodified Redis or Memcached answers no
//!   status request: there, each front says whether it leads ([`external`]).
//! * `status` asks every replica for its report (a table, or JSON); for Redis and Memcached,
//!   each front's role and each server's digest.
//! * `down` stops every replica named by a pid file (SIGTERM, SIGKILL after 5 s), then removes
//!   the shared memory, sockets and pid files the cluster left in its run directory (the logs
//!   too, and the directory itself, with `--purge`).
//!
//! A pid file may outlive its process, and its pid may since have gone to another program: a
//! pid is acted on only once `/proc` shows it is `mu replica ... --id N`, and signals go through
//! a pidfd taken before that check, so they reach the process that was checked.

mod down;
mod external;
mod starting;
mod status;
mod up;

use crate::interrupt;
use crate::replica_pid::{inspect_pid_file, PidFile};
use mu_fabric::NodeId;
use mu_fabric_shm::layout;
use mu_procs::pid_file::{pid_in, Target};
use mu_service::{Client, ClusterConfig, ReplicaReport};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(clap::Subcommand)]
pub enum ClusterCommand {
    /// Start every replica of the configuration in the background; returns once a majority
    /// agree on a leader.
    Up(UpArgs),
    /// Every replica's view of itself and of the cluster: leader, log, counters, state digest.
    Status(StatusArgs),
    /// Stop every replica (SIGTERM, then SIGKILL after 5 s) and remove the cluster's shared
    /// memory, sockets and pid files.
    Down(DownArgs),
}

#[derive(clap::Args)]
pub struct UpArgs {
    /// The cluster's configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Seconds to wait for every replica to answer and a majority to agree on a leader.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout_s: u64,
}

#[derive(clap::Args)]
pub struct StatusArgs {
    /// The cluster's configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Print a JSON array: each replica's report with `"up": true`, or `{"id", "up": false,
    /// "error"}` for one that does not answer.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct DownArgs {
    /// The cluster's configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Also remove the replicas' logs, and the run directory once nothing else is in it.
    #[arg(long)]
    purge: bool,
}

/// How long `down` waits for a replica to exit after SIGTERM, then after SIGKILL.
const TERM_WAIT: Duration = Duration::from_secs(5);
const KILL_WAIT: Duration = Duration::from_secs(2);
/// The first words of what `up` appends to a replica's log before starting it, so that the
/// tail shown after a failed start is this start's output only.
const LOG_MARK: &str = "--- mu cluster up: starting replica";

pub fn run(args: Args) -> Result<(), String> {
    match args.command {
        ClusterCommand::Up(a) => up::up(&a),
        ClusterCommand::Status(a) => status::status(&a),
        ClusterCommand::Down(a) => down::down(&a),
    }
}

/// The error for a replica of another cluster found running in `config`'s run directory.
fn foreign(config: &ClusterConfig, id: u16, target: &Target, other: u64) -> String {
    format!(
        "replica {id} running in {} (pid {}) belongs to cluster {other:#x}, not to this \
         configuration's cluster {:#x}: two clusters cannot share a run directory, so it is \
         left alone",
        config.run_dir.display(),
        target.pid,
        config.cluster_id
    )
}

fn leader_name(leader: Option<u16>) -> String {
    leader.map_or_else(|| "none".into(), |l| l.to_string())
}

/// Why replica `id` did not answer a status request with `error`, and its pid if it runs.
fn why_silent(
    config: &ClusterConfig,
    config_path: &Path,
    id: u16,
    error: &str,
) -> (Option<u32>, String) {
    let error = error.strip_prefix(&format!("replica {id}: ")).unwrap_or(error);
    match inspect_pid_file(config, id) {
        // Stopped (SIGSTOP), or stuck.
        Ok(PidFile::Running(target)) => {
            return (
                Some(target.pid),
                format!("pid {} runs but does not answer ({error})", target.pid),
            );
        }
        Ok(PidFile::Foreign(target, other)) => {
            return (Some(target.pid), foreign(config, id, &target, other));
        }
        // A replica that stops removes its pid file.
        Ok(PidFile::Stale(why)) => {
            return (
                None,
                format!(
                    "crashed ({why}; its pid file is left): restart it with `mu replica --config \
                     {} --id {id} --rejoin`",
                    config_path.display()
                ),
            );
        }
        _ => {}
    }
    if config.clients.is_some() {
        // Reached over TCP: its host may be another, and a socket here says nothing.
        return (None, format!("no answer over TCP ({error})"));
    }
    let socket = config.socket_path(id);
    if !socket.exists() {
        return (None, "not running (no socket)".into());
    }
    match std::os::unix::net::UnixStream::connect(&socket) {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            (None, "not running (its socket was left by a replica that died)".into())
        }
        _ => (None, format!("not running ({error})")),
    }
}
