//! Processes that `up` starts detached, each with its output appended to a log of its own, and
//! the end of that log shown when one fails to start. Shared by `mu cluster up` (replicas) and
//! `mu ukharon up` (coordinators, members and caches).

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

/// Lines of a process's log shown when it failed to start.
pub const LOG_TAIL_LINES: usize = 12;
/// How much of the end of a log `log_tail` reads.
const LOG_TAIL_BYTES: u64 = 64 * 1024;

/// Starts `cmd` in a session of its own, from `/`, with its output appended to `log_path`
/// after a line that begins with `mark` (so that [`log_tail`] shows this start's output only).
/// Without a controlling terminal, closing the terminal (SIGHUP) or its Ctrl-C does not reach
/// it; only `down` or a signal sent on purpose stops it. `what` names it in errors.
pub fn spawn_logged(
    mut cmd: Command,
    log_path: &Path,
    mark: &str,
    what: &str,
) -> Result<Child, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log_path)
        .map_err(|e| format!("opening {}: {e}", log_path.display()))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    writeln!(log, "{mark} (unix time {now}) ---")
        .map_err(|e| format!("writing {}: {e}", log_path.display()))?;
    let err = log.try_clone().map_err(|e| format!("{}: {e}", log_path.display()))?;
    cmd.current_dir("/").stdin(Stdio::null()).stdout(log).stderr(err);
    mu_procs::child::own_session(&mut cmd);
    cmd.spawn().map_err(|e| format!("starting {what}: {e}"))
}

/// The last lines of the part of the log at `path` that follows the last line beginning with
/// `mark_prefix`, indented for an error message.
pub fn log_tail(path: &Path, mark_prefix: &str) -> String {
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
    let this_start = text.rfind(mark_prefix).map_or(&text[..], |at| &text[at..]);
    let lines: Vec<&str> = this_start.lines().skip(1).collect();
    if lines.is_empty() {
        return "  (nothing)".into();
    }
    let from = lines.len().saturating_sub(LOG_TAIL_LINES);
    lines[from..].iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARK: &str = "--- mu test up: starting node";

    #[test]
    fn a_log_tail_is_this_start_only() {
        let dir = std::env::temp_dir().join(format!("mu-node-log-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("node-0.log");
        std::fs::write(
            &log,
            format!("{MARK} 0 (unix time 1) ---\nold run\n{MARK} 0 (unix time 2) ---\nnew run\n"),
        )
        .unwrap();
        assert_eq!(log_tail(&log, MARK), "  new run");
        // A long run: only its end is read, and the line cut at the edge is not shown.
        let long: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, format!("{MARK} 0 (unix time 3) ---\n{long}")).unwrap();
        let tail = log_tail(&log, MARK);
        assert_eq!(tail.lines().count(), LOG_TAIL_LINES);
        assert!(tail.ends_with("  line 19999"), "{tail}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_spawned_process_writes_after_its_mark() {
        let dir = std::env::temp_dir().join(format!("mu-node-log-spawn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("node-1.log");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2"]);
        let mut child = spawn_logged(cmd, &log, &format!("{MARK} 1"), "node 1").unwrap();
        assert!(child.wait().unwrap().success());
        assert_eq!(log_tail(&log, MARK), "  out\n  err");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
