//! The slot word (Velos §5.2): an acceptor's whole Paxos state for one log index, in the 8 bytes
//! a remote compare-and-swap changes at once.
//!
//! ```text
//! bits 63..38  min proposal       26 bits
//! bits 37..12  accepted proposal  26 bits   0: nothing accepted in this lap
//! bits 11..1   lap                11 bits   (index / slots_count) mod 2048
//! bit  0       previous decided    1 bit    §5.4
//! ```

/// Bits of a proposal number.
pub const PROPOSAL_BITS: u32 = 26;
/// The largest proposal number a word holds. Proposers never wrap past it
/// ([`Proposals::above`] says so instead).
pub const PROPOSAL_MAX: u32 = (1 << PROPOSAL_BITS) - 1;
/// Bits of the lap.
pub const LAP_BITS: u32 = 11;
/// Laps the word tells apart: the lap is `(index / slots_count) mod LAPS`.
pub const LAPS: u64 = 1 << LAP_BITS;

const MIN_SHIFT: u32 = 64 - PROPOSAL_BITS;
const ACC_SHIFT: u32 = MIN_SHIFT - PROPOSAL_BITS;
const LAP_SHIFT: u32 = 1;
const PROPOSAL_MASK: u64 = PROPOSAL_MAX as u64;
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
        if ahead == 0 {
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
