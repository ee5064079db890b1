//! The client port (`docs/apps/redis.md`, "Clients"): on the leader, each client's commands go
//! to a connection of its own to the private server, and their replies come back once the
//! stream up to the `ROLE` behind them is committed; a follower relays its clients to the
//! leader's front, or answers every command with `-NOTLEADER` when it knows no leader to relay
//! to. One thread per client.

use crate::link::Committed;
use crate::plan::{check_reply, plan, Session, Step};
use crate::resp::{decode, parse_command, role_offset, Limits};
use crate::server::Conn;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use tracing::debug;

const LOG_TARGET: &str = "mu_redis::front";

/// What every client thread reads.
pub struct FrontShared {
    pub committed: Arc<Committed>,
    /// The private server's socket.
    pub server_socket: PathBuf,
    /// The leader as this replica last saw it (-1: none known), for followers' answers.
    pub leader_hint: AtomicI32,
    /// This replica's id and the run directory, where the other fronts' sockets are.
    pub me: u16,
    pub run_dir: PathBuf,
}

/// The socket on which replica `id`'s front takes the clients other fronts forward to it: it
/// never forwards them again (two replicas that each think the other leads would otherwise
/// forward a client round and round).
pub fn direct_socket(run_dir: &std::path::Path, id: u16) -> PathBuf {
    run_dir.join(format!("redis-{id}.direct.sock"))
}

/// Accepts clients on the Unix socket `listener` for ever, a thread each; a follower forwards
/// them to the leader's front if `forward`.
pub fn accept_unix(listener: UnixListener, shared: Arc<FrontShared>, forward: bool) {
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => spawn_client(stream, shared.clone(), forward),
            Err(e) => debug!(target: LOG_TARGET, "accepting a client: {e}"),
        }
    }
}

/// Accepts clients on the TCP `listener` for ever, a thread each.
pub fn accept_tcp(listener: TcpListener, shared: Arc<FrontShared>) {
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                // Replies go out as soon as they are released, not when a segment fills.
                let _ = stream.set_nodelay(true);
                spawn_client(stream, shared.clone(), true);
            }
            Err(e) => debug!(target: LOG_TARGET, "accepting a client: {e}"),
        }
    }
}

fn spawn_client<S: Read + Write + AsRawFd + Send + 'static>(
    stream: S,
    shared: Arc<FrontShared>,
    forward: bool,
) {
    let spawned = std::thread::Builder::new().name("redis-client".into()).spawn(move || {
        if let Err(e) = serve_client(stream, &shared, forward) {
            debug!(target: LOG_TARGET, "client closed: {e}");
        }
    });
    if let Err(e) = spawned {
        debug!(target: LOG_TARGET, "no thread for a client: {e}");
    }
}

/// A client's connection: its bytes, its server connection once it has one, and the
/// leadership that connection belongs to.
struct Client<S> {
    stream: S,
    buf: Vec<u8>,
    server: Option<(Conn, u64)>,
    session: Session,
}

fn serve_client<S: Read + Write + AsRawFd>(
    stream: S,
    shared: &FrontShared,
    forward: bool,
) -> Result<(), String> {
    let mut client = Client { stream, buf: Vec::new(), server: None, session: Session::default() };
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = client.stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(());
        }
        client.buf.extend_from_slice(&chunk[..n]);
        let mut commands = Vec::new();
        let mut at = 0;
        loop {
            match parse_command(&client.buf[at..], &Limits::CLIENT) {
                Ok(Some(c)) => {
                    at += c.frame_bytes;
                    commands.push(c);
                }
                Ok(None) => break,
                Err(e) => {
                    let reply = format!("-ERR Protocol error: {e}\r\n");
                    let _ = client.stream.write_all(reply.as_bytes());
                    return Err(format!("protocol error: {e}"));
                }
            }
        }
        if commands.is_empty() {
            continue;
        }
        let bytes: Vec<u8> = client.buf.drain(..at).collect();
        let epoch = shared.committed.epoch();
        if epoch.is_none() && forward && client.server.is_none() {
            if let Some(mut leader) = leader_front(shared) {
                leader.write_all(&bytes).map_err(|e| format!("to the leader's front: {e}"))?;
                leader.write_all(&client.buf).map_err(|e| format!("to the leader's front: {e}"))?;
                return mu_procs::poll::relay(client.stream, leader);
            }
        }
        let go_on = match epoch {
            Some(epoch) => run_as_leader(&mut client, shared, epoch, &bytes, &commands)?,
            None => answer_as_follower(&mut client, shared, &bytes, &commands)?,
        };
        if !go_on {
            return Ok(());
        }
    }
}

