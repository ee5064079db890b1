//! Permission requests sent ahead (Mu only). When the election picks this replica because the
//! leader it followed is known crashed (the fabric's crash notice), its background plane sends
//! the new leadership's first round of permission requests at once,
//! and the replication plane takes that request word for the round its engine then starts.
//! Without it, a failover waits for two thread hand-offs more before the requests leave: the
//! replication plane hearing of the election, then the background plane hearing of its
//! requests (each a wake-up, 50–250 µs on shared cores). Not after an election that follows a
//! mere suspicion: it may be undone a moment later, and requests sent at each such election
//! take the logs from a leader that is still there (`BackgroundDriver::succeeds_a_crash`).
//!
//! What keeps it safe: the background plane asks only the replicas the engine says may be
//! asked before it leads ([`mu_replication::Leader::askable_ahead`]: none of our writes can
//! still land there), and only while the replication plane has armed it. The replication plane
//! disarms it, under the same lock, before its engine takes up a leadership and posts
//! anything: so a request sent ahead always precedes every write of the leadership that uses
//! its grants, and a fence precedes any request to a replica we wrote to before. A grant is
//! only ever as good as the permission it names: a replica that gave its log to someone else
//! since refuses our writes, as for any grant.

use mu_replication::{request_word, REQUEST_SEQ_MAX};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Shared by the two planes of one replica.
pub(crate) struct AskAhead {
    /// Whether this replica's engine asks for permission at all (Mu; Velos does not).
    enabled: bool,
    state: Mutex<State>,
    /// The sequence number of the last request word, either plane's.
    seq: AtomicU32,
    boot_id: u32,
}

#[derive(Default)]
struct State {
    /// The positions that may be asked ahead, 0 while disarmed (replication plane).
    askable: u64,
    /// The request word sent ahead for the election under way, 0 for none (background plane
    /// sets it, replication plane takes it).
    word: u64,
}

impl AskAhead {
    pub fn new(boot_id: u32, enabled: bool) -> AskAhead {
        AskAhead { enabled, state: Mutex::default(), seq: AtomicU32::new(0), boot_id }
    }

    /// A request word never used before in this run (sequence numbers wrap past
    /// [`REQUEST_SEQ_MAX`], far beyond any request still in doubt).
    pub fn next_word(&self) -> u64 {
        let bump = |seq: u32| Some(seq % REQUEST_SEQ_MAX + 1);
        let previous = self.seq.fetch_update(Ordering::Relaxed, Ordering::Relaxed, bump);
        let seq = bump(previous.unwrap_or_else(|seq| seq)).unwrap_or(1);
        request_word(self.boot_id, seq)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing is left half-done under the lock: a panic elsewhere cannot break it.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replication plane, while its engine follows: the positions that may be asked ahead
    /// (from [`mu_replication::Leader::askable_ahead`]).
    pub fn arm(&self, askable: u64) {
        self.lock().askable = askable;
    }

    /// Replication plane, before its engine takes up a leadership: disarms, and returns the
    /// word sent ahead for this election (0 for none), for the engine's first round.
    pub fn take(&self) -> u64 {
        let mut state = self.lock();
        state.askable = 0;
        std::mem::take(&mut state.word)
    }

    /// Background plane, when its election changed: a word sent for an earlier election is
    /// dropped; if this replica is now elected and the replication plane armed it, `send`
    /// sends a fresh word to the positions it is given (under the lock, so that the
    /// replication plane cannot start leading meanwhile). Returns whether anything was sent.
    pub fn on_election(&self, elected: bool, send: impl FnOnce(u64, u64)) -> bool {
        if !self.enabled {
            return false;
        }
        let mut state = self.lock();
        state.word = 0;
        if !elected || state.askable == 0 {
            return false;
        }
        let word = self.next_word();
        send(state.askable, word);
        state.word = word;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mu_replication::split_request;

    #[test]
    fn words_are_fresh_and_carry_the_boot() {
        let ahead = AskAhead::new(7, true);
        let (a, b) = (ahead.next_word(), ahead.next_word());
        assert_ne!(a, b);
        assert_eq!(split_request(a), (7, 1));
        assert_eq!(split_request(b), (7, 2));
    }

    #[test]
    fn sends_only_when_armed_and_elected() {
        let ahead = AskAhead::new(1, true);
        let mut sent = Vec::new();
        assert!(!ahead.on_election(true, |mask, word| sent.push((mask, word))));
        ahead.arm(0b101);
        assert!(!ahead.on_election(false, |mask, word| sent.push((mask, word))));
        assert!(sent.is_empty());
        assert!(ahead.on_election(true, |mask, word| sent.push((mask, word))));
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].0, 0b101);
        assert_eq!(ahead.take(), sent[0].1, "the engine's round uses the word sent");
        assert_eq!(ahead.take(), 0, "taken once");
        assert!(!ahead.on_election(true, |_, _| panic!("disarmed: nothing is sent")));
    }

    #[test]
    fn a_later_election_drops_the_earlier_word() {
        let ahead = AskAhead::new(1, true);
        ahead.arm(0b11);
        assert!(ahead.on_election(true, |_, _| {}));
        assert!(!ahead.on_election(false, |_, _| {}));
        assert_eq!(ahead.take(), 0, "a word of an election since lost is not used");
    }

    #[test]
    fn velos_never_sends() {
        let ahead = AskAhead::new(1, false);
        ahead.arm(0b11);
        assert!(!ahead.on_election(true, |_, _| panic!("Velos asks for no permission")));
    }
}
