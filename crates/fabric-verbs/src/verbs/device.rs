//! Device discovery, the protection domain, addressing, and the raw `ibv_modify_qp` calls.

use super::handles::MemoryWindow;
use super::scope::window_support;
use crate::{VerbsConfig, VerbsError};
use mu_fabric::Access;
use rdma_mummy_sys::{
    ibv_mw_bind_info, ibv_qp, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_state, ibv_qp_to_qp_ex,
    ibv_wr_abort, ibv_wr_bind_mw, ibv_wr_complete, ibv_wr_start,
};
use sideway::ibverbs::completion::{ExtendedCompletionQueue, GenericCompletionQueue};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{AtomicCapability, DeviceContext, LinkLayer};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{ExtendedQueuePair, QueuePairType, SendOperationFlags};
use sideway::ibverbs::AccessFlags;
use std::ptr::NonNull;
use std::sync::Arc;

/// Inline sizes tried when the first queue pair is created, largest first: devices differ, and
/// queue-pair creation is the only way to ask.
const INLINE_BYTES_TRIED: [u32; 5] = [512, 256, 220, 128, 64];
/// The most reads and atomics in flight per queue pair, in each direction.
const RD_ATOMIC_MAX: u8 = 16;
/// Send-queue entries each queue pair has beyond the endpoint's `send_queue_depth`, for memory
/// window binds the control plane posts (see `RawQp::bind_window`): the endpoint never counts
/// them, so they must not take its room.
pub(crate) const WINDOW_BIND_ROOM: u32 = 8;
/// The work request id of a window bind. Endpoints number their requests with ids from 1 in the
/// high half, so none mistakes a bind's completion for one of its own (it skips it).
pub(crate) const WINDOW_BIND_WR_ID: u64 = 0;

/// The names of the RDMA devices libibverbs lists. "No device" (including a host without RDMA
/// support, where the listing fails with `ENOSYS`) is [`VerbsError::NoDevice`].
pub fn device_names() -> Result<Vec<String>, VerbsError> {
    let list = DeviceList::new().map_err(|e| no_device_from(&e))?;
    let names: Vec<String> = list.iter().map(|d| d.name()).collect();
    if names.is_empty() {
        return Err(VerbsError::NoDevice { why: "libibverbs lists no device".into() });
    }
    Ok(names)
}

fn no_device_from(e: &sideway::ibverbs::device::GetDeviceListError) -> VerbsError {
    let sideway::ibverbs::device::GetDeviceListErrorKind::Ibverbs(io) = &e.0 else {
        return VerbsError::NoDevice { why: format!("listing devices failed: {e}") };
    };
    let why = match io.raw_os_error() {
        Some(libc::ENOSYS) => {
            "ibv_get_device_list failed with ENOSYS: the kernel has no RDMA support".to_string()
        }
        Some(libc::EOPNOTSUPP) => {
            "libibverbs could not be loaded (install libibverbs1 and the provider packages)"
                .to_string()
        }
        _ => format!("ibv_get_device_list failed: {io}"),
    };
    VerbsError::NoDevice { why }
}

/// An opened device and what this node needs to know about its port.
pub(crate) struct Device {
    pub(crate) name: String,
    pub(crate) context: Arc<DeviceContext>,
    pub(crate) pd: Arc<ProtectionDomain>,
    pub(crate) address: PortAddress,
    pub(crate) atomics: AtomicCapability,
    pub(crate) max_mr_bytes: u64,
    pub(crate) send_queue_depth: u32,
    /// Whether regions can be scoped to one connection (type 2 memory windows, and queue pairs
    /// created able to bind them); `Err` says why not.
    pub(crate) windows: Result<(), String>,
}

