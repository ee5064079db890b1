//! Work-request ids of the leader's posts: which attempt and which step of it posted each, so
//! that a completion can be told current from stale, an accept's from a step's, and a fence's.
//!
//! An id holds the attempt (for a fence, the permission round) in its high 32 bits and the step
//! in the 16 bits below; the low 16 bits are 0.

use crate::OUTSTANDING_MAX;

/// Accept writes carry this bit in the step field of their work-request id, and the index's low
/// bits below it; other steps count within the bits below it.
const ACCEPT_STEP: u16 = 0x8000;

const STEP_MASK: u16 = 0x7fff;

/// The step field of fences (see [`super::Leader::fence_pending`]); ordinary steps skip it.
const FENCE_STEP: u16 = STEP_MASK;

// The entries in flight at once differ in their low index bits: an accept's completion names
// one of them.
const _: () = assert!(OUTSTANDING_MAX < STEP_MASK as usize);

/// The id of the posts of `step` in `attempt`.
pub(super) fn wr_id(attempt: u32, step: u16) -> u64 {
    (u64::from(attempt) << 32) | (u64::from(step) << 16)
}

/// The (attempt, step) of an id.
pub(super) fn split(wr_id: u64) -> (u32, u16) {
    ((wr_id >> 32) as u32, (wr_id >> 16) as u16)
}

/// The id of a fence posted in permission round `round`.
pub(super) fn fence(round: u32) -> u64 {
    wr_id(round, FENCE_STEP)
}

pub(super) fn is_fence(step: u16) -> bool {
    step == FENCE_STEP
}

/// The step after `step` (ordinary steps wrap within their field and skip the fences').
pub(super) fn next_step(step: u16) -> u16 {
    let next = step.wrapping_add(1) & STEP_MASK;
    if next == FENCE_STEP {
        0
    } else {
        next
    }
}

/// The step field of the accept writes of `index`.
pub(super) fn accept_step(index: u64) -> u16 {
    ACCEPT_STEP | (index as u16 & STEP_MASK)
}

/// Whether `step` is that of an accept write, and then the low bits of its index (compare with
/// [`index_bits`]).
pub(super) fn accepted_index_bits(step: u16) -> Option<u64> {
    (step & ACCEPT_STEP != 0).then_some(u64::from(step & STEP_MASK))
}

/// The low bits of `index` that its accept writes carry.
pub(super) fn index_bits(index: u64) -> u64 {
    index & u64::from(STEP_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_split_back_into_attempt_and_step() {
        assert_eq!(split(wr_id(7, 3)), (7, 3));
        assert_eq!(wr_id(1, 2), 0x0000_0001_0002_0000);
        let (round, step) = split(fence(9));
        assert_eq!(round, 9);
        assert!(is_fence(step));
    }

    #[test]
    fn ordinary_steps_never_read_as_fences_or_accepts() {
        assert_eq!(next_step(0), 1);
        assert_eq!(next_step(FENCE_STEP - 1), 0, "the fence step is skipped");
        assert_eq!(next_step(u16::MAX), 0);
        let mut step = 0;
        for _ in 0..70_000 {
            step = next_step(step);
            assert!(!is_fence(step) && accepted_index_bits(step).is_none());
        }
    }

    #[test]
    fn accept_steps_name_their_index() {
        let step = accept_step(0x1_2345);
        assert_eq!(accepted_index_bits(step), Some(index_bits(0x1_2345)));
        assert!(!is_fence(step));
    }
}
