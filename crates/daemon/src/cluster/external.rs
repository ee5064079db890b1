//! `mu cluster up` and `status` for a cluster of an unmodified application (`app = "redis"` or
//! `"memcached"`): its replicas run no service socket to ask for a report; each front's
//! direct socket says whether it leads (or names the leader it knows), and each replica's own
//! server gives its state's digest.

use super::starting::{self, Started};
use super::*;
use crate::app_state::{ExternalApp, FrontRole};

/// What each replica's front says, by id: an error where nothing answers.
fn fronts(config: &ClusterConfig, app: ExternalApp) -> Vec<(u16, Result<FrontRole, String>)> {
    config
        .replicas
        .iter()
        .map(|&id| (id, app.front_role(&config.run_dir, id).map_err(|e| e.to_string())))
        .collect()
}

/// The one replica whose front leads, if a majority of the replicas agree: it, and the
/// followers that name it.
fn agreed_leader(
    config: &ClusterConfig,
    fronts: &[(u16, Result<FrontRole, String>)],
) -> Option<u16> {
    let leading: Vec<u16> = fronts
        .iter()
        .filter(|(_, f)| matches!(f, Ok(FrontRole::Leads)))
        .map(|(id, _)| *id)
        .collect();
    let [leader] = leading[..] else { return None };
    let votes = fronts.iter().filter(|(_, f)| *f == Ok(FrontRole::Follows(Some(leader)))).count();
    (2 * (votes + 1) > config.replicas.len()).then_some(leader)
}

