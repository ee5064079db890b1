//! The map, the per-client sessions that make requests take effect once, and snapshots.

use crate::request::{Op, Request};
use mu_sessions::{Seen, Sessions};
use std::collections::BTreeMap;

/// What applying a request answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A get: the value, or `None` if the key is absent.
    Value(Option<Vec<u8>>),
    /// A put.
    Stored,
    /// A delete: whether the key existed.
    Deleted(bool),
    /// A compare-and-set: whether it swapped.
    Swapped(bool),
    /// The bytes were not a request; nothing changed.
    Malformed(String),
    /// The client already applied a later sequence number: this request is older than its
    /// last one and was not applied (a client's requests are sequential).
    Stale { applied_seq: u64 },
}

/// The replicated map and its client sessions ([`mu_sessions`]: kept for every client ever
/// seen).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Store {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    sessions: Sessions<Reply>,
}

/// Why a snapshot could not be restored.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("snapshot is malformed: {0}")]
pub struct RestoreError(&'static str);

const SNAPSHOT_MAGIC: u32 = 0x6d75_6b76; // "mukv"

impl Store {
    pub fn new() -> Store {
        Store::default()
    }

    /// Applies one request as bytes (a log entry's request): decodes it, then [`Store::apply`].
    pub fn apply_bytes(&mut self, bytes: &[u8]) -> Reply {
        match Request::decode(bytes) {
            Ok(request) => self.apply(&request),
            Err(e) => Reply::Malformed(e.to_string()),
        }
    }

    /// Applies `request` once: a retry of the client's last request gets the same reply again
    /// without taking effect twice, and an older one gets [`Reply::Stale`].
    pub fn apply(&mut self, request: &Request) -> Reply {
        match self.sessions.seen(request.client, request.seq) {
            Seen::Again(reply) => return reply.clone(),
            Seen::Stale { applied_seq } => return Reply::Stale { applied_seq },
            Seen::New => {}
        }
        let reply = match &request.op {
            Op::Get { key } => Reply::Value(self.map.get(key).cloned()),
            Op::Put { key, value } => {
                self.map.insert(key.clone(), value.clone());
                Reply::Stored
            }
            Op::Delete { key } => Reply::Deleted(self.map.remove(key).is_some()),
            Op::Cas { key, expected, value } => {
                let swap = self.map.get(key) == expected.as_ref();
                if swap {
                    self.map.insert(key.clone(), value.clone());
                }
                Reply::Swapped(swap)
            }
        };
        self.sessions.record(request.client, request.seq, reply.clone());
        reply
    }

    /// The reply to `client`'s request `seq`, if it is the last one of that client applied.
    pub fn reply(&self, client: u64, seq: u64) -> Option<&Reply> {
        self.sessions.reply(client, seq)
    }

    /// A read outside the log (for inspection and tests; clients read through the log).
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.map.get(key).map(Vec::as_slice)
    }

    pub fn keys_count(&self) -> usize {
        self.map.len()
    }

    /// A digest of the whole state, map and sessions: replicas that applied the same requests
    /// have the same digest.
    pub fn digest(&self) -> u64 {
        let mut bytes = Vec::new();
        self.snapshot(&mut bytes);
        mu_log::digest(0x6d75_6b76_0000_0001, &bytes)
    }

    /// Appends the state to `out`; [`Store::restore`] reads it back.
    pub fn snapshot(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&SNAPSHOT_MAGIC.to_le_bytes());
        out.extend_from_slice(&(self.map.len() as u64).to_le_bytes());
        for (k, v) in &self.map {
            put_bytes(out, k);
            put_bytes(out, v);
        }
        out.extend_from_slice(&(self.sessions.len() as u64).to_le_bytes());
        for (client, seq, reply) in self.sessions.iter() {
            out.extend_from_slice(&client.to_le_bytes());
            out.extend_from_slice(&seq.to_le_bytes());
            put_reply(out, reply);
        }
    }

    /// The state a snapshot holds; never panics, whatever the bytes.
    pub fn restore(bytes: &[u8]) -> Result<Store, RestoreError> {
        let mut r = Reader(bytes);
        if r.u32()? != SNAPSHOT_MAGIC {
            return Err(RestoreError("not a key-value snapshot"));
        }
        let mut store = Store::new();
        for _ in 0..r.u64()? {
            let k = r.bytes()?;
            let v = r.bytes()?;
            store.map.insert(k, v);
        }
        for _ in 0..r.u64()? {
            let client = r.u64()?;
            let seq = r.u64()?;
            let reply = r.reply()?;
            store
                .sessions
                .restore_one(client, seq, reply)
                .map_err(|_| RestoreError("sessions out of client order"))?;
        }
        if !r.0.is_empty() {
            return Err(RestoreError("bytes after the end"));
        }
        Ok(store)
    }
}

