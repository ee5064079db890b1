//! The permission manager (Mu paper §5.2): at most one leader at a time may write a replica's
//! log.
//!
//! Would-be leaders write a request word into each replica's request array, one word per replica
//! position. The permission manager of that replica handles the requests one at a time in order
//! of requester id: it revokes write access from the current holder, grants it to the requester
//! and acknowledges. This engine only plans those steps ([`PermStep`]); the runtime executes them
//! on the fabric (the fast flag change and, when that fails, the slow connection cycle, are the
//! runtime's business) and reports back with [`PermissionManager::done`].

use crate::{PositionSet, ReplicaSet};
use mu_fabric::NodeId;

/// Set in an acknowledgement (which otherwise repeats the request word) by a permission manager
/// whose replica is recovering: see [`crate::Grant::Recovering`]. Sequence numbers stay below it.
pub const ACK_RECOVERING: u64 = 1 << 31;

/// The largest sequence number of a request word.
pub const REQUEST_SEQ_MAX: u32 = (ACK_RECOVERING - 1) as u32;

/// A request word: the requester's incarnation in the high half, a sequence number it bumps for
/// every new request in the low half (at most [`REQUEST_SEQ_MAX`]). 0 means "no request", so the
/// pair (0, 0) is not a request: requesters number their requests from 1.
pub fn request_word(incarnation: u32, seq: u32) -> u64 {
    assert!(
        incarnation != 0 || seq != 0,
        "request (incarnation 0, seq 0) would read as no request"
    );
    assert!(seq <= REQUEST_SEQ_MAX, "request sequence number {seq} has the recovering bit");
    (u64::from(incarnation) << 32) | u64::from(seq)
}

/// The (incarnation, seq) of a request word.
pub fn split_request(word: u64) -> (u32, u32) {
    ((word >> 32) as u32, word as u32)
}

/// One step of a permission change, for the runtime to execute in the order given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PermStep {
    /// Take write access to our log away from `peer` (a remote leader).
    Revoke { peer: NodeId },
    /// Take write access away from our own replication thread (our own log guard).
    RevokeOwn,
    /// Give `peer` write access; `rebind` when the request comes from a different incarnation of
    /// the peer than the one our side of its connection is bound to, or when we do not know which
    /// one that is (before the first grant to the peer, and after [`PermissionManager::forget`]):
    /// the runtime must reconnect the connection fully rather than change flags.
    Grant { peer: NodeId, incarnation: u32, rebind: bool },
    /// Give our own replication thread write access to our own log.
    GrantOwn,
    /// Acknowledge to `peer` by writing `word` into its ack array at our position. An ack to
    /// ourselves is stored locally.
    Ack { peer: NodeId, word: u64 },
}

/// The plan handed out by [`PermissionManager::next`] and not yet reported done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    pos: usize,
    word: u64,
    incarnation: u32,
}

/// Plans permission changes for our log, one request at a time in order of requester id.
///
/// Initially no one may write our log: the runtime starts with every connection's write access
/// off and our own log guard closed, and our own replication thread asks like any other leader.
///
/// The engine tracks who may write our log. Normally that is the holder alone; after a plan
/// failed it also counts the failed requester (its grant may have half happened), and every
/// later plan revokes all of them but its own requester before granting. That keeps the
/// invariant of §5.2 — one writer at a time — whatever part of a failed plan took effect.
#[derive(Clone, Debug)]
pub struct PermissionManager {
    me_pos: usize,
    ids: Vec<NodeId>,
    /// The replica granted by the last successful plan, while it still has our log.
    holder: Option<usize>,
    /// Who may write our log, by position: the holder, and requesters whose plan failed since.
    may_write: PositionSet,
    /// The incarnation our side of each peer's connection is bound to, when we know it.
    bound: Vec<Option<u32>>,
    /// The last request word handled (served or dropped), per requester position (0: none
    /// yet).
    handled: Vec<u64>,
    plan: Option<Plan>,
}

impl PermissionManager {
    pub fn new(me: NodeId, replicas: &ReplicaSet) -> Result<PermissionManager, String> {
        let me_pos = replicas
            .position(me)
            .ok_or_else(|| format!("replica {me} is not in the replica set"))?;
        let n = replicas.len();
        Ok(PermissionManager {
            me_pos,
            ids: replicas.ids().to_vec(),
            holder: None,
            may_write: PositionSet::EMPTY,
            bound: vec![None; n],
            handled: vec![0; n],
            plan: None,
        })
    }

    /// The current holder of write access to our log, if any.
    pub fn holder(&self) -> Option<NodeId> {
        self.holder.map(|pos| self.ids[pos])
    }

