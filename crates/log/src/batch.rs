//! Several application requests in one entry of kind [`crate::EntryKind::Batch`] (Mu paper
//! §7.4, "batching requests together before replicating"): each request as its length (u32,
//! little endian) followed by its bytes, back to back. A single request travels as an entry of
//! kind [`crate::EntryKind::Request`] with no framing at all.

/// Bytes of framing before each request in a batch.
pub const ITEM_HEADER_BYTES: usize = 4;

/// Bytes a request of `len` bytes takes in a batch.
pub fn item_bytes(len: usize) -> usize {
    ITEM_HEADER_BYTES + len
}

/// Appends one request to the batch being built in `out`.
pub fn push(out: &mut Vec<u8>, request: &[u8]) {
    let len = u32::try_from(request.len()).expect("a request fits an entry, far below 4 GiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(request);
}

/// A batch whose framing does not add up: only a bug in the writer can produce one (entries are
/// checked whole before they are read).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed batch: framing breaks at byte {at}")]
pub struct MalformedBatch {
    pub at: usize,
}

/// The requests of a batch, in order. Checks the whole framing first, so that a malformed batch
/// yields nothing rather than part of itself.
pub fn requests(value: &[u8]) -> Result<Requests<'_>, MalformedBatch> {
    let mut at = 0;
    while at < value.len() {
        let header = value.get(at..at + ITEM_HEADER_BYTES).ok_or(MalformedBatch { at })?;
        let len = u32::from_le_bytes(header.try_into().expect("4 bytes")) as usize;
        at = at
            .checked_add(item_bytes(len))
            .filter(|&end| end <= value.len())
            .ok_or(MalformedBatch { at })?;
    }
    Ok(Requests { rest: value })
}

/// See [`requests`].
pub struct Requests<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Requests<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        let (header, rest) = self.rest.split_at(ITEM_HEADER_BYTES);
        let len = u32::from_le_bytes(header.try_into().expect("4 bytes")) as usize;
        let (request, rest) = rest.split_at(len);
        self.rest = rest;
        Some(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_in_order() {
        let mut batch = Vec::new();
        let sent: [&[u8]; 4] = [b"put a 1", b"", b"get a", &[0xff; 300]];
        for r in sent {
            push(&mut batch, r);
        }
        assert_eq!(batch.len(), sent.iter().map(|r| item_bytes(r.len())).sum::<usize>());
        let got: Vec<&[u8]> = requests(&batch).unwrap().collect();
        assert_eq!(got, sent);
        assert_eq!(requests(&[]).unwrap().count(), 0);
    }

    #[test]
    fn broken_framing_is_refused_whole() {
        let mut batch = Vec::new();
        push(&mut batch, b"first");
        push(&mut batch, b"second");
        assert_eq!(requests(&batch[..batch.len() - 1]).err(), Some(MalformedBatch { at: 9 }));
        assert_eq!(requests(&batch[..2]).err(), Some(MalformedBatch { at: 0 }));
    }
}
