//! `mu bench sim --profile NAME`: the papers' figures on a simulated RDMA cluster. The
//! production engines (`mu_sim::SimCluster`: whole replica cores, both planes) run in virtual
//! time on a fabric whose primitives cost what a hardware profile says (`spec/profiles/`,
//! `mu_sim::profile`); no end-to-end figure is an input. Each figure is printed beside the
//! paper's with the ratio, and marked when a profile value was derived from it (then it checks
//! nothing). A figure outside 20% is reported, not tuned: `docs/bench/simulated-rdma.md` says
//! which step differs and why.
//!
//! A run is a function of the profile, the sizes and the seed: same seed, same figures, bit for
//! bit.

mod charts;
mod ukharon;

use charts::Chart;
use mu_fabric::NodeId;
use mu_replica::Protocol;
use mu_sim::profile::Profile;
use mu_sim::SimCluster;
use serde_json::json;
use std::path::PathBuf;

/// Virtual time a new cluster may take to agree on a leader (connections cost queue-pair
/// transitions, charged to each node's CPU).
const SETUP_LIMIT_NS: u64 = 200_000_000;
/// Virtual time one proposal may take before the run is called broken.
const PROPOSE_LIMIT_NS: u64 = 5_000_000;
/// Virtual time a failover may take before the run is called broken.
const FAILOVER_LIMIT_NS: u64 = 20_000_000;
/// How long no control call may have held any replica's CPU before a cluster is measured.
const QUIET_NS: u64 = 4_000_000;
/// Proposals before the timed ones (a new leader's first proposals finish its set-up).
const WARMUP_PROPOSALS: usize = 20;
/// Numbers of the settling proposals' requests, apart from the measured ones'.
const WARMUP_BASE: usize = 1 << 40;
/// Framing of a log entry and of each request in a batch entry, in bytes.
const ENTRY_FRAMING_BYTES: usize = 24;
const BATCH_FRAMING_BYTES: usize = 4;

#[derive(clap::Args)]
pub struct Args {
    /// The hardware profile (`spec/profiles/NAME.toml`).
    #[arg(long, value_parser = ["mu-osdi2020", "velos", "ukharon"])]
    profile: String,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Fewer samples and failovers: a smoke run of a few seconds.
    #[arg(long)]
    quick: bool,
    /// The seed every cluster's seed is drawn from.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the run's charts (latency histograms, the throughput–latency curve, failovers)
    /// as SVG files into this folder, each named `sim-PROFILE-WHAT.svg`.
    #[arg(long)]
    svg: Option<PathBuf>,
}

/// How much a run measures.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Timed proposals per replication figure.
    pub samples: usize,
    /// Failovers per failover figure, each on a fresh cluster.
    pub failovers: u64,
    /// Calls of `outstanding × batch` requests for the throughput figure.
    pub throughput_calls: usize,
    /// Whether to run the throughput–latency curve (Mu Fig. 7) beyond its best point.
    pub curve: bool,
}

impl Sizes {
    pub const FULL: Sizes =
        Sizes { samples: 2_000, failovers: 20, throughput_calls: 20, curve: true };
    pub const QUICK: Sizes =
        Sizes { samples: 200, failovers: 3, throughput_calls: 4, curve: false };
}

/// What a run gives: the compared figures, and the charts of the samples behind them.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub figures: Vec<Figure>,
    pub charts: Vec<Chart>,
    /// The throughput–latency curve (Mu Fig. 7), where the run has one.
    pub curve: Vec<Point>,
}

/// One figure of a paper beside the simulated one, in the same unit.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    pub name: &'static str,
    pub unit: &'static str,
    pub paper: f64,
    pub simulated: f64,
    /// Where the paper's figure is, briefly.
    pub source: &'static str,
    /// False when a value of the profile was derived from this figure.
    pub independent: bool,
}

impl Figure {
    pub fn ratio(&self) -> f64 {
        self.simulated / self.paper
    }
}

pub fn run(args: Args) -> Result<(), String> {
    let profile = Profile::builtin(&args.profile)?;
    let sizes = if args.quick { Sizes::QUICK } else { Sizes::FULL };
    let outcome = figures(&profile, sizes, args.seed)?;
    if let Some(dir) = &args.svg {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for chart in &outcome.charts {
            chart.write(dir, &profile.name)?;
        }
    }
    if args.json {
        println!("{}", to_json(&profile, args.seed, args.quick, &outcome));
    } else {
        print!("{}", table(&profile, &outcome.figures));
        print!("{}", curve_table(&outcome.curve));
    }
    Ok(())
}

