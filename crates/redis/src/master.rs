//! The master a follower's server replicates from: the front answers the Redis replica
//! handshake itself, with an empty RDB, then writes the committed stream into the connection
//! (`docs/apps/redis.md`, "Followers"). The answers are pure ([`answer`]); [`serve`] moves the
//! bytes.

use crate::resp::{parse_command, Limits};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The replication id the front gives its server: fixed, since the server only ever has this
/// one master (the front), which starts it at offset 0.
pub const REPLID: &str = "6d752d72656469732d6d61737465722d30303031";
const _: () = assert!(REPLID.len() == 40);

use crate::history::History;
pub use crate::history::EMPTY_RDB;

/// What the front answers a handshake command of its server.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    pub reply: Vec<u8>,
    /// The stream starts after this reply, the server's replication offset being this.
    pub stream_from: Option<u64>,
}

/// The answer to `args` (a command's arguments, its name upper-cased first). Any `PSYNC` when
/// `start_over` names a history (a deposed leader's server that ran effects the log does not
/// hold, or a state transfer's) gets a full resync with that history's RDB, at its offset;
/// `PSYNC ? -1` (a server that never had a master) one with an empty RDB at offset 0;
/// `PSYNC <id> <offset>` (a server that already holds data: a deposed leader's,
/// `docs/apps/redis.md`) gets `+CONTINUE`, so that it keeps its data and goes on from its own
/// offset.
pub fn answer(args: &[&[u8]], start_over: Option<&History>) -> Result<Answer, String> {
    let ok = |reply: &[u8]| Ok(Answer { reply: reply.to_vec(), stream_from: None });
    match args.first().map(|n| n.to_ascii_uppercase()).as_deref() {
        Some(b"PING") => ok(b"+PONG\r\n"),
        Some(b"PSYNC") => match args.get(1..3) {
            Some([id, _]) if start_over.is_some() || *id == b"?" => {
                let fresh = History::default();
                let from = start_over.unwrap_or(&fresh);
                Ok(Answer { reply: from.full_resync(REPLID), stream_from: Some(from.rdb_offset) })
            }
            Some([_, offset]) => {
                let next: u64 = std::str::from_utf8(offset)
                    .ok()
                    .and_then(|o| o.parse().ok())
                    .filter(|&o| o > 0)
                    .ok_or_else(|| {
                        format!("PSYNC with offset {:?}", String::from_utf8_lossy(offset))
                    })?;
                let reply = format!("+CONTINUE {REPLID}\r\n").into_bytes();
                Ok(Answer { reply, stream_from: Some(next - 1) })
            }
            _ => Err("PSYNC without an id and an offset".into()),
        },
        Some(b"SYNC") => {
            Err("the local server asked for SYNC, which the front does not serve".into())
        }
        // REPLCONF listening-port, capa, ip-address; AUTH (the server has no password).
        _ => ok(b"+OK\r\n"),
    }
}

/// The most of the committed stream a replica keeps to rebuild its server from: beyond it, a
/// leader deposed with effects the log does not hold stops (restart it with `--rejoin`).
pub const HISTORY_BYTES_MAX: usize = 1 << 30;

/// How long a link that comes while the feed is closed waits for it to reopen.
const REOPEN_WAIT: Duration = Duration::from_secs(5);

