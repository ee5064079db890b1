//! Requests as bytes: what a client proposes to the replicated book.
//!
//! Layout (little-endian), version 1. A header of 18 bytes:
//!
//! | bytes | field |
//! | --- | --- |
//! | 1 | version, 1 |
//! | 1 | command: 1 submit, 2 cancel, 3 replace |
//! | 8 | client id |
//! | 8 | sequence number (from 1, one more per request of the client) |
//!
//! then the command's fields:
//!
//! | command | bytes | fields |
//! | --- | --- | --- |
//! | submit | 8 + 1 + (8) + 8 + (8) | order id; flags: bit 0 side (0 buy, 1 sell), bit 1 kind (0 limit, 1 market), bits 2–3 time in force (0 GTC, 1 IOC, 2 FOK), bit 4 a stop price follows, bits 5–7 zero; the limit price (limit orders only); quantity; the stop price (if bit 4) |
//! | cancel | 8 | order id |
//! | replace | 8 + 8 + 8 | order id, new price, new quantity |
//!
//! Sizes: a limit submit is [`LIMIT_SUBMIT_BYTES`] (43) bytes, a market submit 35, a stop adds
//! 8; a cancel is 26 bytes and a replace 42. Every field has one encoding and nothing may
//! follow, so one request has exactly one byte string. Zero quantities and prices decode (they
//! are the book's to reject, with a reason the client sees); what cannot be a request does not.

use crate::book::tif_code;
use crate::codec::side_code;
use crate::command::Command;
use crate::order::{NewOrder, OrderId, OrderKind, Price, Qty, Side, TimeInForce};

const VERSION: u8 = 1;
const HEADER_BYTES: usize = 1 + 1 + 8 + 8;
/// The encoded size of a limit order without a stop, the common request.
pub const LIMIT_SUBMIT_BYTES: usize = HEADER_BYTES + 8 + 1 + 8 + 8;
/// The largest request: a limit order with a stop.
pub const REQUEST_BYTES_MAX: usize = LIMIT_SUBMIT_BYTES + 8;

const FLAG_SELL: u8 = 1;
const FLAG_MARKET: u8 = 1 << 1;
const TIF_SHIFT: u8 = 2;
const FLAG_STOP: u8 = 1 << 4;
const FLAGS_KNOWN: u8 = FLAG_SELL | FLAG_MARKET | (3 << TIF_SHIFT) | FLAG_STOP;

/// A client's request: who sent it, its place in that client's sequence, and the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    pub client: u64,
    /// From 1: the engine applies a client's requests once each, in increasing order.
    pub seq: u64,
    pub command: Command,
}

/// Why bytes are not a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("request of {0} bytes is shorter than its header")]
    Short(usize),
    #[error("unknown request version {0}")]
    Version(u8),
    #[error("unknown command code {0}")]
    Command(u8),
    #[error("sequence number 0 is reserved (client sequence numbers start at 1)")]
    SeqZero,
    #[error("unknown order flags {0:#04x}")]
    Flags(u8),
    #[error("time in force code 3 is not one")]
    TimeInForce,
    #[error("request ends {missing} bytes short of its next field")]
    Truncated { missing: usize },
    #[error("{0} bytes follow the request")]
    Trailing(usize),
}

impl Request {
    /// The request as bytes. (Sequence number 0 encodes, but decoding refuses it.)
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(REQUEST_BYTES_MAX);
        self.encode_into(&mut out);
        out
    }

    /// Appends the request's bytes to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(VERSION);
        out.push(match self.command {
            Command::Submit(_) => 1,
            Command::Cancel { .. } => 2,
            Command::Replace { .. } => 3,
        });
        let mut put = |v: u64| out.extend_from_slice(&v.to_le_bytes());
        put(self.client);
        put(self.seq);
        match self.command {
            Command::Submit(o) => {
                put(o.id.0);
                let mut flags = side_code(o.side) | (tif_code(o.tif) << TIF_SHIFT);
                if o.kind == OrderKind::Market {
                    flags |= FLAG_MARKET;
                }
                if o.stop.is_some() {
                    flags |= FLAG_STOP;
                }
                out.push(flags);
                let mut put = |v: u64| out.extend_from_slice(&v.to_le_bytes());
                if let OrderKind::Limit { price } = o.kind {
                    put(price.0);
                }
                put(o.qty.0);
                if let Some(stop) = o.stop {
                    put(stop.0);
                }
            }
            Command::Cancel { id } => put(id.0),
            Command::Replace { id, price, qty } => {
                put(id.0);
                put(price.0);
                put(qty.0);
            }
        }
    }

    /// Reads a request; never panics, whatever the bytes.
    pub fn decode(bytes: &[u8]) -> Result<Request, DecodeError> {
        if bytes.len() < HEADER_BYTES {
            return Err(DecodeError::Short(bytes.len()));
        }
        if bytes[0] != VERSION {
            return Err(DecodeError::Version(bytes[0]));
        }
        let code = bytes[1];
        let mut words = Words { bytes: &bytes[2..], at: 0 };
        let client = words.next()?;
        let seq = words.next()?;
        if seq == 0 {
            return Err(DecodeError::SeqZero);
        }
        let command = match code {
            1 => Command::Submit(decode_submit(&mut words)?),
            2 => Command::Cancel { id: OrderId(words.next()?) },
            3 => Command::Replace {
                id: OrderId(words.next()?),
                price: Price(words.next()?),
                qty: Qty(words.next()?),
            },
            other => return Err(DecodeError::Command(other)),
        };
        let trailing = words.bytes.len() - words.at;
        if trailing > 0 {
            return Err(DecodeError::Trailing(trailing));
        }
        Ok(Request { client, seq, command })
    }
}

fn decode_submit(words: &mut Words) -> Result<NewOrder, DecodeError> {
    let id = OrderId(words.next()?);
    let flags = words.byte()?;
    if flags & !FLAGS_KNOWN != 0 {
        return Err(DecodeError::Flags(flags));
    }
    let side = if flags & FLAG_SELL == 0 { Side::Buy } else { Side::Sell };
    let tif = match (flags >> TIF_SHIFT) & 3 {
        0 => TimeInForce::Gtc,
        1 => TimeInForce::Ioc,
        2 => TimeInForce::Fok,
        _ => return Err(DecodeError::TimeInForce),
    };
    let kind = if flags & FLAG_MARKET == 0 {
        OrderKind::Limit { price: Price(words.next()?) }
    } else {
        OrderKind::Market
    };
    let qty = Qty(words.next()?);
    let stop = if flags & FLAG_STOP == 0 { None } else { Some(Price(words.next()?)) };
    Ok(NewOrder { id, side, kind, tif, qty, stop })
}

/// Fixed-width little-endian fields read one after the other.
struct Words<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Words<'_> {
    fn field<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let end = self.at + N;
        let Some(field) = self.bytes.get(self.at..end) else {
            return Err(DecodeError::Truncated { missing: end - self.bytes.len() });
        };
        self.at = end;
        Ok(field.try_into().expect("N bytes"))
    }

    fn next(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.field::<8>()?))
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.field::<1>()?[0])
    }
}
