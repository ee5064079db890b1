//! Crash notification over plain TCP: each node accepts connections on its liveness port and
//! holds them open; a peer that binds a connection to it keeps one such connection. When a
//! node's process dies, its kernel closes its sockets, and the peer reads end-of-file: a crash
//! notification without a timeout, never given for a live node (a stopped or cut-off node keeps
//! its sockets open, and is left to timeouts, as the fabric API says).
//!
//! The same port takes two questions:
//! * hello requests: a higher node that must not open a stream to a lower one asks it to (see
//!   `Node::hello`);
//! * "who are you": the node answers with its incarnation, so that a peer can tell a refusal
//!   from a death where its provider cannot (see `Node::classify_cancel`).
//!
//! And a watch carries doorbell rings (`doorbell.rs`), as many as the watcher sends.

use crate::doorbell::{cluster_tag, ring_message, Doorbell, RING_MAGIC};
use mu_fabric::NodeId;
use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the acceptor sleeps in `poll` before it looks at `stop` again.
const POLL_MS: i32 = 5;

/// Hello requests waiting for the hello thread; past that they are dropped (askers ask again).
const HELLO_QUEUE: usize = 64;

/// Connections accepted past `HELD_MAX` that may still ask a question, and for how long.
const GRACED_MAX: usize = 32;
const GRACE: Duration = Duration::from_millis(200);

/// The most connections the acceptor holds. A peer holds one (its watch) and opens others only
/// for a moment (a question), so a node of a cluster of any allowed size needs far fewer; past
/// it, a new connection may still ask its question for a moment (`GRACE`), and is then told
/// so (`FULL`) and closed. Unbounded, anyone reaching the port could take
/// every file descriptor of the replica (it then could not open its own connections). Those
/// held are never let go for newer ones: a watch closed by us would read as a crash.
pub(crate) const HELD_MAX: usize = 256;

pub(crate) struct Liveness {
    /// The cluster whose rings this node takes, and its doorbell.
    cluster_id: u64,
    doorbell: Arc<Doorbell>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    /// Shared with the acceptor, which also waits on them: a peer's death rings the doorbell.
    watched: Arc<Mutex<HashMap<NodeId, Watch>>>,
    on_hello_request: Arc<Mutex<Option<HelloHandler>>>,
}

/// What the node does when a peer asks, over its liveness port, for a hello on a channel.
pub(crate) type HelloHandler = Box<dyn Fn(u8, NodeId) + Send>;

/// A hello request: magic, channel, a spare byte, the asking node (little-endian).
const HELLO_REQUEST_MAGIC: [u8; 4] = *b"MUHI";
const HELLO_REQUEST_BYTES: usize = 8;

fn hello_request(channel: u8, from: NodeId) -> [u8; HELLO_REQUEST_BYTES] {
    let mut m = [0u8; HELLO_REQUEST_BYTES];
    m[..4].copy_from_slice(&HELLO_REQUEST_MAGIC);
    m[4] = channel;
    m[6..].copy_from_slice(&from.0.to_le_bytes());
    m
}

fn parse_hello_request(m: &[u8]) -> Option<(u8, NodeId)> {
    (m.len() == HELLO_REQUEST_BYTES && m[..4] == HELLO_REQUEST_MAGIC)
        .then(|| (m[4], NodeId(u16::from_le_bytes([m[6], m[7]]))))
}

/// "Who are you": magic and four spare bytes; the same length as a hello request.
const WHO_MAGIC: [u8; 4] = *b"MUWH";
/// The answer: magic, then the node's incarnation (little-endian).
const IAM_MAGIC: [u8; 4] = *b"MUIA";

/// Sent on a connection the node does not hold (it holds `HELD_MAX` already) before closing it.
const FULL: [u8; HELLO_REQUEST_BYTES] = *b"MUFL\0\0\0\0";

fn iam(incarnation: u32) -> [u8; HELLO_REQUEST_BYTES] {
    let mut m = [0u8; HELLO_REQUEST_BYTES];
    m[..4].copy_from_slice(&IAM_MAGIC);
    m[4..].copy_from_slice(&incarnation.to_le_bytes());
    m
}

