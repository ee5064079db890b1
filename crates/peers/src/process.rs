//! Running peer servers: finding their binaries, private directories that are removed afterwards,
//! free loopback ports, child processes that are killed and reaped when dropped, and bounded waits
//! whose errors carry the server's last log lines.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::PeerError;

/// How long a server may take to start answering, and a cluster to form.
pub(crate) const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// Pause between two checks of a condition being waited for.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// How many times a cluster is started afresh when a port picked as free was taken by someone
/// else before the server bound it.
pub(crate) const START_ATTEMPTS_COUNT: u32 = 3;

/// Lines of a server's log quoted in a start error.
const LOG_TAIL_LINES_COUNT: usize = 20;

/// What to run to install the peers' servers.
pub(crate) const INSTALL_HINT: &str = "run scripts/install-peers.sh";

/// The path of `binary_name` for `system`: the Debian package's path, else the first match on
/// `PATH`, else [`PeerError::NotInstalled`].
pub(crate) fn find_binary(
    system: &'static str,
    debian_path: &str,
    binary_name: &str,
) -> Result<PathBuf, PeerError> {
    let debian_path = PathBuf::from(debian_path);
    if is_executable_file(&debian_path) {
        return Ok(debian_path);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|directory| directory.join(binary_name))
            .find(|candidate| is_executable_file(candidate))
    });
    on_path.ok_or_else(|| PeerError::NotInstalled {
        system,
        binary: debian_path.display().to_string(),
        hint: INSTALL_HINT.to_string(),
    })
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path)
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

