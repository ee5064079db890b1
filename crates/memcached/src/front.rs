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

/// The most requests of one client proposed together: the replies of a batch wait here until
/// written, each up to [`crate::machine::REPLY_BYTES_MAX`].
const BATCH_REQUESTS_MAX: usize = 16;

/// Replies gathered for the client before they are written (larger ones go at once).
const OUT_BYTES_MAX: usize = 64 << 10;

/// The replies to a client: gathered while small, written once they pass [`OUT_BYTES_MAX`], so
/// that a pipelined batch's replies are never all held at once.
struct Out<'a> {
    stream: &'a mut dyn Write,
    buf: Vec<u8>,
}

impl Out<'_> {
    fn push(&mut self, bytes: &[u8]) -> Result<(), String> {
        if self.buf.len() + bytes.len() <= OUT_BYTES_MAX {
            self.buf.extend_from_slice(bytes);
            return Ok(());
        }
        self.flush()?;
        self.stream.write_all(bytes).map_err(|e| format!("writing to the client: {e}"))
    }

    fn flush(&mut self) -> Result<(), String> {
        self.stream.write_all(&self.buf).map_err(|e| format!("writing to the client: {e}"))?;
        self.buf.clear();
        Ok(())
    }
}

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
        let mut out = Out { stream: &mut stream, buf: Vec::new() };
        let go_on = take_requests(&mut client, shared, &mut out);
        let written = out.flush();
        go_on?;
        written?;
    }
}

/// Answers every whole request in the client's buffer into `out`; an error ends the client
/// (after `out` is written).
fn take_requests(client: &mut Client, shared: &FrontShared, out: &mut Out) -> Result<(), String> {
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
                        if batch.len() < BATCH_REQUESTS_MAX {
                            continue;
                        }
                        None
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
                local(&mut client.local, shared, frame).and_then(|reply| out.push(&reply))
            }
            (Some((Kind::NoOp, _)), _) => out.push(b"MN\r\n"),
            (Some((Kind::Expiries, _)), _) => out.push(&expiries(shared)),
            (Some((Kind::Refused(reply), _)), _) => out.push(reply.as_bytes()),
            (Some((_, _)), _) => Err("the client quit".to_string()),
            // A full batch, proposed above.
            (None, Parsed::Request { .. }) => Ok(()),
            (None, Parsed::BadDataChunk { frame_bytes }) => {
                at += frame_bytes;
                out.push(b"CLIENT_ERROR bad data chunk\r\n")
            }
            (None, Parsed::Refused { line_bytes, skip_bytes, reply }) => {
                at += line_bytes;
                let here = ((client.buf.len() - at) as u64).min(skip_bytes);
                at += here as usize;
                client.skip_bytes = skip_bytes - here;
                out.push(reply.as_bytes())
            }
            (None, Parsed::Binary) => out
                .push(
                    b"SERVER_ERROR the binary protocol is not served by the replicated front; \
                      use the text protocol\r\n",
                )
                .and(Err("the binary protocol".into())),
            (None, Parsed::LineTooLong) => {
                out.push(b"CLIENT_ERROR line too long\r\n").and(Err("a line too long".into()))
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
fn propose(batch: &mut Vec<Vec<u8>>, shared: &FrontShared, out: &mut Out) -> Result<(), String> {
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
                Some(reply) => {
                    if let Err(e) = out.push(&reply) {
                        failure.get_or_insert(e);
                    }
                }
                None => {
                    failure.get_or_insert_with(|| {
                        "a committed request's reply never came".to_string()
                    });
                }
            },
            Err(ProposeError::NotLeader { leader }) => {
                shared.machine.forget(seq);
                if let Err(e) = out.push(not_leader(shared, leader.map(|l| l.0)).as_bytes()) {
                    failure.get_or_insert(e);
                }
            }
            Err(e) => {
                shared.machine.forget(seq);
                if failure.is_none() {
                    let reply = format!("SERVER_ERROR not committed, outcome unknown: {e}\r\n");
                    let _ = out.push(reply.as_bytes());
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
fn expiries(shared: &FrontShared) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, at) in shared.machine.expiries() {
        out.extend_from_slice(b"STAT ");
        out.extend_from_slice(&crate::text::base64_encode(&key));
        out.extend_from_slice(format!(" {at}\r\n").as_bytes());
    }
    out.extend_from_slice(b"END\r\n");
    out
}

/// A command answered by the local server.
fn local(conn: &mut Option<Conn>, shared: &FrontShared, frame: &[u8]) -> Result<Vec<u8>, String> {
    if conn.is_none() {
        *conn = Some(Conn::connect(&shared.server_socket).map_err(|e| e.to_string())?);
    }
    Ok(conn.as_mut().expect("connected above").call(frame)?.concat())
}
