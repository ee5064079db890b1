//! A replica serving the key-value service on a Unix stream socket, and on a TCP address when
//! the cluster's configuration gives one (clients on other hosts).
//!
//! One thread per listener accepts connections and one thread per connection reads requests (clients are
//! sequential: one request, then its answer). A single proposer thread takes the requests of
//! every connection, proposes what has gathered as one call ([`Replica::propose_many`]: several
//! requests per entry, several entries in flight, Mu paper §7.4), and hands each its answer.
//! Bad input is answered, never fatal: a malformed request or one over the limits gets
//! [`ServerMessage::Refused`] and the connection goes on; a frame that cannot be read closes
//! that connection only. A connection must open with a hello naming this cluster and this wire
//! version; anything else is refused and the connection closed.
//!
//! Logs (`tracing`): the server's start and stop, and each connection refused for its hello
//! (warn, with the reason). Nothing per request.

use crate::machine::SharedMachine;
use crate::report::ReplicaReport;
use crate::socket::Stream;
use crate::wire::{
    read_frame, write_frame, ClientMessage, FrameError, ServerMessage, WIRE_VERSION,
};
use mu_kv::Request;
use mu_replica::{ProposeError, Replica};
use std::io::{BufReader, BufWriter};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How many requests one proposal carries at most.
pub const BATCH_REQUESTS_MAX: usize = 64;

/// The longest path a Unix socket may have (`sun_path`, with its terminating zero).
const SOCKET_PATH_BYTES_MAX: usize = 107;

/// A request on its way to the proposer, and where its answer goes.
struct Job {
    bytes: Vec<u8>,
    client: u64,
    seq: u64,
    answer: Sender<ServerMessage>,
}

/// Upper bounds of the request latency histogram's buckets, in microseconds.
pub const LATENCY_BUCKETS_US: [u64; 12] =
    [10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 50_000, 100_000];

/// Counters the server keeps, for status and metrics.
#[derive(Default)]
pub struct ServerCounters {
    pub requests: AtomicU64,
    pub committed: AtomicU64,
    pub refused: AtomicU64,
    pub not_leader: AtomicU64,
    pub retries: AtomicU64,
    pub connections: AtomicU64,
    latency_buckets: [AtomicU64; LATENCY_BUCKETS_US.len()],
    latency_overflow: AtomicU64,
    latency_sum_ns: AtomicU64,
}

/// A copy of the latency histogram: per-bucket counts (not cumulative).
pub struct LatencySnapshot {
    pub buckets: Vec<(u64, u64)>,
    pub overflow: u64,
    pub sum_ns: u64,
}

impl ServerCounters {
    /// Counts one request answered `ns` after it arrived.
    pub fn record_latency(&self, ns: u64) {
        self.latency_sum_ns.fetch_add(ns, Ordering::Relaxed);
        match LATENCY_BUCKETS_US.iter().position(|&b| ns <= b * 1000) {
            Some(i) => self.latency_buckets[i].fetch_add(1, Ordering::Relaxed),
            None => self.latency_overflow.fetch_add(1, Ordering::Relaxed),
        };
    }

    pub fn latency_snapshot(&self) -> LatencySnapshot {
        LatencySnapshot {
            buckets: LATENCY_BUCKETS_US
                .iter()
                .zip(&self.latency_buckets)
                .map(|(&b, c)| (b, c.load(Ordering::Relaxed)))
                .collect(),
            overflow: self.latency_overflow.load(Ordering::Relaxed),
            sum_ns: self.latency_sum_ns.load(Ordering::Relaxed),
        }
    }
}

