//! The run directory: how nodes find each other's queue pairs and regions without a registry
//! server (the original Mu used memcached).
//!
//! ```text
//! <run dir>/cluster        "mu-verbs cluster <id> layout <version>": a node of another cluster
//!                          or build refuses the directory
//! <run dir>/n<node>.lock   flock held by the node's live process; keeps its last incarnation
//! <run dir>/n<node>.verbs  what peers need to reach the node (see [`NodeInfo`]), replaced
//!                          whole by rename whenever it changes
//! ```
//!
//! Pure file handling, compiled with or without the `verbs` feature so that it is tested
//! everywhere.

use mu_fabric::{Access, FabricError, NodeId, RegionId};
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Bumped whenever the files below change shape.
pub const LAYOUT_VERSION: u32 = 1;
/// How long opening a node waits for its lock (a child process forked by another thread may hold
/// a copy until it execs).
const LOCK_WAIT: Duration = Duration::from_secs(1);

/// What one node publishes: its address, one queue pair per (peer, channel), and its regions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub cluster_id: u64,
    pub node: NodeId,
    pub incarnation: u64,
    /// Local identifier of the port (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The GID peers route to, when the port needs one (RoCE) or one was configured.
    pub gid: Option<[u8; 16]>,
    /// The port's active MTU, as verbs encodes it (1 = 256 bytes … 5 = 4096 bytes).
    pub mtu: u32,
    pub qps: Vec<QpInfo>,
    pub regions: Vec<RegionInfo>,
}

/// The queue pair a node keeps for one (peer, channel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInfo {
    pub peer: NodeId,
    pub channel: u8,
    pub qp_number: u32,
    /// The first packet sequence number it sends with.
    pub psn: u32,
}

/// A registered region as peers address it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    pub id: RegionId,
    pub addr: u64,
    pub rkey: u32,
    pub len_bytes: u64,
    pub access: Access,
}

impl NodeInfo {
    /// The queue pair this node keeps for `peer` on `channel`.
    pub fn qp_for(&self, peer: NodeId, channel: u8) -> Option<QpInfo> {
        self.qps.iter().copied().find(|q| q.peer == peer && q.channel == channel)
    }

    pub fn region(&self, id: RegionId) -> Option<RegionInfo> {
        self.regions.iter().copied().find(|r| r.id == id)
    }

    /// The file's text: one record per line, fields separated by spaces.
    pub fn encode(&self) -> String {
        let mut text = format!(
            "mu-verbs {LAYOUT_VERSION} cluster {} node {} incarnation {}\n",
            self.cluster_id, self.node.0, self.incarnation
        );
        let gid =
            self.gid.map_or("-".to_string(), |g| g.iter().map(|b| format!("{b:02x}")).collect());
        text.push_str(&format!("address lid {} gid {gid} mtu {}\n", self.lid, self.mtu));
        for q in &self.qps {
            text.push_str(&format!("qp {} {} {} {}\n", q.peer.0, q.channel, q.qp_number, q.psn));
        }
        for r in &self.regions {
            text.push_str(&format!(
                "region {} {} {} {} {}\n",
                r.id.0,
                r.addr,
                r.rkey,
                r.len_bytes,
                r.access.bits()
            ));
        }
        text.push_str("end\n");
        text
    }

