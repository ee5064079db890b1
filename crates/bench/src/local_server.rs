//! A key-value and order book server thread in this process, speaking the client protocol on
//! a Unix socket without replication: the `transport`, `unreplicated` and `active-checked`
//! systems of `mu bench e2e` and `mu bench ukharon-kv`. One connection at a time, one request
//! at a time.

use mu_fabric::NodeId;
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_kv::{Op, Reply, Request, Store};
use mu_membership::clock::now_ns;
use mu_membership::published::PublishedLease;
use mu_orderbook::{Engine, Event};
use mu_procs::run_dir::RunDir;
use mu_service::backend::Pending;
use mu_service::wire::{read_frame, write_frame, ClientMessage, ServerMessage};
use mu_service::{App, AppRequest, Backend, Client, ReplicaReport, Server};
use std::io::{BufReader, BufWriter};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// The cluster id the in-process servers answer to.
const LOCAL_CLUSTER_ID: u64 = 0xe2e;

/// How the server answers a key-value request.
pub enum Answering {
    /// At once, with a canned reply of the right kind, touching no store: the framing, the
    /// socket and the two thread wake-ups, the floor of any request here.
    Canned,
    /// By applying it to a key-value store ([`mu_kv::Store`]), as an application without
    /// replication would.
    Store,
    /// By applying it to a store between two checks of `Active(view)`, as uKharon-KV's primary
    /// guards a GET.
    StoreUnderLease(LeaseCheck),
}

/// The lease a uKharon member holds on a view, read as `Membership::active` reads it.
pub struct LeaseCheck {
    pub lease: Arc<PublishedLease>,
    pub epoch: u64,
    /// Requests that found the view inactive before or after (answered with a retry).
    pub inactive: Arc<AtomicU64>,
}

impl LeaseCheck {
    fn active(&self) -> bool {
        self.lease.active_at(self.epoch, now_ns())
    }
}

/// See the module docs. Stops its thread and removes its socket when dropped, whether or not
/// a client is still connected.
pub struct LocalServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    /// The connection being served, shut down on drop: the thread blocks reading it.
    serving: Arc<Mutex<Option<UnixStream>>>,
    thread: Option<JoinHandle<()>>,
    _dir: RunDir,
}

