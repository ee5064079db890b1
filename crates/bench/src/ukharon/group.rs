//! An in-process uKharon group on the shared-memory fabric: three coordinator services and
//! members, each a thread of this process with its own fabric node (so dropping one is its
//! death, which the fabric signals to the others), as `mu-membership`'s `group_shm` test runs
//! them.

use mu_fabric::Fabric;
use mu_fabric::NodeId;
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_membership::channels::{Shifted, SHIFT_TO_FOUR_CHANNELS};
use mu_membership::{
    CoordinatorService, JoinOptions, Membership, MembershipConfig, NodeCore, Polling,
};
use mu_procs::run_dir::RunDir;
use mu_ukharon::lease::LeaseConfig;
use mu_ukharon::view::View;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const CLUSTER: u64 = 0x75_6b62;
pub const COORDINATORS: u16 = 3;
const JOIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The group's timings: `mu ukharon`'s defaults for a two-core host (milliseconds: threads
/// that sleep between polls), or microsecond leases with spinning threads (Fig. 3's sweep).
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    pub lease_ns: u64,
    pub renew_margin_ns: u64,
    pub polling: Polling,
}

impl Timings {
    /// `mu ukharon`'s defaults (`mu_daemon::ukharon::config`).
    pub fn host() -> Timings {
        Timings {
            lease_ns: 3_000_000,
            renew_margin_ns: 1_500_000,
            polling: Polling::Sleep { gap_ns: 200_000 },
        }
    }

    /// A lease of `lease_ns` renewed half-way, threads spinning (the paper's setting).
    pub fn spinning(lease_ns: u64) -> Timings {
        Timings { lease_ns, renew_margin_ns: lease_ns / 2, polling: Polling::Spin }
    }

    /// The host timings with a lease of `lease_ns`, renewed half-way.
    pub fn sleeping(lease_ns: u64) -> Timings {
        Timings { lease_ns, renew_margin_ns: lease_ns / 2, ..Timings::host() }
    }

    fn config(&self) -> MembershipConfig {
        let mut c = MembershipConfig::new(CLUSTER, (0..COORDINATORS).collect(), 16);
        c.lease_ns = self.lease_ns;
        // ∆ in the paper's proportion to δ (25 µs to 20 µs).
        c.cache_lease_ns = self.lease_ns * 5 / 4;
        c.ring_read_gap_ns = 10_000_000;
        c.beat_period_ns = 10_000_000;
        c.beat_timeout_ns = 150_000_000;
        c.repeat_ns = 5_000_000;
        c.backoff_max_ns = 2_000_000;
        c.reconnect_ns = 5_000_000;
        c
    }

    fn lease(&self) -> LeaseConfig {
        LeaseConfig {
            lease_max_ns: 100_000_000,
            renew_margin_ns: self.renew_margin_ns,
            ..LeaseConfig::default()
        }
    }
}

/// See the module docs. Fields drop in order: members first, then coordinators, then the run
/// directory.
pub struct Group {
    pub members: Vec<Option<Membership>>,
    pub caches: Vec<Option<CacheThread>>,
    pub coordinators: Vec<Option<CoordinatorService>>,
    _dir: RunDir,
}

/// A lease cache's core polled by a thread of its own; dropping it stops the thread and its
/// fabric node dies with it.
pub struct CacheThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CacheThread {
    fn start(
        fabric: Shifted<ShmFabric>,
        config: MembershipConfig,
        timings: Timings,
    ) -> Result<CacheThread, String> {
        let node = fabric.node().0;
        let incarnation = mu_membership::clock::now_ns() | 1;
        let mut core = NodeCore::new_cache(fabric, config, timings.lease(), incarnation)
            .map_err(|e| format!("cache {node}: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("ukharon-cache-{node}"))
            .spawn(move || {
                while !stopping.load(Ordering::Acquire) {
                    core.poll(mu_membership::clock::now_ns());
                    core.drain_events().for_each(drop);
                    timings.polling.pause();
                }
            })
            .map_err(|e| format!("cache {node}: starting the thread: {e}"))?;
        Ok(CacheThread { stop, thread: Some(thread) })
    }
}

impl Drop for CacheThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn fabric(dir: &RunDir, node: u16) -> Result<Shifted<ShmFabric>, String> {
    let shm = ShmFabric::create(ShmConfig::new(dir.path(), CLUSTER, NodeId(node)))
        .map_err(|e| format!("shm fabric node {node}: {e}"))?;
    Ok(Shifted::new(shm, SHIFT_TO_FOUR_CHANNELS))
}

impl Group {
    /// Three coordinators (nodes 0 to 2), `caches` lease caches (nodes 3 on) and `members`
    /// members (the nodes after them), all joined.
    pub fn start(timings: Timings, caches: u16, members: u16) -> Result<Group, String> {
        let dir = RunDir::create("bench-ukharon")?;
        let mut config = timings.config();
        config.caches = (COORDINATORS..COORDINATORS + caches).collect();
        let initial = View::initial(CLUSTER, Vec::new(), None, config.lease_ns);
        let mut coordinators = Vec::new();
        for c in 0..COORDINATORS {
            let f = fabric(&dir, c)?;
            let service = CoordinatorService::start(
                f,
                config.clone(),
                initial.clone(),
                u64::from(c),
                timings.polling,
            )
            .map_err(|e| format!("coordinator {c}: {e}"))?;
            coordinators.push(Some(service));
        }
        let mut cache_threads = Vec::new();
        for &c in &config.caches {
            cache_threads.push(Some(CacheThread::start(
                fabric(&dir, c)?,
                config.clone(),
                timings,
            )?));
        }
        let options =
            JoinOptions { polling: timings.polling, timeout: JOIN_TIMEOUT, incarnation: None };
        let mut joined = Vec::new();
        let first = COORDINATORS + caches;
        for n in first..first + members {
            let f = fabric(&dir, n)?;
            let m = Membership::join(f, config.clone(), timings.lease(), options)
                .map_err(|e| format!("member {n}: {e}"))?;
            joined.push(Some(m));
        }
        Ok(Group { members: joined, caches: cache_threads, coordinators, _dir: dir })
    }

    pub fn live(&self) -> impl Iterator<Item = &Membership> {
        self.members.iter().flatten()
    }

    /// Waits until every live member learnt one view with exactly the live members and is
    /// active in it; returns the view and when that was first seen.
    pub fn converge(&self, timeout: Duration) -> Result<(View, u64), String> {
        let start = Instant::now();
        let want: Vec<u16> = self.live().map(Membership::node).collect();
        loop {
            if let Some(view) = self.agreed(&want) {
                if self.live().all(|m| m.active(&view)) {
                    return Ok((view, mu_membership::clock::now_ns()));
                }
            }
            if start.elapsed() > timeout {
                return Err(format!("no view of {want:?} active everywhere in {timeout:?}"));
            }
            // Polled every 20 µs (plus timer slack): the failovers timed are milliseconds long,
            // and a spinning waiter would take a core from the group's threads.
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    fn agreed(&self, want: &[u16]) -> Option<View> {
        let mut latest = self.live().map(Membership::latest);
        let first = latest.next()??;
        let nodes: Vec<u16> = first.nodes().collect();
        let same = latest.all(|v| v.as_ref() == Some(&first));
        (same && nodes == want).then_some(first)
    }
}
