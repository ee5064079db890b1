//! What a member's key-value service does with its replica, round by round, under
//! `reads = "lease"` (`docs/protocols/lease-reads.md`):
//!
//! * a write, and a read that may not be local, is proposed through the replica; once applied
//!   it is answered only if rule 2 holds then (`Active` of a view naming this replica), else
//!   dropped (the client retries with the same sequence number; the store applies it once);
//!   the proposal's terms before and after go to the [`LeaseGate`];
//! * a read is local if rule 3's first check holds ([`LeaseGate::may_read`]); the store is then
//!   read and the second check made ([`LeaseGate::may_answer`]) — at once, a few rounds later
//!   (the reading thread descheduled), or once the whole process, stopped right after the
//!   first check, runs again ([`RoundOut::stall_until_ns`]) — and only if both hold is it
//!   answered locally; otherwise it goes through the log.

use super::LeaseMutation;
use crate::cluster::Recorder;
use crate::ukharon::Choices;
use mu_fabric::NodeId;
use mu_fabric_sim::SimFabric;
use mu_kv::{Op, Reply, Request};
use mu_replica::{Appointment, LeaseGate, ProposeError, ReplicaCore, Term};
use mu_ukharon_kv::KvEvent;

pub use crate::kv_run::Token;

/// Requests proposed in one submission at most.
const BATCH_MAX: usize = 8;

/// What a round's member knows of its membership: its latest view (epoch, the appointment of
/// its primary, that primary's member id) and `Active` at its clock.
pub struct Lease<'a> {
    pub me: NodeId,
    pub member: u16,
    pub epoch: Option<u64>,
    pub appointed: Option<Appointment>,
    pub primary: Option<u16>,
    pub active: &'a dyn Fn(u64) -> bool,
}

impl Lease<'_> {
    /// Whether the latest view is active here now.
    pub fn is_active(&self) -> bool {
        self.epoch.is_some_and(|e| (self.active)(e))
    }

    /// Rule 2 (and rule 3's second check), read now.
    fn may_answer(&self) -> bool {
        LeaseGate::may_answer(self.me, self.appointed, self.is_active())
    }
}

/// The round's instant and settings.
pub struct Round {
    pub now_ns: u64,
    pub local_ns: u64,
    pub mutation: LeaseMutation,
    /// Whether a local read may stop its whole process between its two checks.
    pub stall_reads: bool,
}

/// An answer given: under which view, and whether from the local state.
pub struct Answer {
    pub epoch: u64,
    pub local: bool,
}

/// What a round of one member produced.
#[derive(Default)]
pub struct RoundOut {
    pub events: Vec<KvEvent<Token>>,
    pub answered: Vec<Answer>,
    /// The member's process stops now, right after a local read's first check, until then
    /// (global time).
    pub stall_until_ns: Option<u64>,
}

/// A read past its first check: read and checked again once `due_ns` has come.
struct LocalRead {
    request: Request,
    token: Token,
    /// The view the first check found active.
    epoch: u64,
    due_ns: u64,
}

/// A submission whose outcomes are awaited: its requests (none: a marker that only moves the
/// log on) and the term before it was proposed.
struct Proposing {
    requests: Vec<Option<(Request, Token)>>,
    term_before: Option<Term>,
}

/// A member's service: see the module docs.
#[derive(Default)]
pub struct Server {
    /// Requests clients sent, not yet read (a stopped process reads them when it runs again).
    pub inbox: Vec<(Request, Token)>,
    queue: Vec<Option<(Request, Token)>>,
    proposing: Option<Proposing>,
    reads: Vec<LocalRead>,
    gate: LeaseGate,
}

/// The value a marker proposal carries: not a request, so no store changes with it.
const MARKER: &[u8] = b"marker";

impl Server {
    /// Proposes a marker once nothing else is proposed: followers learn from it that the
    /// entries before it are decided, and apply them.
    pub fn propose_marker(&mut self) {
        self.queue.push(None);
    }

    /// One round: local reads due, the replica polled, outcomes answered, new requests taken,
    /// a submission made.
    pub(crate) fn round(
        &mut self,
        round: &Round,
        lease: &Lease,
        replica: &mut ReplicaCore<SimFabric>,
        recorder: &mut Recorder,
        choices: &mut Choices,
    ) -> RoundOut {
        let mut out = RoundOut::default();
        let due: Vec<LocalRead> = {
            let (due, later) = std::mem::take(&mut self.reads)
                .into_iter()
                .partition(|r: &LocalRead| r.due_ns <= round.now_ns);
            self.reads = later;
            due
        };
        for read in due {
            self.finish_read(read, round, lease, recorder, &mut out);
        }
        replica.background.poll(round.local_ns);
        replica.replication.poll(round.local_ns, recorder);
        self.take_outcomes(round, lease, replica, recorder, &mut out);
        for (request, token) in std::mem::take(&mut self.inbox) {
            self.take_request(request, token, round, lease, replica, recorder, choices, &mut out);
        }
        self.submit(round, lease, replica, &mut out);
        out
    }

