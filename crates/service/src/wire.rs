//! The client protocol: length-prefixed frames on a stream socket, one request then one answer.
//!
//! A frame is a little-endian `u32` body length, then the body; the body's first byte says what
//! it is. Clients send [`ClientMessage`]s, replicas answer with [`ServerMessage`]s. Every
//! connection opens with [`ClientMessage::Hello`], naming the cluster and this format's version:
//! a replica answers [`ServerMessage::Welcome`], or refuses a client of another cluster or
//! version and closes the connection, so a client pointed at the wrong cluster's sockets fails
//! with a message rather than reading or writing that cluster's data. A key-value
//! request travels as the bytes [`mu_kv::Request::encode`] makes, an order book request as
//! [`mu_orderbook::Request::encode`] makes: the same bytes the leader proposes and every
//! replica applies. A replica serves one application (the cluster's `app`) and refuses the
//! other's requests.

use mu_kv::{Reply, KEY_BYTES_MAX, VALUE_BYTES_MAX};
use mu_orderbook::Reply as OrderReply;
use std::io::{self, Read, Write};

/// The largest frame body either side accepts: a compare-and-set with the largest key and two
/// of the largest values, and room for the headers.
pub const FRAME_BYTES_MAX: usize = KEY_BYTES_MAX + 2 * VALUE_BYTES_MAX + 256;

/// The version of this format; a replica refuses a client that speaks another.
pub const WIRE_VERSION: u32 = 2;

const KV: u8 = 1;
const STATUS: u8 = 2;
const HELLO: u8 = 3;
const ORDER: u8 = 4;
const FABRIC_RESERVE: u8 = 5;
const FABRIC_JOIN: u8 = 6;
const REPLY: u8 = 1;
const NOT_LEADER: u8 = 2;
const RETRY: u8 = 3;
const REFUSED: u8 = 4;
const STATUS_REPLY: u8 = 5;
const WELCOME: u8 = 6;
const EVENTS: u8 = 7;
const FABRIC_NODE: u8 = 8;
const FABRIC_GRANT: u8 = 9;
const BY_SOCKET: u8 = 10;

/// What a client asks a replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientMessage {
    /// A key-value request, encoded ([`mu_kv::Request::encode`]).
    Kv(Vec<u8>),
    /// An order book request, encoded ([`mu_orderbook::Request::encode`]).
    Order(Vec<u8>),
    /// The replica's status, as JSON ([`crate::ReplicaReport`]).
    Status,
    /// The first message on a connection: the client's cluster and format version.
    Hello { cluster_id: u64, wire_version: u32 },
    /// The client path over the fabric (`docs/client-path.md`): a node id to start the
    /// client's fabric node under.
    FabricReserve,
    /// The client's node (reserved, and started): admit it to the request rings.
    FabricJoin { node: u16 },
}

/// What a replica answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerMessage {
    /// The key-value request was committed and applied: its reply.
    Reply(Reply),
    /// The order book request was committed and applied: its events (or why it was not).
    Events(OrderReply),
    /// This replica does not lead; `leader` is the one it believes does, if any.
    NotLeader { leader: Option<u16> },
    /// The outcome is unknown or the request was not taken now (leadership lost while
    /// replicating, log full, shutting down): send it again with the same sequence number,
    /// which the state machine applies once.
    Retry(String),
    /// The request is refused and was not applied (malformed, too large, unknown message):
    /// sending it again gives the same answer.
    Refused(String),
    /// The replica's status, as JSON.
    Status(String),
    /// The answer to a hello from a client of this cluster.
    Welcome,
    /// The node id the client may start its fabric node under, in the directory `dir`, and
    /// what it registers there before it joins (`mu_request_rings::ClientLayout::to_bytes`).
    FabricNode { node: u16, layout: Vec<u8>, dir: String },
    /// The client's grant to the request rings (`mu_request_rings::Grant::to_bytes`).
    FabricGrant(Vec<u8>),
    /// On the fabric path: the request was taken, but its answer does not fit a response
    /// slot. Send the same request (same client id and sequence number) over the socket: it is
    /// applied once, and the answer kept for it comes back.
    BySocket,
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection: {0}")]
    Io(#[from] io::Error),
    #[error("frame of {0} bytes is larger than allowed ({FRAME_BYTES_MAX})")]
    TooLarge(usize),
    #[error("malformed message: {0}")]
    Malformed(String),
}

