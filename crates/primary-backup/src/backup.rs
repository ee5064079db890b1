//! A backup (ukharon-atc2022 §7.3): it applies the records its primary wrote into its ring up to
//! what every backup is known to hold, and on a view that makes it primary it takes the old
//! primary's write access away, applies every record it holds, and becomes the primary
//! (`docs/protocols/ukharon-kv.md`, items 2 to 4).

use crate::mutation::Mutation;
use crate::primary::{Node, Primary};
use crate::record::{FollowWord, Ring};
use mu_kv::{Request, Store};
use std::collections::VecDeque;

/// What the runtime must do for a backup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackupAction {
    /// Take away `node`'s right to write into this node's ring and committed word; report
    /// [`Backup::revoked`] (or [`Takeover::revoked`]) once no write of it can land any more.
    Revoke { node: Node },
    /// Publish the follow word in this node's memory, where the primary reads it.
    Publish(FollowWord),
}

/// Why a backup cannot become the primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TakeoverError {
    /// It never held a whole state (it joined, and its snapshot did not arrive): it would lose
    /// answered writes. Another member must be named primary.
    Incomplete,
}

impl std::fmt::Display for TakeoverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TakeoverError::Incomplete => write!(
                f,
                "this backup never held a whole state (its snapshot did not arrive), so it \
                 cannot become the primary without losing answered writes"
            ),
        }
    }
}

/// A backup of the primary of view `epoch`.
pub struct Backup {
    ring: Ring,
    store: Store,
    /// Every record up to here is applied.
    applied: u64,
    /// The view whose primary's records it takes.
    epoch: u64,
    primary: Option<Node>,
    /// The old primary's access is being taken away: nothing is read from the ring until it is.
    revoking: bool,
    /// It holds a whole state: it started with the group's first view, or restored a snapshot.
    complete: bool,
    /// The highest `committed` it has seen: every position up to it is the same at every node.
    committed_known: u64,
    actions: Vec<BackupAction>,
    mutation: Mutation,
}

impl Backup {
    /// A member of the group's first view (`complete`, with an empty store) or one that joins
    /// later (not complete until a snapshot is installed).
    pub fn new(ring: Ring, first_view: bool) -> Backup {
        Backup {
            ring,
            store: Store::new(),
            applied: 0,
            epoch: 0,
            primary: None,
            revoking: false,
            complete: first_view,
            committed_known: 0,
            actions: Vec::new(),
            mutation: Mutation::None,
        }
    }

    /// Breaks the engine on purpose (tests and the simulator only).
    pub fn set_mutation(&mut self, mutation: Mutation) {
        self.mutation = mutation;
    }

    pub fn applied(&self) -> u64 {
        self.applied
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Whether it holds a whole state and so may become the primary.
    pub fn complete(&self) -> bool {
        self.complete
    }

    pub fn drain_actions(&mut self) -> std::vec::Drain<'_, BackupAction> {
        self.actions.drain(..)
    }

    /// View `epoch` names `primary`, and this node a backup. A new primary first loses the old
    /// one's write access, so that none of its late writes lands in the ring (item 2); then the
    /// follow word tells the new primary from where to send.
    pub fn follow(&mut self, epoch: u64, primary: Node) {
        assert!(epoch > self.epoch, "views are followed in order");
        self.epoch = epoch;
        match self.primary.replace(primary) {
            Some(old) if old != primary => {
                self.actions.push(BackupAction::Revoke { node: old });
                if self.mutation == Mutation::FollowBeforeRevoke {
                    self.publish();
                    return;
                }
                self.revoking = true;
            }
            _ => self.publish(),
        }
    }

    /// The old primary's access is gone.
    pub fn revoked(&mut self) {
        if std::mem::take(&mut self.revoking) {
            self.publish();
        }
    }

    fn publish(&mut self) {
        // A fresh backup says it is not whole, so that the primary sends it a snapshot: records
        // replayed from position 1 would bring it up too, but it could not tell when it held
        // every write answered before it joined, and so whether it may become the primary.
        let whole = self.complete && self.applied <= self.committed_known;
        let word = FollowWord { epoch: self.epoch, applied: self.applied, whole };
        self.actions.push(BackupAction::Publish(word));
    }

    /// Restores the snapshot of `position` that the primary of view `epoch` sent, of which
    /// every backup held the records up to `committed`; the records after it follow. A snapshot
    /// of another view, or one that arrives while the old primary's access is being taken away,
    /// is a late one of an old primary and is not restored: `Ok(false)`.
    pub fn install(
        &mut self,
        snapshot: &[u8],
        epoch: u64,
        position: u64,
        committed: u64,
    ) -> Result<bool, mu_kv::RestoreError> {
        if epoch != self.epoch || self.revoking {
            return Ok(false);
        }
        self.store = Store::restore(snapshot)?;
        self.applied = position;
        self.committed_known = self.committed_known.max(committed);
        self.complete = true;
        self.publish();
        Ok(true)
    }

