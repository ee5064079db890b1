//! Requests as bytes.
//!
//! Layout (little-endian), version 1:
//!
//! | bytes | field |
//! | --- | --- |
//! | 1 | version, 1 |
//! | 1 | op: 1 get, 2 put, 3 delete, 4 compare-and-set |
//! | 8 | client id |
//! | 8 | sequence number (from 1, one more per request of the client) |
//! | 2 + n | key: length, bytes |
//! | 1 + (4 + n) | compare-and-set only: 1 and the expected value, or 0 for "absent" |
//! | 4 + n | put and compare-and-set: the value |
//!
//! Nothing may follow: trailing bytes make a request malformed, so that one request has one
//! encoding.

/// The longest key, in bytes.
pub const KEY_BYTES_MAX: usize = 1024;
/// The longest value, in bytes. (A log slot is usually smaller: the replica refuses what does
/// not fit before it is replicated.)
pub const VALUE_BYTES_MAX: usize = 1 << 20;

const VERSION: u8 = 1;
const HEADER_BYTES: usize = 1 + 1 + 8 + 8;
/// The encoded size of the smallest put: an empty key and an empty value. A log whose entries
/// hold less could store no value at all.
pub const PUT_BYTES_MIN: usize = HEADER_BYTES + 2 + 4;

/// One operation on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Get {
        key: Vec<u8>,
    },
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        key: Vec<u8>,
    },
    /// Set `key` to `value` if it holds `expected` (`None`: if it is absent).
    Cas {
        key: Vec<u8>,
        expected: Option<Vec<u8>>,
        value: Vec<u8>,
    },
}

impl Op {
    pub fn key(&self) -> &[u8] {
        match self {
            Op::Get { key } | Op::Put { key, .. } | Op::Delete { key } | Op::Cas { key, .. } => key,
        }
    }

    fn code(&self) -> u8 {
        match self {
            Op::Get { .. } => 1,
            Op::Put { .. } => 2,
            Op::Delete { .. } => 3,
            Op::Cas { .. } => 4,
        }
    }
}

/// A client's request: who sent it, its place in that client's sequence, and what it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub client: u64,
    /// From 1: the store applies a client's requests once each, in increasing order.
    pub seq: u64,
    pub op: Op,
}

