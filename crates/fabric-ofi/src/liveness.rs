//! Crash notification over plain TCP: each node accepts connections on its liveness port and
//! holds them open; a peer that binds a connection to it keeps one such connection. When a
//! node's process dies, its kernel closes its sockets, and the peer reads end-of-file: a crash
//! notification without a timeout, never given for a live node (a stopped or cut-off node keeps
//! its sockets open, and is left to timeouts, as the fabric API says).

use mu_fabric::NodeId;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub(crate) struct Liveness {
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    watched: Mutex<HashMap<NodeId, Watch>>,
}

struct Watch {
    stream: TcpStream,
    dead: bool,
}

impl Liveness {
    /// Listens on `host:port` and holds every connection accepted there until dropped.
    pub(crate) fn listen(host: &str, port: u16) -> Result<Liveness, String> {
        let listener = TcpListener::bind((host, port))
            .map_err(|e| format!("liveness port {host}:{port}: {e}"))?;
        listener.set_nonblocking(true).map_err(|e| format!("liveness port: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let acceptor = std::thread::Builder::new()
            .name("mu-ofi-liveness".into())
            .spawn(move || {
                let mut held: Vec<TcpStream> = Vec::new();
                while !stopping.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            if stream.set_nonblocking(true).is_ok() {
                                held.push(stream);
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            // A watcher that closed its end (it bound again, or died) is let go,
                            // so that connections do not pile up over many bindings.
                            held.retain(|s| !closed_by_peer(s));
                            std::thread::sleep(Duration::from_millis(5))
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
            .map_err(|e| format!("liveness thread: {e}"))?;
        Ok(Liveness { stop, acceptor: Some(acceptor), watched: Mutex::new(HashMap::new()) })
    }

    /// Opens a connection to `peer`'s liveness port, replacing any earlier one (a connection
    /// bound again may lead to a new incarnation). Best effort: without it, `dead` says false.
    pub(crate) fn watch(&self, peer: NodeId, host: &str, port: u16, timeout: Duration) {
        let stream = (host, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .and_then(|addr| TcpStream::connect_timeout(&addr, timeout).ok());
        let mut watched = self.watched.lock().expect("liveness lock");
        match stream {
            Some(stream) if stream.set_nonblocking(true).is_ok() => {
                watched.insert(peer, Watch { stream, dead: false });
            }
            _ => {
                watched.remove(&peer);
            }
        }
    }

    /// Whether the watched connection to `peer` was closed by its end: the process died.
    pub(crate) fn dead(&self, peer: NodeId) -> bool {
        let mut watched = self.watched.lock().expect("liveness lock");
        let Some(w) = watched.get_mut(&peer) else { return false };
        if !w.dead {
            w.dead = closed_by_peer(&w.stream);
        }
        w.dead
    }
}

/// Whether the other end closed `stream` (end of file) or it broke; the peer never sends.
fn closed_by_peer(stream: &TcpStream) -> bool {
    let mut byte = 0u8;
    // SAFETY: a non-blocking peek of at most one byte into a local; no memory is kept.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n == 0
        || (n < 0 && {
            let e = std::io::Error::last_os_error();
            !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted)
        })
}

impl Drop for Liveness {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}