/// The figures the profile's paper reports, simulated, and their charts.
pub fn figures(profile: &Profile, sizes: Sizes, seed: u64) -> Result<Outcome, String> {
    match profile.name.as_str() {
        "mu-osdi2020" => mu_figures(profile, sizes, seed),
        "velos" => velos_figures(profile, sizes, seed),
        "ukharon" => ukharon::figures(profile, sizes, seed),
        other => Err(format!("no paper figures known for profile {other}")),
    }
}

fn mu_figures(profile: &Profile, sizes: Sizes, seed: u64) -> Result<Outcome, String> {
    let independent = |name: &str| !profile.depends(name);
    let mut p64 = replication_us(profile, Protocol::Mu, 64, sizes.samples, seed)?;
    let mut p512 = replication_us(profile, Protocol::Mu, 512, sizes.samples, seed)?;
    let failover = failovers(profile, Protocol::Mu, sizes.failovers, seed)?;
    let best = throughput(profile, 8, 128, sizes.throughput_calls, seed)?;
    let figure = |name: &'static str, unit, paper, simulated, source| Figure {
        name,
        unit,
        paper,
        simulated,
        source,
        independent: independent(name),
    };
    let figures = vec![
        figure(
            "Mu replication p50, 64 B",
            "us",
            1.3,
            median_f(&mut p64),
            "Mu §1: 'less than 1.3 microseconds'",
        ),
        figure(
            "Mu replication p50, 512 B",
            "us",
            1.3 * 1.35,
            median_f(&mut p512),
            "Mu §7.1: 'at 512B ... only 35% higher than ... inlined payloads' (x 1.3 us)",
        ),
        figure("Mu failover median", "us", 873.0, failover.total_median_us, "Mu §7.3, Fig. 6"),
        figure(
            "Mu failover detection (total - switch)",
            "us",
            600.0,
            failover.detection_median_us,
            "Mu §7.3: 'The rest of the fail-over time is attributed to failure detection (≈600µs)'",
        ),
        figure(
            "Mu permission switch mean",
            "us",
            244.0,
            failover.switch_mean_us,
            "Mu §7.3: 'mean latency at 244µs'",
        ),
        figure(
            "Mu throughput, 8 outstanding x 128 batch",
            "ops/us",
            47.0,
            best.ops_per_us,
            "Mu §7.4, Fig. 7: '47 Ops/µs with a batch size of 128 and 8 ... outstanding'",
        ),
        figure(
            "Mu latency at 8 outstanding x 128 batch",
            "us",
            17.0,
            best.call_p50_us,
            "Mu §7.4: 'per-operation median latency at 17µs' (here a call's: 8 x 128 requests until its last commits)",
        ),
    ];
    let mut charts = vec![
        charts::replication(
            "replication",
            "Mu replication latency, one proposal at a time (simulated)",
            vec![("Mu, 64 B".into(), p64), ("Mu, 512 B".into(), p512)],
        ),
        charts::failover("Mu failover (simulated): leader stopped", &failover, true),
    ];
    let curve =
        if sizes.curve { curve(profile, sizes.throughput_calls, seed)? } else { Vec::new() };
    if !curve.is_empty() {
        charts.push(charts::curve(&curve));
    }
    Ok(Outcome { figures, charts, curve })
}

