//! The three detectors and the leader's graph together, in virtual time: a small stand-in for
//! the runtime moves the heartbeats, reads, death signals and reports between five members, one
//! of them the coordinator leader, with one fault each run. What §4.1 promises: each level of
//! failure is caught by its own detector (a crash at once, a stopped process by the ring within
//! a few read gaps, a cut link by the timeout), the view that follows excludes exactly the
//! faulty node, and once it is installed the reports stop and nothing more is decided.

use super::beat::{BeatConfig, Beats};
use super::crash::Crashes;
use super::graph::{Connectivity, GraphConfig};
use super::ring::{ReadTicket, Reading, Ring, RingConfig};
use super::{Detector, Level, Report};
use crate::view::{Member, View};

const US: u64 = 1_000;
const READ_LATENCY_NS: u64 = 2 * US;
const LEADER: u16 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    /// The process is gone: the death signal is set, its memory no longer readable.
    Crash(u16),
    /// The process no longer runs, its memory still readable (SIGSTOP on shm).
    Stop(u16),
    /// Heartbeats between the two are lost both ways.
    Cut(u16, u16),
}

struct Node {
    member: Member,
    ring: Ring,
    beats: Beats,
    crashes: Crashes,
    /// The ring counter it publishes, and its board (the last heartbeat from each node).
    published: u64,
    board: Vec<u64>,
    read: Option<(ReadTicket, u64)>,
}

struct Cluster {
    view: View,
    nodes: Vec<Node>,
    fault: Fault,
    graph: Connectivity,
    /// Reports sent, by level.
    sent: Vec<Report>,
}

impl Node {
    /// The three levels, handled alike.
    fn detectors(&mut self) -> [&mut dyn Detector; 3] {
        [&mut self.ring, &mut self.beats, &mut self.crashes]
    }
}

fn member(node: u16) -> Member {
    Member { node, uid: 10 + u64::from(node) }
}

impl Cluster {
    fn new(fault: Fault) -> Cluster {
        let view = View::initial(1, (1..=5).map(member).collect(), None, 20_000);
        let nodes = view
            .members
            .iter()
            .map(|&m| Node {
                member: m,
                ring: Ring::new(RingConfig::default(), m, &view, 0),
                beats: Beats::new(BeatConfig::default(), m, &view, 0),
                crashes: Crashes::new(100 * US, m, &view),
                published: 0,
                board: vec![0; 6],
                read: None,
            })
            .collect();
        let graph = Connectivity::new(GraphConfig::default(), &view, LEADER).unwrap();
        Cluster { view, nodes, fault, graph, sent: Vec::new() }
    }

    fn runs(&self, node: u16) -> bool {
        !matches!(self.fault, Fault::Crash(n) | Fault::Stop(n) if n == node)
    }

    fn hears(&self, from: u16, to: u16) -> bool {
        !matches!(self.fault, Fault::Cut(a, b) if (a, b) == (from, to) || (b, a) == (from, to))
    }

    /// One microsecond of every running node's core loop; the view the leader decides, if any.
    fn step(&mut self, now: u64) -> Option<Vec<Member>> {
        for i in 0..self.nodes.len() {
            let me = self.nodes[i].member.node;
            if !self.view.contains(self.nodes[i].member) || !self.runs(me) {
                continue;
            }
            self.ring_turn(i, now);
            self.beat_turn(i, now);
            let node = &mut self.nodes[i];
            let dead: Vec<Member> = node.crashes.watched().collect();
            for peer in dead {
                if matches!(self.fault, Fault::Crash(n) if n == peer.node) {
                    node.crashes.on_death(peer, now);
                }
            }
            let mut reports = Vec::new();
            for detector in node.detectors() {
                reports.extend(detector.reports().due(now));
            }
            for report in reports {
                self.sent.push(report);
                let _ = self.graph.on_report(&report, now);
            }
        }
        self.graph.decide(now).map(|d| d.members)
    }

    fn ring_turn(&mut self, i: usize, now: u64) {
        let node = &mut self.nodes[i];
        node.published = node.ring.heartbeat();
        if let Some((ticket, done)) = node.read {
            if done <= now {
                node.read = None;
                let target = ticket.target.node;
                let reading = match self.fault {
                    Fault::Crash(n) if n == target => Reading::Error,
                    _ => Reading::Value(self.nodes[usize::from(target) - 1].published),
                };
                self.nodes[i].ring.on_read(ticket, reading, now);
            }
        }
        let node = &mut self.nodes[i];
        if let Some(ticket) = node.ring.poll(now) {
            node.read = Some((ticket, now + READ_LATENCY_NS));
        }
    }