struct Watch {
    stream: TcpStream,
    dead: bool,
    /// Whether its other end's closing rang the doorbell already (the acceptor then no longer
    /// waits on it: a closed end stays readable).
    rung: bool,
}

/// The watches the acceptor waits on with its own connections (those whose end has not
/// closed yet), by peer and descriptor.
fn watches_to_wait_on(watched: &Mutex<HashMap<NodeId, Watch>>) -> Vec<(NodeId, RawFd)> {
    let watched = watched.lock().expect("liveness lock");
    watched.iter().filter(|(_, w)| !w.rung).map(|(&p, w)| (p, w.stream.as_raw_fd())).collect()
}

/// Rings the doorbell for the watches whose end the acceptor's wait saw close (or send its
/// one message, `FULL`), each once: a peer's process died, and this node's idle threads
/// should hear of it now, not at their next timeout (`crash_notified` says which one). A
/// watch replaced during the wait is left to the next one (a ring is only a hint anyway).
fn ring_for_ended(
    watched: &Mutex<HashMap<NodeId, Watch>>,
    ended: &[(NodeId, RawFd)],
    rings: &Rings,
) {
    let mut any = false;
    let mut watched = watched.lock().expect("liveness lock");
    for (peer, fd) in ended {
        if let Some(w) = watched.get_mut(peer).filter(|w| w.stream.as_raw_fd() == *fd) {
            any |= !std::mem::replace(&mut w.rung, true);
        }
    }
    drop(watched);
    if any {
        rings.doorbell.ring();
    }
}

/// A connection the acceptor holds: a watcher's (it never sends) or an asker's.
struct Held {
    stream: TcpStream,
    /// The start of the one question an asker sends.
    received: [u8; HELLO_REQUEST_BYTES],
    received_len: usize,
    /// For one accepted past `HELD_MAX`: until when it may ask its question, after which it is
    /// told `FULL` and closed. Questions are answered however many connections are held
    /// (idle ones whose other end vanished, or a flood): refused with the rest, a higher node
    /// could not ask for a hello and so could not bind.
    grace_until: Option<Instant>,
}

impl Held {
    fn new(stream: TcpStream, grace_until: Option<Instant>) -> Held {
        Held { stream, received: [0; HELLO_REQUEST_BYTES], received_len: 0, grace_until }
    }

    /// Reads what came; answers the question once it is whole. `false` once the connection is
    /// done with: the other end closed or broke it, or its question was answered. Askers open
    /// a connection per question, so one is all a connection gets: a sender of questions
    /// without end (that never reads the answers) took memory without bound, and the
    /// acceptor's thread with it.
    fn serve(&mut self, incarnation: u32, hellos: &HelloQueue, rings: &Rings) -> bool {
        loop {
            let room = &mut self.received[self.received_len..];
            match self.stream.read(room) {
                Ok(0) => return false,
                Ok(n) => self.received_len += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
            if self.received_len < HELLO_REQUEST_BYTES {
                continue;
            }
            let message = self.received;
            if message[..4] == RING_MAGIC {
                // A watcher's ring: taken if it is for our cluster, and the watch goes on.
                if message[4..] == cluster_tag(rings.cluster_id).to_le_bytes() {
                    rings.doorbell.ring();
                }
                self.received_len = 0;
                continue;
            }
            if message[..4] == WHO_MAGIC {
                // Eight bytes on a fresh connection fit its send buffer: a non-blocking write
                // takes them whole, or the asker is gone.
                let _ = self.stream.write_all(&iam(incarnation));
            } else if let Some((channel, from)) = parse_hello_request(&message) {
                hellos.push(channel, from);
            }
            // Not one of ours: let it go, as every connection once answered.
            return false;
        }
    }
}

/// Hello requests waiting for the hello thread. A hello may wait for its post up to the connect
/// timeout, and on the acceptor's thread it held up every question behind it. A request already
/// waiting is not queued again (a higher node asks on every binding attempt), and with the
/// queue full one is dropped: the asker asks again.
struct HelloQueue {
    sender: SyncSender<(u8, NodeId)>,
    waiting: Arc<Mutex<HashSet<(u8, NodeId)>>>,
}

/// What the acceptor needs for rings: the cluster they must be of, and the doorbell.
struct Rings {
    cluster_id: u64,
    doorbell: Arc<Doorbell>,
}

impl HelloQueue {
    /// The queue, and the thread that says the hellos asked for to `on_request`'s handler. The
    /// thread ends once the acceptor has (it holds the only sender).
    fn start(on_request: Arc<Mutex<Option<HelloHandler>>>) -> Result<HelloQueue, String> {
        let (sender, hello_requests) = std::sync::mpsc::sync_channel::<(u8, NodeId)>(HELLO_QUEUE);
        let waiting = Arc::new(Mutex::new(HashSet::new()));
        let taken = waiting.clone();
        std::thread::Builder::new()
            .name("mu-ofi-hello".into())
            .spawn(move || {
                while let Ok((channel, from)) = hello_requests.recv() {
                    // Taken off first: a request that comes while this one is said is a new one.
                    taken.lock().expect("hello queue").remove(&(channel, from));
                    if let Some(handler) = on_request.lock().expect("hello handler").as_ref() {
                        handler(channel, from);
                    }
                }
            })
            .map_err(|e| format!("hello thread: {e}"))?;
        Ok(HelloQueue { sender, waiting })
    }

