//! The heartbeat ring (§4.2, "Kernel failures"): "processes are arranged in a logical ring where
//! every process monitors its successor \[...\] uKharon Core increments this counter to indicate
//! that the process is alive. This counter is read by the predecessor process. If a process
//! RDMA-reads the same value twice, it reports its successor as having failed."
//!
//! What it catches: a process whose memory is still remotely readable but that no longer runs
//! (a core hung in the kernel; on shm, a stopped process). A process that died cleanly is the
//! crash detector's; a read that fails (the memory was deregistered) is reported at once here,
//! once the successor was read (before, its side of the connection may not be bound yet).
//!
//! "We make processes wait 30µs after the completion of an RDMA READ before issuing the next
//! one. As RDMA READs are issued sequentially, network delays do not negatively impact the
//! accuracy of this failure detector": the gap (`read_gap_ns`) runs from each completion, and
//! only one read is ever in flight.

use super::{Detector, Level, Reports};
use crate::view::{Member, View};

/// The ring's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// The wait between a read's completion and the next read (paper: 30 µs). It must exceed
    /// the longest time a live node takes between two increments of its counter.
    pub read_gap_ns: u64,
    /// How often a report is sent again until a view excludes the suspect.
    pub repeat_ns: u64,
}

impl Default for RingConfig {
    fn default() -> RingConfig {
        RingConfig { read_gap_ns: 30_000, repeat_ns: 100_000 }
    }
}

/// `me`'s successor in `view`'s ring: the next member in the view's order (by node id), the
/// first after the last. None when `me` is not a member or is the only one.
pub fn successor(view: &View, me: u16) -> Option<Member> {
    let at = view.members.iter().position(|m| m.node == me)?;
    let next = view.members[(at + 1) % view.members.len()];
    (next.node != me).then_some(next)
}

/// Whom `me` watches in `view`: its successor, if `me` is a member under its unique id.
fn watched(view: &View, me: Member) -> Option<Member> {
    successor(view, me.node).filter(|_| view.contains(me))
}

/// A read of `target`'s heartbeat counter for the runtime to post; handed back with its result
/// to [`Ring::on_read`]. A ticket from before a change of successor is recognised and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadTicket {
    pub target: Member,
    serial: u64,
}

/// How a read completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// The counter's value.
    Value(u64),
    /// The read failed: the successor's memory is no longer readable.
    Error,
}

/// One node's side of the ring: its own counter, the reads of its successor's, its reports.
#[derive(Clone, Debug)]
pub struct Ring {
    config: RingConfig,
    me: Member,
    counter: u64,
    successor: Option<Member>,
    /// The value of the successor's counter the last read returned.
    last_value: Option<u64>,
    /// The serial of the read in flight; serials are never reused.
    in_flight: Option<u64>,
    serial: u64,
    next_read_ns: u64,
    suspected: bool,
    reports: Reports,
}

impl Ring {
    /// `me` in `view`, its first read due at `now_ns`.
    pub fn new(config: RingConfig, me: Member, view: &View, now_ns: u64) -> Ring {
        Ring {
            config,
            me,
            counter: 0,
            successor: watched(view, me),
            last_value: None,
            in_flight: None,
            serial: 0,
            next_read_ns: now_ns,
            suspected: false,
            reports: Reports::new(me, view.epoch, config.repeat_ns),
        }
    }

    /// The member this node watches, if any.
    pub fn successor(&self) -> Option<Member> {
        self.successor
    }

