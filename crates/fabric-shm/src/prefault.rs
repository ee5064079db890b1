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

use crate::remote_region::RemoteRegion;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;

/// The node's queue of regions to pre-fault, and its thread. Started with the node, so that no
/// binding or first operation pays for starting a thread. When the node is dropped the thread
/// stops after the region in hand, letting the rest of the queue go unmapped.
pub(crate) struct Prefaulter {
    tx: Option<Sender<Arc<RemoteRegion>>>,
    stopping: Arc<AtomicBool>,
}

impl Prefaulter {
    /// Starts the thread. If it cannot start, regions are left to fault in on use, as without
    /// this module: nothing but speed depends on it.
    pub(crate) fn start() -> Prefaulter {
        let (sender, receiver) = mpsc::channel::<Arc<RemoteRegion>>();
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = stopping.clone();
        let started = std::thread::Builder::new().name("mu-shm-prefault".into()).spawn(move || {
            for region in receiver {
                if stop.load(Ordering::Acquire) {
                    break;
                }
                region.map.prefault();
            }
        });
        Prefaulter { tx: started.is_ok().then_some(sender), stopping }
    }

    /// Queues `region` to be pre-faulted.
    pub(crate) fn queue(&self, region: Arc<RemoteRegion>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(region);
        }
    }
}

impl Drop for Prefaulter {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
    }
}
