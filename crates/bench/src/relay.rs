//! A plain byte relay, for `mu bench e2e`'s `relayed` rows ([`crate::e2e_apps::Way::Relayed`]):
//! it listens on a Unix socket of its own and, for each client it accepts, connects to the
//! server's Unix socket and copies bytes both ways, one thread per direction with blocking
//! reads and writes through a buffer the size of the fronts' (64 KiB). It parses nothing, so it
//! costs what a front's data path costs in socket crossings and thread wake-ups, and nothing
//! of the front's own work.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The bytes read at once from either side: the fronts' read buffer (`mu_redis::front`,
/// `mu_memcached::front`).
const CHUNK_BYTES: usize = 64 << 10;

/// A relay from its own socket to a server's, stopped when dropped: its connections are shut
/// down, its threads joined and its socket removed.
pub struct Relay {
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    /// The copying threads still running, both directions of every connection.
    pipes: Arc<AtomicUsize>,
    acceptor: Option<JoinHandle<()>>,
}

impl Relay {
    /// Listens on `socket` (which must not exist) and relays each client to `server`.
    pub fn start(socket: &Path, server: &Path) -> Result<Relay, String> {
        let listener = UnixListener::bind(socket)
            .map_err(|e| format!("relay: binding {}: {e}", socket.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let pipes = Arc::new(AtomicUsize::new(0));
        let (server, s, p) = (server.to_path_buf(), stop.clone(), pipes.clone());
        let acceptor = std::thread::Builder::new()
            .name("relay-accept".into())
            .spawn(move || accept(listener, &server, &s, &p))
            .map_err(|e| format!("relay: no thread: {e}"))?;
        Ok(Relay { socket: socket.to_path_buf(), stop, pipes, acceptor: Some(acceptor) })
    }

    /// The socket clients connect to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// How many copying threads run: two for each connection still open.
    pub fn pipes_running(&self) -> usize {
        self.pipes.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // The acceptor blocks in accept: a connection of our own wakes it to see `stop`.
        let woken = UnixStream::connect(&self.socket).is_ok();
        if let Some(acceptor) = self.acceptor.take().filter(|_| woken) {
            let _ = acceptor.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// One client's connection: both its sockets (to shut them down) and its two threads.
struct Connection {
    sockets: [UnixStream; 2],
    threads: [JoinHandle<()>; 2],
}

/// Accepts clients until `stop`, each relayed to a connection of its own to `server`; then
/// shuts every connection down and joins its threads.
fn accept(listener: UnixListener, server: &Path, stop: &AtomicBool, pipes: &Arc<AtomicUsize>) {
    let mut open: Vec<Connection> = Vec::new();
    for client in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        // Connections whose threads have ended are forgotten as new ones come.
        open.retain(|c| !c.threads.iter().all(JoinHandle::is_finished));
        let Ok(client) = client else { continue };
        // A server that refuses: the client is closed, as the fronts close theirs.
        let Ok(upstream) = UnixStream::connect(server) else { continue };
        if let Ok(c) = connect(client, upstream, pipes) {
            open.push(c);
        }
    }
    for c in open {
        for socket in &c.sockets {
            let _ = socket.shutdown(Shutdown::Both);
        }
        for thread in c.threads {
            let _ = thread.join();
        }
    }
}

/// Starts copying `client` to `server` and back, a thread each way.
fn connect(
    client: UnixStream,
    server: UnixStream,
    pipes: &Arc<AtomicUsize>,
) -> std::io::Result<Connection> {
    let sockets = [client.try_clone()?, server.try_clone()?];
    let ends = [(client.try_clone()?, server.try_clone()?), (server, client)];
    let mut threads = Vec::new();
    for (i, (from, to)) in ends.into_iter().enumerate() {
        let running = pipes.clone();
        pipes.fetch_add(1, Ordering::SeqCst);
        let name = ["relay-up", "relay-down"][i];
        let spawned = std::thread::Builder::new().name(name.into()).spawn(move || {
            copy(from, to);
            running.fetch_sub(1, Ordering::SeqCst);
        });
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                pipes.fetch_sub(1, Ordering::SeqCst);
                // The other direction, if it started, ends with the sockets.
                for s in &sockets {
                    let _ = s.shutdown(Shutdown::Both);
                }
                return Err(e);
            }
        }
    }
    let threads: [JoinHandle<()>; 2] = threads.try_into().expect("two threads");
    Ok(Connection { sockets, threads })
}

/// Copies `from` to `to` until either side closes or fails; then shuts both sockets down, so
/// that the other direction's thread, blocked in its read, ends too.
fn copy(mut from: UnixStream, mut to: UnixStream) {
    let mut chunk = vec![0u8; CHUNK_BYTES];
    loop {
        match from.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&chunk[..n]).is_err() {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use mu_procs::run_dir::RunDir;
    use std::time::{Duration, Instant};

    /// Waits up to a few seconds for `done`.
    fn eventually(done: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// A relay to a server socket in a fresh directory; the client and the server's end of
    /// the relayed connection.
    fn relayed(dir: &RunDir) -> (Relay, UnixStream, UnixStream) {
        let server = UnixListener::bind(dir.path().join("server.sock")).unwrap();
        let relay =
            Relay::start(&dir.path().join("relay.sock"), &dir.path().join("server.sock")).unwrap();
        let client = UnixStream::connect(relay.socket()).unwrap();
        let (at_server, _) = server.accept().unwrap();
        for s in [&client, &at_server] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        (relay, client, at_server)
    }

    fn read_exact(s: &mut UnixStream, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        s.read_exact(&mut buf).unwrap();
        buf
    }

    #[test]
    fn bytes_go_both_ways_and_a_closed_client_ends_both_threads() {
        let dir = RunDir::create("relay-test-client").unwrap();
        let (relay, mut client, mut server) = relayed(&dir);
        client.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
        assert_eq!(read_exact(&mut server, 14), b"*1\r\n$4\r\nPING\r\n");
        // More than one buffer's worth, so that it takes several reads.
        let big: Vec<u8> = (0..3 * CHUNK_BYTES).map(|i| i as u8).collect();
        let writer = {
            let mut server = server.try_clone().unwrap();
            let big = big.clone();
            std::thread::spawn(move || server.write_all(&big).unwrap())
        };
        assert_eq!(read_exact(&mut client, big.len()), big);
        writer.join().unwrap();
        assert_eq!(relay.pipes_running(), 2);
        drop(client);
        // The server sees its end closed, and no copying thread is left.
        assert_eq!(server.read(&mut [0u8; 8]).unwrap(), 0);
        assert!(eventually(|| relay.pipes_running() == 0), "{} running", relay.pipes_running());
    }

    #[test]
    fn a_closed_server_ends_the_client_and_dropping_removes_the_socket() {
        let dir = RunDir::create("relay-test-server").unwrap();
        let (relay, mut client, mut server) = relayed(&dir);
        server.write_all(b"+OK\r\n").unwrap();
        assert_eq!(read_exact(&mut client, 5), b"+OK\r\n");
        drop(server);
        assert_eq!(client.read(&mut [0u8; 8]).unwrap(), 0);
        assert!(eventually(|| relay.pipes_running() == 0), "{} running", relay.pipes_running());
        let socket = relay.socket().to_path_buf();
        drop(relay);
        assert!(!socket.exists(), "{} left behind", socket.display());
        // A connection still open when its relay is dropped is shut down with it.
        let second = dir.subdirectory("second").unwrap();
        let (relay, mut client, _server) = relayed(&second);
        drop(relay);
        assert_eq!(client.read(&mut [0u8; 8]).unwrap(), 0);
    }
}
