//! The coordinator leader's side of failure detection (§4.2, "Catastrophic failures"): "the
//! leader constructs a connectivity graph based on the reported link states and changes the
//! membership to approximately match the maximum clique in which it is included. Thus, our
//! membership service enforces all-to-all connectivity among the members".
//!
//! The vertices are the current view's members, in the view's order, plus the leader when it is
//! not a member (a coordinator outside the view). Every pair is joined except:
//!
//! * a link is down while either end reports it (a `Link` report from either side), until that
//!   reporter says it is back (`LinkBack`) or `link_ttl_ns` passes without the report repeated
//!   (so a lost "back" cannot keep a link down for ever);
//! * a member reported by the crash detector or the ring (`Crash`, `Ring`) has no links at all
//!   for the rest of the view: both are about the node, not a link.
//!
//! Reports are ignored, and say why ([`Ignored`]), when the reporter is not a member (by unique
//! id; the leader itself always counts), when the suspect is not a member under the unique id
//! the report names (an old incarnation), when the report was made against another view (its
//! `reporter_epoch` is not the current one: the reporter repeats it once it has the current
//! view), and when a crash or ring report names the leader, which is evidently running. A Link
//! report about the leader counts: a member the leader cannot hear, or that cannot hear it,
//! leaves. A leader outside the view has no unique id: it is named by its node id alone.
//!
//! The decision: the next view's members are the largest clique that contains the leader
//! ([`crate::clique`], ties to the lowest node ids), only when that differs from the current
//! members. A new view starts a new graph: the members kept were all joined in the old one.

use super::{Level, Report};
use crate::clique::{largest_clique_within, CliqueError, Graph};
use crate::view::{Member, View};

/// The leader's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphConfig {
    /// How long a `Link` report keeps its link down without being repeated; a few of the
    /// reporters' repeat periods.
    pub link_ttl_ns: u64,
    /// The clique search's budget of search nodes ([`largest_clique_within`]): 20 000 by
    /// default, about 1 ms, 30 times the most a random graph on 64 vertices needed.
    pub clique_steps_max: u64,
}

impl Default for GraphConfig {
    fn default() -> GraphConfig {
        GraphConfig { link_ttl_ns: 500_000, clique_steps_max: 20_000 }
    }
}

/// Why a report was not taken into the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ignored {
    /// The reporter is neither a member (node and unique id) nor the leader.
    ReporterNotMember,
    /// The suspect is not a member under the unique id the report names.
    SuspectNotMember,
    /// The report was made against another view.
    OtherEpoch { reporter_epoch: u64, epoch: u64 },
    /// A crash or ring report about the leader, which is running.
    AboutTheLeader,
    /// A report about the reporter itself.
    AboutItself,
}

/// The next view's members, as the graph decides them, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// In the view's order.
    pub members: Vec<Member>,
    /// Whether the clique search finished (always, but for adversarial graphs: see
    /// [`crate::clique`]).
    pub exact: bool,
    /// The epoch of the view the graph is of.
    pub epoch: u64,
    /// The links held down by `Link` reports (the catastrophic detector), as node ids, the
    /// lower first.
    pub links_down: Vec<(u16, u16)>,
    /// The members reported by the crash detector or the ring.
    pub isolated: Vec<u16>,
}

/// The leader's connectivity graph for the current view.
#[derive(Clone, Debug)]
pub struct Connectivity {
    config: GraphConfig,
    epoch: u64,
    members: Vec<Member>,
    leader: u16,
    leader_vertex: usize,
    vertices: usize,
    /// `[reporter * vertices + suspect]`: until when the reporter's Link report keeps the link
    /// down (0: not reported).
    down_until_ns: Vec<u64>,
    /// Members reported by the crash detector or the ring.
    dead: u64,
}

impl Connectivity {
    /// The graph of `view` as seen by the leader `leader` (a node id, a member or not): all
    /// joined. An error when the members and an outside leader are more than 64 vertices.
    pub fn new(config: GraphConfig, view: &View, leader: u16) -> Result<Connectivity, CliqueError> {
        let mut graph = Connectivity {
            config,
            epoch: 0,
            members: Vec::new(),
            leader,
            leader_vertex: 0,
            vertices: 0,
            down_until_ns: Vec::new(),
            dead: 0,
        };
        graph.on_view(view)?;
        Ok(graph)
    }

