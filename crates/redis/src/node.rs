//! One replica's Redis: its server, its front, the master that feeds its server the committed
//! stream while it follows, and the replica link that proposes its server's stream while it
//! leads (`docs/apps/redis.md`, "Leader change"). [`RedisMachine`] is the replica's state
//! machine; [`RedisNode`] the rest, started once the replica runs.

use crate::entry::{Applied, Applier, Entry, Leadership};
use crate::front::{accept_tcp, accept_unix, direct_socket, FrontShared};
use crate::history::History;
use crate::link::{self, Committed};
use crate::master::{self, FollowAgain, SharedFeed, HISTORY_BYTES_MAX};
use crate::resp::role_offset;
use crate::server::{Conn, RedisServer, ServerPaths};
use crate::snapshot::Snapshot;
use mu_replica::{Replica, StateMachine};
use std::net::TcpListener;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{info, warn};

const LOG_TARGET: &str = "mu_redis::node";

/// How often the node looks at the replica's election.
const ROLE_POLL: Duration = Duration::from_millis(2);

/// How long this replica must have been elected before it takes over its server.
const ELECTION_SETTLES: Duration = Duration::from_millis(100);

/// How long a new leader's server may go without running more of the stream it was fed (a
/// rebuilt server may have the whole history to run: it is waited for while it progresses).
const CATCH_UP_WAIT: Duration = Duration::from_secs(10);

/// What the state machine and the node share.
pub struct NodeShared {
    /// The committed stream on its way to the local server while this replica follows.
    pub feed: SharedFeed,
    /// This replica's leadership, which an entry of another leader's ends.
    pub committed: Arc<Committed>,
}

/// The replica's state machine: applies entries by feeding the local server what it has not
/// run itself.
pub struct RedisMachine {
    applier: Applier,
    shared: Arc<NodeShared>,
    out: Vec<u8>,
}

impl RedisMachine {
    /// The machine of a replica, and what it shares with the node. `from_start`: it applies
    /// the log from its first entry (not a rejoining replica), and so keeps the committed
    /// stream's history, to rebuild its server from if it is deposed with effects the log does
    /// not hold, and to give a replica that needs a state transfer.
    pub fn new(from_start: bool) -> (RedisMachine, Arc<NodeShared>) {
        let shared =
            Arc::new(NodeShared { feed: SharedFeed::new(from_start), committed: Arc::default() });
        let machine =
            RedisMachine { applier: Applier::default(), shared: shared.clone(), out: Vec::new() };
        (machine, shared)
    }
}

impl StateMachine for RedisMachine {
    fn apply(&mut self, index: u64, request: &[u8]) {
        let applied = self.applier.apply(request, &mut self.out);
        match applied {
            // This process's own leadership: its server ran the stream already.
            Applied::Stream(l) if !self.out.is_empty() && self.shared.committed.began(l) => {
                self.shared.feed.push_own(&self.out);
                self.out.clear();
            }
            Applied::Stream(_) if !self.out.is_empty() => {
                self.shared.feed.push(&self.out);
                self.out.clear();
            }
            Applied::Malformed => warn!(target: LOG_TARGET, "an entry that is not Redis's"),
            _ => {}
        }
        // After the feed: a leadership waits for its marker to be applied, and then finds the
        // whole committed stream queued. Another leadership's `Leader` entry ends this
        // replica's (whatever its server ran since is not the log's).
        let leader = match applied {
            Applied::Leader(l) => Some(l),
            _ => None,
        };
        self.shared.committed.applied(index, leader);
    }

    /// The whole committed stream applied here, and where in the log this replica is.
    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        let feed = self.shared.feed.lock();
        let Some(stream) = &feed.history else {
            return Err(format!(
                "this replica does not hold the whole committed stream (it rejoined without a \
                 state transfer, or the stream outgrew {HISTORY_BYTES_MAX} bytes)"
            ));
        };
        let (source, held) = (self.applier.source(), self.applier.held());
        let (rdb, rdb_offset) = (&stream.rdb[..], stream.rdb_offset);
        Snapshot { source, held, rdb, rdb_offset, stream: &stream.stream }.encode(out);
        Ok(())
    }

    /// Starts this replica's server over from the donor's committed stream.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let s = Snapshot::decode(snapshot)?;
        let history =
            History { rdb: s.rdb.to_vec(), rdb_offset: s.rdb_offset, stream: s.stream.to_vec() };
        self.shared.feed.restore(history)?;
        self.applier = Applier::restored(s.source, s.held.to_vec());
        self.shared.committed.restored(s.source);
        info!(target: LOG_TARGET, rdb_bytes = s.rdb.len(), rdb_offset = s.rdb_offset, stream_bytes = s.stream.len(), "restored from a state transfer: the server starts over from the committed stream");
        Ok(())
    }
}

