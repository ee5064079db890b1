//! `mu cluster up|status|down --config FILE`: the replicas of a key-value cluster as background
//! processes on this host.
//!
//! * `up` checks the configuration, starts every replica (`mu replica --config FILE --id N`) in
//!   its own session, detached from the terminal, with its output appended to
//!   `<run_dir>/replica-<id>.log`, and returns once every replica answers and a majority agree
//!   on a leader. If a replica exits during start-up, or none is agreed in time, it stops the
//!   ones it started and shows why.
//! * `status` asks every replica for its report (a table, or JSON).
//! * `down` stops every replica named by a pid file (SIGTERM, SIGKILL after 5 s), then removes
//!   the shared memory, sockets and pid files the cluster left in its run directory (the logs
//!   too, and the directory itself, with `--purge`).
//!
//! A pid file may outlive its process, and its pid may since have gone to another program: a
//! pid is acted on only once `/proc` shows it is `mu replica ... --id N`, and signals go through
//! a pidfd taken before that check, so they reach the process that was checked.

use crate::interrupt;
use crate::replica_pid::{inspect_pid_file, PidFile};
use mu_fabric::NodeId;
use mu_fabric_shm::layout;
use mu_procs::pid_file::{pid_in, Target};
use mu_service::{Client, ClusterConfig, ReplicaReport};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
/// Lines of a replica's log shown when it failed to start.
const LOG_TAIL_LINES: usize = 12;
/// The first words of what `up` appends to a replica's log before starting it, so that the
/// tail shown after a failed start is this start's output only.
const LOG_MARK: &str = "--- mu cluster up: starting replica";

pub fn run(args: Args) -> Result<(), String> {
    match args.command {
        ClusterCommand::Up(a) => up(&a),
        ClusterCommand::Status(a) => status(&a),
        ClusterCommand::Down(a) => down(&a),
    }
}

// ---------------------------------------------------------------------------------------------
// up
// ---------------------------------------------------------------------------------------------

/// A replica process `up` started, until it is known to run.
struct Started {
    id: u16,
    child: Child,
}

fn up(args: &UpArgs) -> Result<(), String> {
    interrupt::catch();
    // The replicas run with `/` as their directory (a daemon must not keep another directory
    // busy), so they are given the configuration's absolute path.
    let config_path = std::fs::canonicalize(&args.config)
        .map_err(|e| format!("reading the configuration {}: {e}", args.config.display()))?;
    // The fabric's own checks (an ofi provider and its addresses) too, before any replica
    // starts.
    let config = crate::config::load_config(&config_path)?;
    config.prepare_run_dir()?;
    let warnings = crate::config::run_dir_warning(&config)
        .into_iter()
        .chain(crate::config::threads_warning(&config));
    for warning in warnings {
        note!("mu cluster up: warning: {warning}");
    }
    refuse_if_running(&config)?;
    let exe = std::env::current_exe().map_err(|e| format!("finding the mu binary: {e}"))?;
    let mut started: Vec<Started> = Vec::new();
    for &id in &config.replicas {
        match spawn_replica(&exe, &config_path, &config, id) {
            Ok(child) => started.push(Started { id, child }),
            Err(e) => {
                stop_started(&config, &mut started);
                return Err(e);
            }
        }
    }
    let timeout = Duration::from_secs(args.timeout_s);
    match wait_until_up(&config, &mut started, timeout) {
        Ok((leader, reports)) => {
            for s in &started {
                let state = match reports.get(&s.id) {
                    Some(r) => format!("sees leader {}", leader_name(r.leader)),
                    None => "started".into(),
                };
                println!(
                    "replica {}: pid {}, {state}, socket {}, log {}",
                    s.id,
                    s.child.id(),
                    config.socket_path(s.id).display(),
                    config.log_path(s.id).display()
                );
            }
            let votes = reports.values().filter(|r| r.leader == Some(leader)).count();
            println!(
                "leader: replica {leader} (agreed by {votes} of {} replicas)",
                config.replicas.len()
            );
            // The children are left running: they are in their own sessions and outlive us.
            Ok(())
        }
        Err(e) => {
            stop_started(&config, &mut started);
            Err(e)
        }
    }
}