    /// Looks at the request array (`requests[pos]` is the word from the replica at position `pos`
    /// of the set) and plans the lowest-id pending request into `out` (cleared first): revoke
    /// whoever else may write our log, grant the requester, ack. Returns the requester, or `None`
    /// if nothing is pending. The plan is not applied until [`PermissionManager::done`] is called,
    /// and there is one plan at a time: call `done` before asking for the next.
    ///
    /// A request is pending when its word is not 0 and differs from the last word handled for
    /// that requester; a requester that asks again writes a new word (a higher seq). Pending
    /// requests are taken in id order.
    ///
    /// # Panics
    ///
    /// If a plan is still running, or if `requests` does not hold exactly one word per replica of
    /// the set: the request array is laid out by position, so a wrong length is a runtime bug.
    pub fn next(&mut self, requests: &[u64], out: &mut Vec<PermStep>) -> Option<NodeId> {
        if let Some(plan) = self.plan {
            panic!(
                "the permission plan for {} is still running: report it with done() before \
                 planning the next",
                self.ids[plan.pos]
            );
        }
        assert_eq!(
            requests.len(),
            self.ids.len(),
            "the request array holds one word per replica of the set"
        );
        out.clear();
        let n = self.ids.len();
        let pos = (0..n).find(|&pos| requests[pos] != 0 && requests[pos] != self.handled[pos])?;
        let word = requests[pos];
        let (incarnation, _) = split_request(word);
        let rebind = pos != self.me_pos && self.bound[pos] != Some(incarnation);
        for other in 0..n {
            // A requester keeps its access across a re-request; an old incarnation of it does not.
            let mutated = crate::mutation::active(crate::mutation::Mutation::SkipRevoke);
            if self.may_write.contains(other) && (other != pos || rebind) && !mutated {
                out.push(self.revoke(other));
            }
        }
        let peer = self.ids[pos];
        out.push(if pos == self.me_pos {
            PermStep::GrantOwn
        } else {
            PermStep::Grant { peer, incarnation, rebind }
        });
        out.push(PermStep::Ack { peer, word });
        self.plan = Some(Plan { pos, word, incarnation });
        Some(peer)
    }

    /// The runtime executed the plan for `requester`.
    ///
    /// * `ok`: every step succeeded. The requester becomes the holder and the only replica that
    ///   may write our log, the incarnation it asked from is recorded as bound, and its request
    ///   word is handled.
    /// * `!ok`: some step failed (a revoke could not fence its peer, a grant or the ack could not
    ///   be done) and the engine does not know which. The holder stays as it was, since its revoke
    ///   may have failed and it may still write; the requester is counted as a possible writer too,
    ///   since its grant may have taken effect, so every later plan for someone else revokes it.
    ///   The request is dropped: a requester that is alive asks again (with a new word) when it
    ///   has not heard back in time. Retrying it here instead would let a dead requester, whose
    ///   grant can never succeed, take our own write access away again and again (a plan revokes
    ///   the holder before it finds that the grant fails): the live leader would abort for ever.
    ///
    /// # Panics
    ///
    /// If `requester` is not the requester of the plan in flight.
    pub fn done(&mut self, requester: NodeId, ok: bool) {
        let plan = match self.plan.take() {
            Some(plan) if self.ids[plan.pos] == requester => plan,
            Some(plan) => panic!(
                "done({requester}) but the permission plan in flight is for {}",
                self.ids[plan.pos]
            ),
            None => panic!("done({requester}) but no permission plan is in flight"),
        };
        if ok {
            self.may_write = PositionSet::single(plan.pos);
            self.holder = Some(plan.pos);
            if plan.pos != self.me_pos {
                self.bound[plan.pos] = Some(plan.incarnation);
            }
        } else {
            self.may_write.insert(plan.pos);
        }
        self.handled[plan.pos] = plan.word;
        assert!(self.holder.is_none_or(|pos| self.may_write.contains(pos)), "the holder may write");
        assert!(!ok || self.may_write.count() == 1, "one writer");
    }

    /// `peer` was found to have restarted or died, and the runtime broke or reconnected its
    /// connection: through it, no incarnation of `peer` can write our log any more. If it held
    /// our log it no longer does (its new incarnation must ask again), and its bound incarnation
    /// is forgotten, so its next grant rebinds. A pending request of `peer` stays pending. Ids
    /// outside the set and ourselves are ignored.
    pub fn forget(&mut self, peer: NodeId) {
        let Some(pos) = self.ids.binary_search(&peer).ok().filter(|&pos| pos != self.me_pos) else {
            return;
        };
        if self.holder == Some(pos) {
            self.holder = None;
        }
        self.may_write.remove(pos);
        self.bound[pos] = None;
    }

    fn revoke(&self, pos: usize) -> PermStep {
        if pos == self.me_pos {
            PermStep::RevokeOwn
        } else {
            PermStep::Revoke { peer: self.ids[pos] }
        }
    }
}
