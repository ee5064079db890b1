//! `mu replica --config FILE --id N`: one replica of a key-value cluster, serving clients on
//! its Unix socket until SIGINT or SIGTERM.
//!
//! Logs: `tracing` events on stderr, as text or JSON lines (`--log-format`), filtered by the
//! `MU_LOG` environment variable (default `info`), written by a thread of their own
//! (`log_buffer`). See docs/service.md, "Logs".

use crate::config::{load_config, run_dir_warning, threads_warning};
use crate::interrupt;
use crate::log_buffer::{self, LogBuffer};
use crate::replica_pid::{inspect_pid_file, PidFile};
use crate::replica_support::{serve_clients, start_replica, write_private};
use mu_procs::pid_file::pid_file_text;
use mu_replica::Replica;
use mu_service::config::Reads;
use mu_service::{ClusterConfig, SharedMachine};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;

/// The target of this module's log events, as they were named when it was part of the `mu`
/// binary, so that `MU_LOG` filters written for it still apply.
const LOG_TARGET: &str = "mu::serve";

/// The environment variable that says what is logged.
pub const LOG_ENV: &str = "MU_LOG";

/// How log events are written on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event: time, level, target, message, then the fields as `name=value`.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target` and `fields` (`message` among
    /// them).
    Json,
}

#[derive(clap::Args)]
pub struct Args {
    /// The cluster's configuration file (TOML).
    #[arg(long)]
    config: PathBuf,
    /// This replica's id (one of the configuration's `replicas`; with `protocol =
    /// "ukharon-kv"`, or one of its `ukharon.coordinators`: that coordinator's process).
    #[arg(long)]
    id: u16,
    /// This replica restarts after losing its log: it rejoins as recovering (it is not counted
    /// in a leader's majority until that leader has prepared without it) and gets the others'
    /// state. Required after a crash; starting such a replica as new could decide a second
    /// value where its lost log had helped choose one. A uKharon-KV coordinator restarts with
    /// it without its memory (it abstains until that is safe); a uKharon-KV replica always
    /// joins anew, as a fresh backup.
    #[arg(long)]
    rejoin: bool,
    /// How log events are written on stderr (what is logged: the `MU_LOG` environment
    /// variable, e.g. `MU_LOG=debug` or `MU_LOG=mu_replica=debug,info`; default `info`).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Pin this replica's replication thread to this CPU (handover mode's replication thread,
    /// or direct mode's helper). With `threads = "dedicated"` give it a CPU of its own.
    /// Default: not pinned.
    #[arg(long, value_name = "CPU")]
    replication_cpu: Option<usize>,
    /// Pin this replica's background thread (heartbeat, failure detector, permission manager)
    /// to this CPU. Default: not pinned.
    #[arg(long, value_name = "CPU")]
    background_cpu: Option<usize>,
    /// Die with this process (used by `mu demo`).
    #[arg(long, hide = true)]
    parent: Option<u32>,
}

/// How often a replica that is still recovering says so.
const RECOVERING_NOTE_EVERY: Duration = Duration::from_secs(10);

/// The exit status of a replica that stopped because one of its threads panicked (as the
/// main thread's panic would give).
const PANIC_EXIT_CODE: i32 = 101;

