//! A minimal HTTP/1.1 client for JSON POST requests over one keep-alive connection: enough for
//! etcd's JSON gateway, with nothing between the benchmark and the socket but one buffer.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// Responses, header lines and header sections larger than these are treated as protocol errors
/// rather than allocated.
const BODY_BYTES_MAX: usize = 64 * 1024 * 1024;
const HEADER_LINE_BYTES_MAX: usize = 16 * 1024;
const HEADERS_COUNT_MAX: usize = 100;

/// A response: its status code and body (chunked transfer encoding already undone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

impl Response {
    pub(crate) fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One keep-alive connection to a server on loopback.
pub(crate) struct Connection {
    port: u16,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    request: Vec<u8>,
    line: Vec<u8>,
    /// Set when the server said it closes the connection after its response.
    closed: bool,
}

impl Connection {
    pub(crate) fn connect(port: u16) -> io::Result<Connection> {
        let (reader, writer) = crate::process::connect_loopback(port)?;
        Ok(Connection {
            port,
            reader,
            writer,
            request: Vec::new(),
            line: Vec::new(),
            closed: false,
        })
    }

    /// Sends `POST path` with a JSON body and reads the response. Request line, headers and body
    /// go out in one system call.
    pub(crate) fn post_json(&mut self, path: &str, body: &[u8]) -> io::Result<Response> {
        if self.closed {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the server closed this keep-alive connection",
            ));
        }
        self.request.clear();
        write!(
            self.request,
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            self.port,
            body.len()
        )?;
        self.request.extend_from_slice(body);
        self.writer.write_all(&self.request)?;
        self.read_response()
    }

    fn read_response(&mut self) -> io::Result<Response> {
        self.read_line()?;
        let status = parse_status_line(&self.line)?;
        let mut content_length = None;
        let mut chunked = false;
        let mut headers_count = 0;
        loop {
            self.read_line()?;
            if self.line.is_empty() {
                break;
            }
            headers_count += 1;
            if headers_count > HEADERS_COUNT_MAX {
                return Err(protocol_error("too many header lines"));
            }
            let line = String::from_utf8_lossy(&self.line);
            let Some((name, value)) = line.split_once(':') else {
                return Err(protocol_error(&format!("bad header line {line:?}")));
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                let length: usize = value
                    .parse()
                    .map_err(|_| protocol_error(&format!("bad Content-Length {value:?}")))?;
                content_length = Some(length);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().contains("chunked");
            } else if name.eq_ignore_ascii_case("connection") {
                self.closed = value.eq_ignore_ascii_case("close");
            }
        }
        let body = if chunked {
            self.read_chunked_body()?
        } else if let Some(length) = content_length {
            if length > BODY_BYTES_MAX {
                return Err(protocol_error(&format!("body of {length} bytes is too large")));
            }
            let mut body = vec![0; length];
            self.reader.read_exact(&mut body)?;
            body
        } else {
            // Without a length the body runs until the server closes; this client does not keep
            // such connections.
            self.closed = true;
            let mut body = Vec::new();
            (&mut self.reader).take(BODY_BYTES_MAX as u64).read_to_end(&mut body)?;
            body
        };
        Ok(Response { status, body })
    }

    fn read_chunked_body(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            self.read_line()?;
            let line = String::from_utf8_lossy(&self.line);
            let size_text = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| protocol_error(&format!("bad chunk size {size_text:?}")))?;
            if size == 0 {
                // Trailer lines, if any, end with an empty line.
                loop {
                    self.read_line()?;
                    if self.line.is_empty() {
                        return Ok(body);
                    }
                }
            }
            if body.len().saturating_add(size) > BODY_BYTES_MAX {
                return Err(protocol_error("chunked body is too large"));
            }
            let start = body.len();
            body.resize(start + size, 0);
            self.reader.read_exact(&mut body[start..])?;
            self.read_line()?;
            if !self.line.is_empty() {
                return Err(protocol_error("chunk not followed by CRLF"));
            }
        }
    }

    /// Reads one CRLF-terminated line into `self.line`, without the line ending.
    fn read_line(&mut self) -> io::Result<()> {
        self.line.clear();
        let read = (&mut self.reader)
            .take(HEADER_LINE_BYTES_MAX as u64)
            .read_until(b'\n', &mut self.line)?;
        if read == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            ));
        }
        if !self.line.ends_with(b"\n") {
            return Err(protocol_error("line too long or not terminated"));
        }
        self.line.pop();
        if self.line.ends_with(b"\r") {
            self.line.pop();
        }
        Ok(())
    }
}

fn parse_status_line(line: &[u8]) -> io::Result<u16> {
    let text = String::from_utf8_lossy(line);
    let mut parts = text.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let code = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(protocol_error(&format!("bad status line {text:?}")));
    }
    code.parse().map_err(|_| protocol_error(&format!("bad status line {text:?}")))
}

fn protocol_error(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("HTTP protocol error: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::net::TcpListener;
    use std::thread;

    /// A fake server answers two requests on one connection, one with a length and one chunked,
    /// and checks what the client sent.
    #[test]
    fn keep_alive_with_length_and_chunked_bodies() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut writer = stream;
            let mut requests = Vec::new();
            for response in [
                &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"[..],
                b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n\
                  3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
            ] {
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    head.push_str(&line);
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = [0u8; 5];
                reader.read_exact(&mut body).unwrap();
                requests.push((head, body));
                writer.write_all(response).unwrap();
            }
            requests
        });
        let mut connection = Connection::connect(port).unwrap();
        let first = connection.post_json("/v3/kv/put", b"{\"a\"}").unwrap();
        assert_eq!(first, Response { status: 200, body: b"{}".to_vec() });
        let second = connection.post_json("/v3/kv/range", b"{\"b\"}").unwrap();
        assert_eq!(second, Response { status: 404, body: b"abcde".to_vec() });
        let requests = server.join().unwrap();
        assert!(requests[0].0.starts_with("POST /v3/kv/put HTTP/1.1\r\n"));
        assert!(requests[0].0.contains("Content-Length: 5\r\n"));
        assert_eq!(&requests[1].1, b"{\"b\"}");
    }

    #[test]
    fn bad_status_lines_are_errors() {
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK").unwrap(), 200);
        assert!(parse_status_line(b"SSH-2.0").is_err());
        assert!(parse_status_line(b"HTTP/1.1 abc").is_err());
        assert!(parse_status_line(b"").is_err());
    }
}
