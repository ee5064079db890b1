//! The client port (`docs/apps/memcached.md`, "Clients"): one thread per client, which frames
//! its requests, proposes the replicated ones (a client's pipelined requests together) and
//! writes their replies once they are committed and applied here; answers `version`, `stats`
//! and `verbosity` from the local server, and refuses the rest. A follower relays its clients to
//! the leader's front; on its direct socket (where other fronts relay to), or while it knows no
//! leader, it answers each replicated request with a `SERVER_ERROR` naming the leader.

use crate::entry::Entry;
use crate::machine::MachineShared;
use crate::rewrite::{kind, Kind};
use crate::server::Conn;
use crate::text::{parse, Limits, Parsed};
use mu_replica::{ProposeError, Replica};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::debug;

const LOG_TARGET: &str = "mu_memcached::front";

/// How long a committed request's reply may take to be applied here.
const REPLY_WAIT: Duration = Duration::from_secs(10);

/// What every client thread reads.
pub struct FrontShared {
    pub replica: Arc<Replica>,
    pub machine: Arc<MachineShared>,
    /// The private server's socket, for the commands answered locally.
    pub server_socket: PathBuf,
    pub limits: Limits,
    /// Each replica's client address, for followers' answers.
    pub client_addresses: Vec<(u16, String)>,
    /// Where the other fronts' direct sockets are.
    pub run_dir: PathBuf,
    next_seq: AtomicU64,
    /// The latest time this front proposed: its entries' times never go back.
    last_now_ms: AtomicU64,
}

impl FrontShared {
    pub fn new(
        replica: Arc<Replica>,
        machine: Arc<MachineShared>,
        server_socket: PathBuf,
        limits: Limits,
        client_addresses: Vec<(u16, String)>,
        run_dir: PathBuf,
    ) -> FrontShared {
        FrontShared {
            replica,
            machine,
            server_socket,
            limits,
            client_addresses,
            run_dir,
            next_seq: AtomicU64::new(0),
            last_now_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.last_now_ms.fetch_max(wall, Ordering::Relaxed).max(wall)
    }
}

/// The socket on which replica `id`'s front takes the clients other fronts relay to it: it
/// never relays them again (two replicas that each think the other leads would otherwise relay a
/// client round and round).
pub fn direct_socket(run_dir: &Path, id: u16) -> PathBuf {
    run_dir.join(format!("memcached-{id}.direct.sock"))
}

/// Serves one client until it closes, quits or breaks the protocol; on a follower that knows
/// the leader, relays it to the leader's front if `relay`.
pub fn serve_client<S: Read + Write + AsRawFd>(stream: S, shared: &FrontShared, relay: bool) {
    if let Err(e) = serve(stream, shared, relay) {
        debug!(target: LOG_TARGET, "client closed: {e}");
    }
}

/// A connection to the leader's direct socket, if a leader other than this replica is known
/// and answers.
fn leader_front(shared: &FrontShared) -> Option<UnixStream> {
    let leader = shared.replica.leader()?.0;
    if leader == shared.machine.me {
        return None;
    }
    UnixStream::connect(direct_socket(&shared.run_dir, leader)).ok()
}

/// A client's state between reads.
struct Client {
    buf: Vec<u8>,
    /// Bytes of a refused value still to be dropped as they arrive.
    skip_bytes: u64,
    /// A connection to the local server, for the commands answered locally.
    local: Option<Conn>,
}

fn serve<S: Read + Write + AsRawFd>(
    mut stream: S,
    shared: &FrontShared,
    relay: bool,
) -> Result<(), String> {
    let mut client = Client { buf: Vec::new(), skip_bytes: 0, local: None };
    let mut chunk = vec![0u8; 64 << 10];
    let mut first = true;
    loop {
        let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(());
        }
        // A follower relays a client for the connection's whole life, decided at its first
        // bytes; if the leader changes, the relayed connection ends with the old leader's front
        // (its direct socket answers `not the leader`), and the client reconnects.
        if std::mem::take(&mut first) && relay {
            if let Some(mut leader) = leader_front(shared) {
                leader.write_all(&chunk[..n]).map_err(|e| format!("to the leader's front: {e}"))?;
                return mu_procs::poll::relay(stream, leader);
            }
        }
        let skipped = client.skip_bytes.min(n as u64) as usize;
        client.skip_bytes -= skipped as u64;
        client.buf.extend_from_slice(&chunk[skipped..n]);
        let mut out = Vec::new();
        let go_on = take_requests(&mut client, shared, &mut out);
        stream.write_all(&out).map_err(|e| e.to_string())?;
        go_on?;
    }
}