fn velos_figures(profile: &Profile, sizes: Sizes, seed: u64) -> Result<Outcome, String> {
    let independent = |name: &str| !profile.depends(name);
    // Velos Fig. 1's smallest messages: the 1.9 against 1.25 µs of §7.1 are read at 1 B.
    let mut velos = replication_us(profile, Protocol::Velos, 1, sizes.samples, seed)?;
    let mut mu = replication_us(profile, Protocol::Mu, 1, sizes.samples, seed)?;
    let (velos_p50, mu_p50) = (median_f(&mut velos), median_f(&mut mu));
    let mut velos_failover_us = Vec::new();
    for i in 0..sizes.failovers {
        let run_seed = seed.wrapping_add(i.wrapping_mul(0x9E37));
        velos_failover_us.push(failover_under_load_ns(profile, run_seed)? as f64 / 1e3);
    }
    let velos_failover_p50_us = median_f(&mut velos_failover_us.clone());
    let mu_failover = failovers(profile, Protocol::Mu, sizes.failovers, seed)?;
    let figure = |name: &'static str, unit, paper, simulated, source, also: &[&str]| Figure {
        name,
        unit,
        paper,
        simulated,
        source,
        independent: independent(name) && also.iter().all(|&n| independent(n)),
    };
    let velos_name = "Velos replication p50, 1 B";
    let mu_failover_name = "Mu failover median";
    let figures = vec![
        figure(velos_name, "us", 1.9, velos_p50, "Velos §1: 'consensus in under 1.9µs'", &[]),
        figure(
            "Velos / Mu replication p50, 1 B (target: at most 1.6)",
            "ratio",
            1.9 / 1.25,
            velos_p50 / mu_p50,
            "Velos §7.1: CAS pattern 1.9 µs against 1.25 µs for writes",
            &[velos_name],
        ),
        figure(
            "Velos failover",
            "us",
            65.0,
            velos_failover_p50_us,
            "Velos §7.2, Fig. 2: 'a new value after approximately 65µs' (at the remaining replica, under load)",
            &[],
        ),
        figure(
            mu_failover_name,
            "us",
            850.0,
            mu_failover.total_median_us,
            "Velos §7.2: Mu's 'approximately 250µs' switch plus '600µs to detect'",
            &[],
        ),
        figure(
            "Velos / Mu failover (target: at most 0.2)",
            "ratio",
            65.0 / 850.0,
            velos_failover_p50_us / mu_failover.total_median_us,
            "Velos §7.2: 65 µs against Mu's 250 + 600 µs",
            &["Velos failover", mu_failover_name],
        ),
    ];
    let charts = vec![
        charts::replication(
            "replication",
            "Velos against Mu, replication latency at 1 B (simulated)",
            vec![("Velos".into(), velos), ("Mu".into(), mu)],
        ),
        charts::failovers_compared(velos_failover_us, &mu_failover),
    ];
    Ok(Outcome { figures, charts, curve: Vec::new() })
}

/// Slot size for entries of one `payload_bytes` request.
fn slot_bytes(payload_bytes: usize) -> u32 {
    (payload_bytes + ENTRY_FRAMING_BYTES + BATCH_FRAMING_BYTES).next_multiple_of(64) as u32
}

/// A distinct request of `len` bytes: its number, then filler.
fn request(i: usize, len: usize) -> Vec<u8> {
    let mut v = format!("r{i:08}-").into_bytes();
    v.resize(len.max(v.len()), b'.');
    v.truncate(len.max(1));
    v
}

/// Runs until `cluster` agrees on a leader and no replica's CPU has been held by a control
/// call (queue-pair transitions, permission changes) for [`QUIET_NS`], and still does after
/// [`WARMUP_PROPOSALS`] proposals; returns the leader's position. Setting up the connections
/// costs each replica milliseconds of blocking transitions, during which its peers suspect it:
/// the leadership churns before it settles.
fn leader(cluster: &mut SimCluster) -> Result<usize, String> {
    while cluster.world.now_ns() < SETUP_LIMIT_NS {
        cluster.run_for(QUIET_NS / 4);
        let Some(pos) = settled_leader(cluster) else { continue };
        for i in 0..WARMUP_PROPOSALS {
            // An outcome or none: whether the leadership held is checked below.
            let _ = cluster.propose(pos, &request(WARMUP_BASE + i, 64), PROPOSE_LIMIT_NS);
        }
        if settled_leader(cluster) == Some(pos) {
            return Ok(pos);
        }
    }
    Err(format!("no settled leader after {SETUP_LIMIT_NS} ns: {}", cluster.describe()))
}

/// The leader, if every replica agrees on it, no control call held any replica's CPU for
/// [`QUIET_NS`], the leader writes to every replica (as in the papers' runs: no follower behind)
/// and no other replica sets itself up as leader.
fn settled_leader(cluster: &SimCluster) -> Option<usize> {
    let nodes = cluster.world.nodes();
    let busy_ns = nodes.iter().map(|&n| cluster.world.node_busy_until(n)).max().unwrap_or(0);
    if busy_ns + QUIET_NS > cluster.world.now_ns() {
        return None;
    }
    let leader = cluster.agreed_leader()?;
    let settled = cluster.cores.iter().flatten().all(|core| {
        let status = core.status();
        // Velos has no confirmed followers: it writes to every acceptor.
        let whole = status.confirmed.is_empty() || status.confirmed.len() == cluster.cores.len();
        if status.me == leader {
            whole
        } else {
            status.elected_at_ns.is_none()
        }
    });
    settled.then_some(leader.0 as usize)
}

