//! Frames: what one request or response slot holds, as bytes. Pure: no fabric.
//!
//! A frame is a 40-byte header and a payload of `len` bytes, little-endian:
//!
//! | bytes | field | what |
//! | --- | --- | --- |
//! | 0..2 | magic | `0x4d52` ("MR"): zeroed memory is no frame |
//! | 2 | version | [`VERSION`] |
//! | 3 | kind | [`Kind`]: request, response or rejection |
//! | 4..8 | len | payload bytes |
//! | 8..16 | generation | the grant's generation: which admission of the slot wrote it |
//! | 16..24 | seq | the transport sequence number, per grant, from 0 |
//! | 24..32 | payload check | [`mu_log::digest`] of the payload |
//! | 32..40 | header check | [`mu_log::digest`] of bytes 0..32 |
//!
//! The writer's one-sided write may land in any order and a writer may die in the middle of one
//! (`docs/fabric.md`), so a reader polling the slot sees the old frame, the new one, or a mix.
//! The header check covers the payload check, so both together cover every byte of the frame: a
//! mix of two frames passes only if it equals the new one (or by a 64-bit checksum collision).
//! Checks are not cryptographic: they guard against torn and stale bytes, not against a writer
//! that forges frames on purpose.
//!
//! [`validate`] is the whole rule; the server applies the same rule in two reads (the header,
//! then the payload it announces) with [`read_header`] and [`payload_matches`].

use thiserror::Error;

/// Bytes of the header.
pub const HEADER_BYTES: usize = 40;
/// The first two bytes of every frame.
pub const MAGIC: u16 = 0x4d52;
/// The frame format's version.
pub const VERSION: u8 = 1;

const HEADER_SEED: u64 = 0x6d75_7269_6e67_6864; // "muringhd"
const PAYLOAD_SEED: u64 = 0x6d75_7269_6e67_7064; // "muringpd"
/// Bytes 0..32 of the header are covered by the header check.
const CHECKED_HEADER_BYTES: usize = 32;

/// What a frame carries.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum Kind {
    /// A client's request, in its request ring.
    Request = 1,
    /// The server's response, in the client's response ring.
    Response = 2,
    /// The server's refusal of a request whose header was intact but broke a rule (its
    /// payload says which: [`Rejection`]), in the client's response ring.
    Rejected = 3,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        match v {
            1 => Some(Kind::Request),
            2 => Some(Kind::Response),
            3 => Some(Kind::Rejected),
            _ => None,
        }
    }
}

/// Why the server refused a request (the payload of a [`Kind::Rejected`] frame).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Rejection {
    /// The request's header announced more payload than a request slot holds.
    Oversized { len: u32, max: u32 },
    /// A reason this build does not know (a newer server).
    Unknown(u32),
}

impl Rejection {
    const OVERSIZED: u32 = 1;
    /// Bytes of a rejection's payload.
    pub const BYTES: usize = 12;

    /// The payload of a rejection frame.
    pub fn to_bytes(self) -> [u8; Rejection::BYTES] {
        let (code, a, b) = match self {
            Rejection::Oversized { len, max } => (Rejection::OVERSIZED, len, max),
            Rejection::Unknown(code) => (code, 0, 0),
        };
        let mut out = [0u8; Rejection::BYTES];
        out[0..4].copy_from_slice(&code.to_le_bytes());
        out[4..8].copy_from_slice(&a.to_le_bytes());
        out[8..12].copy_from_slice(&b.to_le_bytes());
        out
    }

    /// Reads a rejection's payload; anything else than [`Rejection::BYTES`] bytes of a known
    /// reason is [`Rejection::Unknown`].
    pub fn from_bytes(payload: &[u8]) -> Rejection {
        let word = |at: usize| {
            payload.get(at..at + 4).map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4")))
        };
        match (payload.len(), word(0)) {
            (Rejection::BYTES, Rejection::OVERSIZED) => {
                Rejection::Oversized { len: word(4), max: word(8) }
            }
            (_, code) => Rejection::Unknown(code),
        }
    }
}

/// A decoded header whose header check holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Header {
    pub kind: Kind,
    pub len: u32,
    pub generation: u64,
    pub seq: u64,
    pub payload_check: u64,
}

/// What a reader expects in a slot.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Expect {
    /// The kinds it takes (a client takes responses and rejections).
    pub kinds: &'static [Kind],
    pub generation: u64,
    pub seq: u64,
    /// The largest payload the slot holds.
    pub payload_bytes_max: usize,
}

/// Which checks a reader makes. Only [`Checks::Full`] is safe.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Checks {
    /// The header check and the payload check.
    #[default]
    Full,
    /// The header check only: a torn payload behind an intact header is taken. Exists only so
    /// that a test can show the payload check is what stops torn requests; never use it.
    #[doc(hidden)]
    HeaderOnlyForTests,
}

/// Why a slot holds no frame a reader takes.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Error)]
pub enum Invalid {
    #[error("slot of {len} bytes is shorter than a header")]
    Short { len: usize },
    #[error("no frame: magic {found:#06x}")]
    NoMagic { found: u16 },
    #[error("frame version {found}, expected {VERSION}")]
    Version { found: u8 },
    #[error("header check does not match (torn or garbage header)")]
    HeaderCheck,
    #[error("unknown frame kind {found}")]
    UnknownKind { found: u8 },
    #[error("frame of kind {found:?} where another kind was expected")]
    WrongKind { found: Kind },
    #[error("frame of generation {found:#x}, expected {expected:#x}")]
    WrongGeneration { found: u64, expected: u64 },
    #[error("frame with seq {found}, expected {expected}")]
    WrongSeq { found: u64, expected: u64 },
    #[error("payload of {len} bytes is over the slot's {max}")]
    Oversized { len: u32, max: usize },
    #[error("payload check does not match (torn or garbage payload)")]
    PayloadCheck,
}

