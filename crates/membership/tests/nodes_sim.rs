//! Node cores with coordinators on the simulated fabric: nodes join, hold leases on the latest
//! view, learn each new view, and `Active` of an older view is false everywhere before the
//! newer one is true anywhere (on the simulator's one clock).

mod common;

use common::{config, Sim};
use mu_fabric::NodeId;
use mu_fabric_sim::{LinkDelay, SimFabric};
use mu_membership::MembershipConfig;
use mu_membership::{NodeCore, NodeEvent};
use mu_ukharon::lease::{LeaseConfig, LeaseMutation};
use mu_ukharon::view::View;
use std::collections::BTreeMap;

/// Per view epoch, the first and last time `Active` was true on any node.
#[derive(Default)]
struct ActiveSpans {
    spans: BTreeMap<u64, (u64, u64)>,
    views: BTreeMap<u64, View>,
    /// Per view, the node that was active first and the one active last.
    who: BTreeMap<u64, (u16, u16)>,
}

impl ActiveSpans {
    fn record(&mut self, node: u16, view: &View, now_ns: u64) {
        let span = self.spans.entry(view.epoch).or_insert((now_ns, now_ns));
        let who = self.who.entry(view.epoch).or_insert((node, node));
        if now_ns < span.0 {
            (span.0, who.0) = (now_ns, node);
        }
        if now_ns >= span.1 {
            (span.1, who.1) = (now_ns, node);
        }
        self.views.entry(view.epoch).or_insert_with(|| view.clone());
    }