    /// Parses [`NodeInfo::encode`]'s text; says which line is wrong otherwise. A file without its
    /// final `end` line is refused (it cannot happen with rename, but a copy could truncate it).
    pub fn parse(text: &str) -> Result<NodeInfo, String> {
        let mut lines = text.lines();
        let head: Vec<&str> = lines.next().ok_or("empty file")?.split(' ').collect();
        let field = |words: &[&str], at: usize, what: &str| -> Result<u64, String> {
            words.get(at).and_then(|w| w.parse::<u64>().ok()).ok_or_else(|| {
                format!("{what} is missing or not a number in {:?}", words.join(" "))
            })
        };
        if head.first() != Some(&"mu-verbs") || head.get(2) != Some(&"cluster") {
            return Err("not a mu-verbs node file".into());
        }
        let version = field(&head, 1, "layout version")?;
        if version != u64::from(LAYOUT_VERSION) {
            return Err(format!(
                "layout version {version}, this build speaks {LAYOUT_VERSION}: mixed builds"
            ));
        }
        let cluster_id = field(&head, 3, "cluster id")?;
        let node = NodeId(narrow(field(&head, 5, "node id")?, "node id")?);
        let incarnation = field(&head, 7, "incarnation")?;
        let address: Vec<&str> = lines.next().ok_or("no address line")?.split(' ').collect();
        if address.first() != Some(&"address") {
            return Err("second line is not the address".into());
        }
        let lid = narrow(field(&address, 2, "lid")?, "lid")?;
        let gid = match address.get(4) {
            Some(&"-") => None,
            Some(hex) => Some(parse_gid(hex)?),
            None => return Err("no gid".into()),
        };
        let mtu = narrow(field(&address, 6, "mtu")?, "mtu")?;
        let (mut qps, mut regions, mut ended) = (Vec::new(), Vec::new(), false);
        for line in lines {
            let words: Vec<&str> = line.split(' ').collect();
            match words.first() {
                Some(&"qp") => qps.push(QpInfo {
                    peer: NodeId(narrow(field(&words, 1, "peer")?, "peer")?),
                    channel: narrow(field(&words, 2, "channel")?, "channel")?,
                    qp_number: narrow(field(&words, 3, "qp number")?, "qp number")?,
                    psn: narrow(field(&words, 4, "psn")?, "psn")?,
                }),
                Some(&"region") => regions.push(RegionInfo {
                    id: RegionId(narrow(field(&words, 1, "region id")?, "region id")?),
                    addr: field(&words, 2, "address")?,
                    rkey: narrow(field(&words, 3, "rkey")?, "rkey")?,
                    len_bytes: field(&words, 4, "length")?,
                    access: Access::from_bits_truncate(narrow(
                        field(&words, 5, "access")?,
                        "access",
                    )?),
                }),
                Some(&"end") => {
                    ended = true;
                    break;
                }
                _ => return Err(format!("unknown line {line:?}")),
            }
        }
        if !ended {
            return Err("truncated: no end line".into());
        }
        Ok(NodeInfo { cluster_id, node, incarnation, lid, gid, mtu, qps, regions })
    }
}

fn narrow<T: TryFrom<u64>>(v: u64, what: &str) -> Result<T, String> {
    T::try_from(v).map_err(|_| format!("{what} {v} is out of range"))
}

fn parse_gid(hex: &str) -> Result<[u8; 16], String> {
    if hex.len() != 32 || !hex.is_ascii() {
        return Err(format!("gid {hex:?} is not 32 hex digits"));
    }
    let mut gid = [0u8; 16];
    for (i, byte) in gid.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| format!("gid {hex:?} is not hex"))?;
    }
    Ok(gid)
}

pub fn cluster_file(dir: &Path) -> PathBuf {
    dir.join("cluster")
}
pub fn lock_file(dir: &Path, node: NodeId) -> PathBuf {
    dir.join(format!("n{}.lock", node.0))
}
pub fn info_file(dir: &Path, node: NodeId) -> PathBuf {
    dir.join(format!("n{}.verbs", node.0))
}

/// Creates the run directory private (0700) if absent, and refuses one that another user owns or
/// others may read.
pub fn ensure_private_dir(path: &Path) -> Result<(), FabricError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| FabricError::io(format!("creating run directory {}", path.display()), e))?;
    let meta = std::fs::metadata(path)
        .map_err(|e| FabricError::io(format!("reading run directory {}", path.display()), e))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if meta.uid() != uid {
        return Err(FabricError::Config(format!(
            "run directory {} belongs to uid {}, not to this user (uid {uid})",
            path.display(),
            meta.uid()
        )));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(FabricError::Config(format!(
            "run directory {} is accessible to other users (mode {mode:o}); `chmod 700` it",
            path.display()
        )));
    }
    Ok(())
}

