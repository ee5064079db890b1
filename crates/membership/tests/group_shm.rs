//! Coordinator services and member handles as threads of one process on the shared-memory
//! fabric (each fabric node has its own liveness thread, so several live in one process, and
//! dropping one is its death): members join, hold leases, see each other's failures and
//! leaves as views and as failures, and `Active` of an older view is false before the newer
//! one is true anywhere (every lease is on the one host clock).

use mu_fabric::NodeId;
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_membership::channels::{Shifted, SHIFT_TO_FOUR_CHANNELS};
use mu_membership::{
    ActiveSpan, CoordinatorService, Failure, JoinOptions, Membership, MembershipConfig, Polling,
};
use mu_procs::run_dir::RunDir;
use mu_ukharon::lease::LeaseConfig;
use mu_ukharon::view::View;
use std::time::{Duration, Instant};

const CLUSTER: u64 = 0x75_6b68;
const WAIT: Duration = Duration::from_secs(20);

/// Timings for threads that share two cores with everything else on the machine: a node
/// descheduled for tens of milliseconds must not be removed (see the module docs of
/// `mu_daemon::ukharon::config`).
fn config() -> MembershipConfig {
    let mut c = MembershipConfig::new(CLUSTER, vec![0, 1, 2], 8);
    c.lease_ns = 3_000_000;
    c.ring_read_gap_ns = 5_000_000;
    c.beat_period_ns = 10_000_000;
    c.beat_timeout_ns = 150_000_000;
    c.repeat_ns = 5_000_000;
    c.backoff_max_ns = 2_000_000;
    c.reconnect_ns = 5_000_000;
    c
}

fn lease() -> LeaseConfig {
    LeaseConfig { lease_max_ns: 100_000_000, renew_margin_ns: 1_500_000, ..LeaseConfig::default() }
}

const POLLING: Polling = Polling::Sleep { gap_ns: 200_000 };

/// A node on shm, its channels moved below 4 ([`mu_membership::channels`]).
fn fabric(dir: &RunDir, node: u16) -> Shifted<ShmFabric> {
    let shm = ShmFabric::create(ShmConfig::new(dir.path(), CLUSTER, NodeId(node))).unwrap();
    Shifted::new(shm, SHIFT_TO_FOUR_CHANNELS)
}

struct Group {
    _coordinators: Vec<CoordinatorService>,
    members: Vec<Option<Membership>>,
    dir: RunDir,
}

impl Group {
    fn start(members: &[u16]) -> Group {
        let dir = RunDir::create("ukharon-group").unwrap();
        let initial = View::initial(CLUSTER, Vec::new(), None, config().lease_ns);
        let coordinators = (0..3)
            .map(|c| {
                let f = fabric(&dir, c);
                CoordinatorService::start(f, config(), initial.clone(), u64::from(c), POLLING)
                    .unwrap()
            })
            .collect();
        let options = JoinOptions { polling: POLLING, timeout: WAIT, incarnation: None };
        let members = members
            .iter()
            .map(|&n| Some(Membership::join(fabric(&dir, n), config(), lease(), options).unwrap()))
            .collect();
        Group { _coordinators: coordinators, members, dir }
    }

    fn live(&self) -> impl Iterator<Item = &Membership> {
        self.members.iter().flatten()
    }

    /// Waits until every live member learnt a view with exactly `nodes` and is active in it.
    fn converge(&self, nodes: &[u16]) -> View {
        let start = Instant::now();
        loop {
            let views: Vec<Option<View>> = self.live().map(Membership::latest).collect();
            let agreed = views.iter().all(|v| {
                v.as_ref().is_some_and(|v| v.nodes().collect::<Vec<_>>() == nodes) && *v == views[0]
            });
            if agreed {
                let view = views[0].clone().unwrap();
                if self.live().all(|m| m.active(&view)) {
                    return view;
                }
            }
            let waited = start.elapsed();
            assert!(waited < WAIT, "no view of {nodes:?} active everywhere: {views:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Appendix B on the host clock: views active on any node never overlap in time.
    fn check_spans(&self) {
        let mut spans: Vec<(u16, ActiveSpan)> = Vec::new();
        for m in self.live() {
            spans.extend(m.active_spans().into_iter().map(|s| (m.node(), s)));
        }
        for &(a, sa) in &spans {
            for &(b, sb) in &spans {
                if sa.epoch < sb.epoch {
                    assert!(
                        sa.until_ns <= sb.from_ns,
                        "view {} active on node {a} until {} ns, view {} on node {b} from {} ns",
                        sa.epoch,
                        sa.until_ns,
                        sb.epoch,
                        sb.from_ns
                    );
                }
            }
        }
    }
}

#[test]
fn members_join_fail_and_leave_on_shm() {
    let mut group = Group::start(&[3, 4, 5, 6]);
    let first = group.converge(&[3, 4, 5, 6]);
    let m3 = group.members[0].as_ref().unwrap();
    assert_eq!(m3.member().map(|m| m.node), Some(3));
    let (views, failures) = (m3.views(), m3.failures());

    // A crash: the node's thread stops and its fabric node dies with it (the kernel's death
    // signal); the others remove it.
    let crashed = group.members[3].take().unwrap().member().unwrap();
    let second = group.converge(&[3, 4, 5]);
    assert!(second.epoch > first.epoch);
    assert!(group.live().all(|m| !m.active(&first)), "the old view is still active");
    let failure = failures.recv_timeout(WAIT).unwrap();
    assert_eq!(failure, Failure { member: crashed, epoch: failure.epoch });
    assert!(failure.epoch <= second.epoch);
    let seen: Vec<u64> = views.try_iter().map(|v| v.epoch).collect();
    assert_eq!(seen.last(), Some(&second.epoch), "views seen: {seen:?}");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "views out of order: {seen:?}");

    // A leave: the call returns once a view without the node is learnt.
    let leaving = group.members[2].take().unwrap();
    let left = leaving.member().unwrap();
    leaving.leave(WAIT).unwrap();
    let third = group.converge(&[3, 4]);
    assert!(third.epoch > second.epoch);
    let failure = failures.recv_timeout(WAIT).unwrap();
    assert_eq!(failure.member, left);
    group.check_spans();
    drop(group.dir);
}

#[test]
fn a_join_without_coordinators_times_out_and_bad_configs_are_refused() {
    let dir = RunDir::create("ukharon-lonely").unwrap();
    let quick = Duration::from_millis(300);
    let options = JoinOptions { polling: POLLING, timeout: quick, incarnation: None };
    let err = Membership::join(fabric(&dir, 3), config(), lease(), options).err().unwrap();
    assert!(matches!(err, mu_membership::MembershipError::Timeout { .. }), "{err}");
    let mut bad = config();
    bad.nodes_max = 0;
    let err = Membership::start(fabric(&dir, 4), bad, lease(), options).err().unwrap();
    assert!(err.to_string().contains("nodes_max"), "{err}");
}
