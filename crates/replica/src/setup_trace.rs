//! A new leadership's polls, one record per poll that did something (failover timing).
//!
//! The per-phase sums of [`crate::ReplicaStatus::phases_busy_ns`] say how much of a new
//! leader's set-up was spent inside its polls; this says where the rest went. Each record is a
//! busy poll (one that found or did something) with the idle polls made since the busy one
//! before it: so the time between two busy polls splits into idle polls (the thread was
//! polling and waiting for other threads or peers) and time in no poll at all (the thread was
//! elsewhere: descheduled, backing off, or waiting for the plane's lock), and the record says
//! which thread polled.

use mu_replication::Phase;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Busy polls a leadership records; later ones are not recorded.
pub const SETUP_TRACE_POLLS: usize = 64;
const WORDS_PER_POLL: usize = 3;

/// The thread that made a poll of the replication plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Poller {
    /// The application's thread, in a direct-mode `propose`.
    Application = 1,
    /// Direct mode's helper thread, which keeps the plane going between proposals.
    Helper = 2,
    /// Handover mode's replication thread.
    Replication = 3,
}

impl Poller {
    /// Every poller.
    pub const ALL: [Poller; 3] = [Poller::Application, Poller::Helper, Poller::Replication];

    fn from_code(code: u64) -> Option<Poller> {
        Poller::ALL.into_iter().find(|p| *p as u64 == code)
    }

    /// Its name in reports (`application`, `helper`, `replication`).
    pub fn name(self) -> &'static str {
        match self {
            Poller::Application => "application",
            Poller::Helper => "helper",
            Poller::Replication => "replication",
        }
    }
}

/// One busy poll of a new leadership, on the replica's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetupPoll {
    /// When the poll began (nanoseconds since `Replica::started_at`).
    pub start_ns: u64,
    /// How long it took.
    pub busy_ns: u64,
    /// Mu: the phase the engine was in when the poll began (`Follower`: the poll that took up
    /// the leadership). `None` under Velos.
    pub phase: Option<Phase>,
    /// The thread that made it.
    pub poller: Poller,
    /// Polls that found nothing to do since the busy poll before this one (or since the
    /// leadership was taken up), and the time they took together.
    pub idle_polls: u64,
    /// The time those idle polls took.
    pub idle_ns: u64,
}

impl SetupPoll {
    /// The figures but the start, in two words (how the trace keeps them, and how a process
    /// can publish them): the poll's time (32 bits), its phase (`Phase::ALL` index plus one; 0
    /// for none) and its thread; then the idle polls before it and their time (32 bits each).
    /// Times and counts above 2^32 - 1 read as that.
    pub fn pack(&self) -> [u64; 2] {
        let phase = self.phase.map_or(0, |p| p as u64 + 1);
        [
            clamp32(self.busy_ns) | phase << 32 | (self.poller as u64) << 40,
            clamp32(self.idle_polls) | clamp32(self.idle_ns) << 32,
        ]
    }

    /// The inverse of [`SetupPoll::pack`], with the poll's start; `None` for words that
    /// `pack` did not make.
    pub fn unpack(start_ns: u64, words: [u64; 2]) -> Option<SetupPoll> {
        let phase = match (words[0] >> 32) & 0xff {
            0 => None,
            code => Some(*Phase::ALL.get(code as usize - 1)?),
        };
        Some(SetupPoll {
            start_ns,
            busy_ns: words[0] & 0xffff_ffff,
            phase,
            poller: Poller::from_code((words[0] >> 40) & 0xff)?,
            idle_polls: words[1] & 0xffff_ffff,
            idle_ns: words[1] >> 32,
        })
    }
}

/// The records, shared between the thread that polls and whoever reads the status. One thread
/// polls at a time (the plane's lock or the replication thread), so records are written by one
/// writer; a reader takes them up to the count it read.
pub struct SetupTrace {
    words: [AtomicU64; WORDS_PER_POLL * SETUP_TRACE_POLLS],
    len: AtomicUsize,
}

