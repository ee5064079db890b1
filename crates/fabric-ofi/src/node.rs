//! A node: its domain, its regions, its channels (one endpoint each) and the sides of its
//! connections, with the control plane of the fabric API.

use crate::config::{
    NodeAddr, OfiConfig, ProviderWays, CHANNELS, LIVENESS_PORT_OFFSET, MAX_REGION_ID,
};
use crate::endpoint::OfiEndpoint;
use crate::ffi::{Domain, MemoryRegistration, PostFailure, RawCompletion, RawEndpoint};
use crate::keys::{
    data_key, hello_offset, Identity, Kind, HELLO_BYTES, HELLO_KEY, IDENTITY_BYTES, IDENTITY_KEY,
    MAX_REGIONS,
};
use crate::liveness::Liveness;
use crate::region::{Memory, OfiRegion};
use mu_fabric::{
    Access, ConnId, Fabric, FabricError, NodeId, PermError, QpState, RegionId, Status,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{SocketAddrV4, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How many connect timeouts a binding read stays out before it is given up and posted anew;
/// also how many times longer than a failed binding held its caller the next one to the same
/// peer waits before trying the network again. Either way a peer that does not answer holds
/// up the callers (the background plane's heartbeat among them) for about a tenth of the time.
const BIND_PATIENCE: u32 = 10;

/// The last binding of a (channel, peer) that did not succeed.
enum BindAttempt {
    /// Its read is still out: later calls look at it briefly instead of posting another.
    UnderWay { number: u64, posted: Instant },
    /// It failed after holding its caller for `held`: later calls fail at once until
    /// `BIND_PATIENCE` times that has passed.
    Failed { at: Instant, held: Duration, why: String },
    /// Calls kept short (`OfiConfig::call_wait_us`) have found the provider refusing its read
    /// since `since` (it is opening a connection): later calls post again, until the connect
    /// timeout has passed since then.
    Posting { since: Instant },
}

/// Held while posting control operations to one peer on one channel (`post_control`).
type Turn = Arc<Mutex<()>>;

/// Completion-queue entries per channel endpoint.
const CHANNEL_CQ_DEPTH: usize = 4096;

/// The context of an operation: the token of whoever posted it (0: the control plane, else an
/// endpoint) and a number of the poster's own.
pub(crate) const TOKEN_SHIFT: u32 = 48;
pub(crate) const CONTROL_TOKEN: u16 = 0;

pub(crate) fn context(token: u16, number: u64) -> u64 {
    (token as u64) << TOKEN_SHIFT | (number & ((1 << TOKEN_SHIFT) - 1))
}

/// One channel: the endpoint listening on `base_port + channel`, through which every connection
/// of that channel goes (to each peer's endpoint of the same channel), and the mailboxes its
/// completions are sorted into.
pub(crate) struct Channel {
    pub(crate) ep: RawEndpoint,
    number: u8,
    mail: Mutex<Mail>,
    /// Peer address-table entries, by node.
    addresses: Mutex<HashMap<NodeId, u64>>,
}

#[derive(Default)]
struct Mail {
    /// Completions of each live endpoint, by token.
    boxes: HashMap<u16, VecDeque<RawCompletion>>,
    /// Buffers of control reads under way, by number: kept until the provider is done.
    pending: HashMap<u64, Box<[u8]>>,
    /// Control-plane completions by number, with their buffers.
    control: HashMap<u64, (RawCompletion, Box<[u8]>)>,
    /// Control reads nobody will collect: dropped when they complete.
    abandoned: std::collections::HashSet<u64>,
}

impl Channel {
    /// The peer's endpoint of this channel in the channel's address table.
    pub(crate) fn address(&self, node: &Node, peer: NodeId) -> Result<u64, FabricError> {
        let mut addresses = self.addresses.lock().expect("addresses");
        if let Some(&a) = addresses.get(&peer) {
            return Ok(a);
        }
        let addr = node.addr(peer)?;
        let a = self
            .ep
            .insert_address(&addr.host, addr.base_port + self.number as u16)
            .map_err(|e| unreachable(peer, e))?;
        addresses.insert(peer, a);
        Ok(a)
    }

    /// Reads what the completion queue holds (driving the provider's progress) and sorts it.
    fn pump(&self, mail: &mut Mail) {
        let mut raw = [RawCompletion::default(); 16];
        loop {
            let n = match self.ep.read_completions(&mut raw) {
                Ok(n) => n,
                Err(_) => return,
            };
            for c in &raw[..n] {
                let token = (c.context >> TOKEN_SHIFT) as u16;
                if token == CONTROL_TOKEN {
                    let number = c.context & ((1 << TOKEN_SHIFT) - 1);
                    let buf = mail.pending.remove(&number);
                    if !mail.abandoned.remove(&number) {
                        if let Some(buf) = buf {
                            mail.control.insert(number, (*c, buf));
                        }
                    }
                } else if let Some(q) = mail.boxes.get_mut(&token) {
                    q.push_back(*c);
                }
            }
            if n < raw.len() {
                return;
            }
        }
    }

    /// Drives progress and moves `token`'s completions into `out`.
    pub(crate) fn take(&self, token: u16, out: &mut VecDeque<RawCompletion>) {
        let mut mail = self.mail.lock().expect("channel mail");
        self.pump(&mut mail);
        if let Some(q) = mail.boxes.get_mut(&token) {
            out.extend(q.drain(..));
        }
    }

    /// Drives progress (the progress thread's call).
    fn progress(&self) {
        let mut mail = self.mail.lock().expect("channel mail");
        self.pump(&mut mail);
    }

    pub(crate) fn open_box(&self, token: u16) {
        self.mail.lock().expect("channel mail").boxes.entry(token).or_default();
    }

    pub(crate) fn close_box(&self, token: u16) {
        self.mail.lock().expect("channel mail").boxes.remove(&token);
    }
}

/// What binding a connection learned about the peer (moving to ready-to-receive).
#[derive(Clone, Debug)]
pub(crate) struct Binding {
    pub(crate) peer_incarnation: u32,
    pub(crate) peer_regions: HashMap<RegionId, usize>,
}

/// One side of a connection: what the fabric API says about it, and the registrations that let
/// the peer in.
pub(crate) struct Side {
    pub(crate) conn: ConnId,
    pub(crate) st: Mutex<SideState>,
}

impl Side {
    /// A side never connected: reset, no access, no binding.
    fn new(conn: ConnId) -> Side {
        Side {
            conn,
            st: Mutex::new(SideState {
                state: QpState::Reset,
                access: Access::NONE,
                binding: None,
                epoch: 0,
                attached: false,
                unfenced: false,
                fence: None,
                fence_refused_since: None,
                cut: Vec::new(),
                registrations: Vec::new(),
            }),
        }
    }
}

pub(crate) struct SideState {
    pub(crate) state: QpState,
    pub(crate) access: Access,
    pub(crate) binding: Option<Binding>,
    /// Bumped whenever the side leaves ready-to-send, so that an error completing late for an
    /// operation posted before does not break the side as it is now.
    pub(crate) epoch: u64,
    pub(crate) attached: bool,
    /// A right was taken away and no fence has completed since: until one does, bytes the
    /// peer sent before may still land.
    unfenced: bool,
    /// The fence read under way for the latest right taken away, if any, and when it was
    /// posted: a revocation that gave up waiting leaves it running, and the next one waits for
    /// the same read, so that a peer that answers late (or whose connection breaks) ends the
    /// wait without a new post.
    fence: Option<(u64, Instant)>,
    /// Since when the provider has refused to take a fence read (`tcp;ofi_rxm` while it
    /// cannot open a connection): the calls that try to post one share one budget (`fence`).
    fence_refused_since: Option<Instant>,
    /// The streams with the peer that this side shut down (by socket inode) because the fence
    /// for the right taken away went unanswered for its whole budget: the revocation holds once
    /// the provider has closed every one of them (`fence`).
    cut: Vec<u64>,
    registrations: Vec<(u64, MemoryRegistration)>,
}

struct RegionEntry {
    region: OfiRegion,
    access: Access,
}

#[derive(Default)]
struct Control {
    regions: BTreeMap<RegionId, RegionEntry>,
    sides: HashMap<ConnId, Arc<Side>>,
}

pub(crate) struct Node {
    pub(crate) id: NodeId,
    pub(crate) incarnation: u32,
    pub(crate) ways: ProviderWays,
    config: OfiConfig,
    pub(crate) inject_bytes: usize,
    control: Mutex<Control>,
    channels: Mutex<Vec<Option<Arc<Channel>>>>,
    next_token: AtomicU16,
    next_control: AtomicU64,
    /// Binding reads that outlived the call that posted them, by (channel, peer), with when
    /// they were posted: a peer that did not answer in time (cut off, or gone with its
    /// connection still open) is not waited for again by every later call.
    binds_under_way: Mutex<HashMap<(u8, NodeId), BindAttempt>>,
    identity_bytes: Arc<Memory>,
    /// Where lower peers say hello (`hello`): one word per (channel, peer), written by them.
    hello_board: Arc<Memory>,
    /// The hello word each (channel, lower peer) had when this node last bound to it: a
    /// binding needs a newer one.
    hellos_taken: Mutex<HashMap<(u8, NodeId), u64>>,
    /// Every node's IPv4 address as `listening` resolved it.
    listening_ips: Mutex<HashMap<NodeId, std::net::Ipv4Addr>>,
    /// This node in the process's count of nodes that may open streams to each peer
    /// (`enforce_opener`).
    opener: crate::streams::Opener,
    /// One turn per (channel, peer) for control posts (`post_control`).
    posting: Mutex<HashMap<(u8, NodeId), Turn>>,
    /// Numbers this node's hellos, so that each differs from the one before.
    hello_count: AtomicU32,
    liveness: Liveness,
    stop: Arc<AtomicBool>,
    progress: Mutex<Option<JoinHandle<()>>>,
    identity_registration: Mutex<Option<MemoryRegistration>>,
    hello_registration: Mutex<Option<MemoryRegistration>>,
    // Dropped last: everything above belongs to it.
    domain: Domain,
}

/// A node of the libfabric fabric. Cheap to clone; every clone is the same node.
#[derive(Clone)]
pub struct OfiFabric {
    pub(crate) node: Arc<Node>,
}

fn unreachable(peer: NodeId, why: impl Into<String>) -> FabricError {
    FabricError::PeerUnreachable(peer, why.into())
}

fn in_progress(peer: NodeId, why: impl Into<String>) -> FabricError {
    FabricError::InProgress(peer, why.into())
}

/// Why a fence did not complete.
enum FenceWait {
    /// Its time is not spent: the call's own wait ran out (`OfiConfig::call_wait_us`).
    UnderWay(String),
    /// Its time is spent (or the call was not kept short): no barrier can be claimed.
    Failed(String),
}

impl FenceWait {
    fn into_error(self, peer: NodeId) -> FabricError {
        match self {
            FenceWait::UnderWay(why) => in_progress(peer, format!("fence: {why}")),
            FenceWait::Failed(why) => FabricError::FenceFailed { node: peer, why },
        }
    }
}

/// Why a binding failed whose read the provider kept refusing with "again".
const REFUSED_AGAIN: &str = "the provider did not take the read in time (it could not open a \
                             connection, or its queue stayed full)";

/// A binding's read that the provider would not take.
fn post_refused(peer: NodeId, why: Option<String>) -> FabricError {
    unreachable(peer, why.unwrap_or_else(|| REFUSED_AGAIN.into()))
}

/// How the process's count of openers names a peer's host: its IPv4 address where the name
/// resolves to one, as `Node::listening` finds it (so that two spellings of one address count
/// as one), the name as given otherwise.
fn opener_key(host: &str) -> String {
    match first_ipv4(host, 0) {
        Ok(addr) => addr.ip().to_string(),
        Err(_) => host.to_string(),
    }
}

/// The first IPv4 address `host` resolves to, with `port`.
fn first_ipv4(host: &str, port: u16) -> Result<SocketAddrV4, String> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}:{port}: {e}"))?
        .find_map(|a| match a {
            std::net::SocketAddr::V4(a) => Some(a),
            std::net::SocketAddr::V6(_) => None,
        })
        .ok_or_else(|| format!("{host}:{port}: no IPv4 address"))
}

