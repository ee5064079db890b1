//! A minimal Redis client: commands encoded as RESP arrays of bulk strings, replies parsed from a
//! buffered TCP stream. Enough for `PING`, `INFO`, `SET`, `GET` and `WAIT`, and nothing between
//! the benchmark and the socket but one buffer.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// A reply longer than this is treated as a protocol error rather than allocated (Redis's own
/// limit on a bulk string is 512 MiB).
const BULK_BYTES_MAX: usize = 512 * 1024 * 1024;

/// A reply line (a type byte and its text) longer than this is treated as a protocol error: a
/// server that is not Redis could otherwise send one without end.
const LINE_BYTES_MAX: u64 = 64 * 1024;

/// Arrays nested deeper than this are treated as a protocol error (none of the commands used
/// here answers with nested arrays at all).
const NESTING_DEPTH_MAX: usize = 8;

/// One RESP reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    /// `None` is the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `None` is the null array.
    Array(Option<Vec<Reply>>),
}

/// One TCP connection to a Redis server.
pub(crate) struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    line: Vec<u8>,
}

impl Connection {
    pub(crate) fn connect(port: u16) -> io::Result<Connection> {
        let (reader, writer) = crate::process::connect_loopback(port)?;
        Ok(Connection { reader, writer, line: Vec::new() })
    }

    /// Writes already encoded commands in one system call.
    pub(crate) fn send(&mut self, encoded: &[u8]) -> io::Result<()> {
        self.writer.write_all(encoded)
    }

    /// Sends one command and reads its reply.
    pub(crate) fn command(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        let mut encoded = Vec::new();
        encode_command(&mut encoded, args);
        self.send(&encoded)?;
        self.read_reply()
    }

    /// Reads the next reply.
    pub(crate) fn read_reply(&mut self) -> io::Result<Reply> {
        self.read_reply_nested(0)
    }

    fn read_reply_nested(&mut self, depth: usize) -> io::Result<Reply> {
        if depth > NESTING_DEPTH_MAX {
            return Err(protocol_error("arrays nested too deep"));
        }
        self.read_line()?;
        let (&kind, rest) =
            self.line.split_first().ok_or_else(|| protocol_error("empty reply line"))?;
        let text = std::str::from_utf8(rest).map_err(|_| protocol_error("reply is not UTF-8"))?;
        match kind {
            b'+' => Ok(Reply::Simple(text.to_string())),
            b'-' => Ok(Reply::Error(text.to_string())),
            b':' => text
                .parse()
                .map(Reply::Integer)
                .map_err(|_| protocol_error(&format!("bad integer reply {text:?}"))),
            b'$' => {
                let Some(length) = parse_length(text)? else {
                    return Ok(Reply::Bulk(None));
                };
                // The payload is followed by CRLF, which is read and checked too. Read as it
                // comes rather than allocated up front at the length announced.
                let mut payload = Vec::with_capacity((length + 2).min(64 * 1024));
                (&mut self.reader).take(length as u64 + 2).read_to_end(&mut payload)?;
                if payload.len() < length + 2 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "server closed the connection within a bulk string",
                    ));
                }
                if !payload.ends_with(b"\r\n") {
                    return Err(protocol_error("bulk string not followed by CRLF"));
                }
                payload.truncate(length);
                Ok(Reply::Bulk(Some(payload)))
            }
            b'*' => {
                let Some(count) = parse_length(text)? else {
                    return Ok(Reply::Array(None));
                };
                let mut items = Vec::with_capacity(count.min(1024));
                for _ in 0..count {
                    items.push(self.read_reply_nested(depth + 1)?);
                }
                Ok(Reply::Array(Some(items)))
            }
            other => Err(protocol_error(&format!("unknown reply type byte {other:#04x}"))),
        }
    }

    /// Reads one CRLF-terminated line into `self.line`, without the CRLF.
    fn read_line(&mut self) -> io::Result<()> {
        self.line.clear();
        let read = (&mut self.reader).take(LINE_BYTES_MAX).read_until(b'\n', &mut self.line)?;
        if read as u64 == LINE_BYTES_MAX && !self.line.ends_with(b"\n") {
            return Err(protocol_error(&format!("reply line longer than {LINE_BYTES_MAX} bytes")));
        }
        if read == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            ));
        }
        if !self.line.ends_with(b"\r\n") {
            return Err(protocol_error("reply line not terminated by CRLF"));
        }
        self.line.truncate(self.line.len() - 2);
        Ok(())
    }
}

/// A bulk string or array length: `None` for -1 (null), an error for other negative or too large
/// values.
fn parse_length(text: &str) -> io::Result<Option<usize>> {
    let length: i64 = text.parse().map_err(|_| protocol_error(&format!("bad length {text:?}")))?;
    if length == -1 {
        return Ok(None);
    }
    match usize::try_from(length) {
        Ok(length) if length <= BULK_BYTES_MAX => Ok(Some(length)),
        _ => Err(protocol_error(&format!("length {length} out of range"))),
    }
}

fn protocol_error(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("RESP protocol error: {message}"))
}

/// Appends one command, as a RESP array of bulk strings, to `out`.
pub(crate) fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::net::TcpListener;
    use std::thread;

    #[test]
    fn encodes_commands_as_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode_command(&mut out, &[b"SET", b"k", b""]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }

    /// A fake server answers with every reply type, and garbage at the end.
    #[test]
    fn parses_every_reply_type_and_rejects_garbage() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            stream
                .write_all(
                    b"+OK\r\n-ERR no\r\n:2\r\n$3\r\nabc\r\n$-1\r\n*2\r\n:1\r\n$0\r\n\r\n*-1\r\n\
                      $99999999999\r\n",
                )
                .unwrap();
        });
        let mut connection = Connection::connect(port).unwrap();
        assert_eq!(connection.read_reply().unwrap(), Reply::Simple("OK".into()));
        assert_eq!(connection.read_reply().unwrap(), Reply::Error("ERR no".into()));
        assert_eq!(connection.read_reply().unwrap(), Reply::Integer(2));
        assert_eq!(connection.read_reply().unwrap(), Reply::Bulk(Some(b"abc".to_vec())));
        assert_eq!(connection.read_reply().unwrap(), Reply::Bulk(None));
        assert_eq!(
            connection.read_reply().unwrap(),
            Reply::Array(Some(vec![Reply::Integer(1), Reply::Bulk(Some(Vec::new()))]))
        );
        assert_eq!(connection.read_reply().unwrap(), Reply::Array(None));
        assert!(connection.read_reply().is_err());
        server.join().unwrap();
        assert!(connection.read_reply().is_err());
    }

    /// Something other than Redis on the port: a line without end, or a bulk string announced
    /// longer than what comes, is an error, not memory taken without bound or a read for ever.
    #[test]
    fn endless_lines_and_short_bulk_strings_are_errors() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let endless = vec![b'x'; LINE_BYTES_MAX as usize + 10];
            let _ = stream.write_all(b"+");
            let _ = stream.write_all(&endless);
            let (mut stream, _) = listener.accept().unwrap();
            let _ = stream.write_all(b"$500000000\r\nabc");
        });
        let mut connection = Connection::connect(port).unwrap();
        let err = connection.read_reply().unwrap_err();
        assert!(err.to_string().contains("longer than"), "{err}");
        let mut connection = Connection::connect(port).unwrap();
        let err = connection.read_reply().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
        server.join().unwrap();
    }
}
