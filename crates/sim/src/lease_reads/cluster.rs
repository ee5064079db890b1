//! Mu or Velos replicas beside a uKharon group on one simulated world: the uKharon cluster of
//! [`crate::ukharon`] (coordinators and node cores with drifting clocks, every view naming a
//! primary) and, beside each member `m` present at the start, a [`ReplicaCore`] on node
//! `m + offset` of the same world, appointed leaders (`Leaders::Appointed`), with a key-value
//! store and a [`Server`] that answers clients as the service would.
//!
//! A replica shares its member's process: crashed, stopped and resumed with it, and started
//! again with it as a new process (`eligible: false`: its log is lost). The replicas are a
//! fixed set: a member's readmission under a new unique id is a new appointment, not a new
//! replica.

pub use super::server::Token;
use super::server::{Answer, Server};
use super::LeaseMutation;
use crate::cluster::{config as small_log, Recorder};
use crate::kv_run::links::{self, Transient};
use crate::ukharon::cluster::UkCluster;
use crate::ukharon::Choices;
use mu_fabric::NodeId;
use mu_fabric_sim::SimFabric;
use mu_kv::Store;
use mu_replica::{Appointment, Boot, Leaders, Protocol, ReplicaConfig, ReplicaCore};
use mu_ukharon_kv::KvEvent;
use std::collections::{BTreeMap, BTreeSet};

/// One member's replica process (none while crashed) and what it serves with.
pub struct Member {
    pub replica: Option<ReplicaCore<SimFabric>>,
    pub config: ReplicaConfig,
    /// The key-value store its replica applied, and the entries it applied (for the checks).
    pub store: Store,
    pub applied: Vec<(u64, Vec<Vec<u8>>)>,
    pub server: Server,
    /// The process's incarnation: a request sent to an earlier one is lost.
    pub incarnation: u64,
}

/// See the module docs.
pub struct LeaseCluster {
    pub uk: UkCluster,
    pub members: BTreeMap<u16, Member>,
    /// Member `m`'s replica is node `m + offset` (the membership's `nodes_max`).
    pub offset: u16,
    pub mutation: LeaseMutation,
    /// Members stopped in the middle of a local read, until the global time given.
    pub stalls: BTreeMap<u16, u64>,
    /// Links cut or delayed, and leases asked for, until the next fault step.
    pub transient: Transient,
    /// Everything any replica applied, in any process (what [`Recorder`] wants).
    ever: BTreeSet<Vec<u8>>,
    boots: u32,
    pub answers: u64,
    pub local_answers: u64,
    /// Local reads whose process stopped between their two checks.
    pub stalls_begun: u64,
    /// Whether answers are checked against the views active when they were given.
    pub check_answers: bool,
    /// Per member, the view in which it last handed the primary role on, and how many times
    /// members did.
    pub(super) handed_on: BTreeMap<u16, u64>,
    pub handoffs: u64,
    /// Primaries seen answering, in order (a failover adds one).
    pub primaries: Vec<(u16, u64)>,
}

impl LeaseCluster {
    /// A replica for every member of `uk` (caches have none), all in the first configuration.
    pub fn new(
        uk: UkCluster,
        protocol: Protocol,
        mutation: LeaseMutation,
    ) -> Result<LeaseCluster, String> {
        let offset = uk.config.nodes_max;
        let ids: Vec<u16> = {
            let caches = &uk.config.caches;
            uk.nodes.keys().copied().filter(|n| !caches.contains(n)).collect()
        };
        let replicas: Vec<NodeId> = ids.iter().map(|&m| NodeId(m + offset)).collect();
        let mut cluster = LeaseCluster {
            uk,
            members: BTreeMap::new(),
            offset,
            mutation,
            stalls: BTreeMap::new(),
            transient: Transient::default(),
            ever: BTreeSet::new(),
            boots: 0,
            answers: 0,
            local_answers: 0,
            stalls_begun: 0,
            check_answers: true,
            handed_on: BTreeMap::new(),
            handoffs: 0,
            primaries: Vec::new(),
        };
        for &m in &ids {
            // The simulator's small log (64 slots of 128 bytes), on the replicas' node ids.
            let mut config = small_log(1, 0);
            config.me = NodeId(m + offset);
            config.replicas = replicas.clone();
            config.protocol = protocol;
            config.leaders = Leaders::Appointed;
            let member = Member {
                replica: None,
                config,
                store: Store::new(),
                applied: Vec::new(),
                server: Server::default(),
                incarnation: 0,
            };
            cluster.members.insert(m, member);
            cluster.boot(m)?;
        }
        Ok(cluster)
    }

