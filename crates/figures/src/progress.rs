//! A progress bar on stderr for runs long enough that a person wonders whether anything is
//! happening.

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

use crate::group_thousands;

/// Shortest time between two redraws on a terminal: ten a second looks live, and more would
/// spend the benchmark's CPU on drawing.
const REDRAW_INTERVAL: Duration = Duration::from_millis(100);
/// Shortest time between two lines when stderr is a log file: enough to show a run is alive
/// without burying the log.
const PLAIN_INTERVAL: Duration = Duration::from_secs(5);
/// Characters between the brackets of the bar.
const BAR_WIDTH_CHARS: u64 = 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Nothing is written (machine-readable output on stdout, or tests).
    Hidden,
    /// One line, redrawn in place with a carriage return.
    Redraw,
    /// A new line at most every [`PLAIN_INTERVAL`] and one at the end.
    Plain,
}

/// A progress bar on stderr for long runs: `[=====>    ] 45% 4,500/10,000 redis-wait 64 B  eta 3s`.
///
/// On a terminal it redraws one line (`\r`) at most ~10 times a second; when stderr is not a
/// terminal (or `TERM` is `dumb`) it prints a plain line at most every 5 seconds and at the end,
/// so CI logs stay short. Write errors are ignored: a closed stderr must not stop a benchmark.
/// A total of zero means the total is unknown: counts and elapsed time are shown, with no bar.
pub struct Progress {
    label: String,
    total: u64,
    done: u64,
    started_at: Instant,
    drawn_at: Option<Instant>,
    mode: Mode,
    out: Box<dyn Write + Send>,
    finished: bool,
}

impl Progress {
    /// A progress bar for `total` steps, labelled with what is running, drawn on stderr.
    pub fn new(label: &str, total: u64) -> Progress {
        let stderr = io::stderr();
        let dumb_terminal = std::env::var_os("TERM").is_some_and(|term| term == "dumb");
        let mode = if stderr.is_terminal() && !dumb_terminal { Mode::Redraw } else { Mode::Plain };
        Progress::with_output(label, total, mode, Box::new(stderr), Instant::now())
    }

    /// A progress bar that prints nothing, for runs whose output is read by a program (`--json`):
    /// the benchmark's code stays the same either way.
    pub fn hidden() -> Progress {
        Progress::with_output("", 0, Mode::Hidden, Box::new(io::sink()), Instant::now())
    }

    fn with_output(
        label: &str,
        total: u64,
        mode: Mode,
        out: Box<dyn Write + Send>,
        now: Instant,
    ) -> Progress {
        let mut progress = Progress {
            label: label.to_string(),
            total,
            done: 0,
            started_at: now,
            drawn_at: None,
            mode,
            out,
            finished: false,
        };
        // On a terminal the bar shows at once, so the person sees the run has started.
        if mode == Mode::Redraw {
            progress.draw(now, false);
        }
        progress
    }

    /// Records that `done` of the total steps are complete, and redraws if it is time to.
    pub fn set(&mut self, done: u64) {
        self.set_at(done, Instant::now());
    }

    /// Records `steps` more completed steps.
    pub fn inc(&mut self, steps: u64) {
        self.set_at(self.done.saturating_add(steps), Instant::now());
    }

    /// Changes what the bar says is running, such as the next payload size.
    pub fn set_label(&mut self, label: &str) {
        self.label = label.to_string();
        self.draw_if_due(Instant::now());
    }

    /// How many steps are complete.
    pub fn done(&self) -> u64 {
        self.done
    }

    /// Draws the final state, with the time the run took, and ends the line.
    pub fn finish(mut self) {
        self.finish_at(Instant::now());
    }

    fn set_at(&mut self, done: u64, now: Instant) {
        self.done = done;
        self.draw_if_due(now);
    }

    fn finish_at(&mut self, now: Instant) {
        if self.mode != Mode::Hidden {
            self.draw(now, true);
        }
        self.finished = true;
    }

