//! Client sessions for a replicated state machine.
//!
//! A client numbers its requests (one at a time per client id) and sends a request again, with
//! the same number, whenever it cannot tell whether it was applied: after a leader change, a
//! lost answer, a timeout. A session keeps the client's last sequence number and the reply it
//! got, so that the state machine applies each request once: the same request again gets the
//! first reply back without taking effect twice, and an older one is refused as stale. Every
//! application of the service keeps its clients' sessions here (the key-value store, the order
//! book). Pure and deterministic: replicas that applied the same requests hold the same
//! sessions, and snapshots list them in client order.
//!
//! Sessions are kept for every client ever seen (none expires): a state machine serving
//! unboundedly many short-lived clients grows with them. Expiring them safely needs an agreed
//! clock or a bound on clients.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;

/// What the sessions know of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen<'a, R> {
    /// Newer than anything of its client: apply it, then [`Sessions::record`] its reply.
    New,
    /// The client's last request, applied already: answer this reply again.
    Again(&'a R),
    /// Older than the client's last request (`applied_seq`): not applied.
    Stale { applied_seq: u64 },
}

/// A restored session that came out of client order: a snapshot that is not one of ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("session of client {client} after client {last}: sessions out of client order")]
pub struct OutOfOrder {
    pub client: u64,
    pub last: u64,
}

/// Each client's last sequence number and reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sessions<R> {
    by_client: BTreeMap<u64, (u64, R)>,
}

impl<R> Default for Sessions<R> {
    fn default() -> Self {
        Sessions { by_client: BTreeMap::new() }
    }
}

impl<R> Sessions<R> {
    pub fn new() -> Self {
        Self::default()
    }

    /// What request `seq` of `client` is to these sessions.
    pub fn seen(&self, client: u64, seq: u64) -> Seen<'_, R> {
        match self.by_client.get(&client) {
            Some((last, reply)) if seq == *last => Seen::Again(reply),
            Some((last, _)) if seq < *last => Seen::Stale { applied_seq: *last },
            _ => Seen::New,
        }
    }

    /// Records `reply` as the answer to `client`'s request `seq`, applied now.
    pub fn record(&mut self, client: u64, seq: u64, reply: R) {
        self.by_client.insert(client, (seq, reply));
    }

    /// The reply to `client`'s request `seq`, if it is the last one of that client applied.
    pub fn reply(&self, client: u64, seq: u64) -> Option<&R> {
        self.by_client.get(&client).filter(|(last, _)| *last == seq).map(|(_, reply)| reply)
    }

    /// How many clients have a session.
    pub fn len(&self) -> usize {
        self.by_client.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }

    /// Every session as (client, last sequence number, reply), in client order: the order a
    /// snapshot lists them in.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, &R)> + '_ {
        self.by_client.iter().map(|(client, (seq, reply))| (*client, *seq, reply))
    }

    /// Adds a session read from a snapshot; they come in client order, each client once.
    pub fn restore_one(&mut self, client: u64, seq: u64, reply: R) -> Result<(), OutOfOrder> {
        if let Some((&last, _)) = self.by_client.last_key_value() {
            if last >= client {
                return Err(OutOfOrder { client, last });
            }
        }
        self.by_client.insert(client, (seq, reply));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_new_once_then_answered_again_and_older_ones_are_stale() {
        let mut s: Sessions<&str> = Sessions::new();
        assert_eq!(s.seen(7, 1), Seen::New);
        s.record(7, 1, "first");
        assert_eq!(s.seen(7, 1), Seen::Again(&"first"));
        assert_eq!(s.seen(7, 2), Seen::New);
        s.record(7, 2, "second");
        assert_eq!(s.seen(7, 1), Seen::Stale { applied_seq: 2 });
        assert_eq!(s.seen(7, 2), Seen::Again(&"second"));
        assert_eq!(s.seen(8, 1), Seen::New, "another client has its own numbers");
        assert_eq!((s.reply(7, 2), s.reply(7, 1)), (Some(&"second"), None));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn sessions_list_and_restore_in_client_order_only() {
        let mut s = Sessions::new();
        for (client, seq) in [(9, 3), (2, 5), (4, 1)] {
            s.record(client, seq, client * 10);
        }
        let listed: Vec<_> = s.iter().map(|(c, q, r)| (c, q, *r)).collect();
        assert_eq!(listed, [(2, 5, 20), (4, 1, 40), (9, 3, 90)]);
        let mut back = Sessions::new();
        for (c, q, r) in listed {
            back.restore_one(c, q, r).unwrap();
        }
        assert_eq!(back, s);
        assert_eq!(back.restore_one(9, 1, 0), Err(OutOfOrder { client: 9, last: 9 }));
        assert_eq!(back.restore_one(3, 1, 0), Err(OutOfOrder { client: 3, last: 9 }));
    }
}