    fn beat_turn(&mut self, i: usize, now: u64) {
        let me = self.nodes[i].member.node;
        if let Some(value) = self.nodes[i].beats.poll(now) {
            for to in 1..=5u16 {
                if self.hears(me, to) {
                    self.nodes[usize::from(to) - 1].board[usize::from(me)] = value;
                }
            }
        }
        let node = &mut self.nodes[i];
        for from in self.view.nodes() {
            node.beats.on_beat(from, node.board[usize::from(from)], now);
        }
    }

    fn install(&mut self, members: Vec<Member>, now: u64) {
        self.view = self.view.successor(members, None, 20_000);
        for node in &mut self.nodes {
            for detector in node.detectors() {
                detector.on_view(&self.view, now);
            }
        }
        self.graph.on_view(&self.view).unwrap();
    }

    /// Runs until the leader decides (installing that view) or `until_ns`; the decision time.
    fn run(&mut self, until_ns: u64) -> Option<(u64, Vec<u16>)> {
        for now in (0..until_ns).step_by(US as usize) {
            if let Some(members) = self.step(now) {
                let nodes = members.iter().map(|m| m.node).collect();
                self.install(members, now);
                return Some((now, nodes));
            }
        }
        None
    }
}

/// §4.1 "A complete and accurate failure detector \[...\]": five healthy members for 5 ms (five
/// catastrophic timeouts, 150 ring reads each): no report, no view.
#[test]
fn healthy_members_are_never_reported() {
    let mut cluster = Cluster::new(Fault::None);
    assert_eq!(cluster.run(5_000 * US), None);
    assert!(cluster.sent.is_empty(), "{:?}", cluster.sent);
}

/// §4.2 "Userspace failures \[...\] does not use timeouts": a crash is reported within a loop
/// turn, and the next view excludes exactly the dead member.
#[test]
fn a_crash_is_caught_at_once() {
    let mut cluster = Cluster::new(Fault::Crash(4));
    let (at, nodes) = cluster.run(5_000 * US).expect("a view");
    assert!(at <= 3 * US, "decided at {at} ns");
    assert_eq!(nodes, vec![1, 2, 3, 5]);
    assert!(cluster.sent.iter().any(|r| r.level == Level::Crash));
    settles(&mut cluster, at);
}

/// §4.2 "Kernel failures": a stopped process is still readable, so no death signal; its
/// predecessor reads the same counter twice and reports it, within two read gaps, long before
/// the catastrophic timeout.
#[test]
fn a_stopped_member_is_caught_by_the_ring() {
    let mut cluster = Cluster::new(Fault::Stop(3));
    let (at, nodes) = cluster.run(5_000 * US).expect("a view");
    assert!(at <= 2 * (30 + 2) * US + 3 * US, "decided at {at} ns");
    assert_eq!(nodes, vec![1, 2, 4, 5]);
    let levels: Vec<Level> = cluster.sent.iter().map(|r| r.level).collect();
    assert_eq!(levels, vec![Level::Ring], "only node 2, its predecessor, reports it");
    assert_eq!(cluster.sent[0].reporter, member(2));
    settles(&mut cluster, at);
}

/// §4.2 "Catastrophic failures": a cut link between two running members is found by the
/// timeout (1 ms) and not before; one end leaves (the higher node id, the tie rule), and the
/// rest is a clique again.
#[test]
fn a_cut_link_is_caught_by_the_timeout() {
    let mut cluster = Cluster::new(Fault::Cut(2, 5));
    let (at, nodes) = cluster.run(5_000 * US).expect("a view");
    assert!((1_000 * US..1_000 * US + 200 * US).contains(&at), "decided at {at} ns");
    assert_eq!(nodes, vec![1, 2, 3, 4]);
    assert!(cluster.sent.iter().all(|r| r.level == Level::Link));
    settles(&mut cluster, at);
}

/// §4.2 last paragraph: once the view excludes the faulty member (installed at `from_ns`), the
/// reports about it stop and the leader decides nothing more for 5 ms.
fn settles(cluster: &mut Cluster, from_ns: u64) {
    let start = cluster.sent.len();
    let epoch = cluster.view.epoch;
    for now in (from_ns + US..from_ns + 5_000 * US).step_by(US as usize) {
        assert_eq!(cluster.step(now), None, "a second view at {now} ns");
    }
    let after: Vec<&Report> = cluster.sent[start..].iter().collect();
    assert!(after.is_empty(), "reports after view {epoch}: {after:?}");
}
