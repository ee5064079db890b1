//! `mu ukharon up|status|down` as an operator runs them: a group started in the background
//! from a TOML file, its status as a table and as JSON, a second `up` refused while it runs,
//! `down` stopping every node and removing its files; and a bad file refused with the key named.

use mu_daemon::ukharon::config::shared_host;
use mu_procs::run_dir::RunDir;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn mu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mu")).args(args).output().expect("mu runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A group's file in a private directory; the group is stopped when dropped, whatever
/// happened.
struct Group {
    config: PathBuf,
    run_dir: PathBuf,
    _dir: RunDir,
}

impl Group {
    fn new(tag: &str) -> Group {
        let dir = RunDir::create(tag).unwrap();
        let run_dir = dir.path().join("run");
        let config = dir.path().join("ukharon.toml");
        let cluster = 0x756b_0000 | u64::from(std::process::id() & 0xFFFF);
        std::fs::write(&config, shared_host(cluster, &run_dir, &[0, 1, 2], &[3, 4])).unwrap();
        Group { config, run_dir, _dir: dir }
    }

    fn config(&self) -> &str {
        self.config.to_str().unwrap()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = mu(&["ukharon", "down", "--config", self.config(), "--purge"]);
    }
}

#[test]
fn up_status_and_down() {
    let group = Group::new("ukharon-ops");
    let up = mu(&["ukharon", "up", "--config", group.config(), "--timeout-s", "30"]);
    assert!(up.status.success(), "up failed: {}", text(&up.stderr));
    assert!(
        text(&up.stdout).contains("members 3,4, active on every member"),
        "{}",
        text(&up.stdout)
    );

    let again = mu(&["ukharon", "up", "--config", group.config()]);
    assert!(!again.status.success());
    assert!(text(&again.stderr).contains("already running"), "{}", text(&again.stderr));

    let status = mu(&["ukharon", "status", "--config", group.config(), "--json"]);
    let nodes: Value = serde_json::from_slice(&status.stdout).expect("status --json is JSON");
    let nodes = nodes.as_array().unwrap();
    assert_eq!(nodes.len(), 5);
    assert!(nodes.iter().all(|n| n["up"] == true), "{nodes:?}");
    let leaders = nodes.iter().filter(|n| n["leading"] == true).count();
    assert_eq!(leaders, 1, "{nodes:?}");
    for member in nodes.iter().filter(|n| n["role"] == "member") {
        let view_members = member["view"]["members"].as_array().unwrap();
        assert_eq!(view_members.len(), 2, "{member}");
        assert!(member["uid"].is_u64(), "{member}");
    }
    let table = text(&mu(&["ukharon", "status", "--config", group.config()]).stdout);
    assert!(table.contains("leader: coordinator"), "{table}");

    let down = mu(&["ukharon", "down", "--config", group.config()]);
    assert!(down.status.success(), "{}", text(&down.stderr));
    assert!(text(&down.stdout).contains("stopped nodes 0, 1, 2, 3, 4"), "{}", text(&down.stdout));
    let left: Vec<String> = std::fs::read_dir(&group.run_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".log"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let table = text(&mu(&["ukharon", "status", "--config", group.config()]).stdout);
    assert_eq!(table.matches(" down ").count(), 5, "{table}");
}

#[test]
fn a_bad_file_is_refused_naming_the_key() {
    let group = Group::new("ukharon-bad");
    let good = std::fs::read_to_string(&group.config).unwrap();
    for (edit, key) in [
        (good.replace("beat_timeout_ns = 150_000_000", "beat_timeout_ns = 1"), "beat_timeout_ns"),
        (good.replace("members = [3, 4]", "members = [3, 1]"), "members"),
        (format!("beat_timout_ns = 5\n{good}"), "beat_timout_ns"),
    ] {
        std::fs::write(&group.config, edit).unwrap();
        let out = mu(&["ukharon", "up", "--config", group.config()]);
        assert!(!out.status.success());
        let err = text(&out.stderr);
        assert!(err.contains(&format!("{key}:")), "{key} not named in: {err}");
    }
}
