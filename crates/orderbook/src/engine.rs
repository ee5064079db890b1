//! The book behind the replica API: requests as bytes, applied once per client sequence number
//! (a retried request gets its first reply back), replies as bytes, snapshots of book and
//! sessions, and their digest.

use crate::book::Book;
use crate::codec::{put_event, put_u64, Reader, RestoreError};
use crate::event::Event;
use crate::request::Request;
use mu_sessions::{Seen, Sessions};

/// What applying a request answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// What the command did (a rejection is an event too).
    Events(Vec<Event>),
    /// The bytes were not a request; nothing changed.
    Malformed(String),
    /// The client already applied a later sequence number: this request is older than its
    /// last one and was not applied (a client's requests are sequential).
    Stale { applied_seq: u64 },
}

/// The replicated book and its client sessions ([`mu_sessions`], as the key-value store's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Engine {
    book: Book,
    sessions: Sessions<Reply>,
}

const SNAPSHOT_MAGIC: u32 = 0x656f_756d; // "muoe" in little-endian bytes
const SNAPSHOT_VERSION: u8 = 1;

impl Engine {
    pub fn new() -> Engine {
        Engine::default()
    }

    /// An engine around `book` (a broken one in the tests, say), with no sessions.
    pub fn with_book(book: Book) -> Engine {
        Engine { book, sessions: Sessions::new() }
    }

    pub fn book(&self) -> &Book {
        &self.book
    }

    /// Applies one request as bytes (a log entry's request): decodes it, then
    /// [`Engine::apply`].
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
        let mut events = Vec::new();
        self.book.apply(&request.command, &mut events);
        let reply = Reply::Events(events);
        self.sessions.record(request.client, request.seq, reply.clone());
        reply
    }

    /// The reply to `client`'s request `seq`, if it is the last one of that client applied.
    pub fn reply(&self, client: u64, seq: u64) -> Option<&Reply> {
        self.sessions.reply(client, seq)
    }

    pub fn clients_count(&self) -> usize {
        self.sessions.len()
    }

    /// A digest of the whole state, book and sessions: replicas that applied the same
    /// requests have the same digest.
    pub fn digest(&self) -> u64 {
        let mut bytes = Vec::new();
        self.snapshot(&mut bytes);
        mu_log::digest(0x6d75_6f65_0000_0001, &bytes)
    }

    /// Appends the state to `out`: magic `"muoe"`, version 1, the book's snapshot, the number
    /// of sessions, then each (client, sequence number, reply) in client order.
    pub fn snapshot(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&SNAPSHOT_MAGIC.to_le_bytes());
        out.push(SNAPSHOT_VERSION);
        self.book.snapshot(out);
        put_u64(out, self.sessions.len() as u64);
        for (client, seq, reply) in self.sessions.iter() {
            put_u64(out, client);
            put_u64(out, seq);
            reply.encode(out);
        }
    }

    /// The state a snapshot holds; never panics, whatever the bytes.
    pub fn restore(bytes: &[u8]) -> Result<Engine, RestoreError> {
        let mut r = Reader(bytes);
        if r.u32()? != SNAPSHOT_MAGIC {
            return Err(RestoreError("not an order engine snapshot"));
        }
        if r.u8()? != SNAPSHOT_VERSION {
            return Err(RestoreError("unknown order engine snapshot version"));
        }
        let mut engine = Engine::with_book(Book::read(&mut r)?);
        for _ in 0..r.u64()? {
            let client = r.u64()?;
            let seq = r.u64()?;
            let reply = read_reply(&mut r)?;
            engine
                .sessions
                .restore_one(client, seq, reply)
                .map_err(|_| RestoreError("sessions out of client order"))?;
        }
        r.end()?;
        Ok(engine)
    }
}

impl Reply {
    /// Appends the reply as bytes: tag 0 and the number of events (4 bytes) then each event
    /// (see the `codec` module); tag 1 and the reason (4-byte length, UTF-8); tag 2 and the
    /// applied sequence number (8 bytes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Events(events) => {
                out.push(0);
                out.extend_from_slice(&(events.len() as u32).to_le_bytes());
                for e in events {
                    put_event(out, e);
                }
            }
            Reply::Malformed(why) => {
                out.push(1);
                out.extend_from_slice(&(why.len() as u32).to_le_bytes());
                out.extend_from_slice(why.as_bytes());
            }
            Reply::Stale { applied_seq } => {
                out.push(2);
                put_u64(out, *applied_seq);
            }
        }
    }

    /// The reply `bytes` hold, whole; never panics, whatever the bytes.
    pub fn decode(bytes: &[u8]) -> Result<Reply, RestoreError> {
        let mut r = Reader(bytes);
        let reply = read_reply(&mut r)?;
        r.end()?;
        Ok(reply)
    }
}

fn read_reply(r: &mut Reader) -> Result<Reply, RestoreError> {
    Ok(match r.u8()? {
        0 => {
            let count = r.u32()? as usize;
            // No more events than bytes left: a garbage count allocates nothing.
            let mut events = Vec::with_capacity(count.min(r.0.len()));
            for _ in 0..count {
                events.push(r.event()?);
            }
            Reply::Events(events)
        }
        1 => {
            let len = r.u32()? as usize;
            let why = r.take(len)?;
            Reply::Malformed(
                String::from_utf8(why.to_vec()).map_err(|_| RestoreError("reason not UTF-8"))?,
            )
        }
        2 => Reply::Stale { applied_seq: r.u64()? },
        _ => return Err(RestoreError("unknown reply tag")),
    })
}
