//! The uKharon paper's figures on the `ukharon` profile: Mu's and the write-then-CAS decision
//! (§3), the failovers of Table 2 (§7.2) from `mu_sim::ukharon::failover`, and the failovers of
//! Fig. 5's third graph (§7.3).

use super::charts::{self, Chart};
use super::{median_f, quantile_f, replication_us, Figure, Outcome, Sizes};
use mu_fabric_sim::SimConfig;
use mu_figures::{Bar, BarChart, BarSeries};
use mu_replica::Protocol;
use mu_sim::profile::Profile;
use mu_sim::ukharon::failover::{failover_ns, Case, Detection};

/// One cell of Table 2: its name, the case, and the paper's medians (µs) with the deadbeat and
/// with the heartbeat ring.
struct Cell {
    name: &'static str,
    caches: bool,
    leader: bool,
    cache: bool,
    deadbeat_us: f64,
    heartbeat_us: f64,
}

/// uKharon Table 2: "Failover time (in µs) for failures in App, Coordinator leader and Lease
/// caches; using the deadbeat\heartbeat" (median over 100 measurements).
const TABLE2: [Cell; 6] = [
    cell("A", false, false, false, 50.0, 96.0),
    cell("A+C", false, true, false, 64.0, 114.0),
    cell("caches, A", true, false, false, 74.0, 108.0),
    cell("caches, A+C", true, true, false, 96.0, 138.0),
    cell("caches, A+L", true, false, true, 75.0, 113.0),
    cell("caches, A+L+C", true, true, true, 101.0, 139.0),
];

const fn cell(
    name: &'static str,
    caches: bool,
    leader: bool,
    cache: bool,
    deadbeat_us: f64,
    heartbeat_us: f64,
) -> Cell {
    Cell { name, caches, leader, cache, deadbeat_us, heartbeat_us }
}

/// Names of the compared figures, one per cell and detection (static for [`Figure::name`]).
const NAMES: [[&str; 2]; 6] = [
    ["uKharon failover A, deadbeat", "uKharon failover A, heartbeat"],
    ["uKharon failover A+C, deadbeat", "uKharon failover A+C, heartbeat"],
    ["uKharon failover caches A, deadbeat", "uKharon failover caches A, heartbeat"],
    ["uKharon failover caches A+C, deadbeat", "uKharon failover caches A+C, heartbeat"],
    ["uKharon failover caches A+L, deadbeat", "uKharon failover caches A+L, heartbeat"],
    ["uKharon failover caches A+L+C, deadbeat", "uKharon failover caches A+L+C, heartbeat"],
];

/// Table 2's failovers per Mu failover of the run's size: 100 in a full run, the paper's count
/// ("median failover (over 100 measurements)"); a uKharon failover costs little real time.
const TABLE2_RUNS_PER_FAILOVER: u64 = 5;

const DECISION: &str = "write-then-CAS decision p50 (Velos engine), 64 B";
const MU_64: &str = "Mu replication p50, 64 B";

pub fn figures(profile: &Profile, sizes: Sizes, seed: u64) -> Result<Outcome, String> {
    let independent = |name: &str| !profile.depends(name);
    let mut mu = replication_us(profile, Protocol::Mu, 64, sizes.samples, seed)?;
    let mut velos = replication_us(profile, Protocol::Velos, 64, sizes.samples, seed)?;
    let mut figures = vec![
        Figure {
            name: MU_64,
            unit: "us",
            paper: 1.4,
            simulated: median_f(&mut mu),
            source: "uKharon §3: Mu 'solves consensus in ∼1.4µs'",
            independent: independent(MU_64),
        },
        Figure {
            name: DECISION,
            unit: "us",
            paper: 2.9,
            simulated: median_f(&mut velos),
            source: "uKharon §3: 'The CAS increases the decision time from 1.4µs to 2.9µs'",
            independent: independent(DECISION),
        },
    ];
    let runs = table2(profile, sizes.failovers * TABLE2_RUNS_PER_FAILOVER, seed)?;
    for (i, (cell, [deadbeat, heartbeat])) in TABLE2.iter().zip(&runs).enumerate() {
        for (d, (paper, samples)) in
            [(cell.deadbeat_us, deadbeat), (cell.heartbeat_us, heartbeat)].into_iter().enumerate()
        {
            figures.push(Figure {
                name: NAMES[i][d],
                unit: "us",
                paper,
                simulated: median_f(&mut samples.clone()),
                source: "uKharon §7.2, Table 2 (median of 100)",
                independent: independent(NAMES[i][d]),
            });
        }
    }
    figures.extend(fig5(profile, &runs));
    let charts = vec![
        charts::replication(
            "replication",
            "Mu and the write-then-CAS decision at 64 B (simulated, ukharon profile)",
            vec![("Mu".into(), mu), ("write then CAS (Velos)".into(), velos)],
        ),
        Chart::Bar("failover", table2_chart(&runs)),
    ];
    Ok(Outcome { figures, charts, curve: Vec::new() })
}

