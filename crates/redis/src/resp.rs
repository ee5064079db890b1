//! RESP2 and RESP3 framing with bounds. Pure: no I/O, nothing allocated for a length before its
//! bytes have arrived, a length over the limits refused as soon as its header is read.
//!
//! Three uses: a client's commands ([`parse_command`]: arrays of bulk strings, or inline
//! lines), the extent of a server's reply or of a command in the replication stream
//! ([`frame_len`]: any RESP2 or RESP3 type), and the few small replies the front reads itself
//! ([`decode`]).

use std::fmt;
use std::ops::Range;

/// Bounds on what a peer may send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest bulk string (Redis's own `proto-max-bulk-len` is 512 MiB).
    pub bulk_bytes_max: u64,
    /// The most elements of one aggregate (Redis takes up to 1,048,576 arguments from a
    /// client that has not authenticated).
    pub elements_max: u64,
    /// The deepest nesting of aggregates (a command is one level).
    pub depth_max: usize,
    /// The longest line: an inline command, a simple string, an error or a number.
    pub line_bytes_max: usize,
}

impl Limits {
    /// What a client may send.
    pub const CLIENT: Limits = Limits {
        bulk_bytes_max: 512 << 20,
        elements_max: 1 << 20,
        depth_max: 1,
        line_bytes_max: 64 << 10,
    };

    /// What the private server may answer (it is trusted, but a reply is still bounded).
    pub const SERVER: Limits = Limits {
        bulk_bytes_max: 1 << 30,
        elements_max: 1 << 32,
        depth_max: 64,
        line_bytes_max: 16 << 20,
    };
}

/// Why bytes are not RESP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RespError {
    /// A frame starts with a byte that names no type (or, in a command, an element that is not
    /// a bulk string).
    BadType(u8),
    /// A length or number that does not parse.
    BadNumber,
    /// A bulk string longer than the limit.
    BulkTooLarge { len: u64, max: u64 },
    /// An aggregate with more elements than the limit.
    TooManyElements { count: u64, max: u64 },
    /// Aggregates nested deeper than the limit.
    TooDeep { max: usize },
    /// A line longer than the limit without its end.
    LineTooLong { max: usize },
    /// A bulk string not followed by CRLF.
    BadTerminator,
}

impl fmt::Display for RespError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RespError::BadType(b) => write!(f, "unexpected type byte {:?}", char::from(*b)),
            RespError::BadNumber => write!(f, "invalid length or number"),
            RespError::BulkTooLarge { len, max } => {
                write!(f, "bulk length {len} is over the limit of {max} bytes")
            }
            RespError::TooManyElements { count, max } => {
                write!(f, "{count} elements is over the limit of {max}")
            }
            RespError::TooDeep { max } => write!(f, "nested deeper than {max} levels"),
            RespError::LineTooLong { max } => write!(f, "a line longer than {max} bytes"),
            RespError::BadTerminator => write!(f, "a bulk string not followed by CRLF"),
        }
    }
}

impl std::error::Error for RespError {}

/// `Ok(None)`: more bytes are needed.
pub type Parsed<T> = Result<Option<T>, RespError>;

/// The line starting at `at` (without its CRLF) and the position after it.
fn line(buf: &[u8], at: usize, max: usize) -> Parsed<(Range<usize>, usize)> {
    let rest = &buf[at..];
    match rest.windows(2).position(|w| w == b"\r\n") {
        Some(i) if i <= max => Ok(Some((at..at + i, at + i + 2))),
        Some(_) => Err(RespError::LineTooLong { max }),
        None if rest.len() > max + 1 => Err(RespError::LineTooLong { max }),
        None => Ok(None),
    }
}

/// A signed decimal, as RESP writes lengths and integers.
fn number(text: &[u8]) -> Result<i64, RespError> {
    let s = std::str::from_utf8(text).map_err(|_| RespError::BadNumber)?;
    if s.is_empty() || s.starts_with('+') {
        return Err(RespError::BadNumber);
    }
    s.parse().map_err(|_| RespError::BadNumber)
}

/// A length header's value: `None` for the null forms (`-1`).
fn length(text: &[u8]) -> Result<Option<u64>, RespError> {
    match number(text)? {
        -1 => Ok(None),
        n if n < 0 => Err(RespError::BadNumber),
        n => Ok(Some(n as u64)),
    }
}

