//! The operations every peer runs: which key and value operation `i` writes, and the loop that
//! runs warmup and measured operations and reports progress.

use std::time::Duration;

use crate::{Options, PeerError};

/// Keys cycle over this many names: consecutive writes go to different keys, and the peer's data
/// stays small however many samples are taken.
pub(crate) const KEYS_COUNT: u64 = 1000;

/// `progress` is called after this many measured operations (and once at the end).
const PROGRESS_INTERVAL_SAMPLES: u64 = 256;

/// The key operation `index` writes.
pub(crate) fn key(index: u64) -> String {
    format!("mu-peers-{:04}", index % KEYS_COUNT)
}

/// The value operation `index` writes: `payload_bytes` printable bytes that start with the
/// operation's index, so that the final check tells the last write from an earlier one to the
/// same key.
pub(crate) fn value(index: u64, payload_bytes: usize) -> Vec<u8> {
    let mut value = format!("{index:020}").into_bytes();
    value.resize(payload_bytes, b'v');
    value
}

/// The index of the last operation a run performs.
pub(crate) fn last_index(opts: &Options) -> u64 {
    assert!(opts.samples > 0);
    opts.warmup.saturating_add(opts.samples - 1)
}

/// Runs `opts.warmup` operations, then `opts.samples` measured ones, and returns the measured
/// latencies. `operation(i)` performs operation `i` and returns how long the client waited.
pub(crate) fn run(
    opts: &Options,
    progress: &mut dyn FnMut(u64),
    mut operation: impl FnMut(u64) -> Result<Duration, PeerError>,
) -> Result<Vec<u64>, PeerError> {
    for index in 0..opts.warmup {
        operation(index)?;
    }
    let mut latencies_ns = Vec::with_capacity(usize::try_from(opts.samples).unwrap_or(0));
    for sample in 0..opts.samples {
        let latency = operation(opts.warmup.saturating_add(sample))?;
        latencies_ns.push(duration_ns(latency));
        let done = sample + 1;
        if done % PROGRESS_INTERVAL_SAMPLES == 0 || done == opts.samples {
            progress(done);
        }
    }
    Ok(latencies_ns)
}

/// A duration in nanoseconds, saturating (a sample of 584 years is not a concern).
pub(crate) fn duration_ns(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_tell_writes_apart_and_have_the_asked_size() {
        assert_eq!(value(7, 64).len(), 64);
        assert_eq!(value(7, 3).len(), 3);
        assert!(value(7, 0).is_empty());
        assert_ne!(value(7, 64), value(7 + KEYS_COUNT, 64));
        assert_eq!(key(7), key(7 + KEYS_COUNT));
        assert_ne!(key(7), key(8));
    }

    #[test]
    fn run_records_only_measured_operations() {
        let opts = Options { payload_bytes: 8, samples: 600, warmup: 5 };
        let mut seen = Vec::new();
        let mut reports = Vec::new();
        let latencies = run(&opts, &mut |done| reports.push(done), |index| {
            seen.push(index);
            Ok(Duration::from_nanos(index + 1))
        })
        .unwrap();
        assert_eq!(latencies.len(), 600);
        assert_eq!(latencies[0], 6);
        assert_eq!(seen.len(), 605);
        assert_eq!(*seen.last().unwrap(), last_index(&opts));
        assert_eq!(reports, vec![256, 512, 600]);
    }
}
