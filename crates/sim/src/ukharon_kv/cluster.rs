//! A uKharon-KV group on the simulated fabric: the uKharon cluster of [`crate::ukharon`]
//! (coordinators and node cores, each node with its drifting clock) and, beside each member's
//! core, a [`KvDriver`] on a data node of the same world (member `m`'s is `m + offset`). Each
//! round the membership polls first; then every running member's driver takes the requests
//! its clients sent it and polls at the node's local clock, with `Active` read from the lease
//! its core published, and then learns its core's latest view (a round late, as through a
//! channel between two threads). A member's data node shares its
//! process's fate: crashed, restarted and paused with it ([`KvCluster::sync_data_plane`]).

use crate::kv_run::links::{self, Transient};
pub use crate::kv_run::Token;
use crate::ukharon::cluster::UkCluster;
use mu_fabric::NodeId;
use mu_fabric_sim::SimFabric;
use mu_kv::Request;
use mu_primary_backup::{Mutation, Ring};
use mu_ukharon_kv::{KvDriver, KvEvent, KvLayout, KvSettings, RoleName};
use std::collections::BTreeMap;

/// A member's data plane: its driver (none while its process is down), the requests sent to
/// it and not yet read (a stopped process reads them when it runs again), and its process's
/// incarnation (a request sent to an earlier one is lost), and the primary its driver last
/// asked for in its place, in which view (`KvDriver::wants_primary`).
pub struct DataNode {
    pub driver: Option<KvDriver<SimFabric, Token>>,
    pub inbox: Vec<(Request, Token)>,
    pub incarnation: u64,
    pub asked_primary: Option<(u64, u16)>,
}

/// An answer a driver gave: by which member, for which view, when (global time).
#[derive(Clone, Copy, Debug)]
pub struct Answered {
    pub node: u16,
    pub epoch: u64,
    pub at_ns: u64,
}

/// See the module docs.
pub struct KvCluster {
    pub uk: UkCluster,
    pub data: BTreeMap<u16, DataNode>,
    /// Member `m`'s data node is `m + offset` (the membership's `nodes_max`).
    pub offset: u16,
    settings: KvSettings,
    mutation: Mutation,
    /// Answers given (every one, including those no client waits for any more).
    pub answers: u64,
    /// Primaries seen serving, in order of their first answer (a failover adds one).
    pub primaries: Vec<(u16, u64)>,
    /// Links cut or delayed, and leases asked for, until the next fault step.
    pub transient: Transient,
}

impl KvCluster {
    /// Data nodes and drivers for every member of `uk` (its caches are none).
    pub fn new(uk: UkCluster, mutation: Mutation) -> Result<KvCluster, String> {
        let offset = uk.config.nodes_max;
        let ring = Ring::new(64, 256).map_err(|e| format!("ring: {e:?}"))?;
        let layout = KvLayout { ring, snapshot_bytes_max: 1 << 16, nodes_max: offset };
        let settings = KvSettings {
            layout,
            reconnect_ns: 10_000,
            install_poll_ns: 2_000,
            data_node_offset: offset,
        };
        let mut cluster = KvCluster {
            uk,
            data: BTreeMap::new(),
            offset,
            settings,
            mutation,
            answers: 0,
            primaries: Vec::new(),
            transient: Transient::default(),
        };
        for m in cluster.member_ids() {
            let slot =
                DataNode { driver: None, inbox: Vec::new(), incarnation: 0, asked_primary: None };
            cluster.data.insert(m, slot);
        }
        cluster.sync_data_plane()?;
        Ok(cluster)
    }

    /// The member node ids (live or not; caches are no members).
    pub fn member_ids(&self) -> Vec<u16> {
        let caches = &self.uk.config.caches;
        self.uk.nodes.keys().copied().filter(|n| !caches.contains(n)).collect()
    }

    pub fn data_node(&self, member: u16) -> NodeId {
        links::plane_node(member, self.offset)
    }

