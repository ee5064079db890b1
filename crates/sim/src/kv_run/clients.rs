//! Clients of a key-value group under uKharon's views: each issues one operation at a time
//! (the operation mix of [`crate::workload::OpMix`]) to the member it believes is the primary,
//! and the history records what each was told and when ([`crate::history`]), reads answered
//! from a store without a record or entry included.
//!
//! An operation is sent again, with the same sequence number (the store applies it once), when
//! the member says it dropped it (its view changed, its lease ran out, its replica does not
//! lead yet), when it names another primary, when the member's process died, and when no answer
//! came within the group's [`KvGroup::CLIENT_TIMEOUT_NS`] (a stopped process: the request waits
//! in its inbox). Each attempt carries its number, and only the answer of the latest counts.
//! Under leased reads attempts are counted over all the client's operations, so that an answer
//! to an attempt of an earlier operation (given by a process that ran again after the client
//! gave up on it) is never taken for one of the current operation; uKharon-KV's clients count
//! them per operation, as they always did ([`KvGroup::ATTEMPTS_PER_OPERATION`]). An operation
//! still unanswered when the run ends has an unknown outcome.

use super::{KvGroup, Token};
use crate::history::{History, Operation, Outcome};
use crate::workload::OpMix;
use mu_fabric_sim::SimRng;
use mu_kv::{Op, Request};
use mu_ukharon_kv::KvEvent;

/// How long a client waits before it sends an operation that was dropped or went to a member
/// that knows no primary, or to one whose process is down.
const BACKOFF_NS: u64 = 2_000;

/// A client starts an operation in a round with this chance in one, when idle (about every
/// 20 µs at 500 ns rounds).
const START_ONE_IN: u64 = 40;

struct Client {
    id: u64,
    seq: u64,
    /// Attempts sent, over all its operations.
    attempts: u64,
    /// The member it believes is the primary.
    primary: u16,
    waiting: Option<Waiting>,
}

struct Waiting {
    /// The operation's place in the history.
    op: usize,
    request: Request,
    /// The latest attempt, the one whose answer counts.
    attempt: u64,
    /// Where and when the latest attempt went, with the process incarnation; none: it must be
    /// sent (again), not before `not_before_ns`.
    sent: Option<(u16, u64, u64)>,
    not_before_ns: u64,
}

/// The clients and the history they made.
pub struct KvClients {
    clients: Vec<Client>,
    ops: OpMix,
    members: Vec<u16>,
    rng: SimRng,
    pub history: History,
    /// Answers taken since the start.
    pub returned: usize,
}

impl KvClients {
    /// `count` clients on `keys` keys, sending to `members`, drawing from `seed`.
    pub fn new(count: usize, keys: u64, members: Vec<u16>, seed: u64) -> KvClients {
        let first = members[0];
        KvClients {
            clients: (0..count as u64)
                .map(|id| Client { id, seq: 0, attempts: 0, primary: first, waiting: None })
                .collect(),
            ops: OpMix::new(keys),
            members,
            rng: SimRng::new(seed),
            history: History::default(),
            returned: 0,
        }
    }

    pub fn waiting_count(&self) -> usize {
        self.clients.iter().filter(|c| c.waiting.is_some()).count()
    }

    /// Idle clients may start operations (`start_new`); operations due are sent, and those
    /// whose member died or did not answer in time are made due again.
    pub fn send(&mut self, group: &mut impl KvGroup, start_new: bool) {
        let now = group.uk().world.now_ns();
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
            self.send_one(slot, group, now);
        }
    }

    /// Records the invocation of `op` by the client in `slot` (its sequence number already
    /// moved on).
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

    fn send_one<G: KvGroup>(&mut self, slot: usize, group: &mut G, now: u64) {
        let random = self.members[self.rng.below(self.members.len() as u64) as usize];
        let client = &mut self.clients[slot];
        let Some(w) = client.waiting.as_mut() else { return };
        if let Some((to, at, incarnation)) = w.sent {
            let gone = group.incarnation(to) != Some(incarnation);
            if gone || now >= at + G::CLIENT_TIMEOUT_NS {
                w.sent = None;
                client.primary = random;
            }
            return;
        }
        if now < w.not_before_ns {
            return;
        }
        let to = client.primary;
        let Some(incarnation) = group.incarnation(to) else {
            // Its process is down: the client finds out at once (the connection is refused).
            client.primary = random;
            w.not_before_ns = now + BACKOFF_NS;
            return;
        };
        client.attempts += 1;
        w.attempt = if G::ATTEMPTS_PER_OPERATION { w.attempt + 1 } else { client.attempts };
        group.deliver(to, w.request.clone(), (slot, w.attempt));
        w.sent = Some((to, now, incarnation));
    }

    /// What the members told clients this round. A refusal is an error: every request of
    /// the workload fits a record (an entry).
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
