//! What the run directory holds and how each shared file is laid out.
//!
//! ```text
//! <run dir>/cluster               text: "mu-shm cluster <id> layout <version> protocol <tag>"
//! <run dir>/n<node>.lock          flock held by the live incarnation (one process per node);
//!                                 holds the last incarnation number
//! <run dir>/n<node>.ctl           the node's control segment (replaced on restart)
//! <run dir>/n<node>.i<inc>.r<id>  region <id> of incarnation <inc>
//! ```
//!
//! Control segment: a 4 KiB header, then one [`Slot`](crate::guard::Slot) per (peer, channel).
//! Region file: a 4 KiB header, then the region's bytes. Every header starts with a magic number
//! and the layout version, and names its cluster, node and incarnation, so that a process of
//! another cluster or another build fails with a clear message instead of misreading memory.

use crate::mapping::Mapping;
use mu_fabric::{Access, ConnId, FabricError, NodeId, RegionId, RegionScope};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// Bumped whenever any layout below changes. 5: the control header no longer has the flag that
/// let writers of layout 4 enter a node's sides without a locked instruction (the asymmetric
/// guard, withdrawn: `docs/fabric.md`), so such a writer must not bind to a node of this layout.
pub const LAYOUT_VERSION: u32 = 6;
/// Largest node id + 1.
pub const MAX_NODES: usize = 64;
/// Connections per pair of nodes.
pub const MAX_CHANNELS: usize = 4;
/// Size of every header.
pub const HEADER_BYTES: usize = 4096;
/// Size of one slot.
pub const SLOT_BYTES: usize = 128;
/// Size of a control segment.
pub const CTL_BYTES: usize = HEADER_BYTES + MAX_NODES * MAX_CHANNELS * SLOT_BYTES;

const CTL_MAGIC: u64 = u64::from_le_bytes(*b"MUSHMCTL");
const REGION_MAGIC: u64 = u64::from_le_bytes(*b"MUSHMREG");

// Control header fields (byte offsets).
const H_MAGIC: usize = 0;
const H_VERSION: usize = 8;
const H_NODE: usize = 12;
const H_CLUSTER: usize = 16;
const H_INCARNATION: usize = 24;
const H_PID: usize = 28;
const H_PID_NAMESPACE: usize = 32;
/// The word watchers outside the fabric (`crash_watch::DeathWatch`: clients of a replica on
/// this host) sleep on: the node's id, which never changes while the node lives, so that only
/// a wake moves them. The nodes' own crash watchers wake them once they learned of the death.
/// Not the liveness word: the kernel wakes one waiter of that one when the owner dies, and it
/// must be a node's watcher, not a client's thread on the way to it.
pub const H_DEATH_NOTICE: usize = H_NODE;
/// Where the liveness mutex (a pthread robust mutex) lives; its first word is the lock word.
pub const H_LIVENESS: usize = 64;
pub const LIVENESS_BYTES: usize = 64;
const _: () = assert!(std::mem::size_of::<libc::pthread_mutex_t>() <= LIVENESS_BYTES);
/// How many regions the node has registered: a count it raises once each region's file is
/// complete, so that a peer binding a connection knows whether there are regions it has not
/// mapped yet without listing the run directory. On a cache line of its own, after the liveness
/// mutex's (which peers read after every operation and which must stay unwritten).
pub const H_REGIONS: usize = H_LIVENESS + LIVENESS_BYTES;
/// The doorbell (`doorbell`): a count peers raise and the node's threads wait on with a futex
/// (a 32-bit word), and how many wait, on a cache line of its own: rung at control-plane moments
/// only, so it never shares a line with the words peers read after every operation.
pub const H_DOORBELL: usize = H_REGIONS + 64;
pub const H_DOORBELL_WAITERS: usize = H_DOORBELL + 4;

// Region header fields.
const R_MAGIC: usize = 0;
const R_VERSION: usize = 8;
const R_NODE: usize = 12;
const R_CLUSTER: usize = 16;
const R_INCARNATION: usize = 24;
const R_ID: usize = 28;
const R_LEN: usize = 32;
const R_ACCESS: usize = 40;
/// The region's scope ([`scope_word`]): the one header field that changes after registration.
const R_SCOPE: usize = 44;