    /// Whether `member`'s process runs (neither crashed nor stopped).
    pub fn running(&self, member: u16) -> bool {
        let node = &self.uk.nodes[&member];
        node.core.is_some() && !node.paused
    }

    /// Gives each member's data node its process's fate after faults: crashed with it (the
    /// driver and the requests not yet read are gone), started again with it (a fresh driver,
    /// which joins as a fresh backup), stopped and resumed with it.
    pub fn sync_data_plane(&mut self) -> Result<(), String> {
        let err = |e: mu_fabric::FabricError| e.to_string();
        for m in self.member_ids() {
            let node = NodeId(m + self.offset);
            let (up, paused) = {
                let n = &self.uk.nodes[&m];
                (n.core.is_some(), n.paused)
            };
            let world = self.uk.world.clone();
            let slot = self.data.get_mut(&m).expect("a data node per member");
            match (up, slot.driver.is_some()) {
                (false, true) => {
                    world.crash(node).map_err(err)?;
                    slot.driver = None;
                    slot.inbox.clear();
                }
                (true, false) => {
                    if world.is_crashed(node) {
                        world.restart(node).map_err(err)?;
                    }
                    let mut driver = KvDriver::new(world.node(node), self.settings)?;
                    driver.set_mutation(self.mutation);
                    slot.driver = Some(driver);
                    slot.incarnation += 1;
                    slot.inbox.clear();
                    slot.asked_primary = None;
                }
                _ => {}
            }
            if up {
                links::follow_pause(&world, node, paused)?;
            }
        }
        Ok(())
    }

    /// Cuts (or heals) the data link between members `a` and `b` as their membership link.
    pub fn set_data_partition(&mut self, a: u16, b: u16, cut: bool) {
        links::set_plane_partition(&self.uk, self.offset, a, b, cut);
    }

    /// Removes every delay and partition between data nodes.
    pub fn heal_data_links(&mut self) {
        links::heal_plane_links(&self.uk, self.offset, &self.member_ids());
    }

    /// The data plane's part of a round, after the membership polled: every running member's
    /// driver reads the requests sent to it, polls, all at the node's clock, asks its core for
    /// another primary in its place if it wants one, and learns its core's view. The events
    /// for clients, with the member that gave each; an answer for a view after a newer view of
    /// another run became active somewhere is an error.
    pub fn poll_drivers(&mut self) -> Result<Vec<(u16, KvEvent<Token>)>, String> {
        let now = self.uk.world.now_ns();
        let mut events = Vec::new();
        let mut answered = Vec::new();
        for (&m, slot) in self.data.iter_mut() {
            let node = self.uk.nodes.get_mut(&m).expect("a node per member");
            let (Some(core), false) = (node.core.as_mut(), node.paused) else { continue };
            let Some(driver) = slot.driver.as_mut() else { continue };
            let local = node.clock.local(now);
            let published = core.published();
            let active = |epoch: u64| published.active_at(epoch, local);
            for (request, token) in slot.inbox.drain(..) {
                let serving = driver.epoch().is_some_and(active);
                driver.request(&request, token, serving);
            }
            driver.poll(local, &active);
            // Named primary without a whole state, the driver passes the role on, once per
            // view and member, as `mu_ukharon_kv::KvNode` does through its `Membership`.
            if let Some(next) = driver.wants_primary() {
                let ask = (driver.epoch().unwrap_or(0), next);
                if slot.asked_primary != Some(ask) {
                    slot.asked_primary = Some(ask);
                    core.ask_primary(next);
                }
            }
            let epoch = driver.epoch().unwrap_or(0);
            // The view the core learnt this round reaches the data plane after its work (as
            // a channel between two threads would): a process that runs again after a stop
            // may look at its requests before it learns that its view is over.
            if let Some(view) = core.view() {
                driver.learn(view);
            }
            for event in driver.drain_events() {
                if matches!(event, KvEvent::Answer { .. }) {
                    answered.push(Answered { node: m, epoch, at_ns: now });
                }
                events.push((m, event));
            }
        }
        for a in answered {
            self.answers += 1;
            if self.primaries.last().is_none_or(|&(p, e)| (p, e) != (a.node, a.epoch)) {
                self.primaries.push((a.node, a.epoch));
            }
            let newer = self.uk.spans.newer_active_by(a.epoch, a.at_ns, &self.uk.log.views);
            if let Some((epoch, first_ns, node)) = newer {
                return Err(format!(
                    "stale answer: node {} answered for view {} at {} ns, but view {epoch} (not \
                     a compatible successor) was active on node {node} from {first_ns} ns",
                    a.node, a.epoch, a.at_ns
                ));
            }
        }
        Ok(events)
    }

