//! A Prometheus text endpoint per replica: `GET /metrics` on a loopback TCP port.
//!
//! A plain HTTP/1.0 answer per connection: enough for Prometheus and `curl`, and nothing to
//! configure. Each scrape is served on a thread of its own, [`SCRAPES_MAX`] at once, and each
//! client gets [`CLIENT_TIME_MAX`] to send its request and as long to take the answer: clients
//! that send nothing, or a request without end, neither delay the others for long nor grow
//! anything without bound.

use crate::backend::Backend;
use crate::counters::ServerCounters;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What one scrape reads.
pub struct Sources {
    /// What the server serves: its report gives the replica's numbers.
    pub backend: Arc<dyn Backend>,
    pub counters: Arc<ServerCounters>,
    pub started: Instant,
    /// The log's slots, for the usage gauge.
    pub slots_count: u64,
}

/// The metrics endpoint, serving until dropped.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    active: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// The address bound (with the port the system chose for port 0).
    pub fn address(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Scrapes under way end within their time (to read, then to write): wait for them,
        // so that nothing of this endpoint outlives it.
        let deadline = Instant::now() + 2 * CLIENT_TIME_MAX + Duration::from_secs(1);
        while self.active.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Scrapes served at once; a connection beyond them is answered 503 and closed at once.
pub const SCRAPES_MAX: usize = 8;
/// How long one client may take to send its request, and to take the answer.
pub const CLIENT_TIME_MAX: Duration = Duration::from_secs(2);
/// How long the rest of a request may take once its first line has come.
const HEADERS_WAIT: Duration = Duration::from_millis(50);
/// The most of a request read (request line and headers); a longer one is answered 431.
pub const REQUEST_BYTES_MAX: usize = 8192;
/// How long the acceptor waits after an error accepting (out of file descriptors, say): the
/// connection stays in the backlog, and trying again at once would spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Serves the metrics on `127.0.0.1:port` until the returned endpoint is dropped.
pub fn serve(port: u16, sources: Sources) -> Result<MetricsServer, String> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| format!("metrics endpoint on 127.0.0.1:{port}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("metrics endpoint: {e}"))?;
    // Non-blocking, so that the acceptor sees `stop`.
    listener.set_nonblocking(true).map_err(|e| format!("metrics endpoint: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let active = Arc::new(AtomicUsize::new(0));
    let thread = {
        let (stop, active, sources) = (stop.clone(), active.clone(), Arc::new(sources));
        std::thread::Builder::new()
            .name("mu-metrics".into())
            .spawn(move || {
                let serve = move |stream: &TcpStream| scrape(stream, &sources);
                accept_loop(|| listener.accept().map(|(s, _)| s), &stop, &active, serve)
            })
            .map_err(|e| format!("metrics thread: {e}"))?
    };
    Ok(MetricsServer { addr, stop, active, thread: Some(thread) })
}

/// Accepts connections until `stop`, each served by `serve` on a thread of its own, at most
/// [`SCRAPES_MAX`] at once.
fn accept_loop<S>(
    mut accept: impl FnMut() -> std::io::Result<TcpStream>,
    stop: &AtomicBool,
    active: &Arc<AtomicUsize>,
    serve: S,
) where
    S: Fn(&TcpStream) + Clone + Send + 'static,
{
    while !stop.load(Ordering::Acquire) {
        let stream = match accept() {
            Ok(stream) => stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => {
                std::thread::sleep(ACCEPT_ERROR_PAUSE);
                continue;
            }
        };
        if active.fetch_add(1, Ordering::AcqRel) >= SCRAPES_MAX {
            active.fetch_sub(1, Ordering::AcqRel);
            busy(&stream);
            continue;
        }
        let (thread_active, serve) = (active.clone(), serve.clone());
        let spawned =
            std::thread::Builder::new().name("mu-metrics-scrape".into()).spawn(move || {
                // Counted out however the scrape ends, a panic included: a counter left high
                // would turn every later scrape away.
                let _counted = Counted(thread_active);
                // Accepted sockets may inherit the listener's non-blocking mode on some systems.
                if stream.set_nonblocking(false).is_ok() {
                    serve(&stream);
                }
            });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A scrape counted in the endpoint's active scrapes until dropped.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers 503 without waiting for the client: the acceptor must not block on one.
fn busy(stream: &TcpStream) {
    if stream.set_nonblocking(true).is_ok() {
        let mut s = stream;
        let _ = s.write_all(&answer("503 Service Unavailable", "too many scrapes at once\n"));
    }
}

fn answer(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Serves one client: reads its request within [`CLIENT_TIME_MAX`], answers within as long.
fn scrape(stream: &TcpStream, sources: &Sources) {
    let request = read_request(stream);
    let Some(line) = request_line(&request) else {
        if request.len() >= REQUEST_BYTES_MAX {
            let _ = stream.set_write_timeout(Some(CLIENT_TIME_MAX));
            let mut s = stream;
            let _ =
                s.write_all(&answer("431 Request Header Fields Too Large", "request too long\n"));
        }
        return;
    };
    let (status, body) = if is_metrics_request(line) {
        ("200 OK", render(sources))
    } else {
        ("404 Not Found", "only GET /metrics is served\n".to_string())
    };
    let _ = stream.set_write_timeout(Some(CLIENT_TIME_MAX));
    let mut s = stream;
    let _ = s.write_all(&answer(status, &body));
}

/// What the client sends of its request, up to the blank line that ends its headers, within
/// [`CLIENT_TIME_MAX`] in all and [`REQUEST_BYTES_MAX`] bytes: whatever came by then, if it
/// stops early (a client that sends only a request line and waits is still answered).
fn read_request(mut stream: &TcpStream) -> Vec<u8> {
    let mut deadline = Instant::now() + CLIENT_TIME_MAX;
    let mut request = Vec::new();
    let mut chunk = [0u8; 1024];
    while request.len() < REQUEST_BYTES_MAX && !headers_end(&request) {
        if request.contains(&b'\n') {
            // The request line is in: headers, if any, come with it or right after. A client
            // that sends only the line and waits is answered after this, not after 2 s.
            deadline = deadline.min(Instant::now() + HEADERS_WAIT);
        }
        let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
        else {
            break;
        };
        if stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let n = n.min(REQUEST_BYTES_MAX - request.len());
                request.extend_from_slice(&chunk[..n]);
            }
        }
    }
    request
}

fn headers_end(request: &[u8]) -> bool {
    request.windows(4).any(|w| w == b"\r\n\r\n") || request.windows(2).any(|w| w == b"\n\n")
}

/// The request's first line, if it came whole.
fn request_line(request: &[u8]) -> Option<&[u8]> {
    let end = request.iter().position(|&b| b == b'\n')?;
    Some(request[..end].strip_suffix(b"\r").unwrap_or(&request[..end]))
}

/// Whether `line` asks for the metrics: `GET /metrics` (a query string is allowed).
fn is_metrics_request(line: &[u8]) -> bool {
    let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let (Some(method), Some(target)) = (words.next(), words.next()) else { return false };
    method == b"GET" && (target == b"/metrics" || target.starts_with(b"/metrics?"))
}

/// The metrics in Prometheus' text format.
pub fn render(s: &Sources) -> String {
    let r = s.backend.report(s.started);
    let c = &s.counters;
    let mut out = String::new();
    let counter = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let scalars: [(&str, &str, &str, u64); 17] = [
        ("mu_requests_total", "counter", "Client requests received.", counter(&c.requests)),
        (
            "mu_requests_committed_total",
            "counter",
            "Client requests committed and answered.",
            counter(&c.committed),
        ),
        (
            "mu_requests_refused_total",
            "counter",
            "Requests refused (malformed, too large).",
            counter(&c.refused),
        ),
        (
            "mu_requests_not_leader_total",
            "counter",
            "Requests answered with a leader hint.",
            counter(&c.not_leader),
        ),
        (
            "mu_requests_retry_total",
            "counter",
            "Requests answered with retry.",
            counter(&c.retries),
        ),
        ("mu_commits_total", "counter", "Entries committed as leader.", r.commits),
        ("mu_aborts_total", "counter", "Leader attempts aborted.", r.aborts),
        ("mu_leader_changes_total", "counter", "Leader changes seen.", r.leader_changes),
        (
            "mu_permission_switches_total",
            "counter",
            "Permission requests served.",
            r.permission_switches,
        ),
        (
            "mu_slow_permission_switches_total",
            "counter",
            "Permission requests served by the slow path.",
            r.slow_permission_switches,
        ),
        ("mu_fuo", "gauge", "First undecided offset as the leader engine knows it.", r.fuo),
        ("mu_applied", "gauge", "Index after the last entry applied (log head).", r.applied),
        ("mu_log_slots", "gauge", "Slots in the circular log.", s.slots_count),
        (
            "mu_log_used_slots",
            "gauge",
            "Slots between the log head and the FUO.",
            r.fuo.saturating_sub(r.applied).min(s.slots_count),
        ),
        (
            "mu_is_leader",
            "gauge",
            "1 while this replica's detector elects itself.",
            u64::from(r.leader == Some(r.id)),
        ),
        ("mu_keys", "gauge", "Keys in the store.", r.keys),
        ("mu_uptime_seconds", "gauge", "Seconds since the replica started.", r.uptime_ms / 1000),
    ];
    for (name, kind, help, value) in scalars {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
    }
    let _ = writeln!(out, "# HELP mu_detector_score Failure-detector score of a peer (0-15).");
    let _ = writeln!(out, "# TYPE mu_detector_score gauge");
    for (peer, score) in &r.scores {
        let _ = writeln!(out, "mu_detector_score{{peer=\"{peer}\"}} {score}");
    }
    let lat = c.latency_snapshot();
    let _ = writeln!(out, "# HELP mu_request_latency_seconds Time from a request's arrival to its answer, on this replica.");
    let _ = writeln!(out, "# TYPE mu_request_latency_seconds histogram");
    let mut cumulative = 0;
    for (bound_us, count) in lat.buckets {
        cumulative += count;
        let _ = writeln!(
            out,
            "mu_request_latency_seconds_bucket{{le=\"{}\"}} {cumulative}",
            bound_us as f64 / 1e6
        );
    }
    cumulative += lat.overflow;
    let _ = writeln!(out, "mu_request_latency_seconds_bucket{{le=\"+Inf\"}} {cumulative}");
    let _ = writeln!(out, "mu_request_latency_seconds_sum {}", lat.sum_ns as f64 / 1e9);
    let _ = writeln!(out, "mu_request_latency_seconds_count {cumulative}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_metrics_is_a_metrics_request() {
        assert!(is_metrics_request(b"GET /metrics HTTP/1.1"));
        assert!(is_metrics_request(b"GET /metrics?x=1 HTTP/1.1"));
        assert!(is_metrics_request(b"GET /metrics"));
        assert!(!is_metrics_request(b"GET /metricsfoo HTTP/1.1"));
        assert!(!is_metrics_request(b"POST /metrics HTTP/1.1"));
        assert!(!is_metrics_request(b""));
        assert_eq!(
            request_line(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n"),
            Some(&b"GET / HTTP/1.0"[..])
        );
        assert_eq!(request_line(b"GET / HTTP/1.0"), None, "a line not ended is not whole");
    }

    /// Out of file descriptors, `accept` fails at once every time: the acceptor must pause
    /// between tries instead of spinning a core, and go on accepting once it can.
    #[test]
    fn accept_errors_do_not_spin_or_stop_the_acceptor() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = AtomicBool::new(false);
        let active = Arc::new(AtomicUsize::new(0));
        let (served_tx, served_rx) = std::sync::mpsc::channel();
        let serve = move |_: &TcpStream| {
            let _ = served_tx.send(());
        };
        let mut errors = 0u32;
        let started = Instant::now();
        let client = std::thread::spawn(move || TcpStream::connect(addr));
        let accept = || {
            if served_rx.try_recv().is_ok() {
                stop.store(true, Ordering::Release);
            }
            // Half a second of EMFILE, then the connection waiting is accepted.
            if started.elapsed() < Duration::from_millis(500) {
                errors += 1;
                return Err(std::io::Error::from_raw_os_error(24));
            }
            if started.elapsed() > Duration::from_secs(10) {
                stop.store(true, Ordering::Release);
            }
            listener.set_nonblocking(true)?;
            listener.accept().map(|(s, _)| s)
        };
        accept_loop(accept, &stop, &active, serve);
        let _ = client.join();
        assert!(errors <= 30, "accept was tried {errors} times in half a second: it spins");
        assert!(started.elapsed() < Duration::from_secs(10), "nothing was accepted after errors");
    }
}