/// Answers every whole request in the client's buffer into `out`; an error ends the client
/// (after `out` is written).
fn take_requests(
    client: &mut Client,
    shared: &FrontShared,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let mut batch: Vec<Vec<u8>> = Vec::new();
    let mut at = 0;
    let result = loop {
        let Some(parsed) = parse(&client.buf[at..], &shared.limits) else { break Ok(()) };
        let request = match parsed {
            Parsed::Request { frame_bytes } => {
                let frame = &client.buf[at..at + frame_bytes];
                at += frame_bytes;
                match kind(frame) {
                    Kind::Replicated => {
                        batch.push(frame.to_vec());
                        continue;
                    }
                    other => Some((other, frame)),
                }
            }
            _ => None,
        };
        // Anything but a replicated request is answered after the requests before it.
        if let Err(e) = propose(&mut batch, shared, out) {
            break Err(e);
        }
        let answered = match (request, parsed) {
            (Some((Kind::Local, frame)), _) => {
                local(&mut client.local, shared, frame).map(|reply| out.extend_from_slice(&reply))
            }
            (Some((Kind::NoOp, _)), _) => {
                out.extend_from_slice(b"MN\r\n");
                Ok(())
            }
            (Some((Kind::Expiries, _)), _) => {
                expiries(shared, out);
                Ok(())
            }
            (Some((Kind::Refused(reply), _)), _) => {
                out.extend_from_slice(reply.as_bytes());
                Ok(())
            }
            (Some((_, _)), _) => Err("the client quit".to_string()),
            (None, Parsed::BadDataChunk { frame_bytes }) => {
                at += frame_bytes;
                out.extend_from_slice(b"CLIENT_ERROR bad data chunk\r\n");
                Ok(())
            }
            (None, Parsed::TooLarge { line_bytes, skip_bytes }) => {
                at += line_bytes;
                out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
                let here = ((client.buf.len() - at) as u64).min(skip_bytes);
                at += here as usize;
                client.skip_bytes = skip_bytes - here;
                Ok(())
            }
            (None, Parsed::Binary) => {
                out.extend_from_slice(
                    b"SERVER_ERROR the binary protocol is not served by the replicated front; \
                      use the text protocol\r\n",
                );
                Err("the binary protocol".into())
            }
            (None, _) => {
                out.extend_from_slice(b"CLIENT_ERROR line too long\r\n");
                Err("a line too long".into())
            }
        };
        if let Err(e) = answered {
            break Err(e);
        }
    };
    client.buf.drain(..at);
    result.and_then(|()| propose(&mut batch, shared, out))
}

/// Proposes the batch's requests, in order, and writes their replies into `out`. An outcome
/// the front cannot know (the leadership was lost while replicating) ends the client.
fn propose(
    batch: &mut Vec<Vec<u8>>,
    shared: &FrontShared,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    if batch.is_empty() {
        return Ok(());
    }
    let now_ms = shared.now_ms();
    let first_seq = shared.next_seq.fetch_add(batch.len() as u64, Ordering::Relaxed);
    let entries: Vec<Vec<u8>> = batch
        .iter()
        .enumerate()
        .map(|(i, request)| {
            let mut bytes = Vec::with_capacity(crate::entry::HEADER_BYTES + request.len());
            Entry {
                origin: shared.machine.me,
                incarnation: shared.machine.incarnation,
                seq: first_seq + i as u64,
                now_ms,
                request,
            }
            .encode(&mut bytes);
            bytes
        })
        .collect();
    batch.clear();
    for i in 0..entries.len() {
        shared.machine.expect(first_seq + i as u64);
    }
    let requests: Vec<&[u8]> = entries.iter().map(|e| e.as_slice()).collect();
    let mut outcomes = Vec::with_capacity(requests.len());
    shared.replica.propose_many(&requests, &mut outcomes);
    let mut failure = None;
    for (i, outcome) in outcomes.iter().enumerate() {
        let seq = first_seq + i as u64;
        match outcome {
            Ok(_) => match shared.machine.take_reply(seq, REPLY_WAIT) {
                Some(reply) => out.extend_from_slice(&reply),
                None => {
                    failure.get_or_insert_with(|| {
                        "a committed request's reply never came".to_string()
                    });
                }
            },
            Err(ProposeError::NotLeader { leader }) => {
                shared.machine.forget(seq);
                out.extend_from_slice(not_leader(shared, leader.map(|l| l.0)).as_bytes());
            }
            Err(e) => {
                shared.machine.forget(seq);
                if failure.is_none() {
                    out.extend_from_slice(
                        format!("SERVER_ERROR not committed, outcome unknown: {e}\r\n").as_bytes(),
                    );
                    failure = Some(format!("proposing: {e}"));
                }
            }
        }
    }
    failure.map_or(Ok(()), Err)
}

fn not_leader(shared: &FrontShared, leader: Option<u16>) -> String {
    let address = leader.and_then(|l| shared.client_addresses.iter().find(|(id, _)| *id == l));
    match (leader, address) {
        (Some(l), Some((_, a))) => {
            format!(
                "SERVER_ERROR not the leader: replica {l} leads, its clients connect to {a}\r\n"
            )
        }
        (Some(l), None) => format!("SERVER_ERROR not the leader: replica {l} leads\r\n"),
        (None, _) => "SERVER_ERROR not the leader: no leader is known yet\r\n".into(),
    }
}

/// `stats expiries`: `STAT <key> <expiry in ms since the Unix epoch>` a line, keys in base64.
fn expiries(shared: &FrontShared, out: &mut Vec<u8>) {
    for (key, at) in shared.machine.expiries() {
        out.extend_from_slice(b"STAT ");
        out.extend_from_slice(&crate::text::base64_encode(&key));
        out.extend_from_slice(format!(" {at}\r\n").as_bytes());
    }
    out.extend_from_slice(b"END\r\n");
}

/// A command answered by the local server.
fn local(conn: &mut Option<Conn>, shared: &FrontShared, frame: &[u8]) -> Result<Vec<u8>, String> {
    if conn.is_none() {
        *conn = Some(Conn::connect(&shared.server_socket).map_err(|e| e.to_string())?);
    }
    Ok(conn.as_mut().expect("connected above").call(frame)?.concat())
}
