//! The client path over the fabric on the server's side (`transport = "fabric"`,
//! `docs/client-path.md`): a thread that polls the clients' request rings
//! ([`mu_request_rings::RingServer`] on a fabric node of the server's own), hands what it takes
//! to the backend in batches as the proposer thread does for sockets, and writes each answer
//! into the client's response ring.
//!
//! Clients join through their socket connection (`ClientMessage::FabricReserve`, then
//! `FabricJoin`): the connection's thread asks this thread, which alone owns the ring server.
//! A request is the socket's message (`ClientMessage::Kv` or `Order`) as bytes, and so is its
//! answer: the same wire, carried by the rings.

use crate::backend::{Backend, Pending};
use crate::counters::ServerCounters;
use crate::wire::{ClientMessage, ServerMessage};
use mu_fabric::wait::Backoff;
use mu_fabric::{Fabric, NodeId};
use mu_request_rings::{ClientSlot, Geometry, RingServer, ServerConfig};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The rings' shape: 8 requests outstanding per client; requests of up to 472 bytes (a slot
/// of 512, the most shm writes inline), a larger one goes by the socket; answers of up to
/// 4,056 bytes (an order that trades with dozens of orders), a larger one is asked for again
/// over the socket ([`ServerMessage::BySocket`]).
pub const GEOMETRY: Geometry =
    Geometry { slots_per_client: 8, request_slot_bytes: 512, response_slot_bytes: 4096 };

/// Node ids a client may be given: every id of the fabric's directory but the server's (0).
const CLIENT_NODES: std::ops::Range<u16> = 1..64;

/// How long a node id handed to a joining client stays reserved for it.
const RESERVATION: Duration = Duration::from_secs(10);

/// A client quiet for this long, with nothing outstanding, is released (its slot and node id
/// go to others); the library joins again when it next sends.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How the ring thread waits when no client sends: it spins 5 µs (about a round trip, so that
/// a client sending back to back is seen at once), yields until 200 µs, then parks, so that
/// an idle replica's thread leaves the cores to the others. A long spin costs a client whose
/// thread shares this one's CPU the whole spin on every request (the client cannot write its
/// next request until this thread lets it run): measured on 2 vCPUs beside other work, 20 µs
/// of spin on this side and 50 µs on the client's made a 2.5 µs round trip take 77 µs, and
/// 2 µs on each side 11–13 µs.
const IDLE_WAIT: Backoff = Backoff { spin_ns: 5_000, yield_ns: 200_000, park_us: 100 };

/// What a connection's thread asks the ring thread.
enum Ask {
    /// A node id for a client to start its fabric node under.
    Reserve(Sender<Result<u16, String>>),
    /// Admit the client's node: its grant as bytes.
    Join { node: u16, reply: Sender<Result<Vec<u8>, String>> },
}

/// The ring thread's handle: dropping it stops the thread.
pub struct FabricPath {
    asks: Sender<Ask>,
    /// Where clients start their nodes (on shm, the fabric's run directory).
    pub dir: String,
    /// What a client registers on its node before it joins, as bytes.
    layout: Vec<u8>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// What a connection needs to pass a client's join on.
#[derive(Clone)]
pub struct FabricAsks {
    asks: Sender<Ask>,
    dir: String,
    layout: Vec<u8>,
}

impl FabricAsks {
    /// A node id for a joining client, where to start it, and what to register there.
    pub fn reserve(&self) -> ServerMessage {
        let (tx, rx) = mpsc::channel();
        if self.asks.send(Ask::Reserve(tx)).is_err() {
            return ServerMessage::Retry("the fabric path is stopping".into());
        }
        match rx.recv() {
            Ok(Ok(node)) => ServerMessage::FabricNode {
                node,
                layout: self.layout.clone(),
                dir: self.dir.clone(),
            },
            Ok(Err(why)) => ServerMessage::Refused(why),
            Err(_) => ServerMessage::Retry("the fabric path is stopping".into()),
        }
    }

    /// Admits the client's node `node` (reserved, and started by the client).
    pub fn join(&self, node: u16) -> ServerMessage {
        let (tx, reply) = mpsc::channel();
        if self.asks.send(Ask::Join { node, reply: tx }).is_err() {
            return ServerMessage::Retry("the fabric path is stopping".into());
        }
        match reply.recv() {
            Ok(Ok(grant)) => ServerMessage::FabricGrant(grant),
            Ok(Err(why)) => ServerMessage::Refused(why),
            Err(_) => ServerMessage::Retry("the fabric path is stopping".into()),
        }
    }
}

impl FabricPath {
    /// Starts the ring thread on `fabric` (a node of the server's own, id 0 of its directory
    /// `dir`), serving `backend`.
    pub fn start<F: Fabric>(
        fabric: F,
        dir: String,
        backend: Arc<dyn Backend>,
        counters: Arc<ServerCounters>,
    ) -> Result<FabricPath, String> {
        let config = ServerConfig {
            clients_max: CLIENT_NODES.len() as u16,
            geometry: GEOMETRY,
            instance: instance(),
            idle_timeout_ns: IDLE_TIMEOUT.as_nanos() as u64,
            ..ServerConfig::default()
        };
        let server =
            RingServer::new(fabric, config).map_err(|e| format!("the fabric path: {e}"))?;
        let layout = server.client_layout().to_bytes().to_vec();
        let (asks, inbox) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("mu-kv-rings".into())
            .spawn(move || {
                let mut rings = Rings::new(server, backend, counters);
                rings.run(&inbox, &stopping);
            })
            .map_err(|e| format!("starting the fabric path's thread: {e}"))?;
        Ok(FabricPath { asks, dir, layout, stop, thread: Some(thread) })
    }

