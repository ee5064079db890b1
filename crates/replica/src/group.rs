//! One call's requests on their way through a replication engine: packed into entries of up
//! to `batch_requests_max` requests (§7.4), answered one outcome per request. Shared by the
//! Mu and Velos drivers.

use crate::replication::ProposeError;
use mu_log::EntryKind;
use std::collections::VecDeque;

/// Requests back to back, and where each ends: one call's requests, kept in buffers reused from
/// call to call.
#[derive(Default)]
pub(crate) struct Requests {
    data: Vec<u8>,
    ends: Vec<usize>,
}

impl Requests {
    pub fn clear(&mut self) {
        self.data.clear();
        self.ends.clear();
    }

    pub fn push(&mut self, request: &[u8]) {
        self.data.extend_from_slice(request);
        self.ends.push(self.data.len());
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.data[start..self.ends[i]]
    }

    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }
}

/// One log entry of a group: `count` requests from `first` on (a batch when more than one).
#[derive(Clone, Copy)]
pub(crate) struct Planned {
    pub first: usize,
    pub count: usize,
    /// The engine wrote it into a log ([`mu_replication::Action::Exposed`]): it may have been
    /// accepted somewhere, and decided by a later leader.
    pub maybe_accepted: bool,
}

/// The requests being replicated: one call of the application's, packed into entries of up to
/// `batch_requests_max` requests (§7.4), of which up to `outstanding_max` are in the engine.
/// Reused from call to call, so that proposing does not allocate.
#[derive(Default)]
pub(crate) struct Group {
    pub requests: Requests,
    /// Entries not committed yet, in log order; the first `handed` are in the engine.
    pub entries: VecDeque<Planned>,
    pub handed: usize,
    /// One per request, in order; `None` until known.
    pub outcomes: Vec<Option<Result<u64, ProposeError>>>,
    /// Requests without an outcome yet.
    pub unanswered: usize,
    /// The engine's wait for room in the log, if it waits.
    pub room_wait: Option<RoomWait>,
    /// Room to encode one entry.
    pub entry: Vec<u8>,
    /// The call is a membership change (§5.4): one entry of that kind.
    pub change: bool,
    /// Requests not all answered yet.
    pub pending: bool,
    /// Every request answered; the outcomes wait to be taken.
    pub answered: bool,
}

/// A wait for room in the log (§5.3): how far the room reached, and since when it has not
/// grown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RoomWait {
    /// The first index without room, as last seen.
    pub limit: u64,
    /// When the room last grew (or the wait began).
    pub since_ns: u64,
}

impl Group {
    /// The engine waits for room, which reaches up to `limit` (exclusive) now: for how long
    /// the room has not grown. Back-pressure, not a deadline: the replicas the room waits for
    /// free it as they apply, and each bit of room they free starts the time again, so it
    /// measures how long they have gone without applying anything, not how long the leader has
    /// been slowed down. A limit that falls (a replica far behind joined again) is no progress,
    /// and from there on a rise is.
    pub fn room_stalled_ns(&mut self, now_ns: u64, limit: u64) -> u64 {
        let wait = self.room_wait.get_or_insert(RoomWait { limit, since_ns: now_ns });
        if limit > wait.limit {
            wait.since_ns = now_ns;
        }
        wait.limit = limit;
        now_ns.saturating_sub(wait.since_ns)
    }

    /// A group whose buffers already hold a call of `requests_count` requests of up to
    /// `request_bytes` in all, allocated and written once here, on the thread that starts the
    /// replica. Otherwise the first call after an election allocates them, on the application's
    /// thread, whose first touch of fresh heap pages took page faults on the failover path
    /// (measured: 2 to 17 µs between a new Velos leader's readiness and its first submission,
    /// on a 2-vCPU virtual machine).
    pub fn with_room(request_bytes: usize, requests_count: usize) -> Group {
        let mut group = Group { entry: mu_log::written_room(request_bytes), ..Group::default() };
        group.requests.data = mu_log::written_room(request_bytes);
        group.requests.ends.resize(requests_count, 0);
        group.outcomes.resize(requests_count, None);
        group.entries.resize(requests_count, Planned { first: 0, count: 0, maybe_accepted: false });
        group.requests.clear();
        group.outcomes.clear();
        group.entries.clear();
        group
    }

    pub fn answer(&mut self, entry: Planned, outcome: Result<u64, ProposeError>) {
        for o in &mut self.outcomes[entry.first..entry.first + entry.count] {
            debug_assert!(o.is_none());
            *o = Some(outcome.clone());
        }
        self.unanswered -= entry.count;
    }

    /// A call in progress, or its outcomes not taken yet: the next call must wait.
    pub fn busy(&self) -> bool {
        self.pending || self.answered
    }