pub fn run(args: Args) -> Result<(), String> {
    // Dropped last, on every return: what the replica logged reaches stderr before an error
    // that ends it is printed.
    let _logs = start_logs(args.log_format, args.id)?;
    interrupt::catch();
    if let Some(parent) = args.parent {
        mu_procs::parent::die_with_parent(parent)?;
    }
    let config = load_config(&args.config)?;
    // Before anything is made in the run directory: a CPU the kernel refuses would fail the
    // start only once the replica's threads pin themselves, after the fabric's files exist.
    for cpu in [args.replication_cpu, args.background_cpu].into_iter().flatten() {
        mu_cpu::check_allowed(cpu).map_err(|e| format!("replica {}: {e}", args.id))?;
    }
    config.prepare_run_dir()?;
    for warning in run_dir_warning(&config).into_iter().chain(threads_warning(&config)) {
        warn!(target: LOG_TARGET, replica = args.id, "{warning}");
    }
    // uKharon-KV's processes, and the coordinators of a Mu or Velos cluster's group.
    if config.is_ukharon_kv() || (config.has_group() && !config.replicas.contains(&args.id)) {
        refuse_unsafe_start(&config, &args)?;
        return crate::ukharon_kv::run(&config, args.id, args.rejoin);
    }
    let mut replica_config = config.replica_config(args.id)?;
    replica_config.eligible = !args.rejoin;
    replica_config.cpus = mu_replica::ThreadCpus {
        replication: args.replication_cpu,
        background: args.background_cpu,
    };
    let pid_path = config.pid_path(args.id);
    refuse_unsafe_start(&config, &args)?;
    if config.is_redis() {
        return crate::redis_app::run(&config, args.id, replica_config);
    }
    if config.is_memcached() {
        return crate::memcached_app::run(&config, args.id, replica_config);
    }
    let machine = SharedMachine::for_app(config.app()?);
    let started = Instant::now();
    // Leased reads: the replica's node of the group joins first (its leader is appointed
    // from the views).
    let joined = match config.reads()? {
        Reads::Lease => Some(crate::leased::join(&config, args.id)?),
        Reads::Log => None,
    };
    let replica = start_replica(&config, args.id, replica_config, machine.clone())?;
    // From here on the replica takes part (peers grant it access, it holds log entries): a
    // failure below (the socket or a port already taken) leaves the pid file, so that it
    // restarts only with --rejoin, as after a crash. Written after these, a restart without
    // --rejoin passed the check and its peers refused it.
    write_private(&pid_path, &pid_file_text(std::process::id(), config.cluster_id))
        .map_err(|e| format!("writing {}: {e}", pid_path.display()))?;
    let id = args.id;
    let took_part = |e: String| {
        format!(
            "{e}. Replica {id} had started taking part, so its pid file stays: once this is \
             fixed, start it with --rejoin (or the whole cluster anew with `mu cluster up`)"
        )
    };
    let replica = Arc::new(replica);
    let backend = crate::leased::backend(replica.clone(), machine, joined).map_err(took_part)?;
    let (server, metrics) = serve_clients(&config, args.id, backend, started).map_err(took_part)?;
    info!(
        target: LOG_TARGET,
        replica = args.id,
        cluster_id = config.cluster_id,
        socket = %config.socket_path(args.id).display(),
        pid = std::process::id(),
        rejoin = args.rejoin,
        reads = config.reads,
        app = config.app,
        mode = ?config.mode(),
        replication_cpu = args.replication_cpu,
        background_cpu = args.background_cpu,
        "serving"
    );
    // Leader changes are logged by the replica's background plane as its election sees them.
    let stopped = serve_until_interrupted(&replica, args.id, started);
    if stopped.is_err() {
        // Its pid file stays, so it restarts only with --rejoin, as after a crash.
        drop(metrics);
        drop(server);
        return stopped;
    }
    info!(
        target: LOG_TARGET,
        replica = args.id,
        leader = replica.leader().map(|l| l.0),
        commits = replica.status().commits,
        "stopping"
    );
    drop(metrics);
    drop(server);
    let _ = std::fs::remove_file(&pid_path);
    Ok(())
}

/// Refuses to start a replica that already runs, one that crashed (and so lost its log) unless
/// started with `--rejoin`, and one whose run directory another cluster's replica uses.
fn refuse_unsafe_start(config: &ClusterConfig, args: &Args) -> Result<(), String> {
    let pid_path = config.pid_path(args.id);
    // The same check `mu cluster` makes: a pid reused by another program is not "running".
    match inspect_pid_file(config, args.id)? {
        PidFile::Running(target) => Err(format!(
            "replica {} already runs (pid {} in {})",
            args.id,
            target.pid,
            pid_path.display()
        )),
        // A replica that stops removes its pid file: one left behind is a crash, and the
        // replica's log (in memory) went with it.
        PidFile::Stale(why) if !args.rejoin => Err(format!(
            "replica {} did not stop cleanly last time ({} is left behind: {why}), so it \
             lost its log: start it with --rejoin, which brings it back as recovering. \
             Started as a new replica it could undo entries its lost log helped decide. \
             If the whole cluster is starting anew, `mu cluster up` clears such files",
            args.id,
            pid_path.display()
        )),
        PidFile::Foreign(target, other) => Err(format!(
            "replica {} of cluster {other:#x} already runs in {} (pid {}): two clusters \
             cannot share a run directory",
            args.id,
            config.run_dir.display(),
            target.pid
        )),
        PidFile::Stale(_) | PidFile::Missing => Ok(()),
    }
}

/// Watches the replica until SIGINT or SIGTERM (`Ok`) or until it stops on its own (`Err`),
/// saying now and then that a rejoining replica is still waiting to be taken back.
fn serve_until_interrupted(replica: &Replica, id: u16, started: Instant) -> Result<(), String> {
    let mut recovering_noted = Instant::now();
    while interrupt::check().is_ok() {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(failure) = replica.failure() {
            // Stopped on its own (refused as restarted without --rejoin, say): it serves
            // nothing more.
            return Err(format!("replica {id} stopped: {failure}"));
        }
        if recovering_noted.elapsed() >= RECOVERING_NOTE_EVERY {
            recovering_noted = Instant::now();
            let status = replica.status();
            if status.recovering {
                // A rejoining replica waits for a leader to take it back; say so now and then,
                // or an operator sees a replica that serves nothing and says nothing (a lone
                // replica started with --rejoin waits for ever: nobody can take it back).
                warn!(
                    target: LOG_TARGET,
                    replica = id,
                    leader = status.leader.map(|l| l.0),
                    since_s = started.elapsed().as_secs(),
                    "still recovering: waiting for a leader of a majority to take this replica \
                     back and bring it up to date"
                );
            }
        }
    }
    Ok(())
}

