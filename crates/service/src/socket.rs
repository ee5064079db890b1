//! Where clients reach a replica: its Unix socket in the run directory (clients on the same
//! host), or a TCP address (clients on other hosts, `[clients]` in the cluster's
//! configuration). Both carry the same frames.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// A replica's address for clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix stream socket's path.
    Unix(PathBuf),
    /// `"host:port"`.
    Tcp(String),
}

impl From<PathBuf> for Endpoint {
    fn from(path: PathBuf) -> Endpoint {
        Endpoint::Unix(path)
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(path) => write!(f, "{}", path.display()),
            Endpoint::Tcp(addr) => write!(f, "tcp://{addr}"),
        }
    }
}

/// A connection between a client and a replica.
pub(crate) enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

/// The addresses of `addr` (`"host:port"`), looked up within `timeout`. A literal address
/// needs no lookup. A name is looked up on a thread of its own, which the caller stops waiting
/// for after `timeout`: the system resolver may take seconds (an unreachable name server),
/// and a client's timeout must bound the whole operation. A lookup given up on ends on its own
/// later; a client moves on to the next replica meanwhile, so few are ever under way.
fn resolve(addr: &str, timeout: Duration) -> std::io::Result<Vec<SocketAddr>> {
    if let Ok(literal) = addr.parse::<SocketAddr>() {
        return Ok(vec![literal]);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let name = addr.to_string();
    std::thread::Builder::new().name("mu-resolve".into()).spawn(move || {
        let _ = tx.send(name.to_socket_addrs().map(Iterator::collect));
    })?;
    match rx.recv_timeout(timeout) {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("looking up {addr} took longer than {} ms", timeout.as_millis()),
        )),
    }
}

/// A connection to the Unix socket at `path`, waiting at most `timeout` (at least a
/// millisecond) for room in its backlog. A listener that does not accept (a replica stopped,
/// or stuck) lets connections queue up to its backlog and then makes the next connect wait
/// until it accepts: clients that asked a stopped leader who leads, every few milliseconds
/// during a long pause, would fill it, and the next connect would block for the whole pause.
/// The send timeout bounds that wait on Linux (`unix(7)`); the connect then fails with
/// `WouldBlock`, and the socket's send timeout is cleared again.
fn connect_unix(path: &std::path::Path, timeout: Duration) -> std::io::Result<UnixStream> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    socket.connect(&SockAddr::unix(path)?)?;
    socket.set_write_timeout(None)?;
    Ok(UnixStream::from(std::os::fd::OwnedFd::from(socket)))
}

impl Stream {
    /// Connects to `endpoint`, waiting at most `timeout` for the connection to open.
    pub(crate) fn connect(endpoint: &Endpoint, timeout: Duration) -> std::io::Result<Stream> {
        match endpoint {
            Endpoint::Unix(path) => connect_unix(path, timeout).map(Stream::Unix),
            Endpoint::Tcp(addr) => {
                let mut last = None;
                for a in resolve(addr, timeout)? {
                    match TcpStream::connect_timeout(&a, timeout) {
                        Ok(s) => return Stream::tcp(s),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::NotFound, format!("{addr}: no address"))
                }))
            }
        }
    }

    /// A TCP connection, with Nagle's delay off: every frame is a whole request or answer.
    pub(crate) fn tcp(stream: TcpStream) -> std::io::Result<Stream> {
        stream.set_nodelay(true)?;
        Ok(Stream::Tcp(stream))
    }

    pub(crate) fn try_clone(&self) -> std::io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }

    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(timeout),
            Stream::Tcp(s) => s.set_read_timeout(timeout),
        }
    }

    pub(crate) fn set_write_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(timeout),
            Stream::Tcp(s) => s.set_write_timeout(timeout),
        }
    }

    pub(crate) fn set_nonblocking(&self, nonblocking: bool) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(nonblocking),
            Stream::Tcp(s) => s.set_nonblocking(nonblocking),
        }
    }

    /// Ends one direction or both: a thread blocked reading (or, with `Both`, writing) returns
    /// at once.
    pub(crate) fn shutdown(&self, how: std::net::Shutdown) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.shutdown(how),
            Stream::Tcp(s) => s.shutdown(how),
        }
    }
}

// Reading and writing through a shared reference lets a server read and write one connection
// with a single file descriptor (no `try_clone`), and shut it down from another thread.
impl Read for &Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match *self {
            Stream::Unix(s) => (&*s).read(buf),
            Stream::Tcp(s) => (&*s).read(buf),
        }
    }
}

impl Write for &Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match *self {
            Stream::Unix(s) => (&*s).write(buf),
            Stream::Tcp(s) => (&*s).write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.flush(),
            Stream::Tcp(s) => s.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn literal_addresses_need_no_lookup_and_names_are_looked_up() {
        let literal = resolve("127.0.0.1:7000", Duration::from_millis(1)).unwrap();
        assert_eq!(literal, vec!["127.0.0.1:7000".parse::<SocketAddr>().unwrap()]);
        let named = resolve("localhost:7000", Duration::from_secs(5)).unwrap();
        assert!(named.iter().all(|a| a.port() == 7000 && a.ip().is_loopback()), "{named:?}");
    }

    /// A name that cannot be resolved fails within the timeout, however long the system
    /// resolver would take to say so.
    #[test]
    fn a_lookup_is_bounded_by_the_timeout() {
        let started = Instant::now();
        let e = resolve("no-such-host.invalid:7000", Duration::from_millis(300))
            .expect_err("the .invalid domain never resolves");
        assert!(started.elapsed() < Duration::from_secs(2), "took {:?}: {e}", started.elapsed());
    }

    /// A listener that does not accept (a stopped replica's) with a full backlog: the next
    /// connect fails within its timeout, not once the listener accepts.
    #[test]
    fn a_connect_to_a_listener_that_does_not_accept_is_bounded() {
        use socket2::{Domain, SockAddr, Socket, Type};
        let dir = std::env::temp_dir().join(format!("mu-connect-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("full.sock");
        let listener = Socket::new(Domain::UNIX, Type::STREAM, None).unwrap();
        listener.bind(&SockAddr::unix(&path).unwrap()).unwrap();
        listener.listen(1).unwrap();
        let endpoint = Endpoint::Unix(path);
        // On a thread of its own: a connect that blocks fails the test, not hangs it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Fill the backlog (its length plus one are queued) with connections never accepted.
            let mut queued = Vec::new();
            let full = loop {
                match Stream::connect(&endpoint, Duration::from_millis(50)) {
                    Ok(s) => queued.push(s),
                    Err(e) => break e,
                }
                if queued.len() == 64 {
                    let _ = tx.send(Err(format!("the backlog of 1 took {} connections", 64)));
                    return;
                }
            };
            let started = Instant::now();
            let again = Stream::connect(&endpoint, Duration::from_millis(100)).map(|_| ());
            let _ = tx.send(Ok((full, again, started.elapsed())));
        });
        let outcome = rx.recv_timeout(Duration::from_secs(10)).expect("connects that end");
        let (full, again, took) = outcome.unwrap();
        assert_eq!(full.kind(), std::io::ErrorKind::WouldBlock, "{full}");
        assert!(again.is_err() && took >= Duration::from_millis(90), "{again:?} after {took:?}");
        drop(listener);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