/// Where a replica's Redis lives.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub id: u16,
    pub run_dir: PathBuf,
    /// The `redis-server` binary.
    pub server_binary: PathBuf,
    /// The largest request an entry holds.
    pub entry_bytes_max: usize,
    /// Where the front also accepts clients over TCP (`host:port`), besides its Unix socket.
    pub client_address: Option<String>,
    /// The kept stream after the history's RDB beyond which the replica replaces it with an RDB
    /// of its server (compaction, which bounds the history and the state transfer).
    pub compact_bytes: usize,
}

impl NodeConfig {
    /// The front's socket of replica `id`.
    pub fn front_socket(run_dir: &Path, id: u16) -> PathBuf {
        run_dir.join(format!("redis-{id}.sock"))
    }
}

/// A replica's server and front, running.
pub struct RedisNode {
    _server: RedisServer,
    failure: Arc<Mutex<Option<String>>>,
}

impl RedisNode {
    /// Starts the server (as a replica of the front's master), the master, the front, and the
    /// thread that follows the replica's election. Call it from the thread that lives as long
    /// as the replica: the server dies with it.
    pub fn start(
        config: NodeConfig,
        replica: Arc<Replica>,
        node: Arc<NodeShared>,
    ) -> Result<RedisNode, String> {
        let master = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("master port: {e}"))?;
        let master_port = master.local_addr().map_err(|e| e.to_string())?.port();
        let paths = ServerPaths::new(&config.run_dir, config.id);
        let server = RedisServer::start(&config.server_binary, paths.clone(), master_port)?;
        let failure = Arc::new(Mutex::new(None));
        let fail = {
            let failure = failure.clone();
            // The first failure only (and none once the node stops: its server's death then
            // breaks links on purpose).
            move |why: String| {
                let mut failure = failure.lock().unwrap_or_else(|p| p.into_inner());
                if failure.is_none() {
                    warn!(target: LOG_TARGET, "{why}");
                    *failure = Some(why);
                }
            }
        };
        spawn_watched("redis-master", fail.clone(), {
            let (node, fail) = (node.clone(), fail.clone());
            // One link at a time: the server's first, and another each time a deposed
            // leader's server follows the log again.
            move || loop {
                let served = match master.accept() {
                    Ok((stream, _)) => {
                        let generation = node.feed.link_generation();
                        master::serve(stream, &node.feed, generation)
                    }
                    Err(e) => Err(format!("master port: {e}")),
                };
                match served {
                    // The server was reconnecting when this replica took it over: no matter.
                    Err(_) if node.feed.lock().closed => {}
                    Err(e) => return fail(e),
                    Ok(()) => {}
                }
            }
        })?;
        let front_socket = NodeConfig::front_socket(&config.run_dir, config.id);
        let _ = std::fs::remove_file(&front_socket);
        let listener = UnixListener::bind(&front_socket)
            .map_err(|e| format!("binding {}: {e}", front_socket.display()))?;
        let shared = Arc::new(FrontShared {
            committed: node.committed.clone(),
            server_socket: paths.socket.clone(),
            leader_hint: (-1).into(),
            me: config.id,
            run_dir: config.run_dir.clone(),
        });
        spawn("redis-front", {
            let shared = shared.clone();
            move || accept_unix(listener, shared, true)
        })?;
        let direct_socket = direct_socket(&config.run_dir, config.id);
        let _ = std::fs::remove_file(&direct_socket);
        let direct = UnixListener::bind(&direct_socket)
            .map_err(|e| format!("binding {}: {e}", direct_socket.display()))?;
        spawn("redis-front-direct", {
            let shared = shared.clone();
            move || accept_unix(direct, shared, false)
        })?;
        if let Some(address) = &config.client_address {
            let tcp = TcpListener::bind(address.as_str())
                .map_err(|e| format!("binding the client address {address}: {e}"))?;
            let shared = shared.clone();
            spawn("redis-front-tcp", move || accept_tcp(tcp, shared))?;
        }
        spawn("redis-compact", {
            let (node, socket) = (node.clone(), paths.socket.clone());
            let bytes = config.compact_bytes;
            move || compact_for_ever(&node, &socket, bytes)
        })?;
        spawn_watched("redis-role", fail.clone(), move || {
            follow_election(&config, master_port, &replica, &node.feed, &shared, fail)
        })?;
        info!(target: LOG_TARGET, front = %front_socket.display(), server = %paths.socket.display(), "redis serving");
        Ok(RedisNode { _server: server, failure })
    }

    /// Why this node stopped serving, if it did: the replica should stop.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for RedisNode {
    fn drop(&mut self) {
        // Before the server is killed (a field, dropped after this).
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert("stopping".into());
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(drop)
        .map_err(|e| format!("starting thread {name}: {e}"))
}