/// Proposes `value` at `pos`; returns when the replica learnt the outcome, in virtual ns (the
/// poll that saw it ran one poll period before the round ended).
fn propose_timed(cluster: &mut SimCluster, pos: usize, value: &[u8]) -> Result<u64, String> {
    match cluster.propose(pos, value, PROPOSE_LIMIT_NS) {
        Some(Ok(_)) => Ok(cluster.world.now_ns() - cluster.poll_period_ns),
        other => {
            Err(format!("a proposal at replica {pos} failed: {other:?}: {}", cluster.describe()))
        }
    }
}

/// Median replication latency at the leader of three, one proposal at a time (the Mu paper's
/// standalone setting), in µs.
pub fn replication_p50_us(
    profile: &Profile,
    protocol: Protocol,
    payload_bytes: usize,
    samples: usize,
    seed: u64,
) -> Result<f64, String> {
    Ok(median_f(&mut replication_us(profile, protocol, payload_bytes, samples, seed)?))
}

/// Replication latencies at the leader of three, one proposal at a time, in µs.
pub fn replication_us(
    profile: &Profile,
    protocol: Protocol,
    payload_bytes: usize,
    samples: usize,
    seed: u64,
) -> Result<Vec<f64>, String> {
    let mut cluster = profile.cluster(3, seed, |c| {
        c.protocol = protocol;
        c.slot_bytes = slot_bytes(payload_bytes);
    });
    let pos = leader(&mut cluster)?;
    let mut latencies_ns = Vec::with_capacity(samples);
    for i in 0..WARMUP_PROPOSALS + samples {
        let start_ns = cluster.world.now_ns();
        let decided_ns = propose_timed(&mut cluster, pos, &request(i, payload_bytes))?;
        if i >= WARMUP_PROPOSALS {
            latencies_ns.push(decided_ns - start_ns);
        }
    }
    Ok(latencies_ns.iter().map(|&ns| ns as f64 / 1e3).collect())
}

/// Failover figures over several fresh clusters.
#[derive(Clone, Debug, PartialEq)]
pub struct Failovers {
    pub total_median_us: f64,
    /// As the Mu paper defines it (§7.3: "the rest of the fail-over time"): the total less the
    /// permission switch, run by run.
    pub detection_median_us: f64,
    /// Mu only (0 for Velos): from election to holding a majority's write permission.
    pub switch_mean_us: f64,
    /// Each run's total, detection and switch, in µs.
    pub totals_us: Vec<f64>,
    pub detections_us: Vec<f64>,
    pub switches_us: Vec<f64>,
}

/// One failover's times, in ns from the failure.
struct Failover {
    total_ns: u64,
    switch_ns: u64,
}

/// `count` failovers, each on a fresh cluster: Mu's leader is stopped (the Mu paper delays it,
/// §7.3), Velos's crashes and its peers are told (the Velos paper's kernel notice, §6).
pub fn failovers(
    profile: &Profile,
    protocol: Protocol,
    count: u64,
    seed: u64,
) -> Result<Failovers, String> {
    let mut runs = Vec::new();
    for i in 0..count {
        runs.push(failover(profile, protocol, seed.wrapping_add(i.wrapping_mul(0x9E37)))?);
    }
    let us =
        |f: fn(&Failover) -> u64| -> Vec<f64> { runs.iter().map(|r| f(r) as f64 / 1e3).collect() };
    let (totals_us, detections_us, switches_us) =
        (us(|r| r.total_ns), us(|r| r.total_ns - r.switch_ns), us(|r| r.switch_ns));
    Ok(Failovers {
        total_median_us: median_f(&mut totals_us.clone()),
        detection_median_us: median_f(&mut detections_us.clone()),
        switch_mean_us: switches_us.iter().sum::<f64>() / runs.len().max(1) as f64,
        totals_us,
        detections_us,
        switches_us,
    })
}

