//! Clients of the replicated store under leased reads: each issues one operation at a time (the
//! operation mix of [`crate::workload::OpMix`]) to the member it believes is the appointed
//! primary, and the history records what each was told and when ([`crate::history`]), local
//! reads included.
//!
//! An operation is sent again, with the same sequence number (the store applies it once), when
//! the member dropped it (rule 2 failed, or its replica does not lead yet), when it names
//! another primary, when the member's process died, and when no answer came within
//! [`TIMEOUT_NS`]: longer than a local read's longest stall, so that the answer of a member
//! stopped between a read's two checks still counts. Only the latest attempt's answer counts.
//! An operation still unanswered when the run ends has an unknown outcome.

use super::cluster::{LeaseCluster, Token};
use crate::history::{History, Operation, Outcome};
use crate::workload::OpMix;
use mu_fabric_sim::SimRng;
use mu_kv::{Op, Request};
use mu_ukharon_kv::KvEvent;

/// How long a client waits for an answer before it asks elsewhere.
pub const TIMEOUT_NS: u64 = 500_000;

/// How long a client waits before it sends an operation that was dropped.
const BACKOFF_NS: u64 = 2_000;

/// A client starts an operation in a round with this chance in one, when idle.
const START_ONE_IN: u64 = 40;

struct Client {
    id: u64,
    seq: u64,
    /// Attempts sent, over all its operations: an answer to an attempt of an earlier
    /// operation (a local read that stalled past the client's timeout) is never taken for
    /// one of the current operation.
    attempts: u64,
    primary: u16,
    waiting: Option<Waiting>,
}

struct Waiting {
    op: usize,
    request: Request,
    /// The latest attempt (the client's count), the one whose answer counts.
    attempt: u64,
    /// Where and when the latest attempt went, with the process incarnation; none: it must be
    /// sent (again), not before `not_before_ns`.
    sent: Option<(u16, u64, u64)>,
    not_before_ns: u64,
}

/// The clients and the history they made.
pub struct LeaseClients {
    clients: Vec<Client>,
    ops: OpMix,
    members: Vec<u16>,
    rng: SimRng,
    pub history: History,
    pub returned: usize,
}

impl LeaseClients {
    pub fn new(count: usize, keys: u64, members: Vec<u16>, seed: u64) -> LeaseClients {
        let first = members[0];
        LeaseClients {
            clients: (0..count as u64)
                .map(|id| Client { id, seq: 0, attempts: 0, primary: first, waiting: None })
                .collect(),
            ops: OpMix::new(keys),
            members,
            rng: SimRng::new(seed ^ 0x6c65_6173_6563_6c69),
            history: History::default(),
            returned: 0,
        }
    }

    pub fn waiting_count(&self) -> usize {
        self.clients.iter().filter(|c| c.waiting.is_some()).count()
    }

    /// Idle clients may start operations (`start_new`); operations due are sent, and those
    /// whose member died or did not answer in time are made due again.
    pub fn send(&mut self, cluster: &mut LeaseCluster, start_new: bool) {
        let now = cluster.uk.world.now_ns();
        for slot in 0..self.clients.len() {
            if self.clients[slot].waiting.is_none() {
                if !start_new || self.rng.below(START_ONE_IN) != 0 {
                    continue;
                }
                let client = &mut self.clients[slot];
                client.seq += 1;
                let op = self.ops.next(client.id, client.seq, &mut self.rng);
                self.start(slot, op, now);
            }
            self.send_one(slot, cluster, now);
        }
    }

    fn start(&mut self, slot: usize, op: Op, now: u64) {
        let client = &mut self.clients[slot];
        let request = Request { client: client.id, seq: client.seq, op };
        self.history.operations.push(Operation {
            client: client.id,
            op: request.op.clone(),
            invoke_ns: now,
            outcome: Outcome::Unknown,
        });
        let op = self.history.operations.len() - 1;
        client.waiting = Some(Waiting { op, request, attempt: 0, sent: None, not_before_ns: now });
    }

    fn send_one(&mut self, slot: usize, cluster: &mut LeaseCluster, now: u64) {
        let random = self.members[self.rng.below(self.members.len() as u64) as usize];
        let client = &mut self.clients[slot];
        let Some(w) = client.waiting.as_mut() else { return };
        if let Some((to, at, incarnation)) = w.sent {
            let member = &cluster.members[&to];
            let gone = member.replica.is_none() || member.incarnation != incarnation;
            if gone || now >= at + TIMEOUT_NS {
                w.sent = None;
                client.primary = random;
            }
            return;
        }
        if now < w.not_before_ns {
            return;
        }
        let member = cluster.members.get_mut(&client.primary).expect("clients send to members");
        if member.replica.is_none() {
            // Its process is down: the client finds out at once (the connection is refused).
            client.primary = random;
            w.not_before_ns = now + BACKOFF_NS;
            return;
        }
        client.attempts += 1;
        w.attempt = client.attempts;
        member.server.inbox.push((w.request.clone(), (slot, w.attempt)));
        w.sent = Some((client.primary, now, member.incarnation));
    }

    /// What the members told clients this round. A refusal is an error: every request of the
    /// workload fits an entry.
    pub fn take(&mut self, events: Vec<(u16, KvEvent<Token>)>, now: u64) -> Result<(), String> {
        for (member, event) in events {
            let (slot, attempt) = match &event {
                KvEvent::Answer { token, .. }
                | KvEvent::Drop { token }
                | KvEvent::NotPrimary { token, .. }
                | KvEvent::Refused { token, .. } => *token,
            };
            if let KvEvent::Refused { why, .. } = &event {
                return Err(format!("member {member} refused a request of slot {slot}: {why}"));
            }
            let client = &mut self.clients[slot];
            let Some(w) = client.waiting.as_mut().filter(|w| w.attempt == attempt) else {
                continue; // an earlier attempt's: no one waits for it any more
            };
            match event {
                KvEvent::Answer { reply, .. } => {
                    self.history.operations[w.op].outcome = Outcome::Returned { at_ns: now, reply };
                    client.waiting = None;
                    self.returned += 1;
                }
                KvEvent::Drop { .. } => {
                    w.sent = None;
                    w.not_before_ns = now + BACKOFF_NS;
                }
                KvEvent::NotPrimary { primary, .. } => {
                    w.sent = None;
                    match primary {
                        Some(p) => client.primary = p,
                        None => w.not_before_ns = now + BACKOFF_NS,
                    }
                }
                KvEvent::Refused { .. } => unreachable!("returned above"),
            }
        }
        Ok(())
    }

    /// A new client per key reads it: the final reads after the liveness phase. Their places
    /// in the history.
    pub fn final_reads(&mut self, now: u64) -> Vec<usize> {
        let keys: Vec<Vec<u8>> = self.ops.keys().collect();
        let mut places = Vec::new();
        for key in keys {
            let id = self.clients.iter().map(|c| c.id).max().map_or(0, |m| m + 1);
            let primary = self.clients.first().map_or(self.members[0], |c| c.primary);
            self.clients.push(Client { id, seq: 1, attempts: 0, primary, waiting: None });
            let slot = self.clients.len() - 1;
            self.start(slot, Op::Get { key }, now);
            places.push(self.history.operations.len() - 1);
        }
        places
    }
}
