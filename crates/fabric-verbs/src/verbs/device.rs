//! Device discovery, the protection domain, addressing, and the raw `ibv_modify_qp` calls.

use crate::{VerbsConfig, VerbsError};
use mu_fabric::Access;
use rdma_mummy_sys::{ibv_qp, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_state};
use sideway::ibverbs::completion::{ExtendedCompletionQueue, GenericCompletionQueue};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{AtomicCapability, DeviceContext, LinkLayer};
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
        let send_queue_depth =
            config.send_queue_depth.min(u32::try_from(attr.max_qp_wr()).unwrap_or(0).max(2));
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
        })
    }

    /// A completion queue for one queue pair: room for every completion its send queue can have
    /// outstanding, twice over (completions of requests lost in a reset may still sit in it while
    /// new ones arrive).
    pub(crate) fn completion_queue(&self) -> Result<Arc<ExtendedCompletionQueue>, String> {
        self.context
            .create_cq_builder()
            .setup_cqe(self.send_queue_depth * 2)
            .build_ex()
            .map_err(|e| format!("creating a completion queue: {e}"))
    }

    /// An RC queue pair on the extended (`ibv_wr_*`) API for writes, reads and compare-and-swap,
    /// completing into `cq`.
    pub(crate) fn queue_pair(
        &self,
        cq: &Arc<ExtendedCompletionQueue>,
        inline_bytes: u32,
    ) -> Result<ExtendedQueuePair, String> {
        let cq = GenericCompletionQueue::from(Arc::clone(cq));
        self.pd
            .create_qp_builder()
            .setup_qp_type(QueuePairType::ReliableConnection)
            .setup_max_send_wr(self.send_queue_depth)
            // Nothing is ever received: one-sided operations only.
            .setup_max_recv_wr(1)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_max_inline_data(inline_bytes)
            .setup_send_cq(cq.clone())
            .setup_recv_cq(cq)
            .setup_send_ops_flags(
                SendOperationFlags::Write
                    | SendOperationFlags::Read
                    | SendOperationFlags::AtomicCompareAndSwap,
            )
            .build_ex()
            .map_err(|e| {
                format!("creating a queue pair: {e} ({:?})", std::error::Error::source(&e))
            })
    }

    /// The first queue pair, with the largest inline size the device accepts; returns it with that
    /// size.
    pub(crate) fn first_queue_pair(
        &self,
        cq: &Arc<ExtendedCompletionQueue>,
    ) -> Result<(ExtendedQueuePair, u32), VerbsError> {
        let mut last = String::new();
        for inline_bytes in INLINE_BYTES_TRIED {
            match self.queue_pair(cq, inline_bytes) {
                Ok(qp) => return Ok((qp, inline_bytes)),
                Err(e) => last = e,
            }
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

/// A queue pair's remote access flags (what goes into `qp_access_flags`).
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

fn zeroed_attr() -> ibv_qp_attr {
    // SAFETY: `ibv_qp_attr` is a C struct of integers and unions of integer arrays: all zeros is a
    // valid value of it (and what the C examples start from).
    unsafe { std::mem::MaybeUninit::<ibv_qp_attr>::zeroed().assume_init() }
}

/// An errno as text for messages.
pub(crate) fn errno_text(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}