fn failover(profile: &Profile, protocol: Protocol, seed: u64) -> Result<Failover, String> {
    let mut cluster = profile.cluster(3, seed, |c| c.protocol = protocol);
    let old = leader(&mut cluster)?;
    for i in 0..WARMUP_PROPOSALS {
        propose_timed(&mut cluster, old, &request(i, 64))?;
    }
    let failed_at_ns = cluster.world.now_ns();
    match protocol {
        Protocol::Mu => cluster.pause(old),
        Protocol::Velos => cluster.crash(old),
    }
    let seen = first_commit_after(&mut cluster, old, failed_at_ns)?;
    Ok(Failover {
        total_ns: seen.decided_ns - failed_at_ns,
        switch_ns: seen.permitted_ns.map_or(0, |p| p - seen.elected_ns),
    })
}

/// Numbers of the requests of the load of [`failover_under_load_ns`].
const LOAD_BASE: usize = 1 << 41;
/// How long the load runs before the leader crashes.
const LOAD_BEFORE_NS: u64 = 200_000;

/// Velos Fig. 2: proposals one after another at whichever replica leads; the leader crashes; the
/// time from the crash until the remaining replica (a survivor that does not lead) applies a
/// value proposed after the crash, in ns.
pub fn failover_under_load_ns(profile: &Profile, seed: u64) -> Result<u64, String> {
    let mut cluster = profile.cluster(3, seed, |c| c.protocol = Protocol::Velos);
    let old = leader(&mut cluster)?;
    let mut next = 0;
    let start_ns = cluster.world.now_ns();
    while cluster.world.now_ns() < start_ns + LOAD_BEFORE_NS {
        keep_proposing(&mut cluster, &mut next);
        cluster.round();
    }
    let failed_at_ns = cluster.world.now_ns();
    cluster.crash(old);
    let first_after = next;
    let mut seen: Vec<usize> = cluster.applied.iter().map(Vec::len).collect();
    while cluster.world.now_ns() < failed_at_ns + FAILOVER_LIMIT_NS {
        keep_proposing(&mut cluster, &mut next);
        cluster.round();
        let polled_ns = cluster.world.now_ns() - cluster.poll_period_ns;
        for pos in (0..cluster.cores.len()).filter(|&p| p != old) {
            let Some(core) = cluster.cores[pos].as_ref() else { continue };
            let leads = core.leader() == Some(NodeId(pos as u16));
            let new = &cluster.applied[pos][seen[pos]..];
            let after = |v: &Vec<u8>| (first_after..next).any(|i| *v == request(LOAD_BASE + i, 64));
            if !leads && new.iter().any(|(_, values)| values.iter().any(after)) {
                return Ok(polled_ns - failed_at_ns);
            }
            seen[pos] = cluster.applied[pos].len();
        }
    }
    Err(format!(
        "the remaining replica applied nothing new after the crash: {}",
        cluster.describe()
    ))
}

/// Hands the next load request to the replica that takes itself for leader, if it has none
/// outstanding.
fn keep_proposing(cluster: &mut SimCluster, next: &mut usize) {
    for pos in 0..cluster.cores.len() {
        let Some(core) = cluster.cores[pos].as_ref() else { continue };
        if core.leader() != Some(NodeId(pos as u16)) || cluster.outstanding[pos].is_some() {
            continue;
        }
        cluster.outcomes[pos] = None;
        if cluster.submit(pos, &request(LOAD_BASE + *next, 64)).is_ok() {
            *next += 1;
        }
    }
}

/// When a failover's steps were seen, in virtual ns.
struct Seen {
    /// The first poll in which another replica took itself for leader.
    elected_ns: u64,
    /// When that leader held a majority's write permission (Mu only).
    permitted_ns: Option<u64>,
    /// When it learnt that its first proposal committed.
    decided_ns: u64,
}

/// Proposes at whichever other replica thinks itself leader until one commits; returns when
/// each step was seen.
fn first_commit_after(
    cluster: &mut SimCluster,
    old: usize,
    failed_at_ns: u64,
) -> Result<Seen, String> {
    let value = b"first after failover".to_vec();
    let mut elected_ns = None;
    while cluster.world.now_ns() < failed_at_ns + FAILOVER_LIMIT_NS {
        cluster.round();
        let polled_ns = cluster.world.now_ns() - cluster.poll_period_ns;
        for pos in (0..cluster.cores.len()).filter(|&p| p != old) {
            let Some(core) = cluster.cores[pos].as_ref() else { continue };
            if core.leader() != Some(NodeId(pos as u16)) {
                continue;
            }
            let elected_ns = *elected_ns.get_or_insert(polled_ns);
            if let Some(outcomes) = cluster.outcomes[pos].take() {
                if outcomes.iter().all(Result::is_ok) {
                    let permitted = core.status().permitted_at_ns;
                    let permitted_ns = permitted.filter(|&p| p >= elected_ns);
                    return Ok(Seen { elected_ns, permitted_ns, decided_ns: polled_ns });
                }
            }
            if cluster.outstanding[pos].is_none() {
                // Refused while it sets up: asked again on the next round.
                let _ = cluster.submit(pos, &value);
            }
        }
    }
    Err(format!("no commit {FAILOVER_LIMIT_NS} ns after the failure: {}", cluster.describe()))
}

