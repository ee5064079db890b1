//! The leader's replica link to its own server (`docs/apps/redis.md`, "Leader"): the Redis
//! replica handshake, the RDB skipped, then the stream proposed through Mu cut at command
//! boundaries; and [`Committed`], how far the stream is committed, which clients' replies wait
//! for.

use crate::entry::{Boundaries, Entry, Leadership};
use crate::resp::{encode_command, Value};
use crate::server::{unexpected, Conn};
use mu_replica::Replica;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How often the link tells its server how far it has read (Redis drops a replica that says
/// nothing for `repl-timeout`).
const ACK_PERIOD: Duration = Duration::from_secs(1);

/// The longest the pump sleeps with nothing to read (then it acknowledges, if it is time).
const POLL_WAIT: Duration = Duration::from_millis(100);

/// How far this leadership's stream is committed, and the barriers reads wait for.
#[derive(Default)]
pub struct Committed {
    state: Mutex<CommitState>,
    changed: Condvar,
    /// Wakes the pump when a barrier is wanted (the write end of a socket pair it polls).
    wake: Mutex<Option<UnixStream>>,
}

#[derive(Default, Debug)]
struct CommitState {
    /// Counts leaderships of this replica; 0 while it has not led.
    epoch: u64,
    /// The server's replication offset up to which its stream is committed.
    offset: u64,
    /// Set when this leadership ends: nothing more will be committed under it.
    ended: bool,
    /// Barrier tickets handed out, and the highest one a commit begun after it covers.
    barrier_wanted: u64,
    barrier_done: u64,
}

impl CommitState {
    fn verdict(&self, epoch: u64, offset: u64, ticket: u64) -> Option<bool> {
        if self.epoch != epoch || self.ended {
            return Some(false);
        }
        (self.offset >= offset && self.barrier_done >= ticket).then_some(true)
    }
}

impl Committed {
    fn lock(&self) -> std::sync::MutexGuard<'_, CommitState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Begins a leadership whose stream starts at `offset`, woken through `wake`; returns its
    /// epoch.
    pub fn begin(&self, offset: u64, wake: UnixStream) -> u64 {
        *self.wake.lock().unwrap_or_else(|p| p.into_inner()) = Some(wake);
        let mut s = self.lock();
        s.epoch += 1;
        s.offset = offset;
        s.ended = false;
        s.barrier_done = s.barrier_wanted;
        s.epoch
    }

    /// The server's offset up to which the stream is committed.
    pub fn offset(&self) -> u64 {
        self.lock().offset
    }

    /// The current leadership's epoch, if one is under way.
    pub fn epoch(&self) -> Option<u64> {
        let s = self.lock();
        (s.epoch > 0 && !s.ended).then_some(s.epoch)
    }

    /// The stream is committed up to `offset` by a proposal begun once `barrier` was the
    /// latest ticket.
    fn advance(&self, offset: u64, barrier: u64) {
        let mut s = self.lock();
        s.offset = offset;
        s.barrier_done = s.barrier_done.max(barrier);
        drop(s);
        self.changed.notify_all();
    }

    fn barrier_wanted(&self) -> u64 {
        self.lock().barrier_wanted
    }

    /// Ends the leadership under way (it stopped, or another leader's entry was applied).
    pub fn end(&self) {
        self.lock().ended = true;
        self.changed.notify_all();
    }

    /// A ticket for a commit that begins after this call, and a nudge to the pump to make one.
    pub fn want_barrier(&self) -> u64 {
        let ticket = {
            let mut s = self.lock();
            s.barrier_wanted += 1;
            s.barrier_wanted
        };
        if let Some(wake) = self.wake.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            // Non-blocking: a full socket means the pump has wake-ups to read already.
            let _ = wake.write(&[1]);
        }
        ticket
    }

    /// Waits until the stream of leadership `epoch` is committed up to `offset`, by a commit
    /// begun after barrier `ticket` was taken: false if that leadership ended first.
    ///
    /// The second condition is what makes reads linearizable: a replica that was deposed
    /// still holds a server whose offset may already be committed; only a commit begun after
    /// the reply shows that no other leader had committed anything in between (it would have
    /// revoked this one's access, and its entries would have been applied here first, ending
    /// the leadership).
    pub fn wait(&self, epoch: u64, offset: u64, ticket: u64) -> bool {
        let mut s = self.lock();
        loop {
            if let Some(verdict) = s.verdict(epoch, offset, ticket) {
                return verdict;
            }
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// What [`Committed::wait`] would answer now, if it would not wait.
    pub fn verdict(&self, epoch: u64, offset: u64, ticket: u64) -> Option<bool> {
        self.lock().verdict(epoch, offset, ticket)
    }
}

/// Connects to the server at `socket`, just promoted, as its replica, continuing the history it
/// had as the front's replica at offset `at` (`PSYNC <the front's replid> <at + 1>`): returns the
/// connection, positioned at the start of the stream, which starts at `at`.
///
/// A partial resync (`+CONTINUE`) gives every effect the server made since it was promoted
/// (a key it expired at once, say) in the stream. A full resync is taken only where it starts
/// at `at` too (a server that never had the front as its master, and so nothing to expire):
/// an effect made between the promotion and the resync would be in the skipped RDB only, and
/// the followers would never run it.
pub fn open(socket: &Path, at: u64) -> Result<(Conn, u64), String> {
    let mut conn = Conn::connect(socket).map_err(|e| format!("replica link: {e}"))?;
    let ok = |v: &Value| matches!(v, Value::Simple(_));
    for args in [
        &[&b"PING"[..]][..],
        &[b"REPLCONF", b"listening-port", b"0"],
        &[b"REPLCONF", b"capa", b"psync2"],
    ] {
        let reply = conn.call(args)?;
        if !ok(&reply) {
            return Err(unexpected("replica link handshake", &reply));
        }
    }
    let mut psync = Vec::new();
    let next = (at + 1).to_string();
    encode_command(&[b"PSYNC", crate::master::REPLID.as_bytes(), next.as_bytes()], &mut psync);
    conn.stream.write_all(&psync).map_err(|e| format!("replica link: {e}"))?;
    let line = conn.read_frame()?;
    let text = String::from_utf8_lossy(&line).into_owned();
    if text.starts_with("+CONTINUE") {
        return Ok((conn, at));
    }
    let offset = text
        .strip_prefix("+FULLRESYNC ")
        .and_then(|rest| rest.trim_end().split(' ').nth(1))
        .and_then(|o| o.parse::<u64>().ok())
        .ok_or_else(|| format!("replica link: expected +CONTINUE or +FULLRESYNC, got {text:?}"))?;
    if offset != at {
        return Err(format!(
            "replica link: a full resync at offset {offset}, not {at}: the server made effects \
             the stream would not carry"
        ));
    }
    skip_rdb(&mut conn)?;
    Ok((conn, offset))
}

/// Skips the RDB that follows `+FULLRESYNC`: newlines the master sends while it saves, then
/// `$<length>\r\n` and that many bytes (without a CRLF after them).
fn skip_rdb(conn: &mut Conn) -> Result<(), String> {
    loop {
        let buf = conn.buffered();
        let newlines = buf.iter().take_while(|&&b| b == b'\n').count();
        buf.drain(..newlines);
        if !buf.is_empty() {
            break;
        }
        conn.fill()?;
    }
    let len = loop {
        let buf = conn.buffered();
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            let header = String::from_utf8_lossy(&buf[..end]).into_owned();
            let len =
                header.strip_prefix('$').and_then(|n| n.parse::<u64>().ok()).ok_or_else(|| {
                    format!("replica link: expected the RDB's length, got {header:?}")
                })?;
            buf.drain(..end + 2);
            break len;
        }
        if buf.len() > 64 {
            return Err("replica link: no RDB length".into());
        }
        conn.fill()?;
    };
    let mut left = len;
    while left > 0 {
        let buf = conn.buffered();
        let take = (buf.len() as u64).min(left) as usize;
        buf.drain(..take);
        left -= take as u64;
        if left > 0 {
            conn.fill()?;
        }
    }
    Ok(())
}

/// Proposes the stream read from `conn` (starting at `offset`) through `replica`, each entry
/// at most `entry_bytes_max` bytes, and advances `committed` as entries commit; a barrier
/// entry when reads wait for one and there is no stream to propose. `wake` is readable when
/// a barrier is wanted. Returns why it stopped (this replica no longer leads, or the server's
/// link broke).
pub fn pump(
    leadership: Leadership,
    mut conn: Conn,
    mut offset: u64,
    replica: &Replica,
    entry_bytes_max: usize,
    committed: &Committed,
    mut wake: UnixStream,
) -> String {
    let chunk_max = entry_bytes_max - crate::entry::ENTRY_HEADER_BYTES;
    let Some(epoch) = committed.epoch() else { return "no leadership under way".into() };
    let mut boundaries = Boundaries::default();
    let mut pending = std::mem::take(conn.buffered());
    // Bytes of `pending` already scanned, and the end of the last whole command in them.
    let mut scanned = 0;
    let mut whole = 0;
    let mut received = offset + pending.len() as u64;
    let mut barrier_done = committed.barrier_wanted();
    let mut acked = Instant::now();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        if committed.epoch() != Some(epoch) {
            return "another replica's leadership was applied here".into();
        }
        match boundaries.scan(&pending[scanned..]) {
            Ok(Some(end)) => whole = scanned + end,
            Ok(None) => {}
            Err(e) => return format!("the server's replication stream: {e}"),
        }
        scanned = pending.len();
        let cut = if whole > 0 {
            whole
        } else if pending.len() >= chunk_max {
            // One command longer than an entry: its prefix goes as parts.
            pending.len() / chunk_max * chunk_max
        } else {
            0
        };
        // Taken before proposing: the proposal begins after every ticket up to it.
        let barrier = committed.barrier_wanted();
        if cut > 0 || barrier > barrier_done {
            if let Err(e) = propose(replica, leadership, &pending[..cut], whole == cut, chunk_max) {
                return e;
            }
            if committed.epoch() != Some(epoch) {
                return "another replica's leadership was applied here".into();
            }
            offset += cut as u64;
            barrier_done = barrier;
            committed.advance(offset, barrier);
            pending.drain(..cut);
            scanned -= cut;
            whole = 0;
        }
        if acked.elapsed() >= ACK_PERIOD {
            let mut ack = Vec::new();
            encode_command(&[b"REPLCONF", b"ACK", received.to_string().as_bytes()], &mut ack);
            if let Err(e) = conn.stream.write_all(&ack) {
                return format!("replica link: {e}");
            }
            acked = Instant::now();
        }
        match wait_readable(&conn.stream, &wake) {
            Ok((link, woken)) => {
                if woken {
                    let mut drain = [0u8; 256];
                    let _ = wake.read(&mut drain);
                }
                if !link {
                    continue;
                }
            }
            Err(e) => return format!("replica link: {e}"),
        }
        match conn.stream.read(&mut chunk) {
            Ok(0) => return "the server closed the replica link".into(),
            Ok(n) => {
                pending.extend_from_slice(&chunk[..n]);
                received += n as u64;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(e) => return format!("replica link: {e}"),
        }
    }
}

/// Waits up to [`POLL_WAIT`] until the link or the wake socket is readable: which are.
fn wait_readable(link: &UnixStream, wake: &UnixStream) -> std::io::Result<(bool, bool)> {
    let mut fds = [
        libc::pollfd { fd: link.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
    ];
    // SAFETY: `fds` is a valid array of two pollfd for the length given, and both descriptors
    // stay open for the call (borrowed from the streams).
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, POLL_WAIT.as_millis() as libc::c_int) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return if e.kind() == ErrorKind::Interrupted { Ok((false, false)) } else { Err(e) };
    }
    let ready = |f: &libc::pollfd| f.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
    Ok((ready(&fds[0]), ready(&fds[1])))
}

