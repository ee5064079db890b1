//! One replica's front, started once its replica runs: it accepts clients on a Unix socket in
//! the run directory and, if configured, on the replica's TCP client address (on a follower,
//! both relay to the leader's front), and other fronts' relayed clients on its direct socket.

use crate::front::{direct_socket, serve_client, FrontShared};
use crate::machine::MachineShared;
use crate::text::Limits;
use mu_replica::Replica;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tracing::{debug, info};

const LOG_TARGET: &str = "mu_memcached::node";

/// Where a replica's front listens, and how large an entry is.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub id: u16,
    pub run_dir: PathBuf,
    /// The private server's socket.
    pub server_socket: PathBuf,
    /// The largest request an entry holds.
    pub entry_bytes_max: usize,
    /// Where the front also accepts clients over TCP (`host:port`), besides its Unix socket.
    pub client_address: Option<String>,
    /// Every replica's client address, for followers' answers.
    pub client_addresses: Vec<(u16, String)>,
}

impl NodeConfig {
    /// The front's socket of replica `id`.
    pub fn front_socket(run_dir: &Path, id: u16) -> PathBuf {
        run_dir.join(format!("memcached-{id}.sock"))
    }
}

/// A replica's front, running (its threads live as long as the process).
pub struct MemcachedNode {
    machine: Arc<MachineShared>,
}

impl MemcachedNode {
    pub fn start(
        config: NodeConfig,
        replica: Arc<Replica>,
        machine: Arc<MachineShared>,
    ) -> Result<MemcachedNode, String> {
        // A value leaves room in the entry for the header and the longest line.
        let value_bytes_max = config
            .entry_bytes_max
            .saturating_sub(crate::entry::HEADER_BYTES + Limits::new(0).line_bytes_max + 2);
        let shared = Arc::new(FrontShared::new(
            replica,
            machine.clone(),
            config.server_socket.clone(),
            Limits::new(value_bytes_max),
            config.client_addresses.clone(),
            config.run_dir.clone(),
        ));
        let socket = NodeConfig::front_socket(&config.run_dir, config.id);
        let _ = std::fs::remove_file(&socket);
        let unix = UnixListener::bind(&socket)
            .map_err(|e| format!("binding {}: {e}", socket.display()))?;
        spawn("memcached-front", {
            let shared = shared.clone();
            move || accept_unix(unix, &shared, true)
        })?;
        let direct_socket = direct_socket(&config.run_dir, config.id);
        let _ = std::fs::remove_file(&direct_socket);
        let direct = UnixListener::bind(&direct_socket)
            .map_err(|e| format!("binding {}: {e}", direct_socket.display()))?;
        spawn("memcached-front-direct", {
            let shared = shared.clone();
            move || accept_unix(direct, &shared, false)
        })?;
        if let Some(address) = &config.client_address {
            let tcp = TcpListener::bind(address.as_str())
                .map_err(|e| format!("binding the client address {address}: {e}"))?;
            spawn("memcached-front-tcp", move || {
                for stream in tcp.incoming() {
                    match stream {
                        Ok(stream) => {
                            // Replies go out as soon as they are released.
                            let _ = stream.set_nodelay(true);
                            spawn_client(stream, shared.clone(), true);
                        }
                        Err(e) => debug!(target: LOG_TARGET, "accepting a client: {e}"),
                    }
                }
            })?;
        }
        info!(target: LOG_TARGET, front = %socket.display(), "memcached serving");
        Ok(MemcachedNode { machine })
    }

    /// Why this replica can no longer serve, if so (its server failed): it should stop.
    pub fn failure(&self) -> Option<String> {
        self.machine.failure()
    }
}

/// Accepts clients on `listener` for ever, a thread each; a follower relays them to the
/// leader's front if `relay`.
fn accept_unix(listener: UnixListener, shared: &Arc<FrontShared>, relay: bool) {
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => spawn_client(stream, shared.clone(), relay),
            Err(e) => debug!(target: LOG_TARGET, "accepting a client: {e}"),
        }
    }
}

fn spawn_client<S: Read + Write + AsRawFd + Send + 'static>(
    stream: S,
    shared: Arc<FrontShared>,
    relay: bool,
) {
    let spawned = std::thread::Builder::new()
        .name("memcached-client".into())
        .spawn(move || serve_client(stream, &shared, relay));
    if let Err(e) = spawned {
        debug!(target: LOG_TARGET, "no thread for a client: {e}");
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(drop)
        .map_err(|e| format!("starting thread {name}: {e}"))
}