/// Whether `dir` is on a file system kept in memory (tmpfs, ramfs, hugetlbfs), as a run
/// directory should be: elsewhere every page a node writes into a region is dirty page cache
/// that the kernel writes back to disk, so a log's writes turn into disk traffic and its pages
/// into write faults after each writeback. The fabric works there all the same; callers warn.
pub fn memory_backed(dir: &Path) -> std::io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statfs reads the NUL-terminated path and writes one `statfs` record into `stats`,
    // which is zeroed plain data of the right type and lives across the call.
    let mut stats: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(path.as_ptr(), &mut stats) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // `f_type`'s width differs between targets.
    let kind = stats.f_type as i64;
    Ok(matches!(kind, TMPFS_MAGIC | RAMFS_MAGIC | HUGETLBFS_MAGIC))
}

pub fn cluster_file(dir: &Path) -> PathBuf {
    dir.join("cluster")
}
pub fn lock_file(dir: &Path, node: NodeId) -> PathBuf {
    dir.join(format!("n{}.lock", node.0))
}
pub fn ctl_file(dir: &Path, node: NodeId) -> PathBuf {
    dir.join(format!("n{}.ctl", node.0))
}
pub fn region_file(dir: &Path, node: NodeId, incarnation: u32, region: RegionId) -> PathBuf {
    dir.join(format!("{}{}", region_file_prefix(node, incarnation), region.0))
}
/// What the names of `node`'s region files of `incarnation` begin with (`region_file`).
fn region_file_prefix(node: NodeId, incarnation: u32) -> String {
    format!("n{}.i{}.r", node.0, incarnation)
}
/// The regions `node`'s `incarnation` has files for in `dir` (registered, not yet removed).
pub fn region_files(dir: &Path, node: NodeId, incarnation: u32) -> Vec<RegionId> {
    let prefix = region_file_prefix(node, incarnation);
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(&prefix)?.parse().ok().map(RegionId))
        .collect()
}

/// The index of the slot for (peer, channel), if both are in range: slots are laid out peer by
/// peer, channel by channel.
pub fn slot_index(peer: NodeId, channel: u8) -> Option<usize> {
    let (peer, channel) = (usize::from(peer.0), usize::from(channel));
    (peer < MAX_NODES && channel < MAX_CHANNELS).then_some(peer * MAX_CHANNELS + channel)
}

/// Byte offset of the slot for (peer, channel) in a control segment. Panics when out of range:
/// callers validate connection ids first (`slot_index`).
pub fn slot_offset(peer: NodeId, channel: u8) -> usize {
    let index = slot_index(peer, channel).expect("connection id validated by the caller");
    HEADER_BYTES + index * SLOT_BYTES
}

/// The identity written in a control header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtlHeader {
    pub node: NodeId,
    pub cluster_id: u64,
    pub incarnation: u32,
    pub pid: u32,
    /// The inode of the pid namespace `pid` belongs to.
    pub pid_namespace: u64,
}

pub fn write_ctl_header(map: &Mapping, h: &CtlHeader) {
    map.u32_at(H_VERSION).store(LAYOUT_VERSION, Ordering::Relaxed);
    map.u32_at(H_NODE).store(u32::from(h.node.0), Ordering::Relaxed);
    map.u64_at(H_CLUSTER).store(h.cluster_id, Ordering::Relaxed);
    map.u32_at(H_INCARNATION).store(h.incarnation, Ordering::Relaxed);
    map.u32_at(H_PID).store(h.pid, Ordering::Relaxed);
    map.u64_at(H_PID_NAMESPACE).store(h.pid_namespace, Ordering::Relaxed);
    // The magic goes last: a reader that sees it sees the rest.
    map.u64_at(H_MAGIC).store(CTL_MAGIC, Ordering::Release);
}

/// A node id read from a header; one past `u16` (a damaged file) reads as `u16::MAX`, which no
/// node of a cluster has (`MAX_NODES`), rather than as the id it wraps to.
fn node_id(word: u32) -> NodeId {
    NodeId(u16::try_from(word).unwrap_or(u16::MAX))
}

