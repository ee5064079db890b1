//! The non-leased check (Algorithm 6, Appendix B.2): is view `k` still the latest decided view?
//!
//! View `k` is decided at consensus index `k`, and view `k + 1` is proposed only once view `k` is
//! decided (no gaps). So `Active(view k)` reads every coordinator's slot word for index `k + 1`
//! and waits for a majority: if a majority of them say nothing was accepted there, view `k + 1`
//! was not decided when the first of those reads began (a decided value is accepted by a
//! majority, which meets the readers' majority), and view `k` was the latest then.
//!
//! How one Velos slot word answers (`mu_velos::SlotWord::view` at the lap of index `k + 1`):
//!
//! * `Fresh` (a state of an older lap) or `Current` with `accepted == 0` (a promise only: the
//!   leader's pre-preparation of the next index) — **empty**;
//! * `Current` with `accepted != 0`, or `Newer` (the slot was recycled for a later index, so
//!   index `k + 1` was decided long ago) — **taken**;
//! * `Abstains` (the coordinator restarted without its memory, or the word is malformed) — **no
//!   answer**, as if the read had failed: its state may have lost an accept.
//!
//! A read that fails is no answer either. [`MajorityCheck`] gathers the answers: taken as soon as
//! one coordinator says taken (a newer view may exist: the runtime learns it), empty once a
//! majority said empty and none said taken, failed once a majority can no longer say empty.

use mu_velos::word::{lap_of, SlotWord, View as WordView};
use thiserror::Error;

/// What one coordinator's slot word for index `k + 1` says about view `k` (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Nothing accepted at index `k + 1`.
    Empty,
    /// Something accepted at index `k + 1` (or later in the same slot).
    Taken,
    /// The coordinator takes no part in index `k + 1`: no answer.
    Abstains,
}

/// How the slot word `word` of a log of `slots_count` slots answers for log index `index`
/// (the index after the checked view's epoch).
pub fn classify(word: u64, index: u64, slots_count: u64) -> Answer {
    match SlotWord::unpack(word).view(lap_of(index, slots_count)) {
        WordView::Fresh => Answer::Empty,
        WordView::Current(w) if w.accepted == 0 => Answer::Empty,
        WordView::Current(_) | WordView::Newer => Answer::Taken,
        WordView::Abstains => Answer::Abstains,
    }
}

/// Where a check stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckState {
    /// Fewer than a majority said empty, none said taken, and a majority may still say empty.
    Pending,
    /// A majority said empty and none said taken: the view was the latest when the check's
    /// reads began.
    Empty,
    /// `coordinator` said taken: a newer view may have been decided; learn it from there.
    Taken { coordinator: usize },
    /// Too many coordinators gave no answer for a majority to say empty: start another check.
    Failed,
}

impl CheckState {
    /// Whether no later answer changes the state.
    pub fn is_final(self) -> bool {
        self != CheckState::Pending
    }
}

/// A mistake of the caller: the check's inputs do not fit its coordinators or log.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CheckError {
    #[error("a check needs at least one coordinator")]
    NoCoordinators,
    #[error("a log of 0 slots")]
    NoSlots,
    #[error("coordinator {coordinator} out of {count}")]
    UnknownCoordinator { coordinator: usize, count: usize },
    #[error("view epoch {epoch} has no next consensus index")]
    LastEpoch { epoch: u64 },
}

/// One non-leased check of a view (Algorithm 6): the answers of `n` coordinators for the index
/// after the view's epoch. A coordinator's first answer counts; later ones are ignored (the
/// runtime posts one read per coordinator per check).
#[derive(Clone, Debug)]
pub struct MajorityCheck {
    index: u64,
    slots_count: u64,
    answered: Vec<bool>,
    empty_count: usize,
    silent_count: usize,
    state: CheckState,
}

impl MajorityCheck {
    /// A check of the view of epoch `epoch`, against `coordinators_count` coordinators whose
    /// logs have `slots_count` slots.
    pub fn new(
        epoch: u64,
        coordinators_count: usize,
        slots_count: u64,
    ) -> Result<MajorityCheck, CheckError> {
        if coordinators_count == 0 {
            return Err(CheckError::NoCoordinators);
        }
        if slots_count == 0 {
            return Err(CheckError::NoSlots);
        }
        let index = epoch.checked_add(1).ok_or(CheckError::LastEpoch { epoch })?;
        Ok(MajorityCheck {
            index,
            slots_count,
            answered: vec![false; coordinators_count],
            empty_count: 0,
            silent_count: 0,
            state: CheckState::Pending,
        })
    }

    /// The consensus index whose slot words the runtime reads.
    pub fn index(&self) -> u64 {
        self.index
    }

    pub fn state(&self) -> CheckState {
        self.state
    }

    fn majority(&self) -> usize {
        self.answered.len() / 2 + 1
    }

    /// Coordinator `coordinator`'s slot word for [`MajorityCheck::index`] was read.
    pub fn on_word(&mut self, coordinator: usize, word: u64) -> Result<CheckState, CheckError> {
        let answer = classify(word, self.index, self.slots_count);
        self.on_answer(coordinator, answer)
    }

    /// The read of coordinator `coordinator` failed: no answer from it in this check.
    pub fn on_error(&mut self, coordinator: usize) -> Result<CheckState, CheckError> {
        self.on_answer(coordinator, Answer::Abstains)
    }

