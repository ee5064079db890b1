//! The seed runner of `mu sim --protocol ukharon`, `--protocol ukharon-kv` and `--reads lease`:
//! seeds swept on worker threads, a progress line every few seconds on long sweeps, each
//! failure noted as it comes (with the command that replays it), the reports in seed order;
//! what the flags set in each seed's configuration ([`SeedFlags`]), and how a seed's report is
//! judged, replayed alone or swept ([`Verdict`]).

use crate::sim::{lincheck_of, Args};
use mu_procs::note;
use mu_sim::kv_run::Setup;
use mu_sim::ukharon::UkFaults;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The seeds a sweep runs, and on how many threads.
#[derive(Clone, Copy, Debug)]
pub struct Seeds {
    pub first: u64,
    pub count: u64,
    pub jobs: usize,
}

impl Seeds {
    /// From `--first-seed`, `--seeds` (100 by default) and `--jobs` (every core by default,
    /// no more than there are seeds).
    pub fn of(args: &Args) -> Result<Seeds, String> {
        let count = args.seeds.unwrap_or(100);
        let first = args.first_seed;
        if first.checked_add(count.saturating_sub(1)).is_none() {
            return Err(format!(
                "--first-seed {first} with --seeds {count} runs past the last seed"
            ));
        }
        let jobs = args.jobs.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            |j| j as usize,
        );
        Ok(Seeds { first, count, jobs: jobs.min(count as usize).max(1) })
    }
}

/// What the flags set in each seed's configuration of uKharon-KV and of leased reads: `--nodes`
/// and `--steps` where given, `--clients`, the `lincheck` binary that checks histories, and
/// `--history-dir`.
pub struct SeedFlags {
    pub nodes: Option<u16>,
    pub steps: Option<u32>,
    pub clients: usize,
    pub lincheck: Option<PathBuf>,
    pub history_dir: Option<PathBuf>,
}

impl SeedFlags {
    /// From `args`: finds `lincheck` (or notes that histories go unchecked) and creates the
    /// history directory.
    pub fn of(args: &Args) -> Result<SeedFlags, String> {
        let lincheck = lincheck_of(args)?;
        if let Some(dir) = &args.history_dir {
            std::fs::create_dir_all(dir).map_err(|e| {
                format!("cannot create the history directory {}: {e}", dir.display())
            })?;
        }
        Ok(SeedFlags {
            nodes: args.nodes,
            steps: args.steps,
            clients: args.clients as usize,
            lincheck,
            history_dir: args.history_dir.clone(),
        })
    }

    /// A seed's `setup` (its defaults) with `faults` and what the flags set.
    pub fn apply(&self, setup: Setup, faults: UkFaults) -> Setup {
        Setup {
            faults,
            nodes: self.nodes.unwrap_or(setup.nodes),
            steps: self.steps.unwrap_or(setup.steps),
            clients: self.clients,
            lincheck: self.lincheck.clone(),
            history_dir: self.history_dir.clone(),
            ..setup
        }
    }
}

/// A seed's report as the runners judge it.
pub trait Verdict {
    fn seed(&self) -> u64;
    /// The checker that failed and why, in one line.
    fn violation_text(&self) -> Option<String>;
    /// How the run stopped short without a failure (an outcome counted apart in sweeps), as
    /// the end of "seed S ...", if it did.
    fn set_aside(&self) -> Option<&'static str> {
        None
    }
    /// Whether a checker failed.
    fn failed(&self) -> bool {
        self.violation_text().is_some() && self.set_aside().is_none()
    }
}

/// The end of `--seed`: an error when the seed broke a checker or stopped short.
pub fn replay_verdict(report: &impl Verdict) -> Result<(), String> {
    let seed = report.seed();
    match (report.violation_text(), report.set_aside()) {
        (None, _) => Ok(()),
        (Some(_), Some(stopped)) => Err(format!("seed {seed} {stopped}")),
        (Some(_), None) => Err(format!("seed {seed} broke a checker")),
    }
}

/// What a sweep notes at once about a failed seed: what broke, and `replay`, the command that
/// replays it.
pub fn failure_note<R: Verdict>(report: &R, replay: impl Fn(u64) -> String) -> Option<String> {
    let broke = report.violation_text().filter(|_| report.set_aside().is_none())?;
    Some(format!("{broke}\n  replay: {}", replay(report.seed())))
}

/// A sweep's failed reports, and the seeds that stopped short.
pub fn failed_and_set_aside<R: Verdict>(reports: &[R]) -> (Vec<&R>, Vec<u64>) {
    let failed = reports.iter().filter(|r| r.failed()).collect();
    let aside = reports.iter().filter(|r| r.set_aside().is_some()).map(|r| r.seed()).collect();
    (failed, aside)
}

/// The flags a replay command repeats from `args` for either uKharon sim: `--nodes`,
/// `--steps` and `--mutation` where given.
pub fn replay_flags(args: &Args) -> String {
    let mut flags = String::new();
    if let Some(n) = args.nodes {
        flags.push_str(&format!(" --nodes {n}"));
    }
    if let Some(s) = args.steps {
        flags.push_str(&format!(" --steps {s}"));
    }
    if let Some(m) = &args.mutation {
        flags.push_str(&format!(" --mutation {m}"));
    }
    flags
}

/// Runs `run_seed` on every seed of `seeds`; `failure` says what to note at once about a
/// report (why it failed and how to replay it), nothing when it is no failure. Notes and the
/// progress line are left out when `quiet` (`--json`). The reports, in seed order.
pub fn sweep<R: Send>(
    seeds: Seeds,
    quiet: bool,
    run_seed: &(dyn Fn(u64) -> R + Sync),
    failure: &(dyn Fn(&R) -> Option<String> + Sync),
) -> Vec<R> {
    let Seeds { first, count, jobs } = seeds;
    let started = Instant::now();
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let reports: Mutex<Vec<(u64, R)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        return;
                    }
                    let seed = first + i;
                    let report = run_seed(seed);
                    if let (Some(why), false) = (failure(&report), quiet) {
                        note!("seed {seed} FAILED: {why}");
                    }
                    reports.lock().expect("no worker panics holding it").push((seed, report));
                    done.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        // A progress line every few seconds until every worker is done (a panicking one
        // included: the scope then passes its panic on).
        let mut last = Instant::now();
        while !workers.iter().all(|w| w.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
            if last.elapsed() >= Duration::from_secs(5) && !quiet {
                last = Instant::now();
                let (d, secs) = (done.load(Ordering::Relaxed), started.elapsed().as_secs_f64());
                note!("mu sim: {d} of {count} seeds ({secs:.0} s)");
            }
        }
    });
    let mut reports = reports.into_inner().expect("workers done");
    reports.sort_by_key(|(seed, _)| *seed);
    reports.into_iter().map(|(_, r)| r).collect()
}
