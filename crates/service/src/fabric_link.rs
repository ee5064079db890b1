//! The client path over the fabric on the client's side (`docs/client-path.md`): a fabric node
//! of the client's own in the replica's directory for clients, and a
//! [`mu_request_rings::RingClient`] on it. The client library joins through its socket
//! connection (a node id reserved, the node started, the node admitted: a grant) and then
//! sends each request by a one-sided write into its ring on the replica, and reads the answer
//! from its own response ring. Shared memory only, for now: the node is an shm node.

use crate::wire::{FrameError, ServerMessage};
use mu_fabric::wait::Backoff;
use mu_fabric::{Fabric, NodeId};
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_request_rings::{ClientLayout, Grant, PreparedClient, Reply, RingClient};
use std::io;
use std::time::Instant;

/// How a client waits for its answer: 5 µs of spin (about a round trip), then yielding (a
/// server thread that shares this CPU runs at once; on an idle CPU a yield returns in half a
/// microsecond), then parking after 2 ms. A long spin would hold off a server thread on the
/// same CPU for all of it, on every request (`fabric_path`'s `IDLE_WAIT` says what that cost).
const ANSWER_WAIT: Backoff = Backoff { spin_ns: 5_000, yield_ns: 2_000_000, park_us: 50 };

/// A client's rings on one replica.
pub struct FabricLink {
    /// The replica it reaches.
    pub replica: u16,
    ring: RingClient<ShmFabric>,
    answer: Vec<u8>,
}

impl FabricLink {
    /// Starts node `node` in `dir` (as the replica's `FabricNode` answer said) for cluster
    /// `cluster_id`: the replica admits it next.
    pub fn start_node(cluster_id: u64, dir: &str, node: u16) -> Result<ShmFabric, String> {
        ShmFabric::create(ShmConfig::new(std::path::Path::new(dir), cluster_id, NodeId(node)))
            .map_err(|e| format!("starting the client's fabric node {node} in {dir}: {e}"))
    }

    /// Registers the client's regions on `fabric` as `layout` (the replica's `FabricNode`
    /// answer) says.
    pub fn prepare(fabric: ShmFabric, layout: &[u8]) -> Result<PreparedClient<ShmFabric>, String> {
        let layout = ClientLayout::from_bytes(layout)
            .map_err(|e| format!("the replica's layout for the rings: {e}"))?;
        RingClient::prepare(fabric, &layout)
            .map_err(|e| format!("registering the client's rings: {e}"))
    }

    /// The rings of `grant` (the replica's `FabricGrant` answer) on the prepared node.
    pub fn open(
        replica: u16,
        prepared: PreparedClient<ShmFabric>,
        grant: &[u8],
    ) -> Result<FabricLink, String> {
        let grant = Grant::from_bytes(grant).map_err(|e| format!("the replica's grant: {e}"))?;
        let ring =
            prepared.connect(&grant).map_err(|(_, e)| format!("opening the request rings: {e}"))?;
        Ok(FabricLink { replica, ring, answer: Vec::new() })
    }

    /// Whether `message` fits a request slot (a larger one goes by the socket).
    pub fn fits(&self, message: &[u8]) -> bool {
        message.len() <= self.ring.payload_bytes_max()
    }

