//! A replica serving the key-value service on a Unix stream socket, and on a TCP address when
//! the cluster's configuration gives one (clients on other hosts).
//!
//! One thread per listener accepts connections and one thread per connection reads requests (clients are
//! sequential: one request, then its answer). What clients may hold is bounded
//! ([`ServerLimits`]): connections open at once (one more is answered with a retry and closed),
//! the time a connection may stay silent, and the time a frame may take to arrive or an answer
//! to be taken; a connection past a limit is closed, and nobody else waits for it. A single proposer thread takes the requests of
//! every connection and hands what has gathered to the [`Backend`] as one batch (a Mu or
//! Velos replica proposes it as one call, [`mu_replica::Replica::propose_many`]: several
//! requests per entry, several entries in flight, Mu paper §7.4), then each its answer.
//! Bad input is answered, never fatal: a malformed request or one over the limits gets
//! [`ServerMessage::Refused`] and the connection goes on; a frame that cannot be read closes
//! that connection only. A connection must open with a hello naming this cluster and this wire
//! version; anything else is refused and the connection closed.
//!
//! Logs (`tracing`): the server's start and stop, each connection refused for its hello
//! (warn, with the reason), and, at most once per [`WARN_EVERY`], connections refused for
//! being over the limit and errors accepting connections. Nothing per request.

use crate::backend::{Backend, Pending, ReplicaBackend};
use crate::counters::ServerCounters;
pub use crate::counters::{LatencySnapshot, LATENCY_BUCKETS_US};
use crate::fabric_path::{FabricAsks, FabricPath};
use crate::machine::SharedMachine;
use crate::socket::Stream;
use crate::wire::{
    read_frame_body, read_frame_length, write_frame, ClientMessage, FrameError, ServerMessage,
    WIRE_VERSION,
};
use mu_fabric::Fabric;
use mu_replica::Replica;
use std::collections::HashMap;
use std::io::{self, BufReader, BufWriter, Read};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How many requests one proposal carries at most.
pub const BATCH_REQUESTS_MAX: usize = 64;

/// The longest path a Unix socket may have (`sun_path`, with its terminating zero).
const SOCKET_PATH_BYTES_MAX: usize = 107;

/// What clients may hold of a server, so that many clients, or misbehaving ones, cannot take
/// it from the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections open at once, Unix and TCP together (each holds a thread and a file
    /// descriptor). One more is answered [`ServerMessage::Retry`] and closed.
    pub connections_max: usize,
    /// How long a connection may stay without starting a frame before it is closed: one that
    /// connects and sends nothing, or a client gone without closing, does not hold its place
    /// for ever. (The client library opens a new connection when an old one was closed.)
    pub idle_timeout_ms: u64,
    /// How long a frame may take to arrive once its length has come, and an answer to be taken
    /// by the client: one that sends a frame slowly, or sends requests and never reads the
    /// answers, loses its connection.
    pub io_timeout_ms: u64,
}

impl Default for ServerLimits {
    fn default() -> ServerLimits {
        ServerLimits { connections_max: 1024, idle_timeout_ms: 300_000, io_timeout_ms: 10_000 }
    }
}

/// The shortest gap between two warnings of one kind (connections over the limit, accept
/// errors): a flood of them is logged as a few lines.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// How long an acceptor waits after an error accepting a connection (out of file descriptors,
/// say): the connection waiting stays in the backlog, and trying again at once would spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// How long a stopping server lets its connections finish writing an answer on its way
/// before it shuts them down whole.
const STOP_ANSWER_GRACE: Duration = Duration::from_secs(1);

/// A connection's frame buffer larger than this after a frame is given back, not kept: a
/// connection that sent one large value does not hold its size while idle.
const BODY_BYTES_KEPT_MAX: usize = 64 * 1024;

/// A request on its way to the proposer, and where its answer goes.
struct Job {
    pending: Pending,
    answer: Sender<ServerMessage>,
}

