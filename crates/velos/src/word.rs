//! The slot word (Velos §5.2): an acceptor's whole Paxos state for one log index, in the 8 bytes
//! a remote compare-and-swap changes at once.
//!
//! ```text
//! bits 63..38  min proposal       26 bits
//! bits 37..12  accepted proposal  26 bits   0: nothing accepted in this lap
//! bits 11..1   lap                11 bits   (index / slots_count) mod 2048
//! bit  0       previous decided    1 bit    §5.4
//! ```
//!
//! A min proposal of all ones is no proposal: it marks the word of an acceptor that restarted
//! without its memory and abstains for this word up to the lap in it ([`SlotWord::abstaining`],
//! [`crate::recovery`]). An accepted proposal of all ones is no word any proposer writes
//! (corrupted memory, or a faulty peer): in the lap it names, the acceptor is taken to abstain
//! as well ([`SlotWord::view`]).

/// Bits of a proposal number.
pub const PROPOSAL_BITS: u32 = 26;
/// The largest proposal number. Proposers never wrap past it ([`Proposals::above`] says so
/// instead). The one number above it that the field holds marks an abstaining word.
pub const PROPOSAL_MAX: u32 = (1 << PROPOSAL_BITS) - 2;
/// The min proposal field of an abstaining word (see [`SlotWord::abstaining`]).
const ABSTAIN_MIN: u32 = PROPOSAL_MAX + 1;
/// Bits of the lap.
pub const LAP_BITS: u32 = 11;
/// Laps the word tells apart: the lap is `(index / slots_count) mod LAPS`.
pub const LAPS: u64 = 1 << LAP_BITS;

const MIN_SHIFT: u32 = 64 - PROPOSAL_BITS;
const ACC_SHIFT: u32 = MIN_SHIFT - PROPOSAL_BITS;
const LAP_SHIFT: u32 = 1;
const PROPOSAL_MASK: u64 = (1 << PROPOSAL_BITS) - 1;
const LAP_MASK: u64 = LAPS - 1;

/// One acceptor's state for one log index, unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SlotWord {
    /// The smallest proposal this acceptor may still accept with (its promise).
    pub min: u32,
    /// The proposal of the value accepted here in this lap; 0 when none.
    pub accepted: u32,
    /// Which lap of the circular log the state is for.
    pub lap: u16,
    /// Set by an accept whose proposer had decided the previous index with its own value
    /// (§5.4): that value is in the proposer's value log here.
    pub prev_decided: bool,
}

/// How a word relates to the log index a proposer works on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// A state of an earlier lap: for this index nothing is promised or accepted yet.
    Fresh,
    /// The state for this index.
    Current(SlotWord),
    /// A state of a later lap: this index was recycled; whoever works on it is stale.
    Newer,
    /// The acceptor restarted without its memory and may have taken part in this index before
    /// (`crate::recovery`): it takes no part in it now. Its answers are no answers; the index
    /// is decided by the others, as if this acceptor were unreachable.
    Abstains,
}

impl SlotWord {
    /// Packs the state. Fields must fit (proposals at most [`PROPOSAL_MAX`], lap below
    /// [`LAPS`]): a field that does not fit is a bug in the caller, never a silent wrap.
    pub fn pack(self) -> u64 {
        assert!(
            self.min <= PROPOSAL_MAX && self.accepted <= PROPOSAL_MAX,
            "proposal above PROPOSAL_MAX in {self:?}"
        );
        assert!(u64::from(self.lap) < LAPS, "lap out of range in {self:?}");
        (u64::from(self.min) << MIN_SHIFT)
            | (u64::from(self.accepted) << ACC_SHIFT)
            | (u64::from(self.lap) << LAP_SHIFT)
            | u64::from(self.prev_decided)
    }

    /// The word of an acceptor that restarted without its memory, for a slot it abstains in up
    /// to lap `last_lap` (included): it is fresh for later laps only. Proposers never CAS it
    /// for a lap it abstains in ([`View::Abstains`]); a prepare for a later lap moves it on like
    /// any word of an earlier lap.
    pub fn abstaining(last_lap: u16) -> u64 {
        assert!(u64::from(last_lap) < LAPS, "lap out of range: {last_lap}");
        (u64::from(ABSTAIN_MIN) << MIN_SHIFT) | (u64::from(last_lap) << LAP_SHIFT)
    }

