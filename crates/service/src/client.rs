//! The client library: key-value operations against a cluster, following the leader.
//!
//! A [`Client`] knows every replica's endpoint (its Unix socket, or a TCP address). It sends each request to the replica it believes
//! leads; a "not leader" answer names the leader to try next (or, with none known, it tries the
//! replicas in turn), a connection that fails moves it to the next replica, and an answer that
//! leaves the outcome unknown makes it send the request again — always with the same client id
//! and sequence number, so the state machine applies it once, however many times it arrives.
//!
//! A request its target does not answer within a few of the client's round trips (the attempt
//! wait, 1 ms at least) is sent to the other replicas too, in parallel and
//! each bounded by the attempt wait: one that leads answers it, the others name the leader
//! they know, and the client follows them rather than its last socket. So a leader that stops
//! answering without closing its connections (stopped, or stuck) costs a client about the
//! time the others take to agree on another leader, not the time it is stopped
//! (`docs/service.md`, "Clients during a leader's pause").

use crate::crash_notice::{CrashNotices, Watched};
use crate::fabric_link::FabricLink;
use crate::report::ReplicaReport;
use crate::socket::{Endpoint, Stream};
use crate::wire::{
    read_frame, write_frame, ClientMessage, FrameError, ServerMessage, WIRE_VERSION,
};
use mu_kv::{Op, Reply, Request};
use mu_orderbook::{
    Command as OrderCommand, NewOrder, OrderId, Price, Qty, Reply as OrderReply,
    Request as OrderRequest, Side, TimeInForce,
};
use std::io::{self, BufRead, BufReader, BufWriter, Read};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a client waits for a TCP connection to a replica to open before it tries the next.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How long one answer may take before the replica is given up on (the request may be tried
/// on the next one): the cap of a request's wait on one replica, and the whole wait of the
/// messages that are not requests (a status request, joining the fabric path).
const READ_TIMEOUT: Duration = Duration::from_millis(500);
/// The least a client waits for a request's answer before it asks the other replicas who
/// leads ([`RoundTrips::attempt_wait`]). An answer takes a round of replication (tens of
/// microseconds on one host), but on a loaded machine a time slice or two of the scheduler (a
/// few milliseconds) may come on top. Asking costs a request to each other replica, and the
/// client goes on waiting for the target's answer unless the others name another leader, so
/// asking early wastes little; the floor keeps a busy machine's ordinary delays from making
/// every client ask on every request. One millisecond: a killed leader's sockets close only
/// once its memory is torn down (4–5 ms on one host with three logs mapped), while a new
/// leader is agreed and answering within about a millisecond; where round trips are slower,
/// the attempt wait grows with them.
const ATTEMPT_WAIT_MIN: Duration = Duration::from_millis(1);
/// Round trips an answer may take, as the client has seen them (the upper quartile of the
/// latest), before it asks around.
const ATTEMPT_ROUND_TRIPS: u64 = 4;
/// The longest gap between two askings while the target stays silent. The gap starts at the
/// attempt wait and doubles, so that an outage with no leader anywhere is not asked about
/// hundreds of times a second, up to this, so that a leader agreed late in a long pause is
/// still found within about this long of being agreed.
const ASK_GAP_MAX: Duration = Duration::from_millis(20);
/// The least an asking waits for the others' answers ([`ask_wait`]). A replica that does not
/// lead answers at once, but its answer takes a new connection (accepted within the 2 ms its
/// acceptor sleeps when idle, on a thread of its own), a hello and the request through its
/// proposer; on a loaded 2-vCPU machine that took more than 5 ms often enough that askings
/// bounded by the attempt wait found nobody for hundreds of milliseconds.
const ASK_WAIT_MIN: Duration = Duration::from_millis(25);
/// The first pause between two redirects that follow each other; it doubles with each one
/// up to [`REDIRECT_PAUSE_MAX`].
const REDIRECT_PAUSE: Duration = Duration::from_micros(200);
/// The longest pause between two redirects: two replicas that name each other for a while
/// (each elected by its own detector) are asked a few hundred times a second at most.
const REDIRECT_PAUSE_MAX: Duration = Duration::from_micros(6_400);

/// How long after failing to reach a replica a "not leader" naming it counts as stale: the
/// replica answering has not noticed the failure yet (a failover takes about a millisecond
/// on one host, and detection a few read periods where a leader was paused).
const UNREACHABLE_FOR: Duration = Duration::from_millis(100);
/// Stale "not leader" answers from one replica taken in a row, each followed by a
/// [`REDIRECT_PAUSE`], before the client tries the next replica: a replica that does not
/// notice within about a millisecond and a half may be a slow one.
const STALE_MAX: u32 = 8;

/// Why an operation did not get a reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The cluster refused it: it was not applied, and sending it again would not help.
    #[error("refused: {0}")]
    Refused(String),
    /// No reply within the timeout (no leader, or none reachable). The operation may or may
    /// not have been applied.
    #[error("no reply within {timeout_ms} ms (last problem: {last})")]
    Timeout { timeout_ms: u64, last: String },
    /// The request could not be built (a key or value over the limits).
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// A client of the key-value service. Operations are sequential: one at a time.
pub struct Client {
    /// The cluster the client belongs to: replicas of another refuse it.
    cluster_id: u64,
    /// Each replica's id and endpoint.
    replicas: Vec<(u16, Endpoint)>,
    /// Position in `replicas` of the one we send to.
    target: usize,
    conn: Option<(BufReader<Stream>, BufWriter<Stream>)>,
    /// The read timeout `conn`'s socket has (`None`: not set yet): the attempt wait, or less
    /// near a deadline or the next asking.
    conn_read_timeout: Option<Duration>,
    /// The round trips of the requests answered so far: how long to wait before asking.
    round_trips: RoundTrips,
    id: u64,
    seq: u64,
    timeout: Duration,
    body: Vec<u8>,
    /// How many times operations were sent again (redirects, retries, reconnections).
    pub resends: u64,
    /// How many times the client asked the other replicas about a request its target had not
    /// answered within the attempt wait.
    pub asked: u64,
    /// Whether requests go over the fabric where a replica serves it ([`Client::over_fabric`]).
    over_fabric: bool,
    /// The request rings on the target replica, once joined.
    link: Option<FabricLink>,
    /// [`Client::call_many`]'s sessions, one per lane: client id and last sequence number.
    lanes: Vec<(u64, u64)>,
    /// By position: when the client last failed to reach the replica (refused, closed,
    /// silent). A "not leader" naming it soon after is stale ([`UNREACHABLE_FOR`]).
    unreachable_at: Vec<Option<Instant>>,
    /// Where to watch the replicas' death flags, on their host ([`Client::watch_crashes`]).
    crash_notices: Option<CrashNotices>,
    /// The watch of the connection opened last, if any.
    watched: Option<Watched>,
}

/// Requests [`Client::call_many`] sends at once over the fabric (the rings' window).
pub const PIPELINE_LANES: usize = 8;

/// A client id unlikely to be anyone else's: time, process and a counter mixed.
fn fresh_client_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut z = nanos
        ^ (u64::from(std::process::id()) << 40)
        ^ COUNTER.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).max(1)
}