    /// Appendix B: no two views of different runs active at overlapping times.
    fn check(&self) -> Result<(), String> {
        let epochs: Vec<u64> = self.spans.keys().copied().collect();
        for (i, &a) in epochs.iter().enumerate() {
            for &b in &epochs[i + 1..] {
                let compatible = (a + 1..=b).all(|e| {
                    let (prev, next) = (self.views.get(&(e - 1)), self.views.get(&e));
                    prev.zip(next).is_some_and(|(p, n)| n.is_compatible_successor(p))
                });
                if !compatible {
                    let (ea, eb) = (self.spans[&a], self.spans[&b]);
                    if ea.1 >= eb.0 {
                        let (wa, wb) = (self.who[&a].1, self.who[&b].0);
                        return Err(format!(
                            "view {a} active until {} ns (node {wa}), view {b} from {} ns (node {wb})",
                            ea.1, eb.0
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

struct Cluster {
    sim: Sim,
    nodes: BTreeMap<u16, NodeCore<SimFabric>>,
    spans: ActiveSpans,
    events: Vec<(u16, NodeEvent)>,
    /// Nodes crashed or paused: their cores are not polled.
    stopped: std::collections::BTreeSet<u16>,
    /// Nodes whose core thread is preempted: it is not polled, but the application's threads
    /// still ask `Active` of the lease it published.
    preempted: std::collections::BTreeSet<u16>,
}

impl Cluster {
    fn new(seed: u64, nodes: &[u16]) -> Cluster {
        Cluster::with(seed, nodes, LeaseConfig::default())
    }

    fn with(seed: u64, nodes: &[u16], lease: LeaseConfig) -> Cluster {
        Cluster::configured(seed, nodes, lease, config())
    }

    /// Members `nodes`, and caches where `config` names some (after the members).
    fn configured(
        seed: u64,
        nodes: &[u16],
        lease: LeaseConfig,
        config: MembershipConfig,
    ) -> Cluster {
        let sim = Sim::new(seed, vec![config.clone(); 3]);
        let nodes = nodes
            .iter()
            .map(|&n| {
                let fabric = sim.world.node(NodeId(n));
                let core = NodeCore::new(fabric, config.clone(), lease, seed ^ u64::from(n));
                (n, core.unwrap())
            })
            .chain(config.caches.iter().map(|&n| {
                let fabric = sim.world.node(NodeId(n));
                (n, NodeCore::new_cache(fabric, config.clone(), lease, u64::from(n)).unwrap())
            }))
            .collect();
        let stopped = Default::default();
        let preempted = Default::default();
        let events = Vec::new();
        Cluster { sim, nodes, spans: ActiveSpans::default(), events, stopped, preempted }
    }

    fn run_for(&mut self, ns: u64) {
        let end = self.sim.world.now_ns() + ns;
        while self.sim.world.now_ns() < end {
            let now = self.sim.world.now_ns();
            self.sim.poll();
            for (&n, core) in self.nodes.iter_mut() {
                if self.stopped.contains(&n) {
                    continue;
                }
                if !self.preempted.contains(&n) {
                    core.poll(now);
                    self.events.extend(core.drain_events().map(|e| (n, e)));
                }
                // Whatever view the published lease is on, as an application asking about any
                // view it knows would see it.
                if let Some(lease) = core.published().load() {
                    if lease.start_ns <= now && now < lease.end_ns {
                        let view = self.sim.decided.iter().find(|v| v.epoch == lease.epoch);
                        self.spans.record(n, view.expect("a lease on a decided view"), now);
                    }
                }
            }
            self.sim.world.run_until(now + 500);
        }
        if let Err(e) = self.spans.check() {
            panic!("{e}");
        }
    }

    /// Runs for `ns` without stopping at a violation; what the checker says at the end.
    fn run_checked(&mut self, ns: u64) -> Result<(), String> {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_for(ns)));
        run.map_err(|e| e.downcast_ref::<String>().cloned().unwrap_or_default())
    }

    fn active(&self, node: u16) -> Option<u64> {
        let core = &self.nodes[&node];
        let now = self.sim.world.now_ns();
        core.view().filter(|v| core.published().active_at(v.epoch, now)).map(|v| v.epoch)
    }
}

/// §3.2 join, §6.2 leases: nodes join through the leader's inbox, learn the view that admits
/// them, and hold a lease on it; a node that leaves is excluded by the next view, which every
/// other node learns and makes active only after the older one is inactive everywhere.
#[test]
fn nodes_join_hold_leases_and_leave() {
    let mut c = Cluster::new(11, &[5, 6]);
    c.run_for(3_000_000);
    let latest = c.sim.decided.last().unwrap().clone();
    assert!(latest.uid_of(5).is_some() && latest.uid_of(6).is_some(), "{latest:?}");
    assert_eq!(c.active(5), Some(latest.epoch), "node 5 holds a lease on the latest view");
    assert_eq!(c.active(6), Some(latest.epoch));
    assert!(c.events.iter().any(|(n, e)| *n == 5 && matches!(e, NodeEvent::Joined(_))));
    assert!(latest.epoch <= 2, "views beyond the joins: {:?}", c.sim.decided);

    c.nodes.get_mut(&6).unwrap().leave();
    c.run_for(2_000_000);
    let after = c.sim.decided.last().unwrap().clone();
    assert!(after.epoch > latest.epoch && after.uid_of(6).is_none(), "{after:?}");
    assert_eq!(c.active(5), Some(after.epoch), "node 5 moved to the view without 6");
    assert!(c.events.iter().any(|(n, e)| *n == 6 && matches!(e, NodeEvent::Out { .. })));
    assert!(c.spans.spans.len() >= 2, "more than one view was active: {:?}", c.spans.spans);
}

/// §5.3.1: the coordinator leader crashes; the next one takes over and nodes keep their
/// leases on the latest view, renewed through the remaining majority.
#[test]
fn leases_outlive_the_coordinator_leader() {
    let mut c = Cluster::new(12, &[5]);
    c.run_for(2_000_000);
    let latest = c.sim.decided.last().unwrap().clone();
    assert_eq!(c.active(5), Some(latest.epoch));
    c.sim.world.crash(NodeId(0)).unwrap();
    c.sim.coordinators[0] = None;
    c.run_for(2_000_000);
    assert_eq!(c.active(5), Some(latest.epoch), "renewed by coordinators 1 and 2");
}

/// The checker catches a broken lease: a first lease that starts at its check's timestamp
/// (no wait for older leases, Algorithm 2 line 7 without `+ δ`) makes the view without the
/// leaving node active while a node slow to hear of it still holds its lease on the older
/// view. The same run with the real engine passes.
#[test]
fn a_lease_without_its_wait_is_caught() {
    let run = |lease: LeaseConfig| {
        let mut c = Cluster::with(11, &[5, 6, 7], lease);
        c.run_for(3_000_000);
        for coordinator in 0..3 {
            let slow = LinkDelay { extra_ns: 8_000, jitter_ns: 0 };
            c.sim.world.set_link_delay(NodeId(coordinator), NodeId(6), slow);
        }
        c.nodes.get_mut(&7).unwrap().leave();
        c.run_checked(2_000_000)
    };
    let broken = LeaseConfig { mutation: LeaseMutation::StartAtT, ..LeaseConfig::default() };
    assert!(run(broken).is_err_and(|e| e.contains("active until")), "not caught");
    assert_eq!(run(LeaseConfig::default()), Ok(()));
}

impl Cluster {
    /// Runs until the latest decided view lacks `node`, at most `ns`; the time it took.
    fn until_removed(&mut self, node: u16, ns: u64) -> u64 {
        let start = self.sim.world.now_ns();
        while self.sim.world.now_ns() < start + ns {
            self.run_for(10_000);
            if self.sim.decided.last().is_some_and(|v| v.uid_of(node).is_none()) {
                return self.sim.world.now_ns() - start;
            }
        }
        panic!("node {node} still a member after {ns} ns: {:?}", self.sim.decided.last());
    }

    /// Every live node learnt the latest view and holds a lease on it.
    fn converged(&mut self) {
        self.run_for(500_000);
        let latest = self.sim.decided.last().unwrap().epoch;
        for (&n, _) in self.nodes.iter().filter(|(n, _)| !self.stopped.contains(n)) {
            assert_eq!(self.active(n), Some(latest), "node {n} is not active in view {latest}");
        }
    }
}

/// §4.2 "Userspace failures": a crashed member is reported at once from the fabric's death
/// signal and removed by the next view.
#[test]
fn a_crashed_member_is_removed() {
    let mut c = Cluster::new(21, &[5, 6, 7]);
    c.run_for(3_000_000);
    assert!(c.sim.decided.last().unwrap().uid_of(6).is_some());
    c.sim.world.crash(NodeId(6)).unwrap();
    c.stopped.insert(6);
    let took_ns = c.until_removed(6, 2_000_000);
    assert!(took_ns < 200_000, "a crash took {took_ns} ns to remove");
    c.converged();
}

/// §4.2 "Kernel failures": a member whose process stops (its memory still readable, as a
/// SIGSTOPped process on shared memory) is caught by the heartbeat ring.
#[test]
fn a_paused_member_is_removed_by_the_ring() {
    let mut c = Cluster::new(22, &[5, 6, 7]);
    c.run_for(3_000_000);
    c.sim.world.pause(NodeId(6)).unwrap();
    c.stopped.insert(6);
    let took_ns = c.until_removed(6, 2_000_000);
    assert!(took_ns < 500_000, "a stopped member took {took_ns} ns to remove");
    c.converged();
}

/// §4.2 "Catastrophic failures": a cut link between two members is found by the broadcast
/// heartbeats' timeout, and the next view is the largest clique with the leader.
#[test]
fn a_cut_link_leaves_one_side_out() {
    let mut c = Cluster::new(23, &[5, 6, 7]);
    c.run_for(3_000_000);
    c.sim.world.partition(NodeId(6), NodeId(7));
    let took_ns = c.until_removed(7, 5_000_000);
    // The timeout runs from the last beat heard, up to a beat period (100 µs) before the cut.
    assert!(took_ns > 900_000, "found before the 1 ms timeout: {took_ns} ns");
    let latest = c.sim.decided.last().unwrap().clone();
    assert!(latest.uid_of(6).is_some() && latest.uid_of(5).is_some(), "{latest:?}");
    c.stopped.insert(7);
    c.converged();
}

/// §6.3 lease caches: members renew through a cache instead of the coordinators; when their
/// cache crashes they ask the other, and keep their leases; a leave still makes the next view
/// active only after the older one is inactive everywhere.
#[test]
fn members_renew_through_caches_and_outlive_one() {
    let mut with_caches = config();
    with_caches.nodes_max = 10;
    with_caches.caches = vec![8, 9];
    let mut c = Cluster::configured(31, &[5, 6, 7], LeaseConfig::default(), with_caches);
    c.run_for(3_000_000);
    let latest = c.sim.decided.last().unwrap().clone();
    assert!(latest.uid_of(8).is_none() && latest.uid_of(9).is_none(), "caches do not join");
    for n in [5, 6, 7] {
        assert_eq!(c.active(n), Some(latest.epoch), "node {n} holds a lease through a cache");
    }
    c.sim.world.crash(NodeId(8)).unwrap();
    c.stopped.insert(8);
    c.run_for(1_000_000);
    for n in [5, 6, 7] {
        assert_eq!(c.active(n), Some(latest.epoch), "node {n} renews through cache 9");
    }
    c.nodes.get_mut(&7).unwrap().leave();
    c.run_for(2_000_000);
    let after = c.sim.decided.last().unwrap().clone();
    assert!(after.epoch > latest.epoch && after.uid_of(7).is_none());
    assert_eq!(c.active(5), Some(after.epoch));
    assert_eq!(c.active(6), Some(after.epoch));
}

/// §5.3.1 with §4.2's kernel failures: a coordinator leader that stops (its memory still
/// readable, its process never dead) is passed over once its heartbeat stops moving; the next
/// coordinator decides the next change.
#[test]
fn a_stopped_coordinator_leader_is_passed_over() {
    let mut c = Cluster::new(41, &[5, 6]);
    c.run_for(2_000_000);
    let latest = c.sim.decided.last().unwrap().clone();
    assert!(c.sim.coordinators[0].as_ref().unwrap().is_leading());
    c.sim.world.pause(NodeId(0)).unwrap();
    let paused = c.sim.coordinators[0].take();
    c.nodes.get_mut(&6).unwrap().leave();
    c.run_for(5_000_000);
    let after = c.sim.decided.last().unwrap().clone();
    assert!(after.epoch > latest.epoch && after.uid_of(6).is_none(), "{after:?}");
    assert!(c.sim.coordinators[1].as_ref().unwrap().is_leading());
    assert_eq!(c.active(5), Some(after.epoch));
    // Resumed, the lowest coordinator leads again, and views go on.
    c.sim.world.resume(NodeId(0)).unwrap();
    c.sim.coordinators[0] = paused;
    c.nodes.get_mut(&5).unwrap().leave();
    c.run_for(5_000_000);
    let last = c.sim.decided.last().unwrap().clone();
    assert!(last.epoch > after.epoch && last.members.is_empty(), "{last:?}");
}

/// Algorithm 2 line 7 with a stale clock reading: node 6's core thread reads the clock and is
/// preempted; node 5 renews its lease on the current view, and its core thread is preempted
/// too (its application threads still see that lease); the next view is decided; then node 6
/// reads it on its board in the poll that began before the decision. Its first lease on the
/// view must not count from that poll's clock reading: the wait would end early, and `Active`
/// of the new view on node 6 would overlap node 5's lease on the old one.
#[test]
fn a_clock_reading_older_than_the_view_does_not_start_its_lease() {
    for seed in 0..4 {
        let mut c = Cluster::new(40 + seed, &[5, 6, 7]);
        c.run_for(3_000_000);
        let clock_read = c.sim.world.now_ns();
        c.preempted.insert(6);
        let lease_end = |c: &Cluster| c.nodes[&5].published().load().map(|l| l.end_ns);
        let before = lease_end(&c);
        while lease_end(&c) == before {
            c.run_for(500);
        }
        c.preempted.insert(5);
        c.nodes.get_mut(&7).unwrap().leave();
        let epoch = c.sim.decided.last().unwrap().epoch;
        while c.sim.decided.last().unwrap().epoch == epoch {
            c.run_for(500);
        }
        c.run_for(1_000); // the view reaches node 6's board
        c.preempted.remove(&6);
        c.nodes.get_mut(&6).unwrap().poll(clock_read);
        let run = c.run_checked(30_000);
        c.preempted.remove(&5);
        let run = run.and_then(|()| c.run_checked(500_000));
        assert_eq!(run, Ok(()), "seed {seed}");
    }
}

/// A node that joined, crashed and restarted while a coordinator was stopped: the death signal
/// came and went unseen there, and the node was no member in the latest view it knew, so that
/// coordinator's side of their board connection stayed bound to the dead process. Once it
/// leads, the restarted node's join still reaches it (coordinators probe every node's board,
/// not only members'; found by `mu sim --protocol ukharon`, seed 394).
#[test]
fn a_node_restarted_while_a_coordinator_was_stopped_joins_through_it() {
    let mut c = Cluster::new(42, &[5, 6, 7]);
    // 6 runs but asks nothing yet: every coordinator connects to it.
    c.stopped.insert(6);
    c.run_for(3_000_000);
    assert!(c.sim.decided.last().unwrap().uid_of(6).is_none());
    c.sim.world.pause(NodeId(1)).unwrap();
    let paused = c.sim.coordinators[1].take();
    c.stopped.remove(&6);
    c.run_for(2_000_000);
    assert!(c.sim.decided.last().unwrap().uid_of(6).is_some(), "node 6 joined through 0");
    c.sim.world.crash(NodeId(6)).unwrap();
    c.stopped.insert(6);
    c.until_removed(6, 2_000_000);
    c.sim.world.restart(NodeId(6)).unwrap();
    let fabric = c.sim.world.node(NodeId(6));
    let core = NodeCore::new(fabric, config(), LeaseConfig::default(), 0x6_0002).unwrap();
    c.nodes.insert(6, core);
    // 1 resumes and, with 0 crashed, leads; only then does the new process ask to join.
    c.sim.world.resume(NodeId(1)).unwrap();
    c.sim.coordinators[1] = paused;
    c.run_for(500_000);
    c.sim.world.crash(NodeId(0)).unwrap();
    c.sim.coordinators[0] = None;
    c.run_for(1_000_000);
    assert!(c.sim.coordinators[1].as_ref().unwrap().is_leading());
    c.stopped.remove(&6);
    c.run_for(3_000_000);
    let latest = c.sim.decided.last().unwrap().clone();
    assert!(latest.uid_of(6).is_some(), "the restarted node was not admitted: {latest:?}");
    c.converged();
}

/// A primary that cannot serve asks for another member in its place: the next view names it,
/// and nobody is removed on the way.
#[test]
fn a_primary_asks_for_another_in_its_place() {
    let mut config = config();
    config.name_primary = true;
    let mut c = Cluster::configured(13, &[5, 6, 7], LeaseConfig::default(), config);
    c.run_for(3_000_000);
    let latest = c.sim.decided.last().unwrap().clone();
    assert_eq!(latest.nodes().collect::<Vec<_>>(), vec![5, 6, 7]);
    let first = latest.primary.expect("a group that names a primary names one");
    let other = if first == 7 { 6 } else { 7 };
    c.nodes.get_mut(&other).unwrap().ask_primary(first);
    c.run_for(1_000_000);
    assert_eq!(c.sim.decided.last().unwrap().epoch, latest.epoch, "only the primary may ask");
    c.nodes.get_mut(&first).unwrap().ask_primary(other);
    c.run_for(3_000_000);
    let after = c.sim.decided.last().unwrap().clone();
    assert_eq!(after.primary, Some(other), "{after:?}");
    assert_eq!(after.nodes().collect::<Vec<_>>(), vec![5, 6, 7], "nobody was removed");
    assert_eq!(after.epoch, latest.epoch + 1, "one view: the request stops once answered");
    assert_eq!(c.active(5), Some(after.epoch));
}
