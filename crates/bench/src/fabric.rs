//! `mu bench fabric`: round trips of one-sided operations on the shared-memory fabric, across
//! processes, beside a bare cache-line ping-pong with no fabric code.
//!
//! On RDMA, the round trip of a signaled write is the time from posting it to its completion: one
//! trip across the network and back. On shared memory the initiator's CPU does the copy and the
//! completion is queued at once, so post-to-completion only measures local work. The figure that
//! corresponds to RDMA's is a *ping-pong*: node A does an operation on node B, B notices it in its
//! own memory and answers with the same operation on A, and A notices the answer. That is two
//! crossings of the inter-core interconnect, exactly what a bare cache-line ping-pong between two
//! processes costs, so the ratio of the two is the overhead of the fabric code itself. Every
//! `*_rtt_ns` figure below is such a ping-pong, timed at A over one iteration.
//!
//! Two figures are not round trips. `perm_fast` and `perm_slow` time a permission change on A's
//! side of a connection. `crash_notice` times a crash notification: A kills a peer process
//! (SIGKILL) and spins until the fabric reports it dead (`Fabric::crash_notified`, the peer's
//! death flag, which the kernel sets while it ends the peer's liveness thread); `crash_reaped`
//! is the same kill until the process is reaped, all its memory unmapped. With dedicated
//! threads (a spinning liveness thread, a background thread that spins on the flag), a leader
//! killed under load is detected no sooner than `crash_notice` (`mu bench failover --mode kill
//! --threads dedicated`); with shared threads the detector's sleep between polls comes on top.
//! A revocation that must wait for a killed writer's process to be gone waits about
//! `crash_reaped`.
//!
//! Placement: A runs in this process, each peer in a `mu bench-peer` child process. With at least
//! as many CPUs as processes, each is pinned to its own CPU and waits by spinning; otherwise
//! (three processes on two CPUs for `write2`) waits spin briefly and then yield, and the figure
//! includes scheduling.

use crate::measure::{histogram, measure, Summary, WARMUP_ITERATIONS};
use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, LocalRegion, NodeId, RegionId, RemoteAddr,
    Source, WorkRequest,
};
use mu_fabric_shm::mapping::Mapping;
use mu_fabric_shm::{ShmConfig, ShmEndpoint, ShmFabric, ShmRegion};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const CLUSTER_ID: u64 = 0x6d75_6265_6e63;
const REGION: RegionId = RegionId(0);
const REGION_BYTES: usize = 4096;
const CHANNEL: u8 = 0;
/// Where each node receives what its peer sends.
const INBOX: u64 = 1024;
/// Where A receives the answers of B and C.
const ANSWER_B: u64 = 1152;
const ANSWER_C: u64 = 1280;
/// Scratch space for reads.
const SCRATCH: u64 = 2048;
const PAYLOAD_BYTES: usize = 64;
/// Iterations of one figure before switching to the next.
const CHUNK: u64 = 10_000;

/// The figures measured between two processes, interleaved chunk by chunk.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum PairFigure {
    Bare = 0,
    Write = 1,
    Read = 2,
    Cas = 3,
}

const PAIR_FIGURES: [PairFigure; 4] =
    [PairFigure::Bare, PairFigure::Write, PairFigure::Read, PairFigure::Cas];

impl PairFigure {
    /// Where each side receives this figure's messages; 256 bytes apart so that figures never
    /// share (or prefetch) each other's cache lines.
    fn inbox(self) -> u64 {
        self as u64 * 256
    }
}

/// Chunks of each figure for `samples` recorded samples, plus one round of warm-up.
fn chunks_per_figure(samples: u64) -> u64 {
    samples.div_ceil(CHUNK) + 1
}

/// Waits for the next completion on `ep` and fails unless it succeeded.
fn complete(ep: &mut ShmEndpoint) -> Result<Completion, String> {
    let mut out = [Completion::EMPTY; 1];
    while ep.poll(&mut out) == 0 {
        std::hint::spin_loop();
    }
    if out[0].status.is_success() {
        Ok(out[0])
    } else {
        Err(format!("operation failed: {:?}", out[0].status))
    }
}

