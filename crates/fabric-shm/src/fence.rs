//! A peer's process: pinned once, so that it can be fenced for good and its exit observed.
//!
//! Fencing is the shared-memory analogue of cycling an RDMA queue pair: a writer stopped in the
//! middle of a copy still holds the guard, and the revoker cannot know when (or whether) the copy
//! will resume. After a bounded wait it kills the writer's process and waits for it to be gone,
//! as STONITH fencing does: a process that no longer exists writes nothing.
//!
//! Killing the wrong process would be a disaster, so the pid is trusted only after checks, when
//! the peer is first looked up:
//! * the peer's control header names the pid namespace it was written in, and it must be ours
//!   (pids mean nothing across namespaces);
//! * the pid is pinned with a pidfd, and the thread that holds the peer's liveness lock (its id
//!   is in the lock word) must be a thread of that very process (`/proc/<pid>/task/<tid>`), checked
//!   after pinning, while the lock word still says alive — so the pid was not reused.
//!
//! "Gone" means the whole process has exited: the pidfd polls readable once every thread of the
//! process is dead. The liveness lock alone is not enough here: it flips when its own thread dies,
//! and another thread of a dying process may still be copying for a moment.

use crate::liveness::{is_alive, owner_tid};
use crate::mapping::Mapping;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// The process of a peer incarnation, as far as it could be pinned.
pub struct PeerProcess {
    pid: u32,
    pinned: Result<OwnedFd, String>,
}

/// The inode of this process's pid namespace (0 if it cannot be read).
pub fn own_pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").map(|m| m.ino()).unwrap_or(0)
}

impl PeerProcess {
    /// Pins the process `pid` that the control segment `ctl` says runs the peer, written in the
    /// pid namespace `pid_namespace`. A peer that cannot be pinned can still be talked to; it just
    /// cannot be fenced, and fencing it reports why.
    pub fn pin(pid: u32, pid_namespace: u64, ctl: &Mapping) -> PeerProcess {
        PeerProcess { pid, pinned: pin(pid, pid_namespace, ctl) }
    }

    /// Whether every thread of the process has exited. `None` if the process is not pinned.
    pub fn exited(&self) -> Option<bool> {
        let fd = self.pinned.as_ref().ok()?;
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: polls one pollfd that lives on this stack frame, without waiting.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        Some(n > 0 && pfd.revents != 0)
    }

    /// Kills the process and waits up to `timeout` for every one of its threads to be gone.
    pub fn fence(&self, timeout: Duration) -> Result<(), String> {
        let fd = self
            .pinned
            .as_ref()
            .map_err(|why| format!("pid {} cannot be fenced: {why}", self.pid))?;
        if self.exited() == Some(true) {
            return Ok(());
        }
        // SAFETY: sends SIGKILL through a pidfd we own; no memory is passed (info is null).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<u8>(),
                0,
            )
        };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if self.exited() != Some(true) {
                return Err(format!("killing pid {}: {err}", self.pid));
            }
        }
        let deadline = Instant::now() + timeout;
        loop {
            let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: polls one pollfd that lives on this stack frame, for at most 10 ms.
            unsafe { libc::poll(&mut pfd, 1, 10) };
            if pfd.revents != 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("pid {} did not die within {timeout:?} of SIGKILL", self.pid));
            }
        }
    }
}

fn pin(pid: u32, pid_namespace: u64, ctl: &Mapping) -> Result<OwnedFd, String> {
    if pid == std::process::id() && pid_namespace == own_pid_namespace() {
        return Err("the peer runs in this very process, which cannot fence itself".into());
    }
    if pid_namespace == 0 || pid_namespace != own_pid_namespace() {
        return Err("the peer runs in another pid namespace".into());
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no memory is
    // passed.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) } as i32;
    if raw < 0 {
        return Err(format!("pidfd_open({pid}): {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `raw` is a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // Now that the pid is pinned: the liveness lock's owner must be one of its threads, and still
    // hold the lock (so the process we pinned is the one that took it).
    let tid = owner_tid(ctl).ok_or("the peer's liveness lock has no owner")?;
    if !std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists() {
        return Err(format!(
            "pid {pid} is not the process that holds the peer's liveness lock (thread {tid})"
        ));
    }
    if !is_alive(ctl) {
        return Err("the peer died while it was being pinned".into());
    }
    Ok(fd)
}
