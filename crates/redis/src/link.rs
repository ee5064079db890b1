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

/// How long the pump waits for this replica to apply an entry it has committed.
const APPLY_WAIT: Duration = Duration::from_secs(10);

/// How far this leadership's stream is committed, and the barriers reads wait for; and, kept
/// by the state machine under the same lock, how far the log is applied here and whose
/// `Leader` entry was applied last.
///
/// The invariant: a leadership is under way (`ended` false) only while the last `Leader`
/// entry applied here is its own. [`Committed::begin`] starts one only if its marker is that
/// entry, and [`Committed::applied`] ends it when another is applied; both under the lock, so
/// no leadership is ever begun again once another's `Leader` entry replaced it. And
/// [`Committed::advance`] moves the offset only once the entries that carry it are applied
/// here with the leadership still under way: then no other `Leader` entry precedes them in
/// the log, and every replica ran them (none skipped them as stale).
#[derive(Default)]
pub struct Committed {
    state: Mutex<CommitState>,
    changed: Condvar,
    /// Notified when the state machine applies an entry.
    applied: Condvar,
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
    /// The leadership begun last (`None` while this replica has not led).
    leadership: Option<Leadership>,
    /// The log index of the last entry applied here, and the last `Leader` entry applied.
    applied_index: u64,
    leader_applied: Option<Leadership>,
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

    /// Begins `leadership`, whose stream starts at `offset`, woken through `wake`; returns its
    /// epoch. `None`: its `Leader` entry is not the last one applied here (another leader's
    /// came after it), and it must not begin.
    pub fn begin(&self, leadership: Leadership, offset: u64, wake: UnixStream) -> Option<u64> {
        let mut s = self.lock();
        if s.leader_applied != Some(leadership) {
            return None;
        }
        *self.wake.lock().unwrap_or_else(|p| p.into_inner()) = Some(wake);
        s.epoch += 1;
        s.offset = offset;
        s.ended = false;
        s.leadership = Some(leadership);
        s.barrier_done = s.barrier_wanted;
        Some(s.epoch)
    }

    /// The state machine applied the entry at log `index`, a `Leader` entry of `leader` if
    /// one: a leadership of this replica other than `leader` is over.
    pub fn applied(&self, index: u64, leader: Option<Leadership>) {
        let mut s = self.lock();
        s.applied_index = s.applied_index.max(index);
        let mut ended = false;
        if let Some(l) = leader {
            s.leader_applied = Some(l);
            if s.leadership.is_some_and(|mine| mine != l) && !s.ended {
                s.ended = true;
                ended = true;
            }
        }
        drop(s);
        self.applied.notify_all();
        if ended {
            self.changed.notify_all();
        }
    }

    /// Whether `leadership` is the one this process began last: its stream's entries, applied
    /// while it is the log's current leadership, were run by this replica's server already.
    /// (An earlier leadership of this process is stale by then: the later one's `Leader`
    /// entry was applied before it began. A leadership of this replica's id that an earlier
    /// run of it began is not this process's: its server never ran that stream.)
    pub fn began(&self, leadership: Leadership) -> bool {
        self.lock().leadership == Some(leadership)
    }

    /// The state machine was restored from a snapshot taken where `leader` was the last
    /// `Leader` entry applied.
    pub fn restored(&self, leader: Option<Leadership>) {
        self.lock().leader_applied = leader;
    }

