//! The node: opening the device, its connection sides and regions — the state the control plane
//! ([`VerbsFabric`], `control`) and the data path share.

use super::device::{errno_text, Destination, Device, RawQp, Retry};
use super::loopback::Loopback;
use super::memory::Memory;
use super::region::{LocalCas, VerbsRegion};
use super::side::{Binding, Side, SideWord};
use crate::rundir::{self, NodeInfo, QpInfo, RegionInfo};
use crate::{VerbsConfig, VerbsError};
use mu_fabric::{Access, ConnId, FabricError, NodeId, QpState, RegionId};
use sideway::ibverbs::device_context::AtomicCapability;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::queue_pair::QueuePair;
use sideway::ibverbs::AccessFlags;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Deepest completion queue an endpoint may ask for (its bookkeeping is allocated up front).
pub const MAX_ENDPOINT_DEPTH: usize = 1 << 16;

/// A node on the verbs fabric. Cheap to clone; the node (its queue pairs, its published file)
/// lives until the last clone and endpoint are dropped.
#[derive(Clone)]
pub struct VerbsFabric {
    pub(crate) node: Arc<Node>,
}

pub(crate) struct Node {
    pub(crate) config: VerbsConfig,
    pub(crate) incarnation: u64,
    pub(crate) max_inline_bytes: usize,
    pub(crate) retry: Retry,
    /// One per (peer, channel), by `VerbsConfig::side_index`; `None` for this node itself.
    sides: Vec<Option<Arc<Side>>>,
    pub(crate) regions: Mutex<HashMap<RegionId, VerbsRegion>>,
    pub(crate) attached: Mutex<HashSet<ConnId>>,
    /// Serializes control-plane changes to this node's sides and region scopes, and moves to
    /// error by the data path.
    pub(crate) control: Mutex<()>,
    /// The tag of the last memory window key handed out (`scope::next_tag`).
    pub(crate) window_tag: Mutex<u8>,
    pub(crate) local_cas: Arc<LocalCas>,
    crashed: AtomicBool,
    /// Per peer, the latest incarnation a side was bound to, watched through its lock file for
    /// [`mu_fabric::Fabric::crash_notified`].
    pub(crate) deaths: Mutex<HashMap<NodeId, rundir::DeathWatch>>,
    pub(crate) device: Device,
    /// Held for the node's life (let go by [`VerbsFabric::crash`]): a second process for the same
    /// node id is refused, and peers learn of the node's death when it is free.
    lock_file: File,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data behind these locks stays consistent if a holder panicked.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How often [`mu_fabric::Fabric::crash_notified`] looks at a peer's lock file at most: callers ask on
/// every poll of a loop that may spin, and each look costs two system calls. A crash is told
/// this much later at worst.
pub(crate) const CRASH_CHECK_GAP: std::time::Duration = std::time::Duration::from_micros(20);

/// A packet sequence number (24 bits) for queue pair `index` of incarnation `incarnation`: a
/// restarted node does not start where its previous life's packets may still be in flight.
fn initial_psn(incarnation: u64, index: usize) -> u32 {
    let mixed =
        incarnation.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (index as u64).wrapping_mul(0x1f1f_1f1f);
    (mixed >> 40) as u32 & 0xff_ffff
}

impl VerbsFabric {
    /// Opens node `config.node`: the device, one queue pair per (peer, channel), the loopback
    /// queue pair, the node's lock and its published file in the run directory.
    ///
    /// No RDMA device (or no RDMA support at all) is [`VerbsError::NoDevice`].
    pub fn open(config: VerbsConfig) -> Result<VerbsFabric, VerbsError> {
        config.validate().map_err(|why| VerbsError::Fabric(FabricError::Config(why)))?;
        let mut device = Device::open(&config)?;
        let dir = &config.run_dir;
        rundir::ensure_private_dir(dir)?;
        rundir::claim_cluster(dir, config.cluster_id)?;
        let (lock_file, incarnation) = rundir::take_node_lock(dir, config.node)?;
        let retry = Retry {
            ack_timeout_exponent: config.ack_timeout_exponent,
            retry_count: config.retry_count,
        };
        let device_name = device.name.clone();
        let device_error = |what: &str, message: String| VerbsError::Device {
            device: device_name.clone(),
            what: what.to_string(),
            message,
        };

        // The loopback queue pair comes first: creating it finds the inline size.
        let loopback_cq = device.completion_queue().map_err(|e| device_error("loopback", e))?;
        let (loopback_qp, inline_bytes) = device.first_queue_pair(&loopback_cq)?;
        let local_cas = match device.atomics {
            AtomicCapability::Global => LocalCas::Cpu,
            AtomicCapability::None => {
                LocalCas::Unsupported(format!("device {} has no atomic operations", device.name))
            }
            AtomicCapability::HostChannelAdapter => {
                let result = Memory::new(4096)?;
                // SAFETY: `result` is a live mapping of 4096 bytes, and the registration is
                // stored beside it in the loopback, declared first so it goes first.
                let result_mr = unsafe {
                    device.pd.reg_mr(result.addr() as usize, 4096, AccessFlags::LocalWrite)
                }
                .map_err(|e| device_error("registering the loopback result word", e.to_string()))?;
                let psn = initial_psn(incarnation, usize::MAX >> 1);
                match Loopback::new(
                    loopback_qp,
                    loopback_cq,
                    result_mr,
                    result,
                    device.address,
                    psn,
                    retry,
                ) {
                    Ok(loopback) => LocalCas::Nic(Mutex::new(loopback)),
                    Err(why) => LocalCas::Unsupported(why),
                }
            }
        };

        let channels = usize::from(config.channels);
        let mut sides = Vec::with_capacity(usize::from(config.max_nodes) * channels);
        for index in 0..usize::from(config.max_nodes) * channels {
            let conn = ConnId::new(NodeId((index / channels) as u16), (index % channels) as u8);
            if conn.peer == config.node {
                sides.push(None);
                continue;
            }
            let cq = device.completion_queue().map_err(|e| device_error(&format!("{conn}"), e))?;
            let qp = device
                .queue_pair(&cq, inline_bytes)
                .map_err(|e| device_error(&format!("{conn}"), e))?;
            // SAFETY: the pointer is used only while the side, which owns `qp`, is alive.
            let raw = RawQp(unsafe { qp.qp() });
            let qp_number = qp.qp_number();
            let psn = initial_psn(incarnation, index);
            sides.push(Some(Arc::new(Side::new(conn, qp, raw, qp_number, psn, cq))));
        }

        let node = Arc::new(Node {
            incarnation,
            max_inline_bytes: inline_bytes as usize,
            retry,
            sides,
            regions: Mutex::new(HashMap::new()),
            attached: Mutex::new(HashSet::new()),
            control: Mutex::new(()),
            window_tag: Mutex::new(0),
            local_cas: Arc::new(local_cas),
            crashed: AtomicBool::new(false),
            deaths: Mutex::new(HashMap::new()),
            device,
            lock_file,
            config,
        });
        node.publish()?;
        Ok(VerbsFabric { node })
    }