/// Proposes `bytes` as entries of at most `chunk_max` bytes of stream: the last a
/// [`Entry::Stream`] if `ends_command`, every other a part; no bytes: a barrier. Returns once
/// all are committed.
fn propose(
    replica: &Replica,
    leadership: Leadership,
    bytes: &[u8],
    ends_command: bool,
    chunk_max: usize,
) -> Result<(), String> {
    if bytes.is_empty() {
        let mut barrier = Vec::new();
        Entry::Barrier.encode(&mut barrier);
        let mut outcomes = Vec::with_capacity(1);
        replica.propose_many(&[&barrier], &mut outcomes);
        return match outcomes.pop() {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(format!("proposing a barrier: {e}")),
            None => Err("proposing a barrier: no outcome".into()),
        };
    }
    let chunks: Vec<&[u8]> = bytes.chunks(chunk_max).collect();
    let entries: Vec<Vec<u8>> = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut e = Vec::with_capacity(c.len() + crate::entry::ENTRY_HEADER_BYTES);
            let last = i + 1 == chunks.len();
            if last && ends_command {
                Entry::Stream(leadership, c)
            } else {
                Entry::StreamPart(leadership, c)
            }
            .encode(&mut e);
            e
        })
        .collect();
    let requests: Vec<&[u8]> = entries.iter().map(Vec::as_slice).collect();
    let mut outcomes = Vec::with_capacity(requests.len());
    replica.propose_many(&requests, &mut outcomes);
    match outcomes.into_iter().find_map(Result::err) {
        None => Ok(()),
        Some(e) => Err(format!("proposing the stream: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leading(offset: u64) -> (Committed, u64, UnixStream) {
        let c = Committed::default();
        let (wake, pump) = UnixStream::pair().unwrap();
        wake.set_nonblocking(true).unwrap();
        let epoch = c.begin(offset, wake);
        (c, epoch, pump)
    }

    #[test]
    fn a_reply_waits_for_its_offset_and_for_a_commit_begun_after_it() {
        let (c, epoch, mut pump) = leading(100);
        let ticket = c.want_barrier();
        let mut woken = [0u8; 8];
        assert_eq!(pump.read(&mut woken).unwrap(), 1, "the pump was woken");
        // The offset is committed, but by a proposal begun before the reply: not enough.
        c.advance(150, ticket - 1);
        assert_eq!(c.verdict(epoch, 150, ticket), None);
        c.advance(150, ticket);
        assert_eq!(c.verdict(epoch, 150, ticket), Some(true));
        assert_eq!(c.verdict(epoch, 151, ticket), None, "an offset not yet committed");
    }

    #[test]
    fn an_ended_or_later_leadership_fails_the_wait() {
        let (c, epoch, _pump) = leading(0);
        c.end();
        assert_eq!(c.verdict(epoch, 0, 0), Some(false));
        assert!(!c.wait(epoch, 0, 0));
        let (wake, _other) = UnixStream::pair().unwrap();
        let next = c.begin(0, wake);
        assert_ne!(next, epoch);
        assert_eq!(c.verdict(epoch, 0, 0), Some(false));
        assert_eq!(c.verdict(next, 0, 0), Some(true));
    }
}