/// A directory only this user can enter, removed with everything in it when dropped.
#[derive(Debug)]
pub(crate) struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    /// Creates a new directory under `parent` whose name starts with `prefix`.
    pub(crate) fn create(parent: &Path, prefix: &str) -> Result<PrivateDir, PeerError> {
        static CREATED_COUNT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        // The process id and a per-process counter make the name unique among runs; creating with
        // `create` (not `create_all`) fails rather than reuses a directory someone else made.
        let name = format!(
            "{prefix}-{}-{}-{nanos}",
            std::process::id(),
            CREATED_COUNT.fetch_add(1, Ordering::Relaxed)
        );
        let path = parent.join(name);
        fs::DirBuilder::new().mode(0o700).create(&path).map_err(|error| {
            PeerError::Start(format!("creating directory {}: {error}", path.display()))
        })?;
        Ok(PrivateDir { path })
    }

    /// Creates a directory inside this one.
    pub(crate) fn subdir(&self, name: &str) -> Result<PathBuf, PeerError> {
        let path = self.path.join(name);
        fs::DirBuilder::new().mode(0o700).create(&path).map_err(|error| {
            PeerError::Start(format!("creating directory {}: {error}", path.display()))
        })?;
        Ok(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        // Nothing useful can be done about a failure here: the directory is private and under a
        // temporary location, and the measurement's result does not depend on it.
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// The directory for servers' data: tmpfs when the machine has it (so that a peer that syncs its
/// log to disk pays memory speed, as Mu's in-memory log does), else the temporary directory.
pub(crate) fn memory_backed_parent() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// Picks `count` distinct loopback ports that are free now. They are held together until all are
/// picked, so that the same port is not handed out twice; another process may still take one
/// before the server binds it, which callers handle by starting again.
pub(crate) fn free_ports(count: usize) -> Result<Vec<u16>, PeerError> {
    let mut listeners = Vec::with_capacity(count);
    for _ in 0..count {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|error| PeerError::Start(format!("finding a free loopback port: {error}")))?;
        listeners.push(listener);
    }
    listeners
        .iter()
        .map(|listener| {
            listener
                .local_addr()
                .map(|address| address.port())
                .map_err(|error| PeerError::Start(format!("finding a free loopback port: {error}")))
        })
        .collect()
}

/// Whether a start error says a port was taken, so that starting again with other ports can help.
pub(crate) fn is_port_conflict(error: &PeerError) -> bool {
    matches!(error, PeerError::Start(message)
        if message.to_ascii_lowercase().contains("address already in use"))
}

/// A running server, killed and reaped when dropped so that no run leaves processes behind,
/// whether it ends in success, an error or a panic.
#[derive(Debug)]
pub(crate) struct Server {
    name: String,
    child: Child,
    log_path: PathBuf,
}

impl Server {
    /// Starts `binary` with `args`; its standard output and error go to `log_path`. Environment
    /// variables whose names start with `env_prefix_removed` are not passed on, so that settings
    /// meant for another instance of the server do not leak into this one.
    pub(crate) fn spawn(
        name: &str,
        binary: &Path,
        args: &[String],
        log_path: &Path,
        env_prefix_removed: Option<&str>,
    ) -> Result<Server, PeerError> {
        let log = File::create(log_path).map_err(|error| {
            PeerError::Start(format!("{name}: creating log {}: {error}", log_path.display()))
        })?;
        let log_for_stderr = log.try_clone().map_err(|error| {
            PeerError::Start(format!("{name}: opening log {}: {error}", log_path.display()))
        })?;
        let mut command = Command::new(binary);
        command.args(args).stdin(Stdio::null()).stdout(log).stderr(log_for_stderr);
        if let Some(prefix) = env_prefix_removed {
            for (variable, _) in std::env::vars_os() {
                if variable.to_string_lossy().starts_with(prefix) {
                    command.env_remove(&variable);
                }
            }
        }
        let child = command.spawn().map_err(|error| {
            PeerError::Start(format!("{name}: starting {}: {error}", binary.display()))
        })?;
        Ok(Server { name: name.to_string(), child, log_path: log_path.to_path_buf() })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// An error if the server has exited, quoting the end of its log.
    pub(crate) fn check_running(&mut self) -> Result<(), PeerError> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(PeerError::Start(format!(
                "{} exited ({status}); last lines of its log:\n{}",
                self.name,
                self.log_tail()
            ))),
            Err(error) => Err(PeerError::Start(format!("{}: checking on it: {error}", self.name))),
        }
    }

    /// The last lines of the server's log.
    pub(crate) fn log_tail(&self) -> String {
        log_tail(&self.log_path, LOG_TAIL_LINES_COUNT)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Killing fails only if the child has already exited; waiting reaps it either way.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last `lines_count` lines of the file at `path` (reading at most its last 64 KiB).
pub(crate) fn log_tail(path: &Path, lines_count: usize) -> String {
    const TAIL_BYTES_MAX: u64 = 64 * 1024;
    let read = || -> io::Result<String> {
        let mut file = File::open(path)?;
        let length = file.metadata()?.len();
        file.seek(SeekFrom::Start(length.saturating_sub(TAIL_BYTES_MAX)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let first = lines.len().saturating_sub(lines_count);
            let tail = lines[first..].join("\n");
            if tail.is_empty() {
                "(empty)".to_string()
            } else {
                tail
            }
        }
        Err(error) => format!("(could not read {}: {error})", path.display()),
    }
}

/// Calls `attempt` until it returns `Some`, `STARTUP_TIMEOUT` passes, or `servers` has one that
/// exited; `what` names the awaited condition in the timeout error, which quotes every server's
/// log tail.
pub(crate) fn wait_for<T>(
    what: &str,
    servers: &mut [Server],
    attempt: impl FnMut() -> Option<T>,
) -> Result<T, PeerError> {
    wait_for_within(STARTUP_TIMEOUT, what, servers, attempt)
}

/// [`wait_for`] with its own time limit, for servers that start slower than most.
pub(crate) fn wait_for_within<T>(
    timeout: Duration,
    what: &str,
    servers: &mut [Server],
    mut attempt: impl FnMut() -> Option<T>,
) -> Result<T, PeerError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = attempt() {
            return Ok(value);
        }
        for server in servers.iter_mut() {
            server.check_running()?;
        }
        if Instant::now() >= deadline {
            let logs: Vec<String> = servers
                .iter()
                .map(|server| format!("--- {} ---\n{}", server.name(), server.log_tail()))
                .collect();
            return Err(PeerError::Start(format!(
                "timed out after {} s waiting for {what}; last lines of the logs:\n{}",
                timeout.as_secs(),
                logs.join("\n")
            )));
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// Turns an argument list written as string slices into owned strings.
pub(crate) fn args<I, S>(items: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    items.into_iter().map(|item| item.as_ref().to_string_lossy().into_owned()).collect()
}

/// How long a client's read or write on a peer's socket may block before the connection is
/// reported as stuck.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A client connection to `127.0.0.1:port` as the peers' clients use it: Nagle's algorithm off
/// (each small request waits for its answer, so batching would only delay), reads and writes
/// bounded by [`IO_TIMEOUT`]. Returns the buffered read half and the write half.
pub(crate) fn connect_loopback(port: u16) -> io::Result<(BufReader<TcpStream>, TcpStream)> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&address, IO_TIMEOUT)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let writer = stream.try_clone()?;
    Ok((BufReader::new(stream), writer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_dir_is_removed_on_drop() {
        let dir = PrivateDir::create(&std::env::temp_dir(), "mu-peers-test").unwrap();
        let path = dir.path().to_path_buf();
        let inner = dir.subdir("inner").unwrap();
        fs::write(inner.join("file"), b"x").unwrap();
        assert!(path.is_dir());
        drop(dir);
        assert!(!path.exists());
    }

    #[test]
    fn free_ports_are_distinct() {
        let mut ports = free_ports(6).unwrap();
        assert!(ports.iter().all(|&port| port != 0));
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 6);
    }

    #[test]
    fn missing_binary_is_not_installed() {
        let error = find_binary("nothing", "/nonexistent/mu-peers-no-such-binary", "mu-peers-none")
            .unwrap_err();
        assert!(matches!(error, PeerError::NotInstalled { system: "nothing", .. }));
        assert!(error.to_string().contains("install-peers.sh"));
    }

    #[test]
    fn server_is_reaped_and_log_tail_is_quoted() {
        let dir = PrivateDir::create(&std::env::temp_dir(), "mu-peers-test").unwrap();
        let log_path = dir.path().join("log");
        let mut server = Server::spawn(
            "shell",
            Path::new("/bin/sh"),
            &args(["-c", "echo first; echo second >&2; exit 3"]),
            &log_path,
            None,
        )
        .unwrap();
        let error = wait_for("nothing", std::slice::from_mut(&mut server), || None::<()>)
            .unwrap_err()
            .to_string();
        assert!(error.contains("first") && error.contains("second"), "{error}");
        assert!(error.contains("exited"), "{error}");
    }
}
