//! A coordinator as a service: a thread that polls a [`CoordinatorDriver`] with the host's
//! monotonic clock ([`crate::clock`]) until stopped, and the status it publishes (the latest
//! decided view, whether it leads) for operators and tests.

use crate::clock::{now_ns, Polling};
use crate::config::MembershipConfig;
use crate::coordinator::{CoordinatorDriver, CoordinatorEvent};
use mu_fabric::Fabric;
use mu_ukharon::detect::graph::Decision;
use mu_ukharon::restart::Memory;
use mu_ukharon::view::View;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// What a coordinator's thread publishes after its polls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoordinatorStatus {
    /// The latest decided view it knows.
    pub latest: Option<View>,
    pub leading: bool,
    /// The last problem its driver reported (a peer of another configuration, a bad frame).
    pub last_problem: Option<String>,
    /// The last clique it asked for as the leader, and why (§4.2): which detector removed
    /// whom.
    pub last_clique: Option<Decision>,
    /// Restarted without its memory, it has not yet rejoined, or still abstains in the next
    /// index (`CoordinatorDriver::still_abstains`): another coordinator lost meanwhile may
    /// leave no majority.
    pub rejoining: bool,
}

struct Shared {
    stop: AtomicBool,
    status: Mutex<CoordinatorStatus>,
}

/// See the module docs. Dropping it stops the thread.
pub struct CoordinatorService {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl CoordinatorService {
    /// Registers the coordinator's regions on `fabric` and starts its thread. `initial` is the
    /// cluster's first view (the same at every coordinator); `seed` varies its back-off.
    pub fn start<F: Fabric>(
        fabric: F,
        config: MembershipConfig,
        initial: View,
        seed: u64,
        polling: Polling,
    ) -> Result<CoordinatorService, String> {
        Self::start_with_memory(fabric, config, initial, seed, polling, Memory::Remembered)
    }

    /// [`CoordinatorService::start`] for a coordinator that starts with `memory`
    /// ([`CoordinatorDriver::with_memory`]: [`Memory::Forgotten`] when its consensus region
    /// was lost).
    pub fn start_with_memory<F: Fabric>(
        fabric: F,
        config: MembershipConfig,
        initial: View,
        seed: u64,
        polling: Polling,
        memory: Memory,
    ) -> Result<CoordinatorService, String> {
        let driver = CoordinatorDriver::with_memory(fabric, config, initial, seed, memory)?;
        // Rejoining from the start, so that no status read before the first poll says
        // otherwise.
        let status = CoordinatorStatus { rejoining: driver.still_abstains(), ..Default::default() };
        let shared = Arc::new(Shared { stop: AtomicBool::new(false), status: Mutex::new(status) });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("ukharon-coordinator".into())
                .spawn(move || run(driver, &shared, polling))
                .map_err(|e| format!("starting the coordinator's thread: {e}"))?
        };
        Ok(CoordinatorService { shared, thread: Some(thread) })
    }

    /// The status published after the latest poll that changed it.
    pub fn status(&self) -> CoordinatorStatus {
        lock(&self.shared.status).clone()
    }

    /// Whether the thread still runs (it ends only when stopped, or on a panic).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            // A panic on the thread was reported on stderr when it happened.
            let _ = thread.join();
        }
    }
}

impl Drop for CoordinatorService {
    fn drop(&mut self) {
        self.halt();
    }
}

fn run<F: Fabric>(mut driver: CoordinatorDriver<F>, shared: &Shared, polling: Polling) {
    while !shared.stop.load(Ordering::Acquire) {
        driver.poll(now_ns());
        let mut problem = None;
        let mut clique = None;
        for event in driver.drain_events() {
            problem = match event {
                CoordinatorEvent::Decided(_) => problem,
                CoordinatorEvent::Clique(decision) => {
                    clique = Some(decision);
                    problem
                }
                CoordinatorEvent::ConfigMismatch { peer } => {
                    Some(format!("coordinator {peer} has another configuration"))
                }
                CoordinatorEvent::BadDecision { index, why } => {
                    Some(format!("a bad decision at index {index}: {why}"))
                }
                CoordinatorEvent::BadFrame { from, why } => {
                    Some(format!("a bad frame from node {from}: {why}"))
                }
                CoordinatorEvent::Rejoined { .. } => problem,
            };
        }
        let latest_epoch = driver.latest().map(|v| v.epoch);
        let mut status = lock(&shared.status);
        if status.latest.as_ref().map(|v| v.epoch) != latest_epoch {
            status.latest = driver.latest().cloned();
        }
        status.leading = driver.is_leading();
        status.rejoining = driver.still_abstains();
        if problem.is_some() {
            status.last_problem = problem;
        }
        if clique.is_some() {
            status.last_clique = clique;
        }
        drop(status);
        polling.pause();
    }
}

/// Locks `m`; a panic while it was held left plain data behind, still consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