fn new_incarnation() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mixed = nanos ^ (std::process::id() as u64).rotate_left(32);
    // A multiplicative hash spreads the bits; 0 is avoided so that a zeroed identity never
    // names a live incarnation.
    ((mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32).max(1)
}

impl OfiFabric {
    /// Opens the node `config.node`: its provider's domain, its identity (readable by every
    /// peer) and its liveness port. Channels open when a connection first needs them.
    pub fn open(config: OfiConfig) -> Result<OfiFabric, FabricError> {
        config.validate()?;
        let me = config.nodes[&config.node].clone();
        let domain = Domain::open(&config.provider, &me.host, me.base_port).map_err(|e| {
            FabricError::Config(format!(
                "libfabric provider {:?} on {}: {e}",
                config.provider, me.host
            ))
        })?;
        let inject_bytes = domain.inject_bytes();
        let incarnation = new_incarnation();
        let liveness = Liveness::listen(&me.host, me.base_port + LIVENESS_PORT_OFFSET, incarnation)
            .map_err(FabricError::Config)?;
        let identity_bytes = Arc::new(Memory::new(IDENTITY_BYTES)?);
        let hello_board = Arc::new(Memory::new(HELLO_BYTES)?);
        let stop = Arc::new(AtomicBool::new(false));
        let higher_peers = config.nodes.range(NodeId(config.node.0 + 1)..);
        let opener = crate::streams::Opener::count(
            higher_peers.map(|(_, addr)| (opener_key(&addr.host), addr.base_port)),
        );
        let node = Arc::new(Node {
            id: config.node,
            incarnation,
            ways: ProviderWays::of(&config.provider),
            inject_bytes,
            control: Mutex::new(Control::default()),
            channels: Mutex::new(vec![None; CHANNELS as usize]),
            next_token: AtomicU16::new(1),
            next_control: AtomicU64::new(1),
            binds_under_way: Mutex::new(HashMap::new()),
            identity_bytes,
            hello_board,
            hellos_taken: Mutex::new(HashMap::new()),
            hello_count: AtomicU32::new(0),
            posting: Mutex::new(HashMap::new()),
            opener,
            listening_ips: Mutex::new(HashMap::new()),
            liveness,
            stop,
            progress: Mutex::new(None),
            identity_registration: Mutex::new(None),
            hello_registration: Mutex::new(None),
            config,
            domain,
        });
        node.publish_identity(&node.control.lock().expect("control"));
        // SAFETY: the identity's memory is kept by the node (`identity_bytes`) until after the
        // registration is dropped (`Drop for OfiFabric`, and field order).
        let registration = unsafe {
            node.domain.register(
                node.identity_bytes.ptr(),
                IDENTITY_BYTES,
                true,
                false,
                IDENTITY_KEY,
            )
        }
        .map_err(|e| FabricError::Config(format!("identity registration: {e}")))?;
        *node.identity_registration.lock().expect("identity") = Some(registration);
        // SAFETY: as the identity's, the board's memory is kept by the node (`hello_board`)
        // until after its registration is dropped.
        let registration = unsafe {
            node.domain.register(node.hello_board.ptr(), HELLO_BYTES, false, true, HELLO_KEY)
        }
        .map_err(|e| FabricError::Config(format!("hello board registration: {e}")))?;
        *node.hello_registration.lock().expect("hello") = Some(registration);
        let weak = Arc::downgrade(&node);
        node.liveness.on_hello_request(Box::new(move |channel, to| {
            if let Some(node) = weak.upgrade() {
                let timeout = Duration::from_millis(node.config.connect_timeout_ms);
                node.hello(channel, to, Instant::now() + timeout);
            }
        }));
        // Every channel listens from the start, so that a peer can bind a connection before
        // this node has touched it.
        for channel in 0..CHANNELS {
            node.channel(channel)?;
        }
        if node.domain.manual_progress() {
            // Providers with manual data progress apply incoming operations only while someone
            // reads the endpoint's completion queue: a node with nothing posted must still be
            // written into.
            let weak = Arc::downgrade(&node);
            let stop = node.stop.clone();
            let handle = std::thread::Builder::new()
                .name(format!("mu-ofi-progress-{}", node.id))
                .spawn(move || progress_loop(weak, stop))
                .map_err(|e| FabricError::io("progress thread", e))?;
            *node.progress.lock().expect("progress") = Some(handle);
        }
        Ok(OfiFabric { node })
    }