/// Claims the directory for `cluster_id`, or checks that it is claimed for it.
pub fn claim_cluster(dir: &Path, cluster_id: u64) -> Result<(), FabricError> {
    let path = cluster_file(dir);
    let text = format!("mu-verbs cluster {cluster_id} layout {LAYOUT_VERSION}\n");
    if !path.exists() {
        // Written aside and linked into place, so that a reader never sees it half written and
        // two first nodes cannot both claim it.
        let tmp = dir.join(format!(
            "cluster.new.{}.{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let linked = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .and_then(|_| std::fs::hard_link(&tmp, &path));
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(FabricError::io(format!("creating {}", path.display()), e)),
        }
    }
    let found = std::fs::read_to_string(&path)
        .map_err(|e| FabricError::io(format!("reading {}", path.display()), e))?;
    if found == text {
        Ok(())
    } else {
        Err(FabricError::Incompatible(format!(
            "run directory {} holds {:?}, not {:?}: another cluster or another build",
            dir.display(),
            found.trim_end(),
            text.trim_end()
        )))
    }
}

/// Takes the node's lock (waiting up to a second) and returns it with the node's next
/// incarnation number, stored in the lock file so that a restart never reuses one.
pub fn take_node_lock(dir: &Path, node: NodeId) -> Result<(File, u64), FabricError> {
    use std::io::{Read, Seek, SeekFrom};
    let path = lock_file(dir, node);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| FabricError::io(format!("opening {}", path.display()), e))?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        // SAFETY: flock on a descriptor we own; no memory is passed.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            break;
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
    let mut text = String::new();
    file.seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_string(&mut text))
        .map_err(|e| FabricError::io("reading the node's lock file", e))?;
    // Something else than a number is refused, not read as 0: the next incarnation would
    // reuse a number peers may still hold bound (an emptied file says 0 as a new one does).
    let last = match text.trim() {
        "" => 0,
        number => number.parse::<u64>().map_err(|_| {
            FabricError::Config(format!(
                "node {node}'s lock file {} holds {:?}, not an incarnation number: remove the \
                 run directory's files and start the cluster anew",
                path.display(),
                number.chars().take(40).collect::<String>()
            ))
        })?,
    };
    let next = last.checked_add(1).ok_or_else(|| {
        FabricError::Config("this node id has used up its incarnation numbers".into())
    })?;
    // In place, at a fixed width that covers any earlier text: truncating first left an empty
    // file to a start killed in between (and the next start reused the number), and readers
    // (`DeathWatch`) see the old number or the new one, never none.
    {
        use std::os::unix::fs::FileExt;
        file.write_all_at(format!("{next:020}\n").as_bytes(), 0)
            .and_then(|()| file.sync_data())
            .map_err(|e| FabricError::io("writing the node's lock file", e))?;
    }
    Ok((file, next))
}

/// Whether some process holds `node`'s lock: a node whose process died released it (the kernel
/// drops a dead process's locks), so its published file is stale.
pub fn node_is_running(dir: &Path, node: NodeId) -> bool {
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(lock_file(dir, node))
    else {
        return false;
    };
    // SAFETY: flock on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    // Taken: nobody holds it. The lock goes with the descriptor when `file` drops.
    rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK)
}

/// Crash notification for one incarnation of a peer, through its lock file: the kernel releases
/// a dead process's lock at once, and a restart writes a higher incarnation into the file. Either
/// says, without a timeout, that the incarnation watched is gone; neither can happen while it
/// lives (its process holds the lock for its whole life, and no other process can take it). A
/// stopped process keeps its lock, so a pause is never notified, as the fabric API asks.
///
/// Exact on one host, where the kernel keeps the locks. On a shared file system whose locks are
/// leases (NFS), a live peer cut off from the file server loses its lock when its lease runs
/// out and is then reported dead: there the notification is a hint, which Mu's safety does not
/// rest on (a leader is elected by the failure detector; revocation is what makes it safe).
#[derive(Debug)]
pub struct DeathWatch {
    incarnation: u64,
    /// The peer's lock file, opened once; `None` once the death is known, or where the file
    /// could not be opened (the watch then cannot tell, and says `false`).
    file: Option<File>,
    dead: bool,
    /// When the file was last looked at ([`DeathWatch::died_within`]).
    checked_at: Option<Instant>,
}