/// A running server. Dropping it stops accepting, closes the connections still open (a
/// request being replicated is answered first), closes the socket file and joins its threads.
pub struct Server {
    path: PathBuf,
    tcp: Option<SocketAddr>,
    /// The node served, for the stop event.
    node: u16,
    stop: Arc<AtomicBool>,
    acceptors: Vec<JoinHandle<()>>,
    proposer: Option<JoinHandle<()>>,
    connections: Arc<Connections>,
    pub counters: Arc<ServerCounters>,
    backend: Arc<dyn Backend>,
    /// The client path over the fabric, once attached ([`Server::attach_fabric`]).
    fabric: Option<FabricPath>,
    /// What connections pass a fabric client's join to.
    fabric_asks: Arc<OnceLock<FabricAsks>>,
}

impl Server {
    /// Serves `replica` of cluster `cluster_id` (whose state machine is `machine`) on a new
    /// socket at `path`, readable and writable by this user only, and on the TCP address `tcp`
    /// (`"host:port"`) if one is given. A stale socket file at `path` is replaced.
    ///
    /// TCP clients are not authenticated (the hello names the cluster, which keeps clients of
    /// another cluster out by mistake, not by design): listen on a network only trusted hosts
    /// reach.
    pub fn start(
        cluster_id: u64,
        replica: Arc<Replica>,
        machine: SharedMachine,
        (path, tcp): (&Path, Option<&str>),
        started: Instant,
    ) -> Result<Server, String> {
        Server::start_with_limits(
            cluster_id,
            replica,
            machine,
            (path, tcp),
            started,
            ServerLimits::default(),
        )
    }

    /// [`Server::start`] for any [`Backend`] (a uKharon-KV node, say), with `limits`.
    pub fn start_backend(
        cluster_id: u64,
        backend: Arc<dyn Backend>,
        (path, tcp): (&Path, Option<&str>),
        started: Instant,
        limits: ServerLimits,
    ) -> Result<Server, String> {
        Server::start_served(cluster_id, backend, (path, tcp), started, limits)
    }

    /// [`Server::start`], with `limits` on what clients may hold.
    pub fn start_with_limits(
        cluster_id: u64,
        replica: Arc<Replica>,
        machine: SharedMachine,
        (path, tcp): (&Path, Option<&str>),
        started: Instant,
        limits: ServerLimits,
    ) -> Result<Server, String> {
        let backend = Arc::new(ReplicaBackend { replica, machine });
        Server::start_served(cluster_id, backend, (path, tcp), started, limits)
    }