    /// This node's incarnation: grows at every open of the same node id in the run directory.
    pub fn incarnation(&self) -> u64 {
        self.node.incarnation
    }

    pub fn config(&self) -> &VerbsConfig {
        &self.node.config
    }

    /// The name of the RDMA device in use.
    pub fn device_name(&self) -> &str {
        &self.node.device.name
    }

    /// A region registered on this node.
    pub fn region(&self, id: RegionId) -> Option<VerbsRegion> {
        lock(&self.node.regions).get(&id).cloned()
    }

    /// Makes the node unreachable at once, as if its process had died, for tests that keep
    /// several nodes in one process: every side is reset (its queue pair drops what arrives, so
    /// peers see "retry exceeded") and control calls fail from then on. The node's lock is let
    /// go, as the kernel does for a dead process, so peers are notified of the crash.
    pub fn crash(&self) {
        let node = &self.node;
        let _control = lock(&node.control);
        node.crashed.store(true, Ordering::SeqCst);
        for side in node.sides.iter().flatten() {
            let _ = side.raw.move_to_reset();
            let before = side.load();
            side.store(SideWord {
                state: QpState::Reset,
                access: Access::NONE,
                epoch: before.epoch + 1,
            });
        }
        // Last, once nothing of the node sends: a peer told of the crash must find it silent.
        // SAFETY: flock on a descriptor the node owns for its life; no memory is passed.
        unsafe { libc::flock(node.lock_file.as_raw_fd(), libc::LOCK_UN) };
    }
}

impl Node {
    pub(crate) fn side(&self, conn: ConnId) -> Result<&Arc<Side>, FabricError> {
        if conn.peer == self.config.node {
            return Err(FabricError::UnknownConnection(conn, "a node does not connect to itself"));
        }
        let index = self.config.side_index(conn.peer, conn.channel).ok_or(
            FabricError::UnknownConnection(conn, "peer or channel beyond the node's configuration"),
        )?;
        self.sides[index]
            .as_ref()
            .ok_or(FabricError::UnknownConnection(conn, "a node does not connect to itself"))
    }

    pub(crate) fn check_alive(&self) -> Result<(), FabricError> {
        if self.crashed.load(Ordering::SeqCst) {
            return Err(FabricError::Config(format!("node {} has crashed", self.config.node)));
        }
        Ok(())
    }

