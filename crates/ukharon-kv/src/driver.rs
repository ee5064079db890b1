//! One node of a uKharon-KV group on its data fabric node, with no threads and no clock: the
//! caller gives it the views uKharon decided ([`KvDriver::learn`]), clients' requests with
//! `Active` taken before each ([`KvDriver::request`]), and polls it with the time and a way to
//! ask `Active` ([`KvDriver::poll`]); it moves the engines' bytes (`mu_primary_backup`) and
//! says what to answer ([`KvEvent`]). Which role a view gives, and what happens to the old one,
//! is decided here; what each role does is in `primary_io` and `backup_io`.

use crate::layout::{KvLayout, DATA_REGION, STAGING_REGION};
use crate::links::Links;
use mu_fabric::{Access, Completion, Fabric, LocalRegion, RegionId};
use mu_kv::{Reply, Request, Store};
use mu_primary_backup::{Backup, BackupAction, Mutation, Primary, Refusal, Takeover};
use mu_ukharon::changes::uid_for;
use mu_ukharon::view::View;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// What the caller must tell a client.
#[derive(Debug, PartialEq, Eq)]
pub enum KvEvent<T> {
    Answer {
        token: T,
        reply: Reply,
    },
    /// Not answered: the client sends it again (here, or to the primary it learns of).
    Drop {
        token: T,
    },
    /// This node is not the primary; the view names `primary`.
    NotPrimary {
        token: T,
        primary: Option<u16>,
    },
    /// Never taken (too long for a ring slot, or not encodable): a retry would fail the same.
    Refused {
        token: T,
        why: String,
    },
}

/// The node's part in the group, as a word for status reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleName {
    /// Not yet in a view.
    Outside,
    Backup,
    /// Named primary, taking the old primary's write access away.
    TakingOver,
    Primary,
    /// Removed from the group's views: it never serves again (a new process joins anew).
    Removed,
    /// Named primary without a whole state (its snapshot never came): it serves nothing.
    Incomplete,
}

impl RoleName {
    pub fn as_str(self) -> &'static str {
        match self {
            RoleName::Outside => "outside",
            RoleName::Backup => "backup",
            RoleName::TakingOver => "taking over",
            RoleName::Primary => "primary",
            RoleName::Removed => "removed",
            RoleName::Incomplete => "incomplete",
        }
    }
}

pub(crate) enum Role<T> {
    Outside,
    Backup(Backup),
    Taking { takeover: Takeover, revoke: Vec<u16> },
    Primary(Primary<T>),
    Removed,
    Incomplete,
}

/// What a work request in flight was for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Posted {
    Record { to: u16, position: u64, gen: u64 },
    Committed { to: u16, gen: u64 },
    Follow { to: u16, gen: u64 },
    SnapshotBody { to: u16, gen: u64 },
    SnapshotHeader { to: u16, gen: u64, epoch: u64, position: u64 },
}

impl Posted {
    /// The peer it was posted to.
    pub(crate) fn to(&self) -> u16 {
        match *self {
            Posted::Record { to, .. }
            | Posted::Committed { to, .. }
            | Posted::Follow { to, .. }
            | Posted::SnapshotBody { to, .. }
            | Posted::SnapshotHeader { to, .. } => to,
        }
    }
}

/// A snapshot to send: to whom, the engine's numbers, its bytes.
pub(crate) struct Outgoing {
    pub to: u16,
    pub epoch: u64,
    pub position: u64,
    pub committed: u64,
    pub bytes: Vec<u8>,
}

/// A snapshot that landed on a backup: the numbers to find in its installed words, and when
/// its follow word was last read for them (`None` while a read is in flight).
pub(crate) struct Installing {
    pub epoch: u64,
    pub position: u64,
    pub read_at_ns: Option<u64>,
}

/// Sizes and timings of a node.
#[derive(Clone, Copy, Debug)]
pub struct KvSettings {
    pub layout: KvLayout,
    /// How often a broken connection is set up again.
    pub reconnect_ns: u64,
    /// How often a primary reads the follow word of a backup whose snapshot it waits for.
    pub install_poll_ns: u64,
    /// Member `m`'s data fabric node is `m + data_node_offset`: 0 when each process's data
    /// node lives on a fabric of its own (a run directory of its own on shm), more where both
    /// planes share one fabric (the simulator's world).
    pub data_node_offset: u16,
}