impl Reply {
    /// Appends the reply as bytes (the key-value service sends replies this way).
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_reply(out, self);
    }

    /// The reply `bytes` hold, whole; never panics, whatever the bytes.
    pub fn decode(bytes: &[u8]) -> Result<Reply, RestoreError> {
        let mut r = Reader(bytes);
        let reply = r.reply()?;
        if !r.0.is_empty() {
            return Err(RestoreError("bytes after the end"));
        }
        Ok(reply)
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u64).to_le_bytes());
    out.extend_from_slice(b);
}

fn put_reply(out: &mut Vec<u8>, reply: &Reply) {
    match reply {
        Reply::Value(None) => out.push(0),
        Reply::Value(Some(v)) => {
            out.push(1);
            put_bytes(out, v);
        }
        Reply::Stored => out.push(2),
        Reply::Deleted(b) => out.extend_from_slice(&[3, u8::from(*b)]),
        Reply::Swapped(b) => out.extend_from_slice(&[4, u8::from(*b)]),
        Reply::Malformed(why) => {
            out.push(5);
            put_bytes(out, why.as_bytes());
        }
        Reply::Stale { applied_seq } => {
            out.push(6);
            out.extend_from_slice(&applied_seq.to_le_bytes());
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], RestoreError> {
        if self.0.len() < n {
            return Err(RestoreError("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, RestoreError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Result<u64, RestoreError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    fn u8(&mut self) -> Result<u8, RestoreError> {
        Ok(self.take(1)?[0])
    }

    fn bytes(&mut self) -> Result<Vec<u8>, RestoreError> {
        let len = usize::try_from(self.u64()?).map_err(|_| RestoreError("length too large"))?;
        Ok(self.take(len)?.to_vec())
    }

    fn flag(&mut self) -> Result<bool, RestoreError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(RestoreError("bad flag")),
        }
    }

    fn reply(&mut self) -> Result<Reply, RestoreError> {
        Ok(match self.u8()? {
            0 => Reply::Value(None),
            1 => Reply::Value(Some(self.bytes()?)),
            2 => Reply::Stored,
            3 => Reply::Deleted(self.flag()?),
            4 => Reply::Swapped(self.flag()?),
            5 => Reply::Malformed(
                String::from_utf8(self.bytes()?).map_err(|_| RestoreError("reason not UTF-8"))?,
            ),
            6 => Reply::Stale { applied_seq: self.u64()? },
            _ => return Err(RestoreError("unknown reply tag")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(client: u64, seq: u64, op: Op) -> Request {
        Request { client, seq, op }
    }
    fn k() -> Vec<u8> {
        b"k".to_vec()
    }

    #[test]
    fn replies_round_trip_as_bytes() {
        let replies = [
            Reply::Value(None),
            Reply::Value(Some(b"v".to_vec())),
            Reply::Stored,
            Reply::Deleted(true),
            Reply::Swapped(false),
            Reply::Malformed("why".into()),
            Reply::Stale { applied_seq: 7 },
        ];
        for reply in replies {
            let mut b = Vec::new();
            reply.encode(&mut b);
            assert_eq!(Reply::decode(&b), Ok(reply.clone()));
            for cut in 0..b.len() {
                assert!(Reply::decode(&b[..cut]).is_err(), "{reply:?} cut at {cut}");
            }
            b.push(0);
            assert!(Reply::decode(&b).is_err(), "trailing byte");
        }
        assert!(Reply::decode(&[9]).is_err());
    }

    #[test]
    fn operations_follow_the_model() {
        let mut s = Store::new();
        assert_eq!(s.apply(&req(1, 1, Op::Get { key: k() })), Reply::Value(None));
        assert_eq!(s.apply(&req(1, 2, Op::Delete { key: k() })), Reply::Deleted(false));
        let cas = |seq, expected: Option<&[u8]>, v: &[u8]| {
            req(
                1,
                seq,
                Op::Cas { key: k(), expected: expected.map(<[u8]>::to_vec), value: v.to_vec() },
            )
        };
        assert_eq!(s.apply(&cas(3, Some(b"a"), b"x")), Reply::Swapped(false));
        assert_eq!(s.apply(&cas(4, None, b"a")), Reply::Swapped(true));
        assert_eq!(s.apply(&cas(5, None, b"b")), Reply::Swapped(false));
        assert_eq!(s.apply(&cas(6, Some(b"a"), b"b")), Reply::Swapped(true));
        assert_eq!(s.get(b"k"), Some(&b"b"[..]));
        assert_eq!(s.apply(&req(1, 7, Op::Put { key: k(), value: b"c".to_vec() })), Reply::Stored);
        assert_eq!(s.apply(&req(1, 8, Op::Get { key: k() })), Reply::Value(Some(b"c".to_vec())));
        assert_eq!(s.apply(&req(1, 9, Op::Delete { key: k() })), Reply::Deleted(true));
        assert_eq!(s.keys_count(), 0);
    }

    /// A retried request (same client and sequence number, say after an aborted proposal that
    /// the next leader committed anyway) takes effect once and gets its first reply again.
    #[test]
    fn a_retry_takes_effect_once() {
        let mut s = Store::new();
        let swap = req(5, 1, Op::Cas { key: k(), expected: None, value: b"v".to_vec() });
        assert_eq!(s.apply(&swap), Reply::Swapped(true));
        assert_eq!(s.apply(&swap), Reply::Swapped(true), "the first reply again, not false");
        assert_eq!(s.reply(5, 1), Some(&Reply::Swapped(true)));
        let put = req(5, 2, Op::Put { key: k(), value: b"w".to_vec() });
        assert_eq!(s.apply(&put), Reply::Stored);
        assert_eq!(s.apply(&swap), Reply::Stale { applied_seq: 2 });
        assert_eq!(s.get(b"k"), Some(&b"w"[..]), "the stale retry changed nothing");
        assert_eq!(s.reply(5, 1), None);
    }

    #[test]
    fn malformed_bytes_change_nothing() {
        let mut s = Store::new();
        s.apply(&req(1, 1, Op::Put { key: k(), value: b"v".to_vec() }));
        let before = s.digest();
        assert!(matches!(s.apply_bytes(b"garbage"), Reply::Malformed(_)));
        assert_eq!(s.digest(), before);
    }

    #[test]
    fn snapshots_restore_the_same_state() {
        let mut s = Store::new();
        s.apply(&req(1, 1, Op::Put { key: k(), value: b"v".to_vec() }));
        s.apply(&req(2, 1, Op::Get { key: b"missing".to_vec() }));
        s.apply(&req(3, 4, Op::Delete { key: k() }));
        s.apply(&req(4, 1, Op::Put { key: b"other".to_vec(), value: Vec::new() }));
        s.apply(&req(4, 2, Op::Cas { key: k(), expected: None, value: b"z".to_vec() }));
        s.apply_bytes(b"not a request"); // no session: nothing to remember
        let mut bytes = Vec::new();
        s.snapshot(&mut bytes);
        let back = Store::restore(&bytes).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.digest(), s.digest());
        for len in 0..bytes.len() {
            assert!(Store::restore(&bytes[..len]).is_err(), "cut at {len}");
        }
        let mut changed = s.clone();
        changed.apply(&req(9, 1, Op::Get { key: k() }));
        assert_ne!(changed.digest(), s.digest(), "sessions are part of the state");
    }
}
