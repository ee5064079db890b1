//! Clients of the replicated key-value store: each issues one operation at a time (get, put,
//! delete, compare-and-set on a few keys, so that they contend) to the replica some replica
//! believes leads, and the history records what each was told and when.
//!
//! A client's request is proposed at a replica; once the proposal is acknowledged at index `i`,
//! the client's reply is what that replica's store answered when it applied the request. A
//! proposal that fails after it was handed over (aborted, or the replica crashed) may still be
//! committed by the next leader, so the client retries the same request — same client id, same
//! sequence number — until a leader acknowledges it; the store applies it once, and the retry's
//! reply is the first application's. An operation still unanswered when the run ends has an
//! unknown outcome. A new request refused on the spot ("not leader", "busy") cannot take effect
//! and is left out of the history; so is one whose only attempt failed with an error that says
//! it never takes effect ([`mu_replica::ProposeError::never_applied`]: "not leader" after it was handed
//! over, "log full"). Its client moves on to its next request, and the cluster records it as
//! refused: the validity checker fails the run if any replica applies it.

use crate::cluster::SimCluster;
use crate::history::{History, Operation, Outcome};
use mu_fabric_sim::SimRng;
use mu_kv::{Op, Request};

/// The client population and the history it has made so far.
pub struct Workload {
    clients: Vec<Client>,
    next_client_id: u64,
    ops: OpMix,
    /// The operations handed to each replica (by position) and not yet answered: which client
    /// slots, and the boot of the replica's process they were handed to.
    groups: Vec<Option<Group>>,
    pub history: History,
    /// Operations (places in the history) refused for good: left out of it at the end.
    refused_ops: Vec<usize>,
    /// The replica (position) that answered the latest answer, and when.
    pub last_answer: Option<(usize, u64)>,
}

struct Group {
    boot: u32,
    slots: Vec<usize>,
}

struct Client {
    id: u64,
    seq: u64,
    waiting: Option<Waiting>,
}

struct Waiting {
    /// The operation's place in the history.
    op: usize,
    /// The request as proposed, for retries.
    request: Vec<u8>,
    /// Where it was last handed (None: it must be handed again, its last attempt failed).
    at: Option<(usize, u32)>,
    /// Acknowledged: the reply is read once the replica applied it.
    acked: bool,
    /// An attempt ended without saying the request never takes effect (aborted, or its
    /// replica died): it may, so it is retried until acknowledged.
    uncertain: bool,
}

impl Workload {
    pub fn new(clients_count: usize, keys_count: u64, replicas_count: usize) -> Workload {
        Workload {
            clients: (0..clients_count)
                .map(|i| Client { id: i as u64, seq: 0, waiting: None })
                .collect(),
            next_client_id: clients_count as u64,
            ops: OpMix::new(keys_count),
            groups: (0..replicas_count).map(|_| None).collect(),
            history: History::default(),
            refused_ops: Vec::new(),
            last_answer: None,
        }
    }

    /// Clients waiting for an answer.
    pub fn waiting_count(&self) -> usize {
        self.clients.iter().filter(|c| c.waiting.is_some()).count()
    }

    /// Idle clients may each start an operation (if `start_new`), and clients whose last
    /// attempt failed retry it; they are handed, as one group, to the replica a randomly chosen
    /// running replica believes leads. Returns a line for the trace when a group was handed over.
    pub fn start_some(
        &mut self,
        c: &mut SimCluster,
        rng: &mut SimRng,
        start_new: bool,
    ) -> Option<String> {
        let n = c.cores.len() as u64;
        let asked = rng.below(n) as usize;
        let leader = c.cores[asked].as_ref()?.leader()?.0 as usize;
        let busy = c.cores[leader].is_none()
            || c.paused[leader]
            || c.outstanding[leader].is_some()
            || self.groups[leader].is_some();
        if busy {
            return None;
        }
        let boot = c.boot_of[leader];
        let mut slots = Vec::new();
        let mut requests = Vec::new();
        let mut fresh_slots = Vec::new();
        for slot in 0..self.clients.len() {
            match &self.clients[slot].waiting {
                // A retry goes out with the next group, whatever the dice say.
                Some(w) if w.at.is_none() => {
                    requests.push(w.request.clone());
                    slots.push(slot);
                    continue;
                }
                Some(_) => continue,
                None if !start_new || rng.below(2) == 0 => continue,
                None => {}
            }
            let op = self.next_op(slot, rng);
            let client = &self.clients[slot];
            let request = Request { client: client.id, seq: client.seq, op };
            let bytes = request.encode().expect("workload requests are within the limits");
            requests.push(bytes.clone());
            slots.push(slot);
            fresh_slots.push(slot);
            self.history.operations.push(Operation {
                client: client.id,
                op: request.op,
                invoke_ns: c.world.now_ns(),
                outcome: Outcome::Unknown,
            });
            let op = self.history.operations.len() - 1;
            self.clients[slot].waiting =
                Some(Waiting { op, request: bytes, at: None, acked: false, uncertain: false });
        }
        if slots.is_empty() {
            return None;
        }
        let values: Vec<&[u8]> = requests.iter().map(Vec::as_slice).collect();
        match c.submit_many(leader, &values) {
            Ok(()) => {
                for &slot in &slots {
                    self.clients[slot].waiting.as_mut().expect("waiting").at = Some((leader, boot));
                }
                let retries = slots.len() - fresh_slots.len();
                let line = format!(
                    "clients {slots:?} hand {} requests to {leader}{}",
                    slots.len(),
                    if retries > 0 { format!(" ({retries} retried)") } else { String::new() }
                );
                self.groups[leader] = Some(Group { boot, slots });
                Some(line)
            }
            Err(_) => {
                // Refused on the spot: the new requests cannot take effect, so they leave the
                // history (they are its last operations); retries stay due (an earlier attempt
                // may still take effect).
                for &slot in fresh_slots.iter().rev() {
                    let w = self.clients[slot].waiting.take().expect("waiting");
                    assert_eq!(w.op + 1, self.history.operations.len(), "the last operation");
                    self.history.operations.pop();
                    self.clients[slot].seq -= 1;
                }
                None
            }
        }
    }