/// A running server. Dropping it stops accepting, closes the socket file and joins its threads;
/// connections still open end when their clients close them or the process exits.
pub struct Server {
    path: PathBuf,
    tcp: Option<SocketAddr>,
    /// The replica served, for the stop event.
    replica_id: u16,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub counters: Arc<ServerCounters>,
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
        let mut threads = Vec::new();
        let replica_id = replica.id().0;
        {
            let (replica, machine, counters) = (replica.clone(), machine.clone(), counters.clone());
            threads.push(spawn("mu-kv-propose", move || {
                proposer(&replica, &machine, &counters, jobs_rx)
            })?);
        }
        let base = Connection { cluster_id, jobs: jobs_tx, replica, machine, counters, started };
        if let Some(listener) = tcp_listener {
            let (stop, base) = (stop.clone(), base.clone());
            threads.push(spawn("mu-kv-accept-tcp", move || {
                accept_loop(|| Stream::tcp(listener.accept()?.0), &stop, &base)
            })?);
        }
        let counters = base.counters.clone();
        {
            let stop = stop.clone();
            threads.push(spawn("mu-kv-accept", move || {
                accept_loop(|| Ok(Stream::Unix(listener.accept()?.0)), &stop, &base)
            })?);
        }
        tracing::info!(
            replica = replica_id,
            cluster_id,
            socket = %path.display(),
            tcp = %tcp.map_or("none".to_string(), |a| a.to_string()),
            "server started: accepting clients"
        );
        Ok(Server { path: path.to_path_buf(), tcp, replica_id, stop, threads, counters })
    }

    /// Where it listens.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The TCP address it listens on, if any (with the port the system chose for port 0).
    pub fn tcp_address(&self) -> Option<SocketAddr> {
        self.tcp
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
        tracing::info!(
            replica = self.replica_id,
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

/// Accepts connections (`accept`, on a non-blocking listener) until `stop`, serving each on a
/// thread of its own with a copy of `base`.
fn accept_loop(
    mut accept: impl FnMut() -> std::io::Result<Stream>,
    stop: &AtomicBool,
    base: &Connection,
) {
    // The proposer thread ends when the last sender is gone: `base`'s, and the connections'.
    while !stop.load(Ordering::Acquire) {
        match accept() {
            Ok(stream) => {
                base.counters.connections.fetch_add(1, Ordering::Relaxed);
                let conn = base.clone();
                // A connection that cannot get a thread is closed: the client tries again.
                let _ = spawn("mu-kv-conn", move || conn.serve(stream));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

#[derive(Clone)]
struct Connection {
    cluster_id: u64,
    jobs: Sender<Job>,
    replica: Arc<Replica>,
    machine: SharedMachine,
    counters: Arc<ServerCounters>,
    started: Instant,
}

impl Connection {
    fn serve(self, stream: Stream) {
        if stream.set_nonblocking(false).is_err() {
            return;
        }
        let Ok(write_half) = stream.try_clone() else { return };
        let mut reader = BufReader::new(stream);
        let mut writer = BufWriter::new(write_half);
        let (mut body, mut out) = (Vec::new(), Vec::new());
        let mut greeted = false;
        loop {
            let answer = match read_frame(&mut reader, &mut body) {
                Ok(false) => return,
                Ok(true) => match ClientMessage::decode(&body) {
                    Ok(m) if !greeted => match self.greet(&m) {
                        Ok(welcome) => {
                            greeted = true;
                            welcome
                        }
                        Err(why) => {
                            tracing::warn!(
                                replica = self.replica.id().0,
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
                },
                // A frame over the limit: answer, then close (its body is still on the wire).
                Err(e @ FrameError::TooLarge(_)) => {
                    let answer = self.refuse(e.to_string());
                    answer.encode(&mut out);
                    let _ = write_frame(&mut writer, &out);
                    return;
                }
                Err(_) => return,
            };
            answer.encode(&mut out);
            if write_frame(&mut writer, &out).is_err() {
                return;
            }
        }
    }

    /// The answer to a connection's first message: welcome a client of this cluster that speaks
    /// this wire version, refuse anything else.
    fn greet(&self, first: &ClientMessage) -> Result<ServerMessage, String> {
        let me = self.replica.id().0;
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

    fn refuse(&self, why: String) -> ServerMessage {
        self.counters.refused.fetch_add(1, Ordering::Relaxed);
        ServerMessage::Refused(why)
    }

    fn handle(&self, message: ClientMessage) -> ServerMessage {
        let bytes = match message {
            ClientMessage::Status => {
                let report = ReplicaReport::new(&self.replica, &self.machine, self.started);
                return ServerMessage::Status(report.to_json());
            }
            ClientMessage::Kv(bytes) => bytes,
            ClientMessage::Hello { .. } => return self.refuse("a second hello".into()),
        };
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        // Checked here so that nothing malformed reaches the log (every replica would refuse
        // it the same way, but it would take a slot).
        let request = match Request::decode(&bytes) {
            Ok(r) => r,
            Err(e) => return self.refuse(format!("malformed request: {e}")),
        };
        let arrived = Instant::now();
        let (tx, rx) = mpsc::channel();
        let job = Job { bytes, client: request.client, seq: request.seq, answer: tx };
        if self.jobs.send(job).is_err() {
            return ServerMessage::Retry("the replica is shutting down".into());
        }
        let answer = rx
            .recv()
            .unwrap_or_else(|_| ServerMessage::Retry("the replica is shutting down".into()));
        if matches!(answer, ServerMessage::Reply(_)) {
            self.counters.record_latency(arrived.elapsed().as_nanos() as u64);
        }
        answer
    }
}

/// Proposes what the connections bring, in batches, until every connection and the acceptor are
/// gone.
fn proposer(
    replica: &Replica,
    machine: &SharedMachine,
    counters: &ServerCounters,
    jobs: Receiver<Job>,
) {
    let mut batch: Vec<Job> = Vec::with_capacity(BATCH_REQUESTS_MAX);
    let mut outcomes = Vec::with_capacity(BATCH_REQUESTS_MAX);
    while let Ok(first) = jobs.recv() {
        batch.push(first);
        while batch.len() < BATCH_REQUESTS_MAX {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        {
            let mut m = machine.lock();
            for job in &batch {
                m.expect(job.client, job.seq);
            }
        }
        propose_batch(replica, &batch, &mut outcomes);
        let mut m = machine.lock();
        for (job, outcome) in batch.drain(..).zip(outcomes.drain(..)) {
            let reply = m.take(job.client, job.seq);
            let answer = match (outcome, reply) {
                (Ok(_), Some(reply)) => {
                    counters.committed.fetch_add(1, Ordering::Relaxed);
                    ServerMessage::Reply(reply)
                }
                // Committed, but applied as a duplicate of a request with the same client and
                // sequence number that another replica had taken: its reply is the session's.
                (Ok(_), None) => match m.store.reply(job.client, job.seq) {
                    Some(reply) => ServerMessage::Reply(reply.clone()),
                    None => ServerMessage::Retry("applied out of order; send it again".into()),
                },
                (Err(e), _) => answer_error(e, counters),
            };
            let _ = job.answer.send(answer);
        }
    }
}

/// Proposes the requests of `batch`, an outcome per job into `outcomes`. One request too large
/// for an entry fails a whole `propose_many` call; the batch holds other clients' requests,
/// which would be refused for it (for good: a client does not send a refused request again).
/// So those too large are answered so, and the others proposed again without them.
fn propose_batch(replica: &Replica, batch: &[Job], outcomes: &mut Vec<Result<u64, ProposeError>>) {
    let requests: Vec<&[u8]> = batch.iter().map(|j| j.bytes.as_slice()).collect();
    replica.propose_many(&requests, outcomes);
    let max = match outcomes.first() {
        Some(Err(ProposeError::TooLarge { max, .. })) if batch.len() > 1 => *max,
        _ => return,
    };
    let fitting: Vec<&[u8]> = requests.iter().copied().filter(|r| r.len() <= max).collect();
    let mut fitting_outcomes = Vec::with_capacity(fitting.len());
    if !fitting.is_empty() {
        replica.propose_many(&fitting, &mut fitting_outcomes);
    }
    let mut fitting_outcomes = fitting_outcomes.into_iter();
    outcomes.clear();
    for request in requests {
        outcomes.push(if request.len() > max {
            Err(ProposeError::TooLarge { len: request.len(), max })
        } else {
            fitting_outcomes.next().expect("an outcome per request proposed")
        });
    }
}

fn answer_error(e: ProposeError, counters: &ServerCounters) -> ServerMessage {
    match e {
        ProposeError::NotLeader { leader } => {
            counters.not_leader.fetch_add(1, Ordering::Relaxed);
            ServerMessage::NotLeader { leader: leader.map(|l| l.0) }
        }
        ProposeError::TooLarge { len, max } => {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            // `len` is the encoded request, not the value the user gave: say so.
            ServerMessage::Refused(format!(
                "the request takes {len} bytes in the log (its key, any values and a header), \
                 more than an entry holds ({max} bytes)"
            ))
        }
        ProposeError::Empty | ProposeError::Membership(_) | ProposeError::Reentrant => {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            ServerMessage::Refused(e.to_string())
        }
        ProposeError::Aborted
        | ProposeError::LogFull { .. }
        | ProposeError::Busy
        | ProposeError::ShuttingDown => {
            counters.retries.fetch_add(1, Ordering::Relaxed);
            ServerMessage::Retry(e.to_string())
        }
        // A kind this server does not know yet: a retry with the same sequence number is safe
        // whatever it means (the state machine applies a request once).
        _ => {
            counters.retries.fetch_add(1, Ordering::Relaxed);
            ServerMessage::Retry(e.to_string())
        }
    }
}