    fn start_served(
        cluster_id: u64,
        backend: Arc<dyn Backend>,
        (path, tcp): (&Path, Option<&str>),
        started: Instant,
        limits: ServerLimits,
    ) -> Result<Server, String> {
        if limits.connections_max == 0 || limits.idle_timeout_ms == 0 || limits.io_timeout_ms == 0 {
            return Err(format!("server limits must all be above zero: {limits:?}"));
        }
        if path.as_os_str().len() > SOCKET_PATH_BYTES_MAX {
            return Err(format!(
                "socket path {} is {} bytes long; Unix sockets allow {SOCKET_PATH_BYTES_MAX}: \
                 use a shorter run directory",
                path.display(),
                path.as_os_str().len()
            ));
        }
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("removing the old socket {}: {e}", path.display())),
        }
        let listener = UnixListener::bind(path)
            .map_err(|e| format!("listening on {}: {e}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("making {} private: {e}", path.display()))?;
        listener.set_nonblocking(true).map_err(|e| format!("socket: {e}"))?;
        let tcp_listener = match tcp {
            Some(addr) => {
                let l = TcpListener::bind(addr)
                    .map_err(|e| format!("listening for clients on {addr}: {e}"))?;
                l.set_nonblocking(true).map_err(|e| format!("{addr}: {e}"))?;
                Some(l)
            }
            None => None,
        };
        let tcp = match &tcp_listener {
            Some(l) => Some(l.local_addr().map_err(|e| format!("client address: {e}"))?),
            None => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(ServerCounters::default());
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let mut acceptors = Vec::new();
        let node = backend.node();
        let proposer = {
            let (backend, counters) = (backend.clone(), counters.clone());
            spawn("mu-kv-propose", move || proposer(&*backend, &counters, jobs_rx))?
        };
        let connections = Arc::new(Connections::default());
        let fabric_asks = Arc::new(OnceLock::new());
        let base = Connection {
            cluster_id,
            jobs: jobs_tx,
            backend: backend.clone(),
            fabric: fabric_asks.clone(),
            counters,
            started,
            limits,
            connections: connections.clone(),
        };
        let warned = Arc::new(Warnings::default());
        if let Some(listener) = tcp_listener {
            let (stop, base, warned) = (stop.clone(), base.clone(), warned.clone());
            acceptors.push(spawn("mu-kv-accept-tcp", move || {
                let wait = || mu_procs::poll::readable(&listener, ACCEPT_WAIT);
                accept_loop(|| Stream::tcp(listener.accept()?.0), wait, &stop, &base, &warned)
            })?);
        }
        let counters = base.counters.clone();
        {
            let stop = stop.clone();
            acceptors.push(spawn("mu-kv-accept", move || {
                let wait = || mu_procs::poll::readable(&listener, ACCEPT_WAIT);
                accept_loop(|| Ok(Stream::Unix(listener.accept()?.0)), wait, &stop, &base, &warned)
            })?);
        }
        tracing::info!(
            replica = node,
            cluster_id,
            socket = %path.display(),
            tcp = %tcp.map_or("none".to_string(), |a| a.to_string()),
            "server started: accepting clients"
        );
        Ok(Server {
            path: path.to_path_buf(),
            tcp,
            node,
            stop,
            acceptors,
            proposer: Some(proposer),
            connections,
            counters,
            backend,
            fabric: None,
            fabric_asks,
        })
    }

    /// Serves clients over the fabric too (`transport = "fabric"`, `docs/client-path.md`):
    /// request rings on `fabric`, a node of this server's own (id 0 of its directory `dir`,
    /// where clients start theirs). Clients join through their socket connection.
    pub fn attach_fabric<F: Fabric>(&mut self, fabric: F, dir: &Path) -> Result<(), String> {
        if self.fabric.is_some() {
            return Err("the fabric path is attached already".into());
        }
        let dir = dir.to_str().ok_or("the fabric path's directory is not UTF-8")?.to_string();
        let path = FabricPath::start(fabric, dir, self.backend.clone(), self.counters.clone())?;
        let _ = self.fabric_asks.set(path.asks());
        self.fabric = Some(path);
        Ok(())
    }

    /// Where it listens.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The TCP address it listens on, if any (with the port the system chose for port 0).
    pub fn tcp_address(&self) -> Option<SocketAddr> {
        self.tcp
    }

    /// Client connections open now, Unix and TCP together.
    pub fn connections_open(&self) -> usize {
        self.connections.open_count()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // The ring thread first: it answers nothing after this (its clients' writes fail, and
        // the library goes back to the socket, which is closing too).
        self.fabric = None;
        // The acceptors first: once they are gone no connection is added, so shutting down
        // those open reaches them all. The proposer ends when the last connection has (each
        // holds a sender of its jobs); a connection waiting for an answer gets it first.
        for t in self.acceptors.drain(..) {
            let _ = t.join();
        }
        // Reading ends first, so that an answer on its way still goes out; what is left after
        // a moment (a thread writing to a client that does not read) is shut down whole.
        self.connections.shutdown_all(std::net::Shutdown::Read);
        let deadline = Instant::now() + STOP_ANSWER_GRACE;
        while self.connections.open_count() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.connections.shutdown_all(std::net::Shutdown::Both);
        if let Some(t) = self.proposer.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
        tracing::info!(
            replica = self.node,
            socket = %self.path.display(),
            "server stopped: socket removed"
        );
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| format!("starting thread {name}: {e}"))
}

/// When each kind of warning was last logged, so that a flood of them is logged as a few lines.
#[derive(Default)]
struct Warnings {
    over_limit: Mutex<Option<Instant>>,
    accept_error: Mutex<Option<Instant>>,
}

/// Whether a warning last logged at `*last` may be logged now (and notes that it is).
fn warn_now(last: &Mutex<Option<Instant>>) -> bool {
    let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
    match *last {
        Some(at) if at.elapsed() < WARN_EVERY => false,
        _ => {
            *last = Some(Instant::now());
            true
        }
    }
}

/// The connections open, so that they can be counted against the limit and shut down when the
/// server stops.
#[derive(Default)]
struct Connections {
    open: Mutex<HashMap<u64, Arc<Stream>>>,
    next_id: AtomicU64,
}

impl Connections {
    /// Counts `stream` as open, unless `max` are: then `None`.
    fn admit(self: &Arc<Self>, stream: &Arc<Stream>, max: usize) -> Option<Admitted> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.len() >= max {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        open.insert(id, stream.clone());
        Some(Admitted { connections: self.clone(), id })
    }

    fn open_count(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Shuts every open connection down in `how`: with `Read`, a thread blocked reading
    /// returns, and one waiting for its request's answer writes it first, then finds the end;
    /// with `Both`, a thread blocked writing to a client that does not read returns too.
    fn shutdown_all(&self, how: std::net::Shutdown) {
        for stream in self.open.lock().unwrap_or_else(|p| p.into_inner()).values() {
            let _ = stream.shutdown(how);
        }
    }
}

/// A connection counted as open; dropping it (its thread ends, or never started) stops
/// counting it.
struct Admitted {
    connections: Arc<Connections>,
    id: u64,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.connections.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
    }
}

/// How long an idle acceptor waits for a connection before it looks at its stop flag again:
/// how late a server's drop may be for its acceptors.
const ACCEPT_WAIT: Duration = Duration::from_millis(10);

/// Accepts connections (`accept`, on a non-blocking listener) until `stop`, serving each on a
/// thread of its own with a copy of `base`, up to `base.limits.connections_max` at once.
/// Between connections it waits on the listener, so that a client is accepted at once: after a
/// failover every client connects to another replica, and a sleep here was part of what they
/// saw of it.
fn accept_loop(
    mut accept: impl FnMut() -> io::Result<Stream>,
    wait: impl Fn() -> bool,
    stop: &AtomicBool,
    base: &Connection,
    warned: &Warnings,
) {
    // The proposer thread ends when the last sender is gone: `base`'s, and the connections'.
    while !stop.load(Ordering::Acquire) {
        match accept() {
            Ok(stream) => {
                base.counters.connections.fetch_add(1, Ordering::Relaxed);
                let stream = Arc::new(stream);
                let max = base.limits.connections_max;
                let Some(admitted) = base.connections.admit(&stream, max) else {
                    base.counters.connections_refused.fetch_add(1, Ordering::Relaxed);
                    if warn_now(&warned.over_limit) {
                        tracing::warn!(
                            replica = base.backend.node(),
                            connections_max = max,
                            "connection refused: too many open (further refusals in the next \
                             {} s are not logged)",
                            WARN_EVERY.as_secs()
                        );
                    }
                    refuse_over_limit(&stream, max);
                    continue;
                };
                let conn = base.clone();
                // A connection that cannot get a thread is closed (`admitted` and the stream
                // are dropped with the closure): the client tries again.
                let _ = spawn("mu-kv-conn", move || conn.serve(&stream, admitted));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                if warn_now(&warned.accept_error) {
                    tracing::warn!(
                        replica = base.backend.node(),
                        error = %e,
                        "accepting a client connection failed; trying again (further errors \
                         in the next {} s are not logged)",
                        WARN_EVERY.as_secs()
                    );
                }
                std::thread::sleep(ACCEPT_ERROR_PAUSE);
            }
        }
    }
}

/// Tells a connection over the limit to try again later, without waiting for it: the
/// acceptor must not block on one client.
fn refuse_over_limit(stream: &Stream, max: usize) {
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut out = Vec::new();
    ServerMessage::Retry(format!("the replica has {max} client connections open, its limit"))
        .encode(&mut out);
    let mut s = stream;
    let _ = write_frame(&mut s, &out);
}

/// A connection's reader: each read waits no longer than the time left until `deadline`. The
/// socket's timeout is changed only when the wait wanted changes, which a request that arrives
/// whole in one read does not need.
struct Timed<'a> {
    stream: &'a Stream,
    deadline: Instant,
    wait: Duration,
    wait_set: Option<Duration>,
}

