//! Figure 2 (the paper's Fig. 3): the share of `Active` calls that return true at once, for
//! leases δ of 18 to 30 µs, idle and under load.
//!
//! For each δ a fresh in-process group (three coordinators, one member, every thread spinning
//! as in the paper) runs; once the member is admitted, an application thread calls `Active` on
//! the latest view in a loop for a window, and the share of true answers is the share of calls
//! that found a valid lease (no wait for a renewal). Loads run beside it for the whole window:
//! `cpu` spins two threads, `memory` streams one thread through a 256 MiB buffer.

use crate::ukharon::group::{Group, Timings};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const DELTAS_US: [u64; 7] = [18, 20, 22, 24, 26, 28, 30];
pub const QUICK_DELTAS_US: [u64; 3] = [18, 24, 30];
/// The same sweep with threads that sleep 200 µs between polls (`mu ukharon`'s setting for
/// this kind of host), in milliseconds: where the defaults for a two-core host come from.
pub const HOST_DELTAS_US: [u64; 4] = [1_000, 2_000, 3_000, 5_000];
pub const QUICK_HOST_DELTAS_US: [u64; 2] = [1_000, 3_000];
const MEMORY_LOAD_BYTES: usize = 256 << 20;
const CPU_LOAD_THREADS: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    Idle,
    Cpu,
    Memory,
}

impl Load {
    pub const ALL: [Load; 3] = [Load::Idle, Load::Cpu, Load::Memory];

    pub fn name(self) -> &'static str {
        match self {
            Load::Idle => "idle",
            Load::Cpu => "cpu",
            Load::Memory => "memory",
        }
    }
}

/// One point: `None` when the member was never admitted at that δ (the group could not form).
pub struct Point {
    /// Whether the group's threads spin (else they sleep between polls).
    pub spinning: bool,
    pub delta_us: u64,
    pub load: Load,
    pub share_true: Option<f64>,
    pub calls: u64,
    pub problem: Option<String>,
}

/// Load threads that run until dropped.
struct LoadThreads {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl LoadThreads {
    fn start(load: Load) -> LoadThreads {
        let stop = Arc::new(AtomicBool::new(false));
        let count = match load {
            Load::Idle => 0,
            Load::Cpu => CPU_LOAD_THREADS,
            Load::Memory => 1,
        };
        let threads = (0..count)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || match load {
                    Load::Memory => stream(&stop),
                    _ => spin(&stop),
                })
            })
            .collect();
        LoadThreads { stop, threads }
    }
}

impl Drop for LoadThreads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn spin(stop: &AtomicBool) {
    let mut x = 0u64;
    while !stop.load(Ordering::Relaxed) {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

/// Reads and writes every cache line of a buffer larger than any cache, again and again.
fn stream(stop: &AtomicBool) {
    let mut buffer = vec![0u64; MEMORY_LOAD_BYTES / 8];
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for chunk in buffer.chunks_mut(8) {
            chunk[0] = chunk[0].wrapping_add(round);
        }
        round += 1;
        std::hint::black_box(&buffer);
    }
}

pub fn measure(
    spinning: bool,
    delta_us: u64,
    load: Load,
    window: Duration,
) -> Result<Point, String> {
    let _load = LoadThreads::start(load);
    let mut point = Point { spinning, delta_us, load, share_true: None, calls: 0, problem: None };
    let lease_ns = delta_us * 1_000;
    let timings = if spinning { Timings::spinning(lease_ns) } else { Timings::sleeping(lease_ns) };
    let group = match Group::start(timings, 0, 1) {
        Ok(group) => group,
        Err(e) => {
            point.problem = Some(e);
            return Ok(point);
        }
    };
    let member = group.live().next().ok_or("no member")?;
    let Some(view) = member.latest() else {
        point.problem = Some("no view learnt".into());
        return Ok(point);
    };
    let (mut calls, mut true_calls) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < window {
        for _ in 0..1024 {
            true_calls += u64::from(member.active(&view));
        }
        calls += 1024;
    }
    crate::interrupt::check()?;
    point.calls = calls;
    point.share_true = Some(true_calls as f64 / calls as f64);
    Ok(point)
}