/// Spawns a thread the node cannot serve without: its panic, or its return (each returns only
/// after reporting why, so a second report is dropped), is reported to `fail`, which the
/// replica watches; a thread that died silently would leave a replica that neither feeds nor
/// leads.
fn spawn_watched(
    name: &'static str,
    fail: impl Fn(String) + Send + 'static,
    f: impl FnOnce() + Send + 'static,
) -> Result<(), String> {
    spawn(name, move || {
        let why = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(()) => format!("thread {name} stopped"),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                format!("thread {name} panicked: {what}")
            }
        };
        fail(why);
    })
}

/// Follows the replica's election: when it elects this replica, takes over as leader and
/// proposes the server's stream until the leadership ends; then follows again if its server
/// ran nothing uncommitted, and ends this node otherwise.
fn follow_election(
    config: &NodeConfig,
    master_port: u16,
    replica: &Replica,
    feed: &SharedFeed,
    shared: &FrontShared,
    fail: impl Fn(String),
) {
    let me = config.id;
    let mut elected_since: Option<Instant> = None;
    loop {
        std::thread::sleep(ROLE_POLL);
        let leader = replica.leader().map(|l| l.0);
        shared.leader_hint.store(leader.map_or(-1, i32::from), Ordering::Relaxed);
        if leader != Some(me) {
            elected_since = None;
            continue;
        }
        // An election settles for a moment before a replica takes over its server: a
        // replica that takes over and is deposed must stop (see `docs/apps/redis.md`).
        let since = *elected_since.get_or_insert_with(Instant::now);
        if since.elapsed() < ELECTION_SETTLES {
            continue;
        }
        let leadership = Leadership { node: me, term_ns: now_ns() };
        let mut marker = Vec::new();
        Entry::Leader(leadership).encode(&mut marker);
        let mut outcomes = Vec::new();
        replica.propose_many(&[&marker], &mut outcomes);
        let Some(Ok(marker_index)) = outcomes.first() else { continue };
        if !shared.committed.wait_applied(*marker_index) {
            continue;
        }
        // Every entry up to the marker is applied: the feed holds the whole committed stream.
        if let Err(e) = caught_up(config, feed) {
            return fail(format!("replica {me} could not take over its server: {e}"));
        }
        if replica.leader().map(|l| l.0) != Some(me) {
            // Deposed already: its server is still a replica of the log; go on following.
            elected_since = None;
            continue;
        }
        let (wake_pump, wake_front) = match UnixStream::pair() {
            Ok(pair) => pair,
            Err(e) => return fail(format!("replica {me}: a wake-up socket: {e}")),
        };
        if let Err(e) = wake_front.set_nonblocking(true) {
            return fail(format!("replica {me}: a wake-up socket: {e}"));
        }
        let (conn, offset) = match promote(config, feed) {
            Ok(link) => link,
            Err(e) => return fail(format!("replica {me} could not take over its server: {e}")),
        };
        // Begun only if the marker is still the last `Leader` entry applied here (see
        // `Committed`): another's applied since, during the catch-up or the promotion, and this
        // leadership never starts; its server, promoted but not yet written to by any client,
        // follows the log again.
        let Some(epoch) = shared.committed.begin(leadership, offset, wake_front) else {
            drop(conn);
            let why = "another leader's entry was applied before this leadership began";
            match demote(config, master_port, feed, why) {
                Ok(()) => {
                    elected_since = None;
                    continue;
                }
                Err(e) => return fail(format!("replica {me} was replaced before it began to lead, and cannot follow again ({e}): it stops; restart it with --rejoin")),
            }
        };
        info!(target: LOG_TARGET, replica = me, epoch, offset, "leading: proposing the server's stream");
        let why = link::pump(
            leadership,
            conn,
            offset,
            replica,
            config.entry_bytes_max,
            &shared.committed,
            wake_pump,
        );
        shared.committed.end();
        match demote(config, master_port, feed, &why) {
            Ok(()) => elected_since = None,
            Err(e) => {
                return fail(format!(
                    "replica {me} stopped leading ({why}) and cannot follow again ({e}): it \
                     stops; restart it with --rejoin"
                ))
            }
        }
    }
}