    /// Applies the records found in `ring` after the last applied, up to what every backup is
    /// known to hold: the highest `committed` among them and `committed_word`. A position at
    /// or below a `committed` ever written holds the same request at every node that holds it
    /// (every backup of that view held it, the next primary among them), so whichever primary
    /// wrote the record found there, it is the one to apply.
    pub fn scan(&mut self, ring: &[u8], committed_word: u64) {
        if self.revoking || self.primary.is_none() {
            return;
        }
        let (records, bound) = self.contiguous(ring);
        self.committed_known = self.committed_known.max(bound).max(committed_word);
        // What was committed may lie below what was applied (an older committed word).
        let upto =
            bound.max(committed_word).clamp(self.applied, self.applied + records.len() as u64);
        let before = self.applied;
        for request in records.iter().take((upto - before) as usize) {
            self.apply(request);
        }
        if self.applied > before {
            self.publish();
        }
    }

    /// The requests of the records from the last applied on, as far as they follow one another,
    /// and the highest `committed` they carry. Records of an older view past what the new
    /// primary has sent again may be among them: none was answered (an answer needs every
    /// backup, the next primary among them, to hold it), so applying one at a takeover is the
    /// late effect of a request still pending, which apply-once and a client's one request at
    /// a time make harmless (`docs/protocols/ukharon-kv.md`, item 4).
    fn contiguous(&self, ring: &[u8]) -> (Vec<Vec<u8>>, u64) {
        let mut records = Vec::new();
        let mut bound = 0;
        let mut position = self.applied + 1;
        while position <= self.applied + self.ring.slots_count {
            match self.ring.read(ring, position) {
                // A record of a view not yet followed cannot be there (its primary writes only
                // once the follow word names its view): stop at it rather than trust it.
                Ok(r) if r.epoch <= self.epoch => {
                    bound = bound.max(r.committed);
                    records.push(r.request);
                }
                _ => break,
            }
            position += 1;
        }
        (records, bound)
    }

    fn apply(&mut self, bytes: &[u8]) {
        // The primary encoded it and the checksum matched: anything else is a bug of ours.
        let request = Request::decode(bytes).expect("a record holds a request");
        self.store.apply(&request);
        self.applied += 1;
    }

    /// View `epoch` names this node the primary; `old_primary` is the previous view's. The
    /// ring is not read before the old primary's access is gone ([`Takeover::revoked`]).
    pub fn take_over(self, epoch: u64, old_primary: Option<Node>) -> Takeover {
        let pending = old_primary.map(|node| BackupAction::Revoke { node }).into_iter().collect();
        Takeover { backup: self, epoch, pending }
    }
}

/// A backup on its way to being the primary of view `epoch`.
pub struct Takeover {
    backup: Backup,
    epoch: u64,
    pending: Vec<BackupAction>,
}

impl Takeover {
    /// What the runtime must do first: revoke the old primary (none if there was none).
    pub fn actions(&mut self) -> Vec<BackupAction> {
        std::mem::take(&mut self.pending)
    }

    /// The old primary's access is gone: every record it holds after what it applied is applied
    /// (committed or not: whether the old primary answered one cannot be known), and the node
    /// becomes the primary of `backups`, keeping what its ring still holds for them.
    pub fn revoked<T>(self, ring: &[u8], backups: &[Node]) -> Result<Primary<T>, TakeoverError> {
        let mut b = self.backup;
        if !b.complete {
            return Err(TakeoverError::Incomplete);
        }
        let mut retained = earlier_records(&b, ring);
        if b.primary.is_some() && b.mutation != Mutation::ServeBeforeScan {
            let (records, _) = b.contiguous(ring);
            for request in records {
                b.apply(&request);
                retained.push_back(request);
            }
        }
        let mutation = b.mutation;
        let mut primary = Primary::new(self.epoch, b.ring, b.store, b.applied, retained, backups);
        primary.set_mutation(mutation);
        Ok(primary)
    }
}

/// The records before the last applied that the ring still holds, contiguous up to it, for
/// backups that applied less (their contents are the same at every node: each was held by
/// every backup of its view).
fn earlier_records(b: &Backup, ring: &[u8]) -> VecDeque<Vec<u8>> {
    let mut earlier = VecDeque::new();
    let mut position = b.applied;
    while position > 0 && position + b.ring.slots_count > b.applied + 1 {
        match b.ring.read(ring, position) {
            Ok(r) => earlier.push_front(r.request),
            Err(_) => break,
        }
        position -= 1;
    }
    earlier
}
