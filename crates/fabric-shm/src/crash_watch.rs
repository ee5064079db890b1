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
use crate::layout::H_LIVENESS;
use crate::liveness;
use crate::mapping::Mapping;
use crate::peer::Peer;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

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
        let word = peer.ctl.u32_at(H_LIVENESS);
        let seen = word.load(Ordering::Acquire);
        if !liveness::word_alive(seen) {
            // The kernel woke one waiter of this word: wake the rest.
            futex_wake(word);
            drop(peer);
            if let Some(own_ctl) = own_ctl.upgrade() {
                crate::doorbell::ring(&own_ctl);
            }
            return;
        }
        let waiting = seen | liveness::FUTEX_WAITERS;
        if seen != waiting
            && word.compare_exchange(seen, waiting, Ordering::AcqRel, Ordering::Acquire).is_err()
        {
            continue; // changed under us (the owner died): look again
        }
        futex_wait(word, waiting, RECHECK_NS);
    }
}
