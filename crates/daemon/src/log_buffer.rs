//! Where `mu replica`'s log events go before stderr: a bounded buffer in memory, written out by
//! a thread of its own, so that no replica thread ever makes a system call to log, or waits for
//! whoever reads stderr.
//!
//! A replica logs at its rarest moments, and those are the ones that must be fast: a failover
//! logs the failure detector's verdict and the election on the background thread, then the new
//! leader's first steps on its replication thread, between the steps it reports. Written to
//! stderr at once, each event cost a `write(2)` on those threads (docs/service.md, "Logs", has
//! the figures: 18 to 38 µs at the 99th percentile on a 2-vCPU virtual machine), and waited
//! without bound when stderr is a pipe whose reader stalls: then the background thread stops
//! beating its heartbeat, and the others judge the replica failed. Here an event costs its
//! formatting and a copy under a lock; when the buffer is full, events are dropped, counted, and
//! the count is logged once there is room again.
//!
//! The price: events reach stderr up to [`FLUSH_PERIOD`] late (while stderr keeps up), and a
//! process killed with SIGKILL loses what it logged in that time. Normal exits flush everything
//! ([`LogBuffer`]'s drop, which waits for stderr to take it), and so does a panic, before the
//! panic's own message is printed.
//!
//! Rejected: `tracing-appender`'s non-blocking writer, which wakes its writing thread for every
//! event (a futex wake-up: 5.0 to 11.4 µs per event at the median in the same measurement, more
//! than the direct write it replaces); and waking the writer when the buffer passes a mark,
//! which puts a system call back on some event's path.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;
use tracing::warn;
use tracing_subscriber::fmt::MakeWriter;

/// The target of this module's log events, as they were named when it was part of the `mu`
/// binary, so that `MU_LOG` filters written for it still apply.
const LOG_TARGET: &str = "mu::log_buffer";

/// How often the writing thread looks for events to write.
pub const FLUSH_PERIOD: Duration = Duration::from_millis(5);
/// Bytes of events held at most between two flushes (about 20,000 events of text).
pub const CAPACITY_BYTES: usize = 4 << 20;

/// The sink the events are written to (stderr, or a test's).
type Sink = Box<dyn Write + Send>;

struct Pending {
    bytes: Vec<u8>,
    /// Events dropped since the last flush: the buffer was full.
    dropped: u64,
    stopping: bool,
}

struct Inner {
    pending: Mutex<Pending>,
    /// Wakes the writing thread early, to stop.
    stop: Condvar,
    capacity_bytes: usize,
    /// Held while a batch is written, so that batches reach the sink in order whoever writes
    /// them (the writing thread, a panic, the final flush).
    sink: Mutex<Sink>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while logging leaves plain bytes behind: still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    /// Writes out what is pending, and says how many events were dropped since the last time.
    fn flush(&self, spare: &mut Vec<u8>) -> u64 {
        {
            let p = lock(&self.pending);
            if p.bytes.is_empty() && p.dropped == 0 {
                return 0;
            }
        }
        let mut sink = lock(&self.sink);
        let dropped = {
            let mut p = lock(&self.pending);
            std::mem::swap(&mut p.bytes, spare);
            std::mem::take(&mut p.dropped)
        };
        // Nothing to do with an error here: stderr is where errors would go.
        let _ = sink.write_all(spare).and_then(|_| sink.flush());
        spare.clear();
        dropped
    }
}

/// The buffer and its writing thread. Dropping it stops the thread and flushes what is left.
pub struct LogBuffer {
    inner: Arc<Inner>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LogBuffer {
    /// A buffer of `capacity_bytes` written out to `sink` every `period`, for replica
    /// `replica`'s events (its own say so).
    pub fn start(
        sink: Sink,
        capacity_bytes: usize,
        period: Duration,
        replica: u16,
    ) -> Result<LogBuffer, String> {
        let inner = Arc::new(Inner {
            pending: Mutex::new(Pending {
                bytes: Vec::with_capacity(capacity_bytes),
                dropped: 0,
                stopping: false,
            }),
            stop: Condvar::new(),
            capacity_bytes,
            sink: Mutex::new(sink),
        });
        let shared = inner.clone();
        let thread = std::thread::Builder::new()
            .name("mu-log".into())
            .spawn(move || {
                let mut spare = Vec::with_capacity(shared.capacity_bytes);
                loop {
                    let stopping = {
                        let p = lock(&shared.pending);
                        let (p, _) = shared
                            .stop
                            .wait_timeout_while(p, period, |p| !p.stopping)
                            .unwrap_or_else(|e| e.into_inner());
                        p.stopping
                    };
                    let dropped = shared.flush(&mut spare);
                    if dropped > 0 {
                        // Into the buffer like any event, so it has the log's format; written
                        // with the next batch.
                        warn!(target: LOG_TARGET, replica, dropped, "log events dropped: stderr did not keep up");
                    }
                    if stopping {
                        // The drop flushes what came since (that warning, say), once joined.
                        return;
                    }
                }
            })
            .map_err(|e| format!("starting the log thread: {e}"))?;
        Ok(LogBuffer { inner, thread: Some(thread) })
    }

    /// The writer to give `tracing_subscriber`'s format layer.
    pub fn writer(&self) -> BufferWriter {
        BufferWriter { inner: self.inner.clone() }
    }

    /// Writes out what is pending now, on the calling thread: for a panic about to be reported.
    /// Skipped for a panic of the writing thread itself, which may hold the sink.
    pub fn flusher(&self) -> impl Fn() + Send + Sync + 'static {
        let inner = self.inner.clone();
        let writing_thread = self.thread.as_ref().map(|t| t.thread().id());
        move || {
            if Some(std::thread::current().id()) != writing_thread {
                inner.flush(&mut Vec::new());
            }
        }
    }
}