/// The round trips of a client's latest answered requests, and the attempt wait they give.
#[derive(Clone, Debug, Default)]
struct RoundTrips {
    /// The latest [`ROUND_TRIPS_KEPT`] round trips, in nanoseconds (oldest overwritten first).
    samples_ns: Vec<u64>,
    /// Where the next sample goes once `samples_ns` is full.
    next: usize,
    /// [`RoundTrips::attempt_wait`], computed when a sample comes.
    wait: Option<Duration>,
}

/// Round trips [`RoundTrips`] keeps.
const ROUND_TRIPS_KEPT: usize = 16;

impl RoundTrips {
    fn record(&mut self, round_trip: Duration) {
        let ns = u64::try_from(round_trip.as_nanos()).unwrap_or(u64::MAX);
        if self.samples_ns.len() < ROUND_TRIPS_KEPT {
            self.samples_ns.push(ns);
        } else {
            self.samples_ns[self.next] = ns;
        }
        self.next = (self.next + 1) % ROUND_TRIPS_KEPT;
        let mut sorted = self.samples_ns.clone();
        sorted.sort_unstable();
        let upper_quartile_ns = sorted[(sorted.len() * 3).div_ceil(4) - 1];
        let wait_ns = upper_quartile_ns.saturating_mul(ATTEMPT_ROUND_TRIPS);
        self.wait = Some(
            Duration::from_millis(wait_ns.div_ceil(1_000_000))
                .clamp(ATTEMPT_WAIT_MIN, READ_TIMEOUT),
        );
    }

    /// How long to wait for a request's answer before asking the other replicas who leads:
    /// [`ATTEMPT_ROUND_TRIPS`] times the upper quartile of the latest round trips, at least
    /// [`ATTEMPT_WAIT_MIN`] and at most [`READ_TIMEOUT`], in whole milliseconds (so that the
    /// socket's timeout is rarely changed). A quartile rather than a mean or the largest: one
    /// answer in several that was slow (a pause it waited through, a client thread the
    /// machine did not run for a while) must not make the client slow to ask on the next.
    fn attempt_wait(&self) -> Duration {
        self.wait.unwrap_or(ATTEMPT_WAIT_MIN)
    }
}

/// How long an asking waits for the others' answers, given the attempt wait `wait`: as long,
/// and at least [`ASK_WAIT_MIN`]. It ends as soon as every replica asked has answered (or one
/// answered the request), which a live replica does within about a millisecond on an idle
/// machine: the whole wait is spent only where one of them is silent too.
fn ask_wait(wait: Duration) -> Duration {
    wait.max(ASK_WAIT_MIN)
}

/// The gap after `gap` between two askings while the target stays silent (see
/// [`ASK_GAP_MAX`]); never below the attempt wait `wait`.
fn next_ask_gap(gap: Duration, wait: Duration) -> Duration {
    gap.saturating_mul(2).min(ASK_GAP_MAX).max(wait)
}

/// What asking the other replicas found ([`Client::ask_others`]).
enum Asked {
    /// The replica at this position in the client's list took the request and answered it.
    Answered(usize, ServerMessage),
    /// The others name this replica, not the target, as their leader.
    Leader(u16),
    /// Nothing to move for: the client goes on waiting for the target.
    Nothing,
}

/// `message`'s answer from the replica at `endpoint`, on a connection of its own (opened with
/// a hello), or `None` if there is none by `deadline`. A fresh connection each time: an answer
/// that comes after the deadline cannot be taken for the answer to a later message.
fn ask(
    endpoint: &Endpoint,
    cluster_id: u64,
    message: &[u8],
    deadline: Instant,
) -> Option<ServerMessage> {
    let left = || deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
    let stream = Stream::connect(endpoint, left()?).ok()?;
    stream.set_write_timeout(Some(left()?)).ok()?;
    let mut body = Vec::new();
    let mut exchange = |out: &[u8]| -> Option<ServerMessage> {
        write_frame(&mut &stream, out).ok()?;
        stream.set_read_timeout(Some(left()?)).ok()?;
        read_frame(&mut &stream, &mut body).ok()?.then_some(())?;
        ServerMessage::decode(&body).ok()
    };
    let mut hello = Vec::new();
    ClientMessage::Hello { cluster_id, wire_version: WIRE_VERSION }.encode(&mut hello);
    match exchange(&hello)? {
        ServerMessage::Welcome => exchange(message),
        _ => None,
    }
}

/// Reads through a socket's timeouts until `give_up`: once an answer has begun to arrive, the
/// rest of it may take as long as an answer may, not just the attempt wait.
struct Patient<'a, R> {
    inner: &'a mut R,
    give_up: Instant,
}

impl<R: Read> Read for Patient<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.inner.read(buf) {
                Err(e) if timed_out(&e) && Instant::now() < self.give_up => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                result => return result,
            }
        }
    }
}

