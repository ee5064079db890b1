//! Taking back an acceptor that restarted without its memory (not in the Velos paper, which
//! leaves restarts out; `docs/protocols/velos.md`, "Restarting a replica").
//!
//! An acceptor that forgot what it promised and accepted must not answer for a log index it
//! may have answered for before: a value decided with its help could be decided again,
//! differently, by a majority it now forms with acceptors that never saw that value. So a
//! restarted acceptor abstains ([`crate::View::Abstains`]) in every index it may have taken
//! part in, and takes part only in later ones, whose fresh state is the truth.
//!
//! **Which indices.** A proposer touches index `i` only once index `i - slots_count` is
//! decided (it prepares `i` only below its applied floor plus `slots_count`, and accepts only
//! what it prepared), so before the crash index `i - slots_count` was accepted by a majority
//! `Q`. The restarting acceptor reads the slot words of a set `M` of `n - n/2` of the *other*
//! acceptors (enough that every majority meets it), after its crash. `M` and `Q` share an
//! acceptor `m`, and `m`'s word for that slot has never gone back in laps, so it still shows
//! at least the lap of `i - slots_count`:
//!
//! * a word of lap `l` that accepted something: it accepted in lap `l`, so it certifies `l`;
//! * a word of lap `l` with nothing accepted: accepted is kept within a lap, so `m` accepted
//!   in no lap above `l - 1`: it certifies `l - 1` (the zero word of an untouched slot
//!   certifies lap -1);
//! * an abstaining word of lap `l` (`m` restarted too and has not reached that slot again):
//!   `m` took part in the slot before its own crash only up to lap `l`, by this same rule,
//!   so it certifies `l`.
//!
//! So for each slot, the lap of any index the restarted acceptor may have taken part in is at
//! most the newest lap certified there plus one: it abstains up to that lap, and is fresh for
//! the laps after ([`Abstention::markers`]). Acceptors that are themselves still restarting
//! cannot be in `M`: their slot words are not yet those markers, and they do not let anyone
//! read them until they are.
//!
//! The price: a restarted acceptor helps decide nothing for up to one lap of the log from the
//! moment it reads (`slots_count` entries), and the others must form majorities without it
//! meanwhile, as while it was down.

use crate::word::{SlotWord, LAPS};

/// The newest lap certified for each slot by the acceptors folded in so far.
#[derive(Clone, Debug)]
pub struct Abstention {
    /// Per slot: the newest certified lap, `None` while no acceptor folded in certifies one
    /// (treated as lap -1).
    newest: Vec<Option<u16>>,
    acceptors: usize,
}

/// Whether lap `a` comes after lap `b` (laps count modulo [`LAPS`]; the words of one slot are
/// never half the laps apart).
fn after(a: u16, b: u16) -> bool {
    let ahead = (u64::from(a) + LAPS - u64::from(b)) % LAPS;
    ahead != 0 && ahead < LAPS / 2
}

fn previous(lap: u16) -> Option<u16> {
    lap.checked_sub(1).or(Some((LAPS - 1) as u16))
}

/// The lap a word certifies its acceptor accepted no later than (see the module docs); `None`
/// for the zero word of a slot never used.
fn certified(word: u64) -> Option<u16> {
    let s = SlotWord::unpack(word);
    if s.is_abstaining() || s.accepted != 0 {
        Some(s.lap)
    } else if word == 0 {
        None
    } else {
        previous(s.lap)
    }
}

impl Abstention {
    pub fn new(slots_count: u64) -> Abstention {
        Abstention { newest: vec![None; slots_count as usize], acceptors: 0 }
    }

    /// Folds in the slot words of one other acceptor (`words[k]` is its word for slot `k`), as
    /// read after this acceptor restarted.
    pub fn fold(&mut self, words: impl IntoIterator<Item = u64>) {
        let mut slots = 0;
        for (newest, word) in self.newest.iter_mut().zip(words) {
            slots += 1;
            if let Some(lap) = certified(word) {
                if newest.is_none_or(|n| after(lap, n)) {
                    *newest = Some(lap);
                }
            }
        }
        assert_eq!(slots, self.newest.len(), "one word per slot");
        self.acceptors += 1;
    }

    /// How many acceptors were folded in.
    pub fn acceptors(&self) -> usize {
        self.acceptors
    }

    /// The word the restarted acceptor starts with in each slot: abstaining up to one lap after
    /// the newest certified one.
    pub fn markers(&self) -> impl Iterator<Item = u64> + '_ {
        self.newest.iter().map(|newest| {
            let last = match newest {
                Some(lap) => ((u64::from(*lap) + 1) % LAPS) as u16,
                None => 0,
            };
            SlotWord::abstaining(last)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::word::View;

    fn word(min: u32, accepted: u32, lap: u16) -> u64 {
        SlotWord { min, accepted, lap, prev_decided: false }.pack()
    }

    fn lap_of_marker(m: u64) -> u16 {
        let s = SlotWord::unpack(m);
        assert!(s.is_abstaining());
        s.lap
    }

    #[test]
    fn a_slot_abstains_one_lap_past_what_the_others_certify() {
        let mut a = Abstention::new(4);
        // Slot 0 accepted in lap 3; slot 1 prepared in lap 3, accepted in none of it; slot 2
        // never used; slot 3: another restarted acceptor abstaining up to lap 7.
        a.fold([word(4, 4, 3), word(4, 0, 3), 0, SlotWord::abstaining(7)]);
        // A second acceptor, further in slot 1 and behind in slot 0.
        a.fold([word(1, 1, 2), word(5, 5, 3), 0, word(2, 2, 6)]);
        assert_eq!(a.acceptors(), 2);
        let m: Vec<u64> = a.markers().collect();
        assert_eq!(lap_of_marker(m[0]), 4);
        assert_eq!(lap_of_marker(m[1]), 4);
        assert_eq!(lap_of_marker(m[2]), 0, "lap 0 may have been used without any decision");
        assert_eq!(lap_of_marker(m[3]), 8);
        assert_eq!(SlotWord::unpack(m[0]).view(4), View::Abstains);
        assert_eq!(SlotWord::unpack(m[0]).view(5), View::Fresh);
    }

    #[test]
    fn laps_compare_across_their_wrap() {
        let last = (LAPS - 1) as u16;
        let mut a = Abstention::new(2);
        a.fold([word(1, 1, last), word(1, 0, 0)]);
        a.fold([word(1, 1, 0), word(1, 1, last)]);
        let m: Vec<u64> = a.markers().collect();
        assert_eq!(lap_of_marker(m[0]), 1);
        // Slot 1: prepared in lap 0 certifies lap `last`; accepted in `last` too.
        assert_eq!(lap_of_marker(m[1]), 0);
    }

    #[test]
    #[should_panic(expected = "one word per slot")]
    fn every_slot_is_folded() {
        Abstention::new(3).fold([0, 0]);
    }
}