    /// The next operation of the client in `slot` (its sequence number moves on).
    fn next_op(&mut self, slot: usize, rng: &mut SimRng) -> Op {
        let client = &mut self.clients[slot];
        client.seq += 1;
        self.ops.next(client.id, client.seq, rng)
    }

    /// After a round: takes the outcomes of groups that finished, and reads the replies of
    /// acknowledged requests from the store of the replica that acknowledged them. A request
    /// whose attempt failed, or whose replica died, is due for a retry.
    pub fn poll(&mut self, c: &mut SimCluster) {
        let now = c.world.now_ns();
        for pos in 0..self.groups.len() {
            let Some(group) = &self.groups[pos] else { continue };
            if c.cores[pos].is_none() || c.boot_of[pos] != group.boot {
                // The process died with the group: each request is retried (below).
                self.groups[pos] = None;
                continue;
            }
            let Some(outcomes) = c.outcomes[pos].take() else { continue };
            let group = self.groups[pos].take().expect("a group");
            assert_eq!(outcomes.len(), group.slots.len(), "one outcome per request");
            for (slot, outcome) in group.slots.into_iter().zip(outcomes) {
                let client = &mut self.clients[slot];
                let w = client.waiting.as_mut().expect("waiting");
                match outcome {
                    Ok(_) => w.acked = true,
                    Err(e) if e.never_applied() && !w.uncertain => {
                        // The only attempt can never take effect: the client moves on.
                        c.refused.insert(std::mem::take(&mut w.request));
                        self.refused_ops.push(w.op);
                        client.waiting = None;
                    }
                    Err(_) => {
                        w.at = None;
                        w.uncertain = true;
                    }
                }
            }
        }
        for slot in 0..self.clients.len() {
            let client = &mut self.clients[slot];
            let Some(w) = &mut client.waiting else { continue };
            let Some((pos, boot)) = w.at else { continue };
            if c.cores[pos].is_none() || c.boot_of[pos] != boot {
                w.at = None;
                w.acked = false;
                w.uncertain = true;
                continue;
            }
            if !w.acked {
                continue;
            }
            if let Some(reply) = c.stores[pos].reply(client.id, client.seq) {
                self.history.operations[w.op].outcome =
                    Outcome::Returned { at_ns: now, reply: reply.clone() };
                client.waiting = None;
                self.last_answer = Some((pos, now));
            }
        }
    }

    /// The operations still waiting stay unknown; their clients are done. The operations
    /// refused for good leave the history.
    pub fn finish(&mut self) {
        for slot in 0..self.clients.len() {
            if self.clients[slot].waiting.is_some() {
                self.unknown(slot);
            }
        }
        let refused: std::collections::BTreeSet<usize> = self.refused_ops.drain(..).collect();
        let mut place = 0;
        self.history.operations.retain(|_| {
            place += 1;
            !refused.contains(&(place - 1))
        });
    }

    /// The client's operation has an unknown outcome (already recorded so): it continues under
    /// a new client id, as the history format asks.
    fn unknown(&mut self, slot: usize) {
        let client = &mut self.clients[slot];
        client.waiting = None;
        client.id = self.next_client_id;
        client.seq = 0;
        self.next_client_id += 1;
    }
}

/// The operations clients draw: gets, puts, deletes and compare-and-sets on a few keys (`k0`,
/// `k1`, ...), so that they contend; each value written is unique (`c<client>s<seq>`).
pub struct OpMix {
    keys_count: u64,
    /// The values written so far, per key (what compare-and-sets expect).
    written: Vec<Vec<Vec<u8>>>,
}

impl OpMix {
    pub fn new(keys_count: u64) -> OpMix {
        OpMix {
            keys_count: keys_count.max(1),
            written: vec![Vec::new(); keys_count.max(1) as usize],
        }
    }

    /// The keys operations use.
    pub fn keys(&self) -> impl Iterator<Item = Vec<u8>> {
        (0..self.keys_count).map(|k| format!("k{k}").into_bytes())
    }

    /// The operation of `client`'s request `seq`.
    pub fn next(&mut self, client: u64, seq: u64, rng: &mut SimRng) -> Op {
        let key_number = rng.below(self.keys_count) as usize;
        let key = format!("k{key_number}").into_bytes();
        let value = format!("c{client}s{seq}").into_bytes();
        let written = &self.written[key_number];
        let op = match rng.below(20) {
            0..=6 => Op::Get { key },
            7..=12 => Op::Put { key, value },
            13..=15 => Op::Delete { key },
            _ => {
                let expected = if written.is_empty() || rng.below(3) == 0 {
                    None
                } else {
                    let back = rng.below(written.len().min(2) as u64) as usize;
                    Some(written[written.len() - 1 - back].clone())
                };
                Op::Cas { key, expected, value }
            }
        };
        if let Op::Put { value, .. } | Op::Cas { value, .. } = &op {
            self.written[key_number].push(value.clone());
        }
        op
    }
}
