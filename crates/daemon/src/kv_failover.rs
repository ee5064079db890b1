//! A failover of a key-value cluster as its clients see it: from the moment the leader (or
//! uKharon-KV's primary) is killed to the first operation that completes afterwards at another
//! replica. What `mu demo` reports and `mu bench ukharon-kv` times, measured the same way.
//!
//! Client threads report each answered operation ([`FailoverClock::answered`]); the thread that
//! kills marks the moment just before it sends the signal ([`FailoverClock::killing`]). An
//! answer from the old leader can still arrive just after the kill (it was sent before), so
//! completion time alone would measure nothing: only an answer from another replica ends the
//! failover.

use crate::interrupt;
use crate::kv_cluster::KvCluster;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// No replica (before the first answer, before the kill).
const NONE: u16 = u16::MAX;

/// How long [`leader_serving_clients`] waits for the agreed leader to be the one serving.
pub const LEADER_SETTLE: Duration = Duration::from_secs(5);

/// See the module docs. Times are nanoseconds since the clock was made.
pub struct FailoverClock {
    start: Instant,
    /// When the leader was killed (0: not yet).
    kill_at_ns: AtomicU64,
    /// The killed replica (set before `kill_at_ns`).
    killed: AtomicU16,
    /// When the first operation after the kill completed at another replica (0: none yet).
    first_after_kill_ns: AtomicU64,
    /// The replica that answered the latest operation.
    last_served_by: AtomicU16,
}

impl Default for FailoverClock {
    fn default() -> Self {
        FailoverClock::new()
    }
}

impl FailoverClock {
    pub fn new() -> FailoverClock {
        FailoverClock {
            start: Instant::now(),
            kill_at_ns: AtomicU64::new(0),
            killed: AtomicU16::new(NONE),
            first_after_kill_ns: AtomicU64::new(0),
            last_served_by: AtomicU16::new(NONE),
        }
    }

    /// Nanoseconds since the clock was made (at least 1: 0 means "not yet" here).
    pub fn now_ns(&self) -> u64 {
        (self.start.elapsed().as_nanos() as u64).max(1)
    }

    /// An operation was answered by replica `by`, completing at `done_ns` (read with
    /// [`FailoverClock::now_ns`] right after the answer).
    pub fn answered(&self, by: u16, done_ns: u64) {
        self.last_served_by.store(by, Ordering::Relaxed);
        let kill_at = self.kill_at_ns.load(Ordering::Acquire);
        let another = by != self.killed.load(Ordering::Acquire);
        if kill_at != 0 && done_ns > kill_at && another {
            let _ = self.first_after_kill_ns.compare_exchange(
                0,
                done_ns,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    /// Replica `id` is about to be killed: the failover starts now. Returns the kill time.
    pub fn killing(&self, id: u16) -> u64 {
        self.killed.store(id, Ordering::Release);
        let at = self.now_ns();
        self.kill_at_ns.store(at, Ordering::Release);
        at
    }

    /// When the kill was marked, if it was.
    pub fn kill_at_ns(&self) -> Option<u64> {
        Some(self.kill_at_ns.load(Ordering::Acquire)).filter(|&t| t != 0)
    }

    /// From the kill to the first answer from another replica, once there was one.
    pub fn failover_ns(&self) -> Option<u64> {
        let kill_at = self.kill_at_ns()?;
        let resumed = self.first_after_kill_ns.load(Ordering::Acquire);
        (resumed != 0).then(|| resumed.saturating_sub(kill_at))
    }

    /// The replica that answered the latest operation, if any did.
    pub fn last_served_by(&self) -> Option<u16> {
        Some(self.last_served_by.load(Ordering::Relaxed)).filter(|&r| r != NONE)
    }
}

/// The leader to kill: the one a majority of replicas agree on, once it is also the one that
/// answered the clients' latest operation. Soon after start-up leadership can still move, and
/// killing a replica the clients had already left would time no failover: the next answer
/// would come from the new leader at once (a run once reported 4 µs). Looks for up to
/// [`LEADER_SETTLE`]; a leader that is agreed on but has served no client by then is an error.
pub fn leader_serving_clients(clock: &FailoverClock, cluster: &KvCluster) -> Result<u16, String> {
    let deadline = Instant::now() + LEADER_SETTLE;
    loop {
        interrupt::check()?;
        let agreed = cluster.current_leader();
        let served_by = clock.last_served_by();
        match agreed {
            Ok(leader) if Some(leader) == served_by => return Ok(leader),
            _ if Instant::now() >= deadline => {
                return Err(format!(
                    "no settled leader to kill: after {} s the replicas agree on {} and the \
                     clients were last served by {}",
                    LEADER_SETTLE.as_secs(),
                    agreed.map_or_else(|e| format!("none ({e})"), |l| format!("replica {l}")),
                    served_by.map_or_else(|| "none".to_string(), |r| format!("replica {r}"))
                ))
            }
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_answer_from_another_replica_after_the_kill_ends_the_failover() {
        let clock = FailoverClock::new();
        clock.answered(1, clock.now_ns());
        assert_eq!(clock.last_served_by(), Some(1));
        assert_eq!(clock.failover_ns(), None, "no kill yet");
        let kill_at = clock.killing(1);
        clock.answered(1, kill_at + 10);
        assert_eq!(clock.failover_ns(), None, "the killed replica's late answer");
        clock.answered(2, kill_at - 1);
        assert_eq!(clock.failover_ns(), None, "completed before the kill");
        clock.answered(2, kill_at + 500);
        clock.answered(0, kill_at + 900);
        assert_eq!(clock.failover_ns(), Some(500), "the first one counts");
        assert_eq!(clock.last_served_by(), Some(0));
    }
}
