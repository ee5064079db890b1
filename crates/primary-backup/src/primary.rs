//! The primary of a view (ukharon-atc2022 §7.3): it executes each request at once, in order,
//! on its own store (speculatively), writes a record of every request that changes the store
//! into each backup's ring, and answers a request only once every backup holds every record
//! executed before the answer and `Active(view)` still holds; otherwise it drops the request,
//! and the client retries (`docs/protocols/ukharon-kv.md`).

use crate::mutation::Mutation;
use crate::record::{FollowWord, Record, Ring};
use mu_kv::{Op, Reply, Request, Store};
use std::collections::{BTreeMap, VecDeque};

/// A node of the view, by its fabric id.
pub type Node = u16;

/// What the runtime must do for the primary. `T` is the runtime's token for a client request.
#[derive(Debug, PartialEq, Eq)]
pub enum Action<T> {
    /// Write `bytes` at `offset` in backup `to`'s ring, on the one connection to it that keeps
    /// writes in order; report [`Primary::completed`] with `position` once it completes.
    Write {
        to: Node,
        offset: usize,
        position: u64,
        bytes: Vec<u8>,
    },
    /// Write `committed` into backup `to`'s committed word: it frees ring slots that no later
    /// record may come to tell the backup about.
    WriteCommitted {
        to: Node,
        committed: u64,
    },
    /// Read backup `to`'s follow word (the view it follows and what it applied); report
    /// [`Primary::followed`].
    ReadFollow {
        to: Node,
    },
    /// Send `snapshot` (the store after `position`, of which every backup held the records up
    /// to `committed`) to backup `to`, which restores it ([`crate::Backup::install`]); report
    /// [`Primary::installed`] if it did.
    Snapshot {
        to: Node,
        epoch: u64,
        position: u64,
        committed: u64,
        snapshot: Vec<u8>,
    },
    Answer {
        token: T,
        reply: Reply,
    },
    /// Not answered: the client retries (its sequence number makes the retry apply once).
    Drop {
        token: T,
    },
}

/// Why a request is not taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its bytes are longer than a ring slot carries.
    TooLong { bytes: usize, max: usize },
    /// It cannot be encoded (a key or value over its limit).
    Invalid(mu_kv::DecodeError),
}

/// A backup as the primary sees it.
#[derive(Clone, Debug, Default)]
struct Peer {
    /// Its follow word named this view: records may be written to it.
    ready: bool,
    /// What it applied, as last read (it only grows).
    applied: u64,
    /// The highest position written to it (posted).
    sent: u64,
    /// The highest position whose write to it completed: it holds every record up to here.
    completed: u64,
    /// A follow-word read is outstanding.
    reading: bool,
    /// A snapshot is on its way to it.
    installing: bool,
    /// The committed value last written to its committed word.
    committed_told: u64,
}

/// A request executed, waiting for its answer.
struct Waiting<T> {
    /// Every record up to here must be held by every backup first.
    position: u64,
    token: T,
    reply: Reply,
}

/// The primary of view `epoch`.
pub struct Primary<T> {
    epoch: u64,
    ring: Ring,
    store: Store,
    /// The last position executed.
    executed: u64,
    /// The requests of positions `retained_from..=executed`, kept for backups that lag.
    retained: VecDeque<Vec<u8>>,
    retained_from: u64,
    peers: BTreeMap<Node, Peer>,
    waiting: VecDeque<Waiting<T>>,
    /// `Active(view)` was found false at the last check: what waited was dropped.
    stopped: bool,
    actions: Vec<Action<T>>,
    mutation: Mutation,
}

impl<T> Primary<T> {
    /// The primary of view `epoch` whose store holds every record up to `executed`, and keeps
    /// the requests of `retained` (positions `executed - retained.len() + 1..=executed`) for
    /// its `backups`, whose follow words it reads first.
    pub fn new(
        epoch: u64,
        ring: Ring,
        store: Store,
        executed: u64,
        retained: VecDeque<Vec<u8>>,
        backups: &[Node],
    ) -> Primary<T> {
        assert!(retained.len() as u64 <= executed, "more records retained than executed");
        let mut p = Primary {
            epoch,
            ring,
            store,
            executed,
            retained_from: executed + 1 - retained.len() as u64,
            retained,
            peers: backups.iter().map(|&b| (b, Peer::default())).collect(),
            waiting: VecDeque::new(),
            stopped: false,
            actions: Vec::new(),
            mutation: Mutation::None,
        };
        for &b in backups {
            p.read_follow(b);
        }
        p
    }

