//! A tiny cluster for engine tests: the leader's remote operations are executed against byte
//! vectors standing for the followers' logs, with no fabric. Faults are injected per peer.
#![allow(dead_code)]

use mu_fabric::{Completion, NodeId, OpKind, Status};
use mu_log::{EntryKind, Integrity, LogLayout};
use mu_replication::{
    Action, Area, Grant, Leader, LeaderConfig, Memory, RemoteOp, ReplicaSet, VecMemory,
};
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// The peer revoked our write permission: its operations are denied.
    Denied,
    /// The peer is dead: its operations fail as unreachable.
    Unreachable,
    /// The peer is slow: its operations wait until released.
    Held,
}

pub struct Posted {
    pub peer: NodeId,
    pub wr_id: u64,
    pub op: RemoteOp,
    pub signaled: bool,
}

pub struct Cluster {
    pub layout: LogLayout,
    pub leader: Leader,
    /// Every replica's memory, by position; the leader's own is `mems[leader position]`.
    pub mems: Vec<VecMemory>,
    pub ids: Vec<NodeId>,
    pub faults: Vec<Fault>,
    pub queue: VecDeque<Posted>,
    pub held: VecDeque<Posted>,
    /// Every action the leader emitted, in order.
    pub actions: Vec<Action>,
    pub now_ns: u64,
}

pub fn layout() -> LogLayout {
    LogLayout::new(16, 128, Integrity::Checksum).unwrap()
}

impl Cluster {
    /// `n` replicas, ids 0..n; replica `leader` leads.
    pub fn new(n: u16, leader: u16) -> Cluster {
        Cluster::with_layout(n, leader, layout())
    }

    /// `n` replicas with logs of `layout`.
    pub fn with_layout(n: u16, leader: u16, layout: LogLayout) -> Cluster {
        let ids: Vec<NodeId> = (0..n).map(NodeId).collect();
        let replicas = ReplicaSet::new(ids.clone()).unwrap();
        let scratch = Leader::scratch_bytes(&replicas, &layout);
        let mems = ids.iter().map(|_| VecMemory::new(layout.region_bytes(), scratch)).collect();
        let leader = Leader::new(LeaderConfig {
            me: NodeId(leader),
            replicas,
            layout,
            permission_grace_ns: 1_000,
            outstanding_max: 1,
        })
        .unwrap();
        Cluster {
            layout,
            leader,
            mems,
            faults: vec![Fault::None; n as usize],
            ids,
            queue: VecDeque::new(),
            held: VecDeque::new(),
            actions: Vec::new(),
            now_ns: 0,
        }
    }

    /// Replaces the leader with one that keeps up to `outstanding_max` entries in flight
    /// (§7.4); before it leads.
    pub fn set_outstanding(&mut self, outstanding_max: usize) {
        self.leader = Leader::new(LeaderConfig {
            me: self.leader.me(),
            replicas: ReplicaSet::new(self.ids.clone()).unwrap(),
            layout: self.layout,
            permission_grace_ns: 1_000,
            outstanding_max,
        })
        .unwrap();
    }

    /// The entry at `index` in replica `pos`'s log, whole, if complete: (in flight before it,
    /// value).
    pub fn entry_counts(&self, pos: usize, index: u64) -> Option<(u16, Vec<u8>)> {
        self.decoded(pos, index).map(|(_, in_flight_before, value)| (in_flight_before, value))
    }

    /// The entry at `index` in replica `pos`'s log, if complete: (proposal, in flight before
    /// it, value).
    fn decoded(&self, pos: usize, index: u64) -> Option<(u64, u16, Vec<u8>)> {
        let mut slot = vec![0; self.layout.slot_bytes() as usize];
        self.mems[pos].read(Area::Log, self.layout.slot_offset(index), &mut slot);
        match self.layout.decode(index, &slot) {
            mu_log::Slot::Entry(e) => Some((e.proposal, e.in_flight_before, e.value.to_vec())),
            _ => None,
        }
    }

    pub fn me(&self) -> usize {
        self.leader.me().0 as usize
    }

    /// Queues the operations among `out` for delivery and records every action.
    pub fn take(&mut self, out: Vec<Action>) {
        for a in out {
            if let Action::Post { peer, wr_id, op, signaled } = a {
                self.queue.push_back(Posted { peer, wr_id, op, signaled });
            }
            self.actions.push(a);
        }
    }

    pub fn become_leader(&mut self) {
        let mut out = Vec::new();
        let me = self.me();
        self.leader.become_leader(&self.mems[me], &mut out);
        self.take(out);
    }

    /// Replica `pos` grants permission now.
    pub fn grant(&mut self, pos: usize) {
        let me = self.me();
        let mut out = Vec::new();
        self.leader.on_permission(
            self.ids[pos],
            Grant::Member,
            self.now_ns,
            &mut self.mems[me],
            &mut out,
        );
        self.take(out);
    }

    /// Grants permission from every replica whose fault allows an answer, then lets the grace
    /// period pass.
    pub fn grant_all(&mut self) {
        for pos in 0..self.ids.len() {
            if matches!(self.faults[pos], Fault::None | Fault::Held) {
                self.grant(pos);
            }
        }
        self.tick();
    }

    /// Lets the permission grace period pass.
    pub fn tick(&mut self) {
        let me = self.me();
        self.now_ns += 10_000;
        let mut out = Vec::new();
        self.leader.tick(self.now_ns, &mut self.mems[me], &mut out);
        self.take(out);
    }

