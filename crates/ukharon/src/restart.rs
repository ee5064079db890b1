//! A coordinator restarted without its memory (a host reboot, or a fresh run directory for that
//! node): its slot words and value logs are zero again. Not in the uKharon paper, which keeps
//! the acceptors' memory.
//!
//! An acceptor that forgot what it promised and accepted must not answer for an index it may
//! have answered for before: a view decided with its help could be decided again, differently,
//! by a majority it now forms with a coordinator that never saw that view; and a promise it
//! forgot lets a lower proposal through that the promise kept out. So a restarted coordinator
//! abstains ([`mu_velos::View::Abstains`]) in every index it may have taken part in, and
//! answers only in later ones, whose fresh state is the truth. Velos's replicas learn which
//! indices from a rejoin entry decided in their log (`mu_velos::recovery`); here index `k`
//! holds view `k` and nothing else, so the bound is read from the other coordinators' slot
//! words instead, which is sound because every index has the same acceptors (all the
//! coordinators; the read rule of `spec/tla/VelosRestart.tla`, "abstain" with a fixed
//! configuration, rests on the same intersection).
//!
//! **The rule.** Until it has its new words, the restarted coordinator lets nobody into its
//! memory (the runtime keeps every connection into it closed: proposers count it as
//! unreachable, and a node's non-leased check gets no answer from it). It reads all the slot
//! words of `n - n/2` other coordinators ([`words_needed`]), after its restart. Let `top` be the
//! newest index those words name (a word of lap `l` in slot `s` names index `l * slots_count +
//! s`; zero words name none), or `-1` if none names one. It abstains in every index below
//! `b = top + 2 + prepare_ahead` ([`fresh_from`]), one abstaining word per slot ([`markers`]),
//! and answers from `b` on. Then it opens its connections.
//!
//! **Why `b` is past every index it took part in.** Let `d` be the newest index decided before
//! the restart (`-1` if none).
//!
//! * `d <= top`: a majority `M` accepted `d`. `M` less the restarted coordinator has at least
//!   `n/2` members, the coordinators read are `n - n/2` of the `n - 1` others, so the two meet
//!   in some `x`. `x` accepted `d` before the reads, and a word only moves to later laps (a
//!   prepare or accept of a later lap), so `x`'s word in `d`'s slot names `d` or a later index.
//!   If `x` itself restarted meanwhile, its markers abstain up to a lap at or past `d`'s (this
//!   rule, applied to `x`), and that marker names `d` or later.
//! * It took part in index `i` (a CAS of a proposer on its word succeeded) only if `i <= d + 1 +
//!   prepare_ahead`: a proposer works on indices `next` to `next + prepare_ahead` only, where
//!   every index below `next` is decided (it starts from the view after the latest decided one
//!   it knows, and moves on once its index is decided), and the CAS was posted before the
//!   restart, when `d` bounded what was decided.
//!
//! So every index it took part in is below `b`. Operations posted to its earlier incarnation
//! never land in the new one (the fabric binds a connection to one incarnation); one that did
//! would fail anyway, as no proposer predicts an abstaining word.
//!
//! From `b` on its words are fresh, and the others' words were never touched by it: Paxos as
//! if it had just joined. Below `b`, proposers ask it nothing and decide with the others, whose
//! majority meets every earlier majority outside it. Each word must be read whole (an aligned
//! 8-byte read); the array need not be one snapshot, as each word only moves forward.
//!
//! **The cost, and closing it.** It helps decide nothing in the three or four indices after
//! the newest one when it read, and views are decided only when something changes: an idle
//! cluster could stay there for hours, tolerating no further coordinator failure (with three).
//! So its runtime tells the others `b` ([`crate::coordinator::Coordinator::set_answers_from`]),
//! and a leader with nothing to change decides views that change nothing (compatible
//! successors, which nodes move their leases to without waiting) until it is past `b`. If fewer
//! than `n - n/2` others can be read, it waits (for odd `n` the others could not decide without
//! it then either).
//!
//! **One at a time.** A second coordinator restarted without its memory while the cluster is
//! still below the first one's `b` abstains there too: with three coordinators no majority is
//! left at that index, and nothing is decided again. That is not this rule's weakness: two of
//! three that forgot an index decided with them leave no one who knows it. An operator restarts
//! another coordinator without its memory only once the first one's `describe()` no longer says
//! it abstains past the latest view (the leader takes microseconds to get past it).
//!
//! **Assumptions.** Every coordinator prepares at most `prepare_ahead` indices ahead (the
//! runtime gives them all the same). Laps count modulo [`mu_velos::word::LAPS`]: the words read
//! must lie within half that many laps of each other, as the proposer already needs; indices
//! here are taken modulo `slots_count * LAPS` for that reason. The rule is argued here, not
//! model-checked: `spec/tla/VelosRestart.tla` checks the per-slot read rule it refines (one lap
//! past each slot's newest lap), not this index bound, which rests on the one-index window.

use mu_velos::recovery;
use mu_velos::word::{lap_of, SlotWord, LAPS};
use thiserror::Error;

/// Whether a coordinator starts with the memory its earlier run left (the regions survived: a
/// process restart on the same host with the same run directory, or a first start) or without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Its consensus region holds what its earlier runs wrote, or it never ran: zero words are
    /// the truth.
    Remembered,
    /// Its consensus region was lost: it rejoins by the rule of the module docs.
    Forgotten,
}