impl<'a> Timed<'a> {
    fn new(stream: &'a Stream) -> Timed<'a> {
        Timed { stream, deadline: Instant::now(), wait: Duration::ZERO, wait_set: None }
    }

    /// What is read from now on must come within `wait`.
    fn within(&mut self, wait: Duration) {
        self.deadline = Instant::now() + wait;
        self.wait = wait;
    }
}

impl Read for Timed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Each read may wait `wait` (the socket's timeout), and none starts past the deadline:
        // a peer that sends a byte now and then gets at most twice its time.
        if Instant::now() >= self.deadline {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "the client took too long"));
        }
        if self.wait_set != Some(self.wait) {
            self.stream.set_read_timeout(Some(self.wait))?;
            self.wait_set = Some(self.wait);
        }
        let mut s = self.stream;
        s.read(buf)
    }
}

#[derive(Clone)]
struct Connection {
    cluster_id: u64,
    jobs: Sender<Job>,
    backend: Arc<dyn Backend>,
    fabric: Arc<OnceLock<FabricAsks>>,
    counters: Arc<ServerCounters>,
    started: Instant,
    limits: ServerLimits,
    connections: Arc<Connections>,
}

impl Connection {
    fn serve(self, stream: &Stream, admitted: Admitted) {
        let _admitted = admitted;
        let idle = Duration::from_millis(self.limits.idle_timeout_ms);
        let io_wait = Duration::from_millis(self.limits.io_timeout_ms);
        // A client that stops reading its answers fills the socket: the write fails after
        // `io_wait` and the connection closes, instead of holding its thread for ever.
        if stream.set_nonblocking(false).is_err()
            || stream.set_write_timeout(Some(io_wait)).is_err()
        {
            return;
        }
        let mut reader = BufReader::new(Timed::new(stream));
        let mut writer = BufWriter::new(stream);
        let (mut body, mut out) = (Vec::new(), Vec::new());
        let mut greeted = false;
        loop {
            // A hello is due at once: a connection that connects and says nothing holds its
            // place for `io_wait`, not for the idle time a client between requests may take.
            reader.get_mut().within(if greeted { idle } else { io_wait });
            let len = match read_frame_length(&mut reader) {
                Ok(Some(len)) => len,
                Ok(None) => return,
                // A frame over the limit: answer, then close (its body is still on the wire).
                Err(e @ FrameError::TooLarge(_)) => {
                    let answer = self.refuse(e.to_string());
                    answer.encode(&mut out);
                    let _ = write_frame(&mut writer, &out);
                    return;
                }
                // Cut, silent for too long, or shut down: nothing more can be read.
                Err(_) => return,
            };
            reader.get_mut().within(io_wait);
            if read_frame_body(&mut reader, len, &mut body).is_err() {
                return;
            }
            let answer = match ClientMessage::decode(&body) {
                Ok(m) if !greeted => match self.greet(&m) {
                    Ok(welcome) => {
                        greeted = true;
                        welcome
                    }
                    Err(why) => {
                        tracing::warn!(
                            replica = self.backend.node(),
                            reason = why.as_str(),
                            "connection refused: its hello does not match this replica"
                        );
                        self.refuse(why.clone()).encode(&mut out);
                        let _ = write_frame(&mut writer, &out);
                        return;
                    }
                },
                Ok(m) => self.handle(m),
                Err(e) => self.refuse(e.to_string()),
            };
            if body.capacity() > BODY_BYTES_KEPT_MAX {
                body = Vec::new();
            }
            answer.encode(&mut out);
            if write_frame(&mut writer, &out).is_err() {
                return;
            }
            if out.capacity() > BODY_BYTES_KEPT_MAX {
                out = Vec::new();
            }
        }
    }