/// `count` failovers of every cell with each detection, in µs.
///
/// A control call charges the node's CPU but does not hold its posts here: the model cannot
/// tell a node's threads apart, and uKharon's only control calls are connection set-ups (a
/// state cycle each), which a survivor keeps trying towards the crashed member every
/// `reconnect_ns`. Held posts would stop every survivor's renewals and reads for good, where
/// uKharon's processes run them on threads of their own.
fn table2(profile: &Profile, count: u64, seed: u64) -> Result<Vec<[Vec<f64>; 2]>, String> {
    let fabric = SimConfig { control_blocks_posts: false, ..profile.fabric() };
    let mut out = Vec::new();
    for cell in &TABLE2 {
        let mut pair: [Vec<f64>; 2] = Default::default();
        for (d, detection) in [Detection::Deadbeat, Detection::Heartbeat].into_iter().enumerate() {
            let case =
                Case { caches: cell.caches, leader: cell.leader, cache: cell.cache, detection };
            for i in 0..count {
                let run_seed = seed.wrapping_add(i.wrapping_mul(0x9E37));
                let ns = failover_ns(fabric.clone(), case, profile.poll_period_ns(), run_seed)
                    .map_err(|e| format!("uKharon failover {} ({detection:?}): {e}", cell.name))?;
                pair[d].push(ns as f64 / 1e3);
            }
        }
        out.push(pair);
    }
    Ok(out)
}

/// Fig. 5's third graph: 95th-percentile failovers of uKharon-KV without and with caches.
/// These are the membership's part only (a member crashed until the survivors are active
/// without it: Table 2's A with the deadbeat, without and with caches); the client's retry and
/// the backup's scan of its buffer are not simulated here. HERD+Mu's 531 µs is not compared:
/// the paper tuned Mu's detector without giving the tuning.
fn fig5(profile: &Profile, runs: &[[Vec<f64>; 2]]) -> Vec<Figure> {
    let independent = |name: &str| !profile.depends(name);
    let p95 = |samples: &[f64]| quantile_f(&mut samples.to_vec(), 0.95);
    let rows = [
        ("uKharon-KV failover p95, no cache (membership part)", 53.0, p95(&runs[0][0])),
        ("uKharon-KV failover p95, caches (membership part)", 80.0, p95(&runs[2][0])),
    ];
    rows.into_iter()
        .map(|(name, paper, simulated)| Figure {
            name,
            unit: "us",
            paper,
            simulated,
            source: "uKharon §7.3, Fig. 5 (third graph): 95th percentiles",
            independent: independent(name),
        })
        .collect()
}

/// Table 2 as bars: the simulated median (min to max) beside the paper's, per cell and
/// detection.
fn table2_chart(runs: &[[Vec<f64>; 2]]) -> BarChart {
    let simulated = |d: usize| -> Vec<Option<Bar>> {
        runs.iter()
            .map(|pair| {
                let s = &pair[d];
                let min = s.iter().copied().fold(f64::INFINITY, f64::min);
                let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                Some(Bar::new(median_f(&mut s.clone()), min, max))
            })
            .collect()
    };
    let paper = |f: fn(&Cell) -> f64| TABLE2.iter().map(|c| Some(Bar::exact(f(c)))).collect();
    let series = vec![
        BarSeries { name: "deadbeat, paper".into(), points: paper(|c| c.deadbeat_us) },
        BarSeries { name: "deadbeat, simulated".into(), points: simulated(0) },
        BarSeries { name: "heartbeat, paper".into(), points: paper(|c| c.heartbeat_us) },
        BarSeries { name: "heartbeat, simulated".into(), points: simulated(1) },
    ];
    BarChart {
        title: "uKharon failover (Table 2): paper against simulated, median (min to max)".into(),
        x_label: "failed: A = a member, C = the coordinator leader, L = a lease cache".into(),
        y_label: "failover (µs)".into(),
        series,
        categories: TABLE2.iter().map(|c| c.name.to_string()).collect(),
        log_y: false,
    }
}
