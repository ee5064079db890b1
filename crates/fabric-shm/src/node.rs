//! The node: control plane ([`ShmFabric`]), regions ([`ShmRegion`]) and the data path
//! ([`ShmEndpoint`]).

use crate::endpoint::ShmEndpoint;
use crate::fence::{own_pid_namespace, PeerProcess};
use crate::guard::{in_flight_incarnation, Acl, Slot};
use crate::layout::{
    self, CtlHeader, RegionHeader, CTL_BYTES, HEADER_BYTES, MAX_CHANNELS, MAX_NODES,
};
use crate::liveness::{self, Holder};
use crate::mapping::{ensure_private_dir, Mapping};
use crate::prefault::Prefaulter;
use crate::region::ShmRegion;
use mu_fabric::{Access, ConnId, Fabric, FabricError, NodeId, PermError, QpState, RegionId};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Largest inline payload. Inline data is copied when posted, like every other write here, so the
/// limit only mirrors what RDMA devices offer (commonly 128–1024 bytes).
pub const MAX_INLINE_BYTES: usize = 512;
/// Largest region.
pub const MAX_REGION_BYTES: usize = 1 << 40;
/// Longest stretch of a write or read copied in one guarded section.
pub const COPY_CHUNK_BYTES: usize = 64 * 1024;
/// Deepest completion queue (its ring is allocated up front, as a device's would be).
pub const MAX_CQ_DEPTH: usize = 1 << 20;
/// How long `create` waits for a node lock held by someone else before reporting the node as
/// running: a child process forked by another thread holds a copy of the lock until it execs.
const LOCK_WAIT: Duration = Duration::from_secs(1);

/// The nodes running in this process, by (run directory, node id): a second start of one of them
/// is refused at once, without waiting for the lock.
static RUNNING_HERE: Mutex<Vec<(PathBuf, NodeId)>> = Mutex::new(Vec::new());

/// The protocol a node records when its user names none: plain use of the fabric, as in its
/// own tests and benchmarks.
pub const DEFAULT_PROTOCOL: &str = "fabric";

/// How to start a node.
#[derive(Clone, Debug)]
pub struct ShmConfig {
    /// The run directory, shared by the cluster's nodes; created private (0700) if absent.
    pub run_dir: PathBuf,
    /// The cluster's id: a node refuses a run directory or a peer of another cluster.
    pub cluster_id: u64,
    /// What runs on this fabric and at which version, e.g. `mu/4`: recorded in the run
    /// directory by the first node, and a node that speaks anything else refuses the directory.
    /// Nodes of one cluster must agree on the protocol as well as on the cluster id, or a
    /// replica of an older build would read logs and permission words it does not understand.
    pub protocol: String,
    /// This node's id, below 64.
    pub node: NodeId,
    /// How long a fast permission change waits for an in-flight operation before giving up with
    /// [`PermError::Busy`].
    pub fast_wait_ns: u64,
    /// How long a slow permission change (or a move to reset or error) waits for an in-flight
    /// operation before fencing the writer's process.
    pub fence_after_ms: u64,
    /// How long to wait for a fenced process to die.
    pub fence_death_timeout_ms: u64,
    /// Whether the thread that holds the node's liveness mutex spins on a core of its own
    /// instead of sleeping. A killed node reads as dead once the kernel has ended that thread,
    /// and a sleeping thread must first be woken, which takes tens of microseconds where an
    /// idle virtual CPU has to be woken for it. For hosts with a core per polling thread.
    pub liveness_spin: bool,
}

impl ShmConfig {
    /// Names what runs on the fabric (see [`ShmConfig::protocol`]).
    pub fn with_protocol(mut self, protocol: impl Into<String>) -> ShmConfig {
        self.protocol = protocol.into();
        self
    }

    pub fn new(run_dir: impl Into<PathBuf>, cluster_id: u64, node: NodeId) -> ShmConfig {
        ShmConfig {
            run_dir: run_dir.into(),
            cluster_id,
            protocol: DEFAULT_PROTOCOL.to_string(),
            node,
            fast_wait_ns: 20_000,
            fence_after_ms: 20,
            fence_death_timeout_ms: 5_000,
            liveness_spin: false,
        }
    }
}