    /// A new view: a new graph, every pair joined, reports of the old view forgotten.
    pub fn on_view(&mut self, view: &View) -> Result<(), CliqueError> {
        let leader_at = view.members.iter().position(|m| m.node == self.leader);
        let vertices = view.members.len() + usize::from(leader_at.is_none());
        Graph::empty(vertices)?;
        self.epoch = view.epoch;
        self.members = view.members.clone();
        self.leader_vertex = leader_at.unwrap_or(view.members.len());
        self.vertices = vertices;
        self.down_until_ns = vec![0; vertices * vertices];
        self.dead = 0;
        Ok(())
    }

    fn vertex_of(&self, member: Member) -> Option<usize> {
        self.members.iter().position(|&m| m == member)
    }

    fn leader_is_member(&self) -> bool {
        self.leader_vertex < self.members.len()
    }

    /// The leader counts as itself by node id alone: its own reports, and, when it is outside
    /// the view (no unique id), reports about it.
    fn reporter_vertex(&self, reporter: Member) -> Option<usize> {
        if reporter.node == self.leader {
            return Some(self.leader_vertex);
        }
        self.vertex_of(reporter)
    }

    fn suspect_vertex(&self, suspect: Member) -> Option<usize> {
        if suspect.node == self.leader && !self.leader_is_member() {
            return Some(self.leader_vertex);
        }
        self.vertex_of(suspect)
    }

    /// Takes one report into the graph at `now_ns`, or says why not.
    pub fn on_report(&mut self, report: &Report, now_ns: u64) -> Result<(), Ignored> {
        let reporter = self.reporter_vertex(report.reporter).ok_or(Ignored::ReporterNotMember)?;
        let suspect = self.suspect_vertex(report.suspect).ok_or(Ignored::SuspectNotMember)?;
        if report.reporter_epoch != self.epoch {
            let (reporter_epoch, epoch) = (report.reporter_epoch, self.epoch);
            return Err(Ignored::OtherEpoch { reporter_epoch, epoch });
        }
        if suspect == reporter {
            return Err(Ignored::AboutItself);
        }
        let slot = reporter * self.vertices + suspect;
        match report.level {
            Level::Crash | Level::Ring if suspect == self.leader_vertex => {
                return Err(Ignored::AboutTheLeader);
            }
            Level::Crash | Level::Ring => self.dead |= 1u64 << suspect,
            Level::Link => {
                self.down_until_ns[slot] = now_ns.saturating_add(self.config.link_ttl_ns)
            }
            Level::LinkBack => self.down_until_ns[slot] = 0,
        }
        Ok(())
    }

    /// The graph at `now_ns`: vertices are the members in the view's order, then the leader if
    /// it is not a member.
    pub fn graph(&self, now_ns: u64) -> Graph {
        let mut graph = Graph::complete(self.vertices).expect("checked by on_view");
        for a in 0..self.vertices {
            for b in 0..self.vertices {
                if self.down_until_ns[a * self.vertices + b] > now_ns {
                    graph.cut(a, b).expect("in range");
                }
            }
        }
        for v in (0..self.vertices).filter(|v| self.dead & (1u64 << v) != 0) {
            graph.isolate(v).expect("in range");
        }
        graph
    }

    /// The next view's members at `now_ns`: the largest clique that contains the leader, when
    /// it differs from the current members.
    pub fn decide(&self, now_ns: u64) -> Option<Decision> {
        let graph = self.graph(now_ns);
        let steps_max = self.config.clique_steps_max;
        let choice = largest_clique_within(&graph, self.leader_vertex, steps_max)
            .expect("the leader is a vertex");
        let members: Vec<Member> = (0..self.members.len())
            .filter(|&v| choice.clique & (1u64 << v) != 0)
            .map(|v| self.members[v])
            .collect();
        if members == self.members {
            return None;
        }
        let (links_down, isolated) = self.reasons(now_ns);
        Some(Decision { members, exact: choice.exact, epoch: self.epoch, links_down, isolated })
    }