/// Reads and checks a control header against what the reader expects.
pub fn read_ctl_header(
    map: &Mapping,
    path: &Path,
    node: NodeId,
    cluster_id: u64,
) -> Result<CtlHeader, FabricError> {
    check_magic_version(map, path, H_MAGIC, CTL_MAGIC, H_VERSION)?;
    let h = CtlHeader {
        node: node_id(map.u32_at(H_NODE).load(Ordering::Relaxed)),
        cluster_id: map.u64_at(H_CLUSTER).load(Ordering::Relaxed),
        incarnation: map.u32_at(H_INCARNATION).load(Ordering::Relaxed),
        pid: map.u32_at(H_PID).load(Ordering::Relaxed),
        pid_namespace: map.u64_at(H_PID_NAMESPACE).load(Ordering::Relaxed),
    };
    check_identity(path, h.cluster_id, cluster_id, h.node, node)?;
    Ok(h)
}

/// The incarnation that node `node`'s current control file in `dir` names, read without
/// mapping it (a few system calls, against tens of microseconds to map and check it); `None` if
/// there is none or it is not a control file. A control file is put in place whole (renamed),
/// so what this reads is one incarnation's.
pub fn ctl_incarnation(dir: &Path, node: NodeId) -> Option<u32> {
    use std::os::unix::fs::FileExt;
    use std::os::unix::fs::OpenOptionsExt;
    // Not through a link, and not waiting on something that is no file (a FIFO put there).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(ctl_file(dir, node))
        .ok()?;
    let mut head = [0u8; H_INCARNATION + 4];
    file.read_exact_at(&mut head, 0).ok()?;
    let word = |at: usize, len: usize| {
        let mut b = [0u8; 8];
        b[..len].copy_from_slice(&head[at..at + len]);
        u64::from_le_bytes(b)
    };
    (word(H_MAGIC, 8) == CTL_MAGIC).then(|| word(H_INCARNATION, 4) as u32)
}

/// Opens node `node`'s current control segment in `dir` and checks its header.
pub fn open_ctl(
    dir: &Path,
    node: NodeId,
    cluster_id: u64,
) -> Result<(Mapping, CtlHeader), FabricError> {
    let path = ctl_file(dir, node);
    let map = Mapping::open(&path, CTL_BYTES)?;
    let header = read_ctl_header(&map, &path, node, cluster_id)?;
    Ok((map, header))
}

/// A region scope as its header word: a tag in the top byte (0 every connection, 1 none, 2 one)
/// over the one connection's peer (bits 8..24) and channel (bits 0..8).
pub fn scope_word(scope: RegionScope) -> u32 {
    match scope {
        RegionScope::Every => 0,
        RegionScope::Nobody => 1 << 24,
        RegionScope::Only(conn) => 2 << 24 | u32::from(conn.peer.0) << 8 | u32::from(conn.channel),
    }
}

/// Sets the scope in a region's header (the owner's call; writers read it at every operation).
pub fn store_region_scope(map: &Mapping, scope: RegionScope) {
    map.u32_at(R_SCOPE).store(scope_word(scope), Ordering::SeqCst);
}

/// Whether a region's header lets in an operation through the owner's side of `conn`. Any word
/// no owner writes (a damaged header) lets nothing in.
#[inline(always)]
pub fn region_admits(map: &Mapping, conn: ConnId) -> bool {
    let word = map.u32_at(R_SCOPE).load(Ordering::Acquire);
    word == 0 || word == scope_word(RegionScope::Only(conn))
}

/// The identity written in a region header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionHeader {
    pub node: NodeId,
    pub cluster_id: u64,
    pub incarnation: u32,
    pub region: RegionId,
    pub len_bytes: u64,
    pub access: Access,
}