/// A node on the shared-memory fabric. Cheap to clone; the node lives until the last clone and
/// every endpoint of it are dropped, and then reads as dead to its peers (a region handle keeps
/// its memory mapped, not the node alive).
#[derive(Clone)]
pub struct ShmFabric {
    pub(crate) node: Arc<Node>,
}

pub(crate) struct Node {
    pub(crate) config: ShmConfig,
    pub(crate) incarnation: u32,
    ctl: Arc<Mapping>,
    holder: Mutex<Option<Holder>>,
    pub(crate) regions: Mutex<HashMap<RegionId, ShmRegion>>,
    peers: Mutex<HashMap<(NodeId, u32), Arc<Peer>>>,
    pub(crate) attached: Mutex<HashSet<ConnId>>,
    /// Serializes control-plane changes (and their barriers) to this node's connection sides: a
    /// change decides whether to wait from the `acl` it replaces, so two at once could each see
    /// the other's state and neither wait for a writer admitted in between.
    control: Mutex<()>,
    /// Fills in the page tables of peers' regions as they are mapped (see `crate::prefault`).
    pub(crate) prefault: Prefaulter,
    /// Held for the node's life: a second process (or a second `create` in this one) for the same
    /// node id fails instead of running beside it.
    _lock: File,
    /// Dropped after `_lock` (fields drop in declaration order), so that a restart in this
    /// process finds the lock free once the registry says the node is gone.
    _running_here: RunningHere,
}

/// A peer incarnation's control segment and the regions of it mapped so far.
pub(crate) struct Peer {
    node: NodeId,
    pub(crate) incarnation: u32,
    process: PeerProcess,
    pub(crate) ctl: Mapping,
    regions: Mutex<HashMap<RegionId, Arc<RemoteRegion>>>,
    /// The peer's count of registered regions (`layout::H_REGIONS`) when we last mapped them.
    regions_seen: AtomicU64,
}

impl Peer {
    /// Whether every thread of the peer's process is gone (so nothing of it still copies).
    fn process_exited(&self) -> bool {
        self.process.exited() == Some(true)
    }
}

pub(crate) struct RemoteRegion {
    pub(crate) map: Mapping,
    pub(crate) len_bytes: u64,
    pub(crate) access: Access,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind, still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ShmFabric {
    /// Starts node `config.node` in `config.run_dir`: claims the directory for the cluster, takes
    /// the node's lock, and publishes a fresh control segment (a new incarnation).
    pub fn create(config: ShmConfig) -> Result<ShmFabric, FabricError> {
        let node = config.node;
        if usize::from(node.0) >= MAX_NODES {
            return Err(FabricError::Config(format!(
                "node id {} is too large: ids go up to {}",
                node.0,
                MAX_NODES - 1
            )));
        }
        let dir = &config.run_dir;
        ensure_private_dir(dir)?;
        layout::claim_cluster(dir, config.cluster_id, &config.protocol)?;
        let key = (std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone()), node);
        {
            let mut running = lock(&RUNNING_HERE);
            if running.contains(&key) {
                return Err(FabricError::Config(format!(
                    "node {node} is already running in this run directory (in this process)"
                )));
            }
            running.push(key.clone());
        }
        let registered = RunningHere(key);
        let lock_file = take_node_lock(&layout::lock_file(dir, node), node)?;

        // An earlier incarnation's files: it is dead (we hold the lock), so its successor takes the
        // next incarnation number and its regions can go.
        let ctl_path = layout::ctl_file(dir, node);
        let previous =
            layout::open_ctl(dir, node, config.cluster_id).map_or(0, |(_, h)| h.incarnation);
        // The lock file keeps the last incarnation number: a node that shut down cleanly removed
        // its control file, and its successor must still not reuse its number, or peers would
        // take the new node for the dead one they have cached.
        let incarnation = next_incarnation(&lock_file, dir, node, previous)?;
        remove_stale_regions(dir, node);

        let tmp_path = dir.join(format!("n{}.ctl.new", node.0));
        let _ = std::fs::remove_file(&tmp_path);
        let ctl = Arc::new(Mapping::create(&tmp_path, CTL_BYTES)?);
        layout::write_ctl_header(
            &ctl,
            &CtlHeader {
                node,
                cluster_id: config.cluster_id,
                incarnation,
                pid: std::process::id(),
                pid_namespace: own_pid_namespace(),
            },
        );
        let holder = Holder::start(ctl.clone(), config.liveness_spin)?;
        std::fs::rename(&tmp_path, &ctl_path)
            .map_err(|e| FabricError::io(format!("publishing {}", ctl_path.display()), e))?;
        Ok(ShmFabric {
            node: Arc::new(Node {
                config,
                incarnation,
                ctl,
                holder: Mutex::new(Some(holder)),
                regions: Mutex::new(HashMap::new()),
                peers: Mutex::new(HashMap::new()),
                attached: Mutex::new(HashSet::new()),
                control: Mutex::new(()),
                prefault: Prefaulter::start(),
                _lock: lock_file,
                _running_here: registered,
            }),
        })
    }

