//! The replica's own `redis-server`: started as a Redis replica of the front's master port
//! (or alone, for benchmarks), on a private Unix socket, its log and files in the run
//! directory; and [`Conn`], a blocking connection to it that reads whole replies.

use crate::resp::{decode, encode_command, frame_len, Limits, Value};
use mu_procs::child::ServerChild;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Where replica `id`'s server and its files live, in the run directory.
#[derive(Clone, Debug)]
pub struct ServerPaths {
    pub socket: PathBuf,
    pub dir: PathBuf,
    pub log: PathBuf,
}

impl ServerPaths {
    pub fn new(run_dir: &Path, id: u16) -> ServerPaths {
        ServerPaths {
            socket: run_dir.join(format!("redis-server-{id}.sock")),
            dir: run_dir.join(format!("redis-server-{id}")),
            log: run_dir.join(format!("redis-server-{id}.log")),
        }
    }
}

/// How long the server may take to accept connections once started.
const START_WAIT: Duration = Duration::from_secs(10);

/// A running `redis-server`, killed when dropped.
pub struct RedisServer {
    _child: ServerChild,
    pub paths: ServerPaths,
}

impl RedisServer {
    /// Starts `binary` as a replica of the front's master on `master_port`; returns once it
    /// answers on its socket.
    pub fn start(
        binary: &Path,
        paths: ServerPaths,
        master_port: u16,
    ) -> Result<RedisServer, String> {
        let mut command = RedisServer::bare(binary, &paths)?;
        command
            // The front reads the RDB as a plain bulk; no delay before it is sent.
            .args(["--repl-diskless-sync", "no", "--repl-diskless-sync-delay", "0"])
            // The front's master link only breaks when the replica dies: never time it out
            // while a new leader takes over.
            .args(["--repl-timeout", "3600", "--replica-read-only", "yes"])
            // The leader's pump reads its server's stream as fast as Mu commits it, which under
            // load is slower than the server writes it; Redis's default limit for replicas
            // (256 MiB, or 64 MiB for 60 s) would then drop the link and end the leadership.
            // The buffer is bounded instead by the clients, whose replies wait for the commit.
            .args(["--client-output-buffer-limit", "replica 0 0 0"])
            // `DEBUG DIGEST`, asked over the private socket by tests; clients never reach it
            // (the front refuses DEBUG).
            .args(["--enable-debug-command", "local"])
            .args(["--replicaof", "127.0.0.1", &master_port.to_string()]);
        RedisServer::run(command, paths)
    }

    /// Starts `binary` with no master and nothing that ties it to a front: a bare server on
    /// its socket, as a client of an unreplicated Redis would reach it (what `mu bench e2e`
    /// compares the front with). Returns once it answers.
    pub fn start_alone(binary: &Path, paths: ServerPaths) -> Result<RedisServer, String> {
        let command = RedisServer::bare(binary, &paths)?;
        RedisServer::run(command, paths)
    }

    /// The command of a server on `paths`' socket only (no TCP port), without persistence,
    /// its directory made and a stale socket removed.
    fn bare(binary: &Path, paths: &ServerPaths) -> Result<Command, String> {
        std::fs::create_dir_all(&paths.dir)
            .map_err(|e| format!("creating {}: {e}", paths.dir.display()))?;
        let _ = std::fs::remove_file(&paths.socket);
        let mut command = Command::new(binary);
        command
            .args(["--port", "0", "--unixsocketperm", "700", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(&paths.socket)
            .arg("--dir")
            .arg(&paths.dir)
            .arg("--logfile")
            .arg(&paths.log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Ok(command)
    }

    /// Runs `command` and waits until the server answers `PING` on its socket.
    fn run(mut command: Command, paths: ServerPaths) -> Result<RedisServer, String> {
        let what = format!("redis-server on {}", paths.socket.display());
        let socket = paths.socket.clone();
        let child = ServerChild::start(&mut command, &what, &paths.log, START_WAIT, || {
            Conn::connect(&socket).is_ok_and(|mut conn| conn.call(&[b"PING"]).is_ok())
        })?;
        Ok(RedisServer { _child: child, paths })
    }
}

/// A connection to the server that reads whole replies.
pub struct Conn {
    pub stream: UnixStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn connect(socket: &Path) -> std::io::Result<Conn> {
        Ok(Conn { stream: UnixStream::connect(socket)?, buf: Vec::new() })
    }

    /// Sends a command and returns its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Value, String> {
        let mut out = Vec::new();
        encode_command(args, &mut out);
        self.stream.write_all(&out).map_err(|e| format!("writing to the server: {e}"))?;
        let frame = self.read_frame()?;
        Ok(decode(&frame, &Limits::SERVER).map_err(|e| e.to_string())?.expect("a whole frame").0)
    }

    /// Reads the next whole reply, as its bytes.
    pub fn read_frame(&mut self) -> Result<Vec<u8>, String> {
        loop {
            match frame_len(&self.buf, &Limits::SERVER) {
                Ok(Some(len)) => return Ok(self.buf.drain(..len).collect()),
                Ok(None) => self.fill()?,
                Err(e) => return Err(format!("the server's reply: {e}")),
            }
        }
    }

    /// Reads more bytes into the buffer.
    pub fn fill(&mut self) -> Result<(), String> {
        let mut chunk = [0u8; 16 << 10];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err("the server closed the connection".into()),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) => Err(format!("reading from the server: {e}")),
        }
    }

    /// The bytes read and not yet taken.
    pub fn buffered(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }
}

/// Why a reply is not what was expected.
pub fn unexpected(what: &str, value: &Value) -> String {
    format!("{what}: unexpected reply {value:?}")
}