/// Writes one frame holding `body`.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&l| l as usize <= FRAME_BYTES_MAX)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    let mut head = [0u8; 4];
    head.copy_from_slice(&len.to_le_bytes());
    w.write_all(&head)?;
    w.write_all(body)?;
    w.flush()
}

/// Reads one frame into `body` (replacing what it held). `Ok(false)` at a clean end of stream
/// (the peer closed between frames).
pub fn read_frame(r: &mut impl Read, body: &mut Vec<u8>) -> Result<bool, FrameError> {
    match read_frame_length(r)? {
        Some(len) => {
            read_frame_body(r, len, body)?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Reads a frame's length field: `None` at a clean end of stream (nothing of it came), an
/// error if the stream ends inside it or the length is over [`FRAME_BYTES_MAX`].
pub fn read_frame_length(r: &mut impl Read) -> Result<Option<usize>, FrameError> {
    let mut head = [0u8; 4];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(FrameError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the stream ended {got} bytes into a frame's length"),
                )))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = u32::from_le_bytes(head) as usize;
    if len > FRAME_BYTES_MAX {
        return Err(FrameError::TooLarge(len));
    }
    Ok(Some(len))
}

/// The most of a frame's body reserved before its bytes arrive: a length field alone (a peer
/// that then sends nothing) must not make the reader hold a whole [`FRAME_BYTES_MAX`].
const BODY_RESERVE_BYTES_MAX: usize = 64 * 1024;

/// Reads a body of `len` bytes into `body` (replacing what it held). The buffer grows with
/// what arrives, not with what the length field claims.
pub fn read_frame_body(
    r: &mut impl Read,
    len: usize,
    body: &mut Vec<u8>,
) -> Result<(), FrameError> {
    body.clear();
    body.reserve(len.min(BODY_RESERVE_BYTES_MAX));
    let got = r.take(len as u64).read_to_end(body)?;
    if got < len {
        return Err(FrameError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the stream ended after {got} of a frame's {len} bytes"),
        )));
    }
    Ok(())
}

impl ClientMessage {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        match self {
            ClientMessage::Kv(request) => {
                out.push(KV);
                out.extend_from_slice(request);
            }
            ClientMessage::Order(request) => {
                out.push(ORDER);
                out.extend_from_slice(request);
            }
            ClientMessage::Status => out.push(STATUS),
            ClientMessage::FabricReserve => out.push(FABRIC_RESERVE),
            ClientMessage::FabricJoin { node } => {
                out.push(FABRIC_JOIN);
                out.extend_from_slice(&node.to_le_bytes());
            }
            ClientMessage::Hello { cluster_id, wire_version } => {
                out.push(HELLO);
                out.extend_from_slice(&cluster_id.to_le_bytes());
                out.extend_from_slice(&wire_version.to_le_bytes());
            }
        }
    }

    pub fn decode(body: &[u8]) -> Result<ClientMessage, FrameError> {
        match body.split_first() {
            Some((&KV, rest)) => Ok(ClientMessage::Kv(rest.to_vec())),
            Some((&ORDER, rest)) => Ok(ClientMessage::Order(rest.to_vec())),
            Some((&STATUS, [])) => Ok(ClientMessage::Status),
            Some((&STATUS, _)) => Err(FrameError::Malformed("bytes after a status request".into())),
            Some((&FABRIC_RESERVE, [])) => Ok(ClientMessage::FabricReserve),
            Some((&FABRIC_JOIN, [a, b])) => {
                Ok(ClientMessage::FabricJoin { node: u16::from_le_bytes([*a, *b]) })
            }
            Some((&FABRIC_RESERVE | &FABRIC_JOIN, _)) => {
                Err(FrameError::Malformed("a fabric request of the wrong length".into()))
            }
            Some((&HELLO, rest)) if rest.len() == 12 => {
                let (id, version) = rest.split_at(8);
                Ok(ClientMessage::Hello {
                    cluster_id: u64::from_le_bytes(id.try_into().expect("8 bytes")),
                    wire_version: u32::from_le_bytes(version.try_into().expect("4 bytes")),
                })
            }
            Some((&HELLO, _)) => Err(FrameError::Malformed("a hello of the wrong length".into())),
            Some((tag, _)) => Err(FrameError::Malformed(format!("unknown message type {tag}"))),
            None => Err(FrameError::Malformed("empty message".into())),
        }
    }
}