    /// Increments this node's own counter and returns the value to publish where its
    /// predecessor reads it. The core calls it every turn of its loop, far more often than the
    /// read gap.
    pub fn heartbeat(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// The read to post now, if one is due: none while one is in flight, before the gap after
    /// the last completion, without a successor, or once the successor is suspected.
    pub fn poll(&mut self, now_ns: u64) -> Option<ReadTicket> {
        let target = self.successor?;
        if self.suspected || self.in_flight.is_some() || now_ns < self.next_read_ns {
            return None;
        }
        self.serial += 1;
        self.in_flight = Some(self.serial);
        Some(ReadTicket { target, serial: self.serial })
    }

    /// When the next read may be posted: None while one is in flight or none will be.
    pub fn next_read_ns(&self) -> Option<u64> {
        let reading = self.successor.is_some() && !self.suspected && self.in_flight.is_none();
        reading.then_some(self.next_read_ns)
    }

    /// A read completed at `now_ns`. The same value twice in a row, or an error, raises a
    /// report about the successor; the next read is due `read_gap_ns` after this completion.
    pub fn on_read(&mut self, ticket: ReadTicket, reading: Reading, now_ns: u64) {
        if self.in_flight != Some(ticket.serial) || self.successor != Some(ticket.target) {
            return;
        }
        self.in_flight = None;
        self.next_read_ns = now_ns.saturating_add(self.config.read_gap_ns);
        let stuck = match reading {
            // A successor never read yet may not have bound its side of the connection to
            // this node (it just joined, or this node did): its memory was never readable
            // here, so an error says nothing of its failure (a crash is the crash detector's).
            Reading::Error if self.last_value.is_none() => false,
            Reading::Error => true,
            Reading::Value(v) => self.last_value.replace(v) == Some(v),
        };
        if stuck {
            self.suspected = true;
            self.reports.raise(ticket.target, Level::Ring, now_ns);
        }
    }

    /// The read of `ticket` could not be posted: this node has no connection to its successor
    /// yet (one that just joined) or at the moment. Nothing was read, so nothing is reported
    /// (a successor that died is the crash detector's and the beats'); the next read is due
    /// `read_gap_ns` from now.
    pub fn on_not_posted(&mut self, ticket: ReadTicket, now_ns: u64) {
        if self.in_flight == Some(ticket.serial) {
            self.in_flight = None;
            self.next_read_ns = now_ns.saturating_add(self.config.read_gap_ns);
        }
    }

    /// The successor, if this node reports it.
    pub fn suspects(&self) -> Option<Member> {
        self.successor.filter(|_| self.suspected)
    }
}

impl Detector for Ring {
    /// A new view: a new successor starts fresh (no value yet, a first read due at once, any
    /// read in flight to the old one ignored); the same successor keeps its state, suspicion
    /// included, so its report repeats under the new epoch until a view excludes it.
    fn on_view(&mut self, view: &View, now_ns: u64) {
        if view.epoch <= self.reports.epoch() {
            return;
        }
        self.reports.on_view(view, now_ns);
        let next = watched(view, self.me);
        if next != self.successor {
            self.successor = next;
            self.last_value = None;
            self.in_flight = None;
            self.suspected = false;
            self.next_read_ns = now_ns;
        }
    }

