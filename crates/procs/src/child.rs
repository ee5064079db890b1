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

/// A private server process of a replica (its `redis-server` or `memcached`): it dies with the
/// thread that started it, even when the replica is killed, and is killed and reaped when
/// dropped.
pub struct ServerChild {
    child: Child,
}

impl ServerChild {
    /// Starts `command` (its output already pointed where it goes) and returns once `ready`
    /// says it serves; `what` and `log` name it and its log in the error if it does not within
    /// `wait`.
    pub fn start(
        command: &mut Command,
        what: &str,
        log: &std::path::Path,
        wait: std::time::Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<ServerChild, String> {
        // SAFETY: `prctl` is async-signal-safe and touches no memory of the parent; the closure
        // runs in the child between fork and exec.
        unsafe {
            command.pre_exec(|| {
                // The server must not outlive its replica: the kernel kills it when the thread
                // that started it (the replica's main thread) exits.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().map_err(|e| format!("starting {what}: {e}"))?;
        let mut server = ServerChild { child };
        let deadline = std::time::Instant::now() + wait;
        loop {
            if ready() {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("{what} exited ({status}) (see {})", log.display()));
            }
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "{what} did not answer within {wait:?} (see {})",
                    log.display()
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The server's pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
