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
//!
//! A barrier need not wait that long ([`PeerProcess::stopped_copying`]): once every thread of
//! the process has begun to exit, none runs user code again, and what the process is still doing
//! (tearing its memory down, about a millisecond for a replica on a 2-vCPU machine) writes
//! nothing into a peer's region. A thread that begins to exit is marked so (`PF_EXITING` in its
//! flags) by its own CPU, in the kernel, after the stores it made in user mode and after taking
//! and releasing the signal lock on its way there; on x86-64, where stores become visible in
//! the order they were made (write-combining buffers included, which a locked instruction
//! drains), a reader that sees the mark sees every store the thread made before it. Elsewhere
//! that order is not given, and only the process's end counts.

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

    /// Whether no thread of the process can store into shared memory any more: it has exited,
    /// or (on x86-64) every one of its threads has begun to exit (see the module docs). Reads
    /// `/proc`, tens of microseconds: callers ask only once the peer's liveness lock says its
    /// process is dying. `false` if the process is not pinned.
    pub fn stopped_copying(&self) -> bool {
        match self.exited() {
            Some(true) => true,
            Some(false) => every_thread_exiting(self.pid),
            None => false,
        }
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
            // SAFETY: polls one pollfd that lives on this stack frame, for at most 1 ms.
            unsafe { libc::poll(&mut pfd, 1, 1) };
            if pfd.revents != 0 || every_thread_exiting(self.pid) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("pid {} did not die within {timeout:?} of SIGKILL", self.pid));
            }
        }
    }
}

/// The kernel's mark on a thread that has entered its exit (`PF_EXITING`, include/linux/sched.h).
const PF_EXITING: u64 = 0x4;

/// Whether every thread of process `pid` has begun to exit, as `/proc` shows it. The thread list
/// is read before and after the threads' flags, and must be the same: a thread can only be
/// created by a thread of the process that runs user code, and one created while the flags were
/// read, by a thread read as not yet exiting or before it began to, shows in the second list.
/// A thread whose files are gone has exited. Any doubt reads as "no".
///
/// The pid may have been reused by the time it is read, if the pinned process has exited
/// meanwhile: then "yes" is true of the pinned process too, and "no" only waits longer.
#[cfg(target_arch = "x86_64")]
pub(crate) fn every_thread_exiting(pid: u32) -> bool {
    let list = || -> Option<Vec<u32>> {
        let mut tids = std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .collect::<Option<Vec<u32>>>()?;
        tids.sort_unstable();
        Some(tids)
    };
    let Some(before) = list() else { return false };
    if before.is_empty() || !before.iter().all(|&tid| thread_exiting(pid, tid)) {
        return false;
    }
    list().is_some_and(|after| after == before)
}

/// Not x86-64: a thread's mark is not known to come after its stores (see the module docs).
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn every_thread_exiting(_pid: u32) -> bool {
    false
}

/// Whether thread `tid` of `pid` has begun to exit (or is gone).
#[cfg(target_arch = "x86_64")]
fn thread_exiting(pid: u32, tid: u32) -> bool {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")) {
        Ok(stat) => stat,
        // Reaped since it was listed: it has exited.
        Err(e) => return e.kind() == std::io::ErrorKind::NotFound,
    };
    // After the command name in parentheses (which may hold anything): state, ppid, pgrp,
    // session, tty_nr, tpgid, flags.
    let flags = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.split_whitespace().nth(6))
        .and_then(|f| f.parse::<u64>().ok());
    flags.is_some_and(|f| f & PF_EXITING != 0)
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

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn a_running_process_is_not_exiting_and_a_killed_one_is() {
        assert!(!every_thread_exiting(std::process::id()), "this very process runs");
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pid = child.id();
        assert!(!every_thread_exiting(pid), "a sleeping child runs");
        // SAFETY: kill takes a pid and a signal, no memory; the child is ours and not reaped.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        // Not reaped: a zombie whose only thread has exited.
        let start = Instant::now();
        while !every_thread_exiting(pid) {
            assert!(start.elapsed() < Duration::from_secs(10), "the killed child never exited");
            std::thread::sleep(Duration::from_millis(1));
        }
        child.wait().expect("reaped");
        assert!(!every_thread_exiting(pid), "a reaped pid has no threads to read: no");
    }

    #[test]
    fn a_stopped_process_is_not_exiting() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pid = child.id();
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_millis(20));
        assert!(!every_thread_exiting(pid), "a stopped process may go on");
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        child.wait().expect("reaped");
    }
}
