//! A cluster of Velos acceptors in plain memory and a network of FIFO queues between them, so
//! that tests decide when each operation lands.

#![allow(dead_code)]

use mu_log::{Integrity, LogLayout, Slot};
use mu_velos::{learner, Action, Event, Memory, Proposer, ProposerConfig, VelosLayout};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

pub type Region = Rc<RefCell<Vec<u8>>>;

pub fn layout(n: usize, slots: u64) -> VelosLayout {
    VelosLayout::new(LogLayout::new(slots, 128, Integrity::Checksum).unwrap(), n).unwrap()
}

pub struct Mem(pub Region);

fn word_at(r: &[u8], offset: u64) -> u64 {
    let o = offset as usize;
    u64::from_le_bytes(r[o..o + 8].try_into().unwrap())
}

fn cas_at(r: &mut [u8], offset: u64, expected: u64, desired: u64) -> u64 {
    let old = word_at(r, offset);
    if old == expected {
        let o = offset as usize;
        r[o..o + 8].copy_from_slice(&desired.to_le_bytes());
    }
    old
}

impl Memory for Mem {
    fn load_word(&self, offset: u64) -> u64 {
        word_at(&self.0.borrow(), offset)
    }
    fn cas_word(&mut self, offset: u64, expected: u64, desired: u64) -> Option<u64> {
        Some(cas_at(&mut self.0.borrow_mut(), offset, expected, desired))
    }
    fn read(&self, offset: u64, out: &mut [u8]) {
        let o = offset as usize;
        out.copy_from_slice(&self.0.borrow()[o..o + out.len()]);
    }
    fn write(&mut self, offset: u64, data: &[u8]) {
        let o = offset as usize;
        self.0.borrow_mut()[o..o + data.len()].copy_from_slice(data);
    }
}

/// An operation in flight, with the bytes a write carries (copied at post, as inline data or
/// a DMA read right away on shared memory).
#[derive(Clone, Debug)]
pub struct InFlight {
    pub action: Action,
    pub data: Vec<u8>,
}

/// What came back to a proposer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    Cas { op: u64, old: u64 },
    Read { op: u64 },
    Error { op: u64 },
    WriteError { peer: usize },
}

pub struct Net {
    pub layout: VelosLayout,
    pub regions: Vec<Region>,
    /// queues[from][to]
    pub queues: Vec<Vec<VecDeque<InFlight>>>,
    /// Links that fail what crosses them (from, to).
    pub cut: Vec<Vec<bool>>,
    /// Connections in the error state after a failure: they flush everything until set up
    /// again ([`Net::reconnect`]), as RDMA queue pairs and the fabrics do.
    pub broken: Vec<Vec<bool>>,
    pub done: Vec<VecDeque<Done>>,
    pub cas_count: usize,
    pub cas_failed: usize,
    /// Acceptors restarted without their memory and not yet recovered: what reaches them fails,
    /// as their replication connections are not up yet.
    pub recovering: Vec<bool>,
    /// orphans[from][to]: operations a restarted replica's earlier life posted, still in
    /// flight on a connection that had not failed. They may land (a dead process's posted
    /// operations are not taken back) but complete nowhere, and they land before anything of
    /// its new life on the same pair: a fabric connects the new life only once the old
    /// connection is torn down (an RDMA queue pair reset, shared memory's fence).
    pub orphans: Vec<Vec<VecDeque<InFlight>>>,
}

impl Net {
    pub fn new(layout: VelosLayout) -> Net {
        let n = layout.positions();
        Net {
            layout,
            regions: (0..n)
                .map(|_| Rc::new(RefCell::new(vec![0u8; layout.region_bytes()])))
                .collect(),
            queues: (0..n).map(|_| (0..n).map(|_| VecDeque::new()).collect()).collect(),
            cut: vec![vec![false; n]; n],
            broken: vec![vec![false; n]; n],
            done: (0..n).map(|_| VecDeque::new()).collect(),
            cas_count: 0,
            cas_failed: 0,
            recovering: vec![false; n],
            orphans: (0..n).map(|_| (0..n).map(|_| VecDeque::new()).collect()).collect(),
        }
    }

    pub fn mem(&self, p: usize) -> Mem {
        Mem(self.regions[p].clone())
    }

    /// Takes a proposer's actions into the queues.
    pub fn post(&mut self, from: usize, proposer: &mut Proposer) {
        let actions: Vec<Action> = proposer.drain_actions().collect();
        for a in actions {
            let (to, data) = match a {
                Action::Write { peer, offset, len } => {
                    let r = self.regions[from].borrow();
                    (peer, r[offset as usize..offset as usize + len as usize].to_vec())
                }
                Action::Cas { peer, .. } | Action::Read { peer, .. } => (peer, Vec::new()),
            };
            self.queues[from][to].push_back(InFlight { action: a, data });
        }
    }