/// The committed stream on its way to the local server: what the log applied and the front has
/// not written yet, and how much it has written.
#[derive(Default)]
pub struct Feed {
    pub queue: Vec<u8>,
    /// The committed stream's length as applied here (own leaderships' included).
    pub stream_bytes: u64,
    /// The whole committed stream, as an RDB at some offset and the stream after it, while
    /// this replica holds it (`None` once it outgrew [`HISTORY_BYTES_MAX`], or where it did
    /// not apply the log from its start and had no state transfer).
    pub history: Option<History>,
    /// Set when the server's next link must start over: a full resync with the history's RDB,
    /// its stream queued behind it.
    pub resync_full: bool,
    /// Set from a rebuild until this replica leads again: the server was emptied, so an entry
    /// of its last leadership applied since (a proposal whose outcome its leader did not
    /// learn) is fed to it as anybody's.
    pub rebuilding: bool,
    /// Set while a deposed leader's server is being made a replica again, until its offset is
    /// checked: the link it asks for then waits for the check instead of being refused.
    pub reopening: bool,
    /// Counts [`SharedFeed::expect_link`] calls: only a link accepted after the latest one may
    /// wait for the check (one accepted before is a link the server dropped since).
    pub link_generation: u64,
    /// The server's replication offset when its link to the front began.
    pub base_offset: u64,
    /// Bytes taken from the queue for the server on that link (counted when taken, before
    /// they are written, so that no byte in flight is missed): its offset is `base_offset + written_bytes`
    /// once it has run them.
    pub written_bytes: u64,
    /// Set while the front does not feed (this replica leads, or it shuts down).
    pub closed: bool,
    /// Where the server's offset must be when it connects again: where the last link left it
    /// (`None` at first, and once a deposed leader's server follows again).
    pub expected_offset: Option<u64>,
    /// Whether the server's link to the front is up (after its handshake): while it is, the
    /// feeding thread may hold bytes taken from the queue and not yet written.
    pub connected: bool,
    /// Whether the server's link to the front was ever up: a server never fed has nothing to
    /// run.
    pub ever_connected: bool,
    /// Set by a state transfer while the server's link is up: the feeding thread drops that
    /// link, so that the server asks again and starts over from the restored stream.
    pub relink: bool,
}

impl Feed {
    /// Counts committed stream, and keeps it while the history holds it all.
    fn record(&mut self, bytes: &[u8]) {
        self.stream_bytes += bytes.len() as u64;
        if let Some(history) = &mut self.history {
            if history.bytes() + bytes.len() > HISTORY_BYTES_MAX {
                self.history = None;
                tracing::warn!(
                    target: "mu_redis::node",
                    "the committed stream outgrew {HISTORY_BYTES_MAX} bytes: this replica no \
                     longer keeps it, and a leader deposed with effects the log does not hold \
                     will stop"
                );
            } else {
                history.stream.extend_from_slice(bytes);
            }
        }
    }
}

/// A [`Feed`] shared by the state machine (which fills it) and the feeding thread.
#[derive(Default)]
pub struct SharedFeed {
    pub feed: Mutex<Feed>,
    pub changed: Condvar,
}

/// What a deposed leader's server does to follow the log again.
#[derive(Debug, PartialEq, Eq)]
pub enum FollowAgain {
    /// It ran nothing the log does not hold: it keeps its data and goes on from `offset`.
    Continue { offset: u64 },
    /// It ran effects the log does not hold (`server_offset`, the stream ending at
    /// `stream_end`): it starts over, emptied, and runs the whole history.
    Rebuild { server_offset: u64, stream_end: u64 },
}

