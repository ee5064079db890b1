//! Linearizability of the client history: the key-value store looked like one copy of it to
//! its clients. The check itself is porcupine's, through the `lincheck` helper
//! (tools/lincheck, docs/verification/linearizability.md); this file finds that helper, hands
//! it the history and reads its verdict.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `lincheck` is: `$MU_LINCHECK` if set, else `target/lincheck/lincheck` under the
/// workspace (where `scripts/lincheck.sh` builds it), else under the current directory.
pub fn find_lincheck() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MU_LINCHECK") {
        return Some(PathBuf::from(p));
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/lincheck/lincheck");
    let here = Path::new("target/lincheck/lincheck").to_path_buf();
    [workspace, here].into_iter().find(|p| p.is_file())
}

/// Whether `lincheck` runs and is the checker: it must find an empty history linearizable.
/// A sweep asks before its first seed, so that a checker that cannot run (not executable, not
/// this tool) is reported as such, not as a violation in every seed.
pub fn probe(lincheck: &Path) -> Result<(), String> {
    use std::io::Write;
    let mut child = Command::new(lincheck)
        .args(["--quiet", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run lincheck at {}: {e}", lincheck.display()))?;
    let empty = br#"{"format": "mu-kv-history", "version": 1, "operations": []}"#;
    let written = child.stdin.take().map(|mut stdin| stdin.write_all(empty));
    let out = child
        .wait_with_output()
        .map_err(|e| format!("cannot run lincheck at {}: {e}", lincheck.display()))?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    if out.status.success() && matches!(written, Some(Ok(()))) && text.contains("linearizable") {
        return Ok(());
    }
    Err(format!(
        "{} is not a working lincheck: it did not find an empty history linearizable ({}): {}",
        lincheck.display(),
        out.status,
        text.trim_end()
    ))
}

/// Checks the history in `history_json` (a file) with the `lincheck` binary at `lincheck`.
/// `Ok` only for "linearizable"; a violation, a history the checker refuses, a timeout and a
/// checker that cannot run are all errors, each saying which.
pub fn check(lincheck: &Path, history_json: &Path) -> Result<(), String> {
    let out = Command::new(lincheck)
        .arg("--timeout")
        .arg("60s")
        .arg(history_json)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", lincheck.display()))?;
    let text = || {
        let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
        s.push_str(&String::from_utf8_lossy(&out.stderr));
        s.trim_end().to_owned()
    };
    match out.status.code() {
        Some(0) => Ok(()),
        Some(1) => Err(format!("the client history is not linearizable:\n{}", text())),
        Some(2) => Err(format!("lincheck refused the history (a recorder bug):\n{}", text())),
        Some(3) => Err(format!("lincheck timed out without a verdict:\n{}", text())),
        _ => Err(format!("lincheck failed ({}):\n{}", out.status, text())),
    }
}

/// Writes `history` for `lincheck` and checks it: to `DIR/seed-S.json` when `dir` keeps
/// histories, else to a temporary file (removed afterwards) when there is a checker; with
/// neither, nothing is written. The error names its checker: `linearizability`, or
/// `history-io` where the history could not be written (the run was not checked).
pub fn check_history(
    history: &crate::history::History,
    lincheck: Option<&Path>,
    dir: Option<&Path>,
    seed: u64,
) -> Result<(), (&'static str, String)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    // Runs of one seed may check at once in one process (tests on threads).
    static TEMPORARY: AtomicU64 = AtomicU64::new(0);
    let json = history.to_json().map_err(|e| ("linearizability", e))?;
    let path = match dir {
        Some(dir) => dir.join(format!("seed-{seed}.json")),
        None if lincheck.is_some() => std::env::temp_dir().join(format!(
            "mu-sim-{}-{}-seed-{seed}.json",
            std::process::id(),
            TEMPORARY.fetch_add(1, Ordering::Relaxed)
        )),
        None => return Ok(()),
    };
    if let Err(e) = std::fs::write(&path, json) {
        // Not a finding about the protocol (a full disk, say), but the run is not checked:
        // it fails under a name of its own, and leaves no partial file behind.
        let _ = std::fs::remove_file(&path);
        return Err((
            "history-io",
            format!("the client history was not checked: cannot write {}: {e}", path.display()),
        ));
    }
    let verdict = match lincheck {
        Some(lincheck) => check(lincheck, &path),
        None => Ok(()),
    };
    if dir.is_none() {
        let _ = std::fs::remove_file(&path);
    }
    verdict.map_err(|e| ("linearizability", e))
}