impl Device {
    pub(crate) fn open(config: &VerbsConfig) -> Result<Device, VerbsError> {
        let list = DeviceList::new().map_err(|e| no_device_from(&e))?;
        if list.is_empty() {
            return Err(VerbsError::NoDevice { why: "libibverbs lists no device".into() });
        }
        let device = match &config.device_name {
            None => list.get(0),
            Some(name) => list.iter().find(|d| d.name() == *name),
        }
        .ok_or_else(|| VerbsError::NoDevice {
            why: format!(
                "no device named {:?} (devices: {})",
                config.device_name.as_deref().unwrap_or(""),
                list.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
            ),
        })?;
        let name = device.name();
        let fail = |what: &str, message: String| VerbsError::Device {
            device: name.clone(),
            what: what.to_string(),
            message,
        };
        let context = device.open().map_err(|e| fail("opening", e.to_string()))?;
        let attr = context.query_device().map_err(|e| fail("querying", e.to_string()))?;
        let port = context
            .query_port(config.port)
            .map_err(|e| fail(&format!("querying port {}", config.port), e.to_string()))?;
        let gid_index = match (config.gid_index, port.link_layer()) {
            (Some(index), _) => Some(index),
            (None, LinkLayer::InfiniBand) => None,
            (None, _) => {
                Some(pick_gid(&context, config.port, port.gid_tbl_len()).ok_or_else(|| {
                    fail("choosing a GID", "the port's GID table has no usable entry".into())
                })?)
            }
        };
        let gid = match gid_index {
            None => None,
            Some(index) => {
                let gid = context
                    .query_gid(config.port, index)
                    .map_err(|e| fail(&format!("reading GID {index}"), e.to_string()))?;
                Some((index, gid.raw))
            }
        };
        let pd = context
            .alloc_pd()
            .map_err(|e| fail("allocating a protection domain", e.to_string()))?;
        let max_qp_wr = u32::try_from(attr.max_qp_wr()).unwrap_or(0);
        let send_queue_depth =
            config.send_queue_depth.min(max_qp_wr.saturating_sub(WINDOW_BIND_ROOM).max(2));
        let windows = window_support(&name, attr.device_cap_flags(), attr.max_mw());
        Ok(Device {
            name,
            context,
            pd,
            address: PortAddress {
                port: config.port,
                lid: port.lid(),
                gid,
                mtu: port.active_mtu() as u32,
            },
            atomics: attr.atomic_capability(),
            max_mr_bytes: attr.max_mr_size(),
            send_queue_depth,
            windows,
        })
    }

    /// A completion queue for one queue pair: room for every completion its send queue can have
    /// outstanding, twice over (completions of requests lost in a reset may still sit in it while
    /// new ones arrive).
    pub(crate) fn completion_queue(&self) -> Result<Arc<ExtendedCompletionQueue>, String> {
        self.context
            .create_cq_builder()
            .setup_cqe((self.send_queue_depth + WINDOW_BIND_ROOM) * 2)
            .build_ex()
            .map_err(|e| format!("creating a completion queue: {e}"))
    }

    /// An RC queue pair on the extended (`ibv_wr_*`) API for writes, reads and compare-and-swap,
    /// and window binds where the device has type 2 windows, completing into `cq`.
    pub(crate) fn queue_pair(
        &self,
        cq: &Arc<ExtendedCompletionQueue>,
        inline_bytes: u32,
    ) -> Result<ExtendedQueuePair, String> {
        let cq = GenericCompletionQueue::from(Arc::clone(cq));
        let mut operations = SendOperationFlags::Write
            | SendOperationFlags::Read
            | SendOperationFlags::AtomicCompareAndSwap;
        if self.windows.is_ok() {
            operations |= SendOperationFlags::BindMemoryWindow;
        }
        self.pd
            .create_qp_builder()
            .setup_qp_type(QueuePairType::ReliableConnection)
            .setup_max_send_wr(self.send_queue_depth + WINDOW_BIND_ROOM)
            // Nothing is ever received: one-sided operations only.
            .setup_max_recv_wr(1)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_max_inline_data(inline_bytes)
            .setup_send_cq(cq.clone())
            .setup_recv_cq(cq)
            .setup_send_ops_flags(operations)
            .build_ex()
            .map_err(|e| {
                format!("creating a queue pair: {e} ({:?})", std::error::Error::source(&e))
            })
    }