    /// This node's incarnation: a new one each time a node is opened.
    pub fn incarnation(&self) -> u32 {
        self.node.incarnation
    }

    /// The provider in use.
    pub fn provider(&self) -> &str {
        &self.node.config.provider
    }
}

fn progress_loop(node: std::sync::Weak<Node>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        let Some(node) = node.upgrade() else { return };
        let channels: Vec<Arc<Channel>> =
            node.channels.lock().expect("channels").iter().flatten().cloned().collect();
        drop(node);
        for c in &channels {
            c.progress();
        }
        drop(channels);
        std::thread::sleep(Duration::from_micros(20));
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.progress.get_mut().expect("progress").take() {
            let _ = t.join();
        }
        // Registrations before endpoints and the domain (field order does the rest).
        self.identity_registration.get_mut().expect("identity").take();
        self.hello_registration.get_mut().expect("hello").take();
        let control = self.control.get_mut().expect("control");
        for side in control.sides.values() {
            side.st.lock().expect("side").registrations.clear();
        }
    }
}

impl Node {
    fn addr(&self, peer: NodeId) -> Result<&NodeAddr, FabricError> {
        self.config.nodes.get(&peer).ok_or_else(|| unreachable(peer, "no address configured"))
    }

    fn publish_identity(&self, control: &Control) {
        let identity = Identity {
            cluster_id: self.config.cluster_id,
            node: self.id,
            incarnation: self.incarnation,
            regions: control.regions.values().map(|e| (e.region.id, e.region.len_bytes)).collect(),
        };
        let mut bytes = Box::new([0u8; IDENTITY_BYTES]);
        identity.encode(&mut bytes);
        // SAFETY: the identity memory is IDENTITY_BYTES long and owned by the node; peers only
        // read it.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.identity_bytes.ptr(), IDENTITY_BYTES)
        };
    }

    /// The channel's endpoint, opened on first use.
    pub(crate) fn channel(&self, channel: u8) -> Result<Arc<Channel>, FabricError> {
        if channel >= CHANNELS {
            return Err(FabricError::Config(format!(
                "channel {channel}: the ofi backend has channels 0..{CHANNELS}"
            )));
        }
        let mut channels = self.channels.lock().expect("channels");
        if let Some(c) = &channels[channel as usize] {
            return Ok(c.clone());
        }
        let me = &self.config.nodes[&self.id];
        let ep = RawEndpoint::open(
            &self.domain,
            &me.host,
            me.base_port + channel as u16,
            CHANNEL_CQ_DEPTH,
        )
        .map_err(|e| FabricError::Config(format!("channel {channel} endpoint: {e}")))?;
        let c = Arc::new(Channel {
            number: channel,
            ep,
            mail: Mutex::new(Mail::default()),
            addresses: Mutex::new(HashMap::new()),
        });
        // Every peer goes into the address table at once and stays: a connection a peer opens
        // to this endpoint is then adopted for this side's own operations to it (when this
        // side has none yet), instead of this side opening a second one (see `fence`).
        for &peer in self.config.nodes.keys().filter(|&&n| n != self.id) {
            let _ = c.address(self, peer);
        }
        channels[channel as usize] = Some(c.clone());
        Ok(c)
    }

    /// Posts a read of the peer's identity through `channel` (the binding handshake, and the
    /// fence of a revocation); returns its number, for `wait_control`. `Err(None)` when the
    /// provider kept refusing it until `deadline`.
    fn post_identity_read(
        &self,
        channel: &Channel,
        peer: NodeId,
        dest: u64,
        deadline: Instant,
    ) -> Result<u64, Option<String>> {
        let buf: Box<[u8]> = vec![0u8; IDENTITY_BYTES].into_boxed_slice();
        self.post_control(channel, peer, buf, deadline, |ptr, ctx| {
            // SAFETY: `ptr` is the control buffer, parked until the read completes (see
            // `post_control`).
            unsafe { channel.ep.read(ptr, IDENTITY_BYTES, dest, 0, IDENTITY_KEY, ctx) }
        })
    }

    /// Posts a control operation to `peer` on `channel` with `buf` as its buffer, which is
    /// parked (in `pending`) until the provider is done with it; returns its number.
    /// `Err(None)` when the provider kept refusing it until `deadline`.
    ///
    /// Control posts to one peer on one channel go one at a time: the provider opens a stream
    /// inside the post that finds none, and two posts that find none at the same moment (a
    /// binding and a hello asked for, on two threads) would each open one.
    fn post_control(
        &self,
        channel: &Channel,
        peer: NodeId,
        mut buf: Box<[u8]>,
        deadline: Instant,
        post: impl Fn(*mut u8, u64) -> Result<(), PostFailure>,
    ) -> Result<u64, Option<String>> {
        let one_at_a_time = self
            .posting
            .lock()
            .expect("posting")
            .entry((channel.number, peer))
            .or_default()
            .clone();
        let _turn = one_at_a_time.lock().expect("posting turn");
        let number = self.next_control.fetch_add(1, Ordering::Relaxed);
        let ptr = buf.as_mut_ptr();
        let ctx = context(CONTROL_TOKEN, number);
        // Parked before posting: the completion may come before the post returns. Moving the
        // box does not move the heap buffer `ptr` points into, which is dropped only once the
        // operation completed or never went out.
        channel.mail.lock().expect("channel mail").pending.insert(number, buf);
        loop {
            match post(ptr, ctx) {
                Ok(()) => return Ok(number),
                Err(PostFailure::Again) if Instant::now() < deadline => {
                    channel.progress();
                    std::thread::yield_now();
                }
                Err(failure) => {
                    channel.mail.lock().expect("channel mail").pending.remove(&number);
                    return Err(match failure {
                        PostFailure::Again => None,
                        PostFailure::Error(e) => Some(crate::ffi::strerror(e as i64)),
                    });
                }
            }
        }
    }

    /// Says hello to a higher peer on `channel`: writes a new word into its hello board, on
    /// the stream this node opens to it (or has open). Nobody waits for it; the peer sees it
    /// land. Only the lower node of a pair says hello (see `enforce_opener`). Gives up if the
    /// provider does not take the write by `until`.
    fn hello(&self, channel: u8, to: NodeId, until: Instant) {
        if to <= self.id || channel >= CHANNELS {
            return;
        }
        let Ok(ch) = self.channel(channel) else { return };
        let Ok(dest) = ch.address(self, to) else { return };
        let count = loop {
            let n = self.hello_count.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
            if n != 0 {
                break n;
            }
        };
        let word = (self.incarnation as u64) << 32 | count as u64;
        let offset = hello_offset(channel, self.id) as u64;
        let buf: Box<[u8]> = word.to_le_bytes().to_vec().into_boxed_slice();
        let posted = self.post_control(&ch, to, buf, until, |ptr, ctx| {
            // SAFETY: `ptr` is the control buffer, parked until the write completes.
            unsafe { ch.ep.write(ptr, 8, dest, offset, HELLO_KEY, ctx, true, false) }
        });
        if let Ok(number) = posted {
            self.abandon_control(&ch, number);
        }
    }

    /// The hello word `from` last wrote here on `channel`.
    fn hello_word(&self, channel: u8, from: NodeId) -> u64 {
        let at = hello_offset(channel, from);
        debug_assert!(at + 8 <= HELLO_BYTES);
        // SAFETY: in bounds of the board (`hello_offset`) and 8-byte aligned (the board is
        // page aligned); the provider writes the word with a raw copy, so a torn value can be
        // read, which still shows that bytes came in on the peer's stream.
        unsafe { std::ptr::read_volatile(self.hello_board.ptr().add(at).cast::<u64>()) }
    }

    /// Before this node (the higher of the pair) posts anything to a lower peer on a channel
    /// it binds: waits until the peer said hello since the last binding, asking it to over its
    /// liveness port if it has not. A hello landed here came on the stream the peer opened, and
    /// the provider registered that stream before it handled any of its bytes, so this node's
    /// posts to the peer now go on it instead of opening a second one.
    ///
    /// Waits until `until`; then fails, as still under way if that is before `deadline` (the
    /// binding's whole time), or as unreachable.
    fn await_hello(
        &self,
        conn: ConnId,
        until: Instant,
        deadline: Instant,
    ) -> Result<(), FabricError> {
        let key = (conn.channel, conn.peer);
        let taken = self.hellos_taken.lock().expect("hellos").get(&key).copied().unwrap_or(0);
        let fresh = |w: u64| w != 0 && w != taken;
        if !fresh(self.hello_word(conn.channel, conn.peer)) {
            let addr = self.addr(conn.peer)?;
            let wait = until.saturating_duration_since(Instant::now());
            Liveness::ask_hello(
                &addr.host,
                addr.base_port + LIVENESS_PORT_OFFSET,
                conn.channel,
                self.id,
                wait.max(Duration::from_millis(1)),
            )
            .map_err(|e| unreachable(conn.peer, e))?;
        }
        loop {
            let word = self.hello_word(conn.channel, conn.peer);
            if fresh(word) {
                self.hellos_taken.lock().expect("hellos").insert(key, word);
                return Ok(());
            }
            if Instant::now() >= until {
                if until < deadline {
                    return Err(in_progress(conn.peer, "binding: asked for a hello, none yet"));
                }
                return Err(unreachable(conn.peer, "asked for a hello, none came in time"));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Where `node` listens on `channel`, as the kernel lists addresses.
    fn listening(&self, node: NodeId, channel: u8) -> Result<SocketAddrV4, String> {
        let addr = self.addr(node).map_err(|e| e.to_string())?;
        let port = addr.base_port + channel as u16;
        // Resolved once per node: fences and bindings ask for it on the permission-switch
        // path, where a host name would otherwise cost a lookup each time.
        let mut resolved = self.listening_ips.lock().expect("listening ips");
        if let Some(&ip) = resolved.get(&node) {
            return Ok(SocketAddrV4::new(ip, port));
        }
        let found = first_ipv4(&addr.host, port)?;
        resolved.insert(node, *found.ip());
        Ok(found)
    }

    /// Limits how long data sent on the streams with `conn`'s peer may go unacknowledged before
    /// the kernel gives them up (`TCP_USER_TIMEOUT`) to `2 × slow_fence_ms`, instead of the
    /// kernel's `tcp_retries2` retransmissions (about 15 minutes by default). Set after each
    /// binding (on the streams it used or opened) and each fence posted (a stream may have
    /// been opened since). A peer cut off by the network acknowledges nothing: its streams
    /// break, which ends a fence's wait (nothing more of the peer's can land on a broken
    /// stream) and every operation posted to it, instead of filling the channel's queue. A
    /// peer that lives acknowledges in its kernel even while its process is stopped, so this
    /// never breaks the stream of a stopped writer.
    fn limit_unacknowledged(&self, conn: ConnId) {
        let limit_ms = self.config.slow_fence_ms.saturating_mul(2).min(u32::MAX as u64) as u32;
        let (Ok(mine), Ok(theirs)) =
            (self.listening(self.id, conn.channel), self.listening(conn.peer, conn.channel))
        else {
            return;
        };
        for stream in crate::streams::with_peer(mine.port(), theirs).unwrap_or_default() {
            let _ = crate::streams::set_unacknowledged_limit(&stream, limit_ms);
        }
    }

    /// A pair of nodes holds one stream, which the lower node opens, so that both post on it
    /// and a fence is ordered after everything the peer sent (see `fence`). The provider opens
    /// a stream whenever a post finds none to use, so a higher node whose stream to a lower
    /// peer broke can still open one, and two threads of the lower node that post while none
    /// exists can open one each. After each binding and each fence, this looks for such
    /// streams and shuts them down (the provider reads end-of-file and drops them), and fails:
    /// neither the binding nor the fence is claimed.
    ///
    /// * On the higher node: the streams its process opened to the peer's channel port, found
    ///   exactly. It asks the peer for a hello, so that the peer opens one.
    /// * On the lower node: the streams accepted on its own channel port from the peer's
    ///   address. A lower node than this one on that address could have opened those too, so
    ///   that look is made only when none is (one replica per host; the lowest node
    ///   everywhere). And more than one stream its process opened to the peer's channel port:
    ///   all are shut down (the peer may be writing on any of them). That count is this node's
    ///   only where no other node of the process may open streams to the peer
    ///   (`streams::Opener`): one replica per process. Its next post opens a stream again.
    /// * With a provider that keeps one stream per pair itself
    ///   (`ProviderWays::one_stream_per_pair`), there is nothing to enforce.
    fn enforce_opener(&self, conn: ConnId) -> Result<(), String> {
        if conn.peer == self.id || self.ways.one_stream_per_pair {
            return Ok(());
        }
        let theirs = self.listening(conn.peer, conn.channel)?;
        let higher = conn.peer < self.id;
        // One still connecting has carried nothing, so no fence or binding went on it: a post
        // of this node's data path to a peer cut off by the network tries to open one each
        // time (and gives up after `FI_SOCKETS_CONN_TIMEOUT`). Counting them would fail every
        // fence to that peer, the one that ends the wait for a cut-off leader included.
        let carried = |s: &crate::streams::Stream| !s.connecting;
        let (wrong, doubled): (Vec<crate::streams::Stream>, bool) = if higher {
            let opened = crate::streams::opened_to(theirs)
                .map_err(|e| format!("listing this process's streams to {theirs}: {e}"))?;
            (opened.into_iter().filter(carried).collect(), false)
        } else {
            let shared = self.config.nodes.keys().any(|&n| {
                n < self.id && self.listening(n, conn.channel).is_ok_and(|a| a.ip() == theirs.ip())
            });
            let mine = self.listening(self.id, conn.channel)?;
            let base_port = self.addr(conn.peer).map_err(|e| e.to_string())?.base_port;
            let sole_opener = self.opener.sole_opener_of(&theirs.ip().to_string(), base_port);
            // Listed last, just before they are shut down: a descriptor closed in between is
            // found out (`streams::shut_down`), but the less time, the fewer streams missed.
            let held = crate::streams::held()
                .map_err(|e| format!("listing this process's streams: {e}"))?;
            let mut wrong: Vec<_> = held
                .iter()
                .filter(|s| {
                    !shared && s.local.port() == mine.port() && s.remote.ip() == theirs.ip()
                })
                .filter(|s| carried(s))
                .copied()
                .collect();
            let opened: Vec<_> = held.iter().filter(|s| s.remote == theirs && carried(s)).collect();
            let doubled = opened.len() > 1 && sole_opener;
            if doubled {
                let more: Vec<_> = opened.into_iter().filter(|s| !wrong.contains(s)).collect();
                wrong.extend(more);
            }
            (wrong, doubled)
        };
        if wrong.is_empty() {
            return Ok(());
        }
        for stream in &wrong {
            let _ = crate::streams::shut_down(stream);
        }
        let (me, channel) = (self.id, conn.channel);
        if higher {
            let addr = self.addr(conn.peer).map_err(|e| e.to_string())?.clone();
            let timeout = Duration::from_millis(self.config.connect_timeout_ms);
            // Off this thread: a cut-off peer would hold it for the whole connect timeout.
            let _ = std::thread::Builder::new().name("mu-ofi-ask-hello".into()).spawn(move || {
                let _ = Liveness::ask_hello(
                    &addr.host,
                    addr.base_port + LIVENESS_PORT_OFFSET,
                    channel,
                    me,
                    timeout,
                );
            });
        }
        if doubled {
            return Err(format!(
                "node {me} had opened more than one stream to node {} on channel {channel} \
                 ({} shut down in all), where a pair holds one: its next post opens one",
                conn.peer,
                wrong.len(),
            ));
        }
        let (opener, from) = if higher { (me, conn.peer) } else { (conn.peer, me) };
        Err(format!(
            "node {opener} had opened {} stream(s) to node {from} on channel {channel}, which \
             only the lower node opens: shut down, and node {from} opens one",
            wrong.len(),
        ))
    }

    /// Waits until control read `number` completes or `deadline` passes (`None`); a failed
    /// read gives the provider's error number.
    fn wait_control(
        &self,
        channel: &Channel,
        number: u64,
        deadline: Instant,
    ) -> Option<Result<Box<[u8]>, i32>> {
        loop {
            {
                let mut mail = channel.mail.lock().expect("channel mail");
                channel.pump(&mut mail);
                if let Some((c, buf)) = mail.control.remove(&number) {
                    return Some(if c.err == 0 { Ok(buf) } else { Err(c.err) });
                }
                if Instant::now() >= deadline {
                    return None;
                }
            }
            std::thread::yield_now();
        }
    }

    /// Nobody will collect control read `number`: its completion is dropped when it comes.
    fn abandon_control(&self, channel: &Channel, number: u64) {
        let mut mail = channel.mail.lock().expect("channel mail");
        if mail.control.remove(&number).is_none() && mail.pending.contains_key(&number) {
            mail.abandoned.insert(number);
        }
    }

    /// When a call that would wait until `full` stops waiting: then, or sooner where calls
    /// are kept short (`OfiConfig::call_wait_us`).
    fn call_deadline(&self, now: Instant, full: Instant) -> Instant {
        match self.config.call_wait_us {
            Some(us) => full.min(now + Duration::from_micros(us)),
            None => full,
        }
    }

    /// Binds `conn` to the peer's current incarnation: reads its identity through the channel.
    fn bind(&self, conn: ConnId) -> Result<Binding, FabricError> {
        let began = Instant::now();
        let result = self.bind_once(conn);
        let key = (conn.channel, conn.peer);
        let mut binds = self.binds_under_way.lock().expect("binds");
        match &result {
            Err(FabricError::PeerUnreachable(_, why)) if !binds.contains_key(&key) => {
                let failed = BindAttempt::Failed {
                    at: Instant::now(),
                    held: began.elapsed(),
                    why: why.clone(),
                };
                binds.insert(key, failed);
            }
            _ => {}
        }
        result
    }

    fn bind_once(&self, conn: ConnId) -> Result<Binding, FabricError> {
        let channel = self.channel(conn.channel)?;
        // The address stays in the table: removing it would make the provider open another
        // connection to the peer while the peer may go on writing on the first (see `fence`).
        // The provider itself replaces a connection that broke (the peer restarted).
        let dest = channel.address(self, conn.peer)?;
        let timeout = Duration::from_millis(self.config.connect_timeout_ms);
        let key = (conn.channel, conn.peer);
        let earlier = self.binds_under_way.lock().expect("binds").remove(&key);
        let now = Instant::now();
        let (mut number, posted, wait_until) = match earlier {
            // A read from an earlier call is still out: a short look, not a second full wait,
            // so that a peer that stopped answering holds up its callers (the background
            // plane's heartbeat among them) once, not on every retry.
            Some(BindAttempt::UnderWay { number, posted })
                if posted.elapsed() < timeout * BIND_PATIENCE =>
            {
                (number, posted, self.call_deadline(now, now + Duration::from_millis(1)))
            }
            // The last one failed slowly (a post that waited for a connection the provider
            // could not open, a read that went unanswered and then broke): not again yet. A
            // peer that refuses at once (restarting) is tried again almost at once.
            Some(BindAttempt::Failed { at, held, why }) if at.elapsed() < held * BIND_PATIENCE => {
                let again = held * BIND_PATIENCE - at.elapsed();
                let said = format!("{why} (tried again in {} ms)", again.as_millis());
                self.binds_under_way
                    .lock()
                    .expect("binds")
                    .insert(key, BindAttempt::Failed { at, held, why });
                return Err(unreachable(conn.peer, said));
            }
            stale => {
                let since = match stale {
                    Some(BindAttempt::UnderWay { number, .. }) => {
                        self.abandon_control(&channel, number);
                        now
                    }
                    Some(BindAttempt::Posting { since }) if since.elapsed() < timeout => since,
                    // Refused for the whole connect timeout: unreachable, as one call that
                    // waited that long would have found it. `bind` records the failure as
                    // having held this call only, so the next call tries again soon: these
                    // calls held nobody up, and a live peer whose connection is slow to open
                    // must not be shut out for ten connect timeouts.
                    Some(BindAttempt::Posting { .. }) => {
                        return Err(unreachable(conn.peer, REFUSED_AGAIN));
                    }
                    _ => now,
                };
                let deadline = since + timeout;
                let call_until = self.call_deadline(now, deadline);
                self.check_not_dead(conn.peer, call_until)?;
                // Unless the provider keeps one stream per pair itself, only the lower node of
                // the pair opens their stream (`enforce_opener`): it says hello first, on the
                // stream this read follows; the higher one posts nothing until that hello has
                // landed.
                if !self.ways.one_stream_per_pair {
                    if conn.peer < self.id {
                        self.await_hello(conn, call_until, deadline)?;
                    } else {
                        self.hello(conn.channel, conn.peer, call_until);
                    }
                }
                let number = match self.post_identity_read(&channel, conn.peer, dest, call_until) {
                    Ok(number) => number,
                    Err(None) if call_until < deadline => {
                        let posting = BindAttempt::Posting { since };
                        self.binds_under_way.lock().expect("binds").insert(key, posting);
                        return Err(in_progress(
                            conn.peer,
                            "binding: the provider has not taken the read yet (it is opening a \
                             connection)",
                        ));
                    }
                    Err(why) => return Err(post_refused(conn.peer, why)),
                };
                (number, Instant::now(), call_until)
            }
        };
        let bytes = loop {
            match self.wait_control(&channel, number, wait_until) {
                // A connection that closed (an operation was refused, the peer restarted) is
                // not replaced yet: the read goes out again until the provider has (see
                // `ProviderWays::reconnects_lazily`).
                Some(Err(e))
                    if e == libc::ENOTCONN
                        && self.ways.reconnects_lazily
                        && Instant::now() < wait_until =>
                {
                    channel.progress();
                    std::thread::sleep(Duration::from_micros(100));
                    number = self
                        .post_identity_read(&channel, conn.peer, dest, wait_until)
                        .map_err(|e| post_refused(conn.peer, e))?;
                }
                Some(result) => {
                    break result
                        .map_err(|e| unreachable(conn.peer, crate::ffi::strerror(e as i64)))?
                }
                None => {
                    self.binds_under_way
                        .lock()
                        .expect("binds")
                        .insert(key, BindAttempt::UnderWay { number, posted });
                    if self.config.call_wait_us.is_some() && posted.elapsed() < timeout {
                        return Err(in_progress(conn.peer, "binding: no answer yet"));
                    }
                    return Err(unreachable(
                        conn.peer,
                        format!("no answer within {} ms", timeout.as_millis()),
                    ));
                }
            }
        };
        self.enforce_opener(conn).map_err(|e| unreachable(conn.peer, e))?;
        self.limit_unacknowledged(conn);
        let identity =
            Identity::decode(&bytes).map_err(|e| match Identity::of_this_build(&bytes) {
                // Read while it was rewritten, or damaged: tried again later.
                true => unreachable(conn.peer, e),
                false => FabricError::Incompatible(format!("node {}: {e}", conn.peer)),
            })?;
        if identity.cluster_id != self.config.cluster_id || identity.node != conn.peer {
            return Err(FabricError::Incompatible(format!(
                "the node at {}'s address is node {} of cluster {:#x}, not of cluster {:#x}",
                conn.peer, identity.node, identity.cluster_id, self.config.cluster_id
            )));
        }
        let addr = self.addr(conn.peer)?;
        self.liveness.watch(conn.peer, &addr.host, addr.base_port + LIVENESS_PORT_OFFSET, timeout);
        Ok(Binding {
            peer_incarnation: identity.incarnation,
            peer_regions: identity.regions.into_iter().collect(),
        })
    }

    /// Makes the side's registrations match what it allows now: one per region and kind of
    /// access that both the region and the side's flags allow, while the side accepts remote
    /// operations. Returns whether a registration was closed (a right was taken away).
    fn sync_registrations(&self, control: &Control, conn: ConnId, side: &mut SideState) -> bool {
        let mut wanted: Vec<(u64, &RegionEntry, Kind)> = Vec::new();
        if let (true, Some(b)) = (side.state.accepts_remote(), &side.binding) {
            for entry in control.regions.values() {
                for kind in Kind::ALL {
                    let flag = match kind {
                        Kind::Read => Access::READ,
                        Kind::Write => Access::WRITE,
                        Kind::Atomic => Access::ATOMIC,
                    };
                    if entry.access.contains(flag) && side.access.contains(flag) {
                        let key = data_key(
                            entry.region.id,
                            kind,
                            conn.peer,
                            conn.channel,
                            b.peer_incarnation,
                        );
                        wanted.push((key, entry, kind));
                    }
                }
            }
        }
        let before = side.registrations.len();
        side.registrations.retain(|(key, _)| wanted.iter().any(|(k, _, _)| k == key));
        let revoked = side.registrations.len() < before;
        for (key, entry, kind) in wanted {
            if side.registrations.iter().any(|(k, _)| *k == key) {
                continue;
            }
            // SAFETY: the registration lives in the side, which the node drops (with every
            // registration) before the region's memory can go: each region entry holds an
            // `Arc` to its memory for as long as the node lives.
            let registered = unsafe {
                self.domain.register(
                    entry.region.mem.ptr(),
                    entry.region.len_bytes.max(1),
                    matches!(kind, Kind::Read | Kind::Atomic),
                    matches!(kind, Kind::Write | Kind::Atomic),
                    key,
                )
            };
            match registered {
                Ok(r) => side.registrations.push((key, r)),
                // Only a duplicate key or exhausted provider resources get here; the peer's
                // operations are then refused, which is safe.
                Err(_) => continue,
            }
        }
        revoked
    }

    /// After a right was taken away: waits until nothing the peer sent before can still land.
    /// The registrations are already closed, so anything the provider starts from now on is
    /// refused; what remains is an operation it had started, whose bytes arrive on the peer's
    /// connection. A round trip (reading the peer's identity) on that connection comes back
    /// after all of them, as the provider handles a connection's bytes in order; a read that
    /// fails because the connection broke means nothing more comes on it either.
    ///
    /// This holds while the two nodes share one stream. The provider opens a stream inside any
    /// post that finds none, from either side, so two can appear: only the lower node of a pair
    /// opens theirs (`await_hello`, `hello`), and the higher one shuts down any it finds it
    /// opened and claims no fence made while it had one (`enforce_opener`).
    ///
    /// The read is posted once per right taken away and may outlive this call (`st.fence`).
    /// All the calls that wait for one read wait `slow_fence_ms` in all (or `timeout`, if
    /// shorter, each): once that is spent, the peer is cut off (`cut`). A peer that never
    /// answers (stopped, or cut off by the network while its connection lives) then holds up
    /// the revoker, whose heartbeat runs on the same thread, once — not on every attempt of its
    /// permission manager — while a peer slow to answer still gets the full wait across the
    /// fast path and the slow path. The calls that try to post a read the provider refuses
    /// share that budget the same way.
    /// Where calls are kept short (`OfiConfig::call_wait_us`), each waits at most that long
    /// and says the fence is under way until the budget is spent.
    fn fence(&self, conn: ConnId, st: &mut SideState, timeout: Duration) -> Result<(), FenceWait> {
        if st.binding.is_none() {
            return Ok(());
        }
        let channel = self.channel(conn.channel).map_err(|e| FenceWait::Failed(e.to_string()))?;
        if self.gone_for_good(conn) {
            if let Some((number, _)) = st.fence.take() {
                self.abandon_control(&channel, number);
            }
            return Ok(());
        }
        let now = Instant::now();
        if !st.cut.is_empty() {
            return self.await_cut(conn, st, now);
        }
        let budget = Duration::from_millis(self.config.slow_fence_ms);
        // The end of the budget of what began at `since` (at least a short look from now).
        let end_of_budget = |since: Instant| (since + budget).max(now + Duration::from_millis(1));
        let short = self.config.call_wait_us.is_some();
        let (number, posted) = match st.fence {
            Some(fence) => fence,
            None => {
                let refused_since = st.fence_refused_since.unwrap_or(now);
                let post_by = end_of_budget(refused_since).min(now + timeout);
                let post_by = self.call_deadline(now, post_by);
                let dest = channel
                    .address(self, conn.peer)
                    .map_err(|e| FenceWait::Failed(e.to_string()))?;
                let number = match self.post_identity_read(&channel, conn.peer, dest, post_by) {
                    Ok(number) => number,
                    // The provider refused the read: the connection is gone, and with it
                    // everything the peer sent on it.
                    Err(Some(_broken)) => {
                        st.fence_refused_since = None;
                        return self.enforce_opener(conn).map_err(FenceWait::Failed);
                    }
                    // The provider has no stream to post on and is opening one (`tcp;ofi_rxm`
                    // after the last one broke, to a peer cut off or dead): if none is left
                    // that has carried anything, nothing of the peer's can land any more.
                    Err(None) if self.holds_no_stream(conn) => {
                        st.fence_refused_since = None;
                        return Ok(());
                    }
                    Err(None) if Instant::now() >= refused_since + budget => {
                        st.fence_refused_since = Some(refused_since);
                        return self.cut(conn, st, "the fence could not be posted");
                    }
                    Err(None) => {
                        st.fence_refused_since = Some(refused_since);
                        let why = "the fence could not be posted";
                        return Err(if short && Instant::now() < refused_since + budget {
                            FenceWait::UnderWay(format!("{why} yet"))
                        } else {
                            FenceWait::Failed(why.into())
                        });
                    }
                };
                st.fence_refused_since = None;
                st.fence = Some((number, now));
                self.limit_unacknowledged(conn);
                (number, now)
            }
        };
        let deadline = end_of_budget(posted).min(now + timeout);
        match self.wait_control(&channel, number, self.call_deadline(now, deadline)) {
            Some(_answered_or_broken) => {
                st.fence = None;
                // The read went on a stream this node opened, if it had opened one: then it
                // is no barrier for the peer's, and a new fence goes out next time.
                self.enforce_opener(conn).map_err(FenceWait::Failed)
            }
            None if Instant::now() >= posted + budget => {
                self.cut(conn, st, "the fence went unanswered")
            }
            None => {
                let waited = Instant::now().saturating_duration_since(posted).as_micros();
                if short && Instant::now() < posted + budget {
                    Err(FenceWait::UnderWay(format!("no answer yet, {waited} µs after posting it")))
                } else {
                    Err(FenceWait::Failed(format!(
                        "no fence answer within {waited} µs of posting it"
                    )))
                }
            }
        }
    }

    /// The fence for a right taken away went unanswered (or could not be posted) for its whole
    /// budget: the peer is stopped, or cut off while its streams live, and may have an
    /// operation half received. This side shuts down every stream this process holds with the
    /// peer on the channel (`why` says what came first), and the revocation holds once the
    /// provider has closed them all (`await_cut`).
    ///
    /// Why that is a barrier: the rights were taken away first (the registrations closed), so
    /// an operation of the peer can still apply only if its key was checked before, and it is
    /// being received on one of these streams. A stream shut down in both directions gives its
    /// reader what had arrived before and then an end; what the peer sends after it never
    /// reaches the reader (the kernel answers it with a reset). The provider handles a stream's
    /// bytes in order up to that end and closes it then. A stream opened later carries only
    /// operations whose keys are checked after the close, and refused. A stream still
    /// connecting has carried nothing. Where nodes share an address, the streams another node
    /// of that address opened to this one are shut down too: they cannot be told apart (their
    /// operations fail, and they reconnect).
    fn cut(&self, conn: ConnId, st: &mut SideState, why: &str) -> Result<(), FenceWait> {
        let (Ok(mine), Ok(theirs)) =
            (self.listening(self.id, conn.channel), self.listening(conn.peer, conn.channel))
        else {
            return Err(FenceWait::Failed(format!("{why}, and its streams cannot be found")));
        };
        let streams = crate::streams::with_peer(mine.port(), theirs)
            .map_err(|e| FenceWait::Failed(format!("{why}, and listing its streams: {e}")))?;
        let mut cut: Vec<u64> = Vec::new();
        for stream in streams.iter().filter(|s| !s.connecting) {
            // A stream that cannot be shut down any more is no longer connected: it is waited
            // for all the same.
            let _ = crate::streams::shut_down(stream);
            cut.push(stream.inode);
        }
        if cut.is_empty() {
            // Nothing left that has carried anything (`holds_no_stream`).
            return Ok(());
        }
        st.cut = cut;
        self.await_cut(conn, st, Instant::now())
    }

    /// Waits (`cut_wait_ms`, or a short call's wait) until the provider has closed every stream
    /// `cut` shut down; then the revocation holds. Closed means its descriptor is gone, not
    /// that the kernel's table no longer lists it: once the peer has sent its end too, a stream
    /// leaves that table while bytes that came before the end may still wait to be read.
    fn await_cut(&self, conn: ConnId, st: &mut SideState, now: Instant) -> Result<(), FenceWait> {
        let until = self.call_deadline(now, now + Duration::from_millis(self.config.cut_wait_ms));
        loop {
            let open = crate::streams::open_sockets().map_err(|e| {
                FenceWait::Failed(format!("listing this process's descriptors: {e}"))
            })?;
            if !st.cut.iter().any(|inode| open.contains(inode)) {
                st.cut.clear();
                st.fence_refused_since = None;
                if let Some((number, _)) = st.fence.take() {
                    if let Ok(channel) = self.channel(conn.channel) {
                        self.abandon_control(&channel, number);
                    }
                }
                return Ok(());
            }
            if Instant::now() >= until {
                let why = format!(
                    "the fence went unanswered; {} stream(s) with the peer shut down, not yet \
                     closed by the provider",
                    st.cut.len()
                );
                return Err(if self.config.call_wait_us.is_some() {
                    FenceWait::UnderWay(why)
                } else {
                    FenceWait::Failed(why)
                });
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Before binding to a peer whose watched process died: fails at once unless something
    /// answers on its liveness port (it restarted). Binding would otherwise wait the whole
    /// connect timeout with a provider that keeps trying to reconnect (`tcp;ofi_rxm`), on the
    /// thread that runs the background plane.
    ///
    /// The question waits until `until` (at least 1 ms: a TCP exchange).
    fn check_not_dead(&self, peer: NodeId, until: Instant) -> Result<(), FabricError> {
        if !self.liveness.dead(peer) {
            return Ok(());
        }
        let addr = self.addr(peer)?;
        let wait = until.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        Liveness::ask_incarnation(&addr.host, addr.base_port + LIVENESS_PORT_OFFSET, wait)
            .map(|_| ())
            .map_err(|e| unreachable(peer, format!("its process died, and since then: {e}")))
    }

    /// Whether `conn`'s peer died and this process holds no stream with it on the channel any
    /// more (`holds_no_stream`): then nothing of the peer's can land here again, since a
    /// provider handles a stream's bytes in order up to its end before it closes it. A fence is
    /// needless then, and `tcp;ofi_rxm`, which keeps trying to reconnect to a dead peer and
    /// answers "again" to every post meanwhile, could not post one.
    fn gone_for_good(&self, conn: ConnId) -> bool {
        self.liveness.dead(conn.peer) && self.holds_no_stream(conn)
    }

    /// Whether this process holds no stream with `conn`'s peer on the channel that can have
    /// carried anything (one still connecting has not). Called once the rights are taken away
    /// (the registrations closed): an operation of the peer can then still apply only if its
    /// key was checked before, and it is being received on a stream this process holds; one
    /// that comes on a stream opened later finds its key refused. A stream that ended was
    /// handled up to its end (the peer closed it), or broke, and then the provider drops what
    /// it had not handled. Exact when every node has an address of its own
    /// (`ProviderWays::needs_own_address`); where nodes share one, another node's stream makes
    /// this say no, and the fence goes out.
    fn holds_no_stream(&self, conn: ConnId) -> bool {
        let (Ok(mine), Ok(theirs)) =
            (self.listening(self.id, conn.channel), self.listening(conn.peer, conn.channel))
        else {
            return false;
        };
        crate::streams::with_peer(mine.port(), theirs)
            .is_ok_and(|streams| streams.iter().all(|s| s.connecting))
    }

    /// Brings the side's registrations in line with its state and flags and, if a right was
    /// taken away now or earlier without a fence, fences, waiting at most `timeout`. The
    /// node's control lock is released before the wait: a peer slow to answer holds up only
    /// this side.
    fn revoke(
        &self,
        control: MutexGuard<'_, Control>,
        conn: ConnId,
        st: &mut SideState,
        timeout: Duration,
    ) -> Result<(), FenceWait> {
        if self.sync_registrations(&control, conn, st) && st.binding.is_some() {
            st.unfenced = true;
            // Streams cut for an earlier right are no barrier for this one either.
            st.cut.clear();
            // A read posted before this right was taken away does not cover it.
            if let Some((old, _)) = st.fence.take() {
                if let Ok(channel) = self.channel(conn.channel) {
                    self.abandon_control(&channel, old);
                }
            }
        }
        drop(control);
        if st.unfenced {
            self.fence(conn, st, timeout)?;
            st.unfenced = false;
        }
        Ok(())
    }

    /// Makes a side's registrations match its state after the data path changed it (an error
    /// completion moved it to the error state).
    /// What an operation to `peer` that completed as "canceled" means, on a provider that
    /// reports a refused key and a dead target alike (`ProviderWays::cancel_is_ambiguous`):
    /// a refusal if the incarnation it was posted to still answers on its liveness port, and
    /// an unreachable peer otherwise (dead, restarted, stopped or cut off). A process that
    /// answers after the operation failed was alive when it failed, so a death is never read
    /// as a refusal; a live peer that cannot answer within the connect timeout is read as
    /// unreachable, which the protocols take as the weaker claim.
    pub(crate) fn classify_cancel(&self, peer: NodeId, incarnation: u32) -> Status {
        if self.liveness.dead(peer) {
            return Status::PeerUnreachable;
        }
        let Ok(addr) = self.addr(peer) else { return Status::PeerUnreachable };
        let timeout = Duration::from_millis(self.config.connect_timeout_ms);
        let port = addr.base_port + LIVENESS_PORT_OFFSET;
        match Liveness::ask_incarnation(&addr.host, port, timeout) {
            Ok(answered) if answered == incarnation => Status::RemoteAccessDenied,
            _ => Status::PeerUnreachable,
        }
    }

    pub(crate) fn refresh_registrations(&self, conn: ConnId) {
        let control = self.control.lock().expect("control");
        if let Some(side) = control.sides.get(&conn).cloned() {
            let mut st = side.st.lock().expect("side");
            self.sync_registrations(&control, conn, &mut st);
        }
    }

    pub(crate) fn side(&self, conn: ConnId) -> Arc<Side> {
        let mut control = self.control.lock().expect("control");
        control.sides.entry(conn).or_insert_with(|| Arc::new(Side::new(conn))).clone()
    }

    fn lock_side<'a>(control: &'a mut MutexGuard<'_, Control>, conn: ConnId) -> &'a Arc<Side> {
        control.sides.entry(conn).or_insert_with(|| Arc::new(Side::new(conn)))
    }
}

impl Fabric for OfiFabric {
    type Region = OfiRegion;
    type Endpoint = OfiEndpoint;

    fn backend_name(&self) -> &'static str {
        "ofi"
    }

    fn node(&self) -> NodeId {
        self.node.id
    }

    fn max_inline_bytes(&self) -> usize {
        self.node.inject_bytes
    }

    fn register_region(
        &self,
        id: RegionId,
        len_bytes: usize,
        access: Access,
    ) -> Result<OfiRegion, FabricError> {
        if id.0 > MAX_REGION_ID {
            return Err(FabricError::Config(format!(
                "region id {} is above the ofi backend's limit {MAX_REGION_ID}",
                id.0
            )));
        }
        let mut control = self.node.control.lock().expect("control");
        if control.regions.contains_key(&id) {
            return Err(FabricError::RegionExists(id));
        }
        if control.regions.len() >= MAX_REGIONS {
            return Err(FabricError::Config(format!("more than {MAX_REGIONS} regions")));
        }
        let region = OfiRegion { id, len_bytes, mem: Arc::new(Memory::new(len_bytes)?) };
        control.regions.insert(id, RegionEntry { region: region.clone(), access });
        self.node.publish_identity(&control);
        let sides: Vec<Arc<Side>> = control.sides.values().cloned().collect();
        for side in sides {
            let mut st = side.st.lock().expect("side");
            self.node.sync_registrations(&control, side.conn, &mut st);
        }
        Ok(region)
    }

    fn endpoint(&self, depth: usize) -> Result<OfiEndpoint, FabricError> {
        let token = loop {
            let t = self.node.next_token.fetch_add(1, Ordering::Relaxed);
            if t != CONTROL_TOKEN {
                break t;
            }
        };
        Ok(OfiEndpoint::new(self.clone(), token, depth))
    }

    fn qp_state(&self, conn: ConnId) -> Result<QpState, FabricError> {
        Ok(self.node.side(conn).st.lock().expect("side").state)
    }

    fn qp_access(&self, conn: ConnId) -> Result<Access, FabricError> {
        Ok(self.node.side(conn).st.lock().expect("side").access)
    }

    fn crash_notified(&self, peer: NodeId) -> bool {
        self.node.liveness.dead(peer)
    }

    fn modify_qp(&self, conn: ConnId, to: QpState, access: Access) -> Result<(), FabricError> {
        let node = &self.node;
        // Binding reads the peer's identity over the network: done before any lock is taken,
        // so that a peer slow to answer (or cut off) holds up only this call, never the node's
        // other connections or its data path.
        let binding = if to == QpState::ReadyToReceive {
            let from = node.side(conn).st.lock().expect("side").state;
            if !from.can_move_to(to) {
                return Err(FabricError::InvalidTransition { conn, from, to });
            }
            Some(node.bind(conn)?)
        } else {
            None
        };
        let mut control = node.control.lock().expect("control");
        let side = Node::lock_side(&mut control, conn).clone();
        let mut st = side.st.lock().expect("side");
        if !st.state.can_move_to(to) {
            return Err(FabricError::InvalidTransition { conn, from: st.state, to });
        }
        let slow = Duration::from_millis(node.config.slow_fence_ms);
        match to {
            QpState::Reset | QpState::Error => {
                st.state = to;
                st.epoch += 1;
                node.revoke(control, conn, &mut st, slow).map_err(|wait| {
                    // Not reset: a reset side reads as one that never let the peer in.
                    st.state = QpState::Error;
                    wait.into_error(conn.peer)
                })?;
                if to == QpState::Reset {
                    st.binding = None;
                    st.access = Access::NONE;
                    st.fence_refused_since = None;
                    st.cut.clear();
                }
            }
            QpState::Init => {
                st.state = to;
                st.access = access;
            }
            QpState::ReadyToReceive => {
                st.binding = binding;
                st.state = to;
                st.access = access;
                node.sync_registrations(&control, conn, &mut st);
            }
            QpState::ReadyToSend => {
                st.state = to;
                st.access = access;
                node.revoke(control, conn, &mut st, slow)
                    .map_err(|wait| wait.into_error(conn.peer))?;
            }
        }
        Ok(())
    }

    fn set_access_fast(&self, conn: ConnId, access: Access) -> Result<(), PermError> {
        let node = &self.node;
        let control = node.control.lock().expect("control");
        let Some(side) = control.sides.get(&conn).cloned() else {
            return Err(FabricError::UnknownConnection(conn, "never connected").into());
        };
        let mut st = side.st.lock().expect("side");
        if st.state != QpState::ReadyToSend {
            return Err(
                FabricError::InvalidTransition { conn, from: st.state, to: st.state }.into()
            );
        }
        st.access = access;
        let fast = Duration::from_micros(node.config.fast_fence_us);
        if node.revoke(control, conn, &mut st, fast).is_err() {
            // As RDMA may when flags change under load: the side is now in error, and stays
            // unfenced (its fence read still under way) until the slow path's wait ends.
            st.state = QpState::Error;
            st.epoch += 1;
            // The control lock comes before a side's: let go of the side to take both.
            drop(st);
            let control = node.control.lock().expect("control");
            let mut st = side.st.lock().expect("side");
            node.sync_registrations(&control, conn, &mut st);
            return Err(PermError::Busy(conn));
        }
        Ok(())
    }

    fn set_access_slow(&self, conn: ConnId, access: Access) -> Result<(), FabricError> {
        let node = &self.node;
        let control = node.control.lock().expect("control");
        let Some(side) = control.sides.get(&conn).cloned() else {
            return Err(FabricError::UnknownConnection(conn, "never connected"));
        };
        let mut st = side.st.lock().expect("side");
        if st.binding.is_none() {
            return Err(FabricError::UnknownConnection(conn, "never bound to a peer"));
        }
        // Reset: every registration of the side closes, then the fence. A peer that cannot
        // answer within `slow_fence_ms` (stopped, or cut off while its connection lives) may
        // still have an operation half received, whose bytes would land when it goes on: no
        // barrier can be claimed, and the side stays in error, unfenced, until a later call's
        // wait sees the fence answered — or failed because the connection broke (the peer
        // died, or the kernel gave up retransmitting to it), which ends every operation it
        // had under way on it.
        st.state = QpState::Reset;
        st.epoch += 1;
        let slow = Duration::from_millis(node.config.slow_fence_ms);
        node.revoke(control, conn, &mut st, slow).map_err(|wait| {
            // Left in error, not reset: a reset side reads as one that never let the peer in,
            // and a caller could skip the revocation it still owes.
            st.state = QpState::Error;
            wait.into_error(conn.peer)
        })?;
        // Init, ready-to-receive (still bound to the same incarnation), ready-to-send.
        st.state = QpState::ReadyToSend;
        st.access = access;
        // The control lock comes before a side's: let go of the side to take both.
        drop(st);
        let control = node.control.lock().expect("control");
        let mut st = side.st.lock().expect("side");
        node.sync_registrations(&control, conn, &mut st);
        Ok(())
    }
}

impl OfiFabric {
    pub(crate) fn control_regions(&self) -> HashMap<RegionId, OfiRegion> {
        let control = self.node.control.lock().expect("control");
        control.regions.iter().map(|(id, e)| (*id, e.region.clone())).collect()
    }

    pub(crate) fn attach_side(&self, conn: ConnId) -> Result<Arc<Side>, FabricError> {
        let side = self.node.side(conn);
        let mut st = side.st.lock().expect("side");
        if st.attached {
            return Err(FabricError::AlreadyAttached { conn });
        }
        st.attached = true;
        drop(st);
        Ok(side)
    }
}

impl OfiFabric {
    /// The region registered here under `id`, if any.
    pub fn registered(&self, id: RegionId) -> Option<OfiRegion> {
        let control = self.node.control.lock().expect("control");
        control.regions.get(&id).map(|e| e.region.clone())
    }
}