/// See the module docs.
pub struct KvDriver<F: Fabric, T> {
    pub(crate) fabric: F,
    pub(crate) endpoint: F::Endpoint,
    pub(crate) data: F::Region,
    pub(crate) staging: F::Region,
    pub(crate) settings: KvSettings,
    pub(crate) me: u16,
    pub(crate) links: Links,
    pub(crate) role: Role<T>,
    /// The latest view acted on.
    pub(crate) view: Option<View>,
    /// The primary this node follows as a backup (the one that may write into its ring).
    pub(crate) followed: Option<u16>,
    /// This node's unique id in the views it serves in (a new one after a removal).
    pub(crate) uid: Option<u64>,
    pub(crate) posted: HashMap<u64, Posted>,
    pub(crate) next_wr: u64,
    /// Per peer, bumped when what is in flight to it no longer counts (a failure, a view).
    pub(crate) gens: BTreeMap<u16, u64>,
    /// Peers whose connection broke: reset in the engine once it is up again.
    pub(crate) lost: Vec<u16>,
    pub(crate) snapshots: VecDeque<Outgoing>,
    pub(crate) snapshot_in_flight: bool,
    /// Backups whose snapshot landed, until their installed words say they restored it.
    pub(crate) installing: BTreeMap<u16, Installing>,
    /// The backup's copy of its ring slots (read before each scan).
    pub(crate) mirror: Vec<u8>,
    pub(crate) last_committed: u64,
    /// Old primaries whose write access is still being taken away.
    pub(crate) pending_revokes: Vec<u16>,
    pub(crate) last_installed: (u64, u64),
    pub(crate) events: Vec<KvEvent<T>>,
    pub(crate) completions: Vec<Completion>,
    pub(crate) problem: Option<String>,
    pub(crate) mutation: Mutation,
}

impl<F: Fabric, T> KvDriver<F, T> {
    /// The node on `fabric` (its data fabric node: the node id is the membership node's).
    pub fn new(fabric: F, settings: KvSettings) -> Result<KvDriver<F, T>, String> {
        let layout = settings.layout;
        let offset = settings.data_node_offset;
        let Some(me) = fabric.node().0.checked_sub(offset) else {
            return Err(format!("data node {} is below data_node_offset {offset}", fabric.node()));
        };
        if me >= layout.nodes_max {
            return Err(format!("member {me} is not below nodes_max {}", layout.nodes_max));
        }
        let region = |id: RegionId, bytes: usize, access: Access| {
            fabric.register_region(id, bytes, access).map_err(|e| format!("region {id}: {e}"))
        };
        let data = region(DATA_REGION, layout.data_bytes(), Access::READ_WRITE)?;
        let staging = region(STAGING_REGION, layout.staging_bytes(), Access::NONE)?;
        let endpoint = fabric.endpoint(4096).map_err(|e| format!("endpoint: {e}"))?;
        let links = Links::new(fabric.node(), offset, settings.reconnect_ns);
        Ok(KvDriver {
            fabric,
            endpoint,
            data,
            staging,
            settings,
            me,
            links,
            role: Role::Outside,
            view: None,
            followed: None,
            uid: None,
            posted: HashMap::new(),
            next_wr: 1,
            gens: BTreeMap::new(),
            lost: Vec::new(),
            snapshots: VecDeque::new(),
            snapshot_in_flight: false,
            installing: BTreeMap::new(),
            mirror: vec![0; layout.ring.bytes()],
            last_committed: 0,
            pending_revokes: Vec::new(),
            last_installed: (0, 0),
            events: Vec::new(),
            completions: vec![Completion::EMPTY; 64],
            problem: None,
            mutation: Mutation::None,
        })
    }

    /// Breaks the engines on purpose (the simulator's checks only).
    pub fn set_mutation(&mut self, mutation: Mutation) {
        self.mutation = mutation;
    }

    /// This node's id as a member of the group's views.
    pub fn node(&self) -> u16 {
        self.me
    }

    pub fn role(&self) -> RoleName {
        match &self.role {
            Role::Outside => RoleName::Outside,
            Role::Backup(_) => RoleName::Backup,
            Role::Taking { .. } => RoleName::TakingOver,
            Role::Primary(_) => RoleName::Primary,
            Role::Removed => RoleName::Removed,
            Role::Incomplete => RoleName::Incomplete,
        }
    }

    /// The epoch of the latest view acted on.
    pub fn epoch(&self) -> Option<u64> {
        self.view.as_ref().map(|v| v.epoch)
    }

    /// The primary the latest view names.
    pub fn primary(&self) -> Option<u16> {
        self.view.as_ref().and_then(|v| v.primary)
    }

    /// The store as this node holds it now (a primary's includes records not yet held by every
    /// backup), if it holds one.
    pub fn store(&self) -> Option<&Store> {
        match &self.role {
            Role::Backup(b) => Some(b.store()),
            Role::Primary(p) => Some(p.store()),
            _ => None,
        }
    }

    /// Whether this node holds a whole state: the primary, or a backup that started with the
    /// group or restored a snapshot (one that may become primary without losing answered
    /// writes).
    pub fn whole(&self) -> bool {
        match &self.role {
            Role::Primary(_) => true,
            Role::Backup(b) => b.complete(),
            _ => false,
        }
    }