    /// Whether this is an abstaining word ([`SlotWord::abstaining`]); its `lap` is the last lap
    /// it abstains in.
    pub fn is_abstaining(self) -> bool {
        self.min == ABSTAIN_MIN
    }

    /// Whether no proposer writes this word (`pack` refuses it: an accepted proposal above
    /// [`PROPOSAL_MAX`]): corrupted memory or a faulty peer. It abstains in its own lap
    /// ([`SlotWord::view`]).
    pub fn is_malformed(self) -> bool {
        !self.is_abstaining() && self.accepted > PROPOSAL_MAX
    }

    pub fn unpack(word: u64) -> SlotWord {
        SlotWord {
            min: ((word >> MIN_SHIFT) & PROPOSAL_MASK) as u32,
            accepted: ((word >> ACC_SHIFT) & PROPOSAL_MASK) as u32,
            lap: ((word >> LAP_SHIFT) & LAP_MASK) as u16,
            prev_decided: word & 1 == 1,
        }
    }

    /// How this state relates to a log index in lap `lap` (see [`lap_of`]).
    pub fn view(self, lap: u16) -> View {
        let ahead = (u64::from(self.lap) + LAPS - u64::from(lap)) % LAPS;
        if self.is_abstaining() {
            return if ahead < LAPS / 2 { View::Abstains } else { View::Fresh };
        }
        if ahead == 0 {
            if self.is_malformed() {
                // Read as an acceptor that takes no part in this index, so that the others
                // decide it, rather than packed back into a CAS (an assertion).
                return View::Abstains;
            }
            View::Current(self)
        } else if ahead < LAPS / 2 {
            View::Newer
        } else {
            View::Fresh
        }
    }
}

/// The lap of log index `index` in a log of `slots_count` slots.
pub fn lap_of(index: u64, slots_count: u64) -> u16 {
    ((index / slots_count) % LAPS) as u16
}

/// Proposal numbers of a configuration of `n` proposers: proposal `b` belongs to position
/// `(b - 1) mod n` (Algorithm 1, line 14: a proposer steps by `|Π|`), so every number names its
/// proposer and no two proposers share one. 0 means "none".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proposals {
    n: u32,
}

impl Proposals {
    /// Proposals of `n` proposers (1 to 64).
    pub fn new(n: usize) -> Proposals {
        assert!((1..=64).contains(&n), "{n} proposers");
        Proposals { n: n as u32 }
    }

    /// The position of proposal `b`'s proposer (`b` not 0).
    pub fn proposer(self, b: u32) -> usize {
        debug_assert!(b != 0);
        ((b - 1) % self.n) as usize
    }