    pub fn member_ids(&self) -> Vec<u16> {
        self.members.keys().copied().collect()
    }

    pub fn replica_node(&self, member: u16) -> NodeId {
        links::plane_node(member, self.offset)
    }

    /// Whether `member`'s process runs (neither crashed nor stopped).
    pub fn running(&self, member: u16) -> bool {
        let node = &self.uk.nodes[&member];
        node.core.is_some() && !node.paused
    }

    /// Starts `member`'s replica as a new process (its log and store gone).
    fn boot(&mut self, m: u16) -> Result<(), String> {
        self.boots += 1;
        let world = self.uk.world.clone();
        let slot = self.members.get_mut(&m).expect("a member");
        let mut rng = mu_fabric_sim::SimRng::new(world.seed() ^ u64::from(self.boots) << 40);
        let boot = Boot { id: self.boots, nonce: rng.next_u64() };
        let node = world.node(slot.config.me);
        let core = ReplicaCore::new(&slot.config, node, boot).map_err(|e| e.to_string())?;
        slot.replica = Some(core);
        slot.store = Store::new();
        slot.applied.clear();
        slot.server = Server::default();
        slot.incarnation += 1;
        Ok(())
    }

    /// Gives each replica its member process's fate after faults: crashed with it, started
    /// again with it (not eligible: its log is lost), stopped and resumed with it.
    pub fn sync_replicas(&mut self) -> Result<(), String> {
        let err = |e: mu_fabric::FabricError| e.to_string();
        for m in self.member_ids() {
            let node = self.replica_node(m);
            let (up, paused) = (self.uk.nodes[&m].core.is_some(), self.uk.nodes[&m].paused);
            let world = self.uk.world.clone();
            let has_replica = self.members[&m].replica.is_some();
            match (up, has_replica) {
                (false, true) => {
                    world.crash(node).map_err(err)?;
                    let slot = self.members.get_mut(&m).expect("a member");
                    slot.replica = None;
                    slot.server = Server::default();
                    self.stalls.remove(&m);
                }
                (true, false) => {
                    if world.is_crashed(node) {
                        world.restart(node).map_err(err)?;
                    }
                    self.members.get_mut(&m).expect("a member").config.eligible = false;
                    self.boot(m)?;
                }
                _ => {}
            }
            if up {
                links::follow_pause(&world, node, paused)?;
            }
        }
        Ok(())
    }

    /// Stops or resumes `member`'s whole process: its membership node and its replica.
    pub fn set_paused(&mut self, member: u16, paused: bool) -> Result<(), String> {
        let world = &self.uk.world;
        let result = match paused {
            true => world.pause(NodeId(member)),
            false => world.resume(NodeId(member)),
        };
        result.map_err(|e| e.to_string())?;
        self.uk.nodes.get_mut(&member).expect("a member").paused = paused;
        self.stalls.remove(&member);
        self.sync_replicas()
    }

    /// Resumes the members whose stall in a local read is over.
    fn end_stalls(&mut self, now: u64) -> Result<(), String> {
        let over: Vec<u16> =
            self.stalls.iter().filter(|(_, &until)| until <= now).map(|(&m, _)| m).collect();
        for m in over {
            self.set_paused(m, false)?;
        }
        Ok(())
    }

    /// Cuts (or heals) the link between the replicas of members `a` and `b`.
    pub fn set_replica_partition(&mut self, a: u16, b: u16, cut: bool) {
        links::set_plane_partition(&self.uk, self.offset, a, b, cut);
    }

    /// Removes every delay and partition between replicas.
    pub fn heal_replica_links(&mut self) {
        links::heal_plane_links(&self.uk, self.offset, &self.member_ids());
    }