    /// Records applied (a backup) or executed (the primary).
    pub fn position(&self) -> u64 {
        match &self.role {
            Role::Backup(b) => b.applied(),
            Role::Primary(p) => p.executed(),
            _ => 0,
        }
    }

    /// The last thing that went wrong that an operator should know of.
    pub fn problem(&self) -> Option<&str> {
        self.problem.as_deref()
    }

    pub fn drain_events(&mut self) -> std::vec::Drain<'_, KvEvent<T>> {
        self.events.drain(..)
    }

    /// A client's request; `active` is `Active(view)` of the view this node serves, taken
    /// before the request was looked at.
    pub fn request(&mut self, request: &Request, token: T, active: bool) {
        let Role::Primary(p) = &mut self.role else {
            let primary = self.primary().filter(|&p| p != self.me);
            self.events.push(KvEvent::NotPrimary { token, primary });
            return;
        };
        if let Err((refusal, token)) = p.request(request, token, active) {
            let why = match refusal {
                Refusal::TooLong { bytes, max } => format!(
                    "the request takes {bytes} bytes in a record, more than a ring slot holds \
                     ({max} bytes)"
                ),
                Refusal::Invalid(e) => format!("the request cannot be encoded: {e}"),
            };
            self.events.push(KvEvent::Refused { token, why });
        }
        self.primary_actions();
    }

    /// A view uKharon decided (later than any given before; epochs may be skipped).
    pub fn learn(&mut self, view: &View) {
        if self.view.as_ref().is_some_and(|v| v.epoch >= view.epoch) {
            return;
        }
        self.view = Some(view.clone());
        let was_up: Vec<u16> = view.nodes().filter(|&n| self.links.is_up(n)).collect();
        self.links.set_peers(view.members.iter().map(|m| (m.node, m.uid)));
        let restarted: Vec<u16> = was_up.into_iter().filter(|&n| !self.links.is_up(n)).collect();
        for peer in restarted {
            // A new process under the old node id: what is in flight to the old one is lost.
            self.peer_lost(peer);
        }
        let uid = view.uid_of(self.me);
        if uid.is_none() {
            if !matches!(self.role, Role::Outside | Role::Removed) {
                self.leave_role("this node is no longer a member of the group's view");
            }
            return;
        }
        let readmitted = self.uid.is_some_and(|old| Some(old) != uid);
        // An incomplete node passed over for another primary starts again as a fresh backup
        // of the new one (it asked for that: `wants_primary`).
        let passed_over = matches!(self.role, Role::Incomplete) && view.primary != Some(self.me);
        if (readmitted || passed_over) && !self.start_afresh() {
            return;
        }
        self.uid = uid;
        let role = std::mem::replace(&mut self.role, Role::Outside);
        self.role = match (role, view.primary) {
            (Role::Outside, primary) => {
                // A group whose every member is new in this view starts from the empty store:
                // no member of an earlier view is left to hold a state.
                let first = view.members.iter().all(|m| m.uid == uid_for(view.epoch, m.node));
                let mut backup = Backup::new(self.settings.layout.ring, first);
                backup.set_mutation(self.mutation);
                self.serve_as(Role::Backup(backup), primary, view)
            }
            (role @ (Role::Backup(_) | Role::Taking { .. }), primary) => {
                self.serve_as(role, primary, view)
            }
            (Role::Primary(mut p), Some(primary)) if primary == self.me => {
                let backups = backups_of(view, self.me);
                self.forget_in_flight();
                p.next_view(view.epoch, &backups);
                Role::Primary(p)
            }
            (Role::Primary(p), _) => {
                self.role = Role::Primary(p);
                self.leave_role(
                    "the view names another primary: a former primary's store may \
                                 hold records the new one never had, so it serves no more",
                );
                return;
            }
            (role @ (Role::Removed | Role::Incomplete), _) => role,
        };
        self.actions_after_view();
    }

    /// A backup (or a takeover under way) in `view`, which names `primary`.
    fn serve_as(&mut self, role: Role<T>, primary: Option<u16>, view: &View) -> Role<T> {
        match (role, primary) {
            (Role::Backup(backup), Some(p)) if p == self.me => {
                let old = self.followed.take();
                let mut takeover = backup.take_over(view.epoch, old);
                let revoke = takeover
                    .actions()
                    .into_iter()
                    .filter_map(|a| match a {
                        BackupAction::Revoke { node } => Some(node),
                        BackupAction::Publish(_) => None,
                    })
                    .collect();
                Role::Taking { takeover, revoke }
            }
            (Role::Backup(mut backup), Some(p)) => {
                if self.followed != Some(p) {
                    self.links.grant_write(&self.fabric, p);
                }
                self.followed = Some(p);
                backup.follow(view.epoch, p);
                Role::Backup(backup)
            }
            (role @ Role::Backup(_), None) => role,
            (role @ Role::Taking { .. }, Some(p)) if p == self.me => role,
            (role, _) => {
                self.role = role;
                self.leave_role("the view moved the primary away while this node took over");
                std::mem::replace(&mut self.role, Role::Removed)
            }
        }
    }

    /// The node was removed and admitted again (its membership rejoins by itself): it serves
    /// again as a fresh backup, with nothing of its former state. Whoever could write into its
    /// ring loses that right first, then the ring and words are cleared, so that no record of
    /// its former life is taken for one of the new. Says whether it could.
    fn start_afresh(&mut self) -> bool {
        if matches!(self.role, Role::Primary(_) | Role::Backup(_) | Role::Taking { .. }) {
            self.leave_role("this node was removed from the group's view");
        }
        if let Some(writer) = self.followed.take() {
            if let Err(e) = self.links.revoke_write(&self.fabric, writer) {
                self.followed = Some(writer);
                self.problem =
                    Some(format!("rejoining: taking node {writer}'s access away: {}", e.0));
                return false;
            }
        }
        let cleared = vec![0; self.settings.layout.snapshot_offset()];
        if self.data.write(0, &cleared).is_err() {
            self.problem = Some("rejoining: clearing the data region failed".into());
            return false;
        }
        self.posted.clear();
        self.forget_in_flight();
        self.lost.clear();
        self.snapshots.clear();
        self.snapshot_in_flight = false;
        self.pending_revokes.clear();
        (self.last_committed, self.last_installed) = (0, (0, 0));
        self.role = Role::Outside;
        true
    }

    /// The member this node asks the coordinators to name primary in its place: named primary
    /// without a whole state (`RoleName::Incomplete`), it cannot serve. The next member after
    /// it in the order of admission (oldest first, wrapping), so that members that cannot
    /// serve either pass it on in turn until one that can is named.
    pub fn wants_primary(&self) -> Option<u16> {
        if !matches!(self.role, Role::Incomplete) {
            return None;
        }
        let view = self.view.as_ref()?;
        let mut by_age: Vec<_> = view.members.clone();
        by_age.sort_by_key(|m| m.uid);
        let at = by_age.iter().position(|m| m.node == self.me)?;
        let next = by_age[(at + 1) % by_age.len()].node;
        (next != self.me).then_some(next)
    }

    /// This node serves no more: what waits for an answer is dropped.
    fn leave_role(&mut self, why: &str) {
        if let Role::Primary(p) = &mut self.role {
            p.release(false);
            self.primary_actions();
        }
        self.role = Role::Removed;
        self.problem = Some(why.to_string());
    }

    /// Everything in flight to peers no longer counts (a view changed the primary's backups).
    pub(crate) fn forget_in_flight(&mut self) {
        // Every peer with something in flight, the ones never lost (no generation yet) too.
        let in_flight: Vec<u16> = self.posted.values().map(|p| p.to()).collect();
        for to in in_flight {
            self.gens.entry(to).or_default();
        }
        for g in self.gens.values_mut() {
            *g += 1;
        }
        self.installing.clear();
    }

    pub(crate) fn gen(&self, peer: u16) -> u64 {
        self.gens.get(&peer).copied().unwrap_or(0)
    }

    fn actions_after_view(&mut self) {
        match &self.role {
            Role::Primary(_) => self.primary_actions(),
            Role::Backup(_) => self.backup_actions(),
            _ => {}
        }
    }

    /// One round: connections, completions, and what the role does; `active(epoch)` is
    /// `Active` of that view now.
    pub fn poll(&mut self, now_ns: u64, active: &dyn Fn(u64) -> bool) {
        for peer in self.links.upkeep(&self.fabric, &mut self.endpoint, now_ns) {
            self.lost.retain(|&p| p != peer);
            if let Role::Primary(p) = &mut self.role {
                p.reset_peer(peer);
            }
        }
        self.poll_completions(now_ns);
        match &self.role {
            Role::Primary(_) => self.poll_primary(now_ns, active),
            Role::Backup(_) => self.poll_backup(),
            Role::Taking { .. } => self.poll_takeover(),
            _ => {}
        }
    }

    pub(crate) fn next_wr_id(&mut self, posted: Posted) -> u64 {
        let id = self.next_wr;
        self.next_wr += 1;
        self.posted.insert(id, posted);
        id
    }
}

/// The backups of `view`: every member but the primary `me`.
pub(crate) fn backups_of(view: &View, me: u16) -> Vec<u16> {
    view.nodes().filter(|&n| n != me).collect()
}
