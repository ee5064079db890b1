//! A Prometheus text endpoint per replica: `GET /metrics` on a loopback TCP port.
//!
//! Served by one thread with a plain HTTP/1.0 answer per connection: enough for Prometheus and
//! `curl`, and nothing to configure.

use crate::machine::SharedMachine;
use crate::report::ReplicaReport;
use crate::server::ServerCounters;
use mu_replica::Replica;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one scrape reads.
pub struct Sources {
    pub replica: Arc<Replica>,
    pub machine: SharedMachine,
    pub counters: Arc<ServerCounters>,
    pub started: Instant,
    /// The log's slots, for the usage gauge.
    pub slots_count: u64,
}

/// Serves the metrics on `127.0.0.1:port` from a thread of its own, for the life of the
/// process. Returns the address bound.
pub fn serve(port: u16, sources: Sources) -> Result<SocketAddr, String> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| format!("metrics endpoint on 127.0.0.1:{port}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("metrics endpoint: {e}"))?;
    std::thread::Builder::new()
        .name("mu-metrics".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                // One thread serves every scrape in turn: a client that sends nothing, or
                // bytes without end, gets a bounded share of it.
                let Some(line) = read_request_line(&stream) else { continue };
                let _ = stream.set_write_timeout(Some(CLIENT_TIME_MAX));
                let (status, body) = if line.starts_with(b"GET /metrics") {
                    ("200 OK", render(&sources))
                } else {
                    ("404 Not Found", "only GET /metrics is served\n".to_string())
                };
                let mut s = &stream;
                let _ = write!(
                    s,
                    "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        })
        .map_err(|e| format!("metrics thread: {e}"))?;
    Ok(addr)
}

/// How long one client may take to send its request line, and to take the answer.
const CLIENT_TIME_MAX: Duration = Duration::from_secs(2);
/// The longest request line read; what comes after is not looked at.
const REQUEST_LINE_BYTES_MAX: usize = 4096;

/// The request line `stream` sends (up to its newline, or [`REQUEST_LINE_BYTES_MAX`] bytes),
/// read within [`CLIENT_TIME_MAX`] in all; `None` if it did not come whole in time.
fn read_request_line(mut stream: &TcpStream) -> Option<Vec<u8>> {
    let deadline = Instant::now() + CLIENT_TIME_MAX;
    let mut line = Vec::new();
    let mut chunk = [0u8; 512];
    while line.len() < REQUEST_LINE_BYTES_MAX && !line.contains(&b'\n') {
        let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?;
        stream.set_read_timeout(Some(left)).ok()?;
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => line.extend_from_slice(&chunk[..n]),
        }
    }
    Some(line)
}

/// The metrics in Prometheus' text format.
pub fn render(s: &Sources) -> String {
    let r = ReplicaReport::new(&s.replica, &s.machine, s.started);
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
