//! Crash notification without a timeout (§4.2, "Userspace failures"). The paper's deadbeat is a
//! kernel patch: when a registered process dies, the kernel's exit path has a module multicast
//! a notification, which "does not use timeouts, \[so\] it has no false positives".
//!
//! On this project's fabrics the kernel already keeps such a signal without a patch (shm's
//! robust-futex flag, ofi's liveness port, the lock file on verbs): set by the kernel when the
//! peer's process is gone, never true for a live one. It is pulled, not pushed: the runtime
//! polls it for each peer [`Crashes::watched`] lists and hands a death here, which becomes a
//! report to the leader, repeated until a view excludes the peer.

use super::{Detector, Level, Reports};
use crate::view::{Member, View};

/// One node's crash detector: the peers it watches, the deaths it reports.
#[derive(Clone, Debug)]
pub struct Crashes {
    me: Member,
    /// The view's members but `me`, each with whether its death was signalled.
    peers: Vec<(Member, bool)>,
    reports: Reports,
}

impl Crashes {
    /// `me` in `view`; reports repeat every `repeat_ns`.
    pub fn new(repeat_ns: u64, me: Member, view: &View) -> Crashes {
        let mut crashes =
            Crashes { me, peers: Vec::new(), reports: Reports::new(me, view.epoch, repeat_ns) };
        crashes.watch(view);
        crashes
    }

    fn watch(&mut self, view: &View) {
        let before = std::mem::take(&mut self.peers);
        self.peers = view
            .members
            .iter()
            .filter(|m| m.node != self.me.node)
            .map(|&m| (m, before.iter().any(|&(p, dead)| p == m && dead)))
            .collect();
    }

    /// The peers whose death signal the runtime should poll: the members still thought alive.
    pub fn watched(&self) -> impl Iterator<Item = Member> + '_ {
        self.peers.iter().filter(|(_, dead)| !dead).map(|&(m, _)| m)
    }

    /// The fabric signalled `peer`'s death: report it (once raised, it repeats). A peer this
    /// node does not watch (not a member, or an older incarnation) is ignored.
    pub fn on_death(&mut self, peer: Member, now_ns: u64) {
        if let Some(entry) = self.peers.iter_mut().find(|(m, _)| *m == peer) {
            entry.1 = true;
            self.reports.raise(peer, Level::Crash, now_ns);
        }
    }
}

impl Detector for Crashes {
    /// A new view: watch its members; a dead peer it still holds stays reported (under the new
    /// epoch), one it excludes is forgotten.
    fn on_view(&mut self, view: &View, now_ns: u64) {
        if view.epoch <= self.reports.epoch() {
            return;
        }
        self.reports.on_view(view, now_ns);
        self.watch(view);
    }

    fn reports(&mut self) -> &mut Reports {
        &mut self.reports
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(node: u16, uid: u64) -> Member {
        Member { node, uid }
    }

    fn view(epoch: u64, members: &[Member]) -> View {
        let mut v = View::initial(1, members.to_vec(), None, 20_000);
        v.epoch = epoch;
        v
    }

    /// §4.2 "Userspace failures" and the last paragraph: a death signal becomes a Crash report,
    /// repeated (under each new epoch) until a view excludes the dead peer; it is then no longer
    /// watched.
    #[test]
    fn a_death_is_reported_until_a_view_excludes_it() {
        let (me, x, y) = (m(1, 11), m(2, 12), m(3, 13));
        let mut crashes = Crashes::new(100, me, &view(0, &[me, x, y]));
        assert_eq!(crashes.watched().collect::<Vec<_>>(), vec![x, y]);
        crashes.on_death(x, 1_000);
        assert_eq!(crashes.watched().collect::<Vec<_>>(), vec![y]);
        let sent = crashes.reports().due(1_000);
        assert_eq!(sent.len(), 1);
        assert_eq!((sent[0].reporter, sent[0].suspect, sent[0].level), (me, x, Level::Crash));
        assert_eq!(crashes.reports().due(1_100).len(), 1, "repeated");
        crashes.on_view(&view(1, &[me, x, y]), 1_150);
        assert_eq!(crashes.reports().due(1_150)[0].reporter_epoch, 1);
        assert_eq!(crashes.watched().collect::<Vec<_>>(), vec![y], "still dead");
        crashes.on_view(&view(2, &[me, y]), 1_200);
        assert!(crashes.reports().is_empty());
        assert_eq!(crashes.watched().collect::<Vec<_>>(), vec![y]);
    }

    /// §3.1 unique ids: the death of an old incarnation says nothing about the node that
    /// rejoined under a new unique id; a rejoined node is watched afresh.
    #[test]
    fn an_old_incarnation_is_not_the_new_one() {
        let (me, old, new) = (m(1, 11), m(2, 12), m(2, 22));
        let mut crashes = Crashes::new(100, me, &view(0, &[me, old]));
        crashes.on_death(old, 10);
        crashes.on_view(&view(1, &[me, new]), 20);
        assert_eq!(crashes.watched().collect::<Vec<_>>(), vec![new]);
        crashes.on_death(old, 30);
        assert!(crashes.reports().is_empty(), "a late signal about the old incarnation");
        crashes.on_death(m(7, 70), 30);
        assert!(crashes.reports().is_empty(), "not a member");
    }
}