    /// The answer to a connection's first message: welcome a client of this cluster that speaks
    /// this wire version, refuse anything else.
    fn greet(&self, first: &ClientMessage) -> Result<ServerMessage, String> {
        let me = self.backend.node();
        match *first {
            ClientMessage::Hello { cluster_id, .. } if cluster_id != self.cluster_id => {
                Err(format!(
                    "replica {me} belongs to cluster {}, not to cluster {cluster_id}",
                    self.cluster_id
                ))
            }
            ClientMessage::Hello { wire_version, .. } if wire_version != WIRE_VERSION => {
                Err(format!(
                    "replica {me} speaks client protocol version {WIRE_VERSION}, this client \
                     speaks version {wire_version}"
                ))
            }
            ClientMessage::Hello { .. } => Ok(ServerMessage::Welcome),
            _ => {
                Err(format!("replica {me}: a connection must open with a hello naming the cluster"))
            }
        }
    }

    /// A fabric client's join, passed on to the ring thread.
    fn fabric_join(&self, message: &ClientMessage) -> ServerMessage {
        let Some(fabric) = self.fabric.get() else {
            let me = self.backend.node();
            return self.refuse(format!(
                "replica {me} serves no clients over the fabric (the cluster's transport is \
                 \"socket\")"
            ));
        };
        match *message {
            ClientMessage::FabricJoin { node } => fabric.join(node),
            _ => fabric.reserve(),
        }
    }

