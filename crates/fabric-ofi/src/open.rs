//! Opening a node: its provider's domain, its identity and hello board (readable and writable by
//! peers), its liveness port, its channels, and a progress thread where the provider needs one.

use crate::channel::Channel;
use crate::config::{OfiConfig, ProviderWays, CHANNELS, LIVENESS_PORT_OFFSET};
use crate::ffi::Domain;
use crate::keys::{HELLO_BYTES, HELLO_KEY, IDENTITY_BYTES, IDENTITY_KEY};
use crate::liveness::Liveness;
use crate::node::{Control, Node, OfiFabric};
use crate::region::Memory;
use crate::streams_rule::opener_key;
use mu_fabric::{FabricError, NodeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
        let liveness_port = me.base_port + LIVENESS_PORT_OFFSET;
        let liveness = Liveness::listen(&me.host, liveness_port, incarnation, config.cluster_id)
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
