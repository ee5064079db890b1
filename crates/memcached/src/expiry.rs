//! The replicated expiry table: every key with an expiry, derived only from the log. The
//! servers are never told an expiry (they store every item with exptime 0), so no server expires
//! anything by its own clock; the state machine deletes a key once an entry's time reaches its
//! expiry (`docs/apps/memcached.md`, "Expiry").

use std::collections::{BTreeSet, HashMap};

/// Exptimes above this many seconds are Unix times, as memcached reads them (30 days).
const RELATIVE_EXPTIME_MAX_S: i64 = 60 * 60 * 24 * 30;

/// When an item stored with `exptime` at `now_ms` expires, in ms since the Unix epoch: `None`
/// for never (0); an expiry at or before `now_ms` for an item dead on arrival (negative, or a
/// Unix time in the past).
pub fn expiry_ms(exptime: i64, now_ms: u64) -> Option<u64> {
    match exptime {
        0 => None,
        e if e < 0 => Some(now_ms),
        e if e <= RELATIVE_EXPTIME_MAX_S => Some(now_ms + e as u64 * 1000),
        e => Some((e as u64).saturating_mul(1000)),
    }
}

/// Keys and their expiries, ordered both ways.
#[derive(Default, Debug)]
pub struct Expiries {
    by_key: HashMap<Vec<u8>, u64>,
    by_time: BTreeSet<(u64, Vec<u8>)>,
}

impl Expiries {
    /// Sets (`Some`) or clears (`None`) `key`'s expiry.
    pub fn set(&mut self, key: &[u8], expiry_ms: Option<u64>) {
        if let Some(old) = self.by_key.remove(key) {
            let removed = self.by_time.remove(&(old, key.to_vec()));
            assert!(removed, "the two orders hold the same keys");
        }
        if let Some(at) = expiry_ms {
            self.by_key.insert(key.to_vec(), at);
            self.by_time.insert((at, key.to_vec()));
        }
        assert_eq!(self.by_key.len(), self.by_time.len());
    }

    pub fn get(&self, key: &[u8]) -> Option<u64> {
        self.by_key.get(key).copied()
    }

    /// Removes and returns the keys whose expiry is at or before `now_ms`.
    pub fn take_due(&mut self, now_ms: u64) -> Vec<Vec<u8>> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.by_time.first() {
            if *at > now_ms {
                break;
            }
            let (_, key) = self.by_time.pop_first().expect("a first");
            self.by_key.remove(&key);
            due.push(key);
        }
        due
    }

    pub fn clear(&mut self) {
        self.by_key.clear();
        self.by_time.clear();
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Every key with its expiry, in key order (for comparing replicas).
    pub fn sorted(&self) -> Vec<(Vec<u8>, u64)> {
        let mut all: Vec<_> = self.by_key.iter().map(|(k, &v)| (k.clone(), v)).collect();
        all.sort();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exptimes_read_as_memcached_reads_them() {
        assert_eq!(expiry_ms(0, 5_000), None);
        assert_eq!(expiry_ms(-1, 5_000), Some(5_000));
        assert_eq!(expiry_ms(10, 5_000), Some(15_000));
        assert_eq!(
            expiry_ms(RELATIVE_EXPTIME_MAX_S, 0),
            Some(RELATIVE_EXPTIME_MAX_S as u64 * 1000)
        );
        let unix_s = 1_800_000_000;
        assert_eq!(expiry_ms(unix_s, 5_000), Some(unix_s as u64 * 1000));
    }

    #[test]
    fn due_keys_leave_in_time_order() {
        let mut e = Expiries::default();
        e.set(b"a", Some(30));
        e.set(b"b", Some(10));
        e.set(b"c", Some(20));
        e.set(b"c", None);
        e.set(b"a", Some(15));
        assert_eq!(e.take_due(16), vec![b"b".to_vec(), b"a".to_vec()]);
        assert!(e.is_empty());
    }
}