    pub fn propose(&mut self, value: &[u8]) -> Result<(), mu_replication::ProposeError> {
        self.propose_kind(EntryKind::Request, value)
    }

    pub fn propose_kind(
        &mut self,
        kind: EntryKind,
        value: &[u8],
    ) -> Result<(), mu_replication::ProposeError> {
        let me = self.me();
        let mut out = Vec::new();
        let r = self.leader.propose(kind, value, &mut self.mems[me], &mut out);
        self.take(out);
        r
    }

    /// Executes one posted operation against the target's memory and feeds its completion back.
    pub fn deliver_one(&mut self) -> bool {
        let Some(p) = self.queue.pop_front() else { return false };
        let pos = p.peer.0 as usize;
        let me = self.me();
        let status = match self.faults[pos] {
            Fault::Held => {
                self.held.push_back(p);
                return true;
            }
            Fault::Denied => Status::RemoteAccessDenied,
            Fault::Unreachable => Status::PeerUnreachable,
            Fault::None => {
                self.execute(me, pos, p.op);
                Status::Success
            }
        };
        if p.signaled || status != Status::Success {
            let kind = match p.op {
                RemoteOp::WriteFromLog { .. } | RemoteOp::WriteWord { .. } => OpKind::Write,
                _ => OpKind::Read,
            };
            let c = Completion { wr_id: p.wr_id, kind, status, value: 0 };
            let mut out = Vec::new();
            self.leader.on_completion(p.peer, c, &mut self.mems[me], &mut out);
            self.take(out);
        }
        true
    }

    fn execute(&mut self, me: usize, pos: usize, op: RemoteOp) {
        match op {
            RemoteOp::WriteFromLog { offset, len } => {
                let mut b = vec![0; len as usize];
                self.mems[me].read(Area::Log, offset, &mut b);
                self.mems[pos].write(Area::Log, offset, &b);
            }
            RemoteOp::WriteWord { offset, value } => {
                self.mems[pos].store_u64(Area::Log, offset, value)
            }
            RemoteOp::ReadIntoScratch { offset, scratch_offset, len } => {
                let mut b = vec![0; len as usize];
                self.mems[pos].read(Area::Log, offset, &mut b);
                self.mems[me].write(Area::Scratch, scratch_offset, &b);
            }
        }
    }

    /// Delivers until nothing is left to deliver (held operations stay held).
    pub fn run(&mut self) {
        while self.deliver_one() {}
    }

    /// Lets a held peer's operations go, in their order.
    pub fn release(&mut self, pos: usize) {
        self.faults[pos] = Fault::None;
        let held: Vec<Posted> = self.held.drain(..).collect();
        for p in held.into_iter().rev() {
            self.queue.push_front(p);
        }
    }

    /// Tells the leader every replica applied the entries below `min_head` (log recycling).
    pub fn set_min_head(&mut self, min_head: u64) {
        let me = self.me();
        let mut out = Vec::new();
        self.leader.set_min_head(min_head, &mut self.mems[me], &mut out);
        self.take(out);
    }

    /// A leader brought up and ready: permissions granted and everything delivered.
    pub fn ready(n: u16, leader: u16) -> Cluster {
        let mut c = Cluster::new(n, leader);
        c.become_leader();
        c.grant_all();
        c.run();
        c
    }

    pub fn committed(&self) -> Vec<(u64, bool)> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                Action::Committed { index, mine } => Some((*index, *mine)),
                _ => None,
            })
            .collect()
    }

    pub fn aborts(&self) -> Vec<mu_replication::AbortReason> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                Action::Aborted { reason } => Some(*reason),
                _ => None,
            })
            .collect()
    }

    /// The entry at `index` in replica `pos`'s log, if complete.
    pub fn entry(&self, pos: usize, index: u64) -> Option<(u64, Vec<u8>)> {
        self.decoded(pos, index).map(|(proposal, _, value)| (proposal, value))
    }

    /// Writes a complete entry into replica `pos`'s log, as an earlier leader would have, with
    /// the minProposal an acceptor of it has (at least its proposal number).
    pub fn plant(&mut self, pos: usize, index: u64, proposal: u64, value: &[u8]) {
        let mut b = vec![0; self.layout.slot_bytes() as usize];
        let n = self.layout.encode(index, proposal, EntryKind::Request, value, &mut b).unwrap();
        self.mems[pos].write(Area::Log, self.layout.slot_offset(index), &b[..n]);
        let min = self.mems[pos].load_u64(Area::Log, mu_log::MIN_PROPOSAL_OFFSET).max(proposal);
        self.mems[pos].store_u64(Area::Log, mu_log::MIN_PROPOSAL_OFFSET, min);
    }

    /// Who was asked for permission since action number `since`, in id order (a replica we
    /// wrote to is asked only after a fence, so later than the others).
    pub fn asked_since(&self, since: usize) -> Vec<u16> {
        let mut asked: Vec<u16> = self.actions[since..]
            .iter()
            .filter_map(|a| match a {
                Action::RequestPermission { peer, .. } => Some(peer.0),
                _ => None,
            })
            .collect();
        asked.sort_unstable();
        asked
    }

    /// The operations posted since action number `since`, as (peer position, op).
    pub fn posts_since(&self, since: usize) -> Vec<(usize, RemoteOp)> {
        self.actions[since..]
            .iter()
            .filter_map(|a| match a {
                Action::Post { peer, op, .. } => Some((peer.0 as usize, *op)),
                _ => None,
            })
            .collect()
    }
}