    fn draw_if_due(&mut self, now: Instant) {
        let interval = match self.mode {
            Mode::Hidden => return,
            Mode::Redraw => REDRAW_INTERVAL,
            Mode::Plain => PLAIN_INTERVAL,
        };
        let since = self.drawn_at.unwrap_or(self.started_at);
        let first_redraw = self.mode == Mode::Redraw && self.drawn_at.is_none();
        if first_redraw || now.saturating_duration_since(since) >= interval {
            self.draw(now, false);
        }
    }

    fn draw(&mut self, now: Instant, last: bool) {
        let line = self.line(now, last);
        let text = match self.mode {
            Mode::Hidden => return,
            // Clear to the end of the line, since a shorter line leaves the old one's tail.
            Mode::Redraw => format!("\r{line}\x1b[K{}", if last { "\n" } else { "" }),
            Mode::Plain => format!("{line}\n"),
        };
        // Ignored on purpose: progress is a courtesy, and a closed or full stderr must not end
        // the run whose results are the point.
        let _ = self.out.write_all(text.as_bytes());
        let _ = self.out.flush();
        self.drawn_at = Some(now);
    }

    /// The text of the progress line at `now`; `last` gives the total time instead of an ETA.
    fn line(&self, now: Instant, last: bool) -> String {
        let elapsed = now.saturating_duration_since(self.started_at);
        let mut line = String::new();
        if self.total > 0 {
            let done_clamped = u128::from(self.done.min(self.total));
            let total = u128::from(self.total);
            let percent = done_clamped * 100 / total;
            if self.mode == Mode::Redraw {
                let filled = (done_clamped * u128::from(BAR_WIDTH_CHARS) / total) as usize;
                let width = BAR_WIDTH_CHARS as usize;
                let head = if filled < width { ">" } else { "" };
                let blank = width - filled - head.len();
                line.push_str(&format!("[{}{head}{}] ", "=".repeat(filled), " ".repeat(blank)));
            }
            // Padded on a terminal so the counts do not shift as the percentage grows.
            let percent_width = if self.mode == Mode::Redraw { 3 } else { 0 };
            line.push_str(&format!(
                "{percent:>percent_width$}% {}/{}",
                group_thousands(self.done),
                group_thousands(self.total)
            ));
        } else {
            line.push_str(&group_thousands(self.done));
        }
        if !self.label.is_empty() {
            line.push(' ');
            line.push_str(&self.label);
        }
        if last {
            line.push_str(&format!("  took {}", format_duration(elapsed)));
        } else if self.total > 0 && self.done > 0 && self.done < self.total {
            let remaining = u128::from(self.total - self.done);
            let eta_nanos = elapsed.as_nanos() * remaining / u128::from(self.done);
            let eta = Duration::from_nanos(u64::try_from(eta_nanos).unwrap_or(u64::MAX));
            line.push_str(&format!("  eta {}", format_duration(eta)));
        } else if self.total == 0 {
            line.push_str(&format!("  {}", format_duration(elapsed)));
        }
        line
    }
}

impl Drop for Progress {
    /// A bar dropped without [`Progress::finish`] (the run failed part way) still ends its line,
    /// so the error that follows is not written over it.
    fn drop(&mut self) {
        if !self.finished && self.mode == Mode::Redraw && self.drawn_at.is_some() {
            let _ = self.out.write_all(b"\n");
            let _ = self.out.flush();
        }
    }
}