    /// Every request has its outcome: they wait to be taken.
    pub fn finish(&mut self) {
        debug_assert_eq!(self.unanswered, 0);
        self.pending = false;
        self.answered = true;
    }

    /// The outcomes of the call, once all are known, into `into` (cleared first).
    pub fn take_outcomes(&mut self, into: &mut Vec<Result<u64, ProposeError>>) -> bool {
        if !self.answered {
            return false;
        }
        self.answered = false;
        into.clear();
        into.extend(self.outcomes.drain(..).map(|o| o.expect("every request answered")));
        true
    }

    /// Plans the entries of a call: `requests` packed greedily into entries of at most
    /// `batch_requests_max` requests and `max` bytes (one entry alone for a membership change,
    /// [`Group::change`]), every outcome unknown. Fails if there are none or one is too large.
    pub fn plan<'a>(
        &mut self,
        requests: impl IntoIterator<Item = &'a [u8]>,
        max: usize,
        batch_requests_max: usize,
    ) -> Result<(), ProposeError> {
        let single = self.change;
        self.requests.clear();
        self.entries.clear();
        self.handed = 0;
        self.outcomes.clear();
        self.room_wait = None;
        let mut batch_bytes = 0;
        for request in requests {
            if request.len() > max {
                return Err(ProposeError::TooLarge { len: request.len(), max });
            }
            let i = self.requests.len();
            self.requests.push(request);
            self.outcomes.push(None);
            // Greedy packing: join the last entry while it has room for one more request.
            let item = mu_log::batch::item_bytes(request.len());
            match self.entries.back_mut() {
                Some(last)
                    if !single && last.count < batch_requests_max && batch_bytes + item <= max =>
                {
                    last.count += 1;
                    batch_bytes += item;
                }
                _ => {
                    self.entries.push_back(Planned { first: i, count: 1, maybe_accepted: false });
                    batch_bytes = item;
                }
            }
        }
        if self.requests.len() == 0 {
            return Err(ProposeError::Empty);
        }
        self.unanswered = self.requests.len();
        Ok(())
    }

    /// The kind and value of planned entry `i`: its request alone, or its requests batched.
    pub fn entry_value(&mut self, i: usize) -> (EntryKind, &[u8]) {
        let e = self.entries[i];
        if e.count == 1 {
            let kind = if self.change { EntryKind::Membership } else { EntryKind::Request };
            (kind, self.requests.get(e.first))
        } else {
            self.entry.clear();
            for r in e.first..e.first + e.count {
                mu_log::batch::push(&mut self.entry, self.requests.get(r));
            }
            (EntryKind::Batch, &self.entry[..])
        }
    }

    /// Answers every entry not committed with `outcome(maybe_accepted)`.
    pub fn answer_rest(&mut self, outcome: impl Fn(bool) -> ProposeError) {
        while let Some(e) = self.entries.pop_front() {
            self.answer(e, Err(outcome(e.maybe_accepted)));
        }
        self.handed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_with_room_takes_its_first_calls_without_allocating() {
        let mut group = Group::with_room(4096, 8);
        let buffers = |g: &Group| {
            (
                g.requests.data.as_ptr(),
                g.requests.ends.as_ptr(),
                g.outcomes.as_ptr(),
                g.entries.as_slices().0.as_ptr(),
                g.entry.as_ptr(),
            )
        };
        let before = buffers(&group);
        let requests: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 400]).collect();
        group.plan(requests.iter().map(|r| &r[..]), 4096, 8).unwrap();
        assert_eq!(group.entries.len(), 1, "eight requests of 400 bytes make one batch");
        let (kind, value) = group.entry_value(0);
        assert_eq!(kind, EntryKind::Batch);
        assert!(value.len() > 8 * 400);
        group.plan([&[7u8; 4096][..]], 4096, 8).unwrap();
        assert_eq!(buffers(&group), before, "no buffer was allocated again");
    }

    /// The log-full timeout measures how long the room has not grown, not how long the leader
    /// has waited: room freed bit by bit by a slow replica starts it again; a limit that falls
    /// (a replica far behind joined) does not, and a rise from there does.
    #[test]
    fn the_room_wait_runs_from_the_last_room_freed() {
        let mut group = Group::default();
        assert_eq!(group.room_stalled_ns(1_000, 500), 0);
        assert_eq!(group.room_stalled_ns(90_000, 500), 89_000, "no room freed");
        assert_eq!(group.room_stalled_ns(95_000, 501), 0, "one slot freed");
        assert_eq!(group.room_stalled_ns(195_000, 501), 100_000);
        assert_eq!(group.room_stalled_ns(196_000, 300), 101_000, "a fall is no progress");
        assert_eq!(group.room_stalled_ns(197_000, 301), 0, "a rise from there is");
        group.room_wait = None;
        assert_eq!(group.room_stalled_ns(500_000, 301), 0, "a new wait starts afresh");
    }
}