/// Why a rejoin could not be carried out.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RejoinError {
    #[error("this coordinator did not restart without its memory, or rejoined already")]
    NotRejoining,
    #[error("the words of {got} other coordinators, {needed} needed")]
    TooFew { got: usize, needed: usize },
    #[error("coordinator {position} given twice, or it is this one or out of {count}")]
    BadPosition { position: usize, count: usize },
    #[error("{got} slot words from coordinator {position}, {expected} expected")]
    WrongLength { position: usize, got: usize, expected: u64 },
}

/// How many other coordinators' words a restarted one reads, of `coordinators` in all.
pub fn words_needed(coordinators: usize) -> usize {
    coordinators - coordinators / 2
}

/// Indices are compared modulo this (module docs, assumptions).
fn period(slots_count: u64) -> u64 {
    slots_count * LAPS
}

/// The index a non-zero word of slot `slot` names (modulo [`period`]).
fn named(word: u64, slot: u64, slots_count: u64) -> Option<u64> {
    (word != 0).then(|| u64::from(SlotWord::unpack(word).lap) * slots_count + slot)
}

/// Whether `a` is after `b` modulo `p` (both within half of `p` of each other).
fn after(a: u64, b: u64, p: u64) -> bool {
    let ahead = (a + p - b) % p;
    ahead != 0 && ahead < p / 2
}

/// The first index a restarted coordinator answers in, modulo `slots_count * LAPS`, from the
/// slot words (indexed by slot) of the other coordinators it read (module docs).
pub fn fresh_from<'a>(
    words: impl IntoIterator<Item = &'a [u64]>,
    slots_count: u64,
    prepare_ahead: usize,
) -> u64 {
    let p = period(slots_count);
    let mut top: Option<u64> = None;
    for peer in words {
        for (slot, &word) in peer.iter().enumerate() {
            if let Some(index) = named(word, slot as u64, slots_count) {
                if top.is_none_or(|t| after(index, t, p)) {
                    top = Some(index);
                }
            }
        }
    }
    let past_top = 2 + prepare_ahead as u64;
    // None: nothing was decided, and an index was touched only up to `prepare_ahead`.
    top.map_or(past_top - 1, |t| (t + past_top) % p)
}

/// The words a coordinator that answers from index `fresh` (modulo `slots_count * LAPS`)
/// starts with, slot by slot: each abstains up to the lap of the slot's last index below
/// `fresh`, and is fresh after it.
pub fn markers(fresh: u64, slots_count: u64) -> impl Iterator<Item = u64> {
    let p = period(slots_count);
    recovery::markers((fresh + p - slots_count) % p, slots_count)
}

/// Whether index `index` (absolute) comes before `fresh` (modulo `slots_count * LAPS`, as
/// [`fresh_from`] gives it): a coordinator that answers from `fresh` still abstains there.
pub fn is_before(index: u64, fresh: u64, slots_count: u64) -> bool {
    let p = period(slots_count);
    after(fresh % p, index % p, p)
}

/// Whether the word `word` abstains for index `index`.
pub fn abstains(word: u64, index: u64, slots_count: u64) -> bool {
    SlotWord::unpack(word).view(lap_of(index, slots_count)) == mu_velos::View::Abstains
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(lap: u16, accepted: u32) -> u64 {
        SlotWord { min: accepted.max(1), accepted, lap, prev_decided: false }.pack()
    }

    #[test]
    fn abstains_below_the_bound_and_answers_from_it() {
        for slots in [4u64, 8, 16] {
            for fresh in [1, 2, 3, 5, 8, 17, 100, slots * LAPS - 1, slots * LAPS + 3] {
                let fresh = fresh % period(slots);
                let m: Vec<u64> = markers(fresh, slots).collect();
                for back in 1..=(3 * slots).min(fresh) {
                    let index = fresh - back;
                    let w = m[(index % slots) as usize];
                    assert!(abstains(w, index, slots), "slots {slots} fresh {fresh} index {index}");
                }
                for index in fresh..fresh + 3 * slots {
                    let w = m[(index % slots) as usize];
                    assert!(
                        !abstains(w, index, slots),
                        "slots {slots} fresh {fresh} index {index}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_bound_is_past_the_newest_word_read() {
        let slots = 8;
        // Index 13 accepted (lap 1, slot 5), 14 prepared ahead: newest named is 14.
        let mut a = vec![word(1, 3); 6];
        a.extend([word(0, 3), word(0, 3)]);
        a[6] = word(1, 0);
        let b = [0u64; 8];
        assert_eq!(fresh_from([&a[..], &b[..]], slots, 1), 14 + 3);
        // Nothing touched anywhere: only indices up to prepare_ahead were.
        assert_eq!(fresh_from([&b[..], &b[..]], slots, 1), 2);
        // Across the wrap of laps: lap LAPS-1 is older than lap 0.
        let old = [word((LAPS - 1) as u16, 3); 8];
        let new = [word(0, 3); 8];
        assert_eq!(fresh_from([&old[..], &new[..]], slots, 1), 7 + 3);
    }

    #[test]
    fn indices_before_the_bound_across_the_wrap() {
        let slots = 4;
        assert!(is_before(5, 7, slots));
        assert!(!is_before(7, 7, slots));
        assert!(!is_before(9, 7, slots));
        let p = period(slots);
        assert!(is_before(p - 1, 2, slots));
        assert!(is_before(3 * p + 1, 2, slots));
        assert!(!is_before(3 * p + 2, 2, slots));
    }

    #[test]
    fn words_needed_meet_every_majority_outside_the_restarted_one() {
        for n in 1..=9 {
            let others_in_majority = (n / 2 + 1) - 1;
            assert!(words_needed(n) + others_in_majority > n - 1, "n={n}");
            assert!(words_needed(n) < n || n == 1, "n={n}");
        }
    }
}
