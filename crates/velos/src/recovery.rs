//! Taking back an acceptor that restarted without its memory, or whose slot words fell too far
//! behind to be read rightly (not in the Velos paper, which leaves restarts out;
//! `docs/protocols/velos.md`, "Restarting a replica").
//!
//! An acceptor that forgot what it promised and accepted must not answer for a log index it
//! may have answered for before: a value decided with its help could be decided again,
//! differently, by a majority it now forms with acceptors that never saw that value; and a
//! promise it forgot lets a lower proposal through that the promise was keeping out. So a
//! restarted acceptor abstains ([`crate::View::Abstains`]) in every index it may have taken
//! part in, and takes part only in later ones, whose fresh state is the truth.
//!
//! **Which indices: a rejoin entry.** The restarted acceptor lets nobody into its memory and
//! asks the leader to decide a *rejoin entry* naming it and this request ([`RejoinEntry`]).
//! The entry's value is made after the restart, so it is decided at an index `a` after every
//! index decided before the crash. Then:
//!
//! * it **accepted** at index `j` before its crash only if a proposer had decided `j - 1` by
//!   then (a proposer keeps one accept in flight), so `j - 1 < a`: `j <= a`;
//! * it **promised** at index `x` only if `x - slots_count` was decided by then (recycling: a
//!   proposer prepares only below its applied floor plus `slots_count`), so
//!   `x - slots_count < a`: `x < a + slots_count`.
//!
//! So it abstains in every index below `a + slots_count`, one per slot
//! ([`markers`]): in each slot, up to the lap of the one index of `[a, a + slots_count)` there.
//! It learns `a` by catching up from the others' memories, which needs nothing of its own.
//!
//! Nothing here reads what the other acceptors hold, so nothing depends on which acceptors a
//! majority is made of: the rule holds whatever configuration each index had. (A rule that
//! reads the words of a majority of the others instead, the design before this one, is sound
//! only while every index is decided by a majority of one fixed set; `spec/tla/VelosRestart.tla`
//! checks both.)
//!
//! The price: a restarted acceptor helps decide nothing for up to one lap of the log after
//! `a` (`slots_count` entries), and a leader must be there to decide the rejoin entry.

use crate::word::{lap_of, SlotWord};
use mu_fabric::NodeId;

/// The words a replica that rejoined at index `rejoined_at` starts with, slot by slot: each
/// abstains up to the lap of the one index of `[rejoined_at, rejoined_at + slots_count)` in
/// its slot, and is fresh for every index after that window.
pub fn markers(rejoined_at: u64, slots_count: u64) -> impl Iterator<Item = u64> {
    let first_slot = rejoined_at % slots_count;
    (0..slots_count).map(move |slot| {
        let index = rejoined_at + (slot + slots_count - first_slot) % slots_count;
        SlotWord::abstaining(lap_of(index, slots_count))
    })
}

/// The first index a replica that rejoined at `rejoined_at` answers in.
pub fn fresh_from(rejoined_at: u64, slots_count: u64) -> u64 {
    rejoined_at + slots_count
}

/// The value of a rejoin entry: the replica that asks, and which request of it this answers
/// (a replica's request names its run and its attempt in that run, so an entry decided for an
/// earlier request, before a later restart, is never taken for the later one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RejoinEntry {
    pub replica: NodeId,
    pub request: u64,
}

/// Bytes of an encoded [`RejoinEntry`].
pub const REJOIN_ENTRY_BYTES: usize = 10;

impl RejoinEntry {
    pub fn encode(self) -> [u8; REJOIN_ENTRY_BYTES] {
        let mut out = [0; REJOIN_ENTRY_BYTES];
        out[..2].copy_from_slice(&self.replica.0.to_le_bytes());
        out[2..].copy_from_slice(&self.request.to_le_bytes());
        out
    }

    /// The entry a value carries, if it is well formed (`None` for any other length, or a
    /// request of 0, which no replica makes).
    pub fn decode(value: &[u8]) -> Option<RejoinEntry> {
        let value: &[u8; REJOIN_ENTRY_BYTES] = value.try_into().ok()?;
        let replica = NodeId(u16::from_le_bytes([value[0], value[1]]));
        let request = u64::from_le_bytes(value[2..].try_into().expect("8 bytes"));
        (request != 0).then_some(RejoinEntry { replica, request })
    }
}

