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

/// The longest key memcached takes (`KEY_MAX_LENGTH`).
pub const KEY_BYTES_MAX: usize = 250;

/// The most keys one `get`, `gets`, `gat` or `gats` may name: with values of up to 1 MiB, the
/// reply a replica's server produces (and every replica reads) stays bounded.
pub const KEYS_PER_READ_MAX: usize = 128;

/// The most tokens a meta command's line may hold: memcached answers `CLIENT_ERROR options
/// flags too long` above this (more than `MFLAG_MAX_OPT_LENGTH` tokens with its terminal one),
/// without reading an `ms`'s data block.
pub const META_TOKENS_MAX: usize = 19;

/// What the front found at the start of a client's bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A whole request in the first `frame_bytes` bytes.
    Request { frame_bytes: usize },
    /// A storage command whose data block does not end in `\r\n`: the whole frame is dropped,
    /// as memcached drops it.
    BadDataChunk { frame_bytes: usize },
    /// A request the front answers `reply` without proposing it: its line (`line_bytes`) is
    /// taken, and the `skip_bytes` after it (a storage command's data block, where its line
    /// names a length) are dropped as they arrive, never run as commands.
    Refused { line_bytes: usize, skip_bytes: u64, reply: String },
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
    // Memcached reads lines over 2048 bytes only if they start with `get ` or `gets `.
    let is_long_read =
        |line: &[u8]| matches!(tokens(line).first().copied(), Some(b"get" | b"gets"));
    let Some(newline) = buf.iter().take(limit).position(|&b| b == b'\n') else {
        let too_long = buf.len() >= limit
            || (buf.len() > limits.line_bytes_max && !is_long_read(&buf[..limits.line_bytes_max]));
        return too_long.then_some(Parsed::LineTooLong);
    };
    let line_bytes = newline + 1;
    if line_bytes > limits.line_bytes_max && !is_long_read(&buf[..line_bytes]) {
        return Some(Parsed::LineTooLong);
    }
    let tokens = tokens(line(&buf[..line_bytes]));
    let refused = |why: String| {
        let skip_bytes = announced_length(&tokens).map_or(0, |l| l + 2);
        let command = tokens.first().copied().unwrap_or_default();
        Some(Parsed::Refused { line_bytes, skip_bytes, reply: refusal(command, &why) })
    };
    if let Err(why) = check_line(line(&buf[..line_bytes]), &tokens) {
        return refused(why);
    }
    let Some(value_bytes) = announced_length(&tokens) else {
        return Some(Parsed::Request { frame_bytes: line_bytes });
    };
    if value_bytes > limits.value_bytes_max as u64 {
        return Some(Parsed::Refused {
            line_bytes,
            skip_bytes: value_bytes + 2,
            reply: "SERVER_ERROR object too large for cache\r\n".into(),
        });
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

/// Why a line is refused where memcached's dispatcher would answer `ERROR` (a number of
/// tokens the command never takes): the front answers the same.
pub const WRONG_TOKEN_COUNT: &str = "a number of tokens the command does not take";

/// The front's answer to a request it does not propose.
pub fn refusal(command: &[u8], why: &str) -> String {
    if why == WRONG_TOKEN_COUNT {
        return "ERROR\r\n".into();
    }
    format!(
        "CLIENT_ERROR {} is refused by the replicated front: {why}\r\n",
        String::from_utf8_lossy(command)
    )
}

/// The length of the data block a storage command's line announces (`set`, `add`, `replace`,
/// `append`, `prepend`, `cas`: the fifth token; `ms`: the third), where it reads as memcached
/// reads a length (0 to `i32::MAX - 2`). A line that [`check_line`] refuses may still name
/// one: the front then drops that many bytes (and the `\r\n`) rather than run them as commands.
pub fn announced_length(tokens: &[&[u8]]) -> Option<u64> {
    let at = match tokens.first().copied()? {
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => 4,
        b"ms" => 2,
        _ => return None,
    };
    let length = int32(tokens.get(at)?)?;
    u64::try_from(length).ok().filter(|&l| l <= (i32::MAX - 2) as u64)
}

/// Whether the request line `text` (without its line end), split into `tokens`, is one the
/// front reads exactly as memcached does; otherwise why not. Only commands the front
/// replicates are checked (the others are answered by the front or a local server). The front
/// is stricter than memcached: what it refuses, memcached might take, never the reverse.
pub fn check_line(text: &[u8], tokens: &[&[u8]]) -> Result<(), String> {
    // Memcached reads \t \r \v \f as the end of a number and stops a line at NUL, where the
    // front would read a different number or key.
    if let Some(&odd) = text.iter().find(|&&b| matches!(b, b'\t' | b'\r' | 0x0b | 0x0c | 0)) {
        return Err(format!("byte {odd:#04x} in a command line"));
    }
    let Some(&command) = tokens.first() else { return Ok(()) };
    let args = &tokens[1..];
    // The numbers of tokens memcached's dispatcher takes (it answers `ERROR` to others).
    let counts = match command {
        b"set" | b"add" | b"replace" | b"append" | b"prepend" => 4..=5,
        b"cas" => 5..=6,
        b"incr" | b"decr" | b"touch" => 2..=3,
        b"delete" => 1..=3,
        b"flush_all" => 0..=2,
        b"get" | b"gets" | b"gat" | b"gats" | b"mg" | b"ms" | b"md" | b"ma" => 1..=usize::MAX,
        _ => 0..=usize::MAX,
    };
    if !counts.contains(&args.len()) {
        return Err(WRONG_TOKEN_COUNT.into());
    }
    match command {
        b"set" | b"add" | b"replace" | b"append" | b"prepend" => storage_args(args, false),
        b"cas" => storage_args(args, true),
        b"get" | b"gets" => keys(args),
        b"gat" | b"gats" => {
            int32(args[0]).ok_or("an exptime that is not a 32-bit number")?;
            keys(&args[1..])
        }
        b"touch" => {
            key(args[0])?;
            int32(args[1]).ok_or("an exptime that is not a 32-bit number")?;
            noreply(&args[2..])
        }
        b"incr" | b"decr" => {
            key(args[0])?;
            uint64(args[1]).ok_or("a delta that is not an unsigned 64-bit number")?;
            noreply(&args[2..])
        }
        b"delete" => match args {
            [k] | [k, b"noreply" | b"0"] | [k, b"0", b"noreply"] => key(k),
            _ => Err("usage: delete <key> [noreply]".into()),
        },
        b"flush_all" => match args {
            [] | [b"noreply"] => Ok(()),
            [delay] | [delay, b"noreply"] => match int32(delay) {
                Some(0) => Ok(()),
                Some(_) => Err("a delayed flush would run by each server's own clock".into()),
                None => Err("a delay that is not a number".into()),
            },
            _ => Err("usage: flush_all [0] [noreply]".into()),
        },
        b"mg" | b"md" | b"ma" | b"ms" => meta_args(command, tokens),
        _ => Ok(()),
    }
}

/// `<key> <flags> <exptime> <bytes> [<cas unique>] [noreply]`.
fn storage_args(args: &[&[u8]], with_cas: bool) -> Result<(), String> {
    let fixed = if with_cas { 5 } else { 4 };
    if !(fixed..=fixed + 1).contains(&args.len()) {
        return Err(format!(
            "{} tokens where {} or {} are due",
            args.len() + 1,
            fixed + 1,
            fixed + 2
        ));
    }
    key(args[0])?;
    uint32(args[1]).ok_or("flags that are not an unsigned 32-bit number")?;
    int32(args[2]).ok_or("an exptime that is not a 32-bit number")?;
    let length = int32(args[3]).ok_or("a length that is not a 32-bit number")?;
    if !(0..=i32::MAX - 2).contains(&length) {
        return Err("a negative length".into());
    }
    if with_cas {
        uint64(args[4]).ok_or("a CAS unique that is not an unsigned 64-bit number")?;
    }
    noreply(&args[fixed..])
}

fn noreply(rest: &[&[u8]]) -> Result<(), String> {
    match rest {
        [] | [b"noreply"] => Ok(()),
        _ => Err("a last token other than noreply".into()),
    }
}

/// A key as the text protocol takes it: at most 250 bytes; and, since the state machine looks
/// keys up with meta commands (in base64 where a key holds a space or a control byte), one
/// whose base64 form fits too.
pub fn key(key: &[u8]) -> Result<(), String> {
    if key.len() > KEY_BYTES_MAX {
        return Err(format!("a key longer than {KEY_BYTES_MAX} bytes"));
    }
    if needs_base64(key) && key.len().div_ceil(3) * 4 > KEY_BYTES_MAX {
        return Err(format!(
            "a key with a control byte whose base64 form is longer than {KEY_BYTES_MAX} bytes"
        ));
    }
    Ok(())
}

/// Whether a meta command must name `key` in base64 (`b`): it holds a byte the text protocol
/// splits on or reads as a line's end, or is empty.
pub fn needs_base64(key: &[u8]) -> bool {
    key.is_empty() || key.iter().any(|&b| b <= b' ' || b == 0x7f)
}

fn keys(keys: &[&[u8]]) -> Result<(), String> {
    if keys.is_empty() {
        return Err("no key".into());
    }
    if keys.len() > KEYS_PER_READ_MAX {
        return Err(format!("more than {KEYS_PER_READ_MAX} keys in one read"));
    }
    keys.iter().try_for_each(|k| key(k))
}

/// A meta command's line: `mg|md|ma <key> <flag>*`, `ms <key> <datalen> <flag>*`. Each flag is
/// one that memcached 1.6 knows, at most once, its argument one the front reads as memcached
/// does; a base64 key (`b`) decodes.
fn meta_args(command: &[u8], tokens: &[&[u8]]) -> Result<(), String> {
    if tokens.len() > META_TOKENS_MAX {
        return Err(format!("more than {META_TOKENS_MAX} tokens"));
    }
    let first_flag = if command == b"ms" { 3 } else { 2 };
    if tokens.len() < first_flag {
        return Err("too few tokens".into());
    }
    if tokens[1].len() > KEY_BYTES_MAX {
        return Err(format!("a key longer than {KEY_BYTES_MAX} bytes"));
    }
    if command == b"ms" {
        let length = int32(tokens[2]).ok_or("a length that is not a 32-bit number")?;
        if !(0..=i32::MAX - 2).contains(&length) {
            return Err("a negative length".into());
        }
    }
    let mut seen = [false; 256];
    for flag in &tokens[first_flag..] {
        let (letter, arg) = (flag[0], &flag[1..]);
        if std::mem::replace(&mut seen[letter as usize], true) {
            return Err(format!("flag {} twice", letter as char));
        }
        meta_flag(command, letter, arg)?;
    }
    if seen[b'b' as usize] {
        match base64_decode(tokens[1]) {
            Some(k) if !k.is_empty() => key(&k)?,
            _ => return Err("a base64 key that does not decode".into()),
        }
    } else {
        key(tokens[1])?;
    }
    Ok(())
}

fn meta_flag(command: &[u8], letter: u8, arg: &[u8]) -> Result<(), String> {
    let bad = |what: &str| Err(format!("flag {}: {what}", letter as char));
    match letter {
        b'b' | b'l' | b'k' | b's' | b't' | b'c' | b'f' | b'v' | b'h' | b'u' | b'q' | b'I' => {
            if arg.is_empty() {
                Ok(())
            } else {
                bad("takes no argument")
            }
        }
        b'N' | b'T' | b'R' => int32(arg).map_or_else(|| bad("not a 32-bit number"), |_| Ok(())),
        b'F' => uint32(arg).map_or_else(|| bad("not an unsigned 32-bit number"), |_| Ok(())),
        b'C' | b'J' | b'D' => {
            uint64(arg).map_or_else(|| bad("not an unsigned 64-bit number"), |_| Ok(()))
        }
        b'O' | b'P' | b'L' if arg.len() < 32 => Ok(()),
        b'M' => match (command, arg) {
            (b"ms", b"E" | b"A" | b"P" | b"R" | b"S") => Ok(()),
            (b"ma", b"I" | b"+" | b"D" | b"-") => Ok(()),
            _ => bad("not a mode of this command"),
        },
        _ => bad("unknown, or too long"),
    }
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

/// A signed decimal number that fits 32 bits: an optional `-` and digits, nothing else. Every
/// such token reads the same with memcached's `safe_strtol`; the front refuses any other
/// (`safe_strtol` also takes a `+`, whitespace around the digits, and wraps numbers below
/// `i32::MIN`).
pub fn int32(token: &[u8]) -> Option<i32> {
    let digits = token.strip_prefix(b"-").unwrap_or(token);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(token).ok()?.parse().ok()
}

/// An unsigned decimal number of 32 bits, digits only (memcached's `safe_strtoul` also wraps
/// larger numbers to 32 bits).
pub fn uint32(token: &[u8]) -> Option<u32> {
    uint64(token)?.try_into().ok()
}

/// An unsigned decimal number of 64 bits, digits only.
pub fn uint64(token: &[u8]) -> Option<u64> {
    if token.is_empty() || !token.iter().all(u8::is_ascii_digit) {
        return None;
    }
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
        let reply = "SERVER_ERROR object too large for cache\r\n".to_string();
        assert_eq!(
            parsed,
            Some(Parsed::Refused { line_bytes: 22, skip_bytes: (1 << 30) + 2, reply })
        );
    }

    /// The skip a refused request's frame asks for (`None`: not refused).
    fn refused_skip(buf: &[u8]) -> Option<(usize, u64)> {
        match parse(buf, &limits()) {
            Some(Parsed::Refused { line_bytes, skip_bytes, reply }) => {
                // A number of tokens memcached never takes: its own answer.
                assert!(reply.starts_with("CLIENT_ERROR ") || reply == "ERROR\r\n", "{reply}");
                Some((line_bytes, skip_bytes))
            }
            _ => None,
        }
    }

    #[test]
    fn malformed_lengths_take_the_line_only() {
        assert_eq!(refused_skip(b"set k 0 0 -1\r\n"), Some((14, 0)));
        assert_eq!(refused_skip(b"set k 0 0\r\n"), Some((11, 0)));
        // Memcached wraps this length to 2 and would read a data block: refused, line only.
        assert_eq!(refused_skip(b"set k 0 0 -4294967294\r\nab\r\n"), Some((23, 0)));
        assert_eq!(
            parse(b"set k 0 0 1\r\nab\r\n", &limits()),
            Some(Parsed::BadDataChunk { frame_bytes: 16 })
        );
    }

    /// Finding 1: lines memcached refuses without reading their data block (which it would then
    /// run as commands) are refused by the front, and the block dropped.
    #[test]
    fn bad_storage_lines_are_refused_and_their_data_dropped() {
        let long_key = format!("set {} 0 0 11\r\nflush_all 5\r\n", "k".repeat(300));
        assert_eq!(refused_skip(long_key.as_bytes()), Some((long_key.len() - 13, 13)));
        for line in [
            &b"set k x 0 3\r\n"[..],
            b"set k 4294967296 0 3\r\n",
            b"append k -1 0 3\r\n",
            b"set k 0 1.5 3\r\n",
            b"set k 0 0 3 whatever\r\n",
            b"cas k 0 0 3 x\r\n",
            b"cas k 0 0 3 -1\r\n",
            b"cas k 0 0 3\r\n",
            b"ms k 3 T1 T2\r\n",
            b"ms k 3 Ma\r\n",
            b"ms k 3 Z\r\n",
            b"ms k 3 vx\r\n",
            b"ms Zm9v! 3 b\r\n",
        ] {
            assert_eq!(refused_skip(line), Some((line.len(), 5)), "{:?}", line);
        }
        let flags = " v".repeat(META_TOKENS_MAX);
        let ms = format!("ms k 3{flags}\r\n");
        assert_eq!(refused_skip(ms.as_bytes()), Some((ms.len(), 5)));
        // The same lines, well formed, are framed with their data.
        for frame in [&b"set k 4294967295 -1 3 noreply\r\nabc\r\n"[..], b"cas k 0 0 3 9\r\nabc\r\n"]
        {
            let frame_bytes = frame.len();
            assert_eq!(parse(frame, &limits()), Some(Parsed::Request { frame_bytes }));
        }
    }

    /// Finding 2: memcached reads `\t \r \v \f` after a number as its end, and a line only up
    /// to a NUL; the front refuses such lines rather than read them otherwise.
    #[test]
    fn whitespace_other_than_spaces_is_refused() {
        assert_eq!(refused_skip(b"set k 0 0 2\t\r\nmn\r\n"), Some((14, 0)));
        assert_eq!(refused_skip(b"set z 0 10\t 1\r\nx\r\n"), Some((15, 3)));
        assert_eq!(refused_skip(b"flush_all 10\r\r\n"), Some((15, 0)));
        assert_eq!(refused_skip(b"flush_all 10\t\r\n"), Some((15, 0)));
        assert_eq!(refused_skip(b"touch k 5\x0b\r\n"), Some((12, 0)));
        assert_eq!(refused_skip(b"get k\x00 x\r\n"), Some((10, 0)));
        assert_eq!(refused_skip(b"set k 0 0 1\r\nx\r\n"), None);
        assert_eq!(refused_skip(b"get k\n"), None);
    }

    #[test]
    fn numbers_read_as_memcached_reads_them_or_not_at_all() {
        assert_eq!(int32(b"-5"), Some(-5));
        assert_eq!(int32(b"2147483647"), Some(i32::MAX));
        for bad in [&b"2147483648"[..], b"-4294967294", b"+5", b"5\t", b" 5", b"", b"-", b"0x1"] {
            assert_eq!(int32(bad), None, "{:?}", bad);
        }
        assert_eq!(uint32(b"4294967295"), Some(u32::MAX));
        assert_eq!(uint32(b"4294967296"), None);
        assert_eq!(uint32(b"-0"), None);
        assert_eq!(uint64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(uint64(b"18446744073709551616"), None);
    }

    /// Findings 4 and 7: reads name at most so many keys; `gat`/`gats` lines are held to
    /// 2048 bytes (memcached closes a connection on a longer line unless it is a get or gets).
    #[test]
    fn reads_are_bounded() {
        let keys: String = (0..=KEYS_PER_READ_MAX).map(|i| format!(" k{i}")).collect();
        let get = format!("get{keys}\r\n");
        assert_eq!(refused_skip(get.as_bytes()), Some((get.len(), 0)));
        let mut gat = b"gat 10 ".to_vec();
        gat.extend(vec![b'k'; 200]);
        assert_eq!(parse(&gat, &limits()), None);
        gat.extend(vec![b'k'; 2000]);
        assert_eq!(parse(&gat, &limits()), Some(Parsed::LineTooLong));
    }

    /// Finding 8: a key the state machine would look up in base64 must fit memcached's limit
    /// in that form.
    #[test]
    fn keys_fit_memcached_also_in_base64() {
        let mut k = vec![b'k'; 188];
        assert_eq!(key(&k), Ok(()));
        k[0] = 0x01;
        assert!(key(&k).is_err());
        k.truncate(187);
        assert!(key(&k).is_err(), "252 bytes in base64");
        k.truncate(186);
        assert_eq!(key(&k), Ok(()));
        assert!(key(&[b'k'; 251]).is_err());
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
        let mut get = b"get".to_vec();
        for i in 0..100 {
            get.extend(format!(" {i:030}").as_bytes());
        }
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