/// Fails if a replica of `config` already runs (by its pid file, or because its socket
/// answers), or one of another cluster runs in the same run directory; otherwise removes pid
/// files that name no running replica. Those are removed only once nothing runs: a crashed
/// replica's pid file is what keeps it from being started again without `--rejoin` while the
/// rest of its cluster runs.
fn refuse_if_running(config: &ClusterConfig) -> Result<(), String> {
    let mut running = Vec::new();
    let mut stale = Vec::new();
    for &id in &config.replicas {
        match inspect_pid_file(config, id)? {
            PidFile::Missing => {}
            PidFile::Stale(why) => stale.push((id, why)),
            PidFile::Running(target) => running.push(format!("replica {id} (pid {})", target.pid)),
            PidFile::Foreign(target, other) => {
                return Err(foreign(config, id, &target, other));
            }
        }
    }
    if running.is_empty() {
        // A replica started by hand may not have written its pid file yet, or lost it.
        let mut client =
            Client::new(config.cluster_id, config.endpoints()).map_err(|e| e.to_string())?;
        for &id in &config.replicas {
            if let Ok(report) = client.status(id) {
                running.push(format!("replica {id} (pid {}, answering)", report.pid));
            }
        }
    }
    if running.is_empty() {
        for (id, why) in stale {
            remove_if_exists(&config.pid_path(id))?;
            note!("mu cluster up: replica {id}: removed a stale pid file ({why})");
        }
        return Ok(());
    }
    Err(format!(
        "{} already running: see `mu cluster status`, or stop the cluster with `mu cluster down` \
         first (a single replica that stopped rejoins with `mu replica --config FILE --id N \
         --rejoin`)",
        running.join(", ")
    ))
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

fn spawn_replica(
    exe: &Path,
    config_path: &Path,
    config: &ClusterConfig,
    id: u16,
) -> Result<Child, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let log_path = config.log_path(id);
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&log_path)
        .map_err(|e| format!("opening {}: {e}", log_path.display()))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    writeln!(log, "{LOG_MARK} {id} (unix time {now}) ---")
        .map_err(|e| format!("writing {}: {e}", log_path.display()))?;
    let err = log.try_clone().map_err(|e| format!("{}: {e}", log_path.display()))?;
    let mut cmd = Command::new(exe);
    cmd.arg("replica")
        .arg("--config")
        .arg(config_path)
        .arg("--id")
        .arg(id.to_string())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err);
    // A session of its own: no controlling terminal, so closing the terminal (SIGHUP) or its
    // Ctrl-C does not reach it; only `mu cluster down` or a signal sent on purpose stops it.
    mu_procs::child::own_session(&mut cmd);
    cmd.spawn().map_err(|e| format!("starting replica {id}: {e}"))
}

