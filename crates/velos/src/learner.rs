//! What a follower learns from its own memory (Velos §5.4): index `i` is decided once the word
//! of index `i + 1` carries the "previous decided" bit; the value is the entry for `i` in the
//! value log of that word's accepted proposer, in the follower's own region (the proposer wrote
//! it there before the CAS, on the same FIFO connection).

use crate::layout::VelosLayout;
use crate::word::{lap_of, Proposals, SlotWord, View};

/// The position whose value log holds the decided value of `index`, if the word of
/// `index + 1` (`next_word`, as read now) says `index` is decided.
pub fn decided_by(layout: &VelosLayout, index: u64, next_word: u64) -> Option<usize> {
    let lap = lap_of(index + 1, layout.slots_count());
    match SlotWord::unpack(next_word).view(lap) {
        View::Current(s) if s.prev_decided && s.accepted != 0 => {
            Some(Proposals::new(layout.positions()).proposer(s.accepted))
        }
        _ => None,
    }
}

/// Whether the word of `index` (as read now) is already in a later lap: this replica fell a
/// whole log behind and cannot learn `index` from memory any more.
pub fn recycled(layout: &VelosLayout, index: u64, word: u64) -> bool {
    let lap = lap_of(index, layout.slots_count());
    SlotWord::unpack(word).view(lap) == View::Newer
}
