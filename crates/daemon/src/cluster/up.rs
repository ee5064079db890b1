//! `mu cluster up`: every replica started in a session of its own, and the wait until a
//! majority agree on a leader.

use super::down::{remove_if_exists, remove_shared_memory};
use super::starting::{exited, log_tail, not_up, without_pid_file, Started};
use super::*;
use crate::node_log::spawn_logged;

pub(super) fn up(args: &UpArgs) -> Result<(), String> {
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
    // uKharon-KV's coordinators too: `mu replica` runs them as well.
    let timeout = Duration::from_secs(args.timeout_s);
    for id in config.processes() {
        let spawned = spawn_replica(&exe, &config_path, &config, id).and_then(|child| {
            started.push(Started { id, child });
            serving_one_at_a_time(&config, id, &mut started, timeout)
        });
        if let Err(e) = spawned {
            stop_started(&config, &mut started);
            return Err(e);
        }
    }
    if let Some(app) = crate::app_state::ExternalApp::of(&config) {
        // Its replicas answer no status request: their fronts say who leads.
        let up = super::external::wait_until_up(&config, app, &mut started, timeout);
        if up.is_err() {
            stop_started(&config, &mut started);
        }
        return up;
    }
    match wait_until_up(&config, &mut started, timeout) {
        Ok((leader, reports)) => {
            // uKharon-KV's views name a primary, which clients follow as they follow a leader.
            let leads = if config.is_ukharon_kv() { "primary" } else { "leader" };
            for s in &started {
                if !config.replicas.contains(&s.id) {
                    let log = config.log_path(s.id);
                    println!("coordinator {}: pid {}, log {}", s.id, s.child.id(), log.display());
                    continue;
                }
                let state = match reports.get(&s.id) {
                    Some(r) => match &r.role {
                        Some(role) => format!("{role} of view {}", r.epoch.unwrap_or(0)),
                        None => format!("sees leader {}", leader_name(r.leader)),
                    },
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
                "{leads}: replica {leader} (agreed by {votes} of {} replicas)",
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

/// A uKharon-KV replica just started (the last of `started`) serves before the next starts
/// (see `ukharon_kv::wait_serving` why); nothing to wait for with Mu and Velos.
fn serving_one_at_a_time(
    config: &ClusterConfig,
    id: u16,
    started: &mut [Started],
    timeout: Duration,
) -> Result<(), String> {
    if !config.is_ukharon_kv() || !config.replicas.contains(&id) {
        return Ok(());
    }
    let check = || {
        interrupt::check()?;
        for s in started.iter_mut() {
            if let Ok(Some(status)) = s.child.try_wait() {
                return Err(format!(
                    "{} {} exited during start-up ({status}); the end of {}:\n{}",
                    if config.replicas.contains(&s.id) { "replica" } else { "coordinator" },
                    s.id,
                    config.log_path(s.id).display(),
                    log_tail(&config.log_path(s.id))
                ));
            }
        }
        Ok(())
    };
    crate::ukharon_kv::wait_serving(config, id, timeout, check)
}

/// Fails if a replica of `config` already runs (by its pid file, or because its socket
/// answers), or one of another cluster runs in the same run directory; otherwise removes pid
/// files that name no running replica. Those are removed only once nothing runs: a crashed
/// replica's pid file is what keeps it from being started again without `--rejoin` while the
/// rest of its cluster runs.
fn refuse_if_running(config: &ClusterConfig) -> Result<(), String> {
    let mut running = Vec::new();
    let mut stale = Vec::new();
    for id in config.processes() {
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

fn spawn_replica(
    exe: &Path,
    config_path: &Path,
    config: &ClusterConfig,
    id: u16,
) -> Result<Child, String> {
    let mut cmd = Command::new(exe);
    cmd.arg("replica").arg("--config").arg(config_path).arg("--id").arg(id.to_string());
    spawn_logged(cmd, &config.log_path(id), &format!("{LOG_MARK} {id}"), &format!("replica {id}"))
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
        exited(config, started)?;
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
        for id in without_pid_file(config, started) {
            if reports.contains_key(&id) {
                silent.push(format!("replica {id}: no pid file yet"));
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
            let why = if silent.is_empty() {
                format!("no leader agreed by a majority ({})", seen.join(", "))
            } else {
                format!("not answering: {}", silent.join("; "))
            };
            return Err(not_up(config, started, timeout, &why));
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