    /// Writes this node's file: address, queue pairs, regions.
    pub(crate) fn publish(&self) -> Result<(), FabricError> {
        let address = &self.device.address;
        let qps = self
            .sides
            .iter()
            .flatten()
            .map(|s| QpInfo {
                peer: s.conn.peer,
                channel: s.conn.channel,
                qp_number: s.qp_number,
                psn: s.psn,
            })
            .collect();
        let mut regions: Vec<RegionInfo> = lock(&self.regions)
            .values()
            .map(|r| RegionInfo {
                id: r.inner.id,
                addr: r.inner.memory.addr(),
                rkey: r.inner.published_rkey(),
                len_bytes: r.inner.len_bytes as u64,
                access: r.inner.access,
            })
            .collect();
        regions.sort_by_key(|r| r.id);
        rundir::publish(
            &self.config.run_dir,
            &NodeInfo {
                cluster_id: self.config.cluster_id,
                node: self.config.node,
                incarnation: self.incarnation,
                lid: address.lid,
                gid: address.gid.map(|(_, g)| g),
                mtu: address.mtu,
                qps,
                regions,
            },
        )
    }

    /// Watches `incarnation` of `peer` for [`mu_fabric::Fabric::crash_notified`], once a side is bound to
    /// it, unless a later one is watched already.
    pub(crate) fn watch_death(&self, peer: NodeId, incarnation: u64) {
        let mut deaths = lock(&self.deaths);
        if deaths.get(&peer).is_none_or(|w| w.incarnation() < incarnation) {
            deaths.insert(peer, rundir::DeathWatch::new(&self.config.run_dir, peer, incarnation));
        }
    }

    /// The peer's current published information and its queue pair for `conn`.
    pub(crate) fn lookup_peer(&self, conn: ConnId) -> Result<Binding, FabricError> {
        let peer = rundir::read_peer(&self.config.run_dir, self.config.cluster_id, conn.peer)?;
        let qp = peer.qp_for(self.config.node, conn.channel).ok_or_else(|| {
            FabricError::PeerUnreachable(
                conn.peer,
                format!(
                    "node {} keeps no queue pair for node {} channel {} (its max_nodes or channels \
                     are smaller)",
                    conn.peer, self.config.node, conn.channel
                ),
            )
        })?;
        Ok(Binding { peer, qp_number: qp.qp_number, psn: qp.psn })
    }

    pub(crate) fn destination(&self, binding: &Binding) -> Destination {
        Destination {
            qp_number: binding.qp_number,
            psn: binding.psn,
            lid: binding.peer.lid,
            gid: binding.peer.gid,
            mtu: binding.peer.mtu,
        }
    }

    /// Moves `side` to error (hardware and word) if its epoch is still `epoch`: a failure seen by
    /// the data path. Takes the control lock: this is the error path only.
    pub(crate) fn fail_side(&self, side: &Side, epoch: u64) {
        let _control = lock(&self.control);
        let before = side.load();
        if before.epoch != epoch || before.state == QpState::Error {
            return;
        }
        // A failed move leaves the queue pair as it was; the word still says error, so posts are
        // refused their execution (see the endpoint: posts in error are flushed markers).
        let _ = side.raw.move_to_error();
        side.store(SideWord { state: QpState::Error, ..before });
    }

    /// Registers `len_bytes` of `memory` with `flags`, for region `id`.
    ///
    /// # Safety
    ///
    /// The registration must be dropped before `memory` is unmapped.
    pub(crate) unsafe fn register_memory(
        &self,
        memory: &Memory,
        len_bytes: usize,
        flags: AccessFlags,
        id: RegionId,
    ) -> Result<Arc<MemoryRegion>, FabricError> {
        // SAFETY: `memory` maps at least `len_bytes` bytes (the region's length) and outlives
        // the registration by the caller's contract.
        unsafe { self.device.pd.reg_mr(memory.addr() as usize, len_bytes, flags) }.map_err(|e| {
            FabricError::Io {
                context: format!("registering region {id} ({len_bytes} bytes)"),
                message: format!("{e}: {:?}", std::error::Error::source(&e)),
            }
        })
    }

    /// The flags of a region's local registration (see `RegionInner::local_mr`).
    pub(crate) fn local_flags(&self) -> AccessFlags {
        if self.device.windows.is_ok() {
            AccessFlags::LocalWrite | AccessFlags::MemoryWindowBind
        } else {
            AccessFlags::LocalWrite
        }
    }

    pub(crate) fn hw(conn: ConnId, what: &str, r: Result<(), i32>) -> Result<(), FabricError> {
        r.map_err(|errno| FabricError::Io {
            context: format!("moving {conn} to {what}"),
            message: errno_text(errno),
        })
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Windows are deallocated while the queue pairs they are bound to still exist: a region
        // a caller still holds outlives the node, whose queue pairs go with it.
        for region in lock(&self.regions).values() {
            lock(&region.inner.scoping).window = None;
        }
        rundir::withdraw(
            &self.config.run_dir,
            self.config.cluster_id,
            self.config.node,
            self.incarnation,
        );
    }
}