    /// The smallest proposal of position `pos` above `floor`, or `None` when it would exceed
    /// [`PROPOSAL_MAX`].
    pub fn above(self, floor: u32, pos: usize) -> Option<u32> {
        let first = pos as u64 + 1;
        let floor = u64::from(floor);
        let b = if floor < first {
            first
        } else {
            first + ((floor - first) / u64::from(self.n) + 1) * u64::from(self.n)
        };
        (b <= u64::from(PROPOSAL_MAX)).then_some(b as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_fields_do_not_overlap() {
        let w =
            SlotWord { min: PROPOSAL_MAX, accepted: 1, lap: (LAPS - 1) as u16, prev_decided: true };
        assert!(!w.is_abstaining());
        assert_eq!(SlotWord::unpack(w.pack()), w);
        let w = SlotWord { min: 1, accepted: PROPOSAL_MAX, lap: 0, prev_decided: false };
        assert_eq!(SlotWord::unpack(w.pack()), w);
        assert_eq!(SlotWord::default().pack(), 0);
        assert_eq!(SlotWord { prev_decided: true, ..SlotWord::default() }.pack(), 1);
    }

    #[test]
    #[should_panic(expected = "proposal above PROPOSAL_MAX")]
    fn packing_never_wraps_a_proposal() {
        SlotWord { min: PROPOSAL_MAX + 1, ..SlotWord::default() }.pack();
    }

    /// A word no proposer writes (accepted field all ones) reads as abstaining in its own lap,
    /// and like any word of its lap in the others.
    #[test]
    fn a_malformed_word_abstains_in_its_lap() {
        let word = SlotWord::unpack(PROPOSAL_MASK << ACC_SHIFT);
        assert_eq!(word.accepted, PROPOSAL_MASK as u32);
        let malformed = SlotWord { min: 3, lap: 5, ..word };
        assert!(!malformed.is_abstaining());
        assert!(malformed.is_malformed());
        assert!(!SlotWord { accepted: PROPOSAL_MAX, ..malformed }.is_malformed());
        assert!(!SlotWord::unpack(SlotWord::abstaining(5)).is_malformed());
        assert_eq!(malformed.view(5), View::Abstains);
        assert_eq!(malformed.view(6), View::Fresh);
        assert_eq!(malformed.view(4), View::Newer);
    }

    #[test]
    fn laps_tell_older_from_newer_across_the_wrap() {
        let at = |lap| SlotWord { lap, ..SlotWord::default() };
        assert_eq!(at(5).view(5), View::Current(at(5)));
        assert_eq!(at(4).view(5), View::Fresh);
        assert_eq!(at(6).view(5), View::Newer);
        assert_eq!(at((LAPS - 1) as u16).view(0), View::Fresh);
        assert_eq!(at(0).view((LAPS - 1) as u16), View::Newer);
        assert_eq!(lap_of(4095, 4096), 0);
        assert_eq!(lap_of(4096, 4096), 1);
        assert_eq!(lap_of(4096 * LAPS, 4096), 0);
    }

    #[test]
    fn an_abstaining_word_abstains_up_to_its_lap_and_is_fresh_after() {
        let w = SlotWord::unpack(SlotWord::abstaining(5));
        assert!(w.is_abstaining());
        assert_eq!(w.lap, 5);
        assert_eq!(w.accepted, 0);
        assert_eq!(w.view(5), View::Abstains);
        assert_eq!(w.view(4), View::Abstains);
        assert_eq!(w.view(6), View::Fresh);
        // Across the wrap of laps.
        let w = SlotWord::unpack(SlotWord::abstaining(1));
        assert_eq!(w.view((LAPS - 1) as u16), View::Abstains);
        assert_eq!(w.view(2), View::Fresh);
        // No proposal a proposer may use makes a word abstain.
        assert!(!SlotWord { min: PROPOSAL_MAX, ..SlotWord::default() }.is_abstaining());
    }

    #[test]
    #[should_panic(expected = "proposal above PROPOSAL_MAX")]
    fn no_proposal_packs_into_an_abstaining_word() {
        SlotWord { min: PROPOSAL_MAX + 1, lap: 3, ..SlotWord::default() }.pack();
    }

    #[test]
    fn proposals_name_their_proposer_and_rise_above_any_floor() {
        let p = Proposals::new(3);
        assert_eq!(p.above(0, 0), Some(1));
        assert_eq!(p.above(0, 2), Some(3));
        assert_eq!(p.above(1, 0), Some(4));
        assert_eq!(p.above(3, 1), Some(5));
        assert_eq!(p.above(5, 1), Some(8));
        for floor in 0..50 {
            for pos in 0..3 {
                let b = p.above(floor, pos).unwrap();
                assert!(b > floor && b <= floor + 3, "{b} above {floor}");
                assert_eq!(p.proposer(b), pos);
            }
        }
        // The last numbers: none above the limit, never a wrap to small numbers.
        let last = p.above(PROPOSAL_MAX - 3, 0).unwrap();
        assert!(last <= PROPOSAL_MAX && last > PROPOSAL_MAX - 3);
        assert_eq!(p.above(last, 0), None);
        assert_eq!(p.above(PROPOSAL_MAX, 2), None);
    }
}