impl ServerMessage {
    /// Whether this is an applied request's answer (a reply or events).
    pub fn is_answer(&self) -> bool {
        matches!(self, ServerMessage::Reply(_) | ServerMessage::Events(_))
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        match self {
            ServerMessage::Reply(reply) => {
                out.push(REPLY);
                reply.encode(out);
            }
            ServerMessage::Events(reply) => {
                out.push(EVENTS);
                reply.encode(out);
            }
            ServerMessage::NotLeader { leader } => {
                out.push(NOT_LEADER);
                match leader {
                    Some(id) => {
                        out.push(1);
                        out.extend_from_slice(&id.to_le_bytes());
                    }
                    None => out.push(0),
                }
            }
            ServerMessage::Retry(why) => {
                out.push(RETRY);
                out.extend_from_slice(why.as_bytes());
            }
            ServerMessage::Refused(why) => {
                out.push(REFUSED);
                out.extend_from_slice(why.as_bytes());
            }
            ServerMessage::Status(json) => {
                out.push(STATUS_REPLY);
                out.extend_from_slice(json.as_bytes());
            }
            ServerMessage::Welcome => out.push(WELCOME),
            ServerMessage::FabricNode { node, layout, dir } => {
                out.push(FABRIC_NODE);
                out.extend_from_slice(&node.to_le_bytes());
                // A layout is a few dozen bytes; a longer one is cut and refused by its check.
                let layout = &layout[..layout.len().min(usize::from(u8::MAX))];
                out.push(layout.len() as u8);
                out.extend_from_slice(layout);
                out.extend_from_slice(dir.as_bytes());
            }
            ServerMessage::FabricGrant(grant) => {
                out.push(FABRIC_GRANT);
                out.extend_from_slice(grant);
            }
            ServerMessage::BySocket => out.push(BY_SOCKET),
        }
    }