/// The bulk payload of `len` bytes starting at `at`: its range and the position after its CRLF.
fn bulk_body(buf: &[u8], at: usize, len: u64) -> Parsed<(Range<usize>, usize)> {
    // `len` is bounded by the limits (at most 1 GiB), so it fits a usize on 64-bit targets;
    // nothing is reserved for it: the bytes are looked for in what has arrived.
    let len = usize::try_from(len).map_err(|_| RespError::BadNumber)?;
    let end = at.checked_add(len).ok_or(RespError::BadNumber)?;
    if buf.len() < end + 2 {
        return Ok(None);
    }
    if &buf[end..end + 2] != b"\r\n" {
        return Err(RespError::BadTerminator);
    }
    Ok(Some((at..end, end + 2)))
}

fn check_bulk(len: u64, limits: &Limits) -> Result<(), RespError> {
    if len > limits.bulk_bytes_max {
        return Err(RespError::BulkTooLarge { len, max: limits.bulk_bytes_max });
    }
    Ok(())
}

fn check_count(count: u64, limits: &Limits) -> Result<(), RespError> {
    if count > limits.elements_max {
        return Err(RespError::TooManyElements { count, max: limits.elements_max });
    }
    Ok(())
}

/// The length of the complete frame (any RESP2 or RESP3 type) at the start of `buf`.
pub fn frame_len(buf: &[u8], limits: &Limits) -> Parsed<usize> {
    frame_end(buf, 0, limits, 0)
}

fn frame_end(buf: &[u8], at: usize, limits: &Limits, depth: usize) -> Parsed<usize> {
    let Some(&kind) = buf.get(at) else { return Ok(None) };
    let Some((head, after)) = line(buf, at + 1, limits.line_bytes_max)? else { return Ok(None) };
    let head = &buf[head];
    match kind {
        // Simple string, error, integer, null, double, boolean, big number.
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(Some(after)),
        // Bulk string, bulk error, verbatim string.
        b'$' | b'!' | b'=' => match length(head)? {
            None => Ok(Some(after)),
            Some(len) => {
                check_bulk(len, limits)?;
                Ok(bulk_body(buf, after, len)?.map(|(_, end)| end))
            }
        },
        // Array, set, push; map and attribute hold pairs.
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let Some(count) = length(head)? else { return Ok(Some(after)) };
            check_count(count, limits)?;
            if depth + 1 > limits.depth_max {
                return Err(RespError::TooDeep { max: limits.depth_max });
            }
            let elements = if matches!(kind, b'%' | b'|') { count * 2 } else { count };
            let mut at = after;
            for _ in 0..elements {
                match frame_end(buf, at, limits, depth + 1)? {
                    Some(end) => at = end,
                    None => return Ok(None),
                }
            }
            if kind == b'|' {
                // An attribute precedes the frame it describes, counted one level deeper: a run
                // of attributes is bounded like any nesting, not by the stack.
                return frame_end(buf, at, limits, depth + 1);
            }
            Ok(Some(at))
        }
        other => Err(RespError::BadType(other)),
    }
}

/// A client's command: its arguments as ranges of the buffer it was parsed from, and how many
/// bytes of it the command took. No arguments: an empty line or `*0`, which Redis skips without
/// a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub args: Vec<Range<usize>>,
    pub frame_bytes: usize,
}

impl Command {
    /// The command's name, upper-cased (empty for no arguments).
    pub fn name(&self, buf: &[u8]) -> String {
        self.arg_upper(buf, 0)
    }

    /// Argument `i`, upper-cased (empty if missing or not UTF-8): for names and subcommands.
    pub fn arg_upper(&self, buf: &[u8], i: usize) -> String {
        self.args
            .get(i)
            .and_then(|r| std::str::from_utf8(&buf[r.clone()]).ok())
            .map(str::to_ascii_uppercase)
            .unwrap_or_default()
    }
}

