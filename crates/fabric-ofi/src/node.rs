//! A node: its domain, its regions, its channels (one endpoint each) and the sides of its
//! connections — the state the control plane and the data path share.

use crate::channel::{Channel, Mail};
use crate::config::{OfiConfig, ProviderWays, CHANNELS};
use crate::ffi::{Domain, MemoryRegistration, RawEndpoint};
use crate::keys::{Identity, IDENTITY_BYTES};
use crate::liveness::Liveness;
use crate::region::{Memory, OfiRegion};
use crate::side::Side;
use mu_fabric::{Access, ConnId, FabricError, NodeId, RegionId, RegionScope};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The last binding of a (channel, peer) that did not succeed.
pub(crate) enum BindAttempt {
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

pub(crate) struct RegionEntry {
    pub(crate) region: OfiRegion,
    pub(crate) access: Access,
    /// The connections whose sides may hold registrations of it.
    pub(crate) scope: RegionScope,
}

#[derive(Default)]
pub(crate) struct Control {
    pub(crate) regions: BTreeMap<RegionId, RegionEntry>,
    pub(crate) sides: HashMap<ConnId, Arc<Side>>,
}

pub(crate) struct Node {
    pub(crate) id: NodeId,
    pub(crate) incarnation: u32,
    pub(crate) ways: ProviderWays,
    pub(crate) config: OfiConfig,
    pub(crate) inject_bytes: usize,
    pub(crate) control: Mutex<Control>,
    pub(crate) channels: Mutex<Vec<Option<Arc<Channel>>>>,
    pub(crate) next_token: AtomicU16,
    pub(crate) next_control: AtomicU64,
    /// Binding reads that outlived the call that posted them, by (channel, peer), with when
    /// they were posted: a peer that did not answer in time (cut off, or gone with its
    /// connection still open) is not waited for again by every later call.
    pub(crate) binds_under_way: Mutex<HashMap<(u8, NodeId), BindAttempt>>,
    pub(crate) identity_bytes: Arc<Memory>,
    /// Where lower peers say hello (`hello`): one word per (channel, peer), written by them.
    pub(crate) hello_board: Arc<Memory>,
    /// The hello word each (channel, lower peer) had when this node last bound to it: a
    /// binding needs a newer one.
    pub(crate) hellos_taken: Mutex<HashMap<(u8, NodeId), u64>>,
    /// Every node's IPv4 address as `listening` resolved it.
    pub(crate) listening_ips: Mutex<HashMap<NodeId, std::net::Ipv4Addr>>,
    /// This node in the process's count of nodes that may open streams to each peer
    /// (`enforce_opener`).
    pub(crate) opener: crate::streams::Opener,
    /// One turn per (channel, peer) for control posts (`post_control`).
    pub(crate) posting: Mutex<HashMap<(u8, NodeId), Turn>>,
    /// Numbers this node's hellos, so that each differs from the one before.
    pub(crate) hello_count: AtomicU32,
    pub(crate) liveness: Liveness,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) progress: Mutex<Option<JoinHandle<()>>>,
    pub(crate) identity_registration: Mutex<Option<MemoryRegistration>>,
    pub(crate) hello_registration: Mutex<Option<MemoryRegistration>>,
    // Dropped last: everything above belongs to it.
    pub(crate) domain: Domain,
}

/// A node of the libfabric fabric. Cheap to clone; every clone is the same node.
#[derive(Clone)]
pub struct OfiFabric {
    pub(crate) node: Arc<Node>,
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
    pub(crate) fn publish_identity(&self, control: &Control) {
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
            let _ = c.address(&self.config, peer);
        }
        channels[channel as usize] = Some(c.clone());
        Ok(c)
    }

    pub(crate) fn side(&self, conn: ConnId) -> Arc<Side> {
        let mut control = self.control.lock().expect("control");
        control.sides.entry(conn).or_insert_with(|| Arc::new(Side::new(conn))).clone()
    }

    pub(crate) fn lock_side<'a>(
        control: &'a mut MutexGuard<'_, Control>,
        conn: ConnId,
    ) -> &'a Arc<Side> {
        control.sides.entry(conn).or_insert_with(|| Arc::new(Side::new(conn)))
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