/// One point of Mu Fig. 7.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub outstanding: usize,
    pub batch: usize,
    pub ops_per_us: f64,
    /// The median call's latency: `outstanding × batch` requests until the last commits.
    pub call_p50_us: f64,
}

/// Outstanding entries and batch sizes of the throughput–latency curve (Mu Fig. 7's axes).
const CURVE_OUTSTANDING: [usize; 3] = [1, 4, 8];
const CURVE_BATCHES: [usize; 5] = [1, 8, 32, 64, 128];

/// Mu Fig. 7: a point per outstanding count and batch size, each on a fresh cluster, with about
/// as many requests as `calls` calls of the best point (at most 2,000 calls).
pub fn curve(profile: &Profile, calls: usize, seed: u64) -> Result<Vec<Point>, String> {
    let mut points = Vec::new();
    for outstanding in CURVE_OUTSTANDING {
        for batch in CURVE_BATCHES {
            let calls = (calls * 8 * 128 / (outstanding * batch)).clamp(calls, 2_000);
            points.push(throughput(profile, outstanding, batch, calls, seed)?);
        }
    }
    Ok(points)
}

/// Throughput at the leader of three with `outstanding` entries of `batch` 64-byte requests in
/// flight (Mu Fig. 7): requests per µs over `calls` calls, and the median call latency in µs.
pub fn throughput(
    profile: &Profile,
    outstanding: usize,
    batch: usize,
    calls: usize,
    seed: u64,
) -> Result<Point, String> {
    let mut cluster = profile.cluster(3, seed, |c| {
        c.outstanding_max = outstanding;
        c.batch_requests_max = batch;
        c.slot_bytes = slot_bytes(batch * (64 + BATCH_FRAMING_BYTES));
    });
    let pos = leader(&mut cluster)?;
    propose_timed(&mut cluster, pos, &request(0, 64))?;
    let per_call = outstanding * batch;
    let (start_ns, mut latencies_ns) = (cluster.world.now_ns(), Vec::new());
    for call in 0..calls {
        let values: Vec<Vec<u8>> =
            (0..per_call).map(|i| request(1 + call * per_call + i, 64)).collect();
        let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        let call_start_ns = cluster.world.now_ns();
        let outcomes = cluster.propose_many(pos, &refs, PROPOSE_LIMIT_NS);
        if !outcomes.as_ref().is_some_and(|o| o.iter().all(Result::is_ok)) {
            return Err(format!("a call of {per_call} requests failed: {outcomes:?}"));
        }
        latencies_ns.push(cluster.world.now_ns() - cluster.poll_period_ns - call_start_ns);
    }
    let elapsed_ns = (cluster.world.now_ns() - start_ns).max(1);
    let requests = (calls * per_call) as f64;
    Ok(Point {
        outstanding,
        batch,
        ops_per_us: requests / (elapsed_ns as f64 / 1e3),
        call_p50_us: median(&mut latencies_ns) / 1e3,
    })
}

/// The median (the lower middle one of an even count), in the samples' unit.
fn median(samples: &mut [u64]) -> f64 {
    samples.sort_unstable();
    samples.get(samples.len().saturating_sub(1) / 2).copied().unwrap_or(0) as f64
}

/// As [`median`], for samples in µs (sorts them).
pub(crate) fn median_f(samples: &mut [f64]) -> f64 {
    samples.sort_unstable_by(f64::total_cmp);
    samples.get(samples.len().saturating_sub(1) / 2).copied().unwrap_or(0.0)
}

/// The `q` quantile (nearest rank), for samples in µs (sorts them).
pub(crate) fn quantile_f(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_unstable_by(f64::total_cmp);
    let rank = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len().max(1));
    samples.get(rank - 1).copied().unwrap_or(0.0)
}