/// The client command at the start of `buf`: an array of bulk strings, or an inline line
/// (arguments split on spaces; one with a quote or a backslash in any argument is refused,
/// because the server would unquote it and the front could not tell which command it is).
pub fn parse_command(buf: &[u8], limits: &Limits) -> Parsed<Command> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_multibulk(buf, limits),
        Some(_) => parse_inline(buf, limits),
    }
}

fn parse_multibulk(buf: &[u8], limits: &Limits) -> Parsed<Command> {
    let Some((head, mut at)) = line(buf, 1, limits.line_bytes_max)? else { return Ok(None) };
    let count = length(&buf[head])?.unwrap_or(0);
    check_count(count, limits)?;
    // Grows with the arguments that have arrived, not with the count the header claims.
    let mut args = Vec::new();
    for _ in 0..count {
        let Some(&kind) = buf.get(at) else { return Ok(None) };
        if kind != b'$' {
            return Err(RespError::BadType(kind));
        }
        let Some((head, after)) = line(buf, at + 1, limits.line_bytes_max)? else {
            return Ok(None);
        };
        let len = length(&buf[head])?.ok_or(RespError::BadNumber)?;
        check_bulk(len, limits)?;
        let Some((arg, end)) = bulk_body(buf, after, len)? else { return Ok(None) };
        args.push(arg);
        at = end;
    }
    Ok(Some(Command { args, frame_bytes: at }))
}

fn parse_inline(buf: &[u8], limits: &Limits) -> Parsed<Command> {
    let max = limits.line_bytes_max;
    let Some(newline) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > max { Err(RespError::LineTooLong { max }) } else { Ok(None) };
    };
    if newline > max {
        return Err(RespError::LineTooLong { max });
    }
    let text_end = if newline > 0 && buf[newline - 1] == b'\r' { newline - 1 } else { newline };
    let mut args = Vec::new();
    let mut at = 0;
    while at < text_end {
        while at < text_end && is_c_space(buf[at]) {
            at += 1;
        }
        let start = at;
        while at < text_end && !is_c_space(buf[at]) {
            at += 1;
        }
        if start < at {
            args.push(start..at);
        }
    }
    // The server unquotes every inline argument (`CLIENT "KILL" ...`), so the front, which
    // reads names and subcommands to refuse, could be told one command and the server run
    // another: an inline command with a quote or a backslash anywhere is refused.
    if args.iter().any(|arg| buf[arg.clone()].iter().any(|b| matches!(b, b'"' | b'\'' | b'\\'))) {
        return Err(RespError::BadType(b'"'));
    }
    Ok(Some(Command { args, frame_bytes: newline + 1 }))
}

/// C's `isspace`, on which Redis splits an inline command (Rust's `is_ascii_whitespace` leaves
/// out the vertical tab, so `CLIENT\x0bKILL` would be one word to the front and two to Redis).
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// A small decoded reply, for the few the front reads itself (handshake answers, `ROLE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Integer(i64),
    Bulk(Vec<u8>),
    Null,
    Array(Vec<Value>),
    /// Any other RESP3 type, kept as its bytes.
    Other(Vec<u8>),
}

/// Decodes the complete frame at the start of `buf` (found with [`frame_len`] first, so the
/// limits were checked): the value and its length.
pub fn decode(buf: &[u8], limits: &Limits) -> Parsed<(Value, usize)> {
    let Some(len) = frame_len(buf, limits)? else { return Ok(None) };
    Ok(Some((decode_at(buf, 0, limits)?.0, len)))
}

fn decode_at(buf: &[u8], at: usize, limits: &Limits) -> Result<(Value, usize), RespError> {
    let incomplete = || RespError::BadNumber;
    let (head, after) = line(buf, at + 1, limits.line_bytes_max)?.ok_or_else(incomplete)?;
    let text = buf[head].to_vec();
    let value = match buf[at] {
        b'+' => (Value::Simple(text), after),
        b'-' => (Value::Error(text), after),
        b':' => (Value::Integer(number(&text)?), after),
        b'_' => (Value::Null, after),
        b'$' => match length(&text)? {
            None => (Value::Null, after),
            Some(len) => {
                let (body, end) = bulk_body(buf, after, len)?.ok_or_else(incomplete)?;
                (Value::Bulk(buf[body].to_vec()), end)
            }
        },
        b'*' => match length(&text)? {
            None => (Value::Null, after),
            Some(count) => {
                let mut items = Vec::new();
                let mut at = after;
                for _ in 0..count {
                    let (item, end) = decode_at(buf, at, limits)?;
                    items.push(item);
                    at = end;
                }
                (Value::Array(items), at)
            }
        },
        _ => {
            let end = frame_end(buf, at, limits, 0)?.ok_or_else(incomplete)?;
            (Value::Other(buf[at..end].to_vec()), end)
        }
    };
    Ok(value)
}