impl Drop for LogBuffer {
    fn drop(&mut self) {
        lock(&self.inner.pending).stopping = true;
        self.inner.stop.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Whatever the writing thread left (it may have died): the last events before an exit.
        self.inner.flush(&mut Vec::new());
    }
}

/// Appends whole events to the buffer; an event that does not fit is dropped and counted.
#[derive(Clone)]
pub struct BufferWriter {
    inner: Arc<Inner>,
}

impl Write for BufferWriter {
    /// The format layer writes each event with one call, so an event is kept or dropped whole.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut p = lock(&self.inner.pending);
        if p.bytes.len() + buf.len() <= self.inner.capacity_bytes {
            p.bytes.extend_from_slice(buf);
        } else {
            p.dropped += 1;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for BufferWriter {
    type Writer = BufferWriter;
    fn make_writer(&'a self) -> BufferWriter {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    /// A sink that keeps what it is given, and can be made to block until let go.
    #[derive(Clone, Default)]
    struct Held {
        bytes: Arc<Mutex<Vec<u8>>>,
        blocked: Arc<AtomicBool>,
    }

    impl Write for Held {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            while self.blocked.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.bytes.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn text(held: &Held) -> String {
        String::from_utf8(held.bytes.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn events_reach_the_sink_in_order_and_all_of_them_on_drop() {
        let held = Held::default();
        let log = LogBuffer::start(Box::new(held.clone()), 1 << 16, Duration::from_secs(3600), 0)
            .unwrap();
        let mut w = log.writer();
        for i in 0..100 {
            w.write_all(format!("event {i}\n").as_bytes()).unwrap();
        }
        assert_eq!(text(&held), "", "written before the period or the drop");
        drop(log);
        let expected: String = (0..100).map(|i| format!("event {i}\n")).collect();
        assert_eq!(text(&held), expected);
    }

    #[test]
    fn the_writing_thread_flushes_every_period() {
        let held = Held::default();
        let log =
            LogBuffer::start(Box::new(held.clone()), 1 << 16, Duration::from_millis(1), 0).unwrap();
        log.writer().write_all(b"one\n").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while text(&held).is_empty() {
            assert!(Instant::now() < deadline, "not flushed by the writing thread");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(text(&held), "one\n");
    }

    #[test]
    fn a_stalled_sink_never_blocks_a_writer_and_drops_are_counted() {
        let held = Held::default();
        held.blocked.store(true, Ordering::Release);
        let log =
            LogBuffer::start(Box::new(held.clone()), 64, Duration::from_millis(1), 0).unwrap();
        /// Lets the sink go however the test ends, so that dropping the buffer cannot hang.
        struct Release(Arc<AtomicBool>);
        impl Drop for Release {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let release = Release(held.blocked.clone());
        let mut w = log.writer();
        // The writing thread is stuck in the sink from its first batch on; writers go on.
        w.write_all(b"first batch\n").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !lock(&log.inner.pending).bytes.is_empty() {
            assert!(Instant::now() < deadline, "the first batch was not taken");
            std::thread::sleep(Duration::from_millis(1));
        }
        let started = Instant::now();
        let line = [b'x'; 15];
        for _ in 0..1000 {
            w.write_all(&line).unwrap();
        }
        // 1000 writes that each took the lock once; a blocking writer would be stuck for good.
        assert!(started.elapsed() < Duration::from_secs(5));
        let (kept, dropped) = {
            let p = lock(&log.inner.pending);
            (p.bytes.len(), p.dropped)
        };
        assert_eq!(kept, 60, "four whole 15-byte events fit in 64 bytes");
        assert_eq!(dropped, 996);
        drop(release);
        drop(log);
        assert!(text(&held).starts_with("first batch\nxxxxxxxxxxxxxxx"), "{}", text(&held));
    }
}