    /// Breaks the engine on purpose (tests and the simulator only).
    pub fn set_mutation(&mut self, mutation: Mutation) {
        self.mutation = mutation;
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Every backup holds every record up to here.
    pub fn durable(&self) -> u64 {
        self.peers.values().map(|p| if p.ready { p.completed } else { 0 }).min().unwrap_or(u64::MAX)
    }

    pub fn executed(&self) -> u64 {
        self.executed
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Whether `Active(view)` was found false at the last check (requests that waited then were
    /// dropped). A lease that lapsed may be renewed while the view is the latest, and
    /// answering again is safe: each answer is still checked under `Active`.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    pub fn drain_actions(&mut self) -> std::vec::Drain<'_, Action<T>> {
        self.actions.drain(..)
    }

    /// A client's request. A get is read at once, from a store that may hold records not yet
    /// held by every backup, so its answer waits as a put's does (`docs/protocols/ukharon-kv.md`,
    /// item 1). `active` is `Active(view)` taken before the request is looked at.
    /// A request refused is not executed, and its token comes back with the refusal.
    pub fn request(
        &mut self,
        request: &Request,
        token: T,
        active: bool,
    ) -> Result<(), (Refusal, T)> {
        let active = active || self.mutation == Mutation::AnswerWithoutActive;
        self.stopped = !active;
        if !active {
            self.stop();
            self.actions.push(Action::Drop { token });
            return Ok(());
        }
        let (reply, position) = match &request.op {
            Op::Get { key } => {
                let value = Reply::Value(self.store.get(key).map(<[u8]>::to_vec));
                match self.mutation {
                    Mutation::GetFromSpeculativeState => (value, 0),
                    _ => (value, self.executed),
                }
            }
            _ => {
                let reply = match self.execute(request) {
                    Ok(reply) => reply,
                    Err(refusal) => return Err((refusal, token)),
                };
                match self.mutation {
                    Mutation::AnswerBeforeComplete => (reply, 0),
                    _ => (reply, self.executed),
                }
            }
        };
        self.waiting.push_back(Waiting { position, token, reply });
        Ok(())
    }

    /// Applies a request that may change the store and records it. A retry of the client's
    /// last request is answered from the store's session, with no new record: its answer
    /// still waits for every record executed so far, the original among them.
    fn execute(&mut self, request: &Request) -> Result<Reply, Refusal> {
        if self.store.reply(request.client, request.seq).is_some() {
            return Ok(self.store.apply(request));
        }
        let bytes = request.encode().map_err(Refusal::Invalid)?;
        let max = self.ring.request_bytes_max();
        if bytes.len() > max {
            return Err(Refusal::TooLong { bytes: bytes.len(), max });
        }
        let reply = self.store.apply(request);
        if matches!(reply, Reply::Stale { .. }) {
            return Ok(reply); // nothing changed: an older request of a client that moved on
        }
        self.executed += 1;
        self.retained.push_back(bytes);
        let peers: Vec<Node> = self.peers.keys().copied().collect();
        for to in peers {
            self.send(to);
        }
        Ok(reply)
    }

    /// Writes to backup `to` what it lacks, as far as its ring has room.
    fn send(&mut self, to: Node) {
        let durable = self.durable().min(self.executed);
        let peer = self.peers.get_mut(&to).expect("a backup of the view");
        if !peer.ready || peer.installing {
            return;
        }
        while peer.sent < self.executed {
            let position = peer.sent + 1;
            // Slot of `position` last held `position - slots_count`, which must be applied.
            if position > peer.applied + self.ring.slots_count {
                if durable > peer.committed_told {
                    peer.committed_told = durable;
                    self.actions.push(Action::WriteCommitted { to, committed: durable });
                }
                if !peer.reading {
                    peer.reading = true;
                    self.actions.push(Action::ReadFollow { to });
                }
                return;
            }
            let request = self.retained[(position - self.retained_from) as usize].clone();
            let record = Record { position, committed: durable, epoch: self.epoch, request };
            let offset = self.ring.offset(position);
            self.actions.push(Action::Write { to, offset, position, bytes: record.encode() });
            peer.sent = position;
        }
    }

    fn read_follow(&mut self, to: Node) {
        let peer = self.peers.get_mut(&to).expect("a backup of the view");
        if !peer.reading {
            peer.reading = true;
            self.actions.push(Action::ReadFollow { to });
        }
    }

    /// The write of record `position` to backup `to` completed (writes to one backup
    /// complete in order).
    pub fn completed(&mut self, to: Node, position: u64) {
        if let Some(peer) = self.peers.get_mut(&to) {
            assert!(position <= peer.sent, "a completion for a record never sent");
            peer.completed = peer.completed.max(position);
        }
    }

    /// A later view keeps this node primary with `backups` (item 5 of the design): nothing
    /// is answered until every backup of the new view holds every record executed, so each
    /// backup's follow word is read again and what it lacks is sent again. Requests waiting
    /// for an answer are dropped (their clients retry; a retry waits for the records too).
    /// Completions of writes posted before the call must not be reported after it.
    pub fn next_view(&mut self, epoch: u64, backups: &[Node]) {
        assert!(epoch > self.epoch, "views come in order");
        self.stop();
        self.epoch = epoch;
        self.stopped = false;
        self.peers = backups.iter().map(|&b| (b, Peer::default())).collect();
        for &b in backups {
            self.read_follow(b);
        }
    }

    /// The connection to backup `to` broke (a write or read on it failed): what is in flight
    /// on it may not have landed, so its follow word is read again and what it lacks sent
    /// again. Completions of operations posted before the call must not be reported after it.
    pub fn reset_peer(&mut self, to: Node) {
        if let Some(peer) = self.peers.get_mut(&to) {
            *peer = Peer::default();
            self.read_follow(to);
        }
    }

    /// Backup `to`'s follow word.
    pub fn followed(&mut self, to: Node, word: FollowWord) {
        let FollowWord { epoch, applied, whole } = word;
        let Some(peer) = self.peers.get_mut(&to) else { return };
        peer.reading = false;
        if epoch != self.epoch {
            // It has not yet revoked the old primary's access and dropped what it did not
            // apply: nothing may be written to it before. Read again.
            self.read_follow(to);
            return;
        }
        peer.applied = peer.applied.max(applied);
        if !peer.ready {
            peer.ready = true;
            // What it applied it holds; everything after is (re)sent from here.
            (peer.sent, peer.completed) = (peer.applied, peer.applied);
            // A state that may hold records this primary never had, or that lacks records it
            // no longer keeps, is replaced whole.
            if !whole || peer.applied + 1 < self.retained_from || peer.applied > self.executed {
                self.install(to);
                return;
            }
        }
        self.trim_retained();
        self.send(to);
    }

    /// Backup `to` lacks records no longer retained (or holds a state this primary never
    /// had): it gets the store as it is now, then the records after it.
    fn install(&mut self, to: Node) {
        let peer = self.peers.get_mut(&to).expect("a backup of the view");
        peer.installing = true;
        let mut snapshot = Vec::new();
        self.store.snapshot(&mut snapshot);
        let (epoch, position) = (self.epoch, self.executed);
        let committed = self.durable().min(position);
        self.actions.push(Action::Snapshot { to, epoch, position, committed, snapshot });
    }

    /// Backup `to` restored the snapshot of `position`.
    pub fn installed(&mut self, to: Node, position: u64) {
        let Some(peer) = self.peers.get_mut(&to) else { return };
        peer.installing = false;
        (peer.applied, peer.sent, peer.completed) = (position, position, position);
        self.send(to);
    }

    /// Tells every backup what every backup holds, for a backup to apply the last records
    /// when no later record comes to tell it (the runtime calls this when idle).
    pub fn flush_committed(&mut self) {
        let durable = self.durable().min(self.executed);
        for (&to, peer) in &mut self.peers {
            if peer.ready && durable > peer.committed_told {
                peer.committed_told = durable;
                self.actions.push(Action::WriteCommitted { to, committed: durable });
            }
        }
    }

    /// Frees the requests every backup applied.
    fn trim_retained(&mut self) {
        let floor = self.peers.values().map(|p| if p.ready { p.applied } else { 0 }).min();
        let floor = floor.unwrap_or(self.executed);
        while self.retained_from <= floor && !self.retained.is_empty() {
            self.retained.pop_front();
            self.retained_from += 1;
        }
    }

    /// Answers the requests whose records every backup holds, with `active` being
    /// `Active(view)` taken after the completions were reported; if it is false, drops every
    /// waiting request and stops (§7.3: "Otherwise, P drops the request").
    pub fn release(&mut self, active: bool) {
        if !active && self.mutation != Mutation::AnswerWithoutActive {
            self.stop();
            return;
        }
        // Waiting requests are in execution order, and so in position order, except those
        // a broken engine lets through at once.
        let durable = self.durable();
        let (ready, wait): (VecDeque<_>, VecDeque<_>) =
            self.waiting.drain(..).partition(|w| w.position <= durable);
        self.waiting = wait;
        for w in ready {
            self.actions.push(Action::Answer { token: w.token, reply: w.reply });
        }
    }

    fn stop(&mut self) {
        self.stopped = true;
        for w in self.waiting.drain(..) {
            self.actions.push(Action::Drop { token: w.token });
        }
    }
}