    /// The first queue pair, with the largest inline size the device accepts; returns it with that
    /// size. A device that advertises type 2 windows but whose provider creates no queue pair
    /// able to bind them is taken as one without windows (scoping a region to one connection is
    /// then refused, saying so), rather than not opening at all.
    pub(crate) fn first_queue_pair(
        &mut self,
        cq: &Arc<ExtendedCompletionQueue>,
    ) -> Result<(ExtendedQueuePair, u32), VerbsError> {
        let mut last = String::new();
        for inline_bytes in INLINE_BYTES_TRIED {
            match self.queue_pair(cq, inline_bytes) {
                Ok(qp) => return Ok((qp, inline_bytes)),
                Err(e) => last = e,
            }
        }
        if self.windows.is_ok() {
            self.windows = Err(format!(
                "device {} creates no queue pair that binds memory windows ({last})",
                self.name
            ));
            return self.first_queue_pair(cq);
        }
        Err(VerbsError::Device {
            device: self.name.clone(),
            what: "creating a queue pair with at least 64 bytes of inline data".into(),
            message: last,
        })
    }
}

/// The first non-link-local GID of the port (routable RoCE v2), else its first non-zero one.
fn pick_gid(context: &DeviceContext, port: u8, table_len: i32) -> Option<u32> {
    let entries: Vec<(u32, sideway::ibverbs::address::Gid)> = (0..u32::try_from(table_len).ok()?)
        .filter_map(|i| context.query_gid(port, i).ok().map(|g| (i, g)))
        .filter(|(_, g)| !g.is_zero())
        .collect();
    entries
        .iter()
        .find(|(_, g)| !g.is_unicast_link_local())
        .or_else(|| entries.first())
        .map(|(i, _)| *i)
}

/// The verbs remote access flags for the fabric's [`Access`]. Local write is always on: reads land
/// in regions and compare-and-swap results in scratch words.
pub(crate) fn access_flags(access: Access) -> AccessFlags {
    let mut flags = AccessFlags::LocalWrite;
    if access.contains(Access::READ) {
        flags |= AccessFlags::RemoteRead;
    }
    if access.contains(Access::WRITE) {
        flags |= AccessFlags::RemoteWrite;
    }
    if access.contains(Access::ATOMIC) {
        flags |= AccessFlags::RemoteAtomic;
    }
    flags
}

/// A queue pair's remote access flags (what goes into `qp_access_flags`), and a window's.
fn qp_access_bits(access: Access) -> u32 {
    // Local write means nothing on a queue pair; only the remote flags.
    (access_flags(access) & !AccessFlags::LocalWrite).bits() as u32
}

/// This node's port: where peers send to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PortAddress {
    pub(crate) port: u8,
    pub(crate) lid: u16,
    /// (index, GID) when packets carry a global route header.
    pub(crate) gid: Option<(u32, [u8; 16])>,
    /// The port's active MTU as verbs encodes it.
    pub(crate) mtu: u32,
}

/// Where a peer's queue pair is: its number and first PSN, and its port's address.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Destination {
    pub(crate) qp_number: u32,
    pub(crate) psn: u32,
    pub(crate) lid: u16,
    pub(crate) gid: Option<[u8; 16]>,
    pub(crate) mtu: u32,
}

/// Timing of a queue pair's retransmissions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retry {
    pub(crate) ack_timeout_exponent: u8,
    pub(crate) retry_count: u8,
}

/// The raw queue pair a control-plane change applies to. Changing a queue pair with
/// `ibv_modify_qp` while another thread posts on it is allowed by libibverbs; this handle never
/// forms a Rust reference to the sideway object the data path owns.
#[derive(Clone, Copy)]
pub(crate) struct RawQp(pub(crate) NonNull<ibv_qp>);

// SAFETY: a C handle; libibverbs serializes what must be serialized inside the provider.
unsafe impl Send for RawQp {}
// SAFETY: as above.
unsafe impl Sync for RawQp {}