    /// Rule 3 after the first check: reads the store and checks again.
    fn finish_read(
        &mut self,
        read: LocalRead,
        round: &Round,
        lease: &Lease,
        recorder: &Recorder,
        out: &mut RoundOut,
    ) {
        let value = recorder.store.get(read.request.op.key()).map(<[u8]>::to_vec);
        let epoch = match (lease.may_answer(), round.mutation) {
            (true, _) => lease.epoch.expect("active in a view"),
            (false, LeaseMutation::LeaseReadWithoutSecondCheck) => read.epoch,
            (false, _) => {
                // The lease may have run out while the read waited: through the log.
                self.queue.push(Some((read.request, read.token)));
                return;
            }
        };
        out.events.push(KvEvent::Answer { token: read.token, reply: Reply::Value(value) });
        out.answered.push(Answer { epoch, local: true });
    }

    /// The outcomes of the submission, answered under rule 2.
    fn take_outcomes(
        &mut self,
        round: &Round,
        lease: &Lease,
        replica: &mut ReplicaCore<SimFabric>,
        recorder: &Recorder,
        out: &mut RoundOut,
    ) {
        let mut outcomes = Vec::new();
        if !replica.replication.take_outcomes(&mut outcomes) {
            return;
        }
        let Some(proposing) = self.proposing.take() else { return };
        if outcomes.iter().any(Result::is_ok) {
            self.gate.applied_own(proposing.term_before, replica.term());
        }
        let gated = lease.may_answer() || round.mutation == LeaseMutation::UngatedAnswer;
        for (request, outcome) in proposing.requests.into_iter().zip(outcomes) {
            let Some((request, token)) = request else { continue };
            match outcome {
                Ok(_) => {
                    let reply = recorder.store.reply(request.client, request.seq).cloned();
                    match reply.filter(|_| gated) {
                        Some(reply) => {
                            out.events.push(KvEvent::Answer { token, reply });
                            let epoch = lease.epoch.unwrap_or(0);
                            out.answered.push(Answer { epoch, local: false });
                        }
                        None => out.events.push(KvEvent::Drop { token }),
                    }
                }
                Err(ProposeError::NotLeader { .. }) => out.events.push(not_primary(lease, token)),
                Err(_) => out.events.push(KvEvent::Drop { token }),
            }
        }
    }

    /// A request read from the inbox: a local read if rule 3's first check holds, a redirect
    /// if the view names another primary, otherwise a proposal.
    #[allow(clippy::too_many_arguments)]
    fn take_request(
        &mut self,
        request: Request,
        token: Token,
        round: &Round,
        lease: &Lease,
        replica: &ReplicaCore<SimFabric>,
        recorder: &Recorder,
        choices: &mut Choices,
        out: &mut RoundOut,
    ) {
        let get = matches!(request.op, Op::Get { .. });
        if get && self.gate.may_read(replica.term(), lease.appointed, lease.is_active()) {
            let epoch = lease.epoch.expect("active in a view");
            let mut read = LocalRead { request, token, epoch, due_ns: round.now_ns };
            if round.stall_reads && out.stall_until_ns.is_none() && choices.below(16) == 0 {
                // The process stops right after the first check.
                out.stall_until_ns = Some(round.now_ns + 20_000 + choices.below(380_000));
                self.reads.push(read);
            } else if choices.below(8) == 0 {
                // The reading thread is descheduled for a few rounds.
                read.due_ns += (1 + choices.below(20)) * crate::kv_run::phases::ROUND_NS;
                self.reads.push(read);
            } else {
                self.finish_read(read, round, lease, recorder, out);
            }
            return;
        }
        match lease.primary {
            Some(p) if p != lease.member => out.events.push(not_primary(lease, token)),
            _ => self.queue.push(Some((request, token))),
        }
    }

    /// Proposes what is queued, if no submission is under way.
    fn submit(
        &mut self,
        round: &Round,
        lease: &Lease,
        replica: &mut ReplicaCore<SimFabric>,
        out: &mut RoundOut,
    ) {
        if self.proposing.is_some() || self.queue.is_empty() {
            return;
        }
        let take = self.queue.len().min(BATCH_MAX);
        let requests: Vec<Option<(Request, Token)>> = self.queue.drain(..take).collect();
        let mut bytes = Vec::new();
        let mut kept = Vec::new();
        for r in requests {
            let encoded = match &r {
                None => Ok(MARKER.to_vec()),
                Some((request, _)) => request.encode().map_err(|e| e.to_string()),
            };
            match (encoded, r) {
                (Ok(b), r) => {
                    bytes.push(b);
                    kept.push(r);
                }
                (Err(why), Some((_, token))) => out.events.push(KvEvent::Refused { token, why }),
                (Err(_), None) => {}
            }
        }
        if kept.is_empty() {
            return;
        }
        let term_before = replica.term();
        let submitted = replica.replication.submit(bytes.iter().map(Vec::as_slice), round.local_ns);
        match submitted {
            Ok(()) => self.proposing = Some(Proposing { requests: kept, term_before }),
            Err(e) => {
                for (_, token) in kept.into_iter().flatten() {
                    out.events.push(match e {
                        ProposeError::NotLeader { .. } => not_primary(lease, token),
                        _ => KvEvent::Drop { token },
                    });
                }
            }
        }
    }
}

/// Not answered here: the view names another primary (the client goes there), or this member
/// and its replica does not lead yet (the client waits and sends again).
fn not_primary(lease: &Lease, token: Token) -> KvEvent<Token> {
    match lease.primary {
        Some(p) if p != lease.member => KvEvent::NotPrimary { token, primary: Some(p) },
        _ => KvEvent::Drop { token },
    }
}
