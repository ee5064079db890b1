//! `mu bench e2e` (Mu paper §7.2, Figure 5): key-value operations as a client sees them, end to
//! end, unreplicated beside replicated, with the client transport's own cost measured apart.
//!
//! Three servers, each measured with the real client library ([`mu_service::Client`]) over a
//! Unix socket, one operation at a time:
//!
//! * `transport`: a server thread in this process that decodes each request and answers at once
//!   with a canned reply of the right kind, touching no store — the framing, the socket and the
//!   two thread wake-ups: the floor of any request here.
//! * `unreplicated`: the same server thread applying each request to a key-value store
//!   ([`mu_kv::Store`]), as an application without replication would.
//! * `replicated`: the key-value service on three `mu replica` processes (shared-memory fabric),
//!   the client talking to the leader: every request, reads included, goes through the log.
//!
//! Each is measured for puts and gets of `--payload`-byte values over 1,000 keys.

use crate::interrupt;
use crate::suite::{latency_histogram, quantiles_us, us, Report, SuiteArgs};
use hdrhistogram::Histogram;
use mu_daemon::kv_cluster::{KvCluster, LogShape};
use mu_figures::{Bar, BarChart, BarSeries, Progress, Table};
use mu_kv::{Op, Reply, Request, Store};
use mu_procs::run_dir::RunDir;
use mu_service::wire::{read_frame, write_frame, ClientMessage, ServerMessage};
use mu_service::Client;
use serde_json::json;
use std::io::{BufReader, BufWriter};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const DEFAULT_SAMPLES: u64 = 20_000;
const QUICK_SAMPLES: u64 = 2_000;
const KEYS: u64 = 1_000;
/// The cluster id the in-process servers answer to.
const LOCAL_CLUSTER_ID: u64 = 0xe2e;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Value size in bytes.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    payload: u32,
    /// Timed operations per system and operation [default: 20000; 2000 with --quick].
    #[arg(long, value_parser = crate::counts::count)]
    samples: Option<u64>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum System {
    Transport,
    Unreplicated,
    Replicated,
}

impl System {
    const ALL: [System; 3] = [System::Transport, System::Unreplicated, System::Replicated];

    fn name(self) -> &'static str {
        match self {
            System::Transport => "transport",
            System::Unreplicated => "unreplicated",
            System::Replicated => "replicated",
        }
    }
}

const OPS: [&str; 2] = ["put", "get"];

struct Measured {
    system: System,
    op: &'static str,
    h: Histogram<u64>,
}

pub fn run(args: Args) -> Result<(), String> {
    interrupt::catch();
    let mut report = Report::new(&args.suite, "e2e")?;
    let samples =
        args.samples.unwrap_or(if args.suite.quick { QUICK_SAMPLES } else { DEFAULT_SAMPLES });
    let warmup = (samples / 5).clamp(200, 5_000);
    let value = vec![b'v'; args.payload as usize];
    let mut progress = report.progress("e2e", 3 * 2 * (samples + warmup));
    let mut results = Vec::new();
    for system in System::ALL {
        progress.set_label(&format!("e2e {}", system.name()));
        let measured = match system {
            System::Transport | System::Unreplicated => {
                let dir = RunDir::create("e2e-local")?;
                let server = LocalServer::start(dir.path(), system == System::Unreplicated)?;
                let mut client = Client::new(LOCAL_CLUSTER_ID, vec![(0, server.path.clone())])
                    .map_err(|e| e.to_string())?;
                measure(&mut client, &value, samples, warmup, &mut progress)
            }
            System::Replicated => {
                let slot_bytes = (args.payload + 256).next_multiple_of(8);
                let mut cluster = KvCluster::start(
                    "e2e",
                    LogShape { slots: 16_384, slot_bytes },
                    mu_replica::Protocol::Mu,
                )?;
                cluster.wait_for_leader(Duration::from_secs(10))?;
                let mut client = cluster.client()?;
                let m = measure(&mut client, &value, samples, warmup, &mut progress);
                cluster.check_alive()?;
                m
            }
        }?;
        for (op, h) in OPS.iter().zip(measured) {
            results.push(Measured { system, op, h });
        }
    }
    progress.finish();

    let mut table = Table::new(
        &format!("End-to-end key-value latency, {}-byte values (µs)", args.payload),
        &["system", "op", "samples", "p1", "p50", "p99", "p50 / transport p50"],
    );
    let transport_p50 = |op: &str| {
        results
            .iter()
            .find(|m| m.system == System::Transport && m.op == op)
            .map_or(f64::NAN, |m| quantiles_us(&m.h)[1])
    };
    for m in &results {
        let [p1, p50, p99] = quantiles_us(&m.h);
        table.row(vec![
            m.system.name().into(),
            m.op.into(),
            m.h.len().to_string(),
            us(p1),
            us(p50),
            us(p99),
            format!("{:.2}", p50 / transport_p50(m.op)),
        ]);
    }
    report.table(&table, "")?;
    let chart = BarChart {
        title: format!("End-to-end latency, {}-byte values (median, p1-p99)", args.payload),
        x_label: "operation".into(),
        y_label: "latency (µs)".into(),
        categories: OPS.iter().map(|s| s.to_uppercase()).collect(),
        series: System::ALL
            .iter()
            .map(|&s| BarSeries {
                name: s.name().into(),
                points: OPS
                    .iter()
                    .map(|op| {
                        results.iter().find(|m| m.system == s && m.op == *op).map(|m| {
                            let [p1, p50, p99] = quantiles_us(&m.h);
                            Bar::new(p50, p1, p99)
                        })
                    })
                    .collect(),
            })
            .collect(),
        log_y: true,
    };
    let svg = report.path(".svg");
    chart.write_svg(&svg).map_err(|e| e.to_string())?;
    let json = json!({
        "payload_bytes": args.payload,
        "results": results.iter().map(|m| {
            let [p1, p50, p99] = quantiles_us(&m.h);
            json!({"system": m.system.name(), "op": m.op, "samples": m.h.len(),
                   "p1_us": p1, "p50_us": p50, "p99_us": p99})
        }).collect::<Vec<_>>(),
    });
    report.finish(json);
    Ok(())
}