    pub fn decode(body: &[u8]) -> Result<ServerMessage, FrameError> {
        let text = |b: &[u8]| {
            String::from_utf8(b.to_vec())
                .map_err(|_| FrameError::Malformed("text not UTF-8".into()))
        };
        match body.split_first() {
            Some((&REPLY, rest)) => Reply::decode(rest)
                .map(ServerMessage::Reply)
                .map_err(|e| FrameError::Malformed(format!("reply: {e}"))),
            Some((&EVENTS, rest)) => OrderReply::decode(rest)
                .map(ServerMessage::Events)
                .map_err(|e| FrameError::Malformed(format!("order book reply: {e}"))),
            Some((&NOT_LEADER, [0])) => Ok(ServerMessage::NotLeader { leader: None }),
            Some((&NOT_LEADER, [1, a, b])) => {
                Ok(ServerMessage::NotLeader { leader: Some(u16::from_le_bytes([*a, *b])) })
            }
            Some((&NOT_LEADER, _)) => Err(FrameError::Malformed("bad leader hint".into())),
            Some((&RETRY, rest)) => text(rest).map(ServerMessage::Retry),
            Some((&REFUSED, rest)) => text(rest).map(ServerMessage::Refused),
            Some((&STATUS_REPLY, rest)) => text(rest).map(ServerMessage::Status),
            Some((&WELCOME, [])) => Ok(ServerMessage::Welcome),
            Some((&WELCOME, _)) => Err(FrameError::Malformed("bytes after a welcome".into())),
            Some((&FABRIC_NODE, [a, b, len, rest @ ..])) if rest.len() >= usize::from(*len) => {
                let (layout, dir) = rest.split_at(usize::from(*len));
                Ok(ServerMessage::FabricNode {
                    node: u16::from_le_bytes([*a, *b]),
                    layout: layout.to_vec(),
                    dir: text(dir)?,
                })
            }
            Some((&FABRIC_NODE, _)) => Err(FrameError::Malformed("a short fabric node".into())),
            Some((&FABRIC_GRANT, rest)) => Ok(ServerMessage::FabricGrant(rest.to_vec())),
            Some((&BY_SOCKET, [])) => Ok(ServerMessage::BySocket),
            Some((tag, _)) => Err(FrameError::Malformed(format!("unknown answer type {tag}"))),
            None => Err(FrameError::Malformed("empty answer".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let mut b = Vec::new();
        for m in [
            ClientMessage::Kv(vec![1, 2, 3]),
            ClientMessage::Order(vec![4, 5]),
            ClientMessage::Status,
            ClientMessage::Hello { cluster_id: u64::MAX - 3, wire_version: WIRE_VERSION },
            ClientMessage::FabricReserve,
            ClientMessage::FabricJoin { node: 63 },
        ] {
            m.encode(&mut b);
            assert_eq!(ClientMessage::decode(&b).unwrap(), m);
        }
        for m in [
            ServerMessage::Reply(Reply::Stored),
            ServerMessage::Events(OrderReply::Stale { applied_seq: 3 }),
            ServerMessage::NotLeader { leader: None },
            ServerMessage::NotLeader { leader: Some(2) },
            ServerMessage::Retry("aborted".into()),
            ServerMessage::Refused("too large".into()),
            ServerMessage::Status("{}".into()),
            ServerMessage::Welcome,
            ServerMessage::FabricNode {
                node: 5,
                layout: vec![7; 32],
                dir: "/dev/shm/mu-7/clients-0".into(),
            },
            ServerMessage::FabricNode { node: 1, layout: Vec::new(), dir: String::new() },
            ServerMessage::FabricGrant(vec![1; 56]),
            ServerMessage::BySocket,
        ] {
            m.encode(&mut b);
            assert_eq!(ServerMessage::decode(&b).unwrap(), m);
        }
    }

    #[test]
    fn bad_messages_are_errors_not_panics() {
        assert!(ClientMessage::decode(&[]).is_err());
        assert!(ClientMessage::decode(&[9]).is_err());
        assert!(ClientMessage::decode(&[STATUS, 0]).is_err());
        assert!(ClientMessage::decode(&[HELLO, 1, 2, 3]).is_err());
        assert!(ClientMessage::decode(&[HELLO; 14]).is_err());
        assert!(ClientMessage::decode(&[FABRIC_RESERVE, 0]).is_err());
        assert!(ClientMessage::decode(&[FABRIC_JOIN, 1]).is_err());
        assert!(ServerMessage::decode(&[FABRIC_NODE, 1]).is_err());
        assert!(ServerMessage::decode(&[FABRIC_NODE, 1, 0, 3, 9, 9]).is_err(), "a short layout");
        assert!(ServerMessage::decode(&[WELCOME, 0]).is_err());
        assert!(ServerMessage::decode(&[NOT_LEADER, 1, 0]).is_err());
        assert!(ServerMessage::decode(&[REPLY, 77]).is_err());
        assert!(ServerMessage::decode(&[EVENTS, 77]).is_err());
        assert!(ServerMessage::decode(&[RETRY, 0xff]).is_err());
    }

    #[test]
    fn frames_are_bounded() {
        let mut wire = Vec::new();
        write_frame(&mut wire, b"hello").unwrap();
        let mut body = Vec::new();
        let mut r = &wire[..];
        assert!(read_frame(&mut r, &mut body).unwrap());
        assert_eq!(body, b"hello");
        assert!(!read_frame(&mut r, &mut body).unwrap(), "clean end");
        let huge = ((FRAME_BYTES_MAX + 1) as u32).to_le_bytes();
        assert!(matches!(read_frame(&mut &huge[..], &mut body), Err(FrameError::TooLarge(_))));
        let cut = [5u8, 0, 0, 0, b'h'];
        assert!(matches!(read_frame(&mut &cut[..], &mut body), Err(FrameError::Io(_))));
        // A stream that ends inside the length field is cut, not a clean end.
        let cut_head = [5u8, 0];
        assert!(matches!(read_frame(&mut &cut_head[..], &mut body), Err(FrameError::Io(_))));
        let empty = [0u8; 4];
        assert!(read_frame(&mut &empty[..], &mut body).unwrap(), "a frame of no bytes is a frame");
        assert!(body.is_empty());
    }

    /// A length field claiming the largest frame, with nothing after it, reserves a bounded
    /// buffer: what the reader holds grows with the bytes that arrive.
    #[test]
    fn a_length_alone_does_not_reserve_the_whole_frame() {
        let mut wire = (FRAME_BYTES_MAX as u32).to_le_bytes().to_vec();
        wire.extend_from_slice(b"abc");
        let mut body = Vec::new();
        assert!(read_frame(&mut &wire[..], &mut body).is_err(), "the body was cut");
        assert!(body.capacity() <= BODY_RESERVE_BYTES_MAX, "reserved {} bytes", body.capacity());
    }
}
