//! `membarrier(2)`: a memory barrier run on every CPU that runs a thread of a registered process,
//! issued by one thread. With it the guard's hot side (the writer) needs only a compiler fence,
//! and its cold side (the revoker) pays a system call instead (see [`crate::guard`],
//! [`crate::GuardBarrier::Membarrier`]).
//!
//! The commands used: `MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED` once per process, so that the
//! barrier reaches its threads, and `MEMBARRIER_CMD_GLOBAL_EXPEDITED`, which returns once every
//! CPU running a thread of a registered process has run a full barrier (the kernel interrupts
//! them); a thread that is not running went through the scheduler, which is a full barrier too.
//! Linux 4.16 and later; a seccomp filter may refuse the call, which [`register`] reports.
//! Should the expedited barrier fail later (the kernel may be short of memory for it), the
//! plain `MEMBARRIER_CMD_GLOBAL` stands in: slower (it waits for a scheduler grace period, about
//! a millisecond), it reaches every thread of every process, registered or not.

use std::io;

// From <linux/membarrier.h>.
const CMD_QUERY: libc::c_long = 0;
const CMD_GLOBAL: libc::c_long = 1 << 0;
const CMD_GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
const CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 2;

fn call(cmd: libc::c_long) -> io::Result<libc::c_long> {
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    let r =
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_uint, 0 as libc::c_int) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Registers this process for global expedited barriers and checks that they can be issued:
/// after `Ok`, [`global`] works in this process and reaches its threads.
pub fn register() -> io::Result<()> {
    let supported = call(CMD_QUERY)?;
    let needed = CMD_GLOBAL_EXPEDITED | CMD_REGISTER_GLOBAL_EXPEDITED;
    if supported & needed != needed {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("the kernel offers membarrier commands {supported:#x}, not {needed:#x}"),
        ));
    }
    call(CMD_REGISTER_GLOBAL_EXPEDITED)?;
    // Issued once here, so that a filter refusing the barrier itself shows now, not at the
    // first revocation.
    call(CMD_GLOBAL_EXPEDITED)?;
    Ok(())
}

/// Runs a full memory barrier on every CPU running a thread of a registered process.
///
/// The expedited barrier is tried a few times (it fails with `ENOMEM` when the kernel cannot
/// allocate its CPU mask, or `EINTR`), then the plain global one. A revoker that advertised the
/// barrier and can issue neither (a seccomp filter installed after start-up) stops the process
/// rather than let a revocation through without its barrier: a fail-stop, which the protocols
/// tolerate, where a silent lapse they do not.
pub fn global() {
    let mut last = None;
    for attempt in 0..4 {
        match call(CMD_GLOBAL_EXPEDITED) {
            Ok(_) => return,
            Err(e) => last = Some(e),
        }
        if attempt > 0 {
            std::thread::yield_now();
        }
    }
    if let Err(e) = call(CMD_GLOBAL) {
        eprintln!(
            "mu-fabric-shm: membarrier(2) failed after it worked at start-up (expedited: {}; \
             plain: {e}); stopping, since revocations of this node would no longer be barriers",
            last.map_or_else(String::new, |e| e.to_string())
        );
        std::process::abort();
    }
}