/// Times `samples` puts, then `samples` gets (each after `warmup` untimed ones) over [`KEYS`]
/// keys; every get must find the value that was put.
fn measure(
    client: &mut Client,
    value: &[u8],
    samples: u64,
    warmup: u64,
    progress: &mut Progress,
) -> Result<[Histogram<u64>; 2], String> {
    let mut out = [latency_histogram(), latency_histogram()];
    let key = |i: u64| format!("key-{}", i % KEYS).into_bytes();
    for (which, h) in out.iter_mut().enumerate() {
        for i in 0..warmup + samples {
            if i % 256 == 0 {
                interrupt::check()?;
                progress.inc(256.min(warmup + samples - i));
            }
            let k = key(i);
            let started = std::time::Instant::now();
            if which == 0 {
                client.put(&k, value).map_err(|e| format!("put: {e}"))?;
            } else {
                let got = client.get(&k).map_err(|e| format!("get: {e}"))?;
                // The transport server answers without a store: whatever it says is accepted.
                if got.as_deref().is_some_and(|g| g != value) {
                    return Err(format!("get of {:?} returned another value", key(i)));
                }
            }
            let ns = started.elapsed().as_nanos() as u64;
            if i >= warmup {
                h.record(ns.max(1)).map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(out)
}

/// A server thread on a Unix socket speaking the client protocol: it answers requests without
/// replication, applying them to a store, or (`apply` false) answering at once.
struct LocalServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl LocalServer {
    fn start(dir: &Path, apply: bool) -> Result<LocalServer, String> {
        let path = dir.join("local.sock");
        let listener = UnixListener::bind(&path)
            .map_err(|e| format!("listening on {}: {e}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("mu-e2e-server".into())
            .spawn(move || {
                let mut store = Store::new();
                for stream in listener.incoming() {
                    if stopping.load(Ordering::Acquire) {
                        return;
                    }
                    if let Ok(stream) = stream {
                        serve(stream, apply, &mut store);
                    }
                }
            })
            .map_err(|e| format!("starting the server thread: {e}"))?;
        Ok(LocalServer { path, stop, thread: Some(thread) })
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accept call up; the thread then sees the flag.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves one connection until the client closes it.
fn serve(stream: UnixStream, apply: bool, store: &mut Store) {
    let Ok(write_half) = stream.try_clone() else { return };
    let (mut reader, mut writer) = (BufReader::new(stream), BufWriter::new(write_half));
    let (mut body, mut out) = (Vec::new(), Vec::new());
    while let Ok(true) = read_frame(&mut reader, &mut body) {
        let answer = match ClientMessage::decode(&body) {
            Ok(ClientMessage::Hello { .. }) => ServerMessage::Welcome,
            Ok(ClientMessage::Kv(bytes)) if apply => match Request::decode(&bytes) {
                Ok(request) => ServerMessage::Reply(store.apply(&request)),
                Err(e) => ServerMessage::Refused(format!("malformed request: {e}")),
            },
            Ok(ClientMessage::Kv(bytes)) => match Request::decode(&bytes).map(|r| r.op) {
                Ok(Op::Get { .. }) => ServerMessage::Reply(Reply::Value(None)),
                Ok(_) => ServerMessage::Reply(Reply::Stored),
                Err(e) => ServerMessage::Refused(format!("malformed request: {e}")),
            },
            Ok(ClientMessage::Status) => ServerMessage::Refused("no status here".into()),
            Err(e) => ServerMessage::Refused(e.to_string()),
        };
        answer.encode(&mut out);
        if write_frame(&mut writer, &out).is_err() {
            return;
        }
    }
}
