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

/// An RDB with no keys: the header of version 10 (Redis 7.0), the end-of-file opcode and a
/// zero checksum, which Redis reads as "saved without a checksum".
pub const EMPTY_RDB: &[u8] = b"REDIS0010\xff\0\0\0\0\0\0\0\0";

/// What the front answers a handshake command of its server.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    pub reply: Vec<u8>,
    /// The stream starts after this reply, the server's replication offset being this.
    pub stream_from: Option<u64>,
}

/// The answer to `args` (a command's arguments, its name upper-cased first). `PSYNC ? -1` (a
/// server that never had a master) gets a full resync with an empty RDB; `PSYNC <id> <offset>`
/// (a server that already holds data: a deposed leader's, `docs/apps/redis.md`) gets
/// `+CONTINUE`, so that it keeps its data and goes on from its own offset.
pub fn answer(args: &[&[u8]]) -> Result<Answer, String> {
    let ok = |reply: &[u8]| Ok(Answer { reply: reply.to_vec(), stream_from: None });
    match args.first().map(|n| n.to_ascii_uppercase()).as_deref() {
        Some(b"PING") => ok(b"+PONG\r\n"),
        Some(b"PSYNC") => match args.get(1..3) {
            Some([b"?", _]) => {
                let mut reply =
                    format!("+FULLRESYNC {} 0\r\n${}\r\n", REPLID, EMPTY_RDB.len()).into_bytes();
                reply.extend_from_slice(EMPTY_RDB);
                Ok(Answer { reply, stream_from: Some(0) })
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

/// The committed stream on its way to the local server: what the log applied and the front has
/// not written yet, and how much it has written.
#[derive(Default)]
pub struct Feed {
    pub queue: Vec<u8>,
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
}

/// A [`Feed`] shared by the state machine (which fills it) and the feeding thread.
#[derive(Default)]
pub struct SharedFeed {
    pub feed: Mutex<Feed>,
    pub changed: Condvar,
}

impl SharedFeed {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Feed> {
        self.feed.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn push(&self, bytes: &[u8]) {
        self.lock().queue.extend_from_slice(bytes);
        self.changed.notify_all();
    }

    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// Feeds again (a deposed leader's server follows the log once more), to a server that
    /// must come back at offset `expected_offset`.
    pub fn reopen(&self, expected_offset: u64) {
        let mut f = self.lock();
        f.closed = false;
        f.expected_offset = Some(expected_offset);
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

/// Answers the server's handshake on `stream`, then writes the feed into it until the feed
/// closes or the connection breaks (an error). The server's `REPLCONF ACK`s are read and
/// dropped by a thread of their own.
pub fn serve(mut stream: TcpStream, feed: &SharedFeed) -> Result<(), String> {
    let base = handshake(&mut stream)?;
    {
        let mut f = feed.lock();
        if f.closed {
            // This replica leads (or is giving its leadership up, and has not yet checked its
            // server's offset): no link until the feed reopens.
            return Err("the front does not feed its server now".into());
        }
        if let Some(expected) = f.expected_offset.filter(|&e| e != base) {
            // Bytes written on the last link never reached it (or it lost its data): feeding
            // on would skip or repeat part of the stream.
            return Err(format!(
                "the local server came back at offset {base}, not {expected}: it cannot follow \
                 the log from there"
            ));
        }
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
            while f.queue.is_empty() && !f.closed {
                f = feed.changed.wait(f).unwrap_or_else(|p| p.into_inner());
            }
            if f.closed {
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

/// Reads the server's handshake commands and answers each, up to `PSYNC`: the server's offset
/// where the stream starts.
fn handshake(stream: &mut TcpStream) -> Result<u64, String> {
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        while let Some(c) = parse_command(&buf, &Limits::CLIENT)
            .map_err(|e| format!("the local server's handshake: {e}"))?
        {
            let args: Vec<&[u8]> = c.args.iter().map(|r| &buf[r.clone()]).collect();
            let answer = if args.is_empty() { None } else { Some(answer(&args)?) };
            buf.drain(..c.frame_bytes);
            let Some(answer) = answer else { continue };
            stream.write_all(&answer.reply).map_err(|e| format!("master handshake: {e}"))?;
            if let Some(base) = answer.stream_from {
                stream.set_read_timeout(None).map_err(|e| e.to_string())?;
                return Ok(base);
            }
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
        assert_eq!(answer(&[b"ping"]).unwrap().reply, b"+PONG\r\n");
        let replconf = answer(&[b"REPLCONF", b"capa", b"psync2"]).unwrap();
        assert_eq!(replconf, Answer { reply: b"+OK\r\n".to_vec(), stream_from: None });
        let full = answer(&[b"PSYNC", b"?", b"-1"]).unwrap();
        assert_eq!(full.stream_from, Some(0));
        let text = String::from_utf8_lossy(&full.reply);
        assert!(text.starts_with(&format!("+FULLRESYNC {REPLID} 0\r\n$18\r\nREDIS0010")));
        assert!(full.reply.ends_with(EMPTY_RDB));
        assert_eq!(EMPTY_RDB.len(), 18);
    }

    #[test]
    fn a_server_with_data_continues_from_its_offset() {
        let id = b"0123456789012345678901234567890123456789";
        let cont = answer(&[b"PSYNC", id, b"1235"]).unwrap();
        assert_eq!(cont.reply, format!("+CONTINUE {REPLID}\r\n").into_bytes());
        assert_eq!(cont.stream_from, Some(1234));
        assert!(answer(&[b"PSYNC", id, b"x"]).is_err());
        assert!(answer(&[b"PSYNC"]).is_err());
        assert!(answer(&[b"SYNC"]).is_err());
    }

    /// A server's side of the link: connects to the front's master at `port` and asks to go on
    /// from `offset` (its handshake answered, the stream follows).
    fn server_at(port: u16, offset: u64) -> TcpStream {
        let mut server = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let next = (offset + 1).to_string();
        let mut psync = Vec::new();
        crate::resp::encode_command(&[b"PSYNC", REPLID.as_bytes(), next.as_bytes()], &mut psync);
        server.write_all(&psync).unwrap();
        let mut reply = vec![0u8; format!("+CONTINUE {REPLID}\r\n").len()];
        server.read_exact(&mut reply).unwrap();
        server
    }

    fn linked(
        feed: &std::sync::Arc<SharedFeed>,
        offset: u64,
    ) -> (TcpStream, std::thread::JoinHandle<Result<(), String>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let serving = {
            let feed = feed.clone();
            std::thread::spawn(move || serve(listener.accept().unwrap().0, &feed))
        };
        (server_at(port, offset), serving)
    }

    /// Bytes taken from the queue are counted before they are written, and the promotion's
    /// wait sees the link left only once no byte is in flight.
    #[test]
    fn bytes_in_flight_count_as_sent_and_the_feed_closes_behind_them() {
        let feed = std::sync::Arc::new(SharedFeed::default());
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
    /// its server) no link comes up; once it reopens, only at the offset it expects.
    #[test]
    fn a_closed_feed_refuses_the_link_and_a_reopened_one_expects_its_offset() {
        let feed = std::sync::Arc::new(SharedFeed::default());
        feed.close();
        let (_server, serving) = linked(&feed, 0);
        assert!(serving.join().unwrap().is_err());
        assert!(!feed.lock().ever_connected);
        feed.reopen(500);
        let (_server, serving) = linked(&feed, 400);
        assert!(serving.join().unwrap().unwrap_err().contains("not 500"));
        let (_server, serving) = linked(&feed, 500);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !feed.lock().connected {
            assert!(std::time::Instant::now() < deadline, "the link never came up");
            std::thread::sleep(Duration::from_millis(1));
        }
        feed.close();
        assert_eq!(feed.wait_unlinked(Duration::from_secs(10)), Ok(500));
        assert_eq!(serving.join().unwrap(), Ok(()));
    }
}