pub fn write_region_header(map: &Mapping, h: &RegionHeader) {
    map.u32_at(R_VERSION).store(LAYOUT_VERSION, Ordering::Relaxed);
    map.u32_at(R_NODE).store(u32::from(h.node.0), Ordering::Relaxed);
    map.u64_at(R_CLUSTER).store(h.cluster_id, Ordering::Relaxed);
    map.u32_at(R_INCARNATION).store(h.incarnation, Ordering::Relaxed);
    map.u32_at(R_ID).store(u32::from(h.region.0), Ordering::Relaxed);
    map.u64_at(R_LEN).store(h.len_bytes, Ordering::Relaxed);
    map.u32_at(R_ACCESS).store(u32::from(h.access.bits()), Ordering::Relaxed);
    map.u32_at(R_SCOPE).store(scope_word(RegionScope::Every), Ordering::Relaxed);
    map.u64_at(R_MAGIC).store(REGION_MAGIC, Ordering::Release);
}

/// Reads and checks a region header: identity, and that the file holds as many bytes as the
/// header says.
pub fn read_region_header(
    map: &Mapping,
    path: &Path,
    node: NodeId,
    cluster_id: u64,
    incarnation: u32,
) -> Result<RegionHeader, FabricError> {
    check_magic_version(map, path, R_MAGIC, REGION_MAGIC, R_VERSION)?;
    let h = RegionHeader {
        node: node_id(map.u32_at(R_NODE).load(Ordering::Relaxed)),
        cluster_id: map.u64_at(R_CLUSTER).load(Ordering::Relaxed),
        incarnation: map.u32_at(R_INCARNATION).load(Ordering::Relaxed),
        region: RegionId(
            u16::try_from(map.u32_at(R_ID).load(Ordering::Relaxed)).unwrap_or(u16::MAX),
        ),
        len_bytes: map.u64_at(R_LEN).load(Ordering::Relaxed),
        access: Access::from_bits_truncate(map.u32_at(R_ACCESS).load(Ordering::Relaxed) as u8),
    };
    check_identity(path, h.cluster_id, cluster_id, h.node, node)?;
    if h.incarnation != incarnation {
        return Err(FabricError::Incompatible(format!(
            "{} belongs to incarnation {}, expected {incarnation}",
            path.display(),
            h.incarnation
        )));
    }
    if (HEADER_BYTES as u64).checked_add(h.len_bytes) != Some(map.len_bytes() as u64) {
        return Err(FabricError::Incompatible(format!(
            "{} says it holds {} bytes but the file has {}",
            path.display(),
            h.len_bytes,
            map.len_bytes() - HEADER_BYTES
        )));
    }
    Ok(h)
}

fn check_magic_version(
    map: &Mapping,
    path: &Path,
    magic_at: usize,
    magic: u64,
    version_at: usize,
) -> Result<(), FabricError> {
    if map.u64_at(magic_at).load(Ordering::Acquire) != magic {
        return Err(FabricError::Incompatible(format!(
            "{} is not a mu shared-memory file (bad magic)",
            path.display()
        )));
    }
    let version = map.u32_at(version_at).load(Ordering::Relaxed);
    if version != LAYOUT_VERSION {
        return Err(FabricError::Incompatible(format!(
            "{} has layout version {version}, this build speaks version {LAYOUT_VERSION}",
            path.display()
        )));
    }
    Ok(())
}

fn check_identity(
    path: &Path,
    found_cluster: u64,
    cluster: u64,
    found_node: NodeId,
    node: NodeId,
) -> Result<(), FabricError> {
    if found_cluster != cluster {
        return Err(FabricError::Incompatible(format!(
            "{} belongs to cluster {found_cluster:#x}, not {cluster:#x}",
            path.display()
        )));
    }
    if found_node != node {
        return Err(FabricError::Incompatible(format!(
            "{} belongs to node {found_node}, not {node}",
            path.display()
        )));
    }
    Ok(())
}

/// The run directory's cluster file: which cluster, layout and protocol the directory serves.
fn cluster_text(cluster_id: u64, protocol: &str) -> String {
    format!("mu-shm cluster {cluster_id:#x} layout {LAYOUT_VERSION} protocol {protocol}\n")
}