impl DeathWatch {
    /// Watches incarnation `incarnation` of `node`.
    pub fn new(dir: &Path, node: NodeId, incarnation: u64) -> DeathWatch {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(lock_file(dir, node))
            .ok();
        DeathWatch { incarnation, file, dead: false, checked_at: None }
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// [`DeathWatch::died`], looking at the file again only if `gap` has passed since the last
    /// look: for callers that ask on every poll of a spinning loop, where two system calls
    /// each time would cost more than the notification is worth.
    pub fn died_within(&mut self, gap: Duration) -> bool {
        if self.dead || self.checked_at.is_some_and(|at| at.elapsed() < gap) {
            return self.dead;
        }
        self.checked_at = Some(Instant::now());
        self.died()
    }

    /// Whether the incarnation watched has died. Two system calls while it lives (a read of the
    /// file's first bytes and a non-blocking lock attempt); none once it is known dead.
    pub fn died(&mut self) -> bool {
        use std::os::unix::fs::FileExt;
        let Some(file) = &self.file else {
            return self.dead;
        };
        // A later incarnation has taken the lock and written its number (in place: the old
        // number or the new one is read, and where neither parses the lock attempt decides).
        let mut text = [0u8; 24];
        let later = file.read_at(&mut text, 0).ok().is_some_and(|n| {
            std::str::from_utf8(&text[..n])
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .is_some_and(|found| found > self.incarnation)
        });
        // SAFETY: flock on a descriptor we own; no memory is passed.
        let free =
            later || unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
        if free {
            // Dropping the descriptor lets go of the shared lock taken just now, if any, so a
            // restarting peer can take its lock.
            self.file = None;
            self.dead = true;
        }
        self.dead
    }
}

/// Replaces the node's file with `info`, whole (written aside, then renamed into place).
pub fn publish(dir: &Path, info: &NodeInfo) -> Result<(), FabricError> {
    let path = info_file(dir, info.node);
    let tmp = dir.join(format!("n{}.verbs.new.{}", info.node.0, std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| f.write_all(info.encode().as_bytes()))
        .and_then(|_| std::fs::rename(&tmp, &path))
        .map_err(|e| FabricError::io(format!("publishing {}", path.display()), e))
}

/// Reads `node`'s published file: `PeerUnreachable` when there is none or its process is gone.
pub fn read_peer(dir: &Path, cluster_id: u64, node: NodeId) -> Result<NodeInfo, FabricError> {
    let path = info_file(dir, node);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        FabricError::PeerUnreachable(node, format!("no node {node} in {}: {e}", dir.display()))
    })?;
    let info = NodeInfo::parse(&text)
        .map_err(|why| FabricError::Incompatible(format!("{}: {why}", path.display())))?;
    if info.cluster_id != cluster_id || info.node != node {
        return Err(FabricError::Incompatible(format!(
            "{} is node {} of cluster {}, expected node {node} of cluster {cluster_id}",
            path.display(),
            info.node,
            info.cluster_id
        )));
    }
    if !node_is_running(dir, node) {
        return Err(FabricError::PeerUnreachable(
            node,
            format!("node {node} (incarnation {}) is not running", info.incarnation),
        ));
    }
    Ok(info)
}

