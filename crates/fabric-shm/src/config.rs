//! How to start a node, and the fabric's limits.

use mu_fabric::NodeId;
use std::path::PathBuf;

/// Largest inline payload. Inline data is copied when posted, like every other write here, so the
/// limit only mirrors what RDMA devices offer (commonly 128–1024 bytes).
pub const MAX_INLINE_BYTES: usize = 512;
/// Largest region.
pub const MAX_REGION_BYTES: usize = 1 << 40;
/// Longest stretch of a write or read copied in one guarded section.
pub const COPY_CHUNK_BYTES: usize = 64 * 1024;
/// Deepest completion queue (its ring is allocated up front, as a device's would be).
pub const MAX_CQ_DEPTH: usize = 1 << 20;

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
    /// What runs on this fabric and at which version, e.g. `mu/5`: recorded in the run
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
