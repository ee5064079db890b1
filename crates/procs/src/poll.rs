//! Waiting for a file descriptor to be ready, with a timeout: a listener's acceptor sleeps in
//! the kernel until a connection comes, yet looks at its stop flag now and then.

use std::os::fd::AsFd;
use std::os::unix::io::AsRawFd;
use std::time::Duration;

/// Waits until `fd` is readable (for a listener: a connection is waiting) or `timeout` has
/// passed (at most `i32::MAX` ms). Returns whether it is readable; an interruption or an
/// error returns `false`, and the caller's next call (`accept`, `read`) says which.
pub fn readable(fd: impl AsFd, timeout: Duration) -> bool {
    let fd = fd.as_fd();
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let timeout_ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: polls one pollfd that lives on this stack frame, for a descriptor the borrowed
    // `fd` keeps open during the call.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    n > 0 && pfd.revents & libc::POLLIN != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::{UnixListener, UnixStream};

    #[test]
    fn a_listener_is_readable_once_a_client_connects() {
        let dir = std::env::temp_dir().join(format!("mu-poll-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let listener = UnixListener::bind(&dir).unwrap();
        assert!(!readable(&listener, Duration::from_millis(20)), "nobody connected");
        let _client = UnixStream::connect(&dir).unwrap();
        assert!(readable(&listener, Duration::from_secs(5)), "a client waits");
        let _ = std::fs::remove_file(&dir);
    }
}
