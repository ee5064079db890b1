//! Broadcast heartbeats, the catastrophic detector's node side (§4.2, "Catastrophic failures"):
//! "processes periodically broadcast a heartbeat and poll for heartbeats from others. Processes
//! keep track of the set of processes they recently received a heartbeat from. They compare
//! this set with the current membership and report which processes they consider failed to the
//! coordinator leader."
//!
//! A broadcast is a write of this node's counter into every member's board (one slot per
//! sender); the runtime reads its own board and hands each slot's value here. A member whose
//! value has not changed for `timeout_ns` (paper: 1 ms, "2−3 orders of magnitude higher than the
//! common case latency") is suspected, and reported as a lost link, "I cannot hear X": the
//! leader, not this node, decides who leaves (the [`super::graph`] module). The report repeats
//! until a view excludes X, or until X is heard again, which sends one "the link is back".

use super::{Detector, Level, Reports};
use crate::view::{Member, View};

/// The catastrophic detector's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BeatConfig {
    /// How long a member's heartbeat may stay unchanged before it is suspected (paper: 1 ms).
    pub timeout_ns: u64,
    /// How often this node broadcasts its heartbeat; well under the timeout, so that a delayed
    /// write or two is no failure.
    pub broadcast_period_ns: u64,
    /// How often a report is sent again.
    pub repeat_ns: u64,
}

impl Default for BeatConfig {
    fn default() -> BeatConfig {
        BeatConfig { timeout_ns: 1_000_000, broadcast_period_ns: 100_000, repeat_ns: 100_000 }
    }
}

/// What this node knows of one member's heartbeats.
#[derive(Clone, Copy, Debug)]
struct Peer {
    member: Member,
    last_value: Option<u64>,
    /// When the value last changed, or when the watch began.
    heard_ns: u64,
    suspected: bool,
}

/// One node's catastrophic detector.
#[derive(Clone, Debug)]
pub struct Beats {
    config: BeatConfig,
    me: Member,
    counter: u64,
    next_broadcast_ns: u64,
    peers: Vec<Peer>,
    reports: Reports,
}

impl Beats {
    /// `me` watching `view`'s other members from `now_ns` (each gets a full timeout to be
    /// heard); its first broadcast is due at once. `me` need not be a member: a coordinator
    /// leader outside the view watches every member.
    pub fn new(config: BeatConfig, me: Member, view: &View, now_ns: u64) -> Beats {
        let mut beats = Beats {
            config,
            me,
            counter: 0,
            next_broadcast_ns: now_ns,
            peers: Vec::new(),
            reports: Reports::new(me, view.epoch, config.repeat_ns),
        };
        beats.watch(view, now_ns);
        beats
    }

    fn watch(&mut self, view: &View, now_ns: u64) {
        let before = std::mem::take(&mut self.peers);
        for &member in view.members.iter().filter(|m| m.node != self.me.node) {
            let kept = before.iter().find(|p| p.member == member).copied();
            let fresh = Peer { member, last_value: None, heard_ns: now_ns, suspected: false };
            self.peers.push(kept.unwrap_or(fresh));
        }
    }

    /// The heartbeat to write into every member's board, when one is due; also suspects the
    /// members silent for the timeout (see [`Beats::check`]).
    pub fn poll(&mut self, now_ns: u64) -> Option<u64> {
        self.check(now_ns);
        if now_ns < self.next_broadcast_ns {
            return None;
        }
        self.next_broadcast_ns = now_ns.saturating_add(self.config.broadcast_period_ns);
        self.counter += 1;
        Some(self.counter)
    }

    /// When [`Beats::poll`] next has something to do: a broadcast, or a member's timeout.
    pub fn next_due_ns(&self) -> u64 {
        let timeouts = self.peers.iter().filter(|p| !p.suspected);
        let first_timeout = timeouts.map(|p| p.heard_ns.saturating_add(self.config.timeout_ns));
        first_timeout.min().unwrap_or(u64::MAX).min(self.next_broadcast_ns)
    }

    /// `node`'s slot in this node's board read `value` at `now_ns`. A value that changed is a
    /// heartbeat; one that clears a suspicion withdraws the report and sends "the link is back".
    /// A node that is not watched (not a member) is ignored.
    pub fn on_beat(&mut self, node: u16, value: u64, now_ns: u64) {
        let Some(peer) = self.peers.iter_mut().find(|p| p.member.node == node) else {
            return;
        };
        if peer.last_value.replace(value) == Some(value) {
            return;
        }
        peer.heard_ns = now_ns;
        if peer.suspected {
            peer.suspected = false;
            self.reports.withdraw(peer.member, Level::Link);
            self.reports.send_once(peer.member, Level::LinkBack, now_ns);
        }
    }

    /// Suspects every member whose heartbeat has not changed for `timeout_ns`, raising a Link
    /// report about it.
    pub fn check(&mut self, now_ns: u64) {
        for peer in self.peers.iter_mut().filter(|p| !p.suspected) {
            if now_ns.saturating_sub(peer.heard_ns) >= self.config.timeout_ns {
                peer.suspected = true;
                self.reports.raise(peer.member, Level::Link, now_ns);
            }
        }
    }

    /// The members this node cannot hear.
    pub fn suspected(&self) -> impl Iterator<Item = Member> + '_ {
        self.peers.iter().filter(|p| p.suspected).map(|p| p.member)
    }
}

impl Detector for Beats {
    /// A new view: its new members are watched from `now_ns`; members it keeps keep their
    /// state (a suspicion goes on being reported under the new epoch); the others are dropped
    /// with their reports.
    fn on_view(&mut self, view: &View, now_ns: u64) {
        if view.epoch <= self.reports.epoch() {
            return;
        }
        self.reports.on_view(view, now_ns);
        self.watch(view, now_ns);
    }