/// Waits until every replica started has written its pid file and its front answers, and a
/// majority agree on a leader (see [`agreed_leader`]); prints where each serves and returns.
/// Fails if a replica exits, on an interrupt, or after `timeout`.
pub(super) fn wait_until_up(
    config: &ClusterConfig,
    app: ExternalApp,
    started: &mut [Started],
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        interrupt::check()?;
        starting::exited(config, started)?;
        let fronts = fronts(config, app);
        let mut silent: Vec<String> = fronts
            .iter()
            .filter_map(|(id, f)| f.as_ref().err().map(|e| format!("replica {id}: {e}")))
            .collect();
        let no_pid = starting::without_pid_file(config, started);
        silent.extend(no_pid.iter().map(|id| format!("replica {id}: no pid file yet")));
        let leader = agreed_leader(config, &fronts);
        if let (true, Some(leader)) = (silent.is_empty(), leader) {
            print_up(config, app, started, &fronts, leader);
            return Ok(());
        }
        if Instant::now() >= deadline {
            let why = if silent.is_empty() {
                let seen: Vec<String> = fronts.iter().map(|(id, f)| role_text(*id, f)).collect();
                format!("no leader agreed by a majority ({})", seen.join(", "))
            } else {
                format!("not answering: {}", silent.join("; "))
            };
            return Err(starting::not_up(config, started, timeout, &why));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn role_text(id: u16, front: &Result<FrontRole, String>) -> String {
    match front {
        Ok(FrontRole::Leads) => format!("replica {id} leads"),
        Ok(FrontRole::Follows(l)) => format!("replica {id} sees leader {}", leader_name(*l)),
        Err(e) => format!("replica {id}: {e}"),
    }
}

fn print_up(
    config: &ClusterConfig,
    app: ExternalApp,
    started: &[Started],
    fronts: &[(u16, Result<FrontRole, String>)],
    leader: u16,
) {
    let addresses = config.client_addresses().ok().flatten().unwrap_or_default();
    for s in started {
        let role = fronts.iter().find(|(id, _)| *id == s.id).map(|(_, f)| f);
        let state = match role {
            Some(Ok(FrontRole::Leads)) => "leader".to_string(),
            _ => format!("follower of {leader}"),
        };
        let tcp = addresses.iter().find(|(id, _)| *id == s.id).map(|(_, a)| format!(", tcp {a}"));
        println!(
            "replica {}: pid {}, {state}, {} front {}{}, log {}",
            s.id,
            s.child.id(),
            app.name(),
            front_socket(config, app, s.id).display(),
            tcp.unwrap_or_default(),
            config.log_path(s.id).display()
        );
    }
    println!(
        "leader: replica {leader}; clients may connect to any replica's front (followers relay to \
         the leader)"
    );
}

/// Replica `id`'s front socket, where its clients connect.
fn front_socket(config: &ClusterConfig, app: ExternalApp, id: u16) -> PathBuf {
    match app {
        ExternalApp::Redis => mu_redis::NodeConfig::front_socket(&config.run_dir, id),
        ExternalApp::Memcached => mu_memcached::NodeConfig::front_socket(&config.run_dir, id),
    }
}

/// `mu cluster status` of such a cluster: each replica's pid, what its front says, and its
/// state's digest (equal digests: identical servers, once the followers have applied what
/// the leader committed).
pub(super) fn status(
    config: &ClusterConfig,
    app: ExternalApp,
    args: &StatusArgs,
) -> Result<(), String> {
    let fronts = fronts(config, app);
    let mut rows: Vec<serde_json::Value> = Vec::new();
    for (id, front) in &fronts {
        let (pid, error) = match front {
            Ok(_) => (pid_in(&config.pid_path(*id)), None),
            Err(e) => {
                let (pid, why) = why_silent(config, &args.config, *id, e);
                (pid, Some(why))
            }
        };
        let digest = front.is_ok().then(|| app.state_digest(&config.run_dir, *id).ok()).flatten();
        let (leads, leader) = match front {
            Ok(FrontRole::Leads) => (Some(true), Some(*id)),
            Ok(FrontRole::Follows(l)) => (Some(false), *l),
            Err(_) => (None, None),
        };
        rows.push(serde_json::json!({
            "id": id, "up": front.is_ok(), "pid": pid, "leads": leads, "leader": leader,
            "digest": digest, "front": front_socket(config, app, *id), "error": error,
        }));
    }
    let leader = agreed_leader(config, &fronts);
    if args.json {
        println!("{}", serde_json::Value::Array(rows));
    } else {
        print_table(&rows, leader);
    }
    if fronts.iter().all(|(_, f)| f.is_err()) {
        return Err(format!(
            "no replica's front answers (is the cluster up? start it with `mu cluster up \
             --config {}`)",
            args.config.display()
        ));
    }
    Ok(())
}

fn print_table(rows: &[serde_json::Value], leader: Option<u16>) {
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "-".to_string(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let header = ["ID", "PID", "STATE", "LEADER", "DIGEST"];
    let mut table = vec![header.map(String::from).to_vec()];
    let mut problems = Vec::new();
    for r in rows {
        let state = match (&r["leads"], &r["pid"]) {
            (serde_json::Value::Bool(true), _) => "leader",
            (serde_json::Value::Bool(false), _) => "follower",
            (_, serde_json::Value::Null) => "down",
            _ => "no answer",
        };
        table.push(vec![
            text(&r["id"]),
            text(&r["pid"]),
            state.into(),
            text(&r["leader"]),
            text(&r["digest"]),
        ]);
        if let serde_json::Value::String(why) = &r["error"] {
            problems.push(format!("replica {}: {why}", text(&r["id"])));
        }
    }
    let widths: Vec<usize> =
        (0..5).map(|c| table.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    for row in &table {
        let cells: Vec<String> =
            row.iter().zip(&widths).map(|(cell, &w)| format!("{cell:<w$}")).collect();
        println!("{}", cells.join("  ").trim_end());
    }
    match leader {
        Some(l) => println!("leader: replica {l} (its front leads, and a majority agree)"),
        None => println!("leader: none agreed by a majority"),
    }
    for p in problems {
        println!("{p}");
    }
}

/// Removes what replica `id`'s front and server left in the run directory once it stopped:
/// the sockets, and with `purge` the server's log (and Redis's working directory) too.
pub(super) fn remove_app_files(
    config: &ClusterConfig,
    app: ExternalApp,
    id: u16,
    purge: bool,
) -> Result<(), String> {
    let run_dir = &config.run_dir;
    let (sockets, logs, dir) = match app {
        ExternalApp::Redis => {
            let server = mu_redis::server::ServerPaths::new(run_dir, id);
            let direct = mu_redis::front::direct_socket(run_dir, id);
            (
                vec![front_socket(config, app, id), direct, server.socket],
                server.log,
                Some(server.dir),
            )
        }
        ExternalApp::Memcached => {
            let server = mu_memcached::server::ServerPaths::new(run_dir, id);
            let direct = mu_memcached::front::direct_socket(run_dir, id);
            (vec![front_socket(config, app, id), direct, server.socket], server.log, None)
        }
    };
    for socket in &sockets {
        down::remove_if_exists(socket)?;
    }
    if purge {
        down::remove_if_exists(&logs)?;
        if let Some(dir) = dir.filter(|d| d.is_dir()) {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| format!("removing {}: {e}", dir.display()))?;
        }
    }
    Ok(())
}