/// Why a frame could not be encoded.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Error)]
pub enum EncodeError {
    #[error("frame of {needed} bytes does not fit a buffer of {room}")]
    NoRoom { needed: usize, room: usize },
    #[error("payload of {len} bytes is longer than a frame can announce")]
    TooLong { len: usize },
}

/// Bytes of a frame carrying `payload_len` bytes.
pub const fn frame_bytes(payload_len: usize) -> usize {
    HEADER_BYTES + payload_len
}

/// Writes a frame into the start of `out` and returns its length in bytes.
pub fn encode(
    out: &mut [u8],
    kind: Kind,
    generation: u64,
    seq: u64,
    payload: &[u8],
) -> Result<usize, EncodeError> {
    let len =
        u32::try_from(payload.len()).map_err(|_| EncodeError::TooLong { len: payload.len() })?;
    let needed = frame_bytes(payload.len());
    if out.len() < needed {
        return Err(EncodeError::NoRoom { needed, room: out.len() });
    }
    out[0..2].copy_from_slice(&MAGIC.to_le_bytes());
    out[2] = VERSION;
    out[3] = kind as u8;
    out[4..8].copy_from_slice(&len.to_le_bytes());
    out[8..16].copy_from_slice(&generation.to_le_bytes());
    out[16..24].copy_from_slice(&seq.to_le_bytes());
    out[24..32].copy_from_slice(&payload_check(payload).to_le_bytes());
    let header_check = mu_log::digest(HEADER_SEED, &out[..CHECKED_HEADER_BYTES]);
    out[32..40].copy_from_slice(&header_check.to_le_bytes());
    out[HEADER_BYTES..needed].copy_from_slice(payload);
    Ok(needed)
}

fn payload_check(payload: &[u8]) -> u64 {
    mu_log::digest(PAYLOAD_SEED, payload)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// Decodes a header whose magic, version and header check hold.
pub fn read_header(bytes: &[u8; HEADER_BYTES]) -> Result<Header, Invalid> {
    let magic = u16::from_le_bytes([bytes[0], bytes[1]]);
    if magic != MAGIC {
        return Err(Invalid::NoMagic { found: magic });
    }
    if bytes[2] != VERSION {
        return Err(Invalid::Version { found: bytes[2] });
    }
    if mu_log::digest(HEADER_SEED, &bytes[..CHECKED_HEADER_BYTES]) != u64_at(bytes, 32) {
        return Err(Invalid::HeaderCheck);
    }
    let kind = Kind::from_u8(bytes[3]).ok_or(Invalid::UnknownKind { found: bytes[3] })?;
    Ok(Header {
        kind,
        len: u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")),
        generation: u64_at(bytes, 8),
        seq: u64_at(bytes, 16),
        payload_check: u64_at(bytes, 24),
    })
}

/// Checks an intact header against what the reader expects: kind, generation, seq, then size.
pub fn check_header(header: &Header, expect: &Expect) -> Result<(), Invalid> {
    if !expect.kinds.contains(&header.kind) {
        return Err(Invalid::WrongKind { found: header.kind });
    }
    if header.generation != expect.generation {
        return Err(Invalid::WrongGeneration {
            found: header.generation,
            expected: expect.generation,
        });
    }
    if header.seq != expect.seq {
        return Err(Invalid::WrongSeq { found: header.seq, expected: expect.seq });
    }
    if header.len as usize > expect.payload_bytes_max {
        return Err(Invalid::Oversized { len: header.len, max: expect.payload_bytes_max });
    }
    Ok(())
}

/// Whether `payload` is the one the header announced.
pub fn payload_matches(header: &Header, payload: &[u8], checks: Checks) -> bool {
    payload.len() == header.len as usize
        && (checks == Checks::HeaderOnlyForTests || payload_check(payload) == header.payload_check)
}

/// The whole rule: the frame at the start of `slot` if it is one the reader expects, intact.
/// Returns its header and payload. Never panics, whatever the bytes.
pub fn validate<'a>(
    slot: &'a [u8],
    expect: &Expect,
    checks: Checks,
) -> Result<(Header, &'a [u8]), Invalid> {
    let header_bytes: &[u8; HEADER_BYTES] = slot
        .get(..HEADER_BYTES)
        .and_then(|b| b.try_into().ok())
        .ok_or(Invalid::Short { len: slot.len() })?;
    let header = read_header(header_bytes)?;
    check_header(&header, expect)?;
    // `check_header` bounded the length by the slot's payload room, which the caller sized by
    // the slot; a slot shorter than that is the caller's mistake, still no panic.
    let payload = slot
        .get(HEADER_BYTES..HEADER_BYTES + header.len as usize)
        .ok_or(Invalid::Oversized { len: header.len, max: slot.len() - HEADER_BYTES })?;
    if !payload_matches(&header, payload, checks) {
        return Err(Invalid::PayloadCheck);
    }
    Ok((header, payload))
}

#[cfg(test)]
mod tests;
