//! What the service's test files share: a private run directory, waiting with a bound,
//! stopping a replica its servers may still hold for a moment, and a connection that speaks
//! the wire protocol by hand.
#![allow(dead_code)] // each test file uses its own part

use mu_replica::Replica;
use mu_service::wire::{read_frame, write_frame, ClientMessage, FrameError, ServerMessage};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long any wait of these tests may take before it is a failure: far above what anything
/// takes on an idle machine, so that a loaded one does not fail them.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A new, empty directory `name` only this user may enter, on tmpfs where there is one (the
/// shared-memory fabric's files live there); an earlier run's is removed first.
pub fn run_dir(name: &str) -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new().mode(0o700).create(&dir).expect("run directory");
    dir
}

/// Stops `replica` here: a thread of a server that is just ending may still hold it for a
/// moment, so this waits for it, so that the replica stops before its run directory goes.
pub fn stop_replica(replica: Arc<Replica>) {
    let deadline = Instant::now() + PATIENCE;
    while Arc::strong_count(&replica) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(replica);
}

/// Calls `ready` every few milliseconds until it gives a value; panics after [`PATIENCE`].
pub fn poll<T>(what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = ready() {
            return value;
        }
        assert!(start.elapsed() < PATIENCE, "timed out after {PATIENCE:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A connection that speaks the wire protocol by hand, over either transport.
pub struct Raw<S: Read + Write> {
    pub stream: S,
    body: Vec<u8>,
}

impl<S: Read + Write> Raw<S> {
    /// Speaks over `stream` (whose reads should time out after [`PATIENCE`], so that a server
    /// that never answers fails the test instead of hanging it).
    pub fn new(stream: S) -> Raw<S> {
        Raw { stream, body: Vec::new() }
    }

    /// Sends one frame holding `body` and reads the answer (`None`: the connection closed).
    pub fn try_ask(&mut self, body: &[u8]) -> Option<ServerMessage> {
        write_frame(&mut self.stream, body).ok()?;
        self.answer()
    }

    pub fn try_ask_message(&mut self, message: &ClientMessage) -> Option<ServerMessage> {
        let mut body = Vec::new();
        message.encode(&mut body);
        self.try_ask(&body)
    }

    /// Sends one frame holding `body` and reads the answer, which must come.
    pub fn ask(&mut self, body: &[u8]) -> ServerMessage {
        self.try_ask(body).expect("an answer")
    }

    pub fn ask_message(&mut self, message: &ClientMessage) -> ServerMessage {
        self.try_ask_message(message).expect("an answer")
    }

    /// The next answer; `None` if the server closed the connection. A server that neither
    /// answers nor closes within the read timeout fails the test: that is no close.
    pub fn answer(&mut self) -> Option<ServerMessage> {
        match read_frame(&mut self.stream, &mut self.body) {
            Ok(true) => Some(ServerMessage::decode(&self.body).expect("a well-formed answer")),
            Ok(false) => None,
            Err(FrameError::Io(e))
                if matches!(
                    e.kind(),
                    ErrorKind::UnexpectedEof
                        | ErrorKind::ConnectionReset
                        | ErrorKind::ConnectionAborted
                        | ErrorKind::BrokenPipe
                ) =>
            {
                None
            }
            Err(e) => panic!("neither an answer nor a close: {e}"),
        }
    }
}