    /// The replicas' part of a round, after the membership polled: every running member
    /// appoints (rule 1), finishes the local reads due, polls its replica, and serves what
    /// its clients sent. The events for clients, with the member that gave each; an answer
    /// given for a view after a newer view of another run became active somewhere is an error
    /// (`stale-answer`).
    pub(crate) fn serve(
        &mut self,
        choices: &mut Choices,
        stall_reads: bool,
    ) -> Result<Vec<(u16, KvEvent<Token>)>, String> {
        let now = self.uk.world.now_ns();
        self.end_stalls(now)?;
        self.hand_on_primaries();
        let mut events = Vec::new();
        let mut answered = Vec::new();
        let mut stalls = Vec::new();
        let offset = self.offset;
        for (&m, slot) in self.members.iter_mut() {
            let node = &self.uk.nodes[&m];
            let (Some(core), false) = (node.core.as_ref(), node.paused) else { continue };
            let Some(replica) = slot.replica.as_mut() else { continue };
            let local = node.clock.local(now);
            let published = core.published();
            let me = NodeId(m + offset);
            // The view the core holds now: its primary's appointment, whether it is active.
            let view = core.view().map(|v| {
                let uid = v.primary.and_then(|p| v.uid_of(p));
                let appointed = v
                    .primary
                    .zip(uid)
                    .and_then(|(p, uid)| Appointment::from_unique_id(NodeId(p + offset), uid));
                (v.epoch, appointed, v.primary)
            });
            let lease = super::server::Lease {
                me,
                member: m,
                epoch: view.map(|v| v.0),
                appointed: view.and_then(|v| v.1),
                primary: view.and_then(|v| v.2),
                active: &|epoch| published.active_at(epoch, local),
            };
            if let Some(a) = mu_replica::next_appointment(me, lease.appointed, lease.is_active()) {
                replica.appoint(a);
            }
            let mut recorder = Recorder {
                applied: &mut slot.applied,
                store: &mut slot.store,
                ever: &mut self.ever,
            };
            let round = super::server::Round {
                now_ns: now,
                local_ns: local,
                mutation: self.mutation,
                stall_reads,
            };
            let out = slot.server.round(&round, &lease, replica, &mut recorder, choices);
            for Answer { epoch, local } in out.answered {
                answered.push((m, epoch, local));
            }
            if let Some(until) = out.stall_until_ns {
                stalls.push((m, until));
            }
            events.extend(out.events.into_iter().map(|e| (m, e)));
        }
        for (m, until) in stalls {
            self.set_paused(m, true)?;
            self.stalls.insert(m, until);
            self.stalls_begun += 1;
        }
        self.note_answers(&answered, now)?;
        Ok(events)
    }

    /// Counts the answers given this round (member, view, local or not) and checks each
    /// against the views active by now: one for a view after which a newer view of another run
    /// was active somewhere is an error.
    fn note_answers(&mut self, answered: &[(u16, u64, bool)], now: u64) -> Result<(), String> {
        for &(m, epoch, local) in answered {
            self.answers += 1;
            self.local_answers += u64::from(local);
            if self.primaries.last().is_none_or(|&(p, e)| (p, e) != (m, epoch)) {
                self.primaries.push((m, epoch));
            }
            let newer = self.uk.spans.newer_active_by(epoch, now, &self.uk.log.views);
            if let (Some((newer, first_ns, node)), true) = (newer, self.check_answers) {
                let what = if local { "a local read" } else { "a request through the log" };
                return Err(format!(
                    "stale answer: member {m} answered {what} for view {epoch} at {now} ns, but \
                     view {newer} (not a compatible successor) was active on node {node} from \
                     {first_ns} ns"
                ));
            }
        }
        Ok(())
    }

    /// Whether replica `m` is out of majorities: crashed, restarted and not counted yet, or
    /// stopped for good ([`crate::membership::is_out`]'s rule).
    pub fn replica_out(&self, m: u16) -> bool {
        self.members[&m].replica.as_ref().is_none_or(|r| {
            let s = r.status();
            !s.eligible || s.recovering || s.removed || s.failure.is_some()
        })
    }

    /// Whether one more replica may be out (crashed, stopped, or not counted in majorities)
    /// with a majority of them left.
    pub fn may_lose_one(&self) -> bool {
        let ids = self.member_ids();
        let out = ids.iter().filter(|&&m| self.replica_out(m) || !self.running(m)).count();
        out < (ids.len() - 1) / 2
    }
}
