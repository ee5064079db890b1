//! What the benchmarks of the suite (`mu bench payload|peers|e2e|failover|throughput|all`) share:
//! their common options, and how each one's results leave the process: a table on stdout (or
//! one JSON object with `--json`), the same table as CSV and a figure as SVG in the output
//! directory, and a progress bar on stderr while it runs.

use hdrhistogram::Histogram;
use mu_figures::{Progress, Table};
use std::path::PathBuf;

/// Options every benchmark of the suite takes.
#[derive(clap::Args, Clone, Debug)]
pub struct SuiteArgs {
    /// Print one JSON object on stdout instead of the table (the CSV and SVG files are still
    /// written, and progress still goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// A short run: fewer samples and points, for a smoke test or a first look.
    #[arg(long)]
    pub quick: bool,
    /// The directory the CSV and SVG files go into (created if absent).
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
}

/// Where one benchmark's results go.
pub struct Report {
    dir: PathBuf,
    name: &'static str,
    json: bool,
    written: Vec<PathBuf>,
}

impl Report {
    /// Checks the output directory before the benchmark runs, so that a long run does not end
    /// with nowhere to put its results.
    pub fn new(args: &SuiteArgs, name: &'static str) -> Result<Report, String> {
        let dir = mu_figures::output_dir(&args.out).map_err(|e| e.to_string())?;
        Ok(Report { dir, name, json: args.json, written: Vec::new() })
    }

    /// A progress bar on stderr for `total` steps.
    pub fn progress(&self, label: &str, total: u64) -> Progress {
        Progress::new(label, total)
    }

    /// The path of this benchmark's file with `suffix` (e.g. `.svg`, `-total.svg`).
    pub fn path(&mut self, suffix: &str) -> PathBuf {
        let path = self.dir.join(format!("{}{suffix}", self.name));
        self.written.push(path.clone());
        path
    }

    /// Prints `table` (unless the output is JSON) and writes it as `<name><suffix>.csv`.
    pub fn table(&mut self, table: &Table, suffix: &str) -> Result<(), String> {
        if !self.json {
            println!("{}", table.render());
        }
        let path = self.path(&format!("{suffix}.csv"));
        table.write_csv(&path).map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// Ends the run: the JSON object on stdout with `--json`, else the list of files written.
    pub fn finish(self, json: serde_json::Value) {
        if self.json {
            println!("{json}");
        } else {
            let files: Vec<String> = self.written.iter().map(|p| p.display().to_string()).collect();
            println!("wrote {}", files.join(", "));
        }
    }
}

/// p1, p50 and p99 of a histogram of nanoseconds, in microseconds.
pub fn quantiles_us(h: &Histogram<u64>) -> [f64; 3] {
    [0.01, 0.5, 0.99].map(|q| h.value_at_quantile(q) as f64 / 1000.0)
}

/// A histogram of nanoseconds from 1 ns to a minute, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// Microseconds as a table shows them: three significant digits or whole numbers.
pub fn us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Runs `mu bench <args> --json` as a child of this binary (`exe`) and returns the JSON object
/// it prints; its progress and messages go straight to this process's stderr. `name` names it
/// in errors.
pub fn child_json(
    exe: &std::path::Path,
    args: &[std::ffi::OsString],
    name: &str,
) -> Result<serde_json::Value, String> {
    let output = std::process::Command::new(exe)
        .arg("bench")
        .args(args)
        .arg("--json")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("starting mu bench {name}: {e}"))?;
    if !output.status.success() {
        return Err(format!("mu bench {name} failed ({})", output.status));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(text.trim())
        .map_err(|e| format!("mu bench {name} printed no JSON object: {e}"))
}