impl RawQp {
    /// Calls `ibv_modify_qp`; `Err(errno)` on failure (verbs then leaves the queue pair as it was).
    fn modify(&self, attr: &mut ibv_qp_attr, mask: u32) -> Result<(), i32> {
        // SAFETY: the queue pair lives as long as the side that owns this handle (the caller holds
        // it), `attr` is a valid attribute block for the duration of the call.
        let rc = unsafe { rdma_mummy_sys::ibv_modify_qp(self.0.as_ptr(), attr, mask as i32) };
        if rc == 0 {
            Ok(())
        } else {
            Err(rc)
        }
    }

    pub(crate) fn move_to_reset(&self) -> Result<(), i32> {
        let mut attr = zeroed_attr();
        attr.qp_state = ibv_qp_state::IBV_QPS_RESET;
        self.modify(&mut attr, ibv_qp_attr_mask::IBV_QP_STATE.0)
    }

    pub(crate) fn move_to_error(&self) -> Result<(), i32> {
        let mut attr = zeroed_attr();
        attr.qp_state = ibv_qp_state::IBV_QPS_ERR;
        self.modify(&mut attr, ibv_qp_attr_mask::IBV_QP_STATE.0)
    }

    pub(crate) fn move_to_init(&self, port: u8, access: Access) -> Result<(), i32> {
        let mut attr = zeroed_attr();
        attr.qp_state = ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = port;
        attr.qp_access_flags = qp_access_bits(access);
        self.modify(
            &mut attr,
            (ibv_qp_attr_mask::IBV_QP_STATE
                | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
                | ibv_qp_attr_mask::IBV_QP_PORT
                | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS)
                .0,
        )
    }

    pub(crate) fn move_to_rtr(
        &self,
        local: &PortAddress,
        to: &Destination,
        access: Access,
    ) -> Result<(), i32> {
        let mut attr = zeroed_attr();
        attr.qp_state = ibv_qp_state::IBV_QPS_RTR;
        attr.path_mtu = local.mtu.min(to.mtu);
        attr.dest_qp_num = to.qp_number;
        attr.rq_psn = to.psn;
        attr.max_dest_rd_atomic = RD_ATOMIC_MAX;
        attr.min_rnr_timer = 12;
        attr.qp_access_flags = qp_access_bits(access);
        attr.ah_attr.dlid = to.lid;
        attr.ah_attr.sl = 0;
        attr.ah_attr.src_path_bits = 0;
        attr.ah_attr.port_num = local.port;
        if let (Some((index, _)), Some(gid)) = (local.gid, to.gid) {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid.raw = gid;
            attr.ah_attr.grh.sgid_index = u8::try_from(index).unwrap_or(u8::MAX);
            attr.ah_attr.grh.hop_limit = 64;
        }
        self.modify(
            &mut attr,
            (ibv_qp_attr_mask::IBV_QP_STATE
                | ibv_qp_attr_mask::IBV_QP_AV
                | ibv_qp_attr_mask::IBV_QP_PATH_MTU
                | ibv_qp_attr_mask::IBV_QP_DEST_QPN
                | ibv_qp_attr_mask::IBV_QP_RQ_PSN
                | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
                | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER
                | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS)
                .0,
        )
    }

    pub(crate) fn move_to_rts(&self, psn: u32, retry: Retry, access: Access) -> Result<(), i32> {
        let mut attr = zeroed_attr();
        attr.qp_state = ibv_qp_state::IBV_QPS_RTS;
        attr.sq_psn = psn;
        attr.timeout = retry.ack_timeout_exponent;
        attr.retry_cnt = retry.retry_count;
        // Nothing is ever received, so a receiver-not-ready NAK cannot happen; retry as for loss.
        attr.rnr_retry = retry.retry_count;
        attr.max_rd_atomic = RD_ATOMIC_MAX;
        attr.qp_access_flags = qp_access_bits(access);
        self.modify(
            &mut attr,
            (ibv_qp_attr_mask::IBV_QP_STATE
                | ibv_qp_attr_mask::IBV_QP_SQ_PSN
                | ibv_qp_attr_mask::IBV_QP_TIMEOUT
                | ibv_qp_attr_mask::IBV_QP_RETRY_CNT
                | ibv_qp_attr_mask::IBV_QP_RNR_RETRY
                | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC
                | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS)
                .0,
        )
    }

