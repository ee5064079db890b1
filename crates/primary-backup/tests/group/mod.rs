//! A group of primary-backup engines in one process: the backups' memories, the writes on the
//! wire (in order per pair, landing only where the writer still has access), reads, access
//! revocations, views, and clients that retry what is dropped. Every step is chosen by a seeded
//! random stream, so a failing seed replays.

use mu_kv::{Op, Reply, Request};
use mu_primary_backup::{
    Action, Backup, BackupAction, FollowWord, Mutation, Node, Primary, Ring, Takeover,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A client's request, by client index and sequence number.
type Token = (usize, u64);

/// A backup's memory: what the primary writes and what it reads.
struct Memory {
    ring: Vec<u8>,
    committed: u64,
    follow: FollowWord,
    /// Who may write into the ring and the committed word.
    writers: BTreeSet<Node>,
}

enum Role {
    Primary(Primary<Token>),
    Backup(Backup),
    Takeover(Takeover),
    Crashed,
}

enum Wire {
    /// `epoch`: the writer's view when it sent it (a primary kept by a later view no longer
    /// counts the completion of a write it sent before, as the runtime drops it).
    Record {
        offset: usize,
        position: u64,
        epoch: u64,
        bytes: Vec<u8>,
    },
    Committed(u64),
    Snapshot {
        epoch: u64,
        position: u64,
        committed: u64,
        snapshot: Vec<u8>,
    },
}

/// A completed operation, for the checker.
#[derive(Clone, Debug)]
pub struct Done {
    pub key: u8,
    /// A put's value, or what a get returned.
    pub value: Option<Vec<u8>>,
    pub put: bool,
    pub invoked: u64,
    pub answered: u64,
}

struct Client {
    seq: u64,
    /// The request out, when it was first sent, and whether a send is due.
    pending: Option<(Request, u64, bool)>,
    /// The primary this client believes in.
    primary: Node,
}

pub struct Group {
    rng: SplitMix,
    ring: Ring,
    mutation: Mutation,
    memory: BTreeMap<Node, Memory>,
    role: BTreeMap<Node, Role>,
    /// The view: its epoch (the only one `Active` anywhere), primary and backups.
    epoch: u64,
    primary: Node,
    backups: Vec<Node>,
    wire: BTreeMap<(Node, Node), VecDeque<Wire>>,
    reads: Vec<(Node, Node)>,
    /// Revocations under way: where, whose access, and when it is done.
    revokes: Vec<(Node, Node, u64)>,
    clients: Vec<Client>,
    /// This seed's timing: the longest revocation in steps, one in how many deliveries a
    /// cut-off primary's write gets through, one in how many tries a client learns the new
    /// primary.
    revoke_steps_max: u64,
    /// The longest the new primary's own revocation takes (its thread may be quicker).
    takeover_revoke_steps_max: u64,
    cut_off_one_in: u64,
    learn_one_in: u64,
    pub done: Vec<Done>,
    pub time: u64,
    next_node: Node,
}

pub const KEYS: u8 = 2;

impl Group {
    pub fn new(seed: u64, mutation: Mutation, backups: u16, clients: usize) -> Group {
        let ring = Ring::new(8, 96).expect("a ring");
        let mut rng = SplitMix(seed);
        let revoke_steps_max = [50, 300, 1500][rng.below(3) as usize];
        let takeover_revoke_steps_max = [5, revoke_steps_max][rng.below(2) as usize];
        let cut_off_one_in = [3, 30, 100][rng.below(3) as usize];
        let learn_one_in = [1, 4, 20][rng.below(3) as usize];
        let mut g = Group {
            rng,
            revoke_steps_max,
            takeover_revoke_steps_max,
            cut_off_one_in,
            learn_one_in,
            ring,
            mutation,
            memory: BTreeMap::new(),
            role: BTreeMap::new(),
            epoch: 1,
            primary: 0,
            backups: (1..=backups).collect(),
            wire: BTreeMap::new(),
            reads: Vec::new(),
            revokes: Vec::new(),
            clients: (0..clients).map(|_| Client { seq: 0, pending: None, primary: 0 }).collect(),
            done: Vec::new(),
            time: 0,
            next_node: backups + 1,
        };
        for b in g.backups.clone() {
            g.add_memory(b);
            let mut backup = Backup::new(ring, true);
            backup.set_mutation(mutation);
            backup.follow(1, 0);
            g.role.insert(b, Role::Backup(backup));
            g.backup_actions(b);
        }
        let mut primary =
            Primary::new(1, ring, mu_kv::Store::new(), 0, VecDeque::new(), &g.backups);
        primary.set_mutation(mutation);
        g.role.insert(0, Role::Primary(primary));
        g.add_memory(0);
        g.primary_actions(0);
        g
    }

    fn add_memory(&mut self, node: Node) {
        let memory = Memory {
            ring: vec![0; self.ring.bytes()],
            committed: 0,
            follow: FollowWord { epoch: 0, applied: 0, whole: true },
            writers: BTreeSet::new(),
        };
        self.memory.insert(node, memory);
    }

    /// One random step; `issue` lets idle clients send new requests.
    pub fn step(&mut self, issue: bool) {
        self.time += 1;
        match self.rng.below(10) {
            0 | 1 => self.client_step(issue),
            2 | 3 => self.deliver_write(),
            4 => self.deliver_read(),
            5 => self.deliver_revoke(),
            6 => self.scan(),
            7 => self.release(),
            8 => self.learn_primary(),
            _ => self.flush(),
        }
    }

    /// Crashes the primary, or leaves it running cut off, and installs a view that names one
    /// of the complete backups primary (and, now and then, adds a fresh backup).
    pub fn change_view(&mut self, crash_old: bool, add_fresh: bool) {
        let candidates: Vec<Node> = self
            .backups
            .iter()
            .copied()
            .filter(|b| matches!(self.role.get(b), Some(Role::Backup(b)) if b.complete()))
            .collect();
        if candidates.is_empty() {
            return;
        }
        let old = self.primary;
        let new = candidates[self.rng.below(candidates.len() as u64) as usize];
        if crash_old {
            self.role.insert(old, Role::Crashed);
        }
        self.epoch += 1;
        self.primary = new;
        self.backups.retain(|&b| b != new);
        if add_fresh {
            self.add_fresh_backup();
        }
        let Some(Role::Backup(backup)) = self.role.remove(&new) else {
            panic!("the new primary {new} is a backup");
        };
        let mut takeover = backup.take_over(self.epoch, Some(old));
        for action in takeover.actions() {
            if let BackupAction::Revoke { node } = action {
                let due = self.time + self.rng.below(self.takeover_revoke_steps_max) + 1;
                self.revokes.push((new, node, due));
            }
        }
        self.role.insert(new, Role::Takeover(takeover));
        for b in self.backups.clone() {
            if let Some(Role::Backup(backup)) = self.role.get_mut(&b) {
                backup.follow(self.epoch, new);
            }
            self.backup_actions(b);
        }
    }

    /// A view that keeps the primary and removes one of its backups (crashed, or left
    /// running), and now and then adds a fresh one: the primary answers nothing more until
    /// every backup of the new view holds every record it executed (design, item 5).
    pub fn change_view_keep_primary(&mut self, crash_removed: bool, add_fresh: bool) {
        if !matches!(self.role.get(&self.primary), Some(Role::Primary(p)) if p.epoch() == self.epoch)
        {
            return; // still taking over
        }
        if let Some(i) =
            (!self.backups.is_empty()).then(|| self.rng.below(self.backups.len() as u64) as usize)
        {
            let removed = self.backups.remove(i);
            if crash_removed {
                self.role.insert(removed, Role::Crashed);
            }
        }
        if add_fresh {
            self.add_fresh_backup();
        }
        self.epoch += 1;
        let (epoch, primary, backups) = (self.epoch, self.primary, self.backups.clone());
        if let Some(Role::Primary(p)) = self.role.get_mut(&primary) {
            p.next_view(epoch, &backups);
        }
        self.primary_actions(primary);
        for b in backups {
            if let Some(Role::Backup(backup)) = self.role.get_mut(&b) {
                backup.follow(epoch, primary);
            }
            self.backup_actions(b);
        }
    }

    fn add_fresh_backup(&mut self) {
        let fresh = self.next_node;
        self.next_node += 1;
        self.add_memory(fresh);
        let mut backup = Backup::new(self.ring, false);
        backup.set_mutation(self.mutation);
        self.role.insert(fresh, Role::Backup(backup));
        self.backups.push(fresh);
    }

    /// The primary's connection to one backup breaks: what is on the wire to it is flushed
    /// (never lands, never completes), and the primary starts again from its follow word.
    pub fn lose_link(&mut self) {
        if self.backups.is_empty() {
            return;
        }
        let b = self.backups[self.rng.below(self.backups.len() as u64) as usize];
        let primary = self.primary;
        if let Some(q) = self.wire.get_mut(&(primary, b)) {
            q.clear();
        }
        self.reads.retain(|&(from, to)| (from, to) != (primary, b));
        if let Some(Role::Primary(p)) = self.role.get_mut(&primary) {
            p.reset_peer(b);
        }
        self.primary_actions(primary);
    }

    fn client_step(&mut self, issue: bool) {
        let c = self.rng.below(self.clients.len() as u64) as usize;
        let time = self.time;
        let key = self.rng.below(KEYS as u64) as u8;
        let get = self.rng.below(2) == 0;
        let client = &mut self.clients[c];
        if client.pending.is_none() && issue {
            client.seq += 1;
            let op = if get {
                Op::Get { key: vec![key] }
            } else {
                Op::Put { key: vec![key], value: format!("c{c}s{}", client.seq).into_bytes() }
            };
            client.pending = Some((Request { client: c as u64, seq: client.seq, op }, time, true));
        }
        let Some((request, _, due)) = &mut client.pending else { return };
        if !std::mem::take(due) {
            return;
        }
        let (request, to) = (request.clone(), client.primary);
        let active = self.active(to);
        match self.role.get_mut(&to) {
            Some(Role::Primary(p)) => {
                p.request(&request, (c, request.seq), active).expect("a small request");
                self.primary_actions(to);
            }
            // Not a primary (any more): the client is told to look again.
            _ => self.dropped((c, request.seq)),
        }
    }

    /// Whether `Active` holds on `node` for the view it serves: only the current view is.
    fn active(&self, node: Node) -> bool {
        match self.role.get(&node) {
            Some(Role::Primary(p)) => p.epoch() == self.epoch,
            _ => false,
        }
    }

    fn dropped(&mut self, (c, seq): Token) {
        if let Some((request, _, due)) = &mut self.clients[c].pending {
            if request.seq == seq {
                *due = true;
            }
        }
    }

    fn answered(&mut self, (c, seq): Token, reply: Reply) {
        let time = self.time;
        let client = &mut self.clients[c];
        let Some((request, invoked, _)) = &client.pending else { return };
        if request.seq != seq {
            return; // an answer to a request already answered by another primary
        }
        let done = match (&request.op, reply) {
            (Op::Put { key, value }, Reply::Stored) => Done {
                key: key[0],
                value: Some(value.clone()),
                put: true,
                invoked: *invoked,
                answered: time,
            },
            (Op::Get { key }, Reply::Value(value)) => {
                Done { key: key[0], value, put: false, invoked: *invoked, answered: time }
            }
            (op, reply) => panic!("{op:?} answered {reply:?}"),
        };
        client.pending = None;
        self.done.push(done);
    }

    fn learn_primary(&mut self) {
        let c = self.rng.below(self.clients.len() as u64) as usize;
        if self.clients[c].primary != self.primary && self.rng.below(self.learn_one_in) == 0 {
            self.clients[c].primary = self.primary;
            if let Some((_, _, due)) = &mut self.clients[c].pending {
                *due = true;
            }
        }
    }

    fn primary_actions(&mut self, node: Node) {
        let Some(Role::Primary(p)) = self.role.get_mut(&node) else { return };
        let p_epoch = p.epoch();
        let actions: Vec<Action<Token>> = p.drain_actions().collect();
        for action in actions {
            match action {
                Action::Write { to, offset, position, bytes } => {
                    let epoch = p_epoch;
                    self.wire.entry((node, to)).or_default().push_back(Wire::Record {
                        offset,
                        position,
                        epoch,
                        bytes,
                    });
                }
                Action::WriteCommitted { to, committed } => {
                    self.wire.entry((node, to)).or_default().push_back(Wire::Committed(committed));
                }
                Action::ReadFollow { to } => self.reads.push((node, to)),
                Action::Snapshot { to, epoch, position, committed, snapshot } => {
                    self.wire.entry((node, to)).or_default().push_back(Wire::Snapshot {
                        epoch,
                        position,
                        committed,
                        snapshot,
                    });
                }
                Action::Answer { token, reply } => self.answered(token, reply),
                Action::Drop { token } => self.dropped(token),
            }
        }
    }

    fn backup_actions(&mut self, node: Node) {
        let Some(Role::Backup(b)) = self.role.get_mut(&node) else { return };
        let actions: Vec<BackupAction> = b.drain_actions().collect();
        for action in actions {
            match action {
                BackupAction::Revoke { node: old } => self.revoke(node, old),
                BackupAction::Publish(word) => {
                    let epoch = word.epoch;
                    let memory = self.memory.get_mut(&node).expect("memory");
                    memory.follow = word;
                    // The follow word grants the primary of that view access.
                    if epoch == self.epoch {
                        memory.writers.insert(self.primary);
                    }
                }
            }
        }
    }

    fn deliver_write(&mut self) {
        let pairs: Vec<(Node, Node)> =
            self.wire.iter().filter(|(_, q)| !q.is_empty()).map(|(&k, _)| k).collect();
        if pairs.is_empty() {
            return;
        }
        let (from, to) = pairs[self.rng.below(pairs.len() as u64) as usize];
        // A primary of an older view is cut off: its writes linger on the wire, and land late
        // if they land at all (what the revocation before a follow is for).
        let cut_off =
            matches!(self.role.get(&from), Some(Role::Primary(p)) if p.epoch() < self.epoch);
        if cut_off && self.rng.below(self.cut_off_one_in) != 0 {
            return;
        }
        let wire = self.wire.get_mut(&(from, to)).unwrap().pop_front().unwrap();
        let memory = self.memory.get_mut(&to).expect("memory");
        let lands = memory.writers.contains(&from);
        match wire {
            Wire::Record { offset, position, epoch, bytes } => {
                if lands {
                    memory.ring[offset..offset + bytes.len()].copy_from_slice(&bytes);
                    match self.role.get_mut(&from) {
                        Some(Role::Primary(p)) if p.epoch() == epoch => p.completed(to, position),
                        _ => {}
                    }
                }
            }
            Wire::Committed(committed) => {
                if lands {
                    memory.committed = committed;
                }
            }
            Wire::Snapshot { epoch, position, committed, snapshot } => {
                let installed = match self.role.get_mut(&to) {
                    Some(Role::Backup(b)) if lands => {
                        b.install(&snapshot, epoch, position, committed) == Ok(true)
                    }
                    _ => false,
                };
                self.backup_actions(to);
                if installed {
                    if let Some(Role::Primary(p)) = self.role.get_mut(&from) {
                        p.installed(to, position);
                    }
                }
            }
        }
        self.primary_actions(from);
    }

    fn deliver_read(&mut self) {
        if self.reads.is_empty() {
            return;
        }
        let (from, to) = self.reads.swap_remove(self.rng.below(self.reads.len() as u64) as usize);
        let word = self.memory[&to].follow;
        if let Some(Role::Primary(p)) = self.role.get_mut(&from) {
            p.followed(to, word);
        }
        self.primary_actions(from);
    }

    /// Queues a revocation at `at` of `old`'s access. Taking access away is slow (a queue
    /// pair's state cycled, or access flags changed: hundreds of microseconds on the Mu paper's
    /// hardware) and each node does its own, so each takes a random while.
    fn revoke(&mut self, at: Node, old: Node) {
        let due = self.time + self.rng.below(self.revoke_steps_max) + 1;
        self.revokes.push((at, old, due));
    }

    fn deliver_revoke(&mut self) {
        let time = self.time;
        let Some(i) = self.revokes.iter().position(|&(_, _, due)| due <= time) else { return };
        let (at, old, _) = self.revokes.remove(i);
        self.memory.get_mut(&at).expect("memory").writers.remove(&old);
        match self.role.remove(&at) {
            Some(Role::Backup(mut b)) => {
                b.revoked();
                self.role.insert(at, Role::Backup(b));
                self.backup_actions(at);
            }
            Some(Role::Takeover(t)) => {
                let ring = &self.memory[&at].ring;
                let primary: Primary<Token> =
                    t.revoked(ring, &self.backups).expect("a complete backup");
                self.role.insert(at, Role::Primary(primary));
                self.primary_actions(at);
            }
            Some(other) => {
                self.role.insert(at, other);
            }
            None => {}
        }
    }

    fn scan(&mut self) {
        let nodes: Vec<Node> = self.role.keys().copied().collect();
        let node = nodes[self.rng.below(nodes.len() as u64) as usize];
        if let Some(Role::Backup(b)) = self.role.get_mut(&node) {
            let memory = &self.memory[&node];
            b.scan(&memory.ring, memory.committed);
            self.backup_actions(node);
        }
    }

    fn release(&mut self) {
        let nodes: Vec<Node> = self.role.keys().copied().collect();
        for node in nodes {
            let active = self.active(node);
            if let Some(Role::Primary(p)) = self.role.get_mut(&node) {
                p.release(active);
            }
            self.primary_actions(node);
        }
    }

    fn flush(&mut self) {
        if let Some(Role::Primary(p)) = self.role.get_mut(&self.primary) {
            p.flush_committed();
        }
        self.primary_actions(self.primary);
    }

    /// Whether the primary has writes on the wire: the moment a view change hurts most.
    pub fn primary_writing(&self) -> bool {
        self.wire.iter().any(|(&(from, _), q)| from == self.primary && !q.is_empty())
    }

    /// Whether the last view change is over: no revocation pending, so no takeover either.
    pub fn settled(&self) -> bool {
        self.revokes.is_empty()
    }

    /// Whether every backup applied everything the primary executed
    /// (and the primary counts every one of them: nothing of its own is left on the wire).
    pub fn caught_up(&self) -> bool {
        let executed = self.primary_executed();
        matches!(self.role.get(&self.primary), Some(Role::Primary(p)) if p.durable() >= executed)
            && !self.primary_writing()
            && self.backups.iter().all(|b| match self.role.get(b) {
                Some(Role::Backup(b)) => b.applied() == executed,
                _ => true,
            })
    }

    /// A get of every key from the primary's store after the end, for the checker.
    pub fn final_reads(&mut self) {
        // Only once every request was answered: a pending put may yet take effect.
        if !self.idle() {
            return;
        }
        let Some(Role::Primary(p)) = self.role.get(&self.primary) else { return };
        let at = self.time + 1;
        for key in 0..KEYS {
            let value = p.store().get(&[key]).map(<[u8]>::to_vec);
            self.done.push(Done { key, value, put: false, invoked: at, answered: at });
        }
    }

    /// Whether every client's request was answered.
    pub fn idle(&self) -> bool {
        self.clients.iter().all(|c| c.pending.is_none())
    }

    /// The current primary's store digest and each backup's, once all is applied.
    pub fn digests(&self) -> (u64, Vec<(Node, u64, u64)>) {
        let Some(Role::Primary(p)) = self.role.get(&self.primary) else {
            return (0, Vec::new()); // still taking over: nothing to compare yet
        };
        let backups = self
            .backups
            .iter()
            .filter_map(|b| match self.role.get(b) {
                Some(Role::Backup(b2)) => Some((*b, b2.applied(), b2.store().digest())),
                _ => None,
            })
            .collect();
        (p.store().digest(), backups)
    }

    /// The group's state, for a failing seed.
    pub fn describe(&self) -> String {
        let mut out =
            format!("view {} primary {} backups {:?}\n", self.epoch, self.primary, self.backups);
        for (node, role) in &self.role {
            let what = match role {
                Role::Primary(p) => format!(
                    "primary of {} executed {} durable {}",
                    p.epoch(),
                    p.executed(),
                    p.durable()
                ),
                Role::Backup(b) => {
                    format!("backup applied {} complete {}", b.applied(), b.complete())
                }
                Role::Takeover(_) => "taking over".into(),
                Role::Crashed => "crashed".into(),
            };
            let m = &self.memory[node];
            out += &format!(
                "  {node}: {what}; follow {:?} committed {} writers {:?}\n",
                m.follow, m.committed, m.writers
            );
        }
        out += &format!(
            "  wire {:?}\n  reads {:?} revokes {:?}\n",
            self.wire.iter().map(|(k, q)| (*k, q.len())).collect::<Vec<_>>(),
            self.reads,
            self.revokes
        );
        out
    }

    pub fn primary_executed(&self) -> u64 {
        match self.role.get(&self.primary) {
            Some(Role::Primary(p)) => p.executed(),
            _ => 0,
        }
    }
}

/// The first violation of linearizability for single-key registers that these checks see:
/// a get that returns a value older than one written before it was invoked, a get that
/// returns a value never written, or two gets in real-time order that see writes in the other
/// order. Values are unique per put.
pub fn check(done: &[Done]) -> Option<String> {
    for key in 0..KEYS {
        let puts: Vec<&Done> = done.iter().filter(|d| d.put && d.key == key).collect();
        let gets: Vec<&Done> = done.iter().filter(|d| !d.put && d.key == key).collect();
        let writer = |g: &Done| -> Result<Option<&Done>, String> {
            match &g.value {
                None => Ok(None),
                Some(v) => puts
                    .iter()
                    .find(|p| p.value.as_ref() == Some(v))
                    .copied()
                    .map(Some)
                    .ok_or_else(|| format!("get {g:?} returned a value no answered put wrote")),
            }
        };
        // `a` strictly before `b` in real time; the initial absence precedes every write.
        let before = |a: Option<&Done>, b: Option<&Done>| match (a, b) {
            (None, Some(_)) => true,
            (Some(a), Some(b)) => a.answered < b.invoked,
            _ => false,
        };
        for g in &gets {
            let w = match writer(g) {
                Ok(w) => w,
                Err(e) => return Some(e),
            };
            if w.is_some_and(|w| g.answered < w.invoked) {
                return Some(format!("get {g:?} read a put invoked after it answered"));
            }
            if let Some(newer) = puts.iter().find(|p| before(w, Some(p)) && p.answered < g.invoked)
            {
                return Some(format!("stale get {g:?}: {newer:?} was answered before it"));
            }
        }
        for g1 in &gets {
            for g2 in gets.iter().filter(|g2| g1.answered < g2.invoked) {
                let (w1, w2) = (writer(g1).ok()?, writer(g2).ok()?);
                if before(w2, w1) || (w1.is_some() && w2.is_none()) {
                    return Some(format!("gets out of order: {g1:?} then {g2:?}"));
                }
            }
        }
    }
    None
}
