//! When `Active` was true on this node, per view: the union of the leases the core published,
//! on the host's monotonic clock; and when each view was learnt. Processes record theirs so that a test can check, across
//! processes, that no two views were active at overlapping times (Appendix B).

use crate::published::Lease;
use std::collections::BTreeMap;

/// `Active(view of epoch)` was true at some time in `[from_ns, until_ns)` and never outside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActiveSpan {
    pub epoch: u64,
    pub from_ns: u64,
    pub until_ns: u64,
}

/// How many views' spans are kept (the oldest are dropped first).
const SPANS_KEPT: usize = 64;

/// See the module docs.
#[derive(Debug, Default)]
pub struct SpanRecorder {
    spans: BTreeMap<u64, ActiveSpan>,
    last: Option<Lease>,
    /// Per epoch, when the view was learnt (seen after the poll that learnt it).
    learnt: BTreeMap<u64, u64>,
}

impl SpanRecorder {
    /// The lease published now (`seen_ns`, read after the poll that may have published it).
    /// A lease on another epoch replaced the last one at or before `seen_ns`: the last one's
    /// span ends there, if not before (the published lease is the only one `Active` reads).
    pub fn observe(&mut self, lease: Option<Lease>, seen_ns: u64) {
        let Some(lease) = lease else { return };
        if self.last == Some(lease) {
            return;
        }
        if let Some(last) = self.last.filter(|l| l.epoch != lease.epoch) {
            if let Some(span) = self.spans.get_mut(&last.epoch) {
                span.until_ns = span.until_ns.min(seen_ns.max(span.from_ns));
            }
        }
        self.last = Some(lease);
        if lease.end_ns <= lease.start_ns {
            return;
        }
        let span = self.spans.entry(lease.epoch).or_insert(ActiveSpan {
            epoch: lease.epoch,
            from_ns: lease.start_ns,
            until_ns: lease.end_ns,
        });
        span.from_ns = span.from_ns.min(lease.start_ns);
        span.until_ns = span.until_ns.max(lease.end_ns);
        while self.spans.len() > SPANS_KEPT {
            self.spans.pop_first();
        }
    }

    /// View `epoch` was learnt at or before `seen_ns`.
    pub fn learnt(&mut self, epoch: u64, seen_ns: u64) {
        self.learnt.entry(epoch).or_insert(seen_ns);
        while self.learnt.len() > SPANS_KEPT {
            self.learnt.pop_first();
        }
    }

    /// (epoch, when it was learnt), by epoch.
    pub fn learnt_times(&self) -> Vec<(u64, u64)> {
        self.learnt.iter().map(|(&e, &t)| (e, t)).collect()
    }

    /// The spans, by epoch.
    pub fn spans(&self) -> Vec<ActiveSpan> {
        self.spans.values().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewals_extend_a_span_and_a_new_epoch_ends_the_last() {
        let mut r = SpanRecorder::default();
        r.observe(None, 5);
        r.observe(Some(Lease { epoch: 1, start_ns: 10, end_ns: 20 }), 12);
        r.observe(Some(Lease { epoch: 1, start_ns: 15, end_ns: 30 }), 16);
        assert_eq!(r.spans(), vec![ActiveSpan { epoch: 1, from_ns: 10, until_ns: 30 }]);
        // Published at 25 at the latest: view 1's lease stopped counting then.
        r.observe(Some(Lease { epoch: 2, start_ns: 40, end_ns: 50 }), 25);
        let want = vec![
            ActiveSpan { epoch: 1, from_ns: 10, until_ns: 25 },
            ActiveSpan { epoch: 2, from_ns: 40, until_ns: 50 },
        ];
        assert_eq!(r.spans(), want);
    }
}
