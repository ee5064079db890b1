//! `mu cluster status`: every replica's report, as a table or JSON.

use super::*;

pub(super) fn status(args: &StatusArgs) -> Result<(), String> {
    let config = crate::config::load_config(&args.config)?;
    if let Some(app) = crate::app_state::ExternalApp::of(&config) {
        return super::external::status(&config, app, args);
    }
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
    let ukharon_kv = config.is_ukharon_kv();
    let mu_header = [
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
    let header: &[&str] = if ukharon_kv { &UKHARON_KV_HEADER } else { &mu_header };
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    let mut problems = Vec::new();
    for (id, answer) in answers {
        match answer {
            Ok(r) => {
                rows.push(if ukharon_kv { ukharon_kv_row(*id, r) } else { report_row(*id, r) });
                if let Some(problem) = &r.problem {
                    problems.push(format!("replica {id}: {problem}"));
                }
                problems.extend(report_problems(*id, r));
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
                "{}: replica {l} (agreed by {votes} of {} replicas)",
                if ukharon_kv { "primary" } else { "leader" },
                config.replicas.len()
            );
        }
        None if ukharon_kv => println!("primary: none named by a majority's views"),
        None => println!("leader: none agreed by a majority"),
    }
    for p in problems {
        println!("{p}");
    }
}

/// A replica's row of the status table, from its report.
fn report_row(id: u16, r: &ReplicaReport) -> Vec<String> {
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
    vec![
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
        r.scores.iter().map(|(p, sc)| format!("{p}:{sc}")).collect::<Vec<_>>().join(","),
        r.digest.clone(),
        uptime(r.uptime_ms),
    ]
}

/// The columns of a uKharon-KV cluster's table: each replica's part in its view, the view's
/// primary, the records it executed (the primary) or applied (a backup), its store.
const UKHARON_KV_HEADER: [&str; 9] =
    ["ID", "PID", "ROLE", "PRIMARY", "EPOCH", "POSITION", "KEYS", "DIGEST", "UPTIME"];

/// A uKharon-KV replica's row of the status table.
fn ukharon_kv_row(id: u16, r: &ReplicaReport) -> Vec<String> {
    let or_dash = |s: String| if s.is_empty() { "-".to_string() } else { s };
    vec![
        id.to_string(),
        r.pid.to_string(),
        r.role.clone().unwrap_or_else(|| "-".into()),
        leader_name(r.leader),
        r.epoch.map_or("-".into(), |e| e.to_string()),
        r.applied.to_string(),
        r.keys.to_string(),
        or_dash(r.digest.clone()),
        uptime(r.uptime_ms),
    ]
}

/// What a replica's report says is wrong with its peers.
fn report_problems(id: u16, r: &ReplicaReport) -> Vec<String> {
    let mut problems = Vec::new();
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
    problems
}

fn uptime(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{:.1}s", ms as f64 / 1000.0),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptimes_read_well() {
        assert_eq!(uptime(1_500), "1.5s");
        assert_eq!(uptime(61_000), "1m01s");
        assert_eq!(uptime(3_723_000), "1h02m03s");
    }
}