/// How often the compaction thread looks at the kept stream.
const COMPACTION_POLL: Duration = Duration::from_millis(200);

/// How long a leader waits for the stream up to its RDB's offset to commit.
const COMPACTION_COMMIT_WAIT: Duration = Duration::from_secs(5);

/// Compacts the kept stream whenever it grows past `bytes`: an RDB of this replica's server
/// at an offset of the committed stream replaces the stream up to there (`docs/apps/redis.md`,
/// "Compaction"). Runs as long as the process.
///
/// A compaction that failed (an RDB no smaller than what it would replace, a server between
/// roles) is tried again once the kept stream has grown by half of `bytes` more: a fork and a
/// dump of the whole data set each time would cost far more than the stream they save.
fn compact_for_ever(node: &NodeShared, socket: &Path, bytes: usize) {
    let mut threshold = bytes;
    loop {
        std::thread::sleep(COMPACTION_POLL);
        if !node.feed.wants_compaction(threshold) {
            continue;
        }
        let Some(compacted) = compact_once(node, socket) else { continue };
        match compacted {
            Ok((rdb_bytes, offset)) => {
                threshold = bytes;
                info!(target: LOG_TARGET, rdb_bytes, offset, "compacted the kept stream behind an RDB of the server")
            }
            Err(e) => {
                threshold = node.feed.kept_stream_bytes() + bytes / 2;
                warn!(target: LOG_TARGET, retry_at_bytes = threshold, "compacting the kept stream: {e}");
            }
        }
    }
}

/// One compaction, if this replica's server runs only committed stream or its leadership can
/// show that what its RDB holds is committed; `None` if neither (between roles).
///
/// A follower's server, linked, has run committed stream only: its RDB is at an offset of it.
/// A leader's server runs commands before they commit: its RDB counts only once the stream up
/// to its offset is committed under the same leadership (then those are the bytes the history
/// holds there, not another leader's).
fn compact_once(node: &NodeShared, socket: &Path) -> Option<Result<(usize, u64), String>> {
    let rdb = if let Some(epoch) = node.committed.epoch() {
        link::rdb_at_offset(socket, false).and_then(|(rdb, offset)| {
            if node.committed.wait_committed(epoch, offset, COMPACTION_COMMIT_WAIT) {
                Ok((rdb, offset))
            } else {
                Err(format!("the stream up to the RDB's offset {offset} did not commit"))
            }
        })
    } else if node.feed.linked() {
        link::rdb_at_offset(socket, true)
    } else {
        return None;
    };
    Some(rdb.and_then(|(rdb, offset)| {
        let rdb_bytes = rdb.len();
        node.feed.compact(rdb, offset).map(|()| (rdb_bytes, offset))
    }))
}

