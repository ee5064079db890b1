//! Round trips on the shared-memory fabric: the fabric's own write round trip beside the
//! request rings' request→response round trip, and their ratio (issue 51's target: the rings'
//! unreplicated round trip at most 3× the fabric's write round trip).
//!
//! `cargo run --release -p mu-request-rings --example rings_rtt [-- --samples N]`
//!
//! On shared memory a write is a copy done by the poster's CPU and its completion is queued at
//! once, so post→completion is local work (printed, for what it is). The figure that stands
//! for RDMA's write round trip is a ping-pong, as `mu bench fabric` measures it: node A writes
//! 64 bytes into B's region, B sees them and writes them back into A's, A sees them. The rings'
//! round trip is a client's `send` of a 32-byte payload to the `poll` that finds the echo
//! server's response. Both peers (B, and the echo server) run on one helper thread that polls
//! both all along, and the two figures are taken in alternating chunks so that each samples the
//! same conditions.

use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, LocalRegion, NodeId, RegionId, RemoteAddr,
    Source, WorkRequest,
};
use mu_fabric_shm::{ShmConfig, ShmEndpoint, ShmFabric, ShmRegion};
use mu_request_rings::{
    round_trip_samples, Echo, Grant, RingClient, RingServer, RoundTrips, ServerConfig,
};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CLUSTER: u64 = 0x7274_7421;
const PING_REGION: RegionId = RegionId(0);
const PING_BYTES: usize = 64;
const RING_PAYLOAD_BYTES: usize = 32;
const CHUNKS: usize = 10;
const TIMEOUT: Duration = Duration::from_secs(10);

/// A private run directory under /dev/shm, removed on drop.
struct RunDir(PathBuf);

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One side of the ping-pong: a node, its endpoint and the region its peer writes into.
struct Pinger {
    endpoint: ShmEndpoint,
    inbox: ShmRegion,
    conn: ConnId,
    fabric: ShmFabric,
}

impl Pinger {
    fn start(run: &RunDir, me: u16) -> Result<Pinger, String> {
        let fabric = ShmFabric::create(ShmConfig::new(&run.0, CLUSTER, NodeId(me)))
            .map_err(|e| format!("node {me}: {e}"))?;
        let inbox =
            fabric.register_region(PING_REGION, 4096, Access::WRITE).map_err(|e| e.to_string())?;
        let endpoint = fabric.endpoint(64).map_err(|e| e.to_string())?;
        Ok(Pinger { endpoint, inbox, conn: ConnId::new(NodeId(0), 0), fabric })
    }

    fn connect(&mut self, peer: u16) -> Result<(), String> {
        self.conn = ConnId::new(NodeId(peer), 0);
        self.fabric.connect(self.conn, Access::WRITE).map_err(|e| e.to_string())?;
        self.endpoint.attach(self.conn).map_err(|e| e.to_string())
    }

    /// Writes 64 bytes whose first word is `word` into the peer's inbox.
    fn write(&mut self, word: u64, signaled: bool) {
        let mut bytes = [0u8; PING_BYTES];
        bytes[..8].copy_from_slice(&word.to_le_bytes());
        let remote = RemoteAddr { region: PING_REGION, offset: 0 };
        let mut wr = WorkRequest::write(word, Source::Inline(&bytes), remote);
        wr.signaled = signaled;
        self.endpoint.post(self.conn, &wr).expect("post");
    }
}

fn p50_us(r: &RoundTrips) -> f64 {
    r.p50_ns as f64 / 1000.0
}

fn line(name: &str, r: &RoundTrips) {
    println!(
        "{name:<40} p50 {:>7.3} µs   p90 {:>7.3} µs   p99 {:>7.3} µs   ({} samples)",
        p50_us(r),
        r.p90_ns as f64 / 1000.0,
        r.p99_ns as f64 / 1000.0,
        r.samples
    );
}

