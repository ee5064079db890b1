//! The replica's own `memcached`, on a private Unix socket, its output in the run directory; and
//! [`Conn`], a blocking connection to it that reads replies unit by unit (a line, or a `VALUE`
//! or `VA` line with its data block), so that the `MN` the front appends after each command
//! delimits the command's replies whatever they hold.

use mu_procs::child::ServerChild;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long the server may take to accept connections once started.
const START_WAIT: Duration = Duration::from_secs(10);
/// How long a probe of a starting server waits for its answer before it tries again.
const PROBE_WAIT: Duration = Duration::from_millis(500);

/// Every replica's server gets the same memory, and answers `SERVER_ERROR out of memory`
/// rather than evicting (`-M`): eviction depends on each server's own LRU and would make
/// replicas differ.
pub const MEMORY_MB: u32 = 64;

/// The longest line the front reads from its server (a `stats` line, a reply's header).
const REPLY_LINE_BYTES_MAX: usize = 64 << 10;

/// How much one read from the server takes.
const READ_CHUNK_BYTES: usize = 64 << 10;

/// Where replica `id`'s server lives, in the run directory.
#[derive(Clone, Debug)]
pub struct ServerPaths {
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl ServerPaths {
    pub fn new(run_dir: &Path, id: u16) -> ServerPaths {
        ServerPaths {
            socket: run_dir.join(format!("memcached-server-{id}.sock")),
            log: run_dir.join(format!("memcached-server-{id}.log")),
        }
    }
}

/// A running `memcached`, killed when dropped.
pub struct MemcachedServer {
    _child: ServerChild,
    pub paths: ServerPaths,
}

impl MemcachedServer {
    /// Starts `binary` on its socket; returns once it answers.
    pub fn start(binary: &Path, paths: ServerPaths) -> Result<MemcachedServer, String> {
        let _ = std::fs::remove_file(&paths.socket);
        let log = std::fs::File::create(&paths.log)
            .map_err(|e| format!("creating {}: {e}", paths.log.display()))?;
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        let mut command = Command::new(binary);
        command
            .arg("-s")
            .arg(&paths.socket)
            .args(["-a", "0700", "-M", "-m", &MEMORY_MB.to_string(), "-U", "0"])
            // No background thread that moves items or memory by the server's own clock
            // (the LRU maintainer, which also schedules crawls that reclaim flushed items;
            // the slab rebalancer): where memory runs short, whether a store fails must not
            // depend on when one server's thread ran. The crawler itself stays, for
            // `lru_crawler metadump` on the private socket (tests compare replicas with it).
            .args(["-o", "no_lru_maintainer,slab_automove=0"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        if mu_procs::user::euid() == 0 {
            // Memcached refuses to run as root unless told which user to stay.
            command.args(["-u", "root"]);
        }
        let what = format!("memcached on {}", paths.socket.display());
        let socket = paths.socket.clone();
        let child =
            ServerChild::start(&mut command, &what, &paths.log, START_WAIT, || answers(&socket))?;
        Ok(MemcachedServer { _child: child, paths })
    }
}

/// Whether a memcached answers on `socket`: one `mn`, answered `MN` within [`PROBE_WAIT`].
/// One only: [`Conn::call`] adds its own, and a probe that sent two (the server answering both
/// in one write) took the second `MN` for replies out of step, for ever, so that the replica
/// never started.
fn answers(socket: &Path) -> bool {
    Conn::connect(socket)
        .and_then(|c| c.with_timeout(PROBE_WAIT))
        .is_ok_and(|mut c| c.call(b"").is_ok())
}

/// Reply units up to an `MN`: those kept, and the bytes of all (kept or not).
#[derive(Debug, Default)]
pub struct Units {
    pub units: Vec<Vec<u8>>,
    pub bytes: usize,
}

impl Units {
    /// Whether units were dropped (more bytes came than were to be kept).
    pub fn cut(&self) -> bool {
        self.units.iter().map(Vec::len).sum::<usize>() < self.bytes
    }
}

/// A connection to the server.
pub struct Conn {
    stream: UnixStream,
    buf: Vec<u8>,
    /// Where the next unit starts in `buf`.
    at: usize,
}

impl Conn {
    pub fn connect(socket: &Path) -> std::io::Result<Conn> {
        Ok(Conn::of(UnixStream::connect(socket)?))
    }

    fn of(stream: UnixStream) -> Conn {
        Conn { stream, buf: Vec::new(), at: 0 }
    }

    /// Gives up reading a reply after `timeout`: an error rather than a wait for ever.
    pub fn with_timeout(self, timeout: Duration) -> std::io::Result<Conn> {
        self.stream.set_read_timeout(Some(timeout))?;
        self.stream.set_write_timeout(Some(timeout))?;
        Ok(self)
    }

    /// Sends `commands` followed by `mn` and returns the reply units before the `MN`. Bytes
    /// after the `MN` are an error: the replies are no longer in step with the commands.
    pub fn call(&mut self, commands: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let mut out = Vec::with_capacity(commands.len() + 4);
        out.extend_from_slice(commands);
        out.extend_from_slice(b"mn\r\n");
        self.send(&out)?;
        let units = self.units_to_mn(usize::MAX)?.units;
        self.check_drained()?;
        Ok(units)
    }

    /// Sends `command` as it is (for `lru_crawler metadump`, after which memcached reads no
    /// further command until it is done; and for commands whose replies are read with
    /// [`Conn::units_to_mn`]).
    pub fn send(&mut self, command: &[u8]) -> Result<(), String> {
        self.stream.write_all(command).map_err(|e| format!("writing to memcached: {e}"))
    }

    /// The reply units up to the next `MN`, keeping them while they hold at most
    /// `keep_bytes_max` bytes in all; the rest are read and dropped (counted in `bytes`).
    pub fn units_to_mn(&mut self, keep_bytes_max: usize) -> Result<Units, String> {
        let mut units = Units::default();
        loop {
            let unit = self.unit()?;
            if unit == b"MN\r\n" {
                return Ok(units);
            }
            units.bytes = units.bytes.saturating_add(unit.len());
            if units.bytes <= keep_bytes_max {
                units.units.push(unit);
            }
        }
    }

    /// An error if bytes the front has not asked for wait after the last `MN`.
    pub fn check_drained(&self) -> Result<(), String> {
        match self.buf.len() - self.at {
            0 => Ok(()),
            n => Err(format!("memcached sent {n} bytes after the MN that ended the replies")),
        }
    }

    /// The next reply unit: a line, or a `VALUE` or `VA` line with its data block.
    pub fn unit(&mut self) -> Result<Vec<u8>, String> {
        let line_bytes = loop {
            let pending = &self.buf[self.at..];
            if let Some(n) = pending.iter().position(|&b| b == b'\n') {
                break n + 1;
            }
            if pending.len() > REPLY_LINE_BYTES_MAX {
                return Err("memcached sent a line longer than the front reads".into());
            }
            self.fill()?;
        };
        let data_bytes = data_bytes(&self.buf[self.at..self.at + line_bytes])?;
        let unit_bytes = line_bytes + data_bytes.map_or(0, |n| n + 2);
        while self.buf.len() - self.at < unit_bytes {
            self.fill()?;
        }
        let unit = self.buf[self.at..self.at + unit_bytes].to_vec();
        self.at += unit_bytes;
        Ok(unit)
    }

    fn fill(&mut self) -> Result<(), String> {
        // What was read already goes, so that a long reply never piles up in `buf`.
        if self.at == self.buf.len() || self.at >= READ_CHUNK_BYTES {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        let mut chunk = [0u8; READ_CHUNK_BYTES];
        loop {
            return match self.stream.read(&mut chunk) {
                Ok(0) => Err("memcached closed the connection".into()),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    Ok(())
                }
                // A read with a timeout fails with EINTR once the process is stopped and
                // continued (SIGSTOP, SIGCONT), whatever the signal handlers.
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    Err(format!("reading from memcached: no answer within the timeout ({e})"))
                }
                Err(e) => Err(format!("reading from memcached: {e}")),
            };
        }
    }
}

/// The length of the data block after a reply line: `VALUE <key> <flags> <bytes> [<cas>]` and
/// `VA <bytes> <flags>*` carry one.
fn data_bytes(line: &[u8]) -> Result<Option<usize>, String> {
    let tokens = crate::text::tokens(crate::text::line(line));
    let at = match tokens.first().copied() {
        Some(b"VALUE") => 3,
        Some(b"VA") => 1,
        _ => return Ok(None),
    };
    tokens
        .get(at)
        .and_then(|t| crate::text::uint32(t))
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n <= crate::text::VALUE_BYTES_MAX * 2)
        .map(Some)
        .ok_or_else(|| format!("memcached sent {:?}", String::from_utf8_lossy(line)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_lines_carry_data_blocks() {
        assert_eq!(data_bytes(b"VALUE k 0 5 9\r\n"), Ok(Some(5)));
        assert_eq!(data_bytes(b"VA 3 t-1 f5\r\n"), Ok(Some(3)));
        assert_eq!(data_bytes(b"HD c3\r\n"), Ok(None));
        assert_eq!(data_bytes(b"END\r\n"), Ok(None));
        assert!(data_bytes(b"VA x\r\n").is_err());
    }

    /// A connection to a fake server that has already sent `replies`.
    fn answered(replies: &[u8]) -> (Conn, UnixStream) {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        theirs.write_all(replies).unwrap();
        (Conn::of(ours).with_timeout(Duration::from_millis(200)).unwrap(), theirs)
    }

    /// Finding 6: replies out of step with the commands stop the caller, rather than answer
    /// the next command with this one's replies.
    #[test]
    fn bytes_after_the_mn_are_an_error() {
        let (mut conn, _server) = answered(b"HD\r\nMN\r\n");
        assert_eq!(conn.call(b"mg k\r\n").unwrap(), vec![b"HD\r\n".to_vec()]);
        let (mut conn, _server) = answered(b"HD\r\nMN\r\nEN\r\n");
        let error = conn.call(b"mg k\r\n").unwrap_err();
        assert!(error.contains("after the MN"), "{error}");
    }

    /// Finding 6: a server that does not answer is an error after the timeout, not a hang.
    #[test]
    fn a_silent_server_is_an_error() {
        let (mut conn, _server) = answered(b"STORED\r\n");
        let error = conn.call(b"set k 0 0 2\r\n").unwrap_err();
        assert!(error.contains("no answer within the timeout"), "{error}");
    }

    /// Finding 4: units past the limit are read and dropped, and counted.
    #[test]
    fn units_past_the_limit_are_dropped() {
        let (mut conn, _server) =
            answered(b"VALUE a 0 3\r\nabc\r\nVALUE b 0 3\r\nxyz\r\nEND\r\nMN\r\nHD\r\nMN\r\n");
        let units = conn.units_to_mn(20).unwrap();
        assert_eq!(units.units, vec![b"VALUE a 0 3\r\nabc\r\n".to_vec()]);
        assert_eq!(units.bytes, 2 * 18 + 5);
        assert!(units.cut());
        let next = conn.units_to_mn(20).unwrap();
        assert_eq!((next.units, next.bytes), (vec![b"HD\r\n".to_vec()], 4));
        assert_eq!(conn.check_drained(), Ok(()));
    }

    /// A starting server is probed with one `mn`, and its `MN` makes it ready even where the
    /// server answers everything that arrived in one write.
    #[test]
    fn a_server_answering_in_one_write_is_ready() {
        let dir = std::env::temp_dir().join(format!("mu-memcached-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("fake.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            let mut chunk = [0u8; 64];
            // What the probe sends, read until a pause: then every `mn` is answered at once.
            stream.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
            while let Ok(n) = stream.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&chunk[..n]);
            }
            let count = got.windows(4).filter(|w| w == b"mn\r\n").count();
            stream.write_all(&b"MN\r\n".repeat(count)).unwrap();
            count
        });
        assert!(answers(&socket));
        assert_eq!(server.join().unwrap(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