    /// RTS→RTS changing the access flags only: Mu's fast permission path.
    pub(crate) fn change_access(&self, access: Access) -> Result<(), i32> {
        let mut attr = zeroed_attr();
        attr.qp_state = ibv_qp_state::IBV_QPS_RTS;
        attr.qp_access_flags = qp_access_bits(access);
        self.modify(
            &mut attr,
            (ibv_qp_attr_mask::IBV_QP_STATE | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS).0,
        )
    }
}

impl RawQp {
    /// Posts, unsignaled, the bind of type 2 window `window` to this queue pair with key `rkey`,
    /// over `[addr, addr + len_bytes)` of `mr` with remote access `access`. `Err(errno)` when
    /// the post is refused (nothing was posted). The queue pair must be ready to send.
    ///
    /// The data path posts on the same queue pair through its sideway handle, from its own
    /// thread. That is sound because libibverbs makes `ibv_wr_start` … `ibv_wr_complete` a
    /// per-queue-pair critical section that the provider locks (queue pairs here have no thread
    /// domain), and the work request's id and flags live in the shared `ibv_qp_ex`, written only
    /// inside that section, here as in sideway. (A provider told to skip its locks, such as
    /// mlx5 with `MLX5_SINGLE_THREADED=1`, must not be used with scoped regions.)
    ///
    /// Nothing waits for the bind: a bind that fails on the device fails as any request does, it
    /// moves the queue pair to error, so the data path's next requests are flushed and it
    /// reports the side in error; the bind's own completion is one no endpoint knows (see
    /// [`WINDOW_BIND_WR_ID`]). Its send-queue entry is freed with the next signaled completion
    /// the endpoint polls, within [`WINDOW_BIND_ROOM`].
    pub(crate) fn bind_window(
        &self,
        window: &MemoryWindow,
        rkey: u32,
        mr: &MemoryRegion,
        addr: u64,
        len_bytes: u64,
        access: Access,
    ) -> Result<(), i32> {
        // The queue pair was created with the extended API, so it has an `ibv_qp_ex` whose
        // `wr_start`, `wr_complete` and `wr_abort` are set; a bind is built only if the provider
        // set `wr_bind_mw` (it does for queue pairs created with `IBV_QP_EX_WITH_BIND_MW`, i.e.
        // where the device has windows).
        // SAFETY: the queue pair lives as long as the side owning this handle (the caller holds
        // it); between `ibv_wr_start` and `ibv_wr_complete`/`ibv_wr_abort` the provider holds
        // its lock, so the `ibv_qp_ex` fields race with no other thread (see above); `window`
        // and `mr` are live handles of its protection domain; `info` outlives the call.
        unsafe {
            let qpx = ibv_qp_to_qp_ex(self.0.as_ptr());
            if qpx.is_null() {
                return Err(libc::EOPNOTSUPP);
            }
            ibv_wr_start(qpx);
            if (*qpx).wr_bind_mw.is_none() {
                ibv_wr_abort(qpx);
                return Err(libc::EOPNOTSUPP);
            }
            (*qpx).wr_id = WINDOW_BIND_WR_ID;
            (*qpx).wr_flags = 0;
            let info = ibv_mw_bind_info {
                mr: mr.mr().as_ptr(),
                addr,
                length: len_bytes,
                mw_access_flags: qp_access_bits(access),
            };
            ibv_wr_bind_mw(qpx, window.as_ptr(), rkey, &info);
            match ibv_wr_complete(qpx) {
                0 => Ok(()),
                errno => Err(errno),
            }
        }
    }
}

fn zeroed_attr() -> ibv_qp_attr {
    // SAFETY: `ibv_qp_attr` is a C struct of integers and unions of integer arrays: all zeros is a
    // valid value of it (and what the C examples start from).
    unsafe { std::mem::MaybeUninit::<ibv_qp_attr>::zeroed().assume_init() }
}

/// An errno as text for messages.
pub(crate) fn errno_text(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}