    /// Sends `message` (a client message's bytes) and waits for its answer until `deadline`.
    /// An error leaves the link unusable: the caller drops it.
    pub fn exchange(
        &mut self,
        message: &[u8],
        deadline: Instant,
    ) -> Result<ServerMessage, FrameError> {
        let seq = self.send(message)?;
        self.wait(seq, deadline)?.ok_or_else(|| {
            FrameError::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                "no answer on the fabric path in time",
            ))
        })
    }

    /// Sends `message` (a client message's bytes): its sequence number on the rings, to wait
    /// for with [`FabricLink::wait`]. An error leaves the link unusable: the caller drops it.
    pub fn send(&mut self, message: &[u8]) -> Result<u64, FrameError> {
        self.ring.send(message).map_err(|e| lost(format!("fabric send: {e}")))
    }

    /// Waits until `deadline` for the answer to request `seq` ([`FabricLink::send`]): `None`
    /// if it has not come by then, and the link still waits for it (the client may wait again,
    /// or drop the link). An error leaves the link unusable: the caller drops it.
    pub fn wait(
        &mut self,
        seq: u64,
        deadline: Instant,
    ) -> Result<Option<ServerMessage>, FrameError> {
        let answer = &mut self.answer;
        let mut rejected = None;
        let server = self.ring.grant().server_node;
        let mut polls = 0u32;
        let wait = deadline.saturating_duration_since(Instant::now());
        let found = ANSWER_WAIT.wait_for(wait, || {
            // A server that died after the request landed never answers: its node's death
            // flag says so (a load; asked every 64 polls).
            polls = polls.wrapping_add(1);
            if polls % 64 == 0 && self.ring.fabric().crash_notified(server) {
                return Some(Err(lost("the replica's fabric node has stopped".into())));
            }
            let mut got = false;
            let polled = self.ring.poll(|s, reply| {
                if s != seq {
                    return;
                }
                got = true;
                match reply {
                    Reply::Data(bytes) => {
                        answer.clear();
                        answer.extend_from_slice(bytes);
                    }
                    Reply::Rejected(r) => rejected = Some(r),
                }
            });
            match polled {
                Err(e) => Some(Err(lost(format!("fabric: {e}")))),
                Ok(_) if got => Some(Ok(())),
                Ok(_) => None,
            }
        });
        match found {
            None => Ok(None),
            Some(Err(e)) => Err(e),
            Some(Ok(())) => match rejected {
                Some(r) => {
                    Ok(Some(ServerMessage::Refused(format!("the fabric path refused it: {r:?}"))))
                }
                None => ServerMessage::decode(&self.answer).map(Some),
            },
        }
    }
}

impl FabricLink {
    /// Requests the rings take at once ([`FabricLink::send_many`]).
    pub fn window(&self) -> usize {
        self.ring.geometry().slots_per_client as usize
    }

    /// Sends every message of `messages` (at most [`FabricLink::window`], each fitting a slot)
    /// before waiting: their sequence numbers, in order, to wait for with
    /// [`FabricLink::wait_many`]. An error leaves the link unusable: the caller drops it.
    pub fn send_many(&mut self, messages: &[Vec<u8>]) -> Result<Vec<u64>, FrameError> {
        messages.iter().map(|m| self.send(m)).collect()
    }

    /// Waits until `deadline` for the answers to the requests `seqs` ([`FabricLink::send_many`])
    /// that `answers` (one place each, in order) does not hold yet, and puts each where it
    /// belongs: returns how many are still missing. An error of the link (the replica gone)
    /// ends the wait; the caller drops the link then.
    pub fn wait_many(
        &mut self,
        seqs: &[u64],
        answers: &mut [Option<ServerMessage>],
        deadline: Instant,
    ) -> Result<usize, FrameError> {
        let server = self.ring.grant().server_node;
        let mut polls = 0u32;
        let mut left = answers.iter().filter(|a| a.is_none()).count();
        let wait = deadline.saturating_duration_since(Instant::now());
        let done = ANSWER_WAIT.wait_for(wait, || {
            polls = polls.wrapping_add(1);
            if polls % 64 == 0 && self.ring.fabric().crash_notified(server) {
                return Some(Err(lost("the replica's fabric node has stopped".into())));
            }
            let polled = self.ring.poll(|seq, reply| {
                let Some(at) = seqs.iter().position(|&s| s == seq) else { return };
                if answers[at].is_some() {
                    return;
                }
                left -= 1;
                answers[at] = Some(match reply {
                    Reply::Data(bytes) => ServerMessage::decode(bytes)
                        .unwrap_or_else(|e| ServerMessage::Refused(e.to_string())),
                    Reply::Rejected(r) => {
                        ServerMessage::Refused(format!("the fabric path refused it: {r:?}"))
                    }
                });
            });
            match polled {
                Err(e) => Some(Err(lost(format!("fabric: {e}")))),
                Ok(_) if left == 0 => Some(Ok(())),
                Ok(_) => None,
            }
        });
        match done {
            Some(Err(e)) => Err(e),
            _ => Ok(left),
        }
    }
}

fn lost(why: String) -> FrameError {
    FrameError::Io(io::Error::new(io::ErrorKind::ConnectionReset, why))
}