/// Installs the process's log subscriber: events at or above the levels `MU_LOG` picks, on
/// stderr through a [`LogBuffer`] (no replica thread waits for stderr), in `format`. A `MU_LOG`
/// that does not parse is an error naming it. A panic writes out the buffer before its message.
fn start_logs(format: LogFormat, replica: u16) -> Result<LogBuffer, String> {
    let spec = match std::env::var(LOG_ENV) {
        Ok(spec) => spec,
        Err(std::env::VarError::NotPresent) => String::new(),
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(format!("{LOG_ENV} is not valid UTF-8"));
        }
    };
    let filter = parse_log_filter(&spec).map_err(|why| {
        format!(
            "{LOG_ENV}={spec:?}: {why} (expected comma-separated LEVEL or TARGET=LEVEL, with \
             levels off, error, warn, info, debug, trace; e.g. {LOG_ENV}=mu_replica=debug,info)"
        )
    })?;
    let logs = LogBuffer::start(
        Box::new(std::io::stderr()),
        log_buffer::CAPACITY_BYTES,
        log_buffer::FLUSH_PERIOD,
        replica,
    )?;
    let registry = tracing_subscriber::registry().with(filter);
    let layer = tracing_subscriber::fmt::layer().with_writer(logs.writer());
    let installed = match format {
        LogFormat::Text => tracing::subscriber::set_global_default(registry.with(layer)),
        LogFormat::Json => tracing::subscriber::set_global_default(registry.with(layer.json())),
    };
    installed.map_err(|e| format!("installing the log subscriber: {e}"))?;
    let flush = logs.flusher();
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        flush();
        report(info);
        // Fail-stop: a replica with a thread gone (its background plane, say: no heartbeat, no
        // permission manager) must not go on serving as if whole. Its pid file stays, so it
        // restarts only with --rejoin, as after any crash.
        std::process::exit(PANIC_EXIT_CODE);
    }));
    Ok(logs)
}

/// `MU_LOG`'s directives: `LEVEL` (the default for every target) or `TARGET=LEVEL` (a crate or
/// module path: `mu_replica`, `mu_replica::background`), comma-separated. Stricter than
/// `Targets`'s own parser, which takes a misspelt level for a target name: a typo here should
/// not silently log nothing, or everything.
fn parse_log_filter(spec: &str) -> Result<Targets, String> {
    let mut targets = Targets::new().with_default(LevelFilter::INFO);
    if spec.trim().is_empty() {
        return Ok(targets);
    }
    for directive in spec.split(',').map(str::trim) {
        match directive.split_once('=') {
            None => targets = targets.with_default(parse_level(directive)?),
            Some((target, level)) => {
                let well_formed = !target.is_empty()
                    && target.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
                if !well_formed {
                    return Err(format!("{target:?} in {directive:?} is not a target"));
                }
                targets = targets.with_target(target, parse_level(level)?);
            }
        }
    }
    Ok(targets)
}

fn parse_level(text: &str) -> Result<LevelFilter, String> {
    match text.to_ascii_lowercase().as_str() {
        "off" => Ok(LevelFilter::OFF),
        "error" => Ok(LevelFilter::ERROR),
        "warn" => Ok(LevelFilter::WARN),
        "info" => Ok(LevelFilter::INFO),
        "debug" => Ok(LevelFilter::DEBUG),
        "trace" => Ok(LevelFilter::TRACE),
        "" => Err("a level is missing".into()),
        _ => Err(format!("{text:?} is not a level")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn the_default_is_info_for_every_target() {
        for spec in ["", "  "] {
            let t = parse_log_filter(spec).unwrap();
            assert!(t.would_enable("mu_replica::background", &Level::INFO));
            assert!(!t.would_enable("mu_replica::background", &Level::DEBUG));
        }
    }

    #[test]
    fn levels_per_target_and_a_default() {
        let t = parse_log_filter("mu_replica=debug,warn").unwrap();
        assert!(t.would_enable("mu_replica::background", &Level::DEBUG));
        assert!(!t.would_enable("mu_service::server", &Level::INFO));
        assert!(t.would_enable("mu_service::server", &Level::WARN));
        let t = parse_log_filter("DEBUG").unwrap();
        assert!(t.would_enable("mu::serve", &Level::DEBUG));
        let t = parse_log_filter("off").unwrap();
        assert!(!t.would_enable("mu::serve", &Level::ERROR));
    }

    #[test]
    fn malformed_directives_are_refused() {
        for spec in ["nonsense=", "nonsense", "=info", "mu_replica=loud", "info,", "a b=info"] {
            assert!(parse_log_filter(spec).is_err(), "{spec:?} was taken");
        }
    }
}