    fn push(&self, channel: u8, from: NodeId) {
        let mut waiting = self.waiting.lock().expect("hello queue");
        if !waiting.contains(&(channel, from)) && self.sender.try_send((channel, from)).is_ok() {
            waiting.insert((channel, from));
        }
    }
}

impl Liveness {
    /// Listens on `host:port` and holds every connection accepted there until the other end
    /// closes it, serving the requests that come on them for the node of `incarnation`.
    pub(crate) fn listen(
        host: &str,
        port: u16,
        incarnation: u32,
        cluster_id: u64,
    ) -> Result<Liveness, String> {
        let doorbell = Arc::new(Doorbell::default());
        let rings = Rings { cluster_id, doorbell: doorbell.clone() };
        let listener = TcpListener::bind((host, port))
            .map_err(|e| format!("liveness port {host}:{port}: {e}"))?;
        listener.set_nonblocking(true).map_err(|e| format!("liveness port: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let on_hello_request: Arc<Mutex<Option<HelloHandler>>> = Arc::new(Mutex::new(None));
        let stopping = stop.clone();
        let hellos = HelloQueue::start(on_hello_request.clone())?;
        let watched = Arc::new(Mutex::new(HashMap::new()));
        let waited_watches = watched.clone();
        let acceptor = std::thread::Builder::new()
            .name("mu-ofi-liveness".into())
            .spawn(move || {
                let mut held: Vec<Held> = Vec::new();
                while !stopping.load(Ordering::Acquire) {
                    let watches = watches_to_wait_on(&waited_watches);
                    let mut fds: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
                        .chain(held.iter().map(|h| h.stream.as_raw_fd()))
                        .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
                        .chain(watches.iter().map(|&(_, fd)| libc::pollfd {
                            fd,
                            events: libc::POLLIN | libc::POLLRDHUP,
                            revents: 0,
                        }))
                        .collect();
                    // SAFETY: `fds` is a live array of `fds.len()` pollfd structures.
                    let ready =
                        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, POLL_MS) };
                    let now = Instant::now();
                    let (held_fds, watch_fds) = fds[1..].split_at(held.len());
                    let ended: Vec<(NodeId, RawFd)> = watches
                        .iter()
                        .zip(watch_fds)
                        .filter(|(_, p)| p.revents != 0)
                        .map(|(&w, _)| w)
                        .collect();
                    if !ended.is_empty() {
                        ring_for_ended(&waited_watches, &ended, &rings);
                    }
                    let mut keep = held_fds.iter().map(|p| p.revents == 0);
                    held.retain_mut(|h| {
                        let open =
                            keep.next().unwrap_or(true) || h.serve(incarnation, &hellos, &rings);
                        if open && h.grace_until.is_some_and(|until| now >= until) {
                            // Said before closing, so that a peer's watch closed here is not
                            // read as this node's death.
                            let _ = h.stream.write_all(&FULL);
                            return false;
                        }
                        open
                    });
                    if ready <= 0 {
                        continue;
                    }
                    if fds[0].revents != 0 {
                        accept_all(&listener, &mut held);
                    }
                }
            })
            .map_err(|e| format!("liveness thread: {e}"))?;
        Ok(Liveness {
            cluster_id,
            doorbell,
            stop,
            acceptor: Some(acceptor),
            watched,
            on_hello_request,
        })
    }