    pub fn asks(&self) -> FabricAsks {
        FabricAsks { asks: self.asks.clone(), dir: self.dir.clone(), layout: self.layout.clone() }
    }
}

impl Drop for FabricPath {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An instance number for this server's grants: another server (a restart, another replica)
/// draws another, so a grant is never taken for one of theirs.
fn instance() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    mu_log::digest(u64::from(std::process::id()), &nanos.to_le_bytes()).max(1)
}

/// The ring thread's state.
struct Rings<F: Fabric> {
    server: RingServer<F>,
    backend: Arc<dyn Backend>,
    counters: Arc<ServerCounters>,
    /// Node ids handed out and not admitted yet, with when.
    reserved: BTreeMap<u16, Instant>,
    taken: Vec<(ClientSlot, u64, Vec<u8>)>,
    origin: Instant,
}

impl<F: Fabric> Rings<F> {
    fn new(
        server: RingServer<F>,
        backend: Arc<dyn Backend>,
        counters: Arc<ServerCounters>,
    ) -> Self {
        Rings {
            server,
            backend,
            counters,
            reserved: BTreeMap::new(),
            taken: Vec::new(),
            origin: Instant::now(),
        }
    }

    fn run(&mut self, inbox: &Receiver<Ask>, stop: &AtomicBool) {
        let mut idle_since = Instant::now();
        while !stop.load(Ordering::Acquire) {
            while let Ok(ask) = inbox.try_recv() {
                self.answer(ask);
            }
            if self.serve_round() {
                idle_since = Instant::now();
            } else {
                IDLE_WAIT.pause(idle_since.elapsed().as_nanos() as u64);
            }
        }
    }

    /// One poll of every ring, and the backend's answers to what it took; whether there was
    /// anything.
    fn serve_round(&mut self) -> bool {
        let now_ns = self.origin.elapsed().as_nanos() as u64;
        let taken = &mut self.taken;
        self.server.poll(now_ns, &mut |slot, seq, bytes| taken.push((slot, seq, bytes.to_vec())));
        for released in self.server.drain_released() {
            let (slot, reason) = (released.slot.index, &released.reason);
            tracing::debug!(slot, ?reason, "fabric client released");
        }
        if self.taken.is_empty() {
            return false;
        }
        let arrived = Instant::now();
        let taken = std::mem::take(&mut self.taken);
        let mut answers: Vec<Option<ServerMessage>> = Vec::with_capacity(taken.len());
        let mut batch = Vec::with_capacity(taken.len());
        for (_, _, bytes) in &taken {
            self.counters.requests.fetch_add(1, Ordering::Relaxed);
            self.counters.fabric_requests.fetch_add(1, Ordering::Relaxed);
            match self.pending(bytes) {
                Ok(p) => {
                    batch.push(p);
                    answers.push(None);
                }
                Err(why) => answers.push(Some(ServerMessage::Refused(why))),
            }
        }
        let mut served = Vec::with_capacity(batch.len());
        if !batch.is_empty() {
            self.backend.serve(&batch, &mut served);
        }
        let mut served = served.into_iter();
        let mut out = Vec::new();
        for ((slot, seq, _), answer) in taken.into_iter().zip(answers) {
            let answer = answer
                .or_else(|| served.next())
                .unwrap_or_else(|| ServerMessage::Retry("not answered; send it again".into()));
            self.count(&answer, arrived);
            answer.encode(&mut out);
            if self.server.respond(slot, seq, &out).is_err() {
                // Too large for a response slot (or the client is gone): the client asks
                // again over the socket, where the answer kept for the request comes back.
                ServerMessage::BySocket.encode(&mut out);
                let _ = self.server.respond(slot, seq, &out);
            }
        }
        true
    }

    /// A request as the socket's server checks it: a request of this server's application.
    fn pending(&self, bytes: &[u8]) -> Result<Pending, String> {
        let message = ClientMessage::decode(bytes).map_err(|e| e.to_string())?;
        match message {
            ClientMessage::Kv(_) | ClientMessage::Order(_) => {}
            other => return Err(format!("not a request on the fabric path: {other:?}")),
        }
        let (request, bytes) = self.backend.app().request(message)?;
        Ok(Pending { request, bytes })
    }

    fn count(&self, answer: &ServerMessage, arrived: Instant) {
        let c = &self.counters;
        let counter = match answer {
            a if a.is_answer() => {
                c.record_latency(arrived.elapsed().as_nanos() as u64);
                &c.committed
            }
            ServerMessage::NotLeader { .. } => &c.not_leader,
            ServerMessage::Retry(_) => &c.retries,
            _ => &c.refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn answer(&mut self, ask: Ask) {
        match ask {
            Ask::Reserve(reply) => {
                let _ = reply.send(self.reserve());
            }
            Ask::Join { node, reply } => {
                self.reserved.remove(&node);
                let grant = self
                    .server
                    .admit(NodeId(node))
                    .map(|g| g.to_bytes().to_vec())
                    .map_err(|e| format!("admitting the client's node {node}: {e}"));
                let _ = reply.send(grant);
            }
        }
    }

    /// A node id no admitted client holds and none reserved recently.
    fn reserve(&mut self) -> Result<u16, String> {
        let now = Instant::now();
        self.reserved.retain(|_, at| now.duration_since(*at) < RESERVATION);
        let admitted: Vec<u16> = self.server.clients().map(|(_, node)| node.0).collect();
        let free = CLIENT_NODES
            .clone()
            .find(|n| !admitted.contains(n) && !self.reserved.contains_key(n))
            .ok_or_else(|| {
                format!(
                    "every one of the fabric path's {} client places is taken: try again later, \
                     or use the socket",
                    CLIENT_NODES.len()
                )
            })?;
        self.reserved.insert(free, now);
        Ok(free)
    }
}