impl Default for SetupTrace {
    fn default() -> Self {
        SetupTrace { words: std::array::from_fn(|_| AtomicU64::new(0)), len: AtomicUsize::new(0) }
    }
}

/// Durations kept in 32 bits: a poll or an idle stretch of more than four seconds reads as
/// four seconds.
fn clamp32(ns: u64) -> u64 {
    ns.min(u64::from(u32::MAX))
}

impl SetupTrace {
    pub fn clear(&self) {
        self.len.store(0, Ordering::Release);
    }

    /// Adds `poll` unless the trace is full.
    pub fn record(&self, poll: SetupPoll) {
        let i = self.len.load(Ordering::Relaxed);
        if i >= SETUP_TRACE_POLLS {
            return;
        }
        let w = &self.words[i * WORDS_PER_POLL..][..WORDS_PER_POLL];
        let [figures, idle] = poll.pack();
        w[0].store(poll.start_ns, Ordering::Relaxed);
        w[1].store(figures, Ordering::Relaxed);
        w[2].store(idle, Ordering::Relaxed);
        self.len.store(i + 1, Ordering::Release);
    }

    /// The records so far.
    pub fn polls(&self) -> Vec<SetupPoll> {
        let len = self.len.load(Ordering::Acquire).min(SETUP_TRACE_POLLS);
        (0..len)
            .filter_map(|i| {
                let w = &self.words[i * WORDS_PER_POLL..][..WORDS_PER_POLL];
                let load = |word: &AtomicU64| word.load(Ordering::Relaxed);
                SetupPoll::unpack(load(&w[0]), [load(&w[1]), load(&w[2])])
            })
            .collect()
    }
}

/// The idle polls a driver counts between two busy ones.
#[derive(Default)]
pub struct IdlePolls {
    polls: u64,
    ns: u64,
}

impl IdlePolls {
    /// Counts a timed poll: an idle one is added up; a busy one is recorded in `trace` with the
    /// idle ones before it.
    pub fn note(
        &mut self,
        trace: &SetupTrace,
        start_ns: u64,
        busy_ns: u64,
        busy: bool,
        phase: Option<Phase>,
        poller: Poller,
    ) {
        if !busy {
            self.polls += 1;
            self.ns += busy_ns;
            return;
        }
        trace.record(SetupPoll {
            start_ns,
            busy_ns,
            phase,
            poller,
            idle_polls: self.polls,
            idle_ns: self.ns,
        });
        *self = IdlePolls::default();
    }

    pub fn reset(&mut self) {
        *self = IdlePolls::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_busy_polls_with_the_idle_ones_before_them() {
        let trace = SetupTrace::default();
        let mut idle = IdlePolls::default();
        let read = Phase::ReadFuos;
        idle.note(&trace, 100, 7, true, Some(Phase::Follower), Poller::Application);
        idle.note(&trace, 110, 2, false, Some(read), Poller::Application);
        idle.note(&trace, 115, 3, false, Some(read), Poller::Helper);
        idle.note(&trace, 300, 9, true, Some(read), Poller::Helper);
        idle.note(&trace, 400, 1 << 40, true, None, Poller::Replication);
        let polls = trace.polls();
        assert_eq!(polls.len(), 3);
        assert_eq!((polls[0].start_ns, polls[0].busy_ns, polls[0].idle_polls), (100, 7, 0));
        assert_eq!(polls[0].phase, Some(Phase::Follower));
        assert_eq!((polls[1].idle_polls, polls[1].idle_ns, polls[1].busy_ns), (2, 5, 9));
        assert_eq!((polls[1].phase, polls[1].poller), (Some(read), Poller::Helper));
        assert_eq!(polls[2].busy_ns, u64::from(u32::MAX), "clamped, not wrapped");
        assert_eq!((polls[2].phase, polls[2].poller), (None, Poller::Replication));
        for i in 0..2 * SETUP_TRACE_POLLS {
            idle.note(&trace, 1000 + i as u64, 1, true, None, Poller::Helper);
        }
        assert_eq!(trace.polls().len(), SETUP_TRACE_POLLS, "full: later polls are dropped");
        trace.clear();
        assert!(trace.polls().is_empty());
    }
}