/// Appends `args` as a RESP array of bulk strings.
pub fn encode_command(args: &[&[u8]], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// The replication offset a `ROLE` reply gives: a master's `master_repl_offset` (its second
/// element), or the offset a replica has processed (its fifth).
pub fn role_offset(role: &Value) -> Option<u64> {
    let Value::Array(items) = role else { return None };
    let at = match items.first()? {
        Value::Bulk(kind) if kind == b"master" => 1,
        Value::Bulk(kind) if kind == b"slave" => 4,
        _ => return None,
    };
    match items.get(at)? {
        Value::Integer(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Limits = Limits::CLIENT;
    const S: Limits = Limits::SERVER;

    fn args(buf: &[u8], c: &Command) -> Vec<Vec<u8>> {
        c.args.iter().map(|r| buf[r.clone()].to_vec()).collect()
    }

    #[test]
    fn a_multibulk_command_parses_only_once_whole() {
        let buf = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n*1\r\n";
        let whole = 31;
        for cut in 0..whole {
            assert_eq!(parse_command(&buf[..cut], &C), Ok(None), "cut at {cut}");
        }
        let c = parse_command(buf, &C).unwrap().unwrap();
        assert_eq!(c.frame_bytes, whole);
        assert_eq!(args(buf, &c), vec![b"SET".to_vec(), b"k".to_vec(), b"hello".to_vec()]);
        assert_eq!(c.name(buf), "SET");
    }

    #[test]
    fn binary_arguments_pass_through() {
        let buf = b"*2\r\n$3\r\nget\r\n$4\r\n\r\n\0\xff\r\n";
        let c = parse_command(buf, &C).unwrap().unwrap();
        assert_eq!(args(buf, &c)[1], b"\r\n\0\xff".to_vec());
        assert_eq!(c.name(buf), "GET");
    }

    #[test]
    fn a_one_gibibyte_bulk_is_refused_at_its_header() {
        let buf = b"*2\r\n$3\r\nSET\r\n$1073741824\r\nabc";
        assert_eq!(
            parse_command(buf, &C),
            Err(RespError::BulkTooLarge { len: 1 << 30, max: 512 << 20 })
        );
        let buf = b"*99999999999\r\n";
        assert!(matches!(parse_command(buf, &C), Err(RespError::TooManyElements { .. })));
    }

    #[test]
    fn malformed_commands_are_errors() {
        for bad in [
            &b"*2\r\n:1\r\n"[..],
            b"*x\r\n",
            b"*1\r\n$-5\r\n",
            b"*1\r\n$3\r\nabcd\r\n",
            b"*1\r\n$-1\r\n",
            b"*-7\r\n",
        ] {
            assert!(parse_command(bad, &C).is_err(), "{bad:?} parsed");
        }
        let long = vec![b'a'; (64 << 10) + 2];
        assert_eq!(parse_command(&long, &C), Err(RespError::LineTooLong { max: 64 << 10 }));
    }

    #[test]
    fn inline_commands_split_on_spaces() {
        let buf = b"set  k v\r\nPING\n";
        let c = parse_command(buf, &C).unwrap().unwrap();
        assert_eq!(args(buf, &c), vec![b"set".to_vec(), b"k".to_vec(), b"v".to_vec()]);
        assert_eq!(c.frame_bytes, 10);
        let rest = &buf[c.frame_bytes..];
        let c = parse_command(rest, &C).unwrap().unwrap();
        assert_eq!(c.name(rest), "PING");
        let c = parse_command(b"\r\n", &C).unwrap().unwrap();
        assert!(c.args.is_empty());
        assert!(parse_command(b"\"CONFIG\" SET x y\r\n", &C).is_err());
        assert_eq!(parse_command(b"PIN", &C), Ok(None));
    }

    /// Redis unquotes every inline argument, so a quoted subcommand would name a refused one.
    #[test]
    fn inline_commands_with_quotes_anywhere_are_refused() {
        for bad in [
            &b"CLIENT \"KILL\" TYPE replica\r\n"[..],
            b"CLIENT 'PAUSE' 1000\r\n",
            b"CLIENT \"TRACKING\" ON\n",
            b"CLIENT TR\\x41CKING ON\r\n",
            b"SET k \"v\"\r\n",
        ] {
            let text = String::from_utf8_lossy(bad);
            assert_eq!(parse_command(bad, &C), Err(RespError::BadType(b'"')), "{text}");
        }
        let c = parse_command(b"CLIENT SETNAME x\r\n", &C).unwrap().unwrap();
        assert_eq!(c.args.len(), 3);
        // Redis splits on C's isspace, vertical tab included: the front sees the same words.
        let buf = b"CLIENT\x0bKILL\x0cTYPE replica\r\n";
        let c = parse_command(buf, &C).unwrap().unwrap();
        assert_eq!(c.arg_upper(buf, 1), "KILL");
    }

    #[test]
    fn frames_of_every_type_have_their_length() {
        let frames: [&[u8]; 14] = [
            b"+OK\r\n",
            b"-ERR no\r\n",
            b":42\r\n",
            b"$5\r\nhello\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*2\r\n$1\r\na\r\n:1\r\n",
            b"_\r\n",
            b",3.14\r\n",
            b"#t\r\n",
            b"%1\r\n+k\r\n*1\r\n:2\r\n",
            b"~2\r\n+a\r\n+b\r\n",
            b"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n",
            b"=15\r\ntxt:Some string\r\n",
        ];
        for f in frames {
            let mut buf = f.to_vec();
            buf.extend_from_slice(b"+next\r\n");
            assert_eq!(frame_len(&buf, &S), Ok(Some(f.len())), "{:?}", String::from_utf8_lossy(f));
            for cut in 0..f.len() {
                assert_eq!(frame_len(&f[..cut], &S), Ok(None), "{f:?} cut at {cut}");
            }
        }
        assert_eq!(frame_len(b"?x\r\n", &S), Err(RespError::BadType(b'?')));
    }

    #[test]
    fn nesting_is_bounded() {
        let mut deep = Vec::new();
        for _ in 0..100 {
            deep.extend_from_slice(b"*1\r\n");
        }
        deep.extend_from_slice(b":1\r\n");
        assert_eq!(frame_len(&deep, &S), Err(RespError::TooDeep { max: 64 }));
        // Empty attributes, each before the next: as deep as they are many.
        let attributes = b"|0\r\n".repeat(1 << 20);
        assert_eq!(frame_len(&attributes, &S), Err(RespError::TooDeep { max: 64 }));
        let mut two = b"|0\r\n|0\r\n".to_vec();
        two.extend_from_slice(b":1\r\n");
        assert_eq!(frame_len(&two, &S), Ok(Some(two.len())));
    }

    #[test]
    fn role_replies_give_the_offset() {
        let master = b"*3\r\n$6\r\nmaster\r\n:80\r\n*1\r\n*3\r\n$1\r\nx\r\n$1\r\n0\r\n$1\r\n0\r\n";
        let (value, len) = decode(master, &S).unwrap().unwrap();
        assert_eq!(len, master.len());
        assert_eq!(role_offset(&value), Some(80));
        let slave =
            b"*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n$9\r\nconnected\r\n:1234\r\n";
        let (value, _) = decode(slave, &S).unwrap().unwrap();
        assert_eq!(role_offset(&value), Some(1234));
        let (value, _) = decode(b"-ERR x\r\n", &S).unwrap().unwrap();
        assert_eq!(role_offset(&value), None);
    }

    #[test]
    fn encoded_commands_parse_back() {
        let mut out = Vec::new();
        encode_command(&[b"REPLCONF", b"ACK", b"17"], &mut out);
        let c = parse_command(&out, &C).unwrap().unwrap();
        assert_eq!(c.frame_bytes, out.len());
        assert_eq!(c.arg_upper(&out, 2), "17");
    }
}
