//! Crash notices that wake: a thread per live peer incarnation, asleep on the peer's death
//! flag, that rings this node's doorbell when the peer dies.
//!
//! A peer's death flag ([`crate::liveness`]) is a robust mutex that its liveness thread holds
//! for its whole life. The watcher waits on it as a lock waiter would: it sets the word's
//! `FUTEX_WAITERS` bit (which leaves the owner's thread id, and so the flag, as it was) and
//! sleeps on the word. When the owner dies, the kernel sets `FUTEX_OWNER_DIED` and, seeing the
//! bit, wakes one waiter; that waiter wakes the others (the other peers' watchers of the same
//! node) and rings its own node's doorbell. So a node's idle threads learn of a crash within a
//! wake-up, not at their next timed look (up to a detector read period later). Nothing depends
//! on it: a crash is still read from the flag by whoever looks, woken or not.

use crate::futex::{futex_wait, futex_wake};
use crate::layout::{H_DEATH_NOTICE, H_LIVENESS};
use crate::liveness;
use crate::mapping::Mapping;
use crate::peer::Peer;
use mu_fabric::{FabricError, NodeId};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How long a watcher sleeps before it looks whether it is still wanted (its node or its peer
/// incarnation gone); a crash wakes it at once.
const RECHECK_NS: u64 = 100_000_000;

/// Starts watching `peer`; `own_ctl` is the watching node's control segment, whose doorbell a
/// crash rings. The thread holds neither for longer than one sleep once both sides let go:
/// it ends when the peer dies, when this node forgets that incarnation, or when the node is
/// dropped. A failure to start a thread leaves the peer unwatched (crashes are then noticed
/// at the next look, as before).
pub(crate) fn start(peer: &Arc<Peer>, own_ctl: &Arc<Mapping>) {
    let peer = Arc::downgrade(peer);
    let own_ctl = Arc::downgrade(own_ctl);
    let _ = std::thread::Builder::new().name("mu-crash-watch".into()).stack_size(64 * 1024).spawn(
        move || {
            // Woken by a crash, it should run at once, not after the slice of what spins here.
            let _ = mu_cpu::request_slice_ns(mu_cpu::SLICE_NS_MIN);
            watch(&peer, &own_ctl)
        },
    );
}

fn watch(peer: &Weak<Peer>, own_ctl: &Weak<Mapping>) {
    loop {
        let Some(peer) = peer.upgrade() else { return };
        if own_ctl.strong_count() == 0 {
            return;
        }
        if sleep_unless_dead(&peer.ctl, RECHECK_NS) {
            drop(peer);
            if let Some(own_ctl) = own_ctl.upgrade() {
                crate::doorbell::ring(&own_ctl);
            }
            return;
        }
    }
}

/// Sleeps on the death flag in `ctl` as a lock waiter, at most `timeout_ns`; true if its
/// owner is dead. Then it wakes every other waiter, whichever woke it: the kernel wakes only
/// one waiter when it marks the owner dead, and the others (other nodes' watchers) sleep on
/// until someone does; and it wakes the watchers outside the fabric ([`DeathWatch`]), who
/// sleep on another word.
fn sleep_unless_dead(ctl: &Mapping, timeout_ns: u64) -> bool {
    let word = ctl.u32_at(H_LIVENESS);
    let dead = || {
        let dead = !liveness::word_alive(word.load(Ordering::Acquire));
        if dead {
            futex_wake(word);
            futex_wake(ctl.u32_at(H_DEATH_NOTICE));
        }
        dead
    };
    loop {
        if dead() {
            return true;
        }
        let seen = word.load(Ordering::Acquire);
        let waiting = seen | liveness::FUTEX_WAITERS;
        if seen != waiting
            && word.compare_exchange(seen, waiting, Ordering::AcqRel, Ordering::Acquire).is_err()
        {
            continue; // changed under us (the owner died): look again
        }
        futex_wait(word, waiting, timeout_ns);
        return dead();
    }
}

/// One node's death flag, watched from outside the fabric: by a client of a replica on this
/// host, say, which learns of the replica's crash within a wake-up instead of waiting for an
/// answer that will not come (the process's sockets close only once the kernel has torn down
/// its memory, milliseconds later for a replica with large logs). It sleeps on the node's
/// death-notice word, which the other nodes' crash watchers wake as soon as one of them is
/// woken by the kernel: it never stands in the liveness word's queue, where the kernel's one
/// wake could fall to it and delay the nodes' own notice by a wake-up. Without a node watching
/// (none on this host), it sees the death at its next look at the flag (`recheck`). Nothing
/// depends on it: a watcher that never wakes leaves its owner to its timeouts.
pub struct DeathWatch {
    ctl: Mapping,
    recheck_ns: u64,
}

impl DeathWatch {
    /// Node `node` of cluster `cluster_id` in `dir`, its incarnation of now, looked at every
    /// `recheck` besides the wakes.
    pub fn open(
        dir: &Path,
        node: NodeId,
        cluster_id: u64,
        recheck: Duration,
    ) -> Result<DeathWatch, FabricError> {
        let (ctl, _) = crate::layout::open_ctl(dir, node, cluster_id)?;
        let recheck_ns = u64::try_from(recheck.as_nanos()).unwrap_or(u64::MAX).max(1);
        Ok(DeathWatch { ctl, recheck_ns })
    }

    /// Sleeps until the node is dead (true) or about `wait` has passed (false).
    pub fn wait_dead(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let notice = self.ctl.u32_at(H_DEATH_NOTICE);
        loop {
            if !liveness::is_alive(&self.ctl) {
                return true;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            let left_ns = u64::try_from(left.as_nanos()).unwrap_or(u64::MAX);
            let seen = notice.load(Ordering::Acquire);
            futex_wait(notice, seen, left_ns.clamp(1, self.recheck_ns));
        }
    }
}
