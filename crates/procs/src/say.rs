//! Lines for a person on stderr that never stop the command.
//!
//! `note!` panics when stderr is closed or full (`2>&-`, `2>/dev/full`, a terminal that went
//! away), and a panic there stopped a benchmark, a sweep or the demo in the middle, with the
//! status of a crash (101), although what they print on stderr is only progress and commentary:
//! their results go to stdout. These macros write the same text and drop a failed write, as the
//! progress bar (`mu_figures::Progress`) already does. stdout keeps `println!`: losing a result
//! must stop the command (`quiet_stdout_failures` in `main.rs` says so in one line).

/// Writes a line on stderr, as `eprintln!` does, and drops a failed write.
#[macro_export]
macro_rules! note {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr());
    }};
    ($($arg:tt)+) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)+);
    }};
}

/// Writes text on stderr without ending the line, as `eprint!` does, flushes it so that a
/// line drawn in pieces shows at once, and drops a failed write.
#[macro_export]
macro_rules! note_part {
    ($($arg:tt)+) => {{
        use std::io::Write as _;
        let mut stderr = std::io::stderr();
        let _ = write!(stderr, $($arg)+);
        let _ = stderr.flush();
    }};
}
