//! Changes to this node's side of a connection, each a barrier against the peer's writers in
//! flight: wait for them, give up (fast), or fence their process (slow).

use crate::guard::{in_flight_incarnation, Acl, Slot};
use crate::liveness;
use crate::node::Node;
use mu_fabric::{ConnId, FabricError, PermError};
use std::time::{Duration, Instant};

impl Node {
    /// Changes `conn`'s side from `before` to what `change` makes of it, as one atomic step against
    /// the data path (which may move the side to error meanwhile: then `change` is asked again),
    /// and makes the change a barrier: see [`Node::await_barrier`]. The caller holds `control`.
    pub(crate) fn change_side(
        &self,
        conn: ConnId,
        wait: BarrierWait,
        change: impl Fn(Acl) -> Result<Acl, FabricError>,
    ) -> Result<(), PermError> {
        let slot = self.my_slot(conn)?;
        let mut before = slot.acl();
        loop {
            let after = change(before)?;
            match slot.replace(before, after) {
                Ok(word) => return self.await_barrier(conn, slot, before, after, word, wait),
                Err(now) => before = now,
            }
        }
    }

    /// After `before` was replaced by `after` on `conn`'s side, with `word` in flight (if any):
    /// waits until no operation that `after` forbids can still land.
    ///
    /// Only a writer of the incarnation bound in `before` can have been admitted (a writer checks
    /// the binding after marking itself in flight), so that is the only one to wait for — and the
    /// only process ever fenced. A word left odd by another incarnation belongs to a writer that
    /// was refused, or died refused: it copies nothing. `before.state` is no guide to what that
    /// writer was admitted under: after a fast change that gave up with `Busy`, the side is in
    /// error while the admitted copy goes on.
    fn await_barrier(
        &self,
        conn: ConnId,
        slot: &Slot,
        before: Acl,
        after: Acl,
        word: Option<u64>,
        wait: BarrierWait,
    ) -> Result<(), PermError> {
        let Some(word) = word else { return Ok(()) };
        let writer = in_flight_incarnation(word);
        if !after.takes_away_from(before) || writer != before.peer_incarnation {
            return Ok(());
        }
        let peer = self.bound_peer(conn.peer, writer).ok_or_else(|| FabricError::FenceFailed {
            node: conn.peer,
            why: format!("incarnation {writer} is in flight but was never mapped here"),
        })?;
        let settled = || (!slot.still_in_flight(word) || peer.process_exited()).then_some(());
        match wait {
            BarrierWait::Fast => {
                let deadline = Instant::now() + Duration::from_nanos(self.config.fast_wait_ns);
                while settled().is_none() {
                    if Instant::now() >= deadline {
                        // As on RDMA, a flag change under load breaks the connection. The
                        // revocation is not a barrier yet: the slow path (which can fence)
                        // finishes the job.
                        slot.move_to_error(after);
                        return Err(PermError::Busy(conn));
                    }
                    std::hint::spin_loop();
                }
                Ok(())
            }
            BarrierWait::Slow => {
                let patience = Duration::from_millis(self.config.fence_after_ms);
                if mu_fabric::wait::Backoff::BACKGROUND.wait_for(patience, settled).is_some() {
                    return Ok(());
                }
                // The writer is stuck in flight: fence its process for good.
                match peer.process.fence(Duration::from_millis(self.config.fence_death_timeout_ms))
                {
                    Ok(()) => Ok(()),
                    // A peer we could not pin (another pid namespace) whose liveness lock has been
                    // dead for the whole wait: its threads died with it long ago.
                    Err(_) if !liveness::is_alive(&peer.ctl) => Ok(()),
                    Err(why) => Err(FabricError::FenceFailed { node: conn.peer, why }.into()),
                }
            }
        }
    }
}

/// How a barrier waits for an in-flight writer.
#[derive(Clone, Copy)]
pub(crate) enum BarrierWait {
    /// Spin up to `fast_wait_ns`, then give up with `Busy` and leave the side in error.
    Fast,
    /// Wait up to `fence_after_ms`, then fence the writer's process.
    Slow,
}
