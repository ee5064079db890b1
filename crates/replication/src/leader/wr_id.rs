//! Work-request ids of the leader's posts.

use crate::OUTSTANDING_MAX;

/// Accept writes carry this bit in the step field of their work-request id, and the index's low
/// bits below it; other steps count within the bits below it.
pub(super) const ACCEPT_STEP: u16 = 0x8000;

pub(super) const STEP_MASK: u16 = 0x7fff;

/// The step field of fences (see [`Leader::fence_pending`]); ordinary steps skip it.
pub(super) const FENCE_STEP: u16 = STEP_MASK;

const _: () = assert!(OUTSTANDING_MAX < STEP_MASK as usize);
