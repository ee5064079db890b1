//! Fencing a peer for good: the shared-memory analogue of cycling an RDMA queue pair.
//!
//! A writer stopped in the middle of a copy still holds the guard; the revoker cannot know when
//! (or whether) the copy will resume. After a bounded wait it kills the writer's process and waits
//! for its death, as STONITH fencing does: a dead process writes nothing.
//!
//! The pid comes from the peer's control header. To avoid killing an unrelated process that reused
//! a dead peer's pid, the pid is pinned with a pidfd first and the peer's kernel-kept death flag is
//! checked after: while the flag says alive, the process that holds the node's liveness lock is
//! alive, so its pid cannot have been reused and the pidfd names it.

use crate::liveness::is_alive;
use crate::mapping::Mapping;
use std::time::{Duration, Instant};

/// Kills the process `pid` that runs the node whose control segment is `ctl`, and waits up to
/// `timeout` for it to die. Returns once the node reads as dead.
pub fn fence(pid: u32, ctl: &Mapping, timeout: Duration) -> Result<(), String> {
    if !is_alive(ctl) {
        return Ok(());
    }
    if pid == std::process::id() {
        return Err("the peer runs in this very process, which cannot fence itself".into());
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no memory is
    // passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) } as i32;
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        return if is_alive(ctl) { Err(format!("pidfd_open({pid}): {err}")) } else { Ok(()) };
    }
    let result = kill_and_wait(fd, pid, ctl, timeout);
    // SAFETY: `fd` is a descriptor we own and close once.
    unsafe { libc::close(fd) };
    result
}

fn kill_and_wait(fd: i32, pid: u32, ctl: &Mapping, timeout: Duration) -> Result<(), String> {
    if !is_alive(ctl) {
        return Ok(());
    }
    // SAFETY: sends SIGKILL through a pidfd we own; no memory is passed (info is null).
    let rc = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, fd, libc::SIGKILL, std::ptr::null::<u8>(), 0)
    };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if is_alive(ctl) {
            return Err(format!("killing pid {pid}: {err}"));
        }
        return Ok(());
    }
    let deadline = Instant::now() + timeout;
    loop {
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: polls one pollfd that lives on this stack frame.
        unsafe { libc::poll(&mut pfd, 1, 10) };
        // The kernel marks the liveness lock's owner dead while the process exits, before the pidfd
        // becomes readable; both must hold before the memory is known to be quiet.
        if pfd.revents != 0 && !is_alive(ctl) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("pid {pid} did not die within {timeout:?} of SIGKILL"));
        }
    }
}
