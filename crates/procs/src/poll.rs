//! Waiting for a file descriptor to be ready, with a timeout: a listener's acceptor sleeps in
//! the kernel until a connection comes, yet looks at its stop flag now and then. And [`relay`],
//! which copies two connections into each other (a follower's front relaying its client to the
//! leader's).

use std::io::{Read, Write};
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

/// Copies bytes both ways between `client` and `upstream` until either closes: `Ok` when the
/// client closes, an error when the upstream does or either fails.
pub fn relay<C, U>(mut client: C, mut upstream: U) -> Result<(), String>
where
    C: Read + Write + AsRawFd,
    U: Read + Write + AsRawFd,
{
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let mut fds = [
            libc::pollfd { fd: client.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: upstream.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: `fds` is a valid array of two pollfd for the length given, and both
        // descriptors stay open for the call (borrowed from the streams).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("relaying: {e}"));
        }
        let ready =
            |f: &libc::pollfd| f.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
        if ready(&fds[0]) {
            let n = client.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                return Ok(());
            }
            upstream.write_all(&chunk[..n]).map_err(|e| format!("relaying upstream: {e}"))?;
        }
        if ready(&fds[1]) {
            let n = upstream.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the upstream closed the connection".into());
            }
            client.write_all(&chunk[..n]).map_err(|e| e.to_string())?;
        }
    }
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
