//! What the service's test files share: a private run directory, waiting with a bound, and
//! stopping a replica its servers may still hold for a moment.

use mu_replica::Replica;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long any wait of these tests may take before it is a failure: far above what anything
/// takes on an idle machine, so that a loaded one does not fail them.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A new, empty directory `name` only this user may enter, on tmpfs where there is one (the
/// shared-memory fabric's files live there); an earlier run's is removed first.
pub fn run_dir(name: &str) -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new().mode(0o700).create(&dir).expect("run directory");
    dir
}

/// Stops `replica` here: a thread of a server that is just ending may still hold it for a
/// moment, so this waits for it, so that the replica stops before its run directory goes.
pub fn stop_replica(replica: Arc<Replica>) {
    let deadline = Instant::now() + PATIENCE;
    while Arc::strong_count(&replica) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(replica);
}

/// Calls `ready` every few milliseconds until it gives a value; panics after [`PATIENCE`].
pub fn poll<T>(what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = ready() {
            return value;
        }
        assert!(start.elapsed() < PATIENCE, "timed out after {PATIENCE:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}