/// Creates the run directory's cluster file, or checks that the directory belongs to
/// `cluster_id` and runs `protocol` on this build's layout.
///
/// The file appears whole or not at all: it is written under a private temporary name and then
/// hard-linked into place (which fails if another node got there first), so a node starting at
/// the same moment never reads a half-written file.
pub fn claim_cluster(dir: &Path, cluster_id: u64, protocol: &str) -> Result<(), FabricError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if protocol.is_empty() || protocol.contains(char::is_whitespace) {
        return Err(FabricError::Config(format!(
            "protocol name {protocol:?} must be one word (e.g. \"mu/2\")"
        )));
    }
    let path = cluster_file(dir);
    let text = cluster_text(cluster_id, protocol);
    if !path.exists() {
        let tmp = dir.join(format!(
            "cluster.new.{}.{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        let linked = written.and_then(|_| std::fs::hard_link(&tmp, &path));
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(FabricError::io(format!("creating {}", path.display()), e)),
        }
    }
    // At most a few lines' worth (the file is one line), not through a link, and not waiting on
    // something that is no file.
    let found = {
        use std::io::Read;
        let mut bytes = Vec::new();
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path)
            .and_then(|f| f.take(4096).read_to_end(&mut bytes))
            .map_err(|e| FabricError::io(format!("reading {}", path.display()), e))?;
        String::from_utf8_lossy(&bytes).into_owned()
    };
    if found == text {
        return Ok(());
    }
    // Name the one thing that differs, most fundamental first: a user who pointed two clusters
    // at one directory needs a different fix from one who upgraded half a cluster.
    let words: Vec<&str> = found.split_whitespace().collect();
    let field =
        |name: &str| words.iter().position(|w| *w == name).and_then(|i| words.get(i + 1)).copied();
    let dir = dir.display();
    let why = match (words.first(), field("cluster"), field("layout"), field("protocol")) {
        (Some(&"mu-shm"), Some(c), _, _) if c != format!("{cluster_id:#x}") => {
            format!("run directory {dir} belongs to cluster {c}, not to cluster {cluster_id:#x}")
        }
        (Some(&"mu-shm"), _, Some(l), _) if l != LAYOUT_VERSION.to_string() => format!(
            "run directory {dir} was made by a build with shared-memory layout {l}; this build \
             speaks layout {LAYOUT_VERSION}"
        ),
        (Some(&"mu-shm"), _, _, p) if p != Some(protocol) => format!(
            "run directory {dir} runs protocol {}; this node speaks {protocol}",
            p.unwrap_or("(unnamed, an older build)")
        ),
        _ => {
            // Quoted up to a line's length: the file may be anything, of any size.
            let said: String = found.trim_end().chars().take(120).collect();
            let cut = if said.len() < found.trim_end().len() { " (cut)" } else { "" };
            format!(
                "run directory {dir} belongs to another cluster or build: its cluster file says \
                 {said:?}{cut}, this node is {:?}",
                text.trim_end()
            )
        }
    };
    Err(FabricError::Incompatible(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_file_systems_are_told_from_others() {
        if Path::new("/dev/shm").is_dir() {
            assert!(memory_backed(Path::new("/dev/shm")).unwrap(), "/dev/shm is tmpfs");
        }
        // procfs is in memory too, but is not where files can be made: not one of the three.
        assert!(!memory_backed(Path::new("/proc")).unwrap());
        assert!(memory_backed(Path::new("/no/such/directory/here")).is_err());
    }

    /// A cluster file that is no file (a FIFO) is refused at once, not waited on.
    #[test]
    fn a_cluster_file_that_is_a_fifo_is_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("mu-shm-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = std::ffi::CString::new(cluster_file(&dir).to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path we own; no other memory is passed.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        let err = claim_cluster(&dir, 7, "mu/2").unwrap_err().to_string();
        assert!(err.contains("belongs to another cluster or build"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A cluster file that is not one of ours is named in the error, but only its start.
    #[test]
    fn a_foreign_cluster_file_is_quoted_short() {
        let dir = std::env::temp_dir().join(format!("mu-shm-claim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(cluster_file(&dir), "x".repeat(5000)).unwrap();
        let err = claim_cluster(&dir, 7, "mu/2").unwrap_err().to_string();
        assert!(err.contains("belongs to another cluster or build") && err.contains("(cut)"));
        assert!(err.len() < 400, "{} bytes: {err}", err.len());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