    /// The members of the latest view whose data plane serves it: one primary, whole backups.
    /// `Err` says what is not so yet.
    pub fn serving(&self) -> Result<u16, String> {
        let view = self.uk.log.latest().ok_or("no view decided")?;
        let primary =
            view.primary.ok_or_else(|| format!("view {} names no primary", view.epoch))?;
        for m in view.nodes() {
            let driver = self.data.get(&m).and_then(|d| d.driver.as_ref());
            let Some(driver) = driver else { return Err(format!("member {m} has no driver")) };
            let role = driver.role();
            let want = if m == primary { RoleName::Primary } else { RoleName::Backup };
            if driver.epoch() != Some(view.epoch) || role != want || !driver.whole() {
                return Err(format!(
                    "view {}: member {m} is {} in view {:?} (whole: {}), not {}{}",
                    view.epoch,
                    role.as_str(),
                    driver.epoch(),
                    driver.whole(),
                    want.as_str(),
                    driver.problem().map_or(String::new(), |p| format!(" ({p})"))
                ));
            }
        }
        Ok(primary)
    }

    /// Why the group's state is gone for good, if it is: no member of the latest view may
    /// still hold it. A whole state only passes from a primary holding one to backups, and a
    /// node removed from the views comes back with nothing ([`KvDriver`] starts afresh), so
    /// once no member of the latest view is whole (a stopped one counts, with what it held),
    /// taking over, or yet to learn its first view, none ever is again: a member named
    /// primary passes the role on, and the next does the same, for ever.
    pub fn state_lost(&self) -> Option<String> {
        let view = self.uk.log.latest()?;
        let mut roles = Vec::new();
        for m in view.nodes() {
            let driver = self.data.get(&m).and_then(|d| d.driver.as_ref());
            let role = driver.map_or(RoleName::Removed, |d| d.role());
            let whole = driver.is_some_and(|d| d.whole());
            if whole || matches!(role, RoleName::TakingOver | RoleName::Outside) {
                return None;
            }
            let state = if driver.is_some() { role.as_str() } else { "down" };
            roles.push(format!("{m} {state}"));
        }
        (!roles.is_empty()).then(|| {
            format!(
                "no member of view {} holds the group's state any more ({}): every member that \
                 held it was removed",
                view.epoch,
                roles.join(", ")
            )
        })
    }

    /// Whether `member` holds the group's state where it counts: running, a member of the
    /// latest view that its driver acts on, whole.
    pub fn holds_state(&self, member: u16) -> bool {
        let Some(view) = self.uk.log.latest() else { return false };
        let driver = self.data.get(&member).and_then(|d| d.driver.as_ref());
        self.running(member) && driver.is_some_and(|d| d.whole() && d.epoch() == Some(view.epoch))
    }

    /// Whether the group keeps its state when `member` stops serving (crashed, stopped, or
    /// removed by a partition): every other member of the latest view holds it, and there is
    /// one. The next primary is the oldest member left; one without a whole state could never
    /// serve, and a group with no member holding the state has lost it (primary-backup
    /// tolerates every member but one failing, not all).
    pub fn may_lose(&self, member: u16) -> bool {
        let Some(view) = self.uk.log.latest() else { return false };
        let others: Vec<u16> = view.nodes().filter(|&n| n != member).collect();
        !others.is_empty() && others.iter().all(|&n| self.holds_state(n))
    }
}