/// Why bytes are not a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("request of {0} bytes is shorter than its header")]
    Short(usize),
    #[error("unknown request version {0}")]
    Version(u8),
    #[error("unknown operation code {0}")]
    Op(u8),
    #[error("sequence number 0 is reserved (client sequence numbers start at 1)")]
    SeqZero,
    #[error("{field} of {len} bytes is longer than the limit of {max}")]
    TooLong { field: &'static str, len: usize, max: usize },
    #[error("request ends inside its {0}")]
    Truncated(&'static str),
    #[error("bad compare-and-set flag {0}")]
    Flag(u8),
    #[error("{0} bytes follow the request")]
    Trailing(usize),
}

impl Request {
    /// The request as bytes.
    ///
    /// # Errors
    ///
    /// [`DecodeError::TooLong`] for a key or value over its limit, and [`DecodeError::SeqZero`]:
    /// what `decode` would refuse is not encoded.
    pub fn encode(&self) -> Result<Vec<u8>, DecodeError> {
        if self.seq == 0 {
            return Err(DecodeError::SeqZero);
        }
        let key = self.op.key();
        check_len("key", key.len(), KEY_BYTES_MAX)?;
        let mut out = Vec::with_capacity(HEADER_BYTES + 2 + key.len() + 16);
        out.push(VERSION);
        out.push(self.op.code());
        out.extend_from_slice(&self.client.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&(key.len() as u16).to_le_bytes());
        out.extend_from_slice(key);
        let value_field = |out: &mut Vec<u8>, field, v: &[u8]| {
            check_len(field, v.len(), VALUE_BYTES_MAX)?;
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
            Ok(())
        };
        match &self.op {
            Op::Get { .. } | Op::Delete { .. } => {}
            Op::Put { value, .. } => value_field(&mut out, "value", value)?,
            Op::Cas { expected, value, .. } => {
                match expected {
                    Some(e) => {
                        out.push(1);
                        value_field(&mut out, "expected value", e)?;
                    }
                    None => out.push(0),
                }
                value_field(&mut out, "value", value)?;
            }
        }
        Ok(out)
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
        let client = u64::from_le_bytes(bytes[2..10].try_into().expect("8 bytes"));
        let seq = u64::from_le_bytes(bytes[10..18].try_into().expect("8 bytes"));
        if seq == 0 {
            return Err(DecodeError::SeqZero);
        }
        let mut r = Reader(&bytes[HEADER_BYTES..]);
        let key_len = usize::from(u16::from_le_bytes(r.take::<2>("key length")?));
        check_len("key", key_len, KEY_BYTES_MAX)?;
        let key = r.bytes(key_len, "key")?.to_vec();
        let op = match code {
            1 => Op::Get { key },
            2 => Op::Put { key, value: r.value("value")? },
            3 => Op::Delete { key },
            4 => {
                let expected = match r.take::<1>("compare-and-set flag")?[0] {
                    0 => None,
                    1 => Some(r.value("expected value")?),
                    flag => return Err(DecodeError::Flag(flag)),
                };
                Op::Cas { key, expected, value: r.value("value")? }
            }
            other => return Err(DecodeError::Op(other)),
        };
        if !r.0.is_empty() {
            return Err(DecodeError::Trailing(r.0.len()));
        }
        Ok(Request { client, seq, op })
    }
}

fn check_len(field: &'static str, len: usize, max: usize) -> Result<(), DecodeError> {
    if len > max {
        return Err(DecodeError::TooLong { field, len, max });
    }
    Ok(())
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Truncated(field));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn take<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        Ok(self.bytes(N, field)?.try_into().expect("N bytes"))
    }

    fn value(&mut self, field: &'static str) -> Result<Vec<u8>, DecodeError> {
        let len = u32::from_le_bytes(self.take::<4>(field)?) as usize;
        check_len(field, len, VALUE_BYTES_MAX)?;
        Ok(self.bytes(len, field)?.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_put_has_an_empty_key_and_value() {
        let put = Request { client: 1, seq: 1, op: Op::Put { key: vec![], value: vec![] } };
        assert_eq!(put.encode().unwrap().len(), PUT_BYTES_MIN);
        let del = Request { client: 1, seq: 1, op: Op::Delete { key: vec![] } };
        assert!(del.encode().unwrap().len() < PUT_BYTES_MIN, "a delete is smaller still");
    }

    fn all_ops() -> Vec<Op> {
        vec![
            Op::Get { key: b"k".to_vec() },
            Op::Put { key: b"k".to_vec(), value: b"v".to_vec() },
            Op::Put { key: Vec::new(), value: Vec::new() },
            Op::Delete { key: b"key".to_vec() },
            Op::Cas { key: b"k".to_vec(), expected: None, value: b"new".to_vec() },
            Op::Cas { key: b"k".to_vec(), expected: Some(Vec::new()), value: b"x".to_vec() },
        ]
    }

    #[test]
    fn every_op_round_trips() {
        for (i, op) in all_ops().into_iter().enumerate() {
            let r = Request { client: 7 + i as u64, seq: 1 + i as u64, op };
            let bytes = r.encode().unwrap();
            assert_eq!(Request::decode(&bytes).unwrap(), r);
        }
    }

    #[test]
    fn every_cut_and_every_extra_byte_is_refused() {
        for op in all_ops() {
            let bytes = Request { client: 1, seq: 1, op }.encode().unwrap();
            for len in 0..bytes.len() {
                assert!(Request::decode(&bytes[..len]).is_err(), "{len} of {} bytes", bytes.len());
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(Request::decode(&longer), Err(DecodeError::Trailing(1)));
        }
    }

    #[test]
    fn limits_and_reserved_values_are_refused() {
        let long_key = Op::Get { key: vec![b'k'; KEY_BYTES_MAX + 1] };
        assert!(matches!(
            Request { client: 1, seq: 1, op: long_key }.encode(),
            Err(DecodeError::TooLong { field: "key", .. })
        ));
        let op = Op::Get { key: b"k".to_vec() };
        assert_eq!(
            Request { client: 1, seq: 0, op: op.clone() }.encode(),
            Err(DecodeError::SeqZero)
        );
        let mut bytes = Request { client: 1, seq: 1, op }.encode().unwrap();
        bytes[1] = 9;
        assert_eq!(Request::decode(&bytes), Err(DecodeError::Op(9)));
        bytes[0] = 2;
        assert_eq!(Request::decode(&bytes), Err(DecodeError::Version(2)));
    }

    /// Bytes that are not a request never make decoding panic (a deterministic sweep of short
    /// random strings and of mutated valid requests).
    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let valid: Vec<Vec<u8>> = all_ops()
            .into_iter()
            .map(|op| Request { client: 3, seq: 4, op }.encode().unwrap())
            .collect();
        for round in 0..20_000 {
            let mut bytes = if round % 2 == 0 {
                (0..next() % 64).map(|_| next() as u8).collect::<Vec<u8>>()
            } else {
                valid[(next() % valid.len() as u64) as usize].clone()
            };
            if !bytes.is_empty() {
                let at = (next() % bytes.len() as u64) as usize;
                bytes[at] = next() as u8;
            }
            let _ = Request::decode(&bytes);
        }
    }
}
