//! The client side of the text protocol, bounded: a request is a line, and for storage
//! commands (`set`, `add`, `replace`, `append`, `prepend`, `cas`, `ms`) the data block its
//! length names. No length is trusted before it is checked against [`Limits`]: a 1 GiB value is
//! refused (and its bytes skipped) without allocating it.

/// How much one request may hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A command line, newline included, other than a read of several keys.
    pub line_bytes_max: usize,
    /// The line of `get`, `gets`, `gat` or `gats`, which lists keys.
    pub read_line_bytes_max: usize,
    /// A value (the data block without its `\r\n`).
    pub value_bytes_max: usize,
}

impl Limits {
    /// Memcached's own line limit is 2048 bytes, and it reads long multi-key reads within its
    /// 16 KiB read buffer: the front sends the server nothing it would close the connection
    /// for. Values: memcached's default item size, or less where an entry holds less.
    pub fn new(entry_value_bytes_max: usize) -> Limits {
        Limits {
            line_bytes_max: 2048,
            read_line_bytes_max: 8192,
            value_bytes_max: entry_value_bytes_max.min(VALUE_BYTES_MAX),
        }
    }
}

/// The largest value the front takes: memcached's default item size (1 MiB, `-I 1m`) less room
/// for the item's header and key, so that the server stores whatever the front accepted.
pub const VALUE_BYTES_MAX: usize = (1 << 20) - 4096;

/// What the front found at the start of a client's bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A whole request in the first `frame_bytes` bytes.
    Request { frame_bytes: usize },
    /// A storage command whose data block does not end in `\r\n`: the whole frame is dropped,
    /// as memcached drops it.
    BadDataChunk { frame_bytes: usize },
    /// A storage command whose value exceeds the limit: its line (`line_bytes`) is taken, and
    /// the `skip_bytes` after it (the data block) are to be dropped as they arrive.
    TooLarge { line_bytes: usize, skip_bytes: u64 },
    /// The binary protocol's magic byte.
    Binary,
    /// A line longer than the limit.
    LineTooLong,
}

/// The first request of `buf`, or `None` while more bytes are needed.
pub fn parse(buf: &[u8], limits: &Limits) -> Option<Parsed> {
    if buf.first() == Some(&0x80) {
        return Some(Parsed::Binary);
    }
    let limit = limits.read_line_bytes_max.max(limits.line_bytes_max);
    let Some(newline) = buf.iter().take(limit).position(|&b| b == b'\n') else {
        return (buf.len() >= limit).then_some(Parsed::LineTooLong);
    };
    let line_bytes = newline + 1;
    let tokens = tokens(line(&buf[..line_bytes]));
    let is_read = matches!(tokens.first().copied(), Some(b"get" | b"gets" | b"gat" | b"gats"));
    if !is_read && line_bytes > limits.line_bytes_max {
        return Some(Parsed::LineTooLong);
    }
    let Some(value_bytes) = data_length(&tokens) else {
        return Some(Parsed::Request { frame_bytes: line_bytes });
    };
    if value_bytes > limits.value_bytes_max as u64 {
        return Some(Parsed::TooLarge { line_bytes, skip_bytes: value_bytes + 2 });
    }
    let frame_bytes = line_bytes + value_bytes as usize + 2;
    if buf.len() < frame_bytes {
        return None;
    }
    if &buf[frame_bytes - 2..frame_bytes] != b"\r\n" {
        return Some(Parsed::BadDataChunk { frame_bytes });
    }
    Some(Parsed::Request { frame_bytes })
}

/// The length of the data block a storage command's line announces, where memcached would read
/// one: the line has the command's number of tokens and the length parses (otherwise memcached
/// answers `CLIENT_ERROR` and reads no data, and so does the front).
pub fn data_length(tokens: &[&[u8]]) -> Option<u64> {
    let at = match tokens.first().copied()? {
        b"set" | b"add" | b"replace" | b"append" | b"prepend"
            if (5..=6).contains(&tokens.len()) =>
        {
            4
        }
        b"cas" if (6..=7).contains(&tokens.len()) => 4,
        b"ms" if tokens.len() >= 3 => 2,
        _ => return None,
    };
    let length = number(tokens[at])?;
    // Memcached reads the length as a 32-bit signed number.
    u64::try_from(length).ok().filter(|&l| l <= i32::MAX as u64)
}