impl LocalServer {
    /// Starts the server thread on a socket in a fresh run directory named after `tag`.
    pub fn start(tag: &str, answering: Answering) -> Result<LocalServer, String> {
        let dir = RunDir::create(tag)?;
        let path = dir.path().join("local.sock");
        let listener = UnixListener::bind(&path)
            .map_err(|e| format!("listening on {}: {e}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let serving = Arc::new(Mutex::new(None));
        let (stopping, current) = (stop.clone(), serving.clone());
        let thread = std::thread::Builder::new()
            .name("mu-kv-local-server".into())
            .spawn(move || {
                let mut state = (Store::new(), Engine::new());
                for stream in listener.incoming() {
                    let Ok(stream) = stream else { continue };
                    // Registered before the flag is read: a drop after the read shuts it down.
                    *lock(&current) = stream.try_clone().ok();
                    if stopping.load(Ordering::Acquire) {
                        return;
                    }
                    serve(stream, &answering, &mut state);
                }
            })
            .map_err(|e| format!("starting the server thread: {e}"))?;
        Ok(LocalServer { path, stop, serving, thread: Some(thread), _dir: dir })
    }

    /// A client of this server.
    pub fn client(&self) -> Result<Client, String> {
        Client::new(LOCAL_CLUSTER_ID, vec![(0, self.path.clone())]).map_err(|e| e.to_string())
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Ends the connection being served, if any, then wakes the accept call up; the thread
        // then sees the flag.
        if let Some(stream) = lock(&self.serving).take() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves one connection until the client closes it.
fn serve(stream: UnixStream, answering: &Answering, (store, book): &mut (Store, Engine)) {
    let Ok(write_half) = stream.try_clone() else { return };
    let (mut reader, mut writer) = (BufReader::new(stream), BufWriter::new(write_half));
    let (mut body, mut out) = (Vec::new(), Vec::new());
    while let Ok(true) = read_frame(&mut reader, &mut body) {
        let answer = match ClientMessage::decode(&body) {
            Ok(ClientMessage::Hello { .. }) => ServerMessage::Welcome,
            Ok(ClientMessage::Kv(bytes)) => match Request::decode(&bytes) {
                Ok(request) => answer(answering, store, &request),
                Err(e) => ServerMessage::Refused(format!("malformed request: {e}")),
            },
            Ok(ClientMessage::Order(bytes)) => match mu_orderbook::Request::decode(&bytes) {
                Ok(request) => answer_order(answering, book, &request),
                Err(e) => ServerMessage::Refused(format!("malformed order: {e}")),
            },
            Ok(ClientMessage::Status) => ServerMessage::Refused("no status here".into()),
            Ok(ClientMessage::FabricReserve | ClientMessage::FabricJoin { .. }) => {
                ServerMessage::Refused("no fabric path here".into())
            }
            Err(e) => ServerMessage::Refused(e.to_string()),
        };
        answer.encode(&mut out);
        if write_frame(&mut writer, &out).is_err() {
            return;
        }
    }
}

fn answer(answering: &Answering, store: &mut Store, request: &Request) -> ServerMessage {
    match answering {
        Answering::Canned => match request.op {
            Op::Get { .. } => ServerMessage::Reply(Reply::Value(None)),
            _ => ServerMessage::Reply(Reply::Stored),
        },
        Answering::Store => ServerMessage::Reply(store.apply(request)),
        Answering::StoreUnderLease(check) => {
            // A PUT applied while inactive is answered with a retry too: the store applies a
            // client's sequence number once, so the retry finds the reply it kept.
            let before = check.active();
            let reply = before.then(|| store.apply(request));
            match reply {
                Some(reply) if check.active() => ServerMessage::Reply(reply),
                _ => {
                    check.inactive.fetch_add(1, Ordering::Relaxed);
                    ServerMessage::Retry("the view is not active here".into())
                }
            }
        }
    }
}

/// The same answers as [`LocalServer`]'s, as a [`Backend`] of the service's own [`Server`]
/// with its fabric path attached: the client path over the fabric measured unreplicated,
/// through the same server, ring thread and client library as a replicated cluster's.
struct LocalBackend {
    app: App,
    answering: Answering,
    state: Mutex<(Store, Engine)>,
}

impl Backend for LocalBackend {
    fn node(&self) -> u16 {
        0
    }

    fn app(&self) -> App {
        self.app
    }

    fn serve(&self, batch: &[Pending], answers: &mut Vec<ServerMessage>) {
        let mut state = lock(&self.state);
        let (store, book) = &mut *state;
        for p in batch {
            answers.push(match &p.request {
                AppRequest::Kv(r) => answer(&self.answering, store, r),
                AppRequest::Order(r) => answer_order(&self.answering, book, r),
            });
        }
    }

    fn report(&self, _started: Instant) -> ReplicaReport {
        ReplicaReport::default()
    }
}

/// The service's server on an unreplicated [`LocalBackend`], serving clients over the fabric
/// (and its socket, for their joins) or over TCP on loopback. Stopped when dropped.
pub struct ServiceServer {
    server: Option<Server>,
    endpoint: mu_service::Endpoint,
    over_fabric: bool,
    _dir: RunDir,
}

impl ServiceServer {
    /// Starts it in a fresh run directory named after `tag`, serving `app` over the fabric
    /// (`over_fabric`) or over TCP.
    pub fn start(
        tag: &str,
        answering: Answering,
        app: App,
        over_fabric: bool,
    ) -> Result<ServiceServer, String> {
        let dir = RunDir::create(tag)?;
        let path = dir.path().join("local.sock");
        let backend = Arc::new(LocalBackend {
            app,
            answering,
            state: Mutex::new((Store::new(), Engine::new())),
        });
        let limits = mu_service::server::ServerLimits::default();
        let tcp = (!over_fabric).then_some("127.0.0.1:0");
        let mut server =
            Server::start_backend(LOCAL_CLUSTER_ID, backend, (&path, tcp), Instant::now(), limits)?;
        let endpoint = match server.tcp_address() {
            Some(address) => mu_service::Endpoint::Tcp(address.to_string()),
            None => mu_service::Endpoint::Unix(path),
        };
        if over_fabric {
            let clients = dir.path().join("clients");
            let node = ShmFabric::create(ShmConfig::new(&clients, LOCAL_CLUSTER_ID, NodeId(0)))
                .map_err(|e| format!("the fabric path's node: {e}"))?;
            server.attach_fabric(node, &clients)?;
        }
        Ok(ServiceServer { server: Some(server), endpoint, over_fabric, _dir: dir })
    }

    /// A client of this server, over the fabric or TCP as it serves.
    pub fn client(&self) -> Result<Client, String> {
        let mut client = Client::new(LOCAL_CLUSTER_ID, vec![(0, self.endpoint.clone())])
            .map_err(|e| e.to_string())?;
        client.over_fabric(self.over_fabric);
        Ok(client)
    }
}

impl Drop for ServiceServer {
    fn drop(&mut self) {
        // Before the run directory goes.
        self.server = None;
    }
}

/// An order: accepted at once ([`Answering::Canned`]) or applied to the book; never under a
/// lease (the order book has no reads to guard).
fn answer_order(
    answering: &Answering,
    book: &mut Engine,
    request: &mu_orderbook::Request,
) -> ServerMessage {
    match (answering, request.command) {
        (Answering::Canned, mu_orderbook::Command::Submit(order)) => {
            ServerMessage::Events(mu_orderbook::Reply::Events(vec![Event::Accepted {
                id: order.id,
            }]))
        }
        (Answering::Canned, _) => ServerMessage::Events(mu_orderbook::Reply::Events(Vec::new())),
        (Answering::Store, _) => ServerMessage::Events(book.apply(request)),
        (Answering::StoreUnderLease(_), _) => {
            ServerMessage::Refused("orders are not served under a lease here".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mu_membership::published::Lease;
    use std::time::Duration;

    /// Stops `server` on another thread; fails if that takes more than a few seconds.
    fn stops_soon(server: LocalServer) {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(server);
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(10)).expect("the server did not stop");
    }

    #[test]
    fn a_server_stops_while_its_client_is_still_connected() {
        let server = LocalServer::start("local-server-test", Answering::Store).unwrap();
        let mut client = server.client().unwrap();
        client.put(b"k", b"v").unwrap();
        assert_eq!(client.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
        stops_soon(server);
    }

    #[test]
    fn requests_are_answered_only_while_the_view_is_active() {
        let lease = Arc::new(PublishedLease::default());
        let inactive = Arc::new(AtomicU64::new(0));
        let check = LeaseCheck { lease: lease.clone(), epoch: 7, inactive: inactive.clone() };
        let server = LocalServer::start("local-server-lease", Answering::StoreUnderLease(check));
        let server = server.unwrap();
        let mut client = server.client().unwrap();
        client.set_timeout(Duration::from_millis(50));
        assert!(client.put(b"k", b"v").is_err(), "answered with no lease");
        let retried = inactive.load(Ordering::Relaxed);
        assert!(retried > 0);
        // A lease on another view does not count.
        let now = now_ns();
        lease.store(Lease { epoch: 6, start_ns: now, end_ns: now + 60_000_000_000 });
        assert!(client.get(b"k").is_err(), "answered under another view's lease");
        lease.store(Lease { epoch: 7, start_ns: now, end_ns: now + 60_000_000_000 });
        assert_eq!(client.get(b"k").unwrap(), None, "the put answered with a retry took no effect");
        client.put(b"k", b"w").unwrap();
        assert_eq!(client.get(b"k").unwrap().as_deref(), Some(&b"w"[..]));
        stops_soon(server);
    }
}