    fn reports(&mut self) -> &mut Reports {
        &mut self.reports
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(node: u16) -> Member {
        Member { node, uid: 100 + u64::from(node) }
    }

    fn view(epoch: u64, nodes: &[u16]) -> View {
        let mut v = View::initial(1, nodes.iter().map(|&n| m(n)).collect(), None, 20_000);
        v.epoch = epoch;
        v
    }

    const MS: u64 = 1_000_000;

    fn levels(beats: &mut Beats, now_ns: u64) -> Vec<(u16, Level)> {
        beats.reports().due(now_ns).iter().map(|r| (r.suspect.node, r.level)).collect()
    }

    /// §4.2 "processes periodically broadcast a heartbeat": one new counter value per period.
    #[test]
    fn heartbeats_are_broadcast_every_period() {
        let config = BeatConfig { broadcast_period_ns: 100, ..BeatConfig::default() };
        let mut beats = Beats::new(config, m(1), &view(0, &[1, 2]), 1_000);
        assert_eq!(beats.poll(1_000), Some(1));
        assert_eq!(beats.poll(1_099), None);
        assert_eq!(beats.next_due_ns(), 1_100);
        assert_eq!(beats.poll(1_100), Some(2));
    }

    /// §4.2 "a timeout-based scheme \[...\] We set the timeout to 1ms": a member heard within the
    /// timeout is never suspected; one whose value stops changing is reported as a lost link
    /// exactly one timeout after its last change, and repeatedly after that.
    #[test]
    fn a_silent_member_is_reported_after_the_timeout() {
        let mut beats = Beats::new(BeatConfig::default(), m(1), &view(4, &[1, 2, 3]), 0);
        for t in 0..30 {
            let now = t * MS / 4;
            beats.on_beat(2, t, now);
            beats.on_beat(3, 7, now);
            beats.poll(now);
        }
        // Node 3's value never changed after its first reading at 0.
        assert_eq!(beats.suspected().collect::<Vec<_>>(), vec![m(3)]);
        let mut beats = Beats::new(BeatConfig::default(), m(1), &view(4, &[1, 2, 3]), 0);
        beats.on_beat(2, 1, 10);
        beats.on_beat(3, 1, 20);
        beats.check(MS + 9);
        assert_eq!(beats.suspected().count(), 0);
        assert_eq!(beats.next_due_ns(), 0, "the first broadcast is still due");
        beats.poll(0);
        assert_eq!(beats.next_due_ns(), 100_000);
        beats.poll(MS);
        beats.check(MS + 10);
        assert_eq!(beats.suspected().collect::<Vec<_>>(), vec![m(2)]);
        assert_eq!(levels(&mut beats, MS + 10), vec![(2, Level::Link)]);
        beats.on_beat(3, 1, MS + 15);
        beats.check(MS + 20);
        assert_eq!(levels(&mut beats, MS + 20), vec![(3, Level::Link)], "same value, no beat");
        let sent = beats.reports().due(MS + 10 + 100_000);
        assert_eq!(sent.len(), 1, "node 2's report repeats");
        assert_eq!(sent[0].reporter_epoch, 4);
    }

    /// §4.2 "keep track of the set of processes they recently received a heartbeat from": a
    /// suspect heard again is no longer reported, and the leader is told the link is back.
    #[test]
    fn a_member_heard_again_is_cleared() {
        let mut beats = Beats::new(BeatConfig::default(), m(1), &view(0, &[1, 2]), 0);
        beats.check(MS);
        assert_eq!(levels(&mut beats, MS), vec![(2, Level::Link)]);
        beats.on_beat(2, 5, MS + 1);
        assert_eq!(beats.suspected().count(), 0);
        assert_eq!(levels(&mut beats, MS + 1), vec![(2, Level::LinkBack)]);
        assert!(beats.reports().due(10 * MS).is_empty(), "nothing repeats");
        beats.check(2 * MS);
        assert!(beats.suspected().count() == 0, "heard at MS + 1");
        beats.check(2 * MS + 1);
        assert_eq!(beats.suspected().collect::<Vec<_>>(), vec![m(2)]);
    }

    /// §4.2 last paragraph: reports stop once a view excludes the suspect; a view that keeps it
    /// carries the report on under its epoch; a member new in a view gets a full timeout.
    #[test]
    fn views_drop_excluded_suspects_and_watch_new_members() {
        let mut beats = Beats::new(BeatConfig::default(), m(1), &view(0, &[1, 2, 3]), 0);
        beats.on_beat(3, 1, 0);
        beats.check(MS);
        assert_eq!(beats.suspected().count(), 2);
        beats.on_view(&view(1, &[1, 2, 3]), MS + 5);
        let sent = beats.reports().due(MS + 5);
        assert!(sent.len() == 2 && sent.iter().all(|r| r.reporter_epoch == 1));
        beats.on_view(&view(2, &[1, 3, 4]), 2 * MS);
        assert_eq!(beats.suspected().collect::<Vec<_>>(), vec![m(3)]);
        assert_eq!(levels(&mut beats, 2 * MS), vec![(3, Level::Link)]);
        beats.check(3 * MS - 1);
        assert_eq!(beats.suspected().count(), 1, "node 4 has until 3 ms");
        beats.check(3 * MS);
        assert_eq!(beats.suspected().count(), 2);
        beats.on_beat(9, 1, 3 * MS);
        assert_eq!(beats.suspected().count(), 2, "a non-member's slot is ignored");
    }
}