/// Removes the node's file if it is still the one incarnation `incarnation` published.
pub fn withdraw(dir: &Path, cluster_id: u64, node: NodeId, incarnation: u64) {
    let path = info_file(dir, node);
    let ours = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| NodeInfo::parse(&t).ok())
        .is_some_and(|i| i.cluster_id == cluster_id && i.incarnation == incarnation);
    if ours {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> NodeInfo {
        NodeInfo {
            cluster_id: 77,
            node: NodeId(2),
            incarnation: 5,
            lid: 0,
            gid: Some([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]),
            mtu: 3,
            qps: vec![QpInfo { peer: NodeId(0), channel: 1, qp_number: 0x1234, psn: 0xabcdef }],
            regions: vec![RegionInfo {
                id: RegionId(0),
                addr: 0x7f00_0000_1000,
                rkey: 0xdead,
                len_bytes: 1 << 20,
                access: Access::READ_WRITE,
            }],
        }
    }

    #[test]
    fn node_info_round_trips_and_refuses_damage() {
        let info = sample();
        assert_eq!(NodeInfo::parse(&info.encode()), Ok(info.clone()));
        let no_gid = NodeInfo { gid: None, ..info.clone() };
        assert_eq!(NodeInfo::parse(&no_gid.encode()), Ok(no_gid));
        let text = info.encode();
        let truncated = &text[..text.len() - 4];
        assert!(NodeInfo::parse(truncated).unwrap_err().contains("truncated"));
        let other_layout = text.replacen("mu-verbs 1", "mu-verbs 9", 1);
        assert!(NodeInfo::parse(&other_layout).unwrap_err().contains("layout version"));
        assert!(NodeInfo::parse("qp 1 2 3 4\n").is_err());
        assert_eq!(info.qp_for(NodeId(0), 1).map(|q| q.qp_number), Some(0x1234));
        assert_eq!(info.qp_for(NodeId(0), 0), None);
    }

    #[test]
    fn a_death_watch_sees_a_released_lock_and_a_restart_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("mu-verbs-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        ensure_private_dir(&dir).unwrap();
        let never_started = DeathWatch::new(&dir, NodeId(1), 1);
        let (lock, first) = take_node_lock(&dir, NodeId(1)).unwrap();
        let mut unopened = never_started;
        assert!(!unopened.died(), "a watch without its file cannot tell, so it says no");

        // Death: the lock is let go (as the kernel does for a dead process).
        let mut watch = DeathWatch::new(&dir, NodeId(1), first);
        for _ in 0..3 {
            assert!(!watch.died(), "a live incarnation is never notified");
        }
        assert!(node_is_running(&dir, NodeId(1)), "watching takes nothing from the holder");
        drop(lock);
        assert!(watch.died());
        assert!(watch.died(), "a death stays known");
        assert!(watch.died_within(Duration::from_secs(60)));

        // Restart: the next incarnation holds the lock again; the old one is still dead to a
        // watch that never saw the lock free, and the new one is alive.
        let (lock, second) = take_node_lock(&dir, NodeId(1)).unwrap();
        assert_eq!(second, first + 1);
        let mut old = DeathWatch::new(&dir, NodeId(1), first);
        let mut new = DeathWatch::new(&dir, NodeId(1), second);
        assert!(old.died(), "a later incarnation's number ends the earlier one");
        assert!(!new.died());
        assert!(!new.died_within(Duration::from_secs(60)), "looked at: alive");
        assert_eq!(new.incarnation(), second);
        // A watch that found the lock free let go of it at once: the node can restart.
        drop(lock);
        assert!(!new.died_within(Duration::from_secs(60)), "not looked at again within the gap");
        assert!(new.died_within(Duration::ZERO));
        assert!(new.died());
        let (_lock, third) = take_node_lock(&dir, NodeId(1)).unwrap();
        assert_eq!(third, second + 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn run_directory_publishes_and_locks() {
        let dir = std::env::temp_dir().join(format!("mu-verbs-rundir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        ensure_private_dir(&dir).unwrap();
        claim_cluster(&dir, 77).unwrap();
        claim_cluster(&dir, 77).unwrap();
        assert!(matches!(claim_cluster(&dir, 78), Err(FabricError::Incompatible(_))));

        let info = sample();
        assert!(matches!(
            read_peer(&dir, 77, NodeId(2)),
            Err(FabricError::PeerUnreachable(NodeId(2), _))
        ));
        let (lock, incarnation) = take_node_lock(&dir, NodeId(2)).unwrap();
        assert_eq!(incarnation, 1);
        publish(&dir, &info).unwrap();
        assert!(node_is_running(&dir, NodeId(2)));
        assert_eq!(read_peer(&dir, 77, NodeId(2)), Ok(info.clone()));
        drop(lock);
        assert!(!node_is_running(&dir, NodeId(2)), "a released lock means a dead node");
        assert!(matches!(read_peer(&dir, 77, NodeId(2)), Err(FabricError::PeerUnreachable(..))));
        let (lock, incarnation) = take_node_lock(&dir, NodeId(2)).unwrap();
        assert_eq!(incarnation, 2, "a restart never reuses an incarnation");
        // Written in place at a fixed width; a lock file holding something else is refused.
        let text = std::fs::read_to_string(lock_file(&dir, NodeId(2))).unwrap();
        assert_eq!(text, format!("{:020}\n", 2));
        drop(lock);
        std::fs::write(lock_file(&dir, NodeId(3)), "garbage\n").unwrap();
        let refused = take_node_lock(&dir, NodeId(3)).expect_err("a garbled lock file");
        assert!(refused.to_string().contains("not an incarnation number"), "{refused}");
        let (_lock, incarnation) = take_node_lock(&dir, NodeId(2)).unwrap();
        assert_eq!(incarnation, 3);
        withdraw(&dir, 77, NodeId(2), 4);
        assert!(info_file(&dir, NodeId(2)).exists(), "not ours to withdraw");
        withdraw(&dir, 77, NodeId(2), 5);
        assert!(!info_file(&dir, NodeId(2)).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