    /// What to do when a peer asks for a hello (see `Node::hello`).
    pub(crate) fn on_hello_request(&self, handler: HelloHandler) {
        *self.on_hello_request.lock().expect("hello handler") = Some(handler);
    }

    /// Asks the node listening on `host:port` to say hello to `from` on `channel`.
    pub(crate) fn ask_hello(
        host: &str,
        port: u16,
        channel: u8,
        from: NodeId,
        timeout: Duration,
    ) -> Result<(), String> {
        let failed = |e: std::io::Error| format!("asking {host}:{port} for a hello: {e}");
        let mut stream = connect(host, port, timeout).map_err(failed)?;
        stream.write_all(&hello_request(channel, from)).map_err(failed)
    }

    /// Asks the node listening on `host:port` for its incarnation; an error if it does not
    /// answer within `timeout` (its process is gone, stopped or cut off).
    pub(crate) fn ask_incarnation(host: &str, port: u16, timeout: Duration) -> Result<u32, String> {
        let began = std::time::Instant::now();
        let failed = |e: std::io::Error| format!("asking {host}:{port} who it is: {e}");
        let mut stream = connect(host, port, timeout).map_err(failed)?;
        let left = timeout.saturating_sub(began.elapsed()).max(Duration::from_millis(1));
        stream.set_read_timeout(Some(left)).map_err(failed)?;
        let mut question = [0u8; HELLO_REQUEST_BYTES];
        question[..4].copy_from_slice(&WHO_MAGIC);
        stream.write_all(&question).map_err(failed)?;
        let mut answer = [0u8; HELLO_REQUEST_BYTES];
        stream.read_exact(&mut answer).map_err(failed)?;
        if answer[..4] != IAM_MAGIC {
            return Err(format!("{host}:{port} answered something else than an incarnation"));
        }
        Ok(u32::from_le_bytes([answer[4], answer[5], answer[6], answer[7]]))
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
                watched.insert(peer, Watch { stream, dead: false, rung: false });
            }
            _ => {
                watched.remove(&peer);
            }
        }
    }

    /// This node's doorbell.
    pub(crate) fn doorbell(&self) -> &Doorbell {
        &self.doorbell
    }

    /// Rings `peer`'s doorbell on the watch this node holds to it, if any: eight bytes that a
    /// non-blocking write takes whole or not at all while the connection's buffer has room
    /// (a ring that does not go is a hint lost, never a wait).
    pub(crate) fn ring(&self, peer: NodeId) {
        let mut watched = self.watched.lock().expect("liveness lock");
        if let Some(w) = watched.get_mut(&peer).filter(|w| !w.dead) {
            let _ = w.stream.write(&ring_message(self.cluster_id));
        }
    }

    /// Whether the watched connection to `peer` was closed by its end: the process died.
    pub(crate) fn dead(&self, peer: NodeId) -> bool {
        let mut watched = self.watched.lock().expect("liveness lock");
        let Some(w) = watched.get_mut(&peer) else { return false };
        if !w.dead {
            match watched_end(&w.stream) {
                WatchedEnd::Open => {}
                WatchedEnd::Closed => w.dead = true,
                // The node was holding as many connections as it may, and did not hold this
                // one (`FULL`): no watch, as when connecting failed. Not a death.
                WatchedEnd::Sent => {
                    watched.remove(&peer);
                    return false;
                }
            }
        }
        w.dead
    }
}

