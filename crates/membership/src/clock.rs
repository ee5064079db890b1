//! The clock the runtime's threads give the drivers, and that `Active` reads: the host's
//! `CLOCK_MONOTONIC`, in nanoseconds. Every process of the host reads the same clock, so leases
//! published by different processes, and the timestamps tests record, compare directly. On
//! Linux it is read through the vDSO: no system call.

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn now_ns() -> u64 {
    mu_procs::clock::monotonic_ns()
}

/// How a runtime thread waits between two polls of its driver.
///
/// The drivers always have something to do (a heartbeat to bump, a lease to renew), so a
/// thread that spins takes a whole core. `Spin` is for hosts with a core per polling thread
/// (the paper's setting, timings of microseconds); `Sleep` gives the core back between polls,
/// for hosts where several processes share few cores (timings must then be in milliseconds:
/// see the detectors' parameters in the configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polling {
    /// Poll again at once.
    Spin,
    /// Sleep this long between polls (the kernel adds its timer slack, about 50 µs).
    Sleep { gap_ns: u64 },
}

impl Polling {
    /// From a gap in nanoseconds: 0 spins.
    pub fn from_gap_ns(gap_ns: u64) -> Polling {
        if gap_ns == 0 {
            Polling::Spin
        } else {
            Polling::Sleep { gap_ns }
        }
    }

    /// One pause between two polls.
    pub fn pause(&self) {
        match *self {
            Polling::Spin => std::hint::spin_loop(),
            Polling::Sleep { gap_ns } => {
                std::thread::sleep(std::time::Duration::from_nanos(gap_ns))
            }
        }
    }
}