/// Makes a deposed leader's server (deposed because `why`) a replica of the log again: if it
/// ran nothing beyond the committed stream it keeps its data (`+CONTINUE`); if it did, it is
/// emptied and runs the whole committed stream again (a full resync from the history); either
/// way it is then fed what the new leaders commit (`docs/apps/redis.md`, "A leader that stops
/// leading").
fn demote(
    config: &NodeConfig,
    master_port: u16,
    feed: &SharedFeed,
    why: &str,
) -> Result<(), String> {
    let paths = ServerPaths::new(&config.run_dir, config.id);
    let mut admin = Conn::connect(&paths.socket).map_err(|e| e.to_string())?;
    // First a replica, so that no client's write runs after the check below. The feed is
    // still closed: the front's master refuses the server's link until the check passed.
    let port = master_port.to_string();
    feed.expect_link();
    let reply = admin.call(&[b"REPLICAOF", b"127.0.0.1", port.as_bytes()])?;
    if !matches!(reply, crate::resp::Value::Simple(_)) {
        return Err(crate::server::unexpected("REPLICAOF", &reply));
    }
    let me = config.id;
    match feed.follow_again(repl_offset(&mut admin)?)? {
        FollowAgain::Continue { offset } => {
            info!(target: LOG_TARGET, replica = me, why, offset, "deposed with every effect of its server committed: following the log again");
        }
        FollowAgain::Rebuild { server_offset, stream_end } => {
            warn!(target: LOG_TARGET, replica = me, why, server_offset, stream_end, "deposed with effects the log does not hold: its server starts over from the committed stream");
        }
    }
    Ok(())
}

/// The server's `master_repl_offset`: on a replica, how far it has run its master's stream
/// (`ROLE` answers -1 while its link is down); on a master, where its stream is.
fn repl_offset(admin: &mut Conn) -> Result<u64, String> {
    let info = match admin.call(&[b"INFO", b"replication"])? {
        crate::resp::Value::Bulk(text) => String::from_utf8_lossy(&text).into_owned(),
        other => return Err(crate::server::unexpected("INFO replication", &other)),
    };
    info.lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|o| o.trim().parse::<u64>().ok())
        .ok_or_else(|| "INFO replication without master_repl_offset".into())
}

/// Waits until the local server has run every byte of the committed stream it was fed.
fn caught_up(config: &NodeConfig, feed: &SharedFeed) -> Result<(), String> {
    let paths = ServerPaths::new(&config.run_dir, config.id);
    let mut admin = Conn::connect(&paths.socket).map_err(|e| e.to_string())?;
    let mut deadline = Instant::now() + CATCH_UP_WAIT;
    let mut progress = None;
    loop {
        let (drained, fresh, target) = {
            let f = feed.lock();
            let fresh = !f.ever_connected;
            (f.queue.is_empty(), fresh, f.connected.then_some(f.base_offset + f.written_bytes))
        };
        // A server that was never fed has nothing to run (and may not have connected).
        if drained && fresh {
            return Ok(());
        }
        let offset = role_offset(&admin.call(&[b"ROLE"])?);
        if let (true, Some(target)) = (drained, target) {
            if offset == Some(target) {
                return Ok(());
            }
        }
        // Bytes written or run since the last look: the server is still catching up.
        let now = (offset, target);
        if progress != Some(now) {
            progress = Some(now);
            deadline = Instant::now() + CATCH_UP_WAIT;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "its server ran none of the committed stream fed it for {CATCH_UP_WAIT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Makes the local server (caught up with the committed stream) a master, and opens the
/// replica link to it.
fn promote(config: &NodeConfig, feed: &SharedFeed) -> Result<(Conn, u64), String> {
    let paths = ServerPaths::new(&config.run_dir, config.id);
    let mut admin = Conn::connect(&paths.socket).map_err(|e| e.to_string())?;
    feed.close();
    // Where the server's history as the front's replica ends. What holds from here: the feed
    // is closed and its thread has left the link, so no byte is in flight or will be sent
    // (the front's master refuses a link while closed), and `at` counts every byte taken
    // from the queue; the server is promoted only once it has run up to `at` exactly.
    let at = feed.wait_unlinked(CATCH_UP_WAIT)?;
    let deadline = Instant::now() + CATCH_UP_WAIT;
    loop {
        let offset = repl_offset(&mut admin)?;
        if offset == at {
            break;
        }
        if offset > at || Instant::now() > deadline {
            return Err(format!(
                "its server is at offset {offset}, the stream fed it ends at {at}"
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let reply = admin.call(&[b"REPLICAOF", b"NO", b"ONE"])?;
    if !matches!(reply, crate::resp::Value::Simple(_)) {
        return Err(crate::server::unexpected("REPLICAOF NO ONE", &reply));
    }
    link::open(&paths.socket, at)
}

/// The wall clock in nanoseconds: a leadership's term (distinct across restarts of a replica).
fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