    /// This node's incarnation number.
    pub fn incarnation(&self) -> u32 {
        self.node.incarnation
    }

    /// The node's configuration.
    pub fn config(&self) -> &ShmConfig {
        &self.node.config
    }

    /// Makes the node read as dead to its peers at once, as if its process had been killed (for
    /// tests that keep several nodes in one process). Its memory stays mapped by its peers.
    pub fn crash(&self) {
        drop(lock(&self.node.holder).take());
    }

    /// The in-flight sequence number of `conn`'s peer on this node's side of `conn`: odd while the
    /// peer has an operation in flight into this node. For tests and diagnostics.
    pub fn peer_inflight_seq(&self, conn: ConnId) -> Result<u64, FabricError> {
        Ok(self.node.my_slot(conn)?.inflight_seq())
    }
}

/// A node's entry in [`RUNNING_HERE`], removed when the node is dropped.
struct RunningHere((PathBuf, NodeId));

impl Drop for RunningHere {
    fn drop(&mut self) {
        lock(&RUNNING_HERE).retain(|k| *k != self.0);
    }
}

fn take_node_lock(path: &std::path::Path, node: NodeId) -> Result<File, FabricError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| FabricError::io(format!("opening {}", path.display()), e))?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        // SAFETY: flock on a descriptor we own; no memory is passed.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(file);
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(FabricError::io(format!("locking {}", path.display()), err));
        }
        if Instant::now() >= deadline {
            return Err(FabricError::Config(format!(
                "node {node} is already running in this run directory (another process holds {})",
                path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Reads the last incarnation number from the (locked) lock file and stores the next one.
///
/// The number is written in place, at a fixed width, over the one before: truncating first
/// left an empty file to a start killed in between, and the next start took incarnation 1
/// again, which peers still bound to the first incarnation 1 let in. A file that holds
/// something else than a number is refused rather than read as 0. The incarnations in the
/// node's region files left behind count as well (a lock file lost with them still there).
fn next_incarnation(
    lock_file: &File,
    dir: &std::path::Path,
    node: NodeId,
    previous_ctl: u32,
) -> Result<u32, FabricError> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::FileExt;
    let mut f = lock_file;
    let mut bytes = Vec::new();
    f.seek(SeekFrom::Start(0))
        .and_then(|_| f.take(64).read_to_end(&mut bytes))
        .map_err(|e| FabricError::io("reading the node's lock file", e))?;
    // Bytes that are not text are garbled like any other non-number, below.
    let text = String::from_utf8_lossy(&bytes);
    let in_file = match text.trim() {
        "" => 0,
        number => number.parse::<u32>().map_err(|_| {
            FabricError::Config(format!(
                "node {node}'s lock file in {} holds {:?}, not an incarnation number: remove \
                 the run directory's files (`mu cluster down`) and start the cluster anew",
                dir.display(),
                number.chars().take(40).collect::<String>()
            ))
        })?,
    };
    let last = in_file.max(previous_ctl).max(region_incarnations(dir, node));
    let next = last.checked_add(1).ok_or_else(|| {
        FabricError::Config(
            "this node id has used up its incarnation numbers; use a new run directory".into(),
        )
    })?;
    // Ten digits hold any u32, so the new text covers the old whole.
    lock_file
        .write_all_at(format!("{next:010}\n").as_bytes(), 0)
        .and_then(|()| lock_file.sync_data())
        .map_err(|e| FabricError::io("writing the node's lock file", e))?;
    Ok(next)
}

/// The highest incarnation named by `node`'s region files in `dir` (`n<node>.i<inc>.r<id>`).
fn region_incarnations(dir: &std::path::Path, node: NodeId) -> u32 {
    let prefix = format!("n{}.i", node.0);
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(&prefix)?;
            rest.split_once(".r")?.0.parse::<u32>().ok()
        })
        .max()
        .unwrap_or(0)
}

fn remove_stale_regions(dir: &std::path::Path, node: NodeId) {
    let prefix = format!("n{}.i", node.0);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

impl Node {
    pub(crate) fn check_conn(&self, conn: ConnId) -> Result<(), FabricError> {
        if usize::from(conn.peer.0) >= MAX_NODES {
            return Err(FabricError::UnknownConnection(conn, "peer id too large"));
        }
        if usize::from(conn.channel) >= MAX_CHANNELS {
            return Err(FabricError::UnknownConnection(conn, "channel too large"));
        }
        if conn.peer == self.config.node {
            return Err(FabricError::UnknownConnection(conn, "a node does not connect to itself"));
        }
        Ok(())
    }

    pub(crate) fn my_slot(&self, conn: ConnId) -> Result<&Slot, FabricError> {
        self.check_conn(conn)?;
        Ok(self.ctl.atomics_at::<Slot>(layout::slot_offset(conn.peer, conn.channel)))
    }

    /// Whether the latest incarnation of `peer` we reached has died: its death flag, kept by the
    /// kernel, is one word in a mapping we hold already.
    fn crash_notified(&self, peer: NodeId) -> bool {
        self.latest_peer(peer).is_some_and(|p| !liveness::is_alive(&p.ctl))
    }

    /// The latest incarnation of `peer` we reached.
    fn latest_peer(&self, peer: NodeId) -> Option<Arc<Peer>> {
        let peers = lock(&self.peers);
        peers.values().filter(|p| p.node == peer).max_by_key(|p| p.incarnation).cloned()
    }

    /// The peer's current incarnation, checked alive, with the regions it registered mapped.
    ///
    /// The latest incarnation we reached, if it is still alive, is the current one: a node runs
    /// one incarnation at a time (its lock file), and the kernel marks an incarnation dead
    /// before the process lets go of that lock. So only when it died (or none is known) does
    /// this open the peer's control file, which costs tens of microseconds (most of a binding,
    /// and bindings are part of permission switches).
    fn lookup_peer(&self, peer: NodeId) -> Result<Arc<Peer>, FabricError> {
        let entry = match self.latest_peer(peer) {
            Some(known) if liveness::is_alive(&known.ctl) => known,
            // Died and not started again: its old control file is still there. Said without
            // mapping it, since the background plane asks about a dead peer once per read
            // period, on the thread that also serves permission requests.
            Some(dead)
                if layout::ctl_incarnation(&self.config.run_dir, peer)
                    == Some(dead.incarnation) =>
            {
                return Err(FabricError::PeerUnreachable(
                    peer,
                    format!("node {peer} (incarnation {}) is dead", dead.incarnation),
                ));
            }
            _ => self.open_peer(peer)?,
        };
        entry.map_registered(&self.config, &self.prefault);
        Ok(entry)
    }

    /// Opens the peer's current control segment, checks that it is ours to talk to and alive, and
    /// pins its process. Incarnations of the peer that no side of ours is bound to any more are
    /// forgotten, so that their memory goes back to the system once no endpoint uses it.
    fn open_peer(&self, peer: NodeId) -> Result<Arc<Peer>, FabricError> {
        let (ctl, header) =
            match layout::open_ctl(&self.config.run_dir, peer, self.config.cluster_id) {
                Ok(found) => found,
                Err(FabricError::Io { .. }) => {
                    return Err(FabricError::PeerUnreachable(
                        peer,
                        format!("no node {peer} in {}", self.config.run_dir.display()),
                    ))
                }
                Err(e) => return Err(e),
            };
        if !liveness::is_alive(&ctl) {
            return Err(FabricError::PeerUnreachable(
                peer,
                format!("node {peer} (incarnation {}) is dead", header.incarnation),
            ));
        }
        let mut peers = lock(&self.peers);
        let bound: Vec<u32> = (0..MAX_CHANNELS as u8)
            .map(|channel| {
                self.ctl
                    .atomics_at::<Slot>(layout::slot_offset(peer, channel))
                    .acl()
                    .peer_incarnation
            })
            .collect();
        peers.retain(|&(node, incarnation), _| node != peer || bound.contains(&incarnation));
        let entry = peers
            .entry((peer, header.incarnation))
            .or_insert_with(|| {
                Arc::new(Peer {
                    node: peer,
                    incarnation: header.incarnation,
                    process: PeerProcess::pin(header.pid, header.pid_namespace, &ctl),
                    ctl,
                    regions: Mutex::new(HashMap::new()),
                    regions_seen: AtomicU64::new(0),
                })
            })
            .clone();
        Ok(entry)
    }

    pub(crate) fn bound_peer(&self, peer: NodeId, incarnation: u32) -> Option<Arc<Peer>> {
        lock(&self.peers).get(&(peer, incarnation)).cloned()
    }

    /// Changes `conn`'s side from `before` to what `change` makes of it, as one atomic step against
    /// the data path (which may move the side to error meanwhile: then `change` is asked again),
    /// and makes the change a barrier: see [`Node::await_barrier`]. The caller holds `control`.
    fn change_side(
        &self,
        conn: ConnId,
        wait: BarrierWait,
        change: impl Fn(Acl) -> Result<Acl, FabricError>,
    ) -> Result<(), PermError> {
        let slot = self.my_slot(conn)?;
        let mut before = slot.acl();
        loop {
            let after = change(before)?;
            match slot.replace(before, after) {
                Ok(word) => return self.await_barrier(conn, slot, before, after, word, wait),
                Err(now) => before = now,
            }
        }
    }

    /// After `before` was replaced by `after` on `conn`'s side, with `word` in flight (if any):
    /// waits until no operation that `after` forbids can still land.
    ///
    /// Only a writer of the incarnation bound in `before` can have been admitted (a writer checks
    /// the binding after marking itself in flight), so that is the only one to wait for — and the
    /// only process ever fenced. A word left odd by another incarnation belongs to a writer that
    /// was refused, or died refused: it copies nothing. `before.state` is no guide to what that
    /// writer was admitted under: after a fast change that gave up with `Busy`, the side is in
    /// error while the admitted copy goes on.
    fn await_barrier(
        &self,
        conn: ConnId,
        slot: &Slot,
        before: Acl,
        after: Acl,
        word: Option<u64>,
        wait: BarrierWait,
    ) -> Result<(), PermError> {
        let Some(word) = word else { return Ok(()) };
        let writer = in_flight_incarnation(word);
        if !after.takes_away_from(before) || writer != before.peer_incarnation {
            return Ok(());
        }
        let peer = self.bound_peer(conn.peer, writer).ok_or_else(|| FabricError::FenceFailed {
            node: conn.peer,
            why: format!("incarnation {writer} is in flight but was never mapped here"),
        })?;
        let settled = || (!slot.still_in_flight(word) || peer.process_exited()).then_some(());
        match wait {
            BarrierWait::Fast => {
                let deadline = Instant::now() + Duration::from_nanos(self.config.fast_wait_ns);
                while settled().is_none() {
                    if Instant::now() >= deadline {
                        // As on RDMA, a flag change under load breaks the connection. The
                        // revocation is not a barrier yet: the slow path (which can fence)
                        // finishes the job.
                        slot.move_to_error(after);
                        return Err(PermError::Busy(conn));
                    }
                    std::hint::spin_loop();
                }
                Ok(())
            }
            BarrierWait::Slow => {
                let patience = Duration::from_millis(self.config.fence_after_ms);
                if mu_fabric::wait::Backoff::BACKGROUND.wait_for(patience, settled).is_some() {
                    return Ok(());
                }
                // The writer is stuck in flight: fence its process for good.
                match peer.process.fence(Duration::from_millis(self.config.fence_death_timeout_ms))
                {
                    Ok(()) => Ok(()),
                    // A peer we could not pin (another pid namespace) whose liveness lock has been
                    // dead for the whole wait: its threads died with it long ago.
                    Err(_) if !liveness::is_alive(&peer.ctl) => Ok(()),
                    Err(why) => Err(FabricError::FenceFailed { node: conn.peer, why }.into()),
                }
            }
        }
    }
}

/// How a barrier waits for an in-flight writer.
#[derive(Clone, Copy)]
enum BarrierWait {
    /// Spin up to `fast_wait_ns`, then give up with `Busy` and leave the side in error.
    Fast,
    /// Wait up to `fence_after_ms`, then fence the writer's process.
    Slow,
}

fn fabric_error(e: PermError) -> FabricError {
    match e {
        PermError::Fabric(e) => e,
        PermError::Busy(conn) => FabricError::FenceFailed { node: conn.peer, why: "busy".into() },
    }
}

impl Fabric for ShmFabric {
    type Region = ShmRegion;
    type Endpoint = ShmEndpoint;

    fn backend_name(&self) -> &'static str {
        "shm"
    }

    fn node(&self) -> NodeId {
        self.node.config.node
    }

    fn max_inline_bytes(&self) -> usize {
        MAX_INLINE_BYTES
    }

    fn register_region(
        &self,
        id: RegionId,
        len_bytes: usize,
        access: Access,
    ) -> Result<ShmRegion, FabricError> {
        if len_bytes == 0 {
            return Err(FabricError::BadRegionSize {
                len_bytes,
                why: "a region needs at least one byte",
            });
        }
        if len_bytes > MAX_REGION_BYTES {
            return Err(FabricError::BadRegionSize { len_bytes, why: "larger than 1 TiB" });
        }
        let mut regions = lock(&self.node.regions);
        if regions.contains_key(&id) {
            return Err(FabricError::RegionExists(id));
        }
        let cfg = &self.node.config;
        let path = layout::region_file(&cfg.run_dir, cfg.node, self.node.incarnation, id);
        let map = Mapping::create(&path, HEADER_BYTES + len_bytes)?;
        layout::write_region_header(
            &map,
            &RegionHeader {
                node: cfg.node,
                cluster_id: cfg.cluster_id,
                incarnation: self.node.incarnation,
                region: id,
                len_bytes: len_bytes as u64,
                access,
            },
        );
        self.node.ctl.u64_at(layout::H_REGIONS).fetch_add(1, Ordering::Release);
        let region = ShmRegion { id, len_bytes, map: Arc::new(map) };
        regions.insert(id, region.clone());
        Ok(region)
    }

    fn endpoint(&self, depth: usize) -> Result<ShmEndpoint, FabricError> {
        if depth == 0 || depth > MAX_CQ_DEPTH {
            return Err(FabricError::Config(format!(
                "a completion queue depth of {depth} is out of range: 1 to {MAX_CQ_DEPTH}"
            )));
        }
        Ok(ShmEndpoint::new(self.clone(), depth))
    }

    fn qp_state(&self, conn: ConnId) -> Result<QpState, FabricError> {
        Ok(self.node.my_slot(conn)?.acl().state)
    }

    fn crash_notified(&self, peer: NodeId) -> bool {
        self.node.crash_notified(peer)
    }

    fn qp_access(&self, conn: ConnId) -> Result<Access, FabricError> {
        Ok(self.node.my_slot(conn)?.acl().access)
    }

    fn modify_qp(&self, conn: ConnId, to: QpState, access: Access) -> Result<(), FabricError> {
        let node = &self.node;
        let _control = lock(&node.control);
        // Binding to the peer's current incarnation happens before the change, outside the
        // compare-and-swap loop: it opens files.
        let bind = if to == QpState::ReadyToReceive {
            let from = node.my_slot(conn)?.acl().state;
            if !from.can_move_to(to) {
                return Err(FabricError::InvalidTransition { conn, from, to });
            }
            Some(node.lookup_peer(conn.peer)?.incarnation)
        } else {
            None
        };
        node.change_side(conn, BarrierWait::Slow, |before| {
            if !before.state.can_move_to(to) {
                return Err(FabricError::InvalidTransition { conn, from: before.state, to });
            }
            Ok(match to {
                QpState::Reset => Acl { state: QpState::Reset, access: Access::NONE, ..before },
                QpState::Error => Acl { state: QpState::Error, ..before },
                QpState::Init => Acl { state: QpState::Init, access, ..before },
                QpState::ReadyToReceive => Acl {
                    peer_incarnation: bind.expect("bound above"),
                    state: QpState::ReadyToReceive,
                    access,
                },
                QpState::ReadyToSend => Acl { state: QpState::ReadyToSend, access, ..before },
            })
        })
        .map_err(fabric_error)
    }

    fn set_access_fast(&self, conn: ConnId, access: Access) -> Result<(), PermError> {
        let _control = lock(&self.node.control);
        self.node.change_side(conn, BarrierWait::Fast, |before| {
            if !matches!(before.state, QpState::ReadyToSend | QpState::ReadyToReceive) {
                return Err(FabricError::InvalidTransition {
                    conn,
                    from: before.state,
                    to: before.state,
                });
            }
            Ok(Acl { access, ..before })
        })
    }

    fn set_access_slow(&self, conn: ConnId, access: Access) -> Result<(), FabricError> {
        let node = &self.node;
        let _control = lock(&node.control);
        // Reset is the barrier; init, ready-to-receive and ready-to-send then re-open the side with
        // the new flags, bound to the same peer incarnation (as verbs re-supplies the same remote
        // queue pair number).
        node.change_side(conn, BarrierWait::Slow, |before| {
            if before.peer_incarnation == 0 {
                return Err(FabricError::InvalidTransition {
                    conn,
                    from: before.state,
                    to: QpState::ReadyToSend,
                });
            }
            Ok(Acl { state: QpState::Reset, access: Access::NONE, ..before })
        })
        .map_err(fabric_error)?;
        for state in [QpState::Init, QpState::ReadyToReceive, QpState::ReadyToSend] {
            node.change_side(conn, BarrierWait::Slow, |before| Ok(Acl { state, access, ..before }))
                .map_err(fabric_error)?;
        }
        Ok(())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        drop(lock(&self.holder).take());
        // Remove our files if they are still ours (a successor may have replaced the control file).
        let cfg = &self.config;
        for id in lock(&self.regions).keys() {
            let _ = std::fs::remove_file(layout::region_file(
                &cfg.run_dir,
                cfg.node,
                self.incarnation,
                *id,
            ));
        }
        let ctl_path = layout::ctl_file(&cfg.run_dir, cfg.node);
        let ours = layout::open_ctl(&cfg.run_dir, cfg.node, cfg.cluster_id)
            .is_ok_and(|(_, h)| h.incarnation == self.incarnation);
        if ours {
            let _ = std::fs::remove_file(ctl_path);
        }
    }
}

impl Peer {
    /// Maps the regions the peer registered since we last looked, while binding, rather than
    /// on the first operation into each: opening and mapping a file costs tens of
    /// microseconds, and the first operation can be a new leader's first round (it was most of
    /// a new Velos leader's first batch of compare-and-swaps). One load when nothing is new. A
    /// region registered after the last binding is mapped by its first operation.
    fn map_registered(&self, config: &ShmConfig, prefault: &Prefaulter) {
        let registered = self.ctl.u64_at(layout::H_REGIONS).load(Ordering::Acquire);
        if self.regions_seen.swap(registered, Ordering::AcqRel) == registered {
            return;
        }
        for id in layout::region_files(&config.run_dir, self.node, self.incarnation) {
            let _ = self.region(config, prefault, id);
        }
    }

    /// The peer's region `id`, mapped on first use; `prefault` pre-faults a new mapping in the
    /// background.
    pub(crate) fn region(
        &self,
        config: &ShmConfig,
        prefault: &Prefaulter,
        id: RegionId,
    ) -> Option<Arc<RemoteRegion>> {
        let mut regions = lock(&self.regions);
        if let Some(r) = regions.get(&id) {
            return Some(r.clone());
        }
        let run_dir = &config.run_dir;
        let path = layout::region_file(run_dir, self.node, self.incarnation, id);
        let map = Mapping::open(&path, HEADER_BYTES).ok()?;
        let h =
            layout::read_region_header(&map, &path, self.node, config.cluster_id, self.incarnation)
                .ok()?;
        // A header of another region (a file copied or renamed by hand), or larger than any
        // node registers (another build's, whose pages the pre-fault would all allocate), is
        // not this region.
        if h.region != id || h.len_bytes > MAX_REGION_BYTES as u64 {
            return None;
        }
        let r = Arc::new(RemoteRegion { map, len_bytes: h.len_bytes, access: h.access });
        regions.insert(id, r.clone());
        prefault.queue(r.clone());
        Some(r)
    }
}