/// One iteration of a pair figure on node B: answer A's iteration `i`.
fn peer_pair_iteration(
    figure: PairFigure,
    map: &Mapping,
    region: &ShmRegion,
    ep: &mut ShmEndpoint,
    a: ConnId,
    i: u64,
    spin: bool,
) -> Result<(), String> {
    let at = figure.inbox();
    let word = |offset: u64| region.load_u64(offset as usize).expect("in bounds");
    match figure {
        PairFigure::Bare => {
            wait_until(spin, || map.u64_at(at as usize).load(Ordering::Acquire) == i);
            map.u64_at(at as usize + 128).store(i, Ordering::Release);
        }
        PairFigure::Write => {
            wait_until(spin, || word(at) == i);
            let p = payload(i);
            ep.post(a, &WorkRequest::write(i, Source::Inline(&p), remote(at)))
                .map_err(|e| e.to_string())?;
            complete(ep)?;
        }
        PairFigure::Read => {
            let scratch = mu_fabric::LocalSlice { region: REGION, offset: SCRATCH, len: 8 };
            loop {
                ep.post(a, &WorkRequest::read(i, scratch, remote(at)))
                    .map_err(|e| e.to_string())?;
                complete(ep)?;
                if word(SCRATCH) == i {
                    break;
                }
            }
            region.store_u64(at as usize, i).map_err(|e| e.to_string())?;
        }
        PairFigure::Cas => {
            wait_until(spin, || word(at) == i);
            ep.post(a, &WorkRequest::compare_swap(i, remote(at), i - 1, i))
                .map_err(|e| e.to_string())?;
            let c = complete(ep)?;
            if c.value != i - 1 {
                return Err(format!(
                    "peer compare-and-swap saw {} where {} was expected",
                    c.value,
                    i - 1
                ));
            }
        }
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// The fabric: `shm` (processes on this host) or `ofi` (libfabric over loopback TCP).
    #[arg(long, default_value = "shm")]
    fabric: String,
    /// With `--fabric ofi`: the libfabric provider, `sockets` or `tcp;ofi_rxm` [default:
    /// sockets].
    #[arg(long)]
    provider: Option<String>,
    /// Samples per round-trip figure (pair figures round it up to whole chunks of 10,000).
    #[arg(long, default_value_t = 1_000_000, value_parser = crate::counts::count)]
    samples: u64,
    /// Samples per permission-change figure [default: 100000; shm only].
    #[arg(long, value_parser = crate::counts::count)]
    perm_samples: Option<u64>,
    /// Peer processes killed for the crash-notification figures (a process started for each)
    /// [default: 100; shm only].
    #[arg(long, value_parser = crate::counts::count)]
    crash_samples: Option<u64>,
    /// Run directory, kept afterwards (default: a fresh one under /dev/shm, removed afterwards).
    #[arg(long)]
    run_dir: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct PeerArgs {
    #[arg(long)]
    run_dir: PathBuf,
    #[arg(long)]
    node: u16,
    /// pairs | write | idle | victim
    #[arg(long)]
    role: String,
    #[arg(long)]
    samples: u64,
    #[arg(long)]
    cpu: Option<usize>,
    /// Wait by spinning only (the peer has a CPU of its own).
    #[arg(long)]
    spin: bool,
    /// Where to answer in A's region.
    #[arg(long, default_value_t = ANSWER_B)]
    answer_at: u64,
    /// The benchmark's pid: the peer dies with it instead of spinning for ever.
    #[arg(long)]
    parent: Option<u32>,
}

/// How the processes are placed on CPUs.
struct Placement {
    cpus: Vec<usize>,
}

impl Placement {
    fn cpu(&self, process: usize) -> Option<usize> {
        match self.cpus.len() {
            0 => None,
            1 => Some(self.cpus[0]),
            n => Some(self.cpus[process.min(n - 1)]),
        }
    }

    /// Whether `processes` processes each get a CPU of their own.
    fn dedicated(&self, processes: usize) -> bool {
        self.cpus.len() >= processes
    }

    /// Where a `victim` peer runs (`crash_notice`), beside A. With CPUs to spare it is not
    /// pinned, as replicas are not: the threads SIGKILL wakes (its main thread, the fabric's
    /// pre-faulting one) find idle CPUs and the liveness thread exits undisturbed. Pinned to one
    /// CPU, they would run their exits before it. On two CPUs or fewer it takes the CPU that A
    /// does not.
    fn victim_cpu(&self) -> Option<usize> {
        if self.cpus.len() >= 3 {
            None
        } else {
            self.cpu(1)
        }
    }
}

/// A waiting loop: spin, or (without a CPU of one's own) spin briefly and then yield.
fn wait_until(spin_only: bool, mut ready: impl FnMut() -> bool) {
    let mut spins: u32 = 0;
    while !ready() {
        spins = spins.wrapping_add(1);
        if spin_only || spins < 200 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

struct Peer {
    child: Child,
    stdin: ChildStdin,
}

impl Peer {
    fn start(&mut self) -> Result<(), String> {
        self.stdin
            .write_all(b"START\n")
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("starting peer: {e}"))
    }

    fn finish(mut self) -> Result<(), String> {
        let status = self.child.wait().map_err(|e| format!("waiting for peer: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("a benchmark peer failed ({status})"))
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Only reached with the child still running on an error path: do not leave it spinning.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn spawn_peer(
    run_dir: &Path,
    node: u16,
    role: &str,
    samples: u64,
    cpu: Option<usize>,
    spin: bool,
    answer_at: u64,
) -> Result<Peer, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding the mu binary: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("bench-peer")
        .arg("--run-dir")
        .arg(run_dir)
        .args(["--node", &node.to_string(), "--role", role, "--samples", &samples.to_string()])
        .args(["--answer-at", &answer_at.to_string()])
        .args(["--parent", &std::process::id().to_string()]);
    if let Some(cpu) = cpu {
        cmd.args(["--cpu", &cpu.to_string()]);
    }
    if spin {
        cmd.arg("--spin");
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting a peer: {e}"))?;
    let stdin = child.stdin.take().expect("piped");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    stdout.read_line(&mut line).map_err(|e| format!("reading from a peer: {e}"))?;
    if line.trim() != "READY" {
        let _ = child.wait();
        return Err(format!("peer {node} did not start (said {:?})", line.trim()));
    }
    Ok(Peer { child, stdin })
}

/// Node A: this process.
struct Local {
    fabric: ShmFabric,
    region: ShmRegion,
    ep: ShmEndpoint,
}

impl Local {
    fn create(run_dir: &Path) -> Result<Local, String> {
        let fabric = ShmFabric::create(ShmConfig::new(run_dir, CLUSTER_ID, NodeId(0)))
            .map_err(|e| e.to_string())?;
        let region =
            fabric.register_region(REGION, REGION_BYTES, Access::ALL).map_err(|e| e.to_string())?;
        let ep = fabric.endpoint(64).map_err(|e| e.to_string())?;
        Ok(Local { fabric, region, ep })
    }

    fn connect(&mut self, peer: u16) -> Result<ConnId, String> {
        let conn = ConnId::new(NodeId(peer), CHANNEL);
        self.fabric
            .connect(conn, Access::ALL)
            .map_err(|e| format!("connecting to peer {peer}: {e}"))?;
        self.ep.attach(conn).map_err(|e| e.to_string())?;
        Ok(conn)
    }

    /// Waits for `count` completions, all successful; returns the last.
    fn complete(&mut self, count: usize) -> Result<Completion, String> {
        let mut last = Completion::EMPTY;
        for _ in 0..count {
            last = complete(&mut self.ep)?;
        }
        Ok(last)
    }

    /// One iteration of a pair figure on node A: send iteration `i` to B and wait for its answer.
    fn pair_iteration(
        &mut self,
        figure: PairFigure,
        map: &Mapping,
        b: ConnId,
        i: u64,
        spin: bool,
    ) -> Result<(), String> {
        let at = figure.inbox();
        match figure {
            PairFigure::Bare => {
                map.u64_at(at as usize).store(i, Ordering::Release);
                wait_until(spin, || map.u64_at(at as usize + 128).load(Ordering::Acquire) == i);
            }
            PairFigure::Write => {
                let p = payload(i);
                self.ep
                    .post(b, &WorkRequest::write(i, Source::Inline(&p), remote(at)))
                    .map_err(|e| e.to_string())?;
                self.complete(1)?;
                wait_until(spin, || self.word(at) == i);
            }
            PairFigure::Read => {
                self.region.store_u64(at as usize, i).map_err(|e| e.to_string())?;
                let scratch = mu_fabric::LocalSlice { region: REGION, offset: SCRATCH, len: 8 };
                loop {
                    self.ep
                        .post(b, &WorkRequest::read(i, scratch, remote(at)))
                        .map_err(|e| e.to_string())?;
                    self.complete(1)?;
                    if self.word(SCRATCH) == i {
                        break;
                    }
                }
            }
            PairFigure::Cas => {
                self.ep
                    .post(b, &WorkRequest::compare_swap(i, remote(at), i - 1, i))
                    .map_err(|e| e.to_string())?;
                let c = self.complete(1)?;
                if c.value != i - 1 {
                    return Err(format!(
                        "compare-and-swap saw {} where {} was expected",
                        c.value,
                        i - 1
                    ));
                }
                wait_until(spin, || self.word(at) == i);
            }
        }
        Ok(())
    }

    fn word(&self, offset: u64) -> u64 {
        self.region.load_u64(offset as usize).expect("in bounds")
    }
}

fn payload(i: u64) -> [u8; PAYLOAD_BYTES] {
    let mut p = [0u8; PAYLOAD_BYTES];
    p[..8].copy_from_slice(&i.to_le_bytes());
    p
}

fn remote(offset: u64) -> RemoteAddr {
    RemoteAddr { region: REGION, offset }
}

/// As [`wait_until`], but fails after `timeout` or on an interrupt (`crate::interrupt`): a peer
/// that died never answers. The clock is read only every 1024 checks, so a fast answer costs no
/// clock read.
fn wait_within(
    spin_only: bool,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<(), String> {
    let mut spins: u32 = 0;
    let mut since: Option<Instant> = None;
    while !ready() {
        spins = spins.wrapping_add(1);
        if spins % 1024 == 0 {
            crate::interrupt::check()?;
            if since.get_or_insert_with(Instant::now).elapsed() > timeout {
                return Err(format!("a benchmark peer did not answer within {timeout:?}"));
            }
        }
        if spin_only || spins < 200 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// How long node A waits for a peer's answer before it gives up.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `samples` timed iterations of `iteration` (after a warm-up), with progress on stderr.
/// `--perm-samples` and `--crash-samples` by default.
const PERM_SAMPLES: u64 = 100_000;
const CRASH_SAMPLES: u64 = 100;

pub fn run(args: Args) -> Result<(), String> {
    // Ctrl-C and `kill` end the measurement at its next check, so that the peers are stopped
    // and the run directory removed on the way out.
    crate::interrupt::catch();
    if let Some(provider) = crate::cluster::fabric_provider(&args.fabric, args.provider.as_deref())?
    {
        if args.perm_samples.is_some() || args.crash_samples.is_some() {
            return Err("--perm-samples and --crash-samples are for the shm fabric: on ofi \
                        there are no permission-change or crash figures"
                .into());
        }
        #[cfg(feature = "ofi")]
        return crate::ofi::run(args.json, args.samples, provider);
        #[cfg(not(feature = "ofi"))]
        unreachable!("no provider {provider} without the ofi backend");
    }
    match &args.run_dir {
        Some(dir) => {
            if dir.exists() && !dir.is_dir() {
                return Err(format!("--run-dir {} is not a directory", dir.display()));
            }
            // The peer processes are told the same directory, whatever their working directory.
            let dir = std::path::absolute(dir)
                .map_err(|e| format!("--run-dir {}: {e}", dir.display()))?;
            run_in(&args, &dir)
        }
        // Removed when dropped, and by a later run if this one is killed.
        None => run_in(&args, mu_procs::run_dir::RunDir::create("fabric")?.path()),
    }
}

/// `write2`: A writes 64 bytes to B and to C, and each answers with a write to A once it sees
/// its own; timed at A until both answers are in. A leader replicating to two followers has this
/// shape, so `mu bench replication` measures it too, through [`write2_rtt`].
fn measure_write2(
    a: &mut Local,
    run_dir: &Path,
    placement: &Placement,
    samples: u64,
) -> Result<Summary, String> {
    let trio_spin = placement.dedicated(3);
    for at in [ANSWER_B, ANSWER_C] {
        a.region.store_u64(at as usize, 0).map_err(|e| e.to_string())?;
    }
    let peer_iterations = samples + WARMUP_ITERATIONS;
    let mut pb =
        spawn_peer(run_dir, 1, "write", peer_iterations, placement.cpu(1), trio_spin, ANSWER_B)?;
    let mut pc =
        spawn_peer(run_dir, 2, "write", peer_iterations, placement.cpu(2), trio_spin, ANSWER_C)?;
    let b = a.connect(1)?;
    let c = a.connect(2)?;
    pb.start()?;
    pc.start()?;
    let s = measure("write2_rtt", samples, |i| {
        let p = payload(i);
        a.ep.post(b, &WorkRequest::write(i, Source::Inline(&p), remote(INBOX)))
            .map_err(|e| e.to_string())?;
        a.ep.post(c, &WorkRequest::write(i, Source::Inline(&p), remote(INBOX)))
            .map_err(|e| e.to_string())?;
        a.complete(2)?;
        wait_within(trio_spin, PEER_TIMEOUT, || a.word(ANSWER_B) == i && a.word(ANSWER_C) == i)
    })?;
    pb.finish()?;
    pc.finish()?;
    Ok(s)
}

/// The `write2` round trip alone, `samples` samples after the same warm-up and with the same
/// placement as in `mu bench fabric`, on a fresh node 0 in `run_dir` (a directory of its own:
/// its nodes are 0, 1 and 2). It runs on a thread of its own because pinning applies to the
/// calling thread and to the threads it starts later: the caller's threads keep their CPUs.
pub fn write2_rtt(run_dir: &Path, samples: u64) -> Result<Summary, String> {
    on_node_zero(run_dir, |a, placement| measure_write2(a, run_dir, placement, samples))
}

/// Runs `measure` against a fresh node 0 in `run_dir`, on a thread of its own pinned as
/// `mu bench fabric` pins node 0 (pinning applies to the calling thread and to the threads it
/// starts later: the caller's threads keep their CPUs).
fn on_node_zero(
    run_dir: &Path,
    measure: impl FnOnce(&mut Local, &Placement) -> Result<Summary, String> + Send,
) -> Result<Summary, String> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let placement = Placement { cpus: mu_cpu::allowed_cpus() };
                if let Some(cpu) = placement.cpu(0) {
                    mu_cpu::pin_to(cpu)?;
                }
                let mut a = Local::create(run_dir)?;
                measure(&mut a, &placement)
            })
            .join()
            .unwrap_or_else(|_| Err("the measurement failed unexpectedly".into()))
    })
}

/// The `write` round trip (a write into a peer process's region, seen there and written back),
/// as `mu bench fabric` measures it, on a fresh node 0 in `run_dir` (a directory of its own),
/// on a thread of its own as [`write2_rtt`] is. The pair figures are measured together, in
/// interleaved chunks; this keeps the write's.
pub fn write_rtt(run_dir: &Path, samples: u64) -> Result<Summary, String> {
    on_node_zero(run_dir, |a, placement| {
        let spin = placement.dedicated(2);
        let [_, write, _, _] = measure_pairs(a, run_dir, placement, samples, spin)?;
        Ok(write)
    })
}

/// `crash_notice` and `crash_reaped`: `samples` times, a fresh `victim` peer (its liveness thread
/// spinning where it has a CPU of its own, as with dedicated replica threads) is killed; A spins
/// on the fabric's crash notification, then reaps the process. On two CPUs the victim's threads
/// share one: those that SIGKILL wakes may run their exits first, so the figure is then an
/// upper bound.
fn measure_crash_notice(
    a: &mut Local,
    run_dir: &Path,
    placement: &Placement,
    samples: u64,
) -> Result<(Summary, Summary), String> {
    let spin = placement.dedicated(2);
    let cpu = placement.victim_cpu();
    let (mut notice, mut reaped) = (histogram(), histogram());
    let step = (samples / 10).max(1);
    note_part!("  {:<14} ", "crash_notice");
    // The first victim warms up (its process start, our first mappings of a new incarnation).
    for i in 0..=samples {
        crate::interrupt::check()?;
        let mut victim = spawn_peer(run_dir, 1, "victim", 0, cpu, spin, 0)?;
        let b = a.connect(1)?;
        victim.start()?;
        if a.fabric.crash_notified(b.peer) {
            return Err("the fabric reported a live peer dead".into());
        }
        let killed = Instant::now();
        mu_procs::child::signal(&victim.child, libc::SIGKILL)
            .map_err(|e| format!("killing a peer: {e}"))?;
        wait_within(spin, PEER_TIMEOUT, || a.fabric.crash_notified(b.peer))
            .map_err(|_| format!("a killed peer was not reported dead within {PEER_TIMEOUT:?}"))?;
        let noticed = killed.elapsed();
        victim.child.wait().map_err(|e| format!("reaping a killed peer: {e}"))?;
        let gone = killed.elapsed();
        if i == 0 {
            continue;
        }
        notice.saturating_record((noticed.as_nanos() as u64).max(1));
        reaped.saturating_record((gone.as_nanos() as u64).max(1));
        if i % step == 0 {
            note_part!(".");
        }
    }
    note!(" p50 {} ns", notice.value_at_quantile(0.5));
    Ok((Summary::of(&notice), Summary::of(&reaped)))
}

fn run_in(args: &Args, run_dir: &Path) -> Result<(), String> {
    let placement = Placement { cpus: mu_cpu::allowed_cpus() };
    if let Some(cpu) = placement.cpu(0) {
        mu_cpu::pin_to(cpu)?;
    }
    let pair_spin = placement.dedicated(2);
    let trio_spin = placement.dedicated(3);
    note!(
        "mu bench fabric: shm, {} samples per figure, {} CPUs allowed; pairs {}, trios {}",
        args.samples,
        placement.cpus.len(),
        if pair_spin { "pinned and spinning" } else { "sharing CPUs (spin, then yield)" },
        if trio_spin { "pinned and spinning" } else { "sharing CPUs (spin, then yield)" },
    );

    let mut a = Local::create(run_dir)?;
    let samples = args.samples;

    // The pair figures, interleaved in chunks so that each samples the same conditions.
    let [bare, write, read, cas] = measure_pairs(&mut a, run_dir, &placement, samples, pair_spin)?;

    let write2 = measure_write2(&mut a, run_dir, &placement, samples)?;

    let perm_samples = args.perm_samples.unwrap_or(PERM_SAMPLES);
    let (perm_fast, perm_slow) = measure_permissions(&mut a, run_dir, &placement, perm_samples)?;

    let (crash_notice, crash_reaped) = measure_crash_notice(
        &mut a,
        run_dir,
        &placement,
        args.crash_samples.unwrap_or(CRASH_SAMPLES),
    )?;

    let ratio = write.p50 as f64 / bare.p50.max(1) as f64;
    if args.json {
        let out = json!({
            "backend": "shm",
            "cpus_allowed": placement.cpus.len(),
            "pairs_pinned": pair_spin,
            "trios_pinned": trio_spin,
            "payload_bytes": PAYLOAD_BYTES,
            "bare_pingpong_ns": bare.json(),
            "write_rtt_ns": write.json(),
            "read_rtt_ns": read.json(),
            "cas_rtt_ns": cas.json(),
            "write2_rtt_ns": write2.json(),
            "perm_fast_ns": perm_fast.json(),
            "perm_slow_ns": perm_slow.json(),
            "crash_notice_ns": crash_notice.json(),
            "crash_reaped_ns": crash_reaped.json(),
            "write_over_bare_p50": (ratio * 1000.0).round() / 1000.0,
        });
        println!("{out}");
    } else {
        println!(
            "shm fabric, {PAYLOAD_BYTES}-byte payloads: ping-pong round trips, permission \
             changes and crash notifications (ns)"
        );
        println!("{:<16} {:>9} {:>9} {:>9} {:>10}", "figure", "p50", "p99", "p99.9", "samples");
        for (name, s) in [
            ("bare_pingpong", &bare),
            ("write_rtt", &write),
            ("read_rtt", &read),
            ("cas_rtt", &cas),
            ("write2_rtt", &write2),
            ("perm_fast", &perm_fast),
            ("perm_slow", &perm_slow),
            ("crash_notice", &crash_notice),
            ("crash_reaped", &crash_reaped),
        ] {
            println!("{name:<16} {:>9} {:>9} {:>9} {:>10}", s.p50, s.p99, s.p999, s.samples);
        }
        println!("write_rtt p50 / bare_pingpong p50 = {ratio:.2} (target: at most 1.5)");
        println!(
            "crash_notice: SIGKILL to the fabric's report of the peer's death; crash_reaped: \
             SIGKILL to the process reaped"
        );
    }
    Ok(())
}

/// The pair figures (bare ping-pong, write, read and CAS round trips to one peer), interleaved
/// in chunks so that each samples the same conditions.
fn measure_pairs(
    a: &mut Local,
    run_dir: &Path,
    placement: &Placement,
    samples: u64,
    pair_spin: bool,
) -> Result<[Summary; 4], String> {
    let bare_path = run_dir.join("bare.mem");
    let _ = std::fs::remove_file(&bare_path); // left by an earlier run in the same directory
    let map = Mapping::create(&bare_path, REGION_BYTES).map_err(|e| e.to_string())?;
    let mut peer = spawn_peer(run_dir, 1, "pairs", samples, placement.cpu(1), pair_spin, 0)?;
    let b = a.connect(1)?;
    peer.start()?;
    let mut hs = [histogram(), histogram(), histogram(), histogram()];
    let chunks = chunks_per_figure(samples);
    note_part!("  {:<14} ", "pairs");
    for chunk in 0..chunks * PAIR_FIGURES.len() as u64 {
        let figure = PAIR_FIGURES[(chunk % PAIR_FIGURES.len() as u64) as usize];
        let first = chunk / PAIR_FIGURES.len() as u64 * CHUNK + 1;
        let recorded = chunk >= PAIR_FIGURES.len() as u64; // the first round warms up
        for i in first..first + CHUNK {
            let start = Instant::now();
            a.pair_iteration(figure, &map, b, i, pair_spin)?;
            if recorded {
                hs[figure as usize].saturating_record((start.elapsed().as_nanos() as u64).max(1));
            }
        }
        if chunk % (chunks * PAIR_FIGURES.len() as u64 / 10).max(1) == 0 {
            note_part!(".");
        }
    }
    note!(" done");
    peer.finish()?;
    Ok(hs.map(|h| Summary::of(&h)))
}

/// Permission changes on A's side of a connection to an idle peer: revoke write, grant it back,
/// by the fast path and by the slow one.
fn measure_permissions(
    a: &mut Local,
    run_dir: &Path,
    placement: &Placement,
    perm_samples: u64,
) -> Result<(Summary, Summary), String> {
    let mut peer = spawn_peer(run_dir, 1, "idle", 0, placement.cpu(1), false, 0)?;
    let b = a.connect(1)?;
    let mut fast = histogram();
    let mut slow = histogram();
    note_part!("  {:<14} ", "perm_fast/slow");
    for k in 0..perm_samples {
        if k % 1024 == 0 {
            crate::interrupt::check()?;
        }
        let t = Instant::now();
        a.fabric.set_access_fast(b, Access::READ).map_err(|e| e.to_string())?;
        fast.saturating_record((t.elapsed().as_nanos() as u64).max(1));
        a.fabric.set_access_fast(b, Access::ALL).map_err(|e| e.to_string())?;
        let t = Instant::now();
        a.fabric.set_access_slow(b, Access::READ).map_err(|e| e.to_string())?;
        slow.saturating_record((t.elapsed().as_nanos() as u64).max(1));
        a.fabric.set_access_slow(b, Access::ALL).map_err(|e| e.to_string())?;
    }
    note!("done");
    peer.start()?;
    peer.finish()?;
    Ok((Summary::of(&fast), Summary::of(&slow)))
}

/// A benchmark peer: node `--node`, answering node 0.
pub fn peer(args: PeerArgs) -> Result<(), String> {
    if let Some(parent) = args.parent {
        mu_procs::parent::die_with_parent(parent)?;
    }
    if let Some(cpu) = args.cpu {
        mu_cpu::pin_to(cpu)?;
    }
    let spin = args.spin;
    let n = args.samples;
    let mut config = ShmConfig::new(&args.run_dir, CLUSTER_ID, NodeId(args.node));
    // A victim's death is timed: its liveness thread waits as a replica's does with dedicated
    // threads (spinning) or shared ones (asleep).
    config.liveness_spin = spin && args.role == "victim";
    let fabric = ShmFabric::create(config).map_err(|e| e.to_string())?;
    let region =
        fabric.register_region(REGION, REGION_BYTES, Access::ALL).map_err(|e| e.to_string())?;
    let a = ConnId::new(NodeId(0), CHANNEL);
    fabric.connect(a, Access::ALL).map_err(|e| e.to_string())?;
    let mut ep = fabric.endpoint(64).map_err(|e| e.to_string())?;
    ep.attach(a).map_err(|e| e.to_string())?;
    println!("READY");
    wait_start()?;
    let word = |offset: u64| region.load_u64(offset as usize).expect("in bounds");
    match args.role.as_str() {
        "idle" => {}
        // Waits to be killed (A closing our stdin instead, on an error path, ends us).
        "victim" => {
            let _ = std::io::stdin().read_line(&mut String::new());
            return Ok(());
        }
        "pairs" => {
            let map = Mapping::open(&args.run_dir.join("bare.mem"), REGION_BYTES)
                .map_err(|e| e.to_string())?;
            let chunks = chunks_per_figure(n);
            for chunk in 0..chunks * PAIR_FIGURES.len() as u64 {
                let figure = PAIR_FIGURES[(chunk % PAIR_FIGURES.len() as u64) as usize];
                let first = chunk / PAIR_FIGURES.len() as u64 * CHUNK + 1;
                for i in first..first + CHUNK {
                    peer_pair_iteration(figure, &map, &region, &mut ep, a, i, spin)?;
                }
            }
        }
        "write" => {
            for i in 1..=n {
                wait_until(spin, || word(INBOX) == i);
                let p = payload(i);
                ep.post(a, &WorkRequest::write(i, Source::Inline(&p), remote(args.answer_at)))
                    .map_err(|e| e.to_string())?;
                complete(&mut ep)?;
            }
        }
        other => return Err(format!("unknown peer role {other:?}")),
    }
    // Stay alive until A's last operation on our memory has completed.
    std::thread::sleep(Duration::from_millis(20));
    Ok(())
}

fn wait_start() -> Result<(), String> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).map_err(|e| format!("waiting for START: {e}"))?;
    if line.trim() == "START" {
        Ok(())
    } else {
        Err("the benchmark went away before starting".into())
    }
}