/// A request's line without its `\r\n` or `\n`.
pub fn line(frame: &[u8]) -> &[u8] {
    let end = frame.iter().position(|&b| b == b'\n').unwrap_or(frame.len());
    let line = &frame[..end];
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The data block of a storage request (with its `\r\n`), after its line.
pub fn data(frame: &[u8]) -> &[u8] {
    let end = frame.iter().position(|&b| b == b'\n').map_or(frame.len(), |n| n + 1);
    &frame[end..]
}

/// A line's tokens, split on spaces as memcached splits them.
pub fn tokens(line: &[u8]) -> Vec<&[u8]> {
    line.split(|&b| b == b' ').filter(|t| !t.is_empty()).collect()
}

/// A decimal number, signed, as memcached's `safe_strtol` takes it.
pub fn number(token: &[u8]) -> Option<i64> {
    std::str::from_utf8(token).ok()?.parse().ok()
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding, as meta commands' `b` flag takes keys.
pub fn base64_encode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let word = chunk.iter().enumerate().fold(0u32, |w, (i, &b)| w | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[(word >> (18 - 6 * i) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
    out
}

/// The bytes of a base64 key, or `None` if it is not base64.
pub fn base64_decode(text: &[u8]) -> Option<Vec<u8>> {
    if text.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for chunk in text.chunks(4) {
        let padding = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if padding > 2 {
            return None;
        }
        let mut word = 0u32;
        for (i, &c) in chunk[..4 - padding].iter().enumerate() {
            let v = BASE64.iter().position(|&b| b == c)? as u32;
            word |= v << (18 - 6 * i);
        }
        for i in 0..3 - padding {
            out.push((word >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::new(1 << 20)
    }

    #[test]
    fn storage_commands_take_their_data_block() {
        let buf = b"set k 1 0 3\r\nabc\r\nget k\r\n";
        assert_eq!(parse(buf, &limits()), Some(Parsed::Request { frame_bytes: 18 }));
        assert_eq!(parse(&buf[18..], &limits()), Some(Parsed::Request { frame_bytes: 7 }));
        assert_eq!(parse(&buf[..17], &limits()), None);
        assert_eq!(
            parse(b"ms k 2 T5\r\nhi\r\n", &limits()),
            Some(Parsed::Request { frame_bytes: 15 })
        );
    }

    #[test]
    fn a_huge_length_is_refused_without_waiting_for_it() {
        let parsed = parse(b"set k 0 0 1073741824\r\n", &limits());
        assert_eq!(parsed, Some(Parsed::TooLarge { line_bytes: 22, skip_bytes: (1 << 30) + 2 }));
    }

    #[test]
    fn malformed_lengths_take_the_line_only_as_memcached_does() {
        assert_eq!(
            parse(b"set k 0 0 -1\r\n", &limits()),
            Some(Parsed::Request { frame_bytes: 14 })
        );
        assert_eq!(parse(b"set k 0 0\r\n", &limits()), Some(Parsed::Request { frame_bytes: 11 }));
        assert_eq!(
            parse(b"set k 0 0 1\r\nab\r\n", &limits()),
            Some(Parsed::BadDataChunk { frame_bytes: 16 })
        );
    }

    #[test]
    fn long_lines_and_the_binary_protocol_are_refused() {
        assert_eq!(parse(&[0x80, 1, 0, 0], &limits()), Some(Parsed::Binary));
        let long = vec![b'x'; 9000];
        assert_eq!(parse(&long, &limits()), Some(Parsed::LineTooLong));
        let mut set = b"set ".to_vec();
        set.extend(vec![b'k'; 3000]);
        set.extend(b" 0 0 1\r\n");
        assert_eq!(parse(&set, &limits()), Some(Parsed::LineTooLong));
        let mut get = b"get ".to_vec();
        get.extend(vec![b'k'; 3000]);
        get.extend(b"\r\n");
        assert_eq!(parse(&get, &limits()), Some(Parsed::Request { frame_bytes: get.len() }));
    }

    #[test]
    fn base64_round_trips() {
        for bytes in [&b""[..], b"f", b"fo", b"foo", b"foob", b"\x00\xff key\r\n"] {
            assert_eq!(base64_decode(&base64_encode(bytes)).as_deref(), Some(bytes));
        }
        assert_eq!(base64_encode(b"foo"), b"Zm9v");
        assert_eq!(base64_decode(b"Zm9=x"), None);
    }
}