/// Whether `e` is a read that timed out (which a socket reports as either kind).
fn timed_out(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

impl Client {
    /// A client of cluster `cluster_id`'s replicas `(id, endpoint)` (an endpoint: a Unix
    /// socket's path or an [`Endpoint`]), with a fresh client id.
    pub fn new<E: Into<Endpoint>>(
        cluster_id: u64,
        replicas: Vec<(u16, E)>,
    ) -> Result<Client, ClientError> {
        if replicas.is_empty() {
            return Err(ClientError::Invalid("no replicas to talk to".into()));
        }
        let replica_count = replicas.len();
        Ok(Client {
            cluster_id,
            replicas: replicas.into_iter().map(|(id, e)| (id, e.into())).collect(),
            target: 0,
            conn: None,
            conn_read_timeout: None,
            round_trips: RoundTrips::default(),
            id: fresh_client_id(),
            seq: 0,
            timeout: Duration::from_secs(5),
            body: Vec::new(),
            resends: 0,
            asked: 0,
            over_fabric: false,
            link: None,
            lanes: Vec::new(),
            unreachable_at: vec![None; replica_count],
            crash_notices: None,
            watched: None,
        })
    }

    /// Learns of a replica's crash the moment the kernel marks it dead, where the replicas
    /// run on this host on the shm fabric whose run directory is `fabric_dir`: the connection
    /// to a replica that dies is shut down at once, and the request moves to the others
    /// without waiting for the attempt wait ([`crate::crash_notice`]).
    pub fn watch_crashes(&mut self, fabric_dir: PathBuf) {
        self.crash_notices = Some(CrashNotices { dir: fabric_dir, cluster_id: self.cluster_id });
    }

    /// Sends requests over the fabric (`docs/client-path.md`): the client joins each replica
    /// it talks to through its socket, then writes requests into its ring there and reads the
    /// answers from its own, on a fabric node of its own (shm: clients on the replicas' host).
    /// A message too large for a ring slot, and every request to a replica that serves no
    /// fabric clients, still goes by the socket.
    pub fn over_fabric(&mut self, on: bool) {
        self.over_fabric = on;
        if !on {
            self.link = None;
        }
    }

    /// How long an operation may take before [`ClientError::Timeout`] (default 5 s).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The replica the next operation goes to first.
    pub fn target(&self) -> u16 {
        self.replicas[self.target].0
    }

    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, ClientError> {
        match self.call(Op::Get { key: key.to_vec() })? {
            Reply::Value(v) => Ok(v),
            other => Err(unexpected(other)),
        }
    }

    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), ClientError> {
        match self.call(Op::Put { key: key.to_vec(), value: value.to_vec() })? {
            Reply::Stored => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Returns whether the key existed.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, ClientError> {
        match self.call(Op::Delete { key: key.to_vec() })? {
            Reply::Deleted(existed) => Ok(existed),
            other => Err(unexpected(other)),
        }
    }

    /// Sets `key` to `value` if it holds `expected` (`None`: if absent); returns whether it did.
    pub fn cas(
        &mut self,
        key: &[u8],
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Result<bool, ClientError> {
        let op = Op::Cas {
            key: key.to_vec(),
            expected: expected.map(<[u8]>::to_vec),
            value: value.to_vec(),
        };
        match self.call(op)? {
            Reply::Swapped(done) => Ok(done),
            other => Err(unexpected(other)),
        }
    }

    /// Sends every op of `ops` and returns their replies in order: over the fabric, up to
    /// [`PIPELINE_LANES`] at once, so that a batch costs about one round trip rather than one
    /// each; elsewhere, or for a request not answered in that round (a leader change, a retry),
    /// one at a time as [`Client::call`] does. Each request in flight travels under a session
    /// of its own (a client id per lane), because a store applies each client's requests in
    /// sequence and keeps the last reply only: the same (lane, sequence number) sent again is
    /// applied once. The ops of one call may be applied in any order among themselves.
    pub fn call_many(&mut self, ops: Vec<Op>) -> Vec<Result<Reply, ClientError>> {
        let encode = |client, seq, op| {
            let bytes = Request { client, seq, op }.encode().map_err(|e| e.to_string())?;
            Ok(ClientMessage::Kv(bytes))
        };
        self.pipelined(ops, encode, |answer| match answer {
            ServerMessage::Reply(r) => Ok(r),
            other => Err(wrong_application(&other)),
        })
    }

    /// Sends every order command of `commands` and returns their events in order, pipelined as
    /// [`Client::call_many`] pipelines key-value ops: a session per lane, each command applied
    /// once. The book sequences the commands of one call in the order they reach the leader,
    /// which may differ from theirs: pipeline only commands that do not depend on each other
    /// (orders of different ids, say), as a trader with several orders in flight does.
    pub fn order_many(
        &mut self,
        commands: Vec<OrderCommand>,
    ) -> Vec<Result<OrderReply, ClientError>> {
        let encode = |client, seq, command| {
            Ok(ClientMessage::Order(OrderRequest { client, seq, command }.encode()))
        };
        self.pipelined(commands, encode, |answer| match answer {
            ServerMessage::Events(reply) => Ok(reply),
            other => Err(wrong_application(&other)),
        })
    }

    /// The pipelining of [`Client::call_many`] for any application: `encode` makes item's
    /// message for a (lane's client id, sequence number), `answer` reads its answer.
    fn pipelined<T, R>(
        &mut self,
        items: Vec<T>,
        encode: impl Fn(u64, u64, T) -> Result<ClientMessage, String>,
        answer: impl Fn(ServerMessage) -> Result<R, ClientError>,
    ) -> Vec<Result<R, ClientError>> {
        let mut out = Vec::with_capacity(items.len());
        let mut items = items.into_iter().peekable();
        while items.peek().is_some() {
            let mut messages = Vec::with_capacity(PIPELINE_LANES);
            for (lane, item) in items.by_ref().take(PIPELINE_LANES).enumerate() {
                let (client, seq) = self.next_in_lane(lane);
                messages.push(encode(client, seq, item).map(|message| {
                    let mut m = Vec::new();
                    message.encode(&mut m);
                    m
                }));
            }
            let good: Vec<Vec<u8>> = messages.iter().filter_map(|m| m.clone().ok()).collect();
            let mut answered = self.pipeline(&good).into_iter();
            for m in messages {
                let result = m.map_err(ClientError::Invalid).and_then(|m| {
                    match answered.next().flatten() {
                        Some(a @ (ServerMessage::Reply(_) | ServerMessage::Events(_))) => answer(a),
                        // Not answered in the round: on its own, the same bytes.
                        _ => answer(self.send_bytes_until_answered(&m)?),
                    }
                });
                out.push(result);
            }
        }
        out
    }

    /// Lane `lane`'s session: its client id (drawn once) and next sequence number.
    fn next_in_lane(&mut self, lane: usize) -> (u64, u64) {
        while self.lanes.len() <= lane {
            self.lanes.push((fresh_client_id(), 0));
        }
        let (client, seq) = &mut self.lanes[lane];
        *seq += 1;
        (*client, *seq)
    }

    /// `messages` over the target's rings in one round: an answer each, `None` where there
    /// was none (not over the fabric, not joined, not in time, not fitting a slot). A round
    /// not answered within the attempt wait asks the other replicas as a single request does
    /// ([`Client::await_answer`]), with its first unanswered message; where they name another
    /// leader (or one of them answers it), the round ends there and what it lacks goes to
    /// that leader one at a time.
    fn pipeline(&mut self, messages: &[Vec<u8>]) -> Vec<Option<ServerMessage>> {
        let none = || vec![None; messages.len()];
        if !self.over_fabric || messages.is_empty() {
            return none();
        }
        let target = self.replicas[self.target].0;
        if self.link.as_ref().is_some_and(|l| l.replica != target) {
            self.link = None;
        }
        if self.link.is_none() {
            match self.join_fabric(target, Instant::now() + READ_TIMEOUT) {
                Ok(link) => self.link = Some(link),
                Err(_) => return none(),
            }
        }
        let Some(link) = self.link.as_mut() else { return none() };
        if messages.len() > link.window() || !messages.iter().all(|m| link.fits(m)) {
            return none();
        }
        let Ok(seqs) = link.send_many(messages) else {
            self.link = None;
            return none();
        };
        let mut answers = none();
        let give_up = Instant::now() + READ_TIMEOUT;
        let wait = self.round_trips.attempt_wait();
        let mut gap = wait;
        let mut next_ask = Instant::now() + wait;
        loop {
            let link = self.link.as_mut().expect("joined above");
            match link.wait_many(&seqs, &mut answers, next_ask.min(give_up)) {
                Ok(0) => return answers,
                Ok(_) => {}
                Err(_) => {
                    self.link = None;
                    return answers;
                }
            }
            let now = Instant::now();
            if now >= give_up {
                return answers;
            }
            let at = answers.iter().position(Option::is_none).expect("an answer is missing");
            match self.ask_others(&messages[at], ask_wait(wait).min(give_up - now)) {
                Asked::Answered(pos, answer) => {
                    answers[at] = Some(answer);
                    self.switch(pos);
                    return answers;
                }
                Asked::Leader(id) => {
                    let pos = self.replicas.iter().position(|r| r.0 == id);
                    self.switch(pos.expect("asking names replicas of the list only"));
                    return answers;
                }
                Asked::Nothing => {}
            }
            gap = next_ask_gap(gap, wait);
            next_ask = Instant::now() + gap;
        }
    }

    /// Sends `op` as this client's next request until a replica answers it.
    pub fn call(&mut self, op: Op) -> Result<Reply, ClientError> {
        self.seq += 1;
        let request = Request { client: self.id, seq: self.seq, op };
        let bytes = request.encode().map_err(|e| ClientError::Invalid(e.to_string()))?;
        match self.send_until_answered(ClientMessage::Kv(bytes))? {
            ServerMessage::Reply(reply) => Ok(reply),
            other => Err(wrong_application(&other)),
        }
    }

    /// Sends `command` to an order book cluster as this client's next request until a replica
    /// answers it: the events it caused (or why it was not applied).
    pub fn order(&mut self, command: OrderCommand) -> Result<OrderReply, ClientError> {
        self.seq += 1;
        let request = OrderRequest { client: self.id, seq: self.seq, command };
        match self.send_until_answered(ClientMessage::Order(request.encode()))? {
            ServerMessage::Events(reply) => Ok(reply),
            other => Err(wrong_application(&other)),
        }
    }

    /// A good-till-cancelled limit order ([`Client::order`]): its events.
    pub fn limit(
        &mut self,
        id: u64,
        side: Side,
        price_ticks: u64,
        qty_lots: u64,
    ) -> Result<OrderReply, ClientError> {
        self.order(OrderCommand::Submit(NewOrder::limit(id, side, price_ticks, qty_lots)))
    }

    /// A limit order that trades what it can at once and cancels the rest (IOC), or trades all
    /// of it at once or nothing (FOK): `tif` says which (GTC is [`Client::limit`]).
    pub fn limit_now(
        &mut self,
        id: u64,
        side: Side,
        (price_ticks, qty_lots): (u64, u64),
        tif: TimeInForce,
    ) -> Result<OrderReply, ClientError> {
        let order = NewOrder::limit(id, side, price_ticks, qty_lots).with_tif(tif);
        self.order(OrderCommand::Submit(order))
    }

    /// A market order: it takes what rests, and what it cannot fill is cancelled.
    pub fn market(
        &mut self,
        id: u64,
        side: Side,
        qty_lots: u64,
    ) -> Result<OrderReply, ClientError> {
        self.order(OrderCommand::Submit(NewOrder::market(id, side, qty_lots)))
    }

    /// A stop order: `order` (a limit or market order) enters the book once the last trade
    /// reaches `stop_ticks` (a buy at or above it, a sell at or below it).
    pub fn stop(&mut self, order: NewOrder, stop_ticks: u64) -> Result<OrderReply, ClientError> {
        self.order(OrderCommand::Submit(order.with_stop(stop_ticks)))
    }

    /// Cancels what is open of order `id`.
    pub fn cancel(&mut self, id: u64) -> Result<OrderReply, ClientError> {
        self.order(OrderCommand::Cancel { id: OrderId(id) })
    }

    /// Gives order `id` a new price and total quantity (`docs/apps/orderbook.md`: a price
    /// change or a larger quantity loses the order's place in its queue).
    pub fn replace(
        &mut self,
        id: u64,
        price_ticks: u64,
        qty_lots: u64,
    ) -> Result<OrderReply, ClientError> {
        self.order(OrderCommand::Replace {
            id: OrderId(id),
            price: Price(price_ticks),
            qty: Qty(qty_lots),
        })
    }

    /// Sends `request` until a replica answers it ([`ServerMessage::is_answer`]), a replica
    /// refuses it, or the timeout passes.
    fn send_until_answered(
        &mut self,
        request: ClientMessage,
    ) -> Result<ServerMessage, ClientError> {
        let mut message = Vec::new();
        request.encode(&mut message);
        self.send_bytes_until_answered(&message)
    }

    /// [`Client::send_until_answered`] for a message already encoded.
    fn send_bytes_until_answered(&mut self, message: &[u8]) -> Result<ServerMessage, ClientError> {
        let deadline = Instant::now() + self.timeout;
        let mut last = String::from("none");
        let mut first = true;
        let mut redirects = 0u32;
        let mut stale = 0u32;
        loop {
            if !first {
                self.resends += 1;
            }
            first = false;
            if Instant::now() >= deadline {
                return Err(ClientError::Timeout {
                    timeout_ms: self.timeout.as_millis() as u64,
                    last,
                });
            }
            match self.exchange(message, deadline) {
                Ok(answer) if answer.is_answer() => return Ok(answer),
                Ok(ServerMessage::Refused(why)) => return Err(ClientError::Refused(why)),
                Ok(ServerMessage::NotLeader { leader }) => {
                    last = format!("replica {} does not lead", self.target());
                    let named = leader.and_then(|l| self.replicas.iter().position(|r| r.0 == l));
                    if named.is_some_and(|pos| self.unreachable_lately(pos)) && stale < STALE_MAX {
                        // It names the leader we just failed to reach: it has not noticed yet.
                        // Ask it again shortly rather than go round with growing pauses; it
                        // leads or names the new leader within a failover.
                        stale += 1;
                        std::thread::sleep(REDIRECT_PAUSE);
                        continue;
                    }
                    match named {
                        Some(pos) if pos != self.target => {
                            // The first redirect goes at once (a leader change); two replicas
                            // naming each other for a while (each elected by its own
                            // detector) are asked again after pauses that grow.
                            redirects += 1;
                            if redirects > 1 {
                                std::thread::sleep(redirect_pause(redirects - 1));
                            }
                            self.switch(pos)
                        }
                        // It names itself, or nobody: an election is going on.
                        _ => {
                            redirects += 1;
                            self.next_replica();
                            std::thread::sleep(redirect_pause(redirects));
                        }
                    }
                }
                Ok(ServerMessage::Retry(why)) => {
                    last = why;
                    std::thread::sleep(Duration::from_micros(100));
                }
                Ok(
                    ServerMessage::Status(_)
                    | ServerMessage::Welcome
                    | ServerMessage::FabricNode { .. }
                    | ServerMessage::FabricGrant(_)
                    | ServerMessage::BySocket
                    | ServerMessage::Reply(_)
                    | ServerMessage::Events(_),
                ) => {
                    last = "an answer of the wrong kind".into();
                    self.conn = None;
                }
                Err(e) => {
                    last = format!("replica {}: {e}", self.target());
                    self.unreachable_at[self.target] = Some(Instant::now());
                    self.next_replica();
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
    }

    /// The status report of replica `id`.
    pub fn status(&mut self, id: u16) -> Result<ReplicaReport, String> {
        let pos = self
            .replicas
            .iter()
            .position(|r| r.0 == id)
            .ok_or_else(|| format!("no replica {id}"))?;
        self.switch(pos);
        let mut message = Vec::new();
        ClientMessage::Status.encode(&mut message);
        // By the socket: the fabric path carries requests only.
        match self.exchange_socket(&message, Instant::now() + READ_TIMEOUT, false) {
            Ok(ServerMessage::Status(json)) => ReplicaReport::from_json(&json),
            // A replica of another cluster, or of another wire version, refuses the hello.
            Ok(ServerMessage::Refused(why)) => Err(format!("replica {id} refused: {why}")),
            Ok(other) => Err(format!("replica {id} answered {other:?} to a status request")),
            // The read timed out: the process may run (stopped, or stuck) without answering.
            Err(FrameError::Io(e))
                if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) =>
            {
                Err(format!("replica {id}: no answer within {} ms", READ_TIMEOUT.as_millis()))
            }
            Err(e) => Err(format!("replica {id}: {e}")),
        }
    }

    fn switch(&mut self, pos: usize) {
        if pos != self.target {
            self.target = pos;
            self.conn = None;
        }
    }

    /// Whether the client failed to reach the replica at `pos` within [`UNREACHABLE_FOR`].
    fn unreachable_lately(&self, pos: usize) -> bool {
        self.unreachable_at[pos].is_some_and(|at| at.elapsed() < UNREACHABLE_FOR)
    }

    fn next_replica(&mut self) {
        self.conn = None;
        self.target = (self.target + 1) % self.replicas.len();
    }

    /// Sends one message to the target replica and reads its answer. A new connection opens
    /// with a hello; a replica that refuses it (another cluster, another version) gives its
    /// refusal as the answer. Connecting and each read wait no longer than until `deadline`
    /// (and at least a millisecond), so that a short timeout is kept. A request whose answer
    /// is slow makes the client ask the other replicas ([`Client::await_answer`]): the answer
    /// may then be one of theirs, or a "not leader" naming the leader they agree on.
    fn exchange(&mut self, message: &[u8], deadline: Instant) -> Result<ServerMessage, FrameError> {
        if self.over_fabric {
            if let Some(result) = self.exchange_fabric(message, deadline) {
                return result;
            }
        }
        self.exchange_socket(message, deadline, true)
    }

    /// [`Client::exchange`] over the socket; `request`: whether `message` is a request (the
    /// others are asked about a slow answer to a request only).
    fn exchange_socket(
        &mut self,
        message: &[u8],
        deadline: Instant,
        request: bool,
    ) -> Result<ServerMessage, FrameError> {
        let reused = self.conn.is_some();
        match self.exchange_once(message, deadline, request) {
            // A replica closes a connection idle for long (its limits): a connection kept from
            // an earlier call may be gone. Send again on a new one to the same replica, rather
            // than taking it for failed (the same sequence number: applied once).
            Err(e) if reused && closed_by_peer(&e) => {
                self.resends += 1;
                self.exchange_once(message, deadline, request)
            }
            result => result,
        }
    }

    /// [`Client::exchange`] over the target's request rings, joining them first if needed;
    /// `None` where the message goes by the socket instead (too large, or the replica serves
    /// no fabric clients). Joining waits as a status request does (up to [`READ_TIMEOUT`]);
    /// the request's answer as one over the socket does, asking the others when it is slow.
    fn exchange_fabric(
        &mut self,
        message: &[u8],
        deadline: Instant,
    ) -> Option<Result<ServerMessage, FrameError>> {
        let target = self.replicas[self.target].0;
        if self.link.as_ref().is_some_and(|l| l.replica != target) {
            self.link = None;
        }
        if self.link.is_none() {
            match self.join_fabric(target, deadline) {
                Ok(link) => self.link = Some(link),
                Err(None) => return None,
                Err(Some(e)) => return Some(Err(e)),
            }
        }
        if !self.link.as_ref()?.fits(message) {
            return None;
        }
        let result = self.fabric_answer(message, deadline.min(Instant::now() + READ_TIMEOUT));
        match result {
            // Taken, but its answer is too large for the rings: the same request over the
            // socket gets the answer kept for it.
            Ok(ServerMessage::BySocket) => {
                return Some(self.exchange_socket(message, deadline, true))
            }
            Err(_) => self.link = None,
            Ok(_) => {}
        }
        Some(result)
    }

    /// Sends `message` on the joined rings and waits for its answer until `give_up`, asking
    /// the other replicas after each attempt wait as [`Client::await_answer`] does.
    fn fabric_answer(
        &mut self,
        message: &[u8],
        give_up: Instant,
    ) -> Result<ServerMessage, FrameError> {
        let sent = Instant::now();
        let seq = self.link.as_mut().expect("joined by the caller").send(message)?;
        let wait = self.round_trips.attempt_wait();
        let mut gap = wait;
        let mut next_ask = sent + wait;
        loop {
            let link = self.link.as_mut().expect("joined by the caller");
            if let Some(answer) = link.wait(seq, next_ask.min(give_up))? {
                // Sampled as over the socket ([`Client::send_and_read`]).
                if answer.is_answer() {
                    self.round_trips.record(sent.elapsed());
                }
                return Ok(answer);
            }
            let now = Instant::now();
            if now >= give_up {
                return Err(no_answer_within(give_up - sent));
            }
            if let Some(found) = self.ask_around(message, ask_wait(wait).min(give_up - now)) {
                self.link = None;
                return Ok(found);
            }
            gap = next_ask_gap(gap, wait);
            next_ask = Instant::now() + gap;
        }
    }

    /// Joins `target`'s request rings through the socket. `Err(None)`: it serves no fabric
    /// clients (the client stops asking); `Err(Some(_))`: it could not now.
    fn join_fabric(
        &mut self,
        target: u16,
        deadline: Instant,
    ) -> Result<FabricLink, Option<FrameError>> {
        let failed = |why: String| Some(FrameError::Malformed(why));
        let mut message = Vec::new();
        ClientMessage::FabricReserve.encode(&mut message);
        let (node, layout, dir) = match self
            .exchange_once(&message, deadline, false)
            .map_err(Some)?
        {
            ServerMessage::FabricNode { node, layout, dir } => (node, layout, dir),
            ServerMessage::Refused(why) => {
                tracing::debug!(replica = target, why, "no fabric path: using the socket");
                self.over_fabric = false;
                return Err(None);
            }
            other => return Err(failed(format!("replica {target} answered {other:?} to a join"))),
        };
        let fabric = FabricLink::start_node(self.cluster_id, &dir, node).map_err(failed)?;
        // Registered before joining: the replica binds to this node when it admits it.
        let prepared = FabricLink::prepare(fabric, &layout).map_err(failed)?;
        ClientMessage::FabricJoin { node }.encode(&mut message);
        match self.exchange_once(&message, deadline, false).map_err(Some)? {
            ServerMessage::FabricGrant(grant) => {
                FabricLink::open(target, prepared, &grant).map_err(failed)
            }
            other => Err(failed(format!("replica {target} did not admit node {node}: {other:?}"))),
        }
    }

    /// Sends `message` on the target's connection (opening it, with a hello, if there is
    /// none) and reads the answer: waits at most [`READ_TIMEOUT`], and no longer than until
    /// `deadline`. With `request`, a slow answer (or hello) makes the client ask the others
    /// ([`Client::await_answer`]).
    fn exchange_once(
        &mut self,
        message: &[u8],
        deadline: Instant,
        request: bool,
    ) -> Result<ServerMessage, FrameError> {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let give_up = Instant::now() + READ_TIMEOUT.min(left);
        let watch = request.then_some(message);
        if self.conn.is_none() {
            let connect_timeout = CONNECT_TIMEOUT.min(left);
            let stream = Stream::connect(&self.replicas[self.target].1, connect_timeout)?;
            let node = self.replicas[self.target].0;
            self.watched = self.crash_notices.as_ref().and_then(|n| n.watch(node, &stream));
            let reader = BufReader::new(stream.try_clone()?);
            self.conn = Some((reader, BufWriter::new(stream)));
            self.conn_read_timeout = None;
            let mut hello = Vec::new();
            ClientMessage::Hello { cluster_id: self.cluster_id, wire_version: WIRE_VERSION }
                .encode(&mut hello);
            let answer = self.send_and_read(&hello, give_up, watch).map_err(|e| match e {
                // The first bytes back did not frame a message of ours: whatever listens there
                // is no mu replica (an HTTP server's "HTTP" reads as a length of 1.3 GB).
                FrameError::TooLarge(_) => FrameError::Malformed(format!(
                    "what answers at {} is not a mu replica: its reply to the hello does not \
                     frame a message",
                    self.replicas[self.target].1
                )),
                e => e,
            })?;
            match answer {
                ServerMessage::Welcome => {}
                // A refusal, or what asking the others found.
                other => {
                    self.conn = None;
                    return Ok(other);
                }
            }
        }
        self.send_and_read(message, give_up, watch)
    }

    /// Sends `message` on the open connection and reads its answer, waiting until `give_up`
    /// at most ([`Client::await_answer`], which asks the others with `watch`). Any error
    /// closes the connection.
    fn send_and_read(
        &mut self,
        message: &[u8],
        give_up: Instant,
        watch: Option<&[u8]>,
    ) -> Result<ServerMessage, FrameError> {
        let sent = Instant::now();
        let (_, writer) = self.conn.as_mut().expect("connected by the caller");
        let result = match write_frame(writer, message) {
            Err(e) => Err(e.into()),
            Ok(()) => match self.await_answer(give_up, watch) {
                Ok(Some(found)) => {
                    self.conn = None;
                    return Ok(found);
                }
                Ok(None) => self.read_answer(give_up),
                Err(e) => Err(e),
            },
        };
        match &result {
            // Sampled even where the client asked the others meanwhile: a leader that is slow
            // but answers (a distant one) must raise the wait, or every request would ask.
            Ok(answer) if answer.is_answer() => self.round_trips.record(sent.elapsed()),
            Ok(_) => {}
            Err(_) => self.conn = None,
        }
        result
    }

    /// Waits until the answer to what was just sent on the connection begins to arrive, or
    /// `give_up`. With `watch` (a request, sent on the connection or to be sent after the
    /// hello being answered), each time the attempt wait passes without an answer the other
    /// replicas are sent the same request ([`Client::ask_others`]), with the same client id
    /// and sequence number, so applied once; asking again after gaps that grow
    /// ([`ASK_GAP_MAX`]). `Some`: what asking found (the target's connection is to be
    /// closed); `None`: the target's answer is there to read.
    fn await_answer(
        &mut self,
        give_up: Instant,
        watch: Option<&[u8]>,
    ) -> Result<Option<ServerMessage>, FrameError> {
        let started = Instant::now();
        let wait = self.round_trips.attempt_wait();
        let mut gap = wait;
        let mut next_ask = started + wait;
        loop {
            let until = if watch.is_some() { next_ask.min(give_up) } else { give_up };
            self.set_read_timeout(until.saturating_duration_since(Instant::now()).min(wait))?;
            let (reader, _) = self.conn.as_mut().expect("connected by the caller");
            match reader.fill_buf() {
                Ok([]) => return Err(closed_by_replica()),
                Ok(_) => return Ok(None),
                Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
            let now = Instant::now();
            if now >= give_up {
                return Err(no_answer_within(give_up - started));
            }
            let Some(request) = watch.filter(|_| now >= next_ask) else { continue };
            if let Some(found) = self.ask_around(request, ask_wait(wait).min(give_up - now)) {
                return Ok(Some(found));
            }
            gap = next_ask_gap(gap, wait);
            next_ask = Instant::now() + gap;
        }
    }

    /// The rest of an answer that has begun to arrive on the connection, read until
    /// `give_up` at most.
    fn read_answer(&mut self, give_up: Instant) -> Result<ServerMessage, FrameError> {
        let (reader, _) = self.conn.as_mut().expect("connected by the caller");
        match read_frame(&mut Patient { inner: reader, give_up }, &mut self.body)? {
            true => ServerMessage::decode(&self.body),
            false => Err(closed_by_replica()),
        }
    }

    /// Sets the connection's read timeout to `wait`, rounded up to a whole millisecond (at
    /// least one), where it differs: near a deadline or an asking only, not on every request.
    fn set_read_timeout(&mut self, wait: Duration) -> Result<(), FrameError> {
        let millis = u64::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
        let wait = Duration::from_millis(millis.max(1));
        if self.conn_read_timeout != Some(wait) {
            let (reader, _) = self.conn.as_ref().expect("connected by the caller");
            reader.get_ref().set_read_timeout(Some(wait))?;
            self.conn_read_timeout = Some(wait);
        }
        Ok(())
    }

    /// Asks the other replicas with `request` ([`Client::ask_others`], within `wait`)
    /// and follows what they say: a replica that answered becomes the target, and its answer
    /// is returned; a leader the others agree on is returned as a "not leader" naming it (the
    /// caller's redirect moves there and sends the request again). `None`: nothing to follow.
    fn ask_around(&mut self, request: &[u8], wait: Duration) -> Option<ServerMessage> {
        match self.ask_others(request, wait) {
            Asked::Answered(pos, answer) => {
                self.switch(pos);
                Some(answer)
            }
            Asked::Leader(id) => {
                self.conn = None;
                Some(ServerMessage::NotLeader { leader: Some(id) })
            }
            Asked::Nothing => None,
        }
    }

    /// Sends `request` (the one the target has not answered: the same client id and sequence
    /// number, so applied once wherever it lands) to every other replica at once, each on a
    /// connection of its own on a thread of its own, and waits at most `wait` for them. A
    /// replica that does not lead answers at once with the leader it knows; one that leads
    /// (a new leader, agreed while the target was silent) commits the request and answers it.
    /// The first answer to the request ends the wait, and so does the attempt wait passing
    /// after the first reply; otherwise the wait ends when all have replied, or at `wait`.
    /// Then the leader named most often (other than the target) is the one to move to.
    /// Threads still waiting when this returns end by their own deadline.
    fn ask_others(&mut self, request: &[u8], wait: Duration) -> Asked {
        let deadline = Instant::now() + wait;
        let (tx, rx) = mpsc::channel();
        let mut asked = 0;
        for (pos, (_, endpoint)) in self.replicas.iter().enumerate() {
            if pos == self.target {
                continue;
            }
            let (tx, endpoint, request) = (tx.clone(), endpoint.clone(), request.to_vec());
            let cluster_id = self.cluster_id;
            let spawned =
                std::thread::Builder::new().name("mu-client-ask".into()).spawn(move || {
                    let _ = tx.send((pos, ask(&endpoint, cluster_id, &request, deadline)));
                });
            asked += usize::from(spawned.is_ok());
        }
        self.asked += 1;
        let target = self.target();
        let straggler_wait = self.round_trips.attempt_wait();
        let mut named: Vec<(u16, usize)> = Vec::new();
        let mut until = deadline;
        for _ in 0..asked {
            let left = until.saturating_duration_since(Instant::now());
            let Ok((pos, answer)) = rx.recv_timeout(left) else { break };
            // Live replicas answer about as fast as each other: one that has not answered an
            // attempt wait after the first is taken for silent too (a stopped leader, asked
            // again from its successor), rather than waited for until the deadline.
            until = until.min(Instant::now() + straggler_wait);
            match answer {
                Some(answer) if answer.is_answer() => return Asked::Answered(pos, answer),
                Some(ServerMessage::NotLeader { leader: Some(id) })
                    if id != target && self.replicas.iter().any(|r| r.0 == id) =>
                {
                    vote(&mut named, id);
                }
                // Only a replica that leads, or that was elected and is taking the leadership
                // up, takes the request and asks for it again: it names itself. Followed at
                // once, the client waits there for the new leader's first commit rather than
                // on the old leader's silence.
                Some(ServerMessage::Retry(_)) => vote(&mut named, self.replicas[pos].0),
                _ => {}
            }
        }
        match named.iter().max_by_key(|(_, count)| *count) {
            Some(&(id, _)) => Asked::Leader(id),
            None => Asked::Nothing,
        }
    }
}

/// Counts one more replica naming `id` as its leader.
fn vote(named: &mut Vec<(u16, usize)>, id: u16) {
    match named.iter_mut().find(|(n, _)| *n == id) {
        Some((_, count)) => *count += 1,
        None => named.push((id, 1)),
    }
}

/// The error of an answer that did not come within `waited`.
fn no_answer_within(waited: Duration) -> FrameError {
    FrameError::Io(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no answer within {} ms", waited.as_millis()),
    ))
}

fn closed_by_replica() -> FrameError {
    FrameError::Io(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the replica closed the connection",
    ))
}

/// The pause before the `n`th of redirects that follow each other (from 1):
/// [`REDIRECT_PAUSE`], doubling up to [`REDIRECT_PAUSE_MAX`].
fn redirect_pause(n: u32) -> Duration {
    REDIRECT_PAUSE.saturating_mul(1 << (n.max(1) - 1).min(16)).min(REDIRECT_PAUSE_MAX)
}

/// Whether `e` says the peer closed the connection (not that it is slow to answer).
fn closed_by_peer(e: &FrameError) -> bool {
    matches!(
        e,
        FrameError::Io(e) if matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
        )
    )
}

/// A key-value reply to an order, or events to a key-value request: never sent by a replica
/// of this wire version (the server refuses the other application's requests).
fn wrong_application(answer: &ServerMessage) -> ClientError {
    ClientError::Refused(format!("an answer for another application: {answer:?}"))
}

fn unexpected(reply: Reply) -> ClientError {
    match reply {
        Reply::Malformed(why) => ClientError::Refused(format!("malformed: {why}")),
        Reply::Stale { applied_seq } => ClientError::Refused(format!(
            "stale: this client's request {applied_seq} was applied after this one"
        )),
        other => ClientError::Refused(format!("unexpected reply {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attempt_wait_is_a_few_recent_round_trips_within_its_floor_and_cap() {
        let mut round_trips = RoundTrips::default();
        assert_eq!(round_trips.attempt_wait(), ATTEMPT_WAIT_MIN, "nothing seen yet");
        for _ in 0..ROUND_TRIPS_KEPT {
            round_trips.record(Duration::from_micros(50));
        }
        assert_eq!(round_trips.attempt_wait(), ATTEMPT_WAIT_MIN, "fast answers: the floor");
        // A distant leader: 4 round trips of 10 ms.
        for _ in 0..ROUND_TRIPS_KEPT {
            round_trips.record(Duration::from_millis(10));
        }
        assert_eq!(round_trips.attempt_wait(), Duration::from_millis(40));
        // Three slow answers in sixteen (a pause waited through) leave the wait as it was.
        for _ in 0..3 {
            round_trips.record(Duration::from_millis(400));
        }
        assert_eq!(round_trips.attempt_wait(), Duration::from_millis(40));
        for _ in 0..ROUND_TRIPS_KEPT {
            round_trips.record(Duration::from_secs(1));
        }
        assert_eq!(round_trips.attempt_wait(), READ_TIMEOUT, "the cap");
    }

    #[test]
    fn askings_and_redirects_back_off_to_their_bounds() {
        let wait = ATTEMPT_WAIT_MIN;
        let gaps: Vec<Duration> =
            std::iter::successors(Some(wait), |&g| Some(next_ask_gap(g, wait))).take(7).collect();
        let ms = Duration::from_millis;
        assert_eq!(gaps, [ms(1), ms(2), ms(4), ms(8), ms(16), ms(20), ms(20)]);
        // A slow cluster's attempt wait is above the gap's bound: the gap is the wait.
        assert_eq!(next_ask_gap(ms(100), ms(100)), ms(100));
        let pauses: Vec<u128> = (1..=8).map(|n| redirect_pause(n).as_micros()).collect();
        assert_eq!(pauses, [200, 400, 800, 1_600, 3_200, 6_400, 6_400, 6_400]);
        assert_eq!(redirect_pause(u32::MAX), REDIRECT_PAUSE_MAX);
    }
}