    /// Waits until the entry at log `index` is applied here: false if it is not within
    /// [`APPLY_WAIT`].
    pub fn wait_applied(&self, index: u64) -> bool {
        let deadline = Instant::now() + APPLY_WAIT;
        let mut s = self.lock();
        while s.applied_index < index {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { return false };
            s = self.applied.wait_timeout(s, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        true
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

    /// The stream of leadership `epoch` is committed up to `offset` by entries up to log
    /// `index`, proposed once `barrier` was the latest ticket: recorded once they are applied
    /// here, if the leadership is still under way then (false if not).
    fn advance(&self, epoch: u64, index: u64, offset: u64, barrier: u64) -> bool {
        if !self.wait_applied(index) {
            return false;
        }
        let mut s = self.lock();
        if s.epoch != epoch || s.ended {
            return false;
        }
        s.offset = offset;
        s.barrier_done = s.barrier_done.max(barrier);
        drop(s);
        self.changed.notify_all();
        true
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

    /// Waits up to `wait` until the stream of leadership `epoch` is committed up to `offset`:
    /// false if that leadership ended first, or the wait ran out.
    pub fn wait_committed(&self, epoch: u64, offset: u64, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut s = self.lock();
        loop {
            if let Some(verdict) = s.verdict(epoch, offset, 0) {
                return verdict;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { return false };
            s = self.changed.wait_timeout(s, left).unwrap_or_else(|p| p.into_inner()).0;
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
    let next = (at + 1).to_string();
    let (mut conn, line) = psync(socket, crate::master::REPLID, &next)?;
    let text = String::from_utf8_lossy(&line).into_owned();
    if text.starts_with("+CONTINUE") {
        return Ok((conn, at));
    }
    let (_, offset) = full_resync(&text)?;
    if offset != at {
        return Err(format!(
            "replica link: a full resync at offset {offset}, not {at}: the server made effects \
             the stream would not carry"
        ));
    }
    read_rdb(&mut conn, None)?;
    Ok((conn, offset))
}

/// An RDB of the server at `socket` and the offset of its stream it holds the state at: the
/// server's answer to a sub-replica's full resync, which Redis makes from one fork at that
/// offset. `as_replica`: the server must be a replica of the front's master (another
/// replication id is refused: its offsets would not be the stream's); a leader's server, which
/// continues the stream's offsets under an id of its own, is asked with `false`. `Err` also
/// while a replica is not linked to its master (Redis refuses a sub-replica then).
pub fn rdb_at_offset(socket: &Path, as_replica: bool) -> Result<(Vec<u8>, u64), String> {
    let (mut conn, line) = psync(socket, "?", "-1")?;
    let text = String::from_utf8_lossy(&line).into_owned();
    let (id, offset) = full_resync(&text)?;
    if as_replica && id != crate::master::REPLID {
        return Err(format!("an RDB of replication id {id}, not the front's"));
    }
    let mut rdb = Vec::new();
    read_rdb(&mut conn, Some(&mut rdb))?;
    Ok((rdb, offset))
}

/// Connects to the server at `socket` as its replica and asks `PSYNC <id> <next>`: the
/// connection and the first line of the answer.
fn psync(socket: &Path, id: &str, next: &str) -> Result<(Conn, Vec<u8>), String> {
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
    let mut command = Vec::new();
    encode_command(&[b"PSYNC", id.as_bytes(), next.as_bytes()], &mut command);
    conn.stream.write_all(&command).map_err(|e| format!("replica link: {e}"))?;
    let line = conn.read_frame()?;
    Ok((conn, line))
}

/// The replication id and offset of a `+FULLRESYNC <id> <offset>` line.
fn full_resync(text: &str) -> Result<(&str, u64), String> {
    let mut words = text.strip_prefix("+FULLRESYNC ").map(|rest| rest.trim_end().split(' '));
    let id = words.as_mut().and_then(|w| w.next());
    let offset = words.as_mut().and_then(|w| w.next()).and_then(|o| o.parse::<u64>().ok());
    match (id, offset) {
        (Some(id), Some(offset)) => Ok((id, offset)),
        _ => Err(format!("replica link: expected +CONTINUE or +FULLRESYNC, got {text:?}")),
    }
}

/// Reads the RDB that follows `+FULLRESYNC` (into `keep`, or skipped): newlines the master
/// sends while it saves, then `$<length>\r\n` and that many bytes (without a CRLF after them).
fn read_rdb(conn: &mut Conn, mut keep: Option<&mut Vec<u8>>) -> Result<(), String> {
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
        if let Some(keep) = keep.as_deref_mut() {
            keep.extend_from_slice(&buf[..take]);
        }
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
            let index = match propose(replica, leadership, &pending[..cut], whole == cut, chunk_max)
            {
                Ok(index) => index,
                Err(e) => return e,
            };
            offset += cut as u64;
            barrier_done = barrier;
            if !committed.advance(epoch, index, offset, barrier) {
                return "another replica's leadership was applied here (or this replica did not \
                        apply its own entries)"
                    .into();
            }
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
/// all are committed: the log index of the last.
fn propose(
    replica: &Replica,
    leadership: Leadership,
    bytes: &[u8],
    ends_command: bool,
    chunk_max: usize,
) -> Result<u64, String> {
    if bytes.is_empty() {
        let mut barrier = Vec::new();
        Entry::Barrier.encode(&mut barrier);
        let mut outcomes = Vec::with_capacity(1);
        replica.propose_many(&[&barrier], &mut outcomes);
        return match outcomes.pop() {
            Some(Ok(index)) => Ok(index),
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
    let mut last = None;
    for outcome in outcomes {
        match outcome {
            Ok(index) => last = Some(last.unwrap_or(index).max(index)),
            Err(e) => return Err(format!("proposing the stream: {e}")),
        }
    }
    last.ok_or_else(|| "proposing the stream: no outcome".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const A: Leadership = Leadership { node: 0, term_ns: 10 };
    const B: Leadership = Leadership { node: 1, term_ns: 20 };

    fn wake() -> (UnixStream, UnixStream) {
        let (wake, pump) = UnixStream::pair().unwrap();
        wake.set_nonblocking(true).unwrap();
        (wake, pump)
    }

    /// A's marker applied at index 1, and A's leadership begun at `offset`.
    fn leading(offset: u64) -> (Committed, u64, UnixStream) {
        let c = Committed::default();
        c.applied(1, Some(A));
        let (wake, pump) = wake();
        let epoch = c.begin(A, offset, wake).expect("A's marker is the last applied");
        (c, epoch, pump)
    }

    #[test]
    fn a_reply_waits_for_its_offset_and_for_a_commit_begun_after_it() {
        let (c, epoch, mut pump) = leading(100);
        let ticket = c.want_barrier();
        let mut woken = [0u8; 8];
        assert_eq!(pump.read(&mut woken).unwrap(), 1, "the pump was woken");
        // The offset is committed, but by a proposal begun before the reply: not enough.
        c.applied(2, None);
        assert!(c.advance(epoch, 2, 150, ticket - 1));
        assert_eq!(c.verdict(epoch, 150, ticket), None);
        c.applied(3, None);
        assert!(c.advance(epoch, 3, 150, ticket));
        assert_eq!(c.verdict(epoch, 150, ticket), Some(true));
        assert_eq!(c.verdict(epoch, 151, ticket), None, "an offset not yet committed");
    }

    #[test]
    fn an_ended_or_later_leadership_fails_the_wait() {
        let (c, epoch, _pump) = leading(0);
        c.end();
        assert_eq!(c.verdict(epoch, 0, 0), Some(false));
        assert!(!c.wait(epoch, 0, 0));
        let again = Leadership { node: A.node, term_ns: A.term_ns + 1 };
        c.applied(2, Some(again));
        let next = c.begin(again, 0, wake().0).unwrap();
        assert_ne!(next, epoch);
        assert_eq!(c.verdict(epoch, 0, 0), Some(false));
        assert_eq!(c.verdict(next, 0, 0), Some(true));
    }

    /// B's `Leader` entry applied between A's marker and A's taking over its server: A must
    /// not lead (its stream would be skipped everywhere as stale, its clients answered).
    #[test]
    fn a_leadership_another_leader_replaced_never_begins() {
        let c = Committed::default();
        c.applied(1, Some(A));
        c.applied(2, Some(B));
        assert_eq!(c.begin(A, 0, wake().0), None);
        assert_eq!(c.epoch(), None);
    }

    #[test]
    fn another_leaders_entry_ends_the_leadership_for_good() {
        let (c, epoch, _pump) = leading(0);
        c.applied(2, Some(B));
        assert_eq!(c.epoch(), None);
        assert_eq!(c.verdict(epoch, 0, 0), Some(false));
        assert_eq!(c.begin(A, 0, wake().0), None, "not brought back");
        assert_eq!(c.epoch(), None);
    }

    /// Entries committed but not yet applied here may follow another leader's `Leader` entry:
    /// the offset they carry is recorded only once they are applied and the leadership stands.
    #[test]
    fn advance_waits_for_its_entries_to_be_applied() {
        let (c, epoch, _pump) = leading(0);
        let c = Arc::new(c);
        let apply = {
            let c = c.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                c.applied(2, Some(B));
                c.applied(3, None);
            })
        };
        assert!(!c.advance(epoch, 3, 80, 0), "B's entry came before ours");
        apply.join().unwrap();
        assert_eq!(c.offset(), 0);

        let (c, epoch, _pump) = leading(0);
        let c = Arc::new(c);
        let apply = {
            let c = c.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                c.applied(2, None);
            })
        };
        assert!(c.advance(epoch, 2, 80, 0));
        apply.join().unwrap();
        assert_eq!(c.offset(), 80);
    }
}