    fn reports(&mut self) -> &mut Reports {
        &mut self.reports
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(nodes: &[u16]) -> Vec<Member> {
        nodes.iter().map(|&node| Member { node, uid: 100 + u64::from(node) }).collect()
    }

    fn view(epoch: u64, nodes: &[u16]) -> View {
        let mut v = View::initial(1, members(nodes), None, 20_000);
        v.epoch = epoch;
        v
    }

    fn me(node: u16) -> Member {
        Member { node, uid: 100 + u64::from(node) }
    }

    const GAP: u64 = 30_000;

    /// Runs one read of the ring: due at `now`, completing `latency` later with `reading`.
    fn read(ring: &mut Ring, now: u64, latency: u64, reading: Reading) -> u64 {
        let ticket = ring.poll(now).expect("a read is due");
        assert_eq!(ring.poll(now), None, "one read in flight at a time");
        ring.on_read(ticket, reading, now + latency);
        now + latency
    }

    /// §4.2 "processes are arranged in a logical ring where every process monitors its
    /// successor": the next member in the view's order, the last watching the first.
    #[test]
    fn each_member_watches_the_next_in_the_view() {
        let v = view(0, &[2, 5, 9]);
        assert_eq!(successor(&v, 2), Some(me(5)));
        assert_eq!(successor(&v, 9), Some(me(2)));
        assert_eq!(successor(&v, 4), None, "not a member");
        assert_eq!(successor(&view(0, &[3]), 3), None, "alone");
    }

    /// §4.2 "wait 30µs after the completion of an RDMA READ before issuing the next one": the
    /// next read is due a gap after the completion, however slow the read was.
    #[test]
    fn the_gap_runs_from_each_completion() {
        let mut ring = Ring::new(RingConfig::default(), me(2), &view(0, &[2, 5]), 1_000);
        let done = read(&mut ring, 1_000, 7_000, Reading::Value(1));
        assert_eq!(done, 8_000);
        assert_eq!(ring.next_read_ns(), Some(8_000 + GAP));
        assert_eq!(ring.poll(8_000 + GAP - 1), None);
        let done = read(&mut ring, 8_000 + GAP, 50_000, Reading::Value(2));
        assert_eq!(ring.next_read_ns(), Some(done + GAP));
        assert!(ring.reports().is_empty(), "a slow read of an advancing counter is no failure");
    }

    /// §4.2 "If a process RDMA-reads the same value twice, it reports its successor as having
    /// failed": two equal values in a row raise a Ring report and stop the reads; values that
    /// advance never do.
    #[test]
    fn the_same_value_twice_reports_the_successor() {
        let mut ring = Ring::new(RingConfig::default(), me(2), &view(3, &[2, 5, 9]), 0);
        let mut now = 0;
        for value in [4, 9, 10, 11] {
            now = read(&mut ring, now, 2_000, Reading::Value(value)) + GAP;
        }
        assert!(ring.reports().is_empty() && ring.suspects().is_none());
        now = read(&mut ring, now, 2_000, Reading::Value(11));
        assert_eq!(ring.suspects(), Some(me(5)));
        let sent = ring.reports().due(now);
        assert_eq!(sent.len(), 1);
        assert_eq!(
            (sent[0].suspect, sent[0].level, sent[0].reporter_epoch),
            (me(5), Level::Ring, 3)
        );
        assert_eq!(ring.poll(now + GAP), None, "no more reads of a suspect");
        assert_eq!(ring.next_read_ns(), None);
    }

    /// A failed read (the successor's memory is gone) is reported at once, without a second;
    /// but not before the successor was read once: its side of the connection may not be
    /// bound yet (it just joined).
    #[test]
    fn a_read_error_reports_at_once_once_the_successor_was_read() {
        let mut ring = Ring::new(RingConfig::default(), me(9), &view(0, &[2, 5, 9]), 0);
        let now = read(&mut ring, 0, 1_000, Reading::Error) + GAP;
        assert!(ring.suspects().is_none() && ring.reports().is_empty());
        let now = read(&mut ring, now, 1_000, Reading::Value(4)) + GAP;
        let now = read(&mut ring, now, 1_000, Reading::Error);
        assert_eq!(ring.suspects(), Some(me(2)));
        assert_eq!(ring.reports().due(now)[0].level, Level::Ring);
    }

    /// A read that could not be posted (no connection to a successor that just joined) reads
    /// nothing: no report, and the next read is due a gap later.
    #[test]
    fn a_read_never_posted_reports_nothing() {
        let mut ring = Ring::new(RingConfig::default(), me(9), &view(0, &[2, 5, 9]), 0);
        let ticket = ring.poll(0).expect("a read is due");
        ring.on_not_posted(ticket, 500);
        assert!(ring.suspects().is_none() && ring.reports().is_empty());
        assert_eq!(ring.next_read_ns(), Some(500 + GAP));
        read(&mut ring, 500 + GAP, 1_000, Reading::Value(3));
        assert!(ring.suspects().is_none(), "one value read is no failure");
    }

    /// §4.2 last paragraph: the report repeats until a view excludes the successor; that view
    /// gives a new successor, watched from scratch (one value read is never a failure), and a
    /// read still in flight to the old one is ignored.
    #[test]
    fn a_new_view_gives_a_fresh_successor() {
        let config = RingConfig { read_gap_ns: GAP, repeat_ns: 50_000 };
        let mut ring = Ring::new(config, me(2), &view(0, &[2, 5, 9]), 0);
        let mut now = read(&mut ring, 0, 1_000, Reading::Value(7)) + GAP;
        now = read(&mut ring, now, 1_000, Reading::Value(7));
        assert_eq!(ring.reports().due(now).len(), 1);
        assert_eq!(ring.reports().due(now + 49_999).len(), 0);
        assert_eq!(ring.reports().due(now + 50_000).len(), 1, "repeated");
        // A view that keeps the suspect: the report goes on under the new epoch.
        ring.on_view(&view(1, &[2, 5, 9]), now + 60_000);
        assert_eq!(ring.suspects(), Some(me(5)));
        assert_eq!(ring.reports().due(now + 60_000)[0].reporter_epoch, 1);
        // The view that excludes it: silence, and a fresh successor.
        ring.on_view(&view(2, &[2, 9]), now + 70_000);
        assert!(ring.reports().is_empty());
        assert_eq!((ring.successor(), ring.suspects()), (Some(me(9)), None));
        let stale = ReadTicket { target: me(5), serial: 1 };
        ring.on_read(stale, Reading::Value(7), now + 70_001);
        let t = now + 70_001;
        let now = read(&mut ring, t, 1_000, Reading::Value(7));
        assert!(ring.suspects().is_none(), "the first value of a new successor is no repeat");
        read(&mut ring, now + GAP, 1_000, Reading::Value(8));
        assert!(ring.suspects().is_none());
    }

    /// A read in flight when the successor changes completes later: ignored, whatever its value.
    #[test]
    fn a_read_to_the_old_successor_is_ignored() {
        let mut ring = Ring::new(RingConfig::default(), me(2), &view(0, &[2, 5, 9]), 0);
        let first = read(&mut ring, 0, 1_000, Reading::Value(3));
        let ticket = ring.poll(first + GAP).unwrap();
        ring.on_view(&view(1, &[2, 9]), first + GAP + 10);
        ring.on_read(ticket, Reading::Value(3), first + GAP + 20);
        assert!(ring.suspects().is_none() && ring.reports().is_empty());
        assert_eq!(ring.next_read_ns(), Some(first + GAP + 10), "the new successor's first read");
    }

    /// The counter a node publishes advances on every heartbeat; a node the view excludes (or
    /// that is alone) watches nobody.
    #[test]
    fn the_local_counter_advances_and_outsiders_watch_nobody() {
        let mut ring = Ring::new(RingConfig::default(), me(2), &view(0, &[2, 5]), 0);
        assert_eq!((ring.heartbeat(), ring.heartbeat()), (1, 2));
        ring.on_view(&view(1, &[5, 9]), 10);
        assert_eq!((ring.successor(), ring.poll(10), ring.next_read_ns()), (None, None, None));
    }
}
