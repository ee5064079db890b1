//! The master a follower's server replicates from: the front answers the Redis replica
//! handshake itself, with an empty RDB, then writes the committed stream into the connection
//! (`docs/apps/redis.md`, "Followers"). The answers are pure ([`answer`]); [`serve`] moves the
//! bytes.

use crate::resp::{parse_command, Limits};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The replication id the front gives its server: fixed, since the server only ever has this
/// one master (the front), which starts it at offset 0.
pub const REPLID: &str = "6d752d72656469732d6d61737465722d30303031";
const _: () = assert!(REPLID.len() == 40);

/// An RDB with no keys: the header of version 10 (Redis 7.0), the end-of-file opcode and a
/// zero checksum, which Redis reads as "saved without a checksum".
pub const EMPTY_RDB: &[u8] = b"REDIS0010\xff\0\0\0\0\0\0\0\0";

/// What the front answers a handshake command of its server, and whether the stream starts
/// after it.
pub fn answer(name: &str) -> (Vec<u8>, bool) {
    match name {
        "PING" => (b"+PONG\r\n".to_vec(), false),
        "PSYNC" | "SYNC" => {
            let mut out =
                format!("+FULLRESYNC {} 0\r\n${}\r\n", REPLID, EMPTY_RDB.len()).into_bytes();
            out.extend_from_slice(EMPTY_RDB);
            (out, true)
        }
        // REPLCONF listening-port, capa, ip-address; AUTH (the server has no password).
        _ => (b"+OK\r\n".to_vec(), false),
    }
}

/// The committed stream on its way to the local server: what the log applied and the front has
/// not written yet, and how much it has written.
#[derive(Default)]
pub struct Feed {
    pub queue: Vec<u8>,
    /// Bytes written to the server so far: its replication offset once it has run them.
    pub written: u64,
    /// Set when the front stops feeding (this replica leads, or it shuts down).
    pub closed: bool,
}

/// A [`Feed`] shared by the state machine (which fills it) and the feeding thread.
#[derive(Default)]
pub struct SharedFeed {
    pub feed: Mutex<Feed>,
    pub changed: Condvar,
}

impl SharedFeed {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Feed> {
        self.feed.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn push(&self, bytes: &[u8]) {
        self.lock().queue.extend_from_slice(bytes);
        self.changed.notify_all();
    }

    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// Whether everything queued has been written.
    pub fn drained(&self) -> bool {
        self.lock().queue.is_empty()
    }
}

/// Answers the server's handshake on `stream`, then writes the feed into it until the feed
/// closes or the connection breaks (an error). The server's `REPLCONF ACK`s are read and
/// dropped by a thread of their own.
pub fn serve(mut stream: TcpStream, feed: &SharedFeed) -> Result<(), String> {
    handshake(&mut stream)?;
    let mut acks = stream.try_clone().map_err(|e| format!("master link: {e}"))?;
    std::thread::Builder::new()
        .name("redis-acks".into())
        .spawn(move || {
            let mut sink = [0u8; 4096];
            while matches!(acks.read(&mut sink), Ok(n) if n > 0) {}
        })
        .map_err(|e| format!("master link: {e}"))?;
    let mut out = Vec::new();
    loop {
        {
            let mut f = feed.lock();
            while f.queue.is_empty() && !f.closed {
                f = feed.changed.wait(f).unwrap_or_else(|p| p.into_inner());
            }
            if f.closed {
                let _ = stream.shutdown(std::net::Shutdown::Both);
                return Ok(());
            }
            std::mem::swap(&mut out, &mut f.queue);
        }
        stream.write_all(&out).map_err(|e| format!("feeding the local server: {e}"))?;
        let mut f = feed.lock();
        f.written += out.len() as u64;
        out.clear();
        drop(f);
        feed.changed.notify_all();
    }
}

/// Reads the server's handshake commands and answers each, up to `PSYNC`.
fn handshake(stream: &mut TcpStream) -> Result<(), String> {
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        while let Some(c) = parse_command(&buf, &Limits::CLIENT)
            .map_err(|e| format!("the local server's handshake: {e}"))?
        {
            let name = c.name(&buf);
            buf.drain(..c.frame_bytes);
            if name.is_empty() {
                continue;
            }
            let (reply, streaming) = answer(&name);
            stream.write_all(&reply).map_err(|e| format!("master handshake: {e}"))?;
            if streaming {
                stream.set_read_timeout(None).map_err(|e| e.to_string())?;
                return Ok(());
            }
        }
        let n = stream.read(&mut chunk).map_err(|e| format!("master handshake: {e}"))?;
        if n == 0 {
            return Err("the local server closed its link during the handshake".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handshake_ends_with_a_full_resync_and_an_empty_rdb() {
        assert_eq!(answer("PING"), (b"+PONG\r\n".to_vec(), false));
        assert_eq!(answer("REPLCONF"), (b"+OK\r\n".to_vec(), false));
        let (reply, streaming) = answer("PSYNC");
        assert!(streaming);
        let text = String::from_utf8_lossy(&reply);
        assert!(text.starts_with(&format!("+FULLRESYNC {} 0\r\n$18\r\nREDIS0010", REPLID)));
        assert!(reply.ends_with(EMPTY_RDB));
        assert_eq!(EMPTY_RDB.len(), 18);
    }
}
