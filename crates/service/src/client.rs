//! The client library: key-value operations against a cluster, following the leader.
//!
//! A [`Client`] knows every replica's endpoint (its Unix socket, or a TCP address). It sends each request to the replica it believes
//! leads; a "not leader" answer names the leader to try next (or, with none known, it tries the
//! replicas in turn), a connection that fails moves it to the next replica, and an answer that
//! leaves the outcome unknown makes it send the request again — always with the same client id
//! and sequence number, so the state machine applies it once, however many times it arrives.

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
use std::io::{self, BufReader, BufWriter};
use std::time::{Duration, Instant};

/// How long a client waits for a TCP connection to a replica to open before it tries the next.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How long one answer may take before the replica is given up on (the request may be tried
/// on the next one).
const READ_TIMEOUT: Duration = Duration::from_millis(500);

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
    /// The read timeout `conn`'s socket has: `READ_TIMEOUT`, or less near a call's deadline.
    conn_read_timeout: Duration,
    id: u64,
    seq: u64,
    timeout: Duration,
    body: Vec<u8>,
    /// How many times operations were sent again (redirects, retries, reconnections).
    pub resends: u64,
    /// Whether requests go over the fabric where a replica serves it ([`Client::over_fabric`]).
    over_fabric: bool,
    /// The request rings on the target replica, once joined.
    link: Option<FabricLink>,
    /// [`Client::call_many`]'s sessions, one per lane: client id and last sequence number.
    lanes: Vec<(u64, u64)>,
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
        Ok(Client {
            cluster_id,
            replicas: replicas.into_iter().map(|(id, e)| (id, e.into())).collect(),
            target: 0,
            conn: None,
            conn_read_timeout: READ_TIMEOUT,
            id: fresh_client_id(),
            seq: 0,
            timeout: Duration::from_secs(5),
            body: Vec::new(),
            resends: 0,
            over_fabric: false,
            link: None,
            lanes: Vec::new(),
        })
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
    /// was none (not over the fabric, not joined, not in time, not fitting a slot).
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
        match link.exchange_many(messages, Instant::now() + READ_TIMEOUT) {
            Ok(answers) => answers,
            Err(_) => {
                self.link = None;
                none()
            }
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
                    match leader.and_then(|l| self.replicas.iter().position(|r| r.0 == l)) {
                        Some(pos) if pos != self.target => {
                            // The first redirect goes at once (a leader change); two replicas
                            // naming each other for a while (each elected by its own
                            // detector) are not asked again in a tight loop.
                            redirects += 1;
                            if redirects > 1 {
                                std::thread::sleep(Duration::from_micros(200));
                            }
                            self.switch(pos)
                        }
                        // It names itself, or nobody: an election is going on.
                        _ => {
                            self.next_replica();
                            std::thread::sleep(Duration::from_micros(200));
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
        match self.exchange_socket(&message, Instant::now() + READ_TIMEOUT) {
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

    fn next_replica(&mut self) {
        self.conn = None;
        self.target = (self.target + 1) % self.replicas.len();
    }

    /// Sends one message to the target replica and reads its answer. A new connection opens
    /// with a hello; a replica that refuses it (another cluster, another version) gives its
    /// refusal as the answer. Connecting and each read wait no longer than until `deadline`
    /// (and at least a millisecond), so that a short timeout is kept.
    fn exchange(&mut self, message: &[u8], deadline: Instant) -> Result<ServerMessage, FrameError> {
        if self.over_fabric {
            if let Some(result) = self.exchange_fabric(message, deadline) {
                return result;
            }
        }
        self.exchange_socket(message, deadline)
    }

    /// [`Client::exchange`] over the socket.
    fn exchange_socket(
        &mut self,
        message: &[u8],
        deadline: Instant,
    ) -> Result<ServerMessage, FrameError> {
        let reused = self.conn.is_some();
        match self.exchange_once(message, deadline) {
            // A replica closes a connection idle for long (its limits): a connection kept from
            // an earlier call may be gone. Send again on a new one to the same replica, rather
            // than taking it for failed (the same sequence number: applied once).
            Err(e) if reused && closed_by_peer(&e) => {
                self.resends += 1;
                self.exchange_once(message, deadline)
            }
            result => result,
        }
    }

    /// [`Client::exchange`] over the target's request rings, joining them first if needed;
    /// `None` where the message goes by the socket instead (too large, or the replica serves
    /// no fabric clients).
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
        let link = self.link.as_mut()?;
        if !link.fits(message) {
            return None;
        }
        let result = link.exchange(message, deadline.min(Instant::now() + READ_TIMEOUT));
        match result {
            // Taken, but its answer is too large for the rings: the same request over the
            // socket gets the answer kept for it.
            Ok(ServerMessage::BySocket) => return Some(self.exchange_socket(message, deadline)),
            Err(_) => self.link = None,
            Ok(_) => {}
        }
        Some(result)
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
        let (node, layout, dir) = match self.exchange_once(&message, deadline).map_err(Some)? {
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
        match self.exchange_once(&message, deadline).map_err(Some)? {
            ServerMessage::FabricGrant(grant) => {
                FabricLink::open(target, prepared, &grant).map_err(failed)
            }
            other => Err(failed(format!("replica {target} did not admit node {node}: {other:?}"))),
        }
    }

    fn exchange_once(
        &mut self,
        message: &[u8],
        deadline: Instant,
    ) -> Result<ServerMessage, FrameError> {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let read_timeout = READ_TIMEOUT.min(left);
        if self.conn.is_none() {
            let connect_timeout = CONNECT_TIMEOUT.min(left);
            let stream = Stream::connect(&self.replicas[self.target].1, connect_timeout)?;
            // A replica that stops answering (stopped, or its leader stuck) must not hold the
            // client for ever: give up on it and try the next.
            stream.set_read_timeout(Some(read_timeout))?;
            self.conn_read_timeout = read_timeout;
            let reader = BufReader::new(stream.try_clone()?);
            self.conn = Some((reader, BufWriter::new(stream)));
            let mut hello = Vec::new();
            ClientMessage::Hello { cluster_id: self.cluster_id, wire_version: WIRE_VERSION }
                .encode(&mut hello);
            let answer = self.send_and_read(&hello).map_err(|e| match e {
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
                other => {
                    self.conn = None;
                    return Ok(other);
                }
            }
        }
        if read_timeout != self.conn_read_timeout {
            // Changed only near a deadline (and back after), not on every call.
            let (reader, _) = self.conn.as_ref().expect("connected above");
            reader.get_ref().set_read_timeout(Some(read_timeout))?;
            self.conn_read_timeout = read_timeout;
        }
        self.send_and_read(message)
    }

    fn send_and_read(&mut self, message: &[u8]) -> Result<ServerMessage, FrameError> {
        let (reader, writer) = self.conn.as_mut().expect("connected by the caller");
        let result =
            write_frame(writer, message).map_err(FrameError::from).and_then(|()| match read_frame(
                reader,
                &mut self.body,
            )? {
                true => ServerMessage::decode(&self.body),
                false => Err(FrameError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the replica closed the connection",
                ))),
            });
        if result.is_err() {
            self.conn = None;
        }
        result
    }
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