fn to_json(profile: &Profile, seed: u64, quick: bool, outcome: &Outcome) -> serde_json::Value {
    let curve: Vec<_> = outcome
        .curve
        .iter()
        .map(|p| {
            json!({"outstanding": p.outstanding, "batch": p.batch,
                   "ops_per_us": p.ops_per_us, "call_p50_us": p.call_p50_us})
        })
        .collect();
    let rows: Vec<_> = outcome
        .figures
        .iter()
        .map(|f| {
            json!({
                "name": f.name,
                "unit": f.unit,
                "paper": f.paper,
                "simulated": f.simulated,
                "ratio": f.ratio(),
                "source": f.source,
                "independent": f.independent,
            })
        })
        .collect();
    json!({
        "benchmark": "sim",
        "simulated": true,
        "profile": profile.name,
        "hardware": profile.hardware,
        "seed": seed,
        "quick": quick,
        "figures": rows,
        "curve": curve,
    })
}

/// The throughput–latency curve's points, one line each (nothing without a curve).
fn curve_table(points: &[Point]) -> String {
    if points.is_empty() {
        return String::new();
    }
    let mut out = String::from("Mu Fig. 7 curve: outstanding x batch, ops/us, median call us\n");
    for p in points {
        out.push_str(&format!(
            "  {:>2} x {:<4} {:>8.2} {:>9.2}\n",
            p.outstanding, p.batch, p.ops_per_us, p.call_p50_us
        ));
    }
    out
}

fn table(profile: &Profile, figures: &[Figure]) -> String {
    let mut out = format!(
        "mu bench sim --profile {} (simulated RDMA: {})\n{:<54} {:>9} {:>9} {:>7}  {}\n",
        profile.name, profile.hardware, "figure", "paper", "simulated", "ratio", "unit"
    );
    for f in figures {
        let mark =
            if f.independent { "" } else { "  (not independent: a profile value comes from it)" };
        out.push_str(&format!(
            "{:<54} {:>9.3} {:>9.3} {:>7.2}  {}{mark}\n",
            f.name,
            f.paper,
            f.simulated,
            f.ratio(),
            f.unit
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: Sizes = Sizes { samples: 30, failovers: 1, throughput_calls: 1, curve: false };

    #[test]
    fn the_same_seed_gives_the_same_figures_bit_for_bit_on_every_profile() {
        for (name, _) in mu_sim::profile::BUILTIN {
            let profile = Profile::builtin(name).unwrap();
            let a = figures(&profile, TINY, 7).unwrap();
            let b = figures(&profile, TINY, 7).unwrap();
            assert_eq!(a, b, "{name}");
            for (x, y) in a.figures.iter().zip(&b.figures) {
                assert_eq!(x.simulated.to_bits(), y.simulated.to_bits(), "{name}: {}", x.name);
            }
            assert!(!a.charts.is_empty(), "{name}: charts of the samples");
            // A derived value names figures this run prints, or it marks nothing.
            for (key, primitive) in &profile.primitives {
                for figure in &primitive.checked_against {
                    let printed = a.figures.iter().any(|f| f.name == figure);
                    assert!(printed, "{name}.{key}: checked_against {figure:?} is no figure");
                }
            }
        }
    }

    #[test]
    fn a_larger_payload_is_not_faster_and_a_cas_costs_more_than_a_write() {
        let profile = Profile::builtin("mu-osdi2020").unwrap();
        let small = replication_p50_us(&profile, Protocol::Mu, 64, 30, 3).unwrap();
        let large = replication_p50_us(&profile, Protocol::Mu, 512, 30, 3).unwrap();
        let velos = replication_p50_us(&profile, Protocol::Velos, 64, 30, 3).unwrap();
        assert!(large > small, "512 B ({large} us) above 64 B ({small} us): not inlined");
        assert!(velos > small, "Velos ({velos} us) above Mu ({small} us): a CAS per entry");
    }
}

#[cfg(test)]
mod print {
    use super::*;

    /// Prints every profile's quick figures (`cargo test -p mu-bench print -- --ignored
    /// --nocapture`): a look at the model without building the binary.
    #[test]
    #[ignore]
    fn print_quick_figures() {
        for name in ["mu-osdi2020", "velos", "ukharon"] {
            let profile = Profile::builtin(name).unwrap();
            let t = std::time::Instant::now();
            let outcome = figures(&profile, Sizes::QUICK, 1).unwrap();
            print!("{}", table(&profile, &outcome.figures));
            println!("({:?})", t.elapsed());
        }
    }
}