    fn refuse(&self, why: String) -> ServerMessage {
        self.counters.refused.fetch_add(1, Ordering::Relaxed);
        ServerMessage::Refused(why)
    }

    fn handle(&self, message: ClientMessage) -> ServerMessage {
        match message {
            ClientMessage::Status => {
                return ServerMessage::Status(self.backend.report(self.started).to_json());
            }
            ClientMessage::Hello { .. } => return self.refuse("a second hello".into()),
            ClientMessage::FabricReserve | ClientMessage::FabricJoin { .. } => {
                return self.fabric_join(&message);
            }
            ClientMessage::Kv(_) | ClientMessage::Order(_) => {}
        }
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        // Checked here so that nothing malformed reaches the log (every replica would refuse
        // it the same way, but it would take a slot).
        let (request, bytes) = match self.backend.app().request(message) {
            Ok(r) => r,
            Err(why) => return self.refuse(why),
        };
        let arrived = Instant::now();
        let (tx, rx) = mpsc::channel();
        let job = Job { pending: Pending { request, bytes }, answer: tx };
        if self.jobs.send(job).is_err() {
            return ServerMessage::Retry("the replica is shutting down".into());
        }
        let answer = rx
            .recv()
            .unwrap_or_else(|_| ServerMessage::Retry("the replica is shutting down".into()));
        if answer.is_answer() {
            self.counters.record_latency(arrived.elapsed().as_nanos() as u64);
        }
        answer
    }
}

/// Hands what the connections bring to `backend`, in batches, until every connection and the
/// acceptor are gone.
fn proposer(backend: &dyn Backend, counters: &ServerCounters, jobs: Receiver<Job>) {
    let mut batch: Vec<Pending> = Vec::with_capacity(BATCH_REQUESTS_MAX);
    let mut waiting: Vec<Sender<ServerMessage>> = Vec::with_capacity(BATCH_REQUESTS_MAX);
    let mut answers = Vec::with_capacity(BATCH_REQUESTS_MAX);
    while let Ok(first) = jobs.recv() {
        let mut next = Some(first);
        while let Some(job) = next.take() {
            batch.push(job.pending);
            waiting.push(job.answer);
            if batch.len() < BATCH_REQUESTS_MAX {
                next = jobs.try_recv().ok();
            }
        }
        backend.serve(&batch, &mut answers);
        batch.clear();
        let mut answers = answers.drain(..);
        for answer in waiting.drain(..) {
            let message = answers
                .next()
                .unwrap_or_else(|| ServerMessage::Retry("not answered; send it again".into()));
            count(&message, counters);
            let _ = answer.send(message);
        }
    }
}

fn count(answer: &ServerMessage, counters: &ServerCounters) {
    let counter = match answer {
        ServerMessage::Reply(_) | ServerMessage::Events(_) => &counters.committed,
        ServerMessage::NotLeader { .. } => &counters.not_leader,
        ServerMessage::Retry(_) => &counters.retries,
        _ => &counters.refused,
    };
    counter.fetch_add(1, Ordering::Relaxed);
}
