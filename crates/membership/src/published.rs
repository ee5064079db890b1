//! The lease the node core publishes and application threads read without a lock or a system
//! call (§6.2: `Active` with a valid lease is a timestamp and a comparison).
//!
//! Three words (epoch, start, end) behind a sequence word: the core makes the sequence odd,
//! stores the words, makes it even again; a reader that sees the same even sequence before and
//! after reading the words has a consistent lease. One writer (the core's thread).

use std::sync::atomic::{fence, AtomicU64, Ordering};

/// A lease on the view of `epoch`, valid on this node's clock in `[start_ns, end_ns)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub epoch: u64,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct PublishedLease {
    seq: AtomicU64,
    epoch: AtomicU64,
    start_ns: AtomicU64,
    end_ns: AtomicU64,
}

/// How many times a reader tries before it answers "no lease" (the writer is mid-store for a
/// few nanoseconds; a reader that keeps losing the race says false, which is always safe).
const READ_TRIES: usize = 8;

impl PublishedLease {
    /// Publishes `lease` (the core's thread only).
    pub fn store(&self, lease: Lease) {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.epoch.store(lease.epoch, Ordering::Relaxed);
        self.start_ns.store(lease.start_ns, Ordering::Relaxed);
        self.end_ns.store(lease.end_ns, Ordering::Relaxed);
        self.seq.store(seq + 2, Ordering::Release);
    }

    /// The lease published last, if any was and a consistent copy could be read.
    pub fn load(&self) -> Option<Lease> {
        for _ in 0..READ_TRIES {
            let before = self.seq.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let lease = Lease {
                epoch: self.epoch.load(Ordering::Relaxed),
                start_ns: self.start_ns.load(Ordering::Relaxed),
                end_ns: self.end_ns.load(Ordering::Relaxed),
            };
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                return (before != 0).then_some(lease);
            }
        }
        None
    }

    /// Whether the view of `epoch` is active at `now_ns` by the published lease.
    pub fn active_at(&self, epoch: u64, now_ns: u64) -> bool {
        self.load().is_some_and(|l| l.epoch == epoch && l.start_ns <= now_ns && now_ns < l.end_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn nothing_is_active_before_a_lease_is_published() {
        let p = PublishedLease::default();
        assert_eq!(p.load(), None);
        assert!(!p.active_at(0, 0));
        p.store(Lease { epoch: 3, start_ns: 10, end_ns: 20 });
        assert!(!p.active_at(3, 9) && p.active_at(3, 10) && p.active_at(3, 19));
        assert!(!p.active_at(3, 20) && !p.active_at(2, 15));
    }

    /// A reader never sees a mix of two leases: every lease published has end = start + 10
    /// and epoch = start, and a torn read would break that.
    #[test]
    fn readers_never_see_a_torn_lease() {
        let p = Arc::new(PublishedLease::default());
        let reading = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (p, reading) = (p.clone(), reading.clone());
            std::thread::spawn(move || {
                while !reading.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                for i in 1..50_000u64 {
                    p.store(Lease { epoch: i, start_ns: i, end_ns: i + 10 });
                    if i % 64 == 0 {
                        std::thread::yield_now(); // let the reader in on a busy machine
                    }
                }
            })
        };
        reading.store(true, Ordering::Release);
        while !writer.is_finished() {
            if let Some(l) = p.load() {
                assert_eq!((l.start_ns, l.end_ns), (l.epoch, l.epoch + 10), "torn: {l:?}");
            }
        }
        writer.join().unwrap();
        let last = Lease { epoch: 49_999, start_ns: 49_999, end_ns: 50_009 };
        assert_eq!(p.load(), Some(last));
    }
}