    pub fn pending(&self) -> usize {
        self.queues.iter().flatten().map(|q| q.len()).sum()
    }

    /// Lands the oldest operation from `from` to `to`, if any; returns whether one landed.
    pub fn deliver(&mut self, from: usize, to: usize) -> bool {
        if self.queues[from][to].is_empty() {
            return false;
        }
        while self.deliver_orphan(from, to) {}
        let Some(f) = self.queues[from][to].pop_front() else { return false };
        if self.cut[from][to] || self.broken[from][to] || self.recovering[to] {
            self.broken[from][to] = true;
            let d = match f.action {
                Action::Write { peer, .. } => Done::WriteError { peer },
                Action::Cas { op, .. } | Action::Read { op, .. } => Done::Error { op },
            };
            self.done[from].push_back(d);
            return true;
        }
        match f.action {
            Action::Write { offset, .. } => {
                let o = offset as usize;
                self.regions[to].borrow_mut()[o..o + f.data.len()].copy_from_slice(&f.data);
            }
            Action::Cas { offset, expected, desired, op, .. } => {
                let old = cas_at(&mut self.regions[to].borrow_mut(), offset, expected, desired);
                self.cas_count += 1;
                if old != expected {
                    self.cas_failed += 1;
                }
                self.done[from].push_back(Done::Cas { op, old });
            }
            Action::Read { remote, local, len, op, .. } => {
                let bytes = self.regions[to].borrow()
                    [remote as usize..(remote + u64::from(len)) as usize]
                    .to_vec();
                let l = local as usize;
                self.regions[from].borrow_mut()[l..l + bytes.len()].copy_from_slice(&bytes);
                self.done[from].push_back(Done::Read { op });
            }
        }
        true
    }

    /// Restarts replica `me` without its memory: its region is zeroed and it is recovering;
    /// connections to it break; what it posted before stays in flight as orphans.
    pub fn restart(&mut self, me: usize) {
        self.regions[me].borrow_mut().fill(0);
        self.recovering[me] = true;
        for to in 0..self.regions.len() {
            let posted: Vec<InFlight> = self.queues[me][to].drain(..).collect();
            if !self.broken[me][to] {
                // Reads would land in the memory that died with it.
                self.orphans[me][to].extend(
                    posted.into_iter().filter(|f| !matches!(f.action, Action::Read { .. })),
                );
            }
            self.broken[me][to] = false;
            // The connections to its earlier life fail, and their other ends see it (a
            // runtime sets a connection up again only after a failure on it).
            if to != me {
                self.broken[to][me] = true;
                self.done[to].push_back(Done::WriteError { peer: me });
            }
            // What others posted to its earlier life never lands on the new one.
            self.orphans[to][me].clear();
        }
        self.done[me].clear();
    }

    /// Lands the oldest orphan operation from `from` to `to`, unless the link is cut (then the
    /// connection fails and lands nothing more); no completion.
    pub fn deliver_orphan(&mut self, from: usize, to: usize) -> bool {
        if self.cut[from][to] || self.recovering[to] {
            let any = !self.orphans[from][to].is_empty();
            self.orphans[from][to].clear();
            return any;
        }
        let Some(f) = self.orphans[from][to].pop_front() else { return false };
        match f.action {
            Action::Write { offset, .. } => {
                let o = offset as usize;
                self.regions[to].borrow_mut()[o..o + f.data.len()].copy_from_slice(&f.data);
            }
            Action::Cas { offset, expected, desired, .. } => {
                cas_at(&mut self.regions[to].borrow_mut(), offset, expected, desired);
            }
            Action::Read { .. } => unreachable!("reads are not kept"),
        }
        true
    }

    /// The slot words of acceptor `p`, one per slot, as a recovering replica reads them.
    pub fn words(&self, p: usize) -> Vec<u64> {
        (0..self.layout.slots_count()).map(|k| self.word(p, k)).collect()
    }

    /// Ends `me`'s recovery with `words` as its slot words.
    pub fn recovered(&mut self, me: usize, words: impl IntoIterator<Item = u64>) {
        for (k, w) in words.into_iter().enumerate() {
            self.set_word(me, k as u64, w);
        }
        self.recovering[me] = false;
    }

