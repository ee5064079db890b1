//! Pieces shared by the multi-process shm tests.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// A fresh, owner-only run directory for one test's replica processes, named by `tag` and this
/// process: in /dev/shm when there is one (the fabric's files are shared memory), else the
/// temporary directory. Whatever an earlier run left under that name is removed first.
pub fn fresh_run_dir(tag: &str) -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("mu-replica-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new().mode(0o700).create(&dir).expect("run dir");
    dir
}
