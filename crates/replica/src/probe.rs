//! Failover timing: when a new leader took each step of its set-up, and how its polls went
//! (`ReplicaStatus::elected_at_ns` to `ready_at_ns`, `phases_*`, `velos_*`, `setup_polls`),
//! which `mu bench failover` reads. Written by the replication plane (the election date by the
//! background plane) while a new leadership sets up: each stamp is taken once per leadership
//! (the drivers keep a bit per step, so a later poll tests a bit), and polls are timed only
//! until the first answer (`setup_timed`); the dates a Mu leader takes once per stretch of
//! phases are mirrored in the driver ([`DateOnce`]). So a leader past its set-up neither
//! writes nor reads any of these words.

use mu_replication::Phase;
use std::sync::atomic::{AtomicU64, Ordering};

/// The words of failover timing, in [`crate::shared::Shared`].
pub(crate) struct FailoverProbe {
    /// When (ns on the replica's clock, plus one so that 0 means never) the failure detector
    /// last elected this replica, 0 while another leads (background).
    pub elected_at_ns: AtomicU64,
    /// When (same clock, plus one) Mu's leader engine last got past its permission round; 0
    /// while not leading or still asking (replication).
    pub permitted_at_ns: AtomicU64,
    /// Mu: when (same clock, plus one) the leader engine first entered each phase
    /// (`Phase::ALL`, by `phase as usize`) in its current leadership; all 0 while not leading
    /// (replication). Failover timing: where a new leader's set-up and first proposal go.
    pub phase_entered_at_ns: [AtomicU64; Phase::ALL.len()],
    /// Mu: the time a new leadership's polls took, from the one that took it up to the one in
    /// which its first own proposal committed, by the phase each poll began in (`Follower`: the
    /// poll that took it up), and how many polls; reset with `phase_entered_at_ns`
    /// (replication).
    pub phase_busy_ns: [AtomicU64; Phase::ALL.len()],
    pub phase_polls: [AtomicU64; Phase::ALL.len()],
    /// Velos: when (same clock, plus one) the leader first took each step of
    /// [`crate::VelosStep::ALL`] in its current leadership; all 0 while not leading
    /// (replication).
    pub velos_step_at_ns: [AtomicU64; crate::VelosStep::ALL.len()],
    /// Velos: the time a new leadership's polls took, from the one that took it up to the one
    /// that answered the application's first value, and how many polls; reset with
    /// `velos_step_at_ns` (replication).
    pub velos_busy_ns: AtomicU64,
    pub velos_polls: AtomicU64,
    /// Either engine: a new leadership's busy polls, from the one that took it up until it is
    /// timed no more; cleared with the phase stamps or the Velos steps (replication).
    pub setup_trace: crate::setup_trace::SetupTrace,
    /// When (same clock, plus one) the leader engine last finished setting up as leader:
    /// permissions held, its log and its followers' up to date; 0 while not leading
    /// (replication).
    pub ready_at_ns: AtomicU64,
}

impl FailoverProbe {
    /// Nothing dated, nothing timed.
    pub fn new() -> FailoverProbe {
        FailoverProbe {
            elected_at_ns: AtomicU64::new(0),
            permitted_at_ns: AtomicU64::new(0),
            phase_entered_at_ns: std::array::from_fn(|_| AtomicU64::new(0)),
            phase_busy_ns: std::array::from_fn(|_| AtomicU64::new(0)),
            phase_polls: std::array::from_fn(|_| AtomicU64::new(0)),
            velos_step_at_ns: std::array::from_fn(|_| AtomicU64::new(0)),
            velos_busy_ns: AtomicU64::new(0),
            velos_polls: AtomicU64::new(0),
            setup_trace: Default::default(),
            ready_at_ns: AtomicU64::new(0),
        }
    }
}

/// A status time stamp (nanoseconds plus one; 0: none) in a probe word that dates the first poll
/// of a stretch in which a condition holds, and is cleared when it stops holding. Whether it is
/// dated is kept here, beside its one writer, so that a poll with nothing to change reads no
/// shared word.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DateOnce {
    dated: bool,
}

impl DateOnce {
    /// Dates `at` at `now_ns` if `reached` holds and it is not dated, clears it if `reached`
    /// does not hold and it is. Returns whether it was dated now.
    pub fn update(&mut self, at: &AtomicU64, reached: bool, now_ns: u64) -> bool {
        if reached && !self.dated {
            self.dated = true;
            at.store(now_ns + 1, Ordering::Release);
            return true;
        }
        if !reached && self.dated {
            self.dated = false;
            at.store(0, Ordering::Release);
        }
        false
    }
}