/// A replica's request to rejoin: its run's nonce (64 random bits drawn when the run starts)
/// plus the attempt in that run (from 1). Never 0, which means "no request".
///
/// A request must never equal one of an earlier run of the replica: a rejoin entry decided for
/// that one, before the crash, would be taken for this run's answer. Attempts of one run
/// differ; two runs collide only if their nonces are within the attempts of each other, about
/// one chance in 2^64 per attempt for random nonces (a 32-bit boot id would leave one in 2^32).
pub fn request(run_nonce: u64, attempt: u32) -> u64 {
    assert!(attempt != 0, "a request names an attempt");
    match run_nonce.wrapping_add(u64::from(attempt)) {
        0 => 1,
        r => r,
    }
}

/// Whether a replica that rejoined still abstains in some index of the lap from `from` (the
/// recycling floor: an index some live replica has not applied, which a new leader may have to
/// decide again, without it), reading its own slot words with `word_at(index)`. While it does,
/// it counts as failed (`ReplicaStatus::recovering`), and it stands for election only once it
/// does not ("Restarting a replica", step 4, and "Its cost").
pub fn abstains_from(from: u64, slots_count: u64, word_at: impl Fn(u64) -> u64) -> bool {
    (from..from + slots_count).any(|index| {
        let lap = lap_of(index, slots_count);
        SlotWord::unpack(word_at(index)).view(lap) == crate::View::Abstains
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::word::{View, LAPS};

    fn view(marker: u64, index: u64, slots: u64) -> View {
        SlotWord::unpack(marker).view(lap_of(index, slots))
    }

    #[test]
    fn abstains_below_one_lap_past_the_rejoin_index_and_is_fresh_after() {
        for slots in [1, 4, 8] {
            for a in [0, 1, 3, 4, 5, 7, 8, 100, LAPS * 8 - 3, LAPS * 8 + 2] {
                let m: Vec<u64> = markers(a, slots).collect();
                assert_eq!(m.len() as u64, slots);
                let fresh = fresh_from(a, slots);
                // Every index of the last laps before the window, and the window itself.
                for index in a.saturating_sub(10 * slots)..fresh {
                    let slot = (index % slots) as usize;
                    assert_eq!(view(m[slot], index, slots), View::Abstains, "a={a} index={index}");
                }
                for index in fresh..fresh + 10 * slots {
                    let slot = (index % slots) as usize;
                    assert_eq!(view(m[slot], index, slots), View::Fresh, "a={a} index={index}");
                }
            }
        }
    }

    /// A replica that rejoined at `a` abstains in the lap from any floor below `a + slots`, and
    /// no longer from there on.
    #[test]
    fn abstention_ends_one_lap_past_the_rejoin_index() {
        let slots = 8;
        for a in [0, 5, 100] {
            let m: Vec<u64> = markers(a, slots).collect();
            let word_at = |index: u64| m[(index % slots) as usize];
            for from in a.saturating_sub(3)..a + slots {
                assert!(abstains_from(from, slots, word_at), "a={a} from={from}");
            }
            assert!(!abstains_from(a + slots, slots, word_at), "a={a}");
        }
    }

    #[test]
    fn a_rejoin_entry_round_trips_and_refuses_what_it_is_not() {
        let e = RejoinEntry { replica: NodeId(3), request: request(0xdead_beef_0000_0000, 2) };
        assert_eq!(RejoinEntry::decode(&e.encode()), Some(e));
        assert_eq!(RejoinEntry::decode(&e.encode()[..9]), None);
        assert_eq!(RejoinEntry::decode(&[0; REJOIN_ENTRY_BYTES]), None);
        assert_eq!(RejoinEntry::decode(&[]), None);
    }

    #[test]
    fn a_request_is_never_zero_and_attempts_differ() {
        assert_eq!(request(u64::MAX, 1), 1);
        assert_ne!(request(5, 1), request(5, 2));
    }

    #[test]
    #[should_panic(expected = "names an attempt")]
    fn attempts_count_from_one() {
        request(7, 0);
    }
}