/// A duration for a person: tenths of a second while short, then whole seconds, minutes and
/// seconds, or hours and minutes.
fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds < 10 {
        format!("{:.1}s", duration.as_secs_f64())
    } else if seconds < 60 {
        format!("{seconds}s")
    } else if seconds < 3600 {
        format!("{}m{:02}s", seconds / 60, seconds % 60)
    } else {
        format!("{}h{:02}m", seconds / 3600, seconds % 3600 / 60)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{self, Write};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use super::{format_duration, Mode, Progress};

    /// Collects what a progress bar writes, shared with the test that reads it.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().map_err(|_| io::Error::other("poisoned"))?.extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("lock").clone()).expect("utf-8")
        }
    }

    #[test]
    fn terminal_line_matches_the_documented_shape() {
        let captured = Captured::default();
        let start = Instant::now();
        let mut progress = Progress::with_output(
            "redis-wait 64 B",
            10_000,
            Mode::Redraw,
            Box::new(captured.clone()),
            start,
        );
        progress.set_at(4_500, start + Duration::from_secs(3));
        let text = captured.text();
        let last = text.rsplit('\r').next().expect("a line");
        assert_eq!(
            last,
            "[=============>                ]  45% 4,500/10,000 redis-wait 64 B  eta 3.7s\x1b[K"
        );
        progress.finish_at(start + Duration::from_secs(12));
        assert!(captured.text().ends_with("took 12s\x1b[K\n"), "{:?}", captured.text());
    }

    #[test]
    fn terminal_redraws_at_most_ten_times_a_second() {
        let captured = Captured::default();
        let start = Instant::now();
        let mut progress =
            Progress::with_output("run", 1_000, Mode::Redraw, Box::new(captured.clone()), start);
        for step in 0..1_000 {
            // 1,000 updates over one second.
            progress.set_at(step, start + Duration::from_millis(step));
        }
        let draws = captured.text().matches('\r').count();
        assert!((10..=12).contains(&draws), "{draws} draws");
    }

    #[test]
    fn plain_output_is_a_line_every_five_seconds_and_one_at_the_end() {
        let captured = Captured::default();
        let start = Instant::now();
        let mut progress =
            Progress::with_output("run", 600, Mode::Plain, Box::new(captured.clone()), start);
        for second in 0..60 {
            progress.set_at(second * 10, start + Duration::from_secs(second));
        }
        progress.finish_at(start + Duration::from_secs(60));
        let text = captured.text();
        assert!(!text.contains('\r') && !text.contains('\x1b'), "{text:?}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 60 / 5 - 1 + 1, "{lines:#?}");
        assert_eq!(lines[0], "8% 50/600 run  eta 55s");
        assert_eq!(lines[lines.len() - 1], "98% 590/600 run  took 1m00s");
    }

    #[test]
    fn hidden_prints_nothing_and_odd_totals_do_not_panic() {
        let mut hidden = Progress::hidden();
        hidden.set(5);
        hidden.set_label("x");
        hidden.finish();

        let captured = Captured::default();
        let start = Instant::now();
        let mut unknown_total =
            Progress::with_output("scan", 0, Mode::Plain, Box::new(captured.clone()), start);
        unknown_total.set_at(12_345, start + Duration::from_secs(6));
        assert_eq!(captured.text(), "12,345 scan  6.0s\n");

        let mut overshoot =
            Progress::with_output("x", 10, Mode::Redraw, Box::new(io::sink()), start);
        overshoot.set_at(u64::MAX, start + Duration::from_secs(1));
        overshoot.inc(u64::MAX);
        assert!(overshoot.line(start + Duration::from_secs(1), false).contains("100%"));
    }

    #[test]
    fn dropping_an_unfinished_bar_ends_its_line() {
        let captured = Captured::default();
        let progress = Progress::with_output(
            "x",
            10,
            Mode::Redraw,
            Box::new(captured.clone()),
            Instant::now(),
        );
        drop(progress);
        assert!(captured.text().ends_with('\n'));
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(Duration::from_millis(3_250)), "3.2s");
        assert_eq!(format_duration(Duration::from_secs(42)), "42s");
        assert_eq!(format_duration(Duration::from_secs(125)), "2m05s");
        assert_eq!(format_duration(Duration::from_secs(7_380)), "2h03m");
    }
}