/// Takes every connection waiting on the liveness port, holding each (up to `HELD_MAX`, then
/// a moment's grace, then `FULL` and closed).
fn accept_all(listener: &TcpListener, held: &mut Vec<Held>) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                let graced = held.iter().filter(|h| h.grace_until.is_some()).count();
                let grace_until = if held.len() - graced < HELD_MAX {
                    None
                } else if graced < GRACED_MAX {
                    Some(Instant::now() + GRACE)
                } else {
                    let mut stream = stream;
                    let _ = stream.set_nonblocking(true);
                    let _ = stream.write_all(&FULL);
                    continue;
                };
                if stream.set_nonblocking(true).is_ok() {
                    let _ = stream.set_nodelay(true);
                    held.push(Held::new(stream, grace_until));
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(_) => {
                // Out of file descriptors, or the like: the connection stays queued and the
                // listener readable. Wait instead of asking again at once, which spun a core.
                std::thread::sleep(Duration::from_millis(POLL_MS as u64));
                break;
            }
        }
    }
}

/// A connection to `host:port` (its first address), without Nagle's delay: the questions on
/// this port are single small messages.
fn connect(host: &str, port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
    let addr = (host, port).to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(ErrorKind::NotFound, format!("{host}:{port}: no address"))
    })?;
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// What a watch's other end did.
enum WatchedEnd {
    Open,
    /// Closed (end of file) or broken: the process is gone.
    Closed,
    /// Sent something: a watched node sends nothing but `FULL`, when it did not hold the watch.
    Sent,
}

fn watched_end(stream: &TcpStream) -> WatchedEnd {
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
    if n > 0 {
        return WatchedEnd::Sent;
    }
    let closed = n == 0
        || (n < 0 && {
            let e = std::io::Error::last_os_error();
            !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted)
        });
    if closed {
        WatchedEnd::Closed
    } else {
        WatchedEnd::Open
    }
}

impl Drop for Liveness {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.acceptor.take() {
            // (The node may be dropped by its own hello handler when it held the last
            // reference: that runs on the hello thread, which ends once the acceptor has.)
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: u64 = 0x6c69_7665;

    /// A loopback port free now (the node under test listens on it next).
    fn free_port() -> u16 {
        let probe = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        probe.local_addr().unwrap().port()
    }

    /// A listening node answers "who are you" with its incarnation, as often as asked; a port
    /// where nothing listens is an error, at once.
    #[test]
    fn a_node_says_who_it_is() {
        let port = free_port();
        let timeout = Duration::from_secs(5);
        assert!(Liveness::ask_incarnation("127.0.0.1", port, timeout).is_err());
        let node = Liveness::listen("127.0.0.1", port, 0x5eed, CLUSTER).unwrap();
        for _ in 0..3 {
            assert_eq!(Liveness::ask_incarnation("127.0.0.1", port, timeout), Ok(0x5eed));
        }
        drop(node);
        let err = Liveness::ask_incarnation("127.0.0.1", port, timeout).unwrap_err();
        assert!(err.contains("who it is"), "{err}");
    }

