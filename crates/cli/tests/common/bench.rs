//! What the benchmark tests share: a run of `mu` with its pid, the check that a benchmark left
//! nothing behind (processes, run directories), and a private directory for its files.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// Runs `mu` with `args`; returns its output and its pid.
pub fn mu_with_pid(args: &[&str]) -> (Output, u32) {
    let child = Command::new(env!("CARGO_BIN_EXE_mu"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    (child.wait_with_output().unwrap(), pid)
}

/// No process of the benchmark `pid` runs (one whose command line holds `process` and
/// `--parent PID`), and none of its run directories (`mu-bench-TAG-PID` for each of `tags`, in
/// /dev/shm or the temporary directory) is left.
pub fn nothing_left_behind(pid: u32, process: &str, tags: &[&str]) {
    let parent = format!("--parent\0{pid}\0");
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        assert!(
            !(cmdline.contains(process) && cmdline.contains(&parent)),
            "a process of benchmark {pid} is still running: {cmdline:?}"
        );
    }
    for base in [PathBuf::from("/dev/shm"), std::env::temp_dir()] {
        for tag in tags {
            let dir = base.join(format!("mu-bench-{tag}-{pid}"));
            assert!(!dir.exists(), "{} was left behind", dir.display());
        }
    }
}

/// A private directory for a benchmark's CSV and SVG files, removed when dropped (also when
/// the test fails).
pub struct OutDir(pub PathBuf);

impl OutDir {
    pub fn new(tag: &str) -> OutDir {
        let dir = std::env::temp_dir().join(format!("mu-bench-out-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        OutDir(dir)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 path")
    }

    /// Whether `NAME.svg` is a whole SVG document.
    pub fn is_svg(&self, name: &str) -> bool {
        let svg = std::fs::read_to_string(self.0.join(format!("{name}.svg"))).unwrap_or_default();
        svg.trim_end().ends_with("</svg>")
    }
}

impl Drop for OutDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
