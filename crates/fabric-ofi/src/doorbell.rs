//! The node's doorbell (`mu_fabric::Fabric::ring_doorbell`): a count in this process that the
//! node's idle threads wait on, raised by this node itself or by a peer's ring, which travels as
//! one small message on the peer's liveness watch, the TCP connection it already holds to this
//! node's liveness port (`liveness.rs`). A ring is a hint: one lost on the way leaves a waiter
//! to its timeout, and one that is not for this cluster is dropped.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// A ring on a watch: magic, then the ringer's cluster tag (little-endian).
pub(crate) const RING_MAGIC: [u8; 4] = *b"MURG";
pub(crate) const RING_BYTES: usize = 8;

/// The 32 bits of a cluster id a ring carries: enough to drop rings of another cluster that
/// reach this port by mistake.
pub(crate) fn cluster_tag(cluster_id: u64) -> u32 {
    (cluster_id ^ cluster_id >> 32) as u32
}

pub(crate) fn ring_message(cluster_id: u64) -> [u8; RING_BYTES] {
    let mut m = [0u8; RING_BYTES];
    m[..4].copy_from_slice(&RING_MAGIC);
    m[4..].copy_from_slice(&cluster_tag(cluster_id).to_le_bytes());
    m
}

/// The count and its waiters.
#[derive(Default)]
pub(crate) struct Doorbell {
    count: Mutex<u64>,
    rung: Condvar,
}

impl Doorbell {
    pub(crate) fn count(&self) -> u64 {
        *self.count.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn ring(&self) {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.rung.notify_all();
    }

    /// Waits until the count is no longer `seen`, at most `timeout_ns`; the count then.
    pub(crate) fn wait(&self, seen: u64, timeout_ns: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_nanos(timeout_ns);
        let mut count = self.count.lock().unwrap_or_else(|p| p.into_inner());
        while *count == seen {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            count = self.rung.wait_timeout(count, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        *count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_ring_wakes_a_waiter_and_a_wait_without_one_times_out() {
        let bell = Arc::new(Doorbell::default());
        let waiter = {
            let bell = bell.clone();
            std::thread::spawn(move || bell.wait(0, 10_000_000_000))
        };
        std::thread::sleep(Duration::from_millis(20));
        bell.ring();
        assert_eq!(waiter.join().unwrap(), 1);
        assert_eq!(bell.wait(1, 1_000_000), 1, "nobody rang");
        assert_eq!(bell.wait(0, 10_000_000_000), 1, "rung before the wait: at once");
    }

    #[test]
    fn ring_messages_carry_the_cluster() {
        let m = ring_message(0x1234_5678_9abc_def0);
        assert_eq!(m[..4], RING_MAGIC);
        assert_eq!(
            u32::from_le_bytes([m[4], m[5], m[6], m[7]]),
            cluster_tag(0x1234_5678_9abc_def0)
        );
        assert_ne!(cluster_tag(1), cluster_tag(2));
    }
}