    /// Connections past `HELD_MAX` are closed at once, and those held before stay open: a flood
    /// of connections to the port cannot take every file descriptor of the node, nor close a
    /// peer's watch (which would read as a crash).
    #[test]
    fn the_port_holds_a_bounded_number_of_connections() {
        let _turn = crate::SOCKET_TABLE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        let port = free_port();
        let node = Liveness::listen("127.0.0.1", port, 7, CLUSTER).unwrap();
        let timeout = Duration::from_secs(5);
        let mut open: Vec<TcpStream> =
            (0..HELD_MAX + 20).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
        // Told it is full, then closed (after the grace for a question).
        let closed_by_node = |s: &mut TcpStream| {
            s.set_read_timeout(Some(GRACE * 10)).unwrap();
            let mut said = Vec::new();
            s.read_to_end(&mut said).is_ok() && said == FULL
        };
        let past = open.split_off(HELD_MAX);
        for mut s in past {
            assert!(closed_by_node(&mut s), "a connection past the bound was held");
        }
        assert!(!closed_by_node(&mut open[0]), "the first connection was let go");
        // Full, and still answering questions (within the grace).
        assert_eq!(Liveness::ask_incarnation("127.0.0.1", port, timeout), Ok(7));
        // Room again once some are closed.
        open.truncate(HELD_MAX - 4);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(Liveness::ask_incarnation("127.0.0.1", port, timeout), Ok(7));

        // Full again: a peer's watch opened now is not held, and is not read as a death.
        let _more: Vec<TcpStream> =
            (0..4).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(50));
        let watcher_port = free_port();
        let watcher = Liveness::listen("127.0.0.1", watcher_port, 8, CLUSTER).unwrap();
        watcher.watch(NodeId(1), "127.0.0.1", port, timeout);
        std::thread::sleep(GRACE * 2);
        assert!(!watcher.dead(NodeId(1)), "a live node read as dead");
        drop(node);
    }

    /// Hellos are said on a thread of their own: slow ones (a post waiting for a peer cut off)
    /// do not hold up the questions behind them.
    #[test]
    fn slow_hellos_do_not_hold_up_questions() {
        let port = free_port();
        let node = Liveness::listen("127.0.0.1", port, 11, CLUSTER).unwrap();
        let said = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = said.clone();
        node.on_hello_request(Box::new(move |_, _| {
            std::thread::sleep(Duration::from_millis(100));
            counter.fetch_add(1, Ordering::Relaxed);
        }));
        let timeout = Duration::from_secs(5);
        for from in 3..23 {
            Liveness::ask_hello("127.0.0.1", port, 0, NodeId(from), timeout).unwrap();
        }
        let started = std::time::Instant::now();
        assert_eq!(Liveness::ask_incarnation("127.0.0.1", port, timeout), Ok(11));
        // Behind twenty hellos of 100 ms each on one thread it took two seconds.
        assert!(started.elapsed() < Duration::from_millis(1000), "{:?}", started.elapsed());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while said.load(Ordering::Relaxed) < 20 {
            assert!(std::time::Instant::now() < deadline, "hellos not said");
            std::thread::sleep(Duration::from_millis(10));
        }
        // The same request asked again while it waits is said once (a higher node asks on
        // every binding attempt, and each copy cost a hello).
        for _ in 0..10 {
            Liveness::ask_hello("127.0.0.1", port, 1, NodeId(3), timeout).unwrap();
        }
        std::thread::sleep(Duration::from_millis(600));
        let more = said.load(Ordering::Relaxed) - 20;
        // One being said, and one waiting behind it (a third only on a machine so slow that
        // the asks spread over more than a hello).
        assert!((1..=3).contains(&more), "{more} hellos said for one request asked ten times");
        drop(node);
    }

    /// A sender of questions that never reads the answers gets one answer, and its connection
    /// is closed: the node's memory and acceptor stay free for the others' questions.
    #[test]
    fn one_question_per_connection() {
        let _turn = crate::SOCKET_TABLE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        let port = free_port();
        let node = Liveness::listen("127.0.0.1", port, 9, CLUSTER).unwrap();
        let mut chatty = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut question = [0u8; HELLO_REQUEST_BYTES];
        question[..4].copy_from_slice(&WHO_MAGIC);
        let many: Vec<u8> = question.iter().copied().cycle().take(64 * 1024).collect();
        // Written until the node closes the connection (a reset, or a broken pipe).
        let mut sent = 0usize;
        for _ in 0..1000 {
            match chatty.write(&many) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        assert!(sent < 64 * 1024 * 1000, "the node read questions without end");
        let timeout = Duration::from_secs(5);
        assert_eq!(Liveness::ask_incarnation("127.0.0.1", port, timeout), Ok(9));
        drop(node);
    }
}
