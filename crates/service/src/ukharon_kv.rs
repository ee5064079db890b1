//! A uKharon-KV node as the server's [`Backend`] (`protocol = "ukharon-kv"`): the view's
//! primary executes each request and answers once every backup holds it (or answers a GET
//! from its own store, guarded by `Active`); a backup, or a node outside the view, answers
//! with the wire's not-leader hint naming the view's primary, which the client library
//! follows as it follows a Mu leader. A request the node did not answer in its view (the view
//! changed, the lease ran out) is a retry, with the same sequence number: the store applies a
//! client's request once.

use crate::app::{App, AppRequest};
use crate::backend::{Backend, Pending};
use crate::report::ReplicaReport;
use crate::wire::ServerMessage;
use mu_ukharon_kv::{KvAnswer, KvNode};
use std::sync::mpsc;
use std::time::Instant;

/// See the module docs.
pub struct UkharonKvBackend {
    pub node: KvNode,
}

impl Backend for UkharonKvBackend {
    fn node(&self) -> u16 {
        self.node.node()
    }

    fn app(&self) -> App {
        App::Kv
    }

    fn serve(&self, batch: &[Pending], answers: &mut Vec<ServerMessage>) {
        // Every request is handed over before any answer is awaited: the node takes the batch
        // in one round and its writes to the backups are in flight together.
        let waiting: Vec<mpsc::Receiver<KvAnswer>> = batch
            .iter()
            .map(|p| {
                let (tx, rx) = mpsc::channel();
                match &p.request {
                    AppRequest::Kv(r) => self.node.submit(r.clone(), tx),
                    // The server refuses the order book's requests here (`app` is "kv").
                    AppRequest::Order(_) => {
                        let _ = tx.send(KvAnswer::Refused(
                            "uKharon-KV serves key-value requests only".into(),
                        ));
                    }
                }
                rx
            })
            .collect();
        for rx in waiting {
            let answer = rx.recv().unwrap_or_else(|_| KvAnswer::Retry("the node stopped".into()));
            answers.push(message(answer));
        }
    }

    fn report(&self, started: Instant) -> ReplicaReport {
        let s = self.node.status();
        let position = s.as_ref().map_or(0, |s| s.position);
        ReplicaReport {
            id: self.node.node(),
            leader: s.as_ref().and_then(|s| s.primary),
            fuo: position,
            applied: position,
            digest: s
                .as_ref()
                .and_then(|s| s.digest)
                .map_or_else(String::new, |d| format!("{d:016x}")),
            keys: s.as_ref().map_or(0, |s| s.keys as u64),
            commits: 0,
            aborts: 0,
            leader_changes: 0,
            permission_switches: 0,
            slow_permission_switches: 0,
            heartbeat_on: s.is_some(),
            eligible: true,
            recovering: false,
            confirmed: Vec::new(),
            members: Vec::new(),
            scores: Vec::new(),
            log_holder: None,
            restarted_without_rejoin: Vec::new(),
            other_configuration: Vec::new(),
            uptime_ms: started.elapsed().as_millis() as u64,
            pid: std::process::id(),
            role: Some(s.as_ref().map_or("stopped", |s| s.role.as_str()).to_string()),
            epoch: s.as_ref().and_then(|s| s.epoch),
            problem: s.and_then(|s| s.problem),
            local_reads: None,
        }
    }
}

/// The wire's answer for a node's.
pub fn message(answer: KvAnswer) -> ServerMessage {
    match answer {
        KvAnswer::Reply(reply) => ServerMessage::Reply(reply),
        KvAnswer::NotPrimary(primary) => ServerMessage::NotLeader { leader: primary },
        KvAnswer::Retry(why) => ServerMessage::Retry(why),
        KvAnswer::Refused(why) => ServerMessage::Refused(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mu_kv::Reply;

    #[test]
    fn a_backup_names_the_primary_as_the_leader() {
        assert_eq!(
            message(KvAnswer::NotPrimary(Some(4))),
            ServerMessage::NotLeader { leader: Some(4) }
        );
        assert_eq!(message(KvAnswer::NotPrimary(None)), ServerMessage::NotLeader { leader: None });
        assert_eq!(message(KvAnswer::Reply(Reply::Stored)), ServerMessage::Reply(Reply::Stored));
        assert!(matches!(message(KvAnswer::Retry("x".into())), ServerMessage::Retry(_)));
        assert!(matches!(message(KvAnswer::Refused("x".into())), ServerMessage::Refused(_)));
    }
}