/// A connection to the leader's front (its direct socket), if a leader other than this replica
/// is known and answers.
fn leader_front(shared: &FrontShared) -> Option<UnixStream> {
    let leader = u16::try_from(shared.leader_hint.load(Ordering::Relaxed)).ok()?;
    if leader == shared.me {
        return None;
    }
    UnixStream::connect(direct_socket(&shared.run_dir, leader)).ok()
}

fn answer_as_follower<S: Read + Write>(
    client: &mut Client<S>,
    shared: &FrontShared,
    bytes: &[u8],
    commands: &[crate::resp::Command],
) -> Result<bool, String> {
    // A connection that began under a leadership of this replica does not outlive it.
    if client.server.is_some() {
        return Err("this replica stopped leading".into());
    }
    let leader = match shared.leader_hint.load(Ordering::Relaxed) {
        -1 => "no leader is known yet".to_string(),
        id => format!("replica {id} does"),
    };
    let mut out = Vec::new();
    let mut at = 0;
    for c in commands {
        let name = c.name(&bytes[at..]);
        at += c.frame_bytes;
        if name.is_empty() {
            continue;
        }
        if name == "QUIT" {
            out.extend_from_slice(b"+OK\r\n");
            client.stream.write_all(&out).map_err(|e| e.to_string())?;
            return Ok(false);
        }
        out.extend_from_slice(
            format!("-NOTLEADER this replica does not lead the cluster; {leader}\r\n").as_bytes(),
        );
    }
    client.stream.write_all(&out).map_err(|e| e.to_string())?;
    Ok(true)
}

/// Runs one run of commands through the server; `false` once the client quit.
fn run_as_leader<S: Read + Write>(
    client: &mut Client<S>,
    shared: &FrontShared,
    epoch: u64,
    bytes: &[u8],
    commands: &[crate::resp::Command],
) -> Result<bool, String> {
    match &client.server {
        Some((_, e)) if *e != epoch => return Err("the leadership changed".into()),
        Some(_) => {}
        None => {
            let conn = Conn::connect(&shared.server_socket).map_err(|e| e.to_string())?;
            client.server = Some((conn, epoch));
        }
    }
    let (server, _) = client.server.as_mut().expect("connected above");
    let p = plan(bytes, commands, &mut client.session);
    server.stream.write_all(&p.to_server).map_err(|e| format!("to the server: {e}"))?;
    let mut held = Vec::new();
    for step in p.steps {
        match step {
            Step::Reply | Step::Multi | Step::Queued => {
                let reply = server.read_frame()?;
                check_reply(&step, &reply)?;
                held.extend_from_slice(&reply);
            }
            Step::Local(reply) => held.extend_from_slice(&reply),
            Step::Replace(reply) => {
                server.read_frame()?;
                held.extend_from_slice(&reply);
            }
            Step::Role => {
                let frame = server.read_frame()?;
                let offset = decode(&frame, &Limits::SERVER)
                    .ok()
                    .flatten()
                    .and_then(|(v, _)| role_offset(&v))
                    .ok_or_else(|| {
                        format!("ROLE answered {:?}", String::from_utf8_lossy(&frame))
                    })?;
                let ticket = shared.committed.want_barrier();
                if !shared.committed.wait(epoch, offset, ticket) {
                    // Not committed under this leadership: the client must not see these
                    // replies (their effects may be lost); it reconnects and asks again.
                    return Err("the leadership ended before the replies were committed".into());
                }
                client.stream.write_all(&held).map_err(|e| e.to_string())?;
                held.clear();
            }
            Step::Quit => {
                client.stream.write_all(&held).map_err(|e| e.to_string())?;
                return Ok(false);
            }
        }
    }
    // What is left has no effect: replies of commands queued in a transaction, refusals.
    client.stream.write_all(&held).map_err(|e| e.to_string())?;
    Ok(true)
}