impl SharedFeed {
    /// A feed that keeps the committed stream's history (a replica that applies the log from
    /// its start), or not.
    pub fn new(keep_history: bool) -> SharedFeed {
        let feed = Feed { history: keep_history.then(History::default), ..Feed::default() };
        SharedFeed { feed: Mutex::new(feed), changed: Condvar::new() }
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Feed> {
        self.feed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Committed stream for the local server to run.
    pub fn push(&self, bytes: &[u8]) {
        let mut f = self.lock();
        f.queue.extend_from_slice(bytes);
        f.record(bytes);
        drop(f);
        self.changed.notify_all();
    }

    /// Committed stream of this replica's own leadership: its server ran it already, unless
    /// it is being rebuilt.
    pub fn push_own(&self, bytes: &[u8]) {
        let mut f = self.lock();
        f.record(bytes);
        if f.rebuilding {
            f.queue.extend_from_slice(bytes);
            drop(f);
            self.changed.notify_all();
        }
    }

    /// Feeds again a deposed leader's server, which its link will find at `server_offset`
    /// (a replica of the front's master already, so that no client's write runs after this
    /// check). The committed stream it may hold ends where the queue (what other leaders
    /// committed since) begins: at that offset it goes on with its data; elsewhere it ran
    /// effects the log does not hold, and is rebuilt from the history (`Err` without one).
    pub fn follow_again(&self, server_offset: u64) -> Result<FollowAgain, String> {
        let mut f = self.lock();
        let stream_end = f.stream_bytes - f.queue.len() as u64;
        let how = if server_offset == stream_end {
            f.expected_offset = Some(stream_end);
            FollowAgain::Continue { offset: stream_end }
        } else if let Some(history) = &f.history {
            f.queue = history.stream.clone();
            f.resync_full = true;
            f.rebuilding = true;
            f.expected_offset = None;
            FollowAgain::Rebuild { server_offset, stream_end }
        } else {
            return Err(format!(
                "its server is at offset {server_offset}, the log's stream ends at {stream_end}, \
                 and this replica does not hold the whole stream to rebuild its server from \
                 (it rejoined, or the stream outgrew {HISTORY_BYTES_MAX} bytes)"
            ));
        };
        f.closed = false;
        f.reopening = false;
        drop(f);
        self.changed.notify_all();
        Ok(how)
    }

    /// Replaces what this replica applied with `history`, the whole committed stream of a
    /// state transfer's donor: its server starts over (its next link gets a full resync with
    /// the history's RDB, the current one is dropped) and runs the rest. Refused while this
    /// replica leads: its server is then no replica to feed.
    pub fn restore(&self, history: History) -> Result<(), String> {
        let mut f = self.lock();
        if f.closed && !f.reopening {
            return Err("a state transfer reached a replica whose server leads".into());
        }
        if history.bytes() > HISTORY_BYTES_MAX {
            return Err(format!("a state transfer of more than {HISTORY_BYTES_MAX} bytes"));
        }
        f.stream_bytes = history.end();
        f.queue = history.stream.clone();
        f.history = Some(history);
        f.resync_full = true;
        // Emptied: an entry of this process's last leadership applied from here is fed to it.
        f.rebuilding = true;
        f.expected_offset = None;
        f.relink = f.connected;
        drop(f);
        self.changed.notify_all();
        Ok(())
    }

    /// The length of the kept stream after the history's RDB (0 without a history).
    pub fn kept_stream_bytes(&self) -> usize {
        self.lock().history.as_ref().map_or(0, |h| h.stream.len())
    }

    /// Whether the kept stream after the history's RDB is longer than `bytes`.
    pub fn wants_compaction(&self, bytes: usize) -> bool {
        self.lock().history.as_ref().is_some_and(|h| h.stream.len() > bytes)
    }

    /// Whether the server is linked: it runs only committed stream (an RDB of it may replace
    /// that stream).
    pub fn linked(&self) -> bool {
        let f = self.lock();
        f.connected && !f.closed
    }

    /// Replaces the kept stream up to `offset` with `rdb`, an RDB of this replica's server at
    /// that offset (`history::History::compact`).
    pub fn compact(&self, rdb: Vec<u8>, offset: u64) -> Result<(), String> {
        match &mut self.lock().history {
            Some(history) => history.compact(rdb, offset),
            None => Err("this replica keeps no history".into()),
        }
    }

    /// A deposed leader's server is about to be made a replica again: the link it asks for
    /// waits for [`SharedFeed::follow_again`] (up to [`REOPEN_WAIT`]).
    pub fn expect_link(&self) {
        let mut f = self.lock();
        f.reopening = true;
        f.link_generation += 1;
    }

    /// What a link accepted now passes to [`serve`].
    pub fn link_generation(&self) -> u64 {
        self.lock().link_generation
    }

    pub fn close(&self) {
        let mut f = self.lock();
        f.closed = true;
        f.reopening = false;
        // Leading again (its new `Leader` entry applied, so any late entry of the last
        // leadership is stale), or stopping: what its leadership commits from here, it ran.
        f.rebuilding = false;
        drop(f);
        self.changed.notify_all();
    }

    /// Waits, the feed closed, until the feeding thread has left the server's link: the offset
    /// where the server's history as the front's replica ends, every byte taken from the queue
    /// counted. `Err` if that takes longer than `wait`.
    pub fn wait_unlinked(&self, wait: Duration) -> Result<u64, String> {
        let deadline = std::time::Instant::now() + wait;
        let mut f = self.lock();
        assert!(f.closed, "the feed is closed first, so that its link does not come back");
        while f.connected {
            let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) else {
                return Err(format!("the feed to the local server did not stop within {wait:?}"));
            };
            f = self.changed.wait_timeout(f, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        Ok(f.base_offset + f.written_bytes)
    }

    /// Whether everything queued has been written.
    pub fn drained(&self) -> bool {
        self.lock().queue.is_empty()
    }
}

/// Answers the server's handshake on `stream` (accepted at `generation`, from
/// [`SharedFeed::link_generation`]), then writes the feed into it until the feed closes or the
/// connection breaks (an error). A link refused (the feed is closed) or dropped by the server
/// before its answer ends at once, `Ok`, with nothing changed. The server's `REPLCONF ACK`s are
/// read and dropped by a thread of their own.
pub fn serve(mut stream: TcpStream, feed: &SharedFeed, generation: u64) -> Result<(), String> {
    let psync = handshake(&mut stream)?;
    {
        let mut f = feed.lock();
        // A deposed leader's server asks as soon as it is made a replica, before its offset
        // is checked: its link waits for that check. Any other link while the feed is closed
        // (this replica leads, or stops; or the server asked before it was promoted, and has
        // dropped that link since) is refused.
        let deadline = std::time::Instant::now() + REOPEN_WAIT;
        while f.closed && f.reopening && f.link_generation == generation {
            let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) else {
                break;
            };
            f = feed.changed.wait_timeout(f, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        // Refused, not failed (the server asks again, or has moved on): nothing changes.
        if f.closed {
            return Ok(());
        }
        // A link the server dropped while it waited (it was promoted meanwhile, say): never
        // answered, lest it take bytes from the queue or a rebuild's resync.
        if dropped(&stream) {
            return Ok(());
        }
        // Answered under the lock that decided it: a rebuild decided meanwhile is not missed.
        let args: Vec<&[u8]> = psync.iter().map(Vec::as_slice).collect();
        let start_over = f.history.as_ref().filter(|_| f.resync_full);
        let answer = answer(&args, start_over)?;
        let base = answer.stream_from.ok_or("PSYNC without a stream")?;
        if let Some(expected) = f.expected_offset.filter(|&e| e != base && !f.resync_full) {
            // Bytes written on the last link never reached it (or it lost its data): feeding
            // on would skip or repeat part of the stream.
            return Err(format!(
                "the local server came back at offset {base}, not {expected}: it cannot follow \
                 the log from there"
            ));
        }
        // A few bytes into an idle socket's buffer: written under the lock, so that the feed's
        // state changes only once the server has its answer.
        stream.write_all(&answer.reply).map_err(|e| format!("master handshake: {e}"))?;
        stream.set_read_timeout(None).map_err(|e| e.to_string())?;
        f.resync_full = false;
        f.relink = false;
        f.base_offset = base;
        f.written_bytes = 0;
        f.connected = true;
        f.ever_connected = true;
    }
    let result = feed_link(&mut stream, feed);
    let mut f = feed.lock();
    f.expected_offset = Some(f.base_offset + f.written_bytes);
    f.connected = false;
    drop(f);
    feed.changed.notify_all();
    result
}

/// Whether the server closed `stream` (it sends nothing after `PSYNC` until answered).
fn dropped(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let closed = matches!(stream.peek(&mut [0u8; 1]), Ok(0));
    stream.set_nonblocking(false).is_err() || closed
}

/// Writes the feed into the link until the feed closes (`Ok`) or the link breaks.
fn feed_link(stream: &mut TcpStream, feed: &SharedFeed) -> Result<(), String> {
    let mut acks = stream.try_clone().map_err(|e| format!("master link: {e}"))?;
    std::thread::Builder::new()
        .name("redis-acks".into())
        .spawn(move || {
            let mut sink = [0u8; 4096];
            while matches!(acks.read(&mut sink), Ok(n) if n > 0) {}
        })
        .map_err(|e| format!("master link: {e}"))?;
    let mut out = Vec::new();
    loop {
        {
            let mut f = feed.lock();
            while f.queue.is_empty() && !f.closed && !f.relink {
                f = feed.changed.wait(f).unwrap_or_else(|p| p.into_inner());
            }
            if f.closed || f.relink {
                // A state transfer's relink: the server asks again, and starts over.
                f.relink = false;
                let _ = stream.shutdown(std::net::Shutdown::Both);
                return Ok(());
            }
            std::mem::swap(&mut out, &mut f.queue);
            // Counted now, under the lock that took them: whoever reads `base_offset + written_bytes`
            // (the catch-up check, the promotion) counts the bytes in flight too.
            f.written_bytes += out.len() as u64;
        }
        stream.write_all(&out).map_err(|e| format!("feeding the local server: {e}"))?;
        out.clear();
        feed.changed.notify_all();
    }
}

/// Reads the server's handshake commands and answers each, up to `PSYNC`: its arguments,
/// unanswered (the feed decides how the stream starts).
fn handshake(stream: &mut TcpStream) -> Result<Vec<Vec<u8>>, String> {
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        while let Some(c) = parse_command(&buf, &Limits::CLIENT)
            .map_err(|e| format!("the local server's handshake: {e}"))?
        {
            let args: Vec<&[u8]> = c.args.iter().map(|r| &buf[r.clone()]).collect();
            if args.first().is_some_and(|name| name.eq_ignore_ascii_case(b"PSYNC")) {
                return Ok(args.iter().map(|a| a.to_vec()).collect());
            }
            let answer = if args.is_empty() { None } else { Some(answer(&args, None)?) };
            buf.drain(..c.frame_bytes);
            let Some(answer) = answer else { continue };
            stream.write_all(&answer.reply).map_err(|e| format!("master handshake: {e}"))?;
        }
        let n = stream.read(&mut chunk).map_err(|e| format!("master handshake: {e}"))?;
        if n == 0 {
            return Err("the local server closed its link during the handshake".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handshake_ends_with_a_full_resync_and_an_empty_rdb() {
        assert_eq!(answer(&[b"ping"], None).unwrap().reply, b"+PONG\r\n");
        let replconf = answer(&[b"REPLCONF", b"capa", b"psync2"], None).unwrap();
        assert_eq!(replconf, Answer { reply: b"+OK\r\n".to_vec(), stream_from: None });
        let full = answer(&[b"PSYNC", b"?", b"-1"], None).unwrap();
        assert_eq!(full.stream_from, Some(0));
        let text = String::from_utf8_lossy(&full.reply);
        assert!(text.starts_with(&format!("+FULLRESYNC {REPLID} 0\r\n$18\r\nREDIS0010")));
        assert!(full.reply.ends_with(EMPTY_RDB));
        assert_eq!(EMPTY_RDB.len(), 18);
    }

    #[test]
    fn a_server_with_data_continues_from_its_offset() {
        let id = b"0123456789012345678901234567890123456789";
        let cont = answer(&[b"PSYNC", id, b"1235"], None).unwrap();
        assert_eq!(cont.reply, format!("+CONTINUE {REPLID}\r\n").into_bytes());
        assert_eq!(cont.stream_from, Some(1234));
        assert!(answer(&[b"PSYNC", id, b"x"], None).is_err());
        assert!(answer(&[b"PSYNC"], None).is_err());
        assert!(answer(&[b"SYNC"], None).is_err());
        // A server to rebuild starts over, whatever it holds.
        let over = answer(&[b"PSYNC", id, b"1235"], Some(&History::default())).unwrap();
        assert_eq!(over.stream_from, Some(0));
        assert!(over.reply.starts_with(format!("+FULLRESYNC {REPLID} 0\r\n").as_bytes()));
    }

    /// A server's side of the link: connects to the front's master at `port` and asks to go on
    /// from `offset` (its handshake answered, the stream follows).
    /// (A refused link gets no answer: the connection closes.)
    fn server_at(port: u16, offset: u64) -> TcpStream {
        let mut server = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let next = (offset + 1).to_string();
        let mut psync = Vec::new();
        crate::resp::encode_command(&[b"PSYNC", REPLID.as_bytes(), next.as_bytes()], &mut psync);
        server.write_all(&psync).unwrap();
        let mut reply = vec![0u8; format!("+CONTINUE {REPLID}\r\n").len()];
        let _ = server.read_exact(&mut reply);
        server
    }

    type Serving = std::thread::JoinHandle<Result<(), String>>;

    /// The front's master for one link, on a port of its own: serves the link it accepts.
    fn serving(feed: &std::sync::Arc<SharedFeed>) -> (u16, Serving) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let feed = feed.clone();
        let serving = std::thread::spawn(move || {
            let stream = listener.accept().unwrap().0;
            let generation = feed.link_generation();
            serve(stream, &feed, generation)
        });
        (port, serving)
    }

    fn linked(feed: &std::sync::Arc<SharedFeed>, offset: u64) -> (TcpStream, Serving) {
        let (port, serving) = serving(feed);
        (server_at(port, offset), serving)
    }

    /// Bytes taken from the queue are counted before they are written, and the promotion's
    /// wait sees the link left only once no byte is in flight.
    #[test]
    fn bytes_in_flight_count_as_sent_and_the_feed_closes_behind_them() {
        let feed = std::sync::Arc::new(SharedFeed::new(true));
        let (mut server, serving) = linked(&feed, 100);
        // More than the socket buffers hold: the write blocks while the server does not read.
        let bytes = vec![b'x'; 32 << 20];
        feed.push(&bytes);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !feed.drained() {
            assert!(std::time::Instant::now() < deadline, "the feed never took the bytes");
            std::thread::sleep(Duration::from_millis(1));
        }
        {
            let f = feed.lock();
            assert!(f.connected);
            assert_eq!(
                f.base_offset + f.written_bytes,
                100 + bytes.len() as u64,
                "counted while in flight"
            );
        }
        feed.close();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            let _ = server.read_to_end(&mut got);
            got.len()
        });
        let at = feed.wait_unlinked(Duration::from_secs(10)).unwrap();
        assert_eq!(at, 100 + bytes.len() as u64);
        assert!(!feed.lock().connected);
        assert_eq!(serving.join().unwrap(), Ok(()));
        assert_eq!(reader.join().unwrap(), bytes.len(), "everything counted was written");
    }

    /// While the feed is closed (this replica leads, or a deposed leader has not yet checked
    /// its server) no link comes up: one that a deposed leader's server asks for waits for the
    /// feed to reopen, any other is refused; and a link comes up only at the offset the feed
    /// expects.
    #[test]
    fn a_closed_feed_holds_the_link_back_and_a_reopened_one_expects_its_offset() {
        let feed = std::sync::Arc::new(SharedFeed::new(true));
        feed.close();
        let (_server, serving) = linked(&feed, 0);
        assert_eq!(serving.join().unwrap(), Ok(()), "refused: no link is expected");
        assert!(!feed.lock().ever_connected);
        // Its own leadership committed 500 bytes; another's 20 came since.
        feed.push_own(&[b'x'; 500]);
        feed.push(&[b'y'; 20]);
        feed.expect_link();
        let early = {
            let feed = feed.clone();
            std::thread::spawn(move || linked(&feed, 500))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!feed.lock().connected, "no link while the feed is closed");
        assert_eq!(feed.follow_again(500), Ok(FollowAgain::Continue { offset: 500 }));
        let (_server, serving) = early.join().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !(feed.lock().connected && feed.drained()) {
            assert!(std::time::Instant::now() < deadline, "the link never took the bytes");
            std::thread::sleep(Duration::from_millis(1));
        }
        feed.close();
        assert_eq!(feed.wait_unlinked(Duration::from_secs(10)), Ok(520));
        assert_eq!(serving.join().unwrap(), Ok(()));
        assert_eq!(feed.follow_again(520), Ok(FollowAgain::Continue { offset: 520 }));
        let (_server, serving) = linked(&feed, 400);
        assert!(serving.join().unwrap().unwrap_err().contains("not 520"));
    }

    /// A deposed leader's server that ran effects the log does not hold starts over: a full
    /// resync empties it, and the whole committed stream follows, its own leadership's
    /// included; without the history, it cannot follow again.
    #[test]
    fn a_server_that_ran_ahead_is_rebuilt_from_the_history() {
        let feed = std::sync::Arc::new(SharedFeed::new(true));
        feed.push(b"before");
        feed.lock().queue.clear(); // written to the server before it led
        feed.close();
        feed.push_own(b"own");
        feed.push(b"next");
        assert_eq!(
            feed.follow_again(12),
            Ok(FollowAgain::Rebuild { server_offset: 12, stream_end: 9 })
        );
        // A proposal of its leadership whose outcome it did not learn turns out committed.
        feed.push_own(b"late");
        let (port, serving) = serving(&feed);
        let mut server = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut psync = Vec::new();
        crate::resp::encode_command(&[b"PSYNC", REPLID.as_bytes(), b"13"], &mut psync);
        server.write_all(&psync).unwrap();
        let mut expected = format!("+FULLRESYNC {REPLID} 0\r\n$18\r\n").into_bytes();
        expected.extend_from_slice(EMPTY_RDB);
        expected.extend_from_slice(b"beforeownnextlate");
        let mut got = vec![0u8; expected.len()];
        server.read_exact(&mut got).unwrap();
        assert_eq!(got, expected);
        feed.close();
        assert_eq!(feed.wait_unlinked(Duration::from_secs(10)), Ok(17));
        feed.push_own(b"leading again");
        assert!(feed.drained(), "a new leadership's stream is its server's own");
        assert_eq!(serving.join().unwrap(), Ok(()));

        let forgetful = SharedFeed::new(false);
        forgetful.push_own(b"own");
        assert!(forgetful.follow_again(4).unwrap_err().contains("does not hold the whole stream"));
        assert_eq!(forgetful.follow_again(3), Ok(FollowAgain::Continue { offset: 3 }));
    }

    /// A state transfer drops the server's link; its next link starts over from the restored
    /// stream (a full resync, then all of it), and then gets what is applied after it. A
    /// replica whose server leads refuses a transfer.
    #[test]
    fn a_restored_feed_starts_its_server_over_from_the_donors_stream() {
        let feed = std::sync::Arc::new(SharedFeed::new(false));
        let (mut old, first) = linked(&feed, 0);
        feed.push(b"lagging");
        let mut got = vec![0u8; 7];
        old.read_exact(&mut got).unwrap();
        feed.restore(History { stream: b"donors".to_vec(), ..History::default() }).unwrap();
        assert_eq!(first.join().unwrap(), Ok(()), "the old link ends");
        assert_eq!(old.read(&mut [0u8; 8]).unwrap(), 0, "and is closed");
        assert_eq!(feed.lock().history.as_ref().unwrap().stream, b"donors", "history held now");
        feed.push(b"+next");
        let (port, serving) = serving(&feed);
        let mut server = TcpStream::connect(("127.0.0.1", port)).unwrap();
        server.write_all(&psync(7)).unwrap();
        let mut expected = format!("+FULLRESYNC {REPLID} 0\r\n$18\r\n").into_bytes();
        expected.extend_from_slice(EMPTY_RDB);
        expected.extend_from_slice(b"donors+next");
        let mut got = vec![0u8; expected.len()];
        server.read_exact(&mut got).unwrap();
        assert_eq!(got, expected);
        feed.close();
        assert_eq!(feed.wait_unlinked(Duration::from_secs(10)), Ok(11));
        assert_eq!(serving.join().unwrap(), Ok(()));
        assert!(feed.restore(History::default()).unwrap_err().contains("leads"));
    }

    /// Once compacted, a rebuild starts the server from the RDB, at its offset, and feeds it
    /// the stream kept after it.
    #[test]
    fn a_rebuild_after_compaction_starts_from_the_rdb() {
        let feed = std::sync::Arc::new(SharedFeed::new(true));
        feed.push(b"0123456789");
        feed.lock().queue.clear(); // written to the server before it led
        feed.compact(b"REDIS0010rdb".to_vec(), 6).unwrap();
        feed.close();
        feed.push_own(b"own");
        let rebuild = FollowAgain::Rebuild { server_offset: 20, stream_end: 13 };
        assert_eq!(feed.follow_again(20), Ok(rebuild));
        let (port, serving) = serving(&feed);
        let mut server = TcpStream::connect(("127.0.0.1", port)).unwrap();
        server.write_all(&psync(20)).unwrap();
        let mut expected = format!("+FULLRESYNC {REPLID} 6\r\n$12\r\nREDIS0010rdb").into_bytes();
        expected.extend_from_slice(b"6789own");
        let mut got = vec![0u8; expected.len()];
        server.read_exact(&mut got).unwrap();
        assert_eq!(got, expected);
        feed.close();
        assert_eq!(feed.wait_unlinked(Duration::from_secs(10)), Ok(13));
        assert_eq!(serving.join().unwrap(), Ok(()));
    }

    /// A PSYNC for `offset`, as a server sends it.
    fn psync(offset: u64) -> Vec<u8> {
        let next = (offset + 1).to_string();
        let mut psync = Vec::new();
        crate::resp::encode_command(&[b"PSYNC", REPLID.as_bytes(), next.as_bytes()], &mut psync);
        psync
    }

    /// A link the server dropped before it was answered (it asked, then was promoted and
    /// deposed) is never answered: it takes no byte from the queue and not the rebuild's
    /// resync, which the server's next link gets.
    #[test]
    fn a_link_the_server_dropped_is_never_answered() {
        let feed = std::sync::Arc::new(SharedFeed::new(true));
        feed.close();
        feed.push_own(b"own");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let serve_next = |generation: u64| {
            let (feed, listener) = (feed.clone(), listener.try_clone().unwrap());
            std::thread::spawn(move || serve(listener.accept().unwrap().0, &feed, generation))
        };
        // Accepted before the check was expected: refused though it asks once it is.
        let serving = serve_next(feed.link_generation());
        let mut early = TcpStream::connect(("127.0.0.1", port)).unwrap();
        feed.expect_link();
        early.write_all(&psync(3)).unwrap();
        assert_eq!(serving.join().unwrap(), Ok(()));
        assert!(!feed.lock().ever_connected, "refused");
        // Accepted after, but dropped before the check: not answered either.
        let serving = serve_next(feed.link_generation());
        let mut dropped = TcpStream::connect(("127.0.0.1", port)).unwrap();
        dropped.write_all(&psync(5)).unwrap();
        drop(dropped);
        std::thread::sleep(Duration::from_millis(50));
        let rebuild = FollowAgain::Rebuild { server_offset: 5, stream_end: 3 };
        assert_eq!(feed.follow_again(5), Ok(rebuild));
        assert_eq!(serving.join().unwrap(), Ok(()));
        assert!(!feed.lock().ever_connected, "not answered");
        assert!(feed.lock().resync_full && !feed.drained(), "the rebuild waits for its link");
        // The server's next link is rebuilt.
        let serving = serve_next(feed.link_generation());
        let mut server = TcpStream::connect(("127.0.0.1", port)).unwrap();
        server.write_all(&psync(5)).unwrap();
        let mut expected = format!("+FULLRESYNC {REPLID} 0\r\n$18\r\n").into_bytes();
        expected.extend_from_slice(EMPTY_RDB);
        expected.extend_from_slice(b"own");
        let mut got = vec![0u8; expected.len()];
        server.read_exact(&mut got).unwrap();
        assert_eq!(got, expected);
        feed.close();
        assert_eq!(feed.wait_unlinked(Duration::from_secs(10)), Ok(3));
        assert_eq!(serving.join().unwrap(), Ok(()));
    }
}