/// Waits until every replica answers a status request and a majority of the replicas agree on
/// a leader; returns it and the reports. Fails if a replica exits, on an interrupt, or after
/// `timeout`.
fn wait_until_up(
    config: &ClusterConfig,
    started: &mut [Started],
    timeout: Duration,
) -> Result<(u16, BTreeMap<u16, ReplicaReport>), String> {
    let deadline = Instant::now() + timeout;
    let mut client =
        Client::new(config.cluster_id, config.endpoints()).map_err(|e| e.to_string())?;
    loop {
        interrupt::check()?;
        for s in started.iter_mut() {
            if let Ok(Some(status)) = s.child.try_wait() {
                return Err(format!(
                    "replica {} exited during start-up ({status}); the end of {}:\n{}",
                    s.id,
                    config.log_path(s.id).display(),
                    log_tail(&config.log_path(s.id))
                ));
            }
        }
        let mut reports = BTreeMap::new();
        let mut silent = Vec::new();
        for &id in &config.replicas {
            match client.status(id) {
                Ok(r) => {
                    reports.insert(id, r);
                }
                Err(e) => silent.push(format!("replica {id}: {e}")),
            }
        }
        // A replica writes its pid file as it starts (before it serves): wait for that too, so
        // that a `down` right after this returns finds every replica.
        for s in started.iter() {
            if pid_in(&config.pid_path(s.id)) != Some(s.child.id()) && reports.contains_key(&s.id) {
                silent.push(format!("replica {}: no pid file yet", s.id));
            }
        }
        let leader = ReplicaReport::agreed_leader(reports.values(), config.replicas.len());
        if silent.is_empty() {
            if let Some(leader) = leader {
                return Ok((leader, reports));
            }
        }
        if Instant::now() >= deadline {
            let seen: Vec<String> = reports
                .values()
                .map(|r| format!("replica {} sees leader {}", r.id, leader_name(r.leader)))
                .collect();
            let mut why = format!("the cluster did not come up within {} s: ", timeout.as_secs());
            if silent.is_empty() {
                why.push_str(&format!("no leader agreed by a majority ({})", seen.join(", ")));
            } else {
                why.push_str(&format!("not answering: {}", silent.join("; ")));
            }
            for s in started.iter() {
                why.push_str(&format!(
                    "\nthe end of {}:\n{}",
                    config.log_path(s.id).display(),
                    log_tail(&config.log_path(s.id))
                ));
            }
            return Err(why);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops the replicas this `up` started (SIGTERM, then SIGKILL) and reaps them.
fn stop_started(config: &ClusterConfig, started: &mut Vec<Started>) {
    for s in started.iter() {
        let _ = mu_procs::child::signal(&s.child, libc::SIGTERM);
    }
    let deadline = Instant::now() + TERM_WAIT;
    for mut s in started.drain(..) {
        let exited = loop {
            match s.child.try_wait() {
                Ok(Some(_)) => break true,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => break false,
            }
        };
        if !exited {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
        // A replica killed, or one that failed early, leaves its pid file behind.
        let pid_path = config.pid_path(s.id);
        if pid_in(&pid_path) == Some(s.child.id()) {
            let _ = std::fs::remove_file(&pid_path);
        }
        note!("mu cluster up: stopped replica {} (pid {})", s.id, s.child.id());
    }
    // What the stopped replicas left (sockets, locks, the directory's cluster file), as `down`
    // removes it; a node whose lock is still held is left alone.
    let _ = remove_shared_memory(config);
}

/// How much of the end of a replica's log `log_tail` reads.
const LOG_TAIL_BYTES: u64 = 64 * 1024;

/// The last lines of this start's part of a replica's log.
fn log_tail(path: &Path) -> String {
    // The last bytes only: the log grows with every run (a debug run's by gigabytes). Without
    // this run's mark among them, the first line read may be cut: it is skipped like the mark.
    let read_tail = || -> std::io::Result<Vec<u8>> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))?;
        let mut bytes = Vec::new();
        file.take(LOG_TAIL_BYTES).read_to_end(&mut bytes)?;
        Ok(bytes)
    };
    let text = match read_tail() {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => return format!("  (cannot read it: {e})"),
    };
    let this_start = text.rfind(LOG_MARK).map_or(&text[..], |at| &text[at..]);
    let lines: Vec<&str> = this_start.lines().skip(1).collect();
    if lines.is_empty() {
        return "  (nothing)".into();
    }
    let from = lines.len().saturating_sub(LOG_TAIL_LINES);
    lines[from..].iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
}

// ---------------------------------------------------------------------------------------------
// status
// ---------------------------------------------------------------------------------------------

fn status(args: &StatusArgs) -> Result<(), String> {
    let config = crate::config::load_config(&args.config)?;
    let mut client =
        Client::new(config.cluster_id, config.endpoints()).map_err(|e| e.to_string())?;
    let answers: Vec<(u16, Result<ReplicaReport, String>)> =
        config.replicas.iter().map(|&id| (id, client.status(id))).collect();
    let up = answers.iter().filter(|(_, a)| a.is_ok()).count();
    if args.json {
        let items: Vec<serde_json::Value> = answers
            .iter()
            .map(|(id, answer)| match answer {
                Ok(report) => {
                    let mut v = serde_json::to_value(report).unwrap_or_else(
                        |e| serde_json::json!({ "id": id, "error": e.to_string() }),
                    );
                    if let Some(map) = v.as_object_mut() {
                        map.insert("up".into(), serde_json::Value::Bool(true));
                    }
                    v
                }
                Err(e) => {
                    let (_, why) = why_silent(&config, &args.config, *id, e);
                    serde_json::json!({ "id": id, "up": false, "error": why })
                }
            })
            .collect();
        println!("{}", serde_json::Value::Array(items));
    } else {
        print_table(&config, &args.config, &answers);
    }
    if up == 0 {
        // Say why: "nobody listens", "they run but do not answer" and "the replicas refuse
        // this client" need other fixes.
        let silent: Vec<(Option<u32>, String)> = answers
            .iter()
            .filter_map(|(id, a)| {
                a.as_ref().err().map(|e| why_silent(&config, &args.config, *id, e))
            })
            .collect();
        let mut reasons: Vec<&str> =
            answers.iter().filter_map(|(_, a)| a.as_ref().err().map(String::as_str)).collect();
        reasons.dedup();
        if silent.iter().any(|(pid, _)| pid.is_some()) {
            return Err(format!("no replica answers: {}", reasons.join("; ")));
        }
        return Err(format!(
            "no replica answers (is the cluster up? start it with `mu cluster up --config {}`): {}",
            args.config.display(),
            reasons.join("; ")
        ));
    }
    Ok(())
}

fn print_table(
    config: &ClusterConfig,
    config_path: &Path,
    answers: &[(u16, Result<ReplicaReport, String>)],
) {
    let header = [
        "ID",
        "PID",
        "STATE",
        "LEADER",
        "FUO",
        "APPLIED",
        "COMMITS",
        "ABORTS",
        "LEADER CHG",
        "PERM SW",
        "CONFIRMED",
        "LOG WRITER",
        "SCORES",
        "DIGEST",
        "UPTIME",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    let mut problems = Vec::new();
    for (id, answer) in answers {
        match answer {
            Ok(r) => {
                let confirmed = if r.confirmed.is_empty() {
                    "-".to_string()
                } else {
                    r.confirmed.iter().map(u16::to_string).collect::<Vec<_>>().join(",")
                };
                let switches = if r.slow_permission_switches > 0 {
                    format!("{} ({} slow)", r.permission_switches, r.slow_permission_switches)
                } else {
                    r.permission_switches.to_string()
                };
                rows.push(vec![
                    id.to_string(),
                    r.pid.to_string(),
                    // Not counted in majorities yet: restart no other replica meanwhile.
                    if r.recovering { "recovering" } else { "up" }.into(),
                    leader_name(r.leader),
                    r.fuo.to_string(),
                    r.applied.to_string(),
                    r.commits.to_string(),
                    r.aborts.to_string(),
                    r.leader_changes.to_string(),
                    switches,
                    confirmed,
                    r.log_holder.map_or("-".into(), |h| h.to_string()),
                    // Each peer's failure-detector score (0-15), as peer:score.
                    r.scores
                        .iter()
                        .map(|(p, sc)| format!("{p}:{sc}"))
                        .collect::<Vec<_>>()
                        .join(","),
                    r.digest.clone(),
                    uptime(r.uptime_ms),
                ]);
                let ids = |v: &[u16]| v.iter().map(u16::to_string).collect::<Vec<_>>().join(", ");
                if !r.restarted_without_rejoin.is_empty() {
                    problems.push(format!(
                        "replica {id} refuses replica(s) {}: restarted without --rejoin after \
                         losing its log; stop it and start it with --rejoin",
                        ids(&r.restarted_without_rejoin)
                    ));
                }
                if !r.other_configuration.is_empty() {
                    problems.push(format!(
                        "replica {id} does not count replica(s) {}: they run with another \
                         configuration (protocol, log shape or replica list)",
                        ids(&r.other_configuration)
                    ));
                }
            }
            Err(e) => {
                let (pid, why) = why_silent(config, config_path, *id, e);
                let state = if pid.is_some() { "no answer" } else { "down" };
                let mut row =
                    vec![id.to_string(), pid.map_or("-".into(), |p| p.to_string()), state.into()];
                row.resize(header.len(), "-".into());
                rows.push(row);
                problems.push(format!("replica {id}: {why}"));
            }
        }
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let cells: Vec<String> =
            row.iter().zip(&widths).map(|(cell, &w)| format!("{cell:<w$}")).collect();
        println!("{}", cells.join("  ").trim_end());
    }
    let reports: Vec<&ReplicaReport> =
        answers.iter().filter_map(|(_, a)| a.as_ref().ok()).collect();
    match ReplicaReport::agreed_leader(reports.iter().copied(), config.replicas.len()) {
        Some(l) => {
            let votes = reports.iter().filter(|r| r.leader == Some(l)).count();
            println!(
                "leader: replica {l} (agreed by {votes} of {} replicas)",
                config.replicas.len()
            );
        }
        None => println!("leader: none agreed by a majority"),
    }
    for p in problems {
        println!("{p}");
    }
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

fn leader_name(leader: Option<u16>) -> String {
    leader.map_or_else(|| "none".into(), |l| l.to_string())
}

fn uptime(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{:.1}s", ms as f64 / 1000.0),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60),
    }
}

// ---------------------------------------------------------------------------------------------
// down
// ---------------------------------------------------------------------------------------------

fn down(args: &DownArgs) -> Result<(), String> {
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
    for &id in &config.replicas {
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
fn remove_shared_memory(config: &ClusterConfig) -> Result<Vec<String>, String> {
    let dir = &config.run_dir;
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
    for &id in &config.replicas {
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

fn remove_if_exists(path: &Path) -> Result<(), String> {
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

    #[test]
    fn uptimes_read_well() {
        assert_eq!(uptime(1_500), "1.5s");
        assert_eq!(uptime(61_000), "1m01s");
        assert_eq!(uptime(3_723_000), "1h02m03s");
    }

    #[test]
    fn a_log_tail_is_this_start_only() {
        let dir = std::env::temp_dir().join(format!("mu-cluster-cmd-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("replica-0.log");
        std::fs::write(
            &log,
            format!("{LOG_MARK} 0 (unix time 1) ---\nold run\n{LOG_MARK} 0 (unix time 2) ---\nnew run\n"),
        )
        .unwrap();
        assert_eq!(log_tail(&log), "  new run");
        // A long run: only its end is read, and the line cut at the edge is not shown.
        let long: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, format!("{LOG_MARK} 0 (unix time 3) ---\n{long}")).unwrap();
        let tail = log_tail(&log);
        assert_eq!(tail.lines().count(), LOG_TAIL_LINES);
        assert!(tail.ends_with("  line 19999"), "{tail}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
