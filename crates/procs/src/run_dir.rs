//! Private run directories: made under `/dev/shm` (or the temp directory) for one process,
//! removed with everything in them when dropped, and removed by the next run when their
//! process was killed before it could.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// What the names of [`RunDir::create`]'s directories begin with; the process's pid ends them.
pub const RUN_DIR_PREFIX: &str = "mu-bench-";

/// Removes the run directories in `base` that processes of this user made and could not
/// remove because they were killed (SIGKILL runs no destructor): those whose name ends in the
/// pid of a process that no longer exists. A directory whose pid runs is left alone, whoever
/// runs it now.
fn remove_orphans(base: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(base) else { return };
    let me = crate::user::uid();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(RUN_DIR_PREFIX))
            .and_then(|rest| rest.rsplit_once('-'))
            .and_then(|(_, pid)| pid.parse::<libc::pid_t>().ok())
            .filter(|&pid| pid > 0)
        else {
            continue;
        };
        let ours = entry.metadata().is_ok_and(|m| m.is_dir() && m.uid() == me);
        // SAFETY: kill with signal 0 only checks whether the process exists; no memory.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        // A pid in another pid namespace (a container sharing /dev/shm) reads as gone too:
        // a node lock still held inside says the directory is in use.
        if ours && gone && !holds_a_held_lock(&entry.path(), 2) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Whether a `*.lock` file in `dir`, or in its subdirectories down to `depth` levels, is locked
/// (`flock`) by a process: a shm node that runs holds its lock file for its whole life.
fn holds_a_held_lock(dir: &Path, depth: u32) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().any(|entry| {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { return false };
        if kind.is_dir() {
            return depth > 1 && holds_a_held_lock(&path, depth - 1);
        }
        if path.extension().is_none_or(|e| e != "lock") {
            return false;
        }
        let Ok(file) = std::fs::File::open(&path) else { return false };
        crate::lock_file::try_lock(&file, false).is_ok_and(|free| !free)
    })
}

/// A private run directory, removed with everything in it when dropped; one left by a killed
/// process is removed by the next that makes one in the same place.
pub struct RunDir {
    path: PathBuf,
    /// A top-level directory's `owner.lock`, locked (`flock`) for the directory's whole life:
    /// what tells a later run's [`remove_orphans`] that it is in use whatever its pid says
    /// (another pid namespace) and however deep its nodes' own locks lie.
    _owner: Option<std::fs::File>,
}

impl RunDir {
    /// A fresh directory for this process under `/dev/shm` (tmpfs), or the temp directory.
    pub fn create(tag: &str) -> Result<RunDir, String> {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        remove_orphans(&base);
        let mut dir =
            RunDir::create_at(base.join(format!("{RUN_DIR_PREFIX}{tag}-{}", std::process::id())))?;
        let lock_path = dir.path.join("owner.lock");
        let owner = std::fs::File::create(&lock_path)
            .map_err(|e| format!("creating {}: {e}", lock_path.display()))?;
        match crate::lock_file::try_lock(&owner, true) {
            Ok(true) => {}
            Ok(false) => return Err(format!("locking {}: held by another", lock_path.display())),
            Err(e) => return Err(format!("locking {}: {e}", lock_path.display())),
        }
        dir._owner = Some(owner);
        Ok(dir)
    }

    /// A subdirectory, removed on its own when dropped.
    pub fn subdirectory(&self, name: &str) -> Result<RunDir, String> {
        RunDir::create_at(self.path.join(name))
    }

    fn create_at(path: PathBuf) -> Result<RunDir, String> {
        // Left by an earlier run that had this pid and was killed before it could clean up.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| format!("creating run directory {}: {e}", path.display()))?;
        Ok(RunDir { path, _owner: None })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_directories_of_dead_processes_are_removed_and_no_others() {
        let base = std::env::temp_dir().join(format!("mu-orphans-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        // A pid that has just exited (and was reaped): no process has it for now.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let made = |name: String| {
            let path = base.join(name);
            std::fs::create_dir(&path).unwrap();
            std::fs::write(path.join("n0.ctl"), b"x").unwrap();
            path
        };
        let orphan = made(format!("{RUN_DIR_PREFIX}demo-{dead}"));
        let live = made(format!("{RUN_DIR_PREFIX}demo-{}", std::process::id()));
        let other = made(format!("someone-else-{dead}"));
        let odd = made(format!("{RUN_DIR_PREFIX}demo-x{dead}"));
        // Its creator's pid reads as gone, but a node inside still holds its lock (as one in
        // another pid namespace would).
        let in_use = made(format!("{RUN_DIR_PREFIX}other-{dead}"));
        std::fs::create_dir(in_use.join("sub")).unwrap();
        let lock = std::fs::File::create(in_use.join("sub").join("n1.lock")).unwrap();
        assert!(crate::lock_file::try_lock(&lock, true).unwrap());
        remove_orphans(&base);
        assert!(!orphan.exists(), "a dead process's run directory stays");
        assert!(live.exists() && other.exists() && odd.exists(), "too much was removed");
        assert!(in_use.exists(), "a directory with a held node lock was removed");
        drop(lock);
        remove_orphans(&base);
        assert!(!in_use.exists(), "once the lock is free, the directory goes");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
