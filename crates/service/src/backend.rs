//! What a [`crate::Server`] serves: a backend that takes a batch of clients' requests and
//! answers each, and reports on itself. The Mu and Velos replicas are one
//! ([`ReplicaBackend`]: requests proposed through the log), a uKharon-KV node another
//! ([`crate::ukharon_kv::UkharonKvBackend`]: requests executed by the view's primary); clients
//! see the same wire either way.

use crate::app::{App, AppRequest};
use crate::machine::SharedMachine;
use crate::report::ReplicaReport;
use crate::wire::ServerMessage;
use mu_fabric::NodeId;
use mu_replica::{ProposeError, Replica};
use std::sync::Arc;
use std::time::Instant;

/// A client's request on its way to the backend: decoded, and the bytes it came as (what a
/// log holds).
pub struct Pending {
    pub request: AppRequest,
    pub bytes: Vec<u8>,
}

/// See the module docs.
pub trait Backend: Send + Sync {
    /// The node this server serves as (its replica id).
    fn node(&self) -> u16;

    /// The application it serves: requests of the other are refused before they reach it.
    fn app(&self) -> App;

    /// Answers every request of `batch`, in order: one message each pushed onto `answers`,
    /// [`ServerMessage::Reply`], [`ServerMessage::NotLeader`] (with the node to ask instead,
    /// if known), [`ServerMessage::Retry`] (not done: the client sends it again with the same
    /// sequence number) or [`ServerMessage::Refused`] (a retry would fail the same).
    fn serve(&self, batch: &[Pending], answers: &mut Vec<ServerMessage>);

    /// What the status request and the metrics report; `started` is when the server's
    /// process began serving.
    fn report(&self, started: Instant) -> ReplicaReport;
}

/// A Mu or Velos replica and its state machine: requests are proposed (batched) through
/// [`Replica::propose_many`] and answered once committed and applied.
pub struct ReplicaBackend {
    pub replica: Arc<Replica>,
    pub machine: SharedMachine,
}

impl Backend for ReplicaBackend {
    fn node(&self) -> u16 {
        self.replica.id().0
    }

    fn app(&self) -> App {
        self.machine.app()
    }

    fn serve(&self, batch: &[Pending], answers: &mut Vec<ServerMessage>) {
        // A follower answers who leads without the machine's lock: its applying thread takes
        // that lock for every entry, and a proposer waiting for it was seen to wait 300 ms on
        // two loaded vCPUs (a mutex does not queue its waiters), while clients asked it who
        // leads.
        if let Some(e) = self.replica.led_elsewhere() {
            let me = self.replica.id();
            answers.extend(batch.iter().map(|_| answer_error(e.clone(), me)));
            return;
        }
        {
            let mut m = self.machine.lock();
            for p in batch {
                m.expect(p.request.client(), p.request.seq());
            }
        }
        let mut outcomes = Vec::with_capacity(batch.len());
        propose_batch(&self.replica, batch, &mut outcomes);
        let mut m = self.machine.lock();
        for (p, outcome) in batch.iter().zip(outcomes) {
            let (client, seq) = (p.request.client(), p.request.seq());
            let reply = m.take(client, seq);
            answers.push(match (outcome, reply) {
                (Ok(_), Some(reply)) => reply.into_message(),
                // Committed, but applied as a duplicate of a request with the same client and
                // sequence number that another replica had taken: its reply is the session's.
                (Ok(_), None) => match m.state.session_reply(client, seq) {
                    Some(reply) => reply.into_message(),
                    None => ServerMessage::Retry("applied out of order; send it again".into()),
                },
                (Err(e), _) => answer_error(e, self.replica.id()),
            });
        }
    }

    fn report(&self, started: Instant) -> ReplicaReport {
        ReplicaReport::new(&self.replica, &self.machine, started)
    }
}

/// Proposes the requests of `batch`, an outcome per request into `outcomes`. One request too
/// large for an entry fails a whole `propose_many` call; the batch holds other clients'
/// requests, which would be refused for it (for good: a client does not send a refused request
/// again). So those too large are answered so, and the others proposed again without them.
fn propose_batch(
    replica: &Replica,
    batch: &[Pending],
    outcomes: &mut Vec<Result<u64, ProposeError>>,
) {
    let requests: Vec<&[u8]> = batch.iter().map(|p| p.bytes.as_slice()).collect();
    replica.propose_many(&requests, outcomes);
    let max = match outcomes.first() {
        Some(Err(ProposeError::TooLarge { max, .. })) if batch.len() > 1 => *max,
        _ => return,
    };
    let fitting: Vec<&[u8]> = requests.iter().copied().filter(|r| r.len() <= max).collect();
    let mut fitting_outcomes = Vec::with_capacity(fitting.len());
    if !fitting.is_empty() {
        replica.propose_many(&fitting, &mut fitting_outcomes);
    }
    let mut fitting_outcomes = fitting_outcomes.into_iter();
    outcomes.clear();
    for request in requests {
        outcomes.push(if request.len() > max {
            Err(ProposeError::TooLarge { len: request.len(), max })
        } else {
            fitting_outcomes.next().expect("an outcome per request proposed")
        });
    }
}

/// The answer to a request this replica (`me`) could not propose.
fn answer_error(e: ProposeError, me: NodeId) -> ServerMessage {
    match e {
        // Elected, and taking the leadership up (permissions, catching up): this replica will
        // answer in a moment. Sent away with its own name, a client would try the others
        // first, which name this one, and come back after pauses.
        ProposeError::NotLeader { leader: Some(leader) } if leader == me => {
            ServerMessage::Retry("elected; taking up the leadership".into())
        }
        ProposeError::NotLeader { leader } => {
            ServerMessage::NotLeader { leader: leader.map(|l| l.0) }
        }
        // `len` is the encoded request, not the value the user gave: say so.
        ProposeError::TooLarge { len, max } => ServerMessage::Refused(format!(
            "the request takes {len} bytes in the log (its key, any values and a header), \
             more than an entry holds ({max} bytes)"
        )),
        ProposeError::Empty | ProposeError::Membership(_) | ProposeError::Reentrant => {
            ServerMessage::Refused(e.to_string())
        }
        // Aborted, a full log, busy, shutting down, or a kind this server does not know yet:
        // a retry with the same sequence number is safe whatever it means (the state machine
        // applies a request once).
        _ => ServerMessage::Retry(e.to_string()),
    }
}
