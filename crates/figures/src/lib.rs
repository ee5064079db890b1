//! What `mu bench` shows a person: every benchmark prints a [`Table`], writes it as CSV and draws
//! an SVG figure into the directory [`output_dir`] prepared, and shows a [`Progress`] bar while it
//! runs.
//!
//! * [`Table`]: rows of text cells, printed with aligned columns (numbers right-aligned) and
//!   written as RFC 4180 CSV for scripts.
//! * [`BarChart`] (one group of bars per category, error bars from p1 to p99), [`LineChart`]
//!   (x–y series, such as latency against throughput) and [`Histogram`] (overlaid distributions)
//!   each write one self-contained SVG file. Text is emitted as SVG `<text>` and laid out from an
//!   estimate of its width, so drawing needs no font files or other system libraries.
//! * [`Progress`]: one redrawn line on a terminal, a short line every few seconds otherwise.
//!
//! Bad data never panics: NaN and infinite values, and values a log axis cannot show (zero or
//! negative), are left out of a figure; a figure left with nothing to draw is a [`FigureError`].

#![forbid(unsafe_code)]

mod axis;
mod chart;
mod error;
mod progress;
mod render;
mod table;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub use chart::{
    Bar, BarChart, BarSeries, Histogram, LineChart, LineSeries, HISTOGRAM_BINS_MAX,
    LINE_MARKERS_POINTS_MAX, PALETTE,
};
pub use error::FigureError;
pub use progress::Progress;
pub use table::Table;

/// Creates the output directory `path` (and its parents) and checks that a file can be written in
/// it, so that a benchmark fails at its start rather than after a long run with nowhere to put its
/// results. Returns the path to write into.
pub fn output_dir(path: &Path) -> Result<PathBuf, FigureError> {
    if path.exists() && !path.is_dir() {
        return Err(FigureError::NotADirectory { path: path.to_path_buf() });
    }
    fs::create_dir_all(path)
        .map_err(|source| FigureError::CreateDir { path: path.to_path_buf(), source })?;
    // Permission bits alone do not tell (a read-only mount, a directory owned by another user
    // with a privileged process, ACLs): writing and removing a file is the test that counts.
    let probe = path.join(format!(".mu-figures-write-probe-{}", std::process::id()));
    let probe_result = fs::write(&probe, b"").and_then(|()| fs::remove_file(&probe));
    probe_result.map_err(|source| FigureError::NotWritable { path: path.to_path_buf(), source })?;
    Ok(path.to_path_buf())
}

/// Formats a count with a comma between groups of three digits (`4,500`), as tables and the
/// progress bar show counts: long runs of digits are hard to read at a glance.
pub fn group_thousands(count: u64) -> String {
    let digits = count.to_string();
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

/// Writes `contents` to `path`, naming the path in the error.
pub(crate) fn write_file(path: &Path, contents: &[u8]) -> Result<(), FigureError> {
    fs::write(path, contents)
        .map_err(|source| FigureError::Write { path: path.to_path_buf(), source })
}

/// Wraps an I/O error so that its message names the file it concerns.
pub(crate) fn io_error_naming(path: &Path, error: io::Error) -> io::Error {
    io::Error::new(error.kind(), format!("cannot write {}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::group_thousands;

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(group_thousands(0), "0");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1_000), "1,000");
        assert_eq!(group_thousands(10_000), "10,000");
        assert_eq!(group_thousands(123_456_789), "123,456,789");
        assert_eq!(group_thousands(u64::MAX), "18,446,744,073,709,551,615");
    }
}
