//! Child processes: signals to a child not yet reaped, and a session of its own.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

/// Sends `signal` to `child`. The pid cannot have gone to another process: a child that has not
/// been reaped keeps its pid, even once it has exited (a zombie).
pub fn signal(child: &Child, signal: libc::c_int) -> std::io::Result<()> {
    // SAFETY: kill takes a pid and a signal number, no memory; the pid is `child`'s (above).
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Makes the process `command` starts the leader of a session of its own, with no controlling
/// terminal: closing the terminal (SIGHUP) or its Ctrl-C does not reach it.
pub fn own_session(command: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec and calls only setsid, which
    // is async-signal-safe and touches no memory.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
