//! The polling plan for busy-poll loops on machines with fewer cores than spinning threads.
//!
//! A replica's fast path busy-polls: a completion or a new log entry is noticed within
//! nanoseconds. On a host where several replicas share two cores, pure spinning starves the very
//! thread being waited for, so every wait loop here goes through three phases:
//!
//! 1. **spin** for `spin_ns` with a CPU pause hint — the fast path, when the other side runs on
//!    another core;
//! 2. **yield** (`sched_yield`, about 0.5 µs) until `yield_ns` have passed — lets a waiting thread
//!    on this core run without giving up our time slice for long;
//! 3. **park** with a short sleep of `park_us` (a `nanosleep`, about 20–100 µs here) — idle
//!    threads stop burning a core.
//!
//! Latency-critical waits (a leader waiting for completions) use a long spin phase; background
//! waits (a failure detector between reads) start parking early.

use std::time::{Duration, Instant};

/// The three-phase wait described in the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub spin_ns: u64,
    pub yield_ns: u64,
    pub park_us: u64,
}

impl Backoff {
    /// For the fast path: spin 50 µs, yield until 2 ms, then park 50 µs at a time.
    pub const FAST_PATH: Backoff = Backoff { spin_ns: 50_000, yield_ns: 2_000_000, park_us: 50 };
    /// For a thread with a core of its own: spin, never yield or sleep.
    pub const POLL: Backoff = Backoff { spin_ns: u64::MAX, yield_ns: u64::MAX, park_us: 0 };
    /// For background threads: spin 2 µs, yield until 100 µs, then park 200 µs at a time.
    pub const BACKGROUND: Backoff = Backoff { spin_ns: 2_000, yield_ns: 100_000, park_us: 200 };

    /// Calls `ready` until it returns `Some`, or until `timeout` has passed (then `None`).
    pub fn wait_for<T>(
        &self,
        timeout: Duration,
        mut ready: impl FnMut() -> Option<T>,
    ) -> Option<T> {
        let start = Instant::now();
        let mut checks: u32 = 0;
        loop {
            if let Some(v) = ready() {
                return Some(v);
            }
            checks = checks.wrapping_add(1);
            // Reading the clock costs ~25 ns: only look at it every 64 checks while spinning.
            if checks & 63 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return None;
            }
            self.pause(waited.as_nanos() as u64);
        }
    }

    /// One pause of a loop that has found nothing to do for `idle_ns`: a spin hint, a yield or
    /// a short sleep, as the phases say.
    pub fn pause(&self, idle_ns: u64) {
        if idle_ns < self.spin_ns {
            std::hint::spin_loop();
        } else if idle_ns < self.yield_ns {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(self.park_us));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use std::time::Duration;

    #[test]
    fn wait_for_returns_value_or_times_out() {
        let mut n = 0;
        let got = Backoff::FAST_PATH.wait_for(Duration::from_secs(5), || {
            n += 1;
            (n == 1000).then_some(n)
        });
        assert_eq!(got, Some(1000));
        let none: Option<()> = Backoff::BACKGROUND.wait_for(Duration::from_millis(3), || None);
        assert!(none.is_none());
    }
}
