//! A client of an unmodified Redis or Memcached, or of a replica's front for one: `SET` and
//! `GET` in RESP, or `set` and `get` in memcached's text protocol, one at a time, over TCP or a
//! Unix socket. What `mu demo --app redis|memcached`'s checking clients and `mu bench e2e`'s
//! application rows send.

use crate::app_state::ExternalApp;
use mu_redis::resp::{decode, encode_command, Limits, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// How the client reaches its server.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn set_timeouts(&self, timeout: Duration) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))
            }
            Stream::Unix(s) => {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))
            }
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(bytes),
            Stream::Unix(s) => s.write_all(bytes),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

/// A connection to one server or front, speaking the application's protocol.
pub struct AppConn {
    app: ExternalApp,
    /// The replica whose front this is (0 for a bare server), for errors and for the caller.
    pub target: u16,
    /// Its address or socket path, for errors.
    peer: String,
    stream: Stream,
    buf: Vec<u8>,
    /// A request being written, kept to reuse its allocation.
    out: Vec<u8>,
}

impl AppConn {
    /// Connects to `address` (`host:port`) over TCP, waiting at most `connect_wait` for the
    /// connection and `timeout` for each reply.
    pub fn connect_tcp(
        app: ExternalApp,
        target: u16,
        address: &str,
        (connect_wait, timeout): (Duration, Duration),
    ) -> Result<AppConn, String> {
        let addr: std::net::SocketAddr =
            address.parse().map_err(|e| format!("address {address}: {e}"))?;
        let stream = TcpStream::connect_timeout(&addr, connect_wait)
            .map_err(|e| format!("connecting to {address}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        AppConn::of(app, target, address.into(), Stream::Tcp(stream), timeout)
    }

    /// Connects to the Unix socket `path`, waiting at most `timeout` for each reply.
    pub fn connect_unix(
        app: ExternalApp,
        target: u16,
        path: &Path,
        timeout: Duration,
    ) -> Result<AppConn, String> {
        let stream = UnixStream::connect(path)
            .map_err(|e| format!("connecting to {}: {e}", path.display()))?;
        AppConn::of(app, target, path.display().to_string(), Stream::Unix(stream), timeout)
    }

    fn of(
        app: ExternalApp,
        target: u16,
        peer: String,
        stream: Stream,
        timeout: Duration,
    ) -> Result<AppConn, String> {
        stream.set_timeouts(timeout).map_err(|e| e.to_string())?;
        Ok(AppConn { app, target, peer, stream, buf: Vec::new(), out: Vec::new() })
    }

    /// Stores `value` under `key`; Ok once the server (or the front) acknowledged it.
    pub fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        match self.app {
            ExternalApp::Redis => match self.redis_call(&[b"SET", key, value])? {
                Value::Simple(s) if s == b"OK" => Ok(()),
                other => Err(format!("SET answered {other:?}")),
            },
            ExternalApp::Memcached => {
                let mut out = std::mem::take(&mut self.out);
                out.clear();
                out.extend_from_slice(b"set ");
                out.extend_from_slice(key);
                out.extend_from_slice(format!(" 0 0 {}\r\n", value.len()).as_bytes());
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
                let written = self.write(&out);
                self.out = out;
                written?;
                match self.line()? {
                    line if line == b"STORED\r\n" => Ok(()),
                    line => Err(format!("set answered {:?}", String::from_utf8_lossy(&line))),
                }
            }
        }
    }

    /// The value of `key`, if it has one.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match self.app {
            ExternalApp::Redis => match self.redis_call(&[b"GET", key])? {
                Value::Bulk(v) => Ok(Some(v)),
                Value::Null => Ok(None),
                other => Err(format!("GET answered {other:?}")),
            },
            ExternalApp::Memcached => {
                let mut out = std::mem::take(&mut self.out);
                out.clear();
                out.extend_from_slice(b"get ");
                out.extend_from_slice(key);
                out.extend_from_slice(b"\r\n");
                let written = self.write(&out);
                self.out = out;
                written?;
                let line = self.line()?;
                if line == b"END\r\n" {
                    return Ok(None);
                }
                let text = String::from_utf8_lossy(&line).into_owned();
                // VALUE <key> <flags> <bytes>
                let bytes: usize = match text.split_whitespace().collect::<Vec<_>>()[..] {
                    ["VALUE", k, _, n] if k.as_bytes() == key => {
                        n.parse().map_err(|_| text.clone())?
                    }
                    _ => return Err(format!("get answered {text:?}")),
                };
                let value = self.take(bytes + 2)?;
                if self.line()? != b"END\r\n" {
                    return Err(format!(
                        "get {}: no END after the value",
                        String::from_utf8_lossy(key)
                    ));
                }
                Ok(Some(value[..bytes].to_vec()))
            }
        }
    }

    fn redis_call(&mut self, args: &[&[u8]]) -> Result<Value, String> {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        encode_command(args, &mut out);
        let written = self.write(&out);
        self.out = out;
        written?;
        loop {
            match decode(&self.buf, &Limits::SERVER).map_err(|e| e.to_string())? {
                Some((value, len)) => {
                    self.buf.drain(..len);
                    return Ok(value);
                }
                None => self.fill()?,
            }
        }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream.write_all(bytes).map_err(|e| format!("writing to {}: {e}", self.peer))
    }

    /// The next line, with its `\r\n`.
    fn line(&mut self) -> Result<Vec<u8>, String> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                return Ok(self.buf.drain(..at + 2).collect());
            }
            self.fill()?;
        }
    }

    fn take(&mut self, len: usize) -> Result<Vec<u8>, String> {
        while self.buf.len() < len {
            self.fill()?;
        }
        Ok(self.buf.drain(..len).collect())
    }

    fn fill(&mut self) -> Result<(), String> {
        let mut chunk = [0u8; 16 << 10];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err(format!("{} closed the connection", self.peer)),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) => Err(format!("reading from {}: {e}", self.peer)),
        }
    }
}
