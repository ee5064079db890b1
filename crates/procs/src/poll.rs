//! Waiting for a file descriptor to be ready, with a timeout: a listener's acceptor sleeps in
//! the kernel until a connection comes, yet looks at its stop flag now and then. And [`relay`],
//! which copies two connections into each other (a follower's front relaying its client to the
//! leader's).

use std::io::{ErrorKind, Read, Write};
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

/// Bytes read from one side and not yet written to the other, per direction: past this, the
/// relay stops reading that side until the other takes some.
const PENDING_BYTES_MAX: usize = 256 << 10;

/// Copies bytes both ways between `client` and `upstream` until either closes: `Ok` when the
/// client closes (after what it sent is passed on), an error when the upstream does or either
/// fails. Both are made non-blocking: a side that does not read never stops the other
/// direction (a client that pipelines requests while the upstream's replies wait for it would
/// otherwise stall its own connection, each side blocked writing to the other).
pub fn relay<C, U>(mut client: C, mut upstream: U) -> Result<(), String>
where
    C: Read + Write + AsRawFd,
    U: Read + Write + AsRawFd,
{
    set_nonblocking(client.as_raw_fd())?;
    set_nonblocking(upstream.as_raw_fd())?;
    let mut chunk = vec![0u8; 64 << 10];
    let mut to_upstream: Vec<u8> = Vec::new();
    let mut to_client: Vec<u8> = Vec::new();
    let mut client_open = true;
    loop {
        if !client_open && to_upstream.is_empty() {
            return Ok(());
        }
        let events = |read: bool, write: bool| {
            (if read { libc::POLLIN } else { 0 }) | (if write { libc::POLLOUT } else { 0 })
        };
        let mut fds = [
            libc::pollfd {
                // A closed client is left out (poll skips a negative descriptor).
                fd: if client_open { client.as_raw_fd() } else { -1 },
                events: events(
                    client_open && to_upstream.len() < PENDING_BYTES_MAX,
                    !to_client.is_empty(),
                ),
                revents: 0,
            },
            libc::pollfd {
                fd: upstream.as_raw_fd(),
                events: events(to_client.len() < PENDING_BYTES_MAX, !to_upstream.is_empty()),
                revents: 0,
            },
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
        // A hang-up or an error shows in the read (0 bytes) or the write that follows.
        let gone = libc::POLLHUP | libc::POLLERR;
        let readable = |f: &libc::pollfd| f.revents & (libc::POLLIN | gone) != 0;
        let writable = |f: &libc::pollfd| f.revents & (libc::POLLOUT | gone) != 0;
        let to_client_failed = client_open
            && writable(&fds[0])
            && !to_client.is_empty()
            && write_some(&mut client, &mut to_client).is_err();
        if to_client_failed {
            // The client is gone: what it sent still goes upstream.
            client_open = false;
            to_client.clear();
        }
        if writable(&fds[1]) && !to_upstream.is_empty() {
            write_some(&mut upstream, &mut to_upstream)
                .map_err(|e| format!("relaying upstream: {e}"))?;
        }
        if client_open && readable(&fds[0]) && to_upstream.len() < PENDING_BYTES_MAX {
            match read_some(&mut client, &mut chunk, &mut to_upstream) {
                Ok(true) => {}
                Ok(false) => client_open = false,
                Err(e) => return Err(e.to_string()),
            }
        }
        if readable(&fds[1]) && to_client.len() < PENDING_BYTES_MAX {
            if !read_some(&mut upstream, &mut chunk, &mut to_client).map_err(|e| e.to_string())? {
                return Err("the upstream closed the connection".into());
            }
            if !client_open {
                to_client.clear();
            }
        }
    }
}

fn set_nonblocking(fd: std::os::fd::RawFd) -> Result<(), String> {
    // SAFETY: fcntl on a descriptor the caller keeps open; no pointers are passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(format!("relaying: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Reads what `from` has into `pending`: `false` at its end.
fn read_some(
    from: &mut impl Read,
    chunk: &mut [u8],
    pending: &mut Vec<u8>,
) -> std::io::Result<bool> {
    match from.read(chunk) {
        Ok(0) => Ok(false),
        Ok(n) => {
            pending.extend_from_slice(&chunk[..n]);
            Ok(true)
        }
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => Ok(true),
        Err(e) => Err(e),
    }
}

/// Writes what `to` takes of `pending` now, and forgets it.
fn write_some(to: &mut impl Write, pending: &mut Vec<u8>) -> std::io::Result<()> {
    while !pending.is_empty() {
        match to.write(pending) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => drop(pending.drain(..n)),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
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

    /// A client that writes far more than the sockets hold while it reads on another thread,
    /// to an upstream that answers each byte with four (as a `get` answers with a value): with
    /// blocking writes both ways, the relay would block writing upstream while the upstream
    /// blocks writing its answers back to the relay.
    #[test]
    fn a_pipelining_client_does_not_stall_the_relay() {
        let (client, relay_client) = UnixStream::pair().unwrap();
        let (relay_upstream, mut upstream) = UnixStream::pair().unwrap();
        let relaying = std::thread::spawn(move || relay(relay_client, relay_upstream));
        let echo = std::thread::spawn(move || {
            let mut chunk = vec![0u8; 4096];
            while let Ok(n @ 1..) = upstream.read(&mut chunk) {
                for _ in 0..4 {
                    if upstream.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                }
            }
        });
        let sent_bytes = 4 << 20;
        let mut reader = client.try_clone().unwrap();
        reader.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let reading = std::thread::spawn(move || {
            let mut echoed = vec![0u8; 4 * sent_bytes];
            reader.read_exact(&mut echoed).map(|()| echoed.iter().all(|&b| b == b'x'))
        });
        let mut writer = client;
        writer.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        writer.write_all(&vec![b'x'; sent_bytes]).unwrap();
        assert!(reading.join().unwrap().expect("every byte echoed within 20 s"));
        writer.shutdown(std::net::Shutdown::Both).unwrap();
        assert_eq!(relaying.join().unwrap(), Ok(()));
        echo.join().unwrap();
    }
}