    /// The links `Link` reports hold down at `now_ns`, and the members crash or ring reports
    /// removed, by node id.
    fn reasons(&self, now_ns: u64) -> (Vec<(u16, u16)>, Vec<u16>) {
        let node = |v: usize| self.members.get(v).map_or(self.leader, |m| m.node);
        let mut links = Vec::new();
        for a in 0..self.vertices {
            for b in a + 1..self.vertices {
                let n = self.vertices;
                if self.down_until_ns[a * n + b] > now_ns || self.down_until_ns[b * n + a] > now_ns
                {
                    let (x, y) = (node(a), node(b));
                    links.push((x.min(y), x.max(y)));
                }
            }
        }
        let isolated = (0..self.vertices).filter(|v| self.dead & (1u64 << v) != 0).map(node);
        (links, isolated.collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(node: u16) -> Member {
        Member { node, uid: 100 + u64::from(node) }
    }

    fn view(epoch: u64, nodes: &[u16]) -> View {
        let mut v = View::initial(1, nodes.iter().map(|&n| m(n)).collect(), None, 20_000);
        v.epoch = epoch;
        v
    }

    fn report(reporter: u16, suspect: u16, level: Level, epoch: u64) -> Report {
        Report { reporter: m(reporter), suspect: m(suspect), level, reporter_epoch: epoch }
    }

    fn nodes(decision: Option<Decision>) -> Option<Vec<u16>> {
        decision.map(|d| d.members.iter().map(|m| m.node).collect())
    }

    /// §4.2 "changes the membership to approximately match the maximum clique in which it is
    /// included": one cut link removes one of its ends (the higher node id, the tie rule);
    /// nothing reported, nothing decided.
    #[test]
    fn a_cut_link_removes_one_end() {
        let v = view(3, &[1, 2, 3, 4]);
        let mut graph = Connectivity::new(GraphConfig::default(), &v, 1).unwrap();
        assert_eq!(graph.decide(0), None);
        graph.on_report(&report(3, 2, Level::Link, 3), 0).unwrap();
        assert!(!graph.graph(0).joined(1, 2) && !graph.graph(0).joined(2, 1));
        assert_eq!(nodes(graph.decide(0)), Some(vec![1, 2, 4]));
        let why = graph.decide(0).unwrap();
        assert_eq!((why.epoch, why.links_down, why.isolated), (3, vec![(2, 3)], vec![]));
        let next = v.successor(graph.decide(0).unwrap().members, None, 20_000);
        graph.on_view(&next).unwrap();
        assert_eq!(graph.decide(0), None, "a new view starts all joined");
    }

    /// §4.2 "the maximum clique in which it is included": a partition keeps the leader's side,
    /// even when the other side is larger; a link to the leader that either end reports removes
    /// the other end.
    #[test]
    fn the_leaders_side_is_kept() {
        let v = view(0, &[1, 2, 3, 4, 5]);
        let mut graph = Connectivity::new(GraphConfig::default(), &v, 1).unwrap();
        for (a, b) in [(1, 3), (1, 4), (1, 5), (2, 3), (2, 4), (2, 5)] {
            graph.on_report(&report(a, b, Level::Link, 0), 0).unwrap();
        }
        assert_eq!(nodes(graph.decide(0)), Some(vec![1, 2]));
        let mut graph = Connectivity::new(GraphConfig::default(), &v, 1).unwrap();
        graph.on_report(&report(4, 1, Level::Link, 0), 0).unwrap();
        assert_eq!(nodes(graph.decide(0)), Some(vec![1, 2, 3, 5]));
    }

    /// A coordinator leader outside the view is a vertex of the graph but not of the decision.
    #[test]
    fn an_outside_leader_is_in_the_graph_not_the_view() {
        let v = view(0, &[1, 2, 3]);
        let mut graph = Connectivity::new(GraphConfig::default(), &v, 9).unwrap();
        assert_eq!(graph.graph(0).len(), 4);
        assert_eq!(graph.decide(0), None);
        let leader =
            Report { reporter: Member { node: 9, uid: 0 }, ..report(1, 2, Level::Link, 0) };
        graph.on_report(&leader, 0).unwrap();
        assert!(!graph.graph(0).joined(3, 1));
        assert_eq!(nodes(graph.decide(0)), Some(vec![1, 3]));
        let about_leader =
            Report { suspect: Member { node: 9, uid: 0 }, ..report(3, 2, Level::Link, 0) };
        graph.on_report(&about_leader, 0).unwrap();
        assert_eq!(nodes(graph.decide(0)), Some(vec![1]), "3 cannot hear the leader");
        let big = view(0, &(1..=64).collect::<Vec<_>>());
        let too_many = Connectivity::new(GraphConfig::default(), &big, 99);
        assert_eq!(too_many.unwrap_err(), CliqueError::TooManyVertices { len: 65 });
        assert!(Connectivity::new(GraphConfig::default(), &big, 64).is_ok());
    }

    /// §4.2: crash notifications and ring reports are about the node: it leaves, whichever
    /// member reported it; but never the leader on such a report.
    #[test]
    fn crash_and_ring_reports_isolate_the_suspect() {
        let v = view(2, &[1, 2, 3, 4]);
        let mut graph = Connectivity::new(GraphConfig::default(), &v, 2).unwrap();
        graph.on_report(&report(1, 3, Level::Crash, 2), 0).unwrap();
        graph.on_report(&report(3, 4, Level::Ring, 2), 0).unwrap();
        assert_eq!(nodes(graph.decide(0)), Some(vec![1, 2]));
        let why = graph.decide(0).unwrap();
        assert_eq!((why.links_down, why.isolated), (vec![], vec![3, 4]), "no link reported");
        let about_leader = graph.on_report(&report(1, 2, Level::Ring, 2), 0);
        assert_eq!(about_leader, Err(Ignored::AboutTheLeader));
        assert_eq!(nodes(graph.decide(0)), Some(vec![1, 2]));
    }

    /// §4.2: "report \[...\] to the coordinator leader" and §3.1 unique ids: reports from a
    /// non-member, about an old incarnation, against another view, or about the reporter
    /// itself change nothing.
    #[test]
    fn bad_reports_are_ignored_with_their_reason() {
        let v = view(5, &[1, 2, 3]);
        let mut graph = Connectivity::new(GraphConfig::default(), &v, 1).unwrap();
        let old_uid =
            Report { suspect: Member { node: 3, uid: 7 }, ..report(2, 3, Level::Crash, 5) };
        assert_eq!(graph.on_report(&old_uid, 0), Err(Ignored::SuspectNotMember));
        let outsider =
            Report { reporter: Member { node: 2, uid: 7 }, ..report(2, 3, Level::Link, 5) };
        assert_eq!(graph.on_report(&outsider, 0), Err(Ignored::ReporterNotMember));
        assert_eq!(
            graph.on_report(&report(2, 3, Level::Link, 4), 0),
            Err(Ignored::OtherEpoch { reporter_epoch: 4, epoch: 5 })
        );
        assert!(graph.on_report(&report(2, 3, Level::Link, 6), 0).is_err(), "a future view");
        assert_eq!(graph.on_report(&report(2, 2, Level::Ring, 5), 0), Err(Ignored::AboutItself));
        assert_eq!(graph.decide(0), None);
    }

    /// §4.2 "repeated until the view excludes X or X is heard again": a LinkBack rejoins the
    /// link, and a Link report not repeated within the time to live lapses on its own.
    #[test]
    fn links_come_back_by_report_or_by_lapse() {
        let v = view(0, &[1, 2, 3]);
        let config = GraphConfig { link_ttl_ns: 1_000, ..GraphConfig::default() };
        let mut graph = Connectivity::new(config, &v, 1).unwrap();
        graph.on_report(&report(2, 3, Level::Link, 0), 0).unwrap();
        graph.on_report(&report(3, 2, Level::Link, 0), 10).unwrap();
        graph.on_report(&report(2, 3, Level::LinkBack, 0), 20).unwrap();
        assert_eq!(nodes(graph.decide(20)), Some(vec![1, 2]), "3 still reports it");
        graph.on_report(&report(3, 2, Level::Link, 0), 500).unwrap();
        assert_eq!(nodes(graph.decide(1_499)), Some(vec![1, 2]), "repeated in time");
        assert_eq!(graph.decide(1_500), None, "lapsed");
    }

    /// The decision on the largest view (64 members): a few cut links leave the largest clique
    /// with the leader, a vertex cover of the cut links removed.
    #[test]
    fn sixty_four_members_with_cut_links() {
        let v = view(0, &(0..64).collect::<Vec<_>>());
        let mut graph = Connectivity::new(GraphConfig::default(), &v, 0).unwrap();
        for (a, b) in [(5, 6), (6, 7), (40, 41), (0, 63)] {
            graph.on_report(&report(a, b, Level::Link, 0), 0).unwrap();
        }
        let decision = graph.decide(0).unwrap();
        assert!(decision.exact);
        let gone: Vec<u16> = (0..64).filter(|n| !decision.members.contains(&m(*n))).collect();
        assert_eq!(gone, vec![6, 41, 63]);
    }
}
