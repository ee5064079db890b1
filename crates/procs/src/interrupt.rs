//! Ctrl-C, `kill` and a closed terminal, turned into an error that benchmarks return like any
//! other, so that their guards still kill the replica processes and remove the run directory.
//!
//! The replica processes run in their own process group (see `cluster`), so the terminal's
//! Ctrl-C reaches only this process; it is this process that stops them.

use std::sync::atomic::{AtomicI32, Ordering};

/// The signal that asked us to stop, 0 for none.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only an atomic store: nothing else is safe in a signal handler.
    RECEIVED.store(signal, Ordering::Relaxed);
}

/// From now on SIGINT, SIGTERM and SIGHUP set a flag that [`check`] reports, instead of ending
/// the process at once.
pub fn catch() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let handler = on_signal as extern "C" fn(libc::c_int);
        // SAFETY: installs a handler that only stores to an atomic (async-signal-safe); the
        // previous handler is not needed.
        unsafe { libc::signal(signal, handler as libc::sighandler_t) };
    }
}

/// Fails once one of the signals of [`catch`] arrived.
pub fn check() -> Result<(), String> {
    match RECEIVED.load(Ordering::Relaxed) {
        0 => Ok(()),
        signal => Err(format!("interrupted (signal {signal})")),
    }
}
