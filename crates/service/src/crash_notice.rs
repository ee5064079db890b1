//! Crash notices for a client on the replicas' host (shm fabric): while the client has a
//! connection to a replica, a thread sleeps on that replica's death flag
//! ([`mu_fabric_shm::DeathWatch`]) and shuts the connection down the moment the replica dies.
//! The client's read then ends at once and it moves to the others, instead of waiting out its
//! attempt wait for an answer that will not come: a killed process's sockets close only once
//! the kernel has torn down its memory (its logs), milliseconds after the kernel marked it
//! dead. Nothing depends on it: without the notice, the client's timeouts do the same later.

use crate::socket::Stream;
use mu_fabric::NodeId;
use mu_fabric_shm::DeathWatch;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often a watcher looks whether its connection is still wanted, and at the replica's death
/// flag: a crash wakes it at once where a replica on the host watches the dead one (the case
/// that matters: another replica takes over), and is seen this long after at most otherwise.
const RECHECK: Duration = Duration::from_millis(10);

/// Where the replicas' fabric nodes are: a run directory on the shm fabric, and the cluster.
#[derive(Clone, Debug)]
pub(crate) struct CrashNotices {
    pub dir: PathBuf,
    pub cluster_id: u64,
}

/// Held with the connection it watches: once dropped, its thread ends at its next look.
pub(crate) struct Watched(#[allow(dead_code)] Arc<()>);

impl CrashNotices {
    /// Watches replica `node` for the connection `stream`; `None` where its node cannot be
    /// found (not started yet, another fabric) or no thread can be started.
    pub(crate) fn watch(&self, node: u16, stream: &Stream) -> Option<Watched> {
        let watch = DeathWatch::open(&self.dir, NodeId(node), self.cluster_id, RECHECK).ok()?;
        let stream = stream.try_clone().ok()?;
        let token = Arc::new(());
        let wanted = Arc::downgrade(&token);
        std::thread::Builder::new()
            .name("mu-client-crash-watch".into())
            .stack_size(64 * 1024)
            .spawn(move || shut_when_dead(&watch, &stream, &wanted))
            .ok()?;
        Some(Watched(token))
    }
}

fn shut_when_dead(watch: &DeathWatch, stream: &Stream, wanted: &Weak<()>) {
    while wanted.strong_count() > 0 {
        if watch.wait_dead(10 * RECHECK) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
    }
}