    /// Coordinator `coordinator` answered `answer`.
    pub fn on_answer(
        &mut self,
        coordinator: usize,
        answer: Answer,
    ) -> Result<CheckState, CheckError> {
        let count = self.answered.len();
        if coordinator >= count {
            return Err(CheckError::UnknownCoordinator { coordinator, count });
        }
        if self.state.is_final() || self.answered[coordinator] {
            return Ok(self.state);
        }
        self.answered[coordinator] = true;
        match answer {
            Answer::Taken => {
                self.state = CheckState::Taken { coordinator };
                return Ok(self.state);
            }
            Answer::Empty => self.empty_count += 1,
            Answer::Abstains => self.silent_count += 1,
        }
        if self.empty_count >= self.majority() {
            self.state = CheckState::Empty;
        } else if count - self.silent_count < self.majority() {
            self.state = CheckState::Failed;
        }
        Ok(self.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOTS: u64 = 8;

    fn word(min: u32, accepted: u32, index: u64) -> u64 {
        SlotWord { min, accepted, lap: lap_of(index, SLOTS), prev_decided: false }.pack()
    }

    /// Algorithm 6 line 6 with Velos slot words: a promise (pre-preparation of index `k + 1`)
    /// or an older lap is "not accepted"; an accept in this lap, or a later lap, is.
    #[test]
    fn slot_words_answer_by_the_rule() {
        let index = 13; // lap 1 of an 8-slot log
        assert_eq!(classify(0, index, SLOTS), Answer::Empty, "lap 0, never written");
        assert_eq!(classify(word(3, 3, index - SLOTS), index, SLOTS), Answer::Empty, "older lap");
        assert_eq!(classify(word(4, 0, index), index, SLOTS), Answer::Empty, "a promise only");
        assert_eq!(classify(word(4, 4, index), index, SLOTS), Answer::Taken, "accepted");
        assert_eq!(classify(word(1, 1, index + SLOTS), index, SLOTS), Answer::Taken, "newer lap");
        let abstaining = SlotWord::abstaining(lap_of(index, SLOTS));
        assert_eq!(classify(abstaining, index, SLOTS), Answer::Abstains, "restarted, no memory");
        let older_abstain = SlotWord::abstaining(lap_of(index - SLOTS, SLOTS));
        assert_eq!(classify(older_abstain, index, SLOTS), Answer::Empty, "abstained earlier");
    }

    /// Algorithm 6 line 5–7: true only once a majority of slot words are read and all of them
    /// are empty.
    #[test]
    fn empty_needs_a_majority_of_empty_answers() {
        let mut check = MajorityCheck::new(12, 3, SLOTS).unwrap();
        assert_eq!(check.index(), 13);
        assert_eq!(check.on_word(2, word(5, 0, 13)).unwrap(), CheckState::Pending);
        assert_eq!(check.on_word(2, word(5, 0, 13)).unwrap(), CheckState::Pending, "counted once");
        assert_eq!(check.on_word(0, 0).unwrap(), CheckState::Empty);
        assert_eq!(check.on_word(1, word(5, 5, 13)).unwrap(), CheckState::Empty, "final");
        let mut five = MajorityCheck::new(12, 5, SLOTS).unwrap();
        five.on_word(0, 0).unwrap();
        five.on_word(1, 0).unwrap();
        assert_eq!(five.state(), CheckState::Pending, "2 of 5 is no majority");
        assert_eq!(five.on_word(4, 0).unwrap(), CheckState::Empty);
    }

    /// Algorithm 6 line 8–9: one non-empty slot makes the check false, and names where the
    /// newer view can be learnt.
    #[test]
    fn one_taken_answer_is_enough() {
        let mut check = MajorityCheck::new(12, 3, SLOTS).unwrap();
        check.on_word(0, 0).unwrap();
        assert_eq!(check.on_word(1, word(7, 7, 13)).unwrap(), CheckState::Taken { coordinator: 1 });
        assert_eq!(check.on_word(2, 0).unwrap(), CheckState::Taken { coordinator: 1 });
        let mut recycled = MajorityCheck::new(12, 3, SLOTS).unwrap();
        let state = recycled.on_word(2, word(1, 0, 13 + SLOTS)).unwrap();
        assert_eq!(state, CheckState::Taken { coordinator: 2 }, "a newer lap means taken");
    }

    /// Abstaining words (Velos recovery: a coordinator restarted without its memory) and failed
    /// reads are no answers: they never count as empty, and too many of them fail the check.
    #[test]
    fn abstaining_and_failed_reads_are_no_answers() {
        let abstaining = SlotWord::abstaining(lap_of(13, SLOTS));
        let mut check = MajorityCheck::new(12, 3, SLOTS).unwrap();
        assert_eq!(check.on_word(0, abstaining).unwrap(), CheckState::Pending);
        assert_eq!(check.on_word(1, 0).unwrap(), CheckState::Pending, "one empty of two answers");
        assert_eq!(check.on_error(2).unwrap(), CheckState::Failed);
        let mut errors = MajorityCheck::new(12, 3, SLOTS).unwrap();
        errors.on_error(0).unwrap();
        assert_eq!(errors.on_error(1).unwrap(), CheckState::Failed);
        // An accepted proposal of all ones is no word a proposer writes: no answer either.
        let lap = u64::from(lap_of(13, SLOTS));
        let malformed = (5u64 << 38) | (((1u64 << 26) - 1) << 12) | (lap << 1);
        assert_eq!(classify(malformed, 13, SLOTS), Answer::Abstains);
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert_eq!(MajorityCheck::new(1, 0, SLOTS).unwrap_err(), CheckError::NoCoordinators);
        assert_eq!(MajorityCheck::new(1, 3, 0).unwrap_err(), CheckError::NoSlots);
        assert!(matches!(MajorityCheck::new(u64::MAX, 3, 8), Err(CheckError::LastEpoch { .. })));
        let mut check = MajorityCheck::new(1, 3, SLOTS).unwrap();
        let err = check.on_word(3, 0).unwrap_err();
        assert_eq!(err, CheckError::UnknownCoordinator { coordinator: 3, count: 3 });
    }
}
