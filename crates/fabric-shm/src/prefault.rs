//! Pre-faulting peers' regions off the data path.
//!
//! A node maps a peer's region when it first binds a connection to it, but the mapping's page
//! tables fill only as pages are touched. On the replication path that is the worst moment: a
//! follower never writes into the other followers' logs, so when it becomes leader its first
//! rounds take a page fault for every page they touch (measured on a 2-vCPU virtual machine: a
//! new Velos leader's first write to a surviving follower took 8 to 14 µs, against about 1 µs
//! once its pages were mapped). Filling the page tables when the region is mapped costs about
//! 0.1 ms per megabyte (1.5 ms for a default 16 MB log), too long for the thread that binds
//! (a leader's replication thread binding a restarted follower would stall its proposals). So
//! a thread of the node's own does it, in the background, one region after another.
//!
//! Rejected: `MAP_POPULATE` at mapping time (the same cost on the binding thread), and
//! pre-faulting only where a new leader will write (which pages those are is the protocol's
//! business, not the fabric's).

use crate::node::RemoteRegion;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};

/// The node's queue of regions to pre-fault. The thread starts with the first region and ends
/// with the node (when its sender is dropped), after the region in hand.
pub(crate) struct Prefaulter {
    tx: Mutex<Option<Sender<Arc<RemoteRegion>>>>,
}

impl Prefaulter {
    pub(crate) fn new() -> Prefaulter {
        Prefaulter { tx: Mutex::new(None) }
    }

    /// Queues `region` to be pre-faulted. If no thread can be started, the region is left to
    /// fault in on use, as without this module: nothing but speed depends on it.
    pub(crate) fn queue(&self, region: Arc<RemoteRegion>) {
        let mut tx = crate::node::lock(&self.tx);
        if tx.is_none() {
            let (sender, receiver) = mpsc::channel::<Arc<RemoteRegion>>();
            let started =
                std::thread::Builder::new().name("mu-shm-prefault".into()).spawn(move || {
                    for region in receiver {
                        region.map.prefault();
                    }
                });
            if started.is_err() {
                return;
            }
            *tx = Some(sender);
        }
        if let Some(sender) = tx.as_ref() {
            let _ = sender.send(region);
        }
    }
}