fn main() -> Result<(), String> {
    let samples: usize = match std::env::args().skip_while(|a| a != "--samples").nth(1) {
        Some(n) => n.parse().map_err(|_| format!("--samples: {n:?} is not a count"))?,
        None => 100_000,
    };
    let run = RunDir(PathBuf::from(format!("/dev/shm/mu-rings-rtt-{}", std::process::id())));
    std::fs::DirBuilder::new().mode(0o700).create(&run.0).map_err(|e| e.to_string())?;
    let node = |id: u16| {
        ShmFabric::create(ShmConfig::new(&run.0, CLUSTER, NodeId(id)))
            .map_err(|e| format!("node {id}: {e}"))
    };

    // The rings: server node 0, client node 1.
    let server_fabric = node(0)?;
    let client_fabric = node(1)?;
    let mut server =
        RingServer::new(server_fabric, ServerConfig::default()).map_err(|e| e.to_string())?;
    let prepared =
        RingClient::prepare(client_fabric, &server.client_layout()).map_err(|e| e.to_string())?;
    let grant = server.admit(NodeId(1)).map_err(|e| e.to_string())?;
    let grant = Grant::from_bytes(&grant.to_bytes()).map_err(|e| e.to_string())?;
    let mut client = prepared.connect(&grant).map_err(|(_, e)| e.to_string())?;

    // The ping-pong: nodes 2 (A, here) and 3 (B, on the helper thread).
    let mut a = Pinger::start(&run, 2)?;
    let mut b = Pinger::start(&run, 3)?;
    a.connect(3)?;
    b.connect(2)?;

    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let helper = std::thread::spawn(move || {
        let clock = Instant::now();
        let mut echo = Echo::default();
        let (mut last, mut polls, mut now_ns) = (0u64, 0u64, 0u64);
        while !stopping.load(Ordering::Relaxed) {
            // The clock costs tens of nanoseconds: the server's crash checks need it seldom.
            if polls % 64 == 0 {
                now_ns = clock.elapsed().as_nanos() as u64;
            }
            polls += 1;
            echo.poll(&mut server, now_ns).expect("echo");
            let word = b.inbox.load_u64(0).expect("inbox");
            if word != last {
                last = word;
                b.write(word, false);
            }
        }
    });

    let payload = [7u8; RING_PAYLOAD_BYTES];
    let chunk = samples.div_ceil(CHUNKS);
    let (mut ping_ns, mut rings_ns, mut local_ns) = (Vec::new(), Vec::new(), Vec::new());
    let mut word = 0u64;
    let mut completions = [Completion::EMPTY; 4];
    for round in 0..=CHUNKS {
        // Round 0 is the warm-up of both.
        let keep = round > 0;
        for _ in 0..chunk {
            word += 1;
            let start = Instant::now();
            a.write(word, false);
            while a.inbox.load_u64(0).expect("inbox") != word {
                std::hint::spin_loop();
            }
            if keep {
                ping_ns.push(start.elapsed().as_nanos() as u64);
            }
        }
        for _ in 0..chunk / 10 {
            word += 1;
            let start = Instant::now();
            a.write(word, true);
            while a.endpoint.poll(&mut completions) == 0 {
                std::hint::spin_loop();
            }
            if keep {
                local_ns.push(start.elapsed().as_nanos() as u64);
            }
            while a.inbox.load_u64(0).expect("inbox") != word {
                std::hint::spin_loop();
            }
        }
        let got = round_trip_samples(&mut client, &payload, 0, chunk, TIMEOUT)
            .map_err(|e| e.to_string())?;
        if keep {
            rings_ns.extend(got);
        }
    }
    stop.store(true, Ordering::Relaxed);
    helper.join().map_err(|_| "the helper thread panicked".to_string())?;

    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("shm, two threads spinning, {cpus} CPUs available to the process");
    let local = RoundTrips::of(local_ns).ok_or("no samples")?;
    let ping = RoundTrips::of(ping_ns).ok_or("no samples")?;
    let rings = RoundTrips::of(rings_ns).ok_or("no samples")?;
    line("fabric write post→completion (local)", &local);
    line("fabric write round trip (64 B ping-pong)", &ping);
    line("rings request→response (32 B echo)", &rings);
    println!(
        "ratio rings / fabric write round trip: {:.2} (target: at most 3)",
        rings.p50_ns as f64 / ping.p50_ns as f64
    );
    Ok(())
}