    /// Lands everything in flight, FIFO per connection.
    pub fn deliver_all(&mut self) {
        let n = self.regions.len();
        loop {
            let mut any = false;
            for from in 0..n {
                for to in 0..n {
                    any |= self.deliver_orphan(from, to);
                }
            }
            for from in 0..n {
                for to in 0..n {
                    any |= self.deliver(from, to);
                }
            }
            if !any {
                break;
            }
        }
    }

    /// Sets the connection from `from` to `to` up again, as a runtime does once its proposer
    /// has taken in the failures.
    pub fn reconnect(&mut self, from: usize, to: usize, proposer: &mut Proposer) {
        if self.cut[from][to] {
            return;
        }
        // A connection in the error state flushes everything posted to it before it is set up
        // again.
        self.broken[from][to] = true;
        while self.deliver(from, to) {}
        self.complete(from, proposer);
        if !self.cut[from][to] {
            self.broken[from][to] = false;
            proposer.reconnected(to);
        }
    }

    /// Feeds a proposer what came back to it.
    pub fn complete(&mut self, me: usize, proposer: &mut Proposer) {
        let mut mem = self.mem(me);
        while let Some(d) = self.done[me].pop_front() {
            match d {
                Done::Cas { op, old } => proposer.on_cas(op, old),
                Done::Read { op } => proposer.on_read(op, &mut mem),
                Done::Error { op } => proposer.on_error(op),
                Done::WriteError { peer } => proposer.on_write_error(peer),
            }
        }
    }

    /// Sets the word of `index` at acceptor `p`, as if another proposer had CASed it.
    pub fn set_word(&mut self, p: usize, index: u64, word: u64) {
        let o = self.layout.word_offset(index) as usize;
        self.regions[p].borrow_mut()[o..o + 8].copy_from_slice(&word.to_le_bytes());
    }

    /// The word of `index` at acceptor `p`.
    pub fn word(&self, p: usize, index: u64) -> u64 {
        word_at(&self.regions[p].borrow(), self.layout.word_offset(index))
    }

    /// The entry of proposer `q` for `index` at acceptor `p`: (proposal, value).
    pub fn entry(&self, p: usize, q: usize, index: u64) -> Option<(u64, Vec<u8>)> {
        let o = self.layout.value_slot_offset(q, index) as usize;
        let r = self.regions[p].borrow();
        let slot = &r[o..o + self.layout.slot_bytes() as usize];
        match self.layout.log().decode(index, slot) {
            Slot::Entry(e) => Some((e.proposal, e.value.to_vec())),
            _ => None,
        }
    }

    /// What acceptor `p` learns about `index` from its own memory (§5.4).
    pub fn learned(&self, p: usize, index: u64) -> Option<Vec<u8>> {
        let q = learner::decided_by(&self.layout, index, self.word(p, index + 1))?;
        let entry = self.entry(p, q, index);
        assert!(
            entry.is_some(),
            "acceptor {p}: word {} = {:?} says index {index} is decided in {q}'s value log, \
             which has no entry for it: {:?}",
            index + 1,
            mu_velos::SlotWord::unpack(self.word(p, index + 1)),
            {
                let o = self.layout.value_slot_offset(q, index) as usize;
                let r = self.regions[p].borrow();
                let slot = r[o..o + self.layout.slot_bytes() as usize].to_vec();
                drop(r);
                (0..40).find_map(|i| match self.layout.log().decode(i, &slot) {
                    Slot::Entry(e) => {
                        Some((i, e.proposal, String::from_utf8_lossy(e.value).to_string()))
                    }
                    _ => None,
                })
            }
        );
        Some(entry.unwrap().1)
    }
}

pub fn proposer(layout: VelosLayout, me: usize, ahead: usize) -> Proposer {
    let members = (1u64 << layout.positions()) - 1;
    Proposer::new(ProposerConfig { me, layout, members, prepare_ahead: ahead }).unwrap()
}

/// A cluster of `n` acceptors with `slots` slots and proposer 0 leading from index 0.
pub fn leading(n: usize, slots: u64, ahead: usize) -> (Net, Proposer) {
    let layout = layout(n, slots);
    let net = Net::new(layout);
    let mut p = proposer(layout, 0, ahead);
    p.start(0, None, &mut net.mem(0));
    (net, p)
}

/// Polls, posts, and returns the events.
pub fn step(net: &mut Net, me: usize, p: &mut Proposer) -> Vec<Event> {
    net.complete(me, p);
    let mut mem = net.mem(me);
    p.poll(&mut mem);
    net.post(me, p);
    p.drain_events().collect()
}

/// The value a decided index holds in its decider's own value log.
pub fn decided_value(net: &Net, me: usize, index: u64) -> Vec<u8> {
    net.entry(me, me, index).expect("a decided value is in its decider's log").1
}
