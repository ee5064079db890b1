//! The replica's state machine: applies each committed request to the replica's own memcached,
//! in log order, on every replica (`docs/apps/memcached.md`, "Applying an entry"). Before a
//! request it deletes the keys whose expiry the entry's time has reached; it sends the request
//! with its exptimes rewritten to 0, looks up the CAS of the keys whose expiry the request may
//! change before and after it, and updates the expiry table from what it finds. The reply goes
//! to the front that took the request, if it is this replica's; other replicas drop it.

use crate::entry::Entry;
use crate::expiry::{expiry_ms, Expiries};
use crate::rewrite::{self, KeyEffect, Kind, Plan};
use crate::server::{Conn, Units};
use crate::text::tokens;
use crate::transfer::{self, Snapshot};
use mu_replica::StateMachine;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tracing::warn;

const LOG_TARGET: &str = "mu_memcached::machine";

/// Deletes sent to the server in one write (their replies are a few bytes each).
const DELETES_PER_WRITE: usize = 1024;

/// The largest reply a request may have: a larger one is read from the server and dropped, and
/// the client gets [`REPLY_TOO_LARGE`]. The same on every replica, as every replica applies the
/// same request to the same items.
pub const REPLY_BYTES_MAX: usize = 16 << 20;

/// The answer to a request whose reply exceeds [`REPLY_BYTES_MAX`].
pub const REPLY_TOO_LARGE: &str = "SERVER_ERROR the reply exceeds 16 MiB; ask for fewer keys\r\n";

/// The bytes of a reply that no client of this replica waits for that are kept (enough for
/// the `OK` of a `flush_all`, which the machine reads): the rest is read and dropped.
const UNWANTED_REPLY_BYTES_MAX: usize = 4 << 10;

/// The bytes the look-ups' replies may hold (a short line each, at most 128 keys a request).
const LOOKUP_REPLY_BYTES_MAX: usize = 64 << 10;

/// How long the server may take to answer: longer, and this replica stops (an error, not a
/// wait for ever that would stop its applying unseen).
const SERVER_REPLY_WAIT: Duration = Duration::from_secs(30);

/// The replies this front waits for.
#[derive(Default)]
struct Replies {
    /// Requests proposed and not yet answered or given up.
    pending: HashSet<u64>,
    /// Replies applied here and not yet taken.
    ready: HashMap<u64, Vec<u8>>,
}

/// What the state machine shares with the front.
pub struct MachineShared {
    pub me: u16,
    /// This process's front (distinct across restarts: its start time in ns).
    pub incarnation: u64,
    replies: Mutex<Replies>,
    replied: Condvar,
    failure: Mutex<Option<String>>,
    /// The replicated expiry table, which only the state machine changes.
    expiries: Mutex<Expiries>,
}

impl MachineShared {
    /// Notes that request `seq` is about to be proposed: its reply is kept when applied.
    pub fn expect(&self, seq: u64) {
        self.replies.lock().unwrap_or_else(|p| p.into_inner()).pending.insert(seq);
    }

