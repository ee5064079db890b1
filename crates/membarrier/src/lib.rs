//! `membarrier(2)`: a memory barrier run on other CPUs, issued by one thread, so that a guard
//! written in Dekker's style (mark in flight, then check the grant; revoke, then look for marks)
//! can leave its hot side without a locked instruction. The hot side (the writer) then needs
//! only a compiler fence; the cold side (the revoker) pays a system call instead. Two guards use
//! it, each only when asked to ([`GuardBarrier::Membarrier`]): the shared-memory fabric's guard
//! on every connection side (writers in other processes: the global commands), and the replica's
//! guard on its own log (writer and revoker in one process: the private commands).
//!
//! The kernel's promise: once the expedited command returns, every CPU that was running a
//! thread of a registered process (of this process, for the private one) has run a full
//! barrier; a thread that was not running went through the scheduler, which is a full barrier
//! too. Registration is once per process, before the first light entry. Linux 4.14 (private)
//! and 4.16 (global) and later; a seccomp filter may refuse the call, which the `register_`
//! functions report. Should an expedited barrier fail later (the kernel may be short of memory
//! for it), the plain `MEMBARRIER_CMD_GLOBAL` stands in: slower (it waits for a scheduler grace
//! period, about a millisecond), it reaches every thread of every process, registered or not.

use std::io;

/// How writers enter a guarded section, and what revocations do to make up for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GuardBarrier {
    /// The writer marks itself in flight with a sequentially consistent store (a locked
    /// instruction on x86); the revoker fences. Works everywhere.
    #[default]
    Locked,
    /// The revoker issues `membarrier(2)` after every change that takes access away, so that
    /// registered writers may enter with a compiler fence only. Needs the system call (see the
    /// module's docs); where it is not available, asking for it is an error at start-up.
    Membarrier,
}

// From <linux/membarrier.h>.
const CMD_QUERY: libc::c_long = 0;
const CMD_GLOBAL: libc::c_long = 1 << 0;
const CMD_GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
const CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 2;
const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

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

/// Checks that `barrier` is offered, registers this process for it and issues it once (so that
/// a filter refusing the barrier itself shows now, not at the first revocation).
fn register_for(barrier: libc::c_long, registration: libc::c_long) -> io::Result<()> {
    let supported = call(CMD_QUERY)?;
    let needed = barrier | registration;
    if supported & needed != needed {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("the kernel offers membarrier commands {supported:#x}, not {needed:#x}"),
        ));
    }
    call(registration)?;
    call(barrier)?;
    Ok(())
}

/// Registers this process for global expedited barriers: after `Ok`, [`global`] works here and
/// reaches this process's threads whichever process issues it.
pub fn register() -> io::Result<()> {
    register_for(CMD_GLOBAL_EXPEDITED, CMD_REGISTER_GLOBAL_EXPEDITED)
}

/// Registers this process for private expedited barriers: after `Ok`, [`private`] works here.
pub fn register_private() -> io::Result<()> {
    register_for(CMD_PRIVATE_EXPEDITED, CMD_REGISTER_PRIVATE_EXPEDITED)
}

/// Runs a full memory barrier on every CPU running a thread of a registered process.
pub fn global() {
    expedited_or_plain(CMD_GLOBAL_EXPEDITED, "global");
}

/// Runs a full memory barrier on every CPU running a thread of this process.
pub fn private() {
    expedited_or_plain(CMD_PRIVATE_EXPEDITED, "private");
}

/// The expedited barrier, tried a few times (`ENOMEM` when the kernel cannot allocate its CPU
/// mask, `EINTR`), then the plain global one. A revoker that promised the barrier and can issue
/// neither (a seccomp filter installed after start-up) stops the process rather than let a
/// revocation through without its barrier: a fail-stop, which the protocols tolerate, where a
/// silent lapse they do not.
fn expedited_or_plain(cmd: libc::c_long, name: &str) {
    let mut last = None;
    for attempt in 0..4 {
        match call(cmd) {
            Ok(_) => return,
            Err(e) => last = Some(e),
        }
        if attempt > 0 {
            std::thread::yield_now();
        }
    }
    if let Err(e) = call(CMD_GLOBAL) {
        eprintln!(
            "mu: membarrier(2) failed after it worked at start-up ({name} expedited: {}; \
             plain global: {e}); stopping, since revocations would no longer be barriers",
            last.map_or_else(String::new, |e| e.to_string())
        );
        std::process::abort();
    }
}