    /// The reply to this front's request `seq`, once applied here (at most `wait`).
    pub fn take_reply(&self, seq: u64, wait: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + wait;
        let mut replies = self.replies.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(reply) = replies.ready.remove(&seq) {
                replies.pending.remove(&seq);
                return Some(reply);
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                replies.pending.remove(&seq);
                return None;
            };
            replies = self.replied.wait_timeout(replies, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Gives up on request `seq` (it was not committed, or its outcome is unknown): its reply,
    /// if the entry is applied later (committed by the next leader), is dropped.
    pub fn forget(&self, seq: u64) {
        let mut replies = self.replies.lock().unwrap_or_else(|p| p.into_inner());
        replies.pending.remove(&seq);
        replies.ready.remove(&seq);
    }

    /// Every key with an expiry and its expiry in ms since the Unix epoch, in key order: the
    /// replicated table as applied here so far.
    pub fn expiries(&self) -> Vec<(Vec<u8>, u64)> {
        self.expiries.lock().unwrap_or_else(|p| p.into_inner()).sorted()
    }

    /// Why this replica's server can no longer be applied to, if so: the replica must stop.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The replies to one request's round trip: the look-ups before it, its own, the look-ups after
/// (the expiry probes', then the renewed key's, if any).
struct RoundTrip {
    befores: Vec<Vec<u8>>,
    reply: Units,
    afters: Vec<Vec<u8>>,
}

/// The state machine.
pub struct MemcachedMachine {
    conn: Option<Conn>,
    /// The latest entry's time: time in the log never goes back.
    now_ms: u64,
    /// The server's CAS counter: the last CAS value it gave an item (the same on every
    /// replica, which apply the same requests to servers started alike). Followed by looking
    /// up the key each request may renew; a state transfer carries it.
    cas_counter: u64,
    shared: Arc<MachineShared>,
}

impl MemcachedMachine {
    /// The machine of replica `me`, applying to the server on `socket` (running already).
    pub fn new(me: u16, socket: &Path) -> Result<(MemcachedMachine, Arc<MachineShared>), String> {
        let conn = Conn::connect(socket)
            .and_then(|c| c.with_timeout(SERVER_REPLY_WAIT))
            .map_err(|e| format!("connecting to memcached: {e}"))?;
        let incarnation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let shared = Arc::new(MachineShared {
            me,
            incarnation,
            replies: Mutex::default(),
            replied: Condvar::new(),
            failure: Mutex::default(),
            expiries: Mutex::default(),
        });
        let machine = MemcachedMachine {
            conn: Some(conn),
            now_ms: 0,
            cas_counter: 0,
            shared: shared.clone(),
        };
        Ok((machine, shared))
    }

    /// Applies one request at the log's time `now_ms`; its reply, kept whole only if `wanted`
    /// (a client of this replica waits for it).
    fn apply_request(
        &mut self,
        expiries: &mut Expiries,
        frame: &[u8],
        wanted: bool,
    ) -> Result<Vec<u8>, String> {
        // The front proposes only replicated requests; checked again, as every replica checks.
        if let Kind::Refused(reply) = rewrite::kind(frame) {
            return Ok(reply.into_bytes());
        }
        let plan = match rewrite::plan(frame) {
            Ok(plan) => plan,
            Err(why) => return Ok(format!("CLIENT_ERROR {why}\r\n").into_bytes()),
        };
        let now_ms = self.now_ms;
        let due = expiries.take_due(now_ms);
        self.delete(&due)?;
        let probes: Vec<(&KeyEffect, bool)> =
            plan.keys.iter().filter_map(|k| probe(expiries, k).map(|before| (k, before))).collect();
        let renews = plan.renews.as_deref();
        let RoundTrip { befores, reply, afters } =
            self.round_trip(&probes, renews, &plan.to_server, wanted)?;
        // The renewed key's CAS, if it has one now: the counter's, had the command renewed it.
        if let Some(renewed) = afters.get(probes.len()).and_then(|unit| cas(unit)) {
            self.cas_counter = self.cas_counter.max(renewed);
        }
        let mut befores = befores.iter();
        for ((effect, probed_before), after) in probes.iter().zip(&afters) {
            let before = if *probed_before { cas(befores.next().expect("counted")) } else { None };
            let expiry = new_expiry(effect, *probed_before, before, cas(after), now_ms);
            if let Some(expiry) = expiry {
                expiries.set(&effect.key, expiry);
            }
        }
        // The table empties only if the server flushed (its `OK`, or nothing with `noreply`).
        // A flush also takes a CAS value (memcached marks older items flushed by it).
        if plan.flush && (reply.units.is_empty() || reply.units == [b"OK\r\n"]) {
            expiries.clear();
            self.cas_counter += 1;
        }
        // Items stored dead on arrival (a negative or past exptime): gone now, as on a bare server.
        self.delete(&expiries.take_due(now_ms))?;
        if reply.bytes > REPLY_BYTES_MAX {
            return Ok(REPLY_TOO_LARGE.as_bytes().to_vec());
        }
        Ok(reply_of(expiries, now_ms, &plan, &reply.units))
    }

    /// Sends the look-ups before (`probes` marked `true`), `mn`, the command, `mn`, the look-ups
    /// after (every probe, then the key the command may renew), `mn`, in one write; returns the
    /// replies of each part, the
    /// command's kept up to [`REPLY_BYTES_MAX`] if `wanted` (else a few KiB), all counted. The
    /// `mn`s frame the command's replies whatever they are; look-up replies that do not match
    /// the look-ups, or bytes after the last `MN`, are an error.
    fn round_trip(
        &mut self,
        probes: &[(&KeyEffect, bool)],
        renews: Option<&[u8]>,
        command: &[u8],
        wanted: bool,
    ) -> Result<RoundTrip, String> {
        let before_count = probes.iter().filter(|(_, before)| *before).count();
        let mut out = Vec::new();
        for (effect, _) in probes.iter().filter(|(_, before)| *before) {
            cas_command(&effect.key, &mut out);
        }
        out.extend_from_slice(b"mn\r\n");
        out.extend_from_slice(command);
        out.extend_from_slice(b"mn\r\n");
        for (effect, _) in probes {
            cas_command(&effect.key, &mut out);
        }
        if let Some(key) = renews {
            cas_command(key, &mut out);
        }
        out.extend_from_slice(b"mn\r\n");
        let conn = self.conn()?;
        conn.send(&out)?;
        let befores = conn.units_to_mn(LOOKUP_REPLY_BYTES_MAX)?;
        let keep_bytes_max = if wanted { REPLY_BYTES_MAX } else { UNWANTED_REPLY_BYTES_MAX };
        let reply = conn.units_to_mn(keep_bytes_max)?;
        let afters = conn.units_to_mn(LOOKUP_REPLY_BYTES_MAX)?;
        conn.check_drained()?;
        let after_count = probes.len() + usize::from(renews.is_some());
        for (part, units, due) in
            [("before", &befores, before_count), ("after", &afters, after_count)]
        {
            if units.units.len() != due || units.cut() {
                return Err(format!(
                    "memcached answered the {due} look-ups {part} the command with {} replies",
                    units.units.len()
                ));
            }
        }
        Ok(RoundTrip { befores: befores.units, reply, afters: afters.units })
    }

    /// Deletes `keys` from the server, a bounded number per write: the server's replies (a line
    /// each) must never fill the socket while the front is still writing.
    fn delete(&mut self, keys: &[Vec<u8>]) -> Result<(), String> {
        for chunk in keys.chunks(DELETES_PER_WRITE) {
            let mut out = Vec::new();
            for key in chunk {
                delete_command(key, &mut out);
            }
            self.conn()?.call(&out)?;
        }
        Ok(())
    }

    fn conn(&mut self) -> Result<&mut Conn, String> {
        self.conn.as_mut().ok_or_else(|| "the connection to memcached failed before".into())
    }

    fn fail(&mut self, why: String) {
        self.conn = None;
        let mut failure = self.shared.failure.lock().unwrap_or_else(|p| p.into_inner());
        if failure.is_none() {
            warn!(target: LOG_TARGET, "{why}");
            *failure = Some(why);
        }
    }
}

impl MemcachedMachine {
    /// This replica's state: every item of its server, the expiry table, the log's time and
    /// the server's CAS counter.
    fn take_snapshot(&mut self) -> Result<Snapshot, String> {
        let expiries = self.shared.expiries();
        let items = transfer::read_items(self.conn()?)?;
        Ok(Snapshot { now_ms: self.now_ms, cas_counter: self.cas_counter, expiries, items })
    }

    /// Replaces this replica's state with `snapshot`'s: its server emptied (by deletes, which
    /// take no CAS value) and given the snapshot's items with their CAS values.
    fn install(&mut self, mut snapshot: Snapshot) -> Result<(), String> {
        let keys = transfer::read_keys(self.conn()?)?;
        self.delete(&keys)?;
        let counter = self.cas_counter;
        transfer::write_items(self.conn()?, &mut snapshot.items, counter, snapshot.cas_counter)?;
        self.cas_counter = snapshot.cas_counter;
        self.now_ms = snapshot.now_ms;
        let mut expiries = self.shared.expiries.lock().unwrap_or_else(|p| p.into_inner());
        expiries.clear();
        for (key, at_ms) in &snapshot.expiries {
            expiries.set(key, Some(*at_ms));
        }
        Ok(())
    }
}

impl StateMachine for MemcachedMachine {
    /// Fails this replica if its server's connection broke meanwhile (its replies would be out
    /// of step with the commands from there).
    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        match self.take_snapshot() {
            Ok(snapshot) => {
                snapshot.encode(out);
                Ok(())
            }
            Err(why) => {
                self.fail(format!("replica {}: taking a snapshot: {why}", self.shared.me));
                Err(why)
            }
        }
    }

    /// A replica whose server numbered CAS values past the snapshot's stops, saying to restart
    /// it: a fresh server can be given every item's CAS, one that went further cannot.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let snapshot = Snapshot::decode(snapshot)?;
        let (items, counter) = (snapshot.items.len(), snapshot.cas_counter);
        if let Err(why) = self.install(snapshot) {
            self.fail(format!("replica {}: restoring a state transfer: {why}", self.shared.me));
            return Err(why);
        }
        tracing::info!(target: LOG_TARGET, items, cas_counter = counter, "restored from a state transfer");
        Ok(())
    }

    fn apply(&mut self, _index: u64, request: &[u8]) {
        let Some(entry) = Entry::decode(request) else {
            warn!(target: LOG_TARGET, "an entry that is not memcached's");
            return;
        };
        self.now_ms = self.now_ms.max(entry.now_ms);
        let shared = self.shared.clone();
        let mine = entry.origin == shared.me && entry.incarnation == shared.incarnation;
        let wanted = mine
            && shared
                .replies
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pending
                .contains(&entry.seq);
        let mut expiries = shared.expiries.lock().unwrap_or_else(|p| p.into_inner());
        let reply = match self.apply_request(&mut expiries, entry.request, wanted) {
            Ok(reply) => reply,
            Err(why) => {
                self.fail(format!("replica {}: its memcached: {why}", self.shared.me));
                b"SERVER_ERROR this replica's memcached failed\r\n".to_vec()
            }
        };
        drop(expiries);
        if mine {
            let mut replies = self.shared.replies.lock().unwrap_or_else(|p| p.into_inner());
            if replies.pending.contains(&entry.seq) {
                replies.ready.insert(entry.seq, reply);
                self.shared.replied.notify_all();
            }
        }
    }
}

/// Whether to look `effect`'s key up around the command: `Some(true)` before and after,
/// `Some(false)` after only, `None` not at all (the command cannot change its expiry).
fn probe(expiries: &Expiries, effect: &KeyEffect) -> Option<bool> {
    let sets = |t: Option<i64>| t.is_some_and(|t| t != 0);
    let has_expiry = expiries.get(&effect.key).is_some();
    let needed =
        has_expiry || sets(effect.on_store) || sets(effect.on_create) || sets(effect.on_hit);
    let before = effect.on_store.is_some() || effect.on_create.is_some();
    needed.then_some(before)
}

/// The command's reply units as the client gets them, a `t` flag answered from the table.
fn reply_of(expiries: &Expiries, now_ms: u64, plan: &Plan, units: &[Vec<u8>]) -> Vec<u8> {
    let mut reply: Vec<u8> = units.concat();
    if let (Some(key), Some(first)) = (&plan.ttl_reply_key, units.first()) {
        if let Some(at) = expiries.get(key) {
            let left_s = at.saturating_sub(now_ms).div_ceil(1000);
            // The header line only: a `VA` unit's data block follows it unchanged.
            let header_bytes =
                first.iter().position(|&b| b == b'\n').map_or(first.len(), |n| n + 1);
            reply.splice(..header_bytes, with_ttl(first, left_s));
        }
    }
    reply
}

/// The new expiry of `effect`'s key (`Some(None)`: none), or `None` to leave it, from its CAS
/// before (if looked up) and after the command (`None`: missing).
fn new_expiry(
    effect: &KeyEffect,
    probed_before: bool,
    before: Option<u64>,
    after: Option<u64>,
    now_ms: u64,
) -> Option<Option<u64>> {
    // Missing after the command: it leaves the table.
    let Some(after) = after else { return Some(None) };
    let at = |exptime: i64| Some(expiry_ms(exptime, now_ms));
    let created = probed_before && before.is_none();
    let stored = probed_before && before != Some(after);
    match (effect.on_create, effect.on_store, effect.on_hit) {
        (Some(t), _, _) if created => at(t),
        (_, Some(t), _) if stored => at(t),
        (_, _, Some(t)) => at(t),
        _ => None,
    }
}

/// `mg <key> c`: one line, `HD c<cas>` or `EN` (or an error for a key memcached refuses).
fn cas_command(key: &[u8], out: &mut Vec<u8>) {
    transfer::meta_command(b"mg", key, b"", b"c", out);
}

/// `md <key>`: one line, `HD` or `NF`.
fn delete_command(key: &[u8], out: &mut Vec<u8>) {
    transfer::meta_command(b"md", key, b"", b"", out);
}

/// The CAS in a `mg <key> c` reply, `None` if the key is missing.
fn cas(unit: &[u8]) -> Option<u64> {
    let tokens = tokens(crate::text::line(unit));
    if tokens.first() != Some(&&b"HD"[..]) {
        return None;
    }
    tokens
        .iter()
        .find_map(|t| t.strip_prefix(b"c"))
        .and_then(|c| std::str::from_utf8(c).ok()?.parse().ok())
}

/// A meta reply's header line with its `t` flag saying `left_s`.
fn with_ttl(line: &[u8], left_s: u64) -> Vec<u8> {
    let text = crate::text::line(line);
    let tokens = tokens(text);
    let first_flag = if tokens.first() == Some(&&b"VA"[..]) { 2 } else { 1 };
    let mut out = Vec::with_capacity(line.len() + 8);
    for (i, token) in tokens.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        if i >= first_flag && token.first() == Some(&b't') {
            out.extend_from_slice(format!("t{left_s}").as_bytes());
        } else {
            out.extend_from_slice(token);
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effect() -> KeyEffect {
        KeyEffect { key: b"k".to_vec(), ..Default::default() }
    }

    #[test]
    fn a_store_sets_the_expiry_only_if_it_stored() {
        let set = KeyEffect { on_store: Some(10), ..effect() };
        assert_eq!(new_expiry(&set, true, None, Some(5), 1000), Some(Some(11_000)));
        assert_eq!(new_expiry(&set, true, Some(4), Some(5), 1000), Some(Some(11_000)));
        assert_eq!(new_expiry(&set, true, Some(5), Some(5), 1000), None);
        let set_forever = KeyEffect { on_store: Some(0), ..effect() };
        assert_eq!(new_expiry(&set_forever, true, Some(4), Some(5), 1000), Some(None));
    }

    #[test]
    fn a_missing_key_leaves_the_table_and_a_hit_is_touched() {
        let delete = KeyEffect { may_remove: true, ..effect() };
        assert_eq!(new_expiry(&delete, false, None, None, 0), Some(None));
        assert_eq!(new_expiry(&delete, false, None, Some(3), 0), None);
        let touch = KeyEffect { on_hit: Some(5), ..effect() };
        assert_eq!(new_expiry(&touch, false, None, Some(3), 0), Some(Some(5_000)));
        let vivify = KeyEffect { on_create: Some(7), on_hit: Some(5), ..effect() };
        assert_eq!(new_expiry(&vivify, true, None, Some(3), 0), Some(Some(7_000)));
        assert_eq!(new_expiry(&vivify, true, Some(3), Some(3), 0), Some(Some(5_000)));
    }

    #[test]
    fn probes_and_ttl_replies() {
        let mut out = Vec::new();
        cas_command(b"a b", &mut out);
        delete_command(b"k", &mut out);
        assert_eq!(out, b"mg YSBi b c\r\nmd k\r\n");
        assert_eq!(cas(b"HD c17\r\n"), Some(17));
        assert_eq!(cas(b"HD b c17\r\n"), Some(17));
        assert_eq!(cas(b"EN\r\n"), None);
        assert_eq!(with_ttl(b"VA 3 t-1 f5\r\n", 9), b"VA 3 t9 f5\r\n");
        assert_eq!(with_ttl(b"HD t-1\r\n", 2), b"HD t2\r\n");
    }
}
