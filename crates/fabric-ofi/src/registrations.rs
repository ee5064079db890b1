//! Access control: the registrations that let a peer's operations in, kept in line with each
//! side's state and rights, and the revocation that closes them and fences.

use crate::fencing::FenceWait;
use crate::keys::{data_key, Kind};
use crate::node::{Control, Node, RegionEntry};
use crate::side::SideState;
use mu_fabric::{Access, ConnId};
use std::sync::MutexGuard;
use std::time::Duration;

impl Node {
    /// Makes the side's registrations match what it allows now: one per region in whose scope
    /// the side is and kind of access that both the region and the side's flags allow, while the side accepts remote
    /// operations. Returns whether a registration was closed (a right was taken away).
    pub(crate) fn sync_registrations(
        &self,
        control: &Control,
        conn: ConnId,
        side: &mut SideState,
    ) -> bool {
        let mut wanted: Vec<(u64, &RegionEntry, Kind)> = Vec::new();
        if let (true, Some(b)) = (side.state.accepts_remote(), &side.binding) {
            for entry in control.regions.values().filter(|e| e.scope.admits(conn)) {
                for kind in Kind::ALL {
                    let flag = match kind {
                        Kind::Read => Access::READ,
                        Kind::Write => Access::WRITE,
                        Kind::Atomic => Access::ATOMIC,
                    };
                    if entry.access.contains(flag) && side.access.contains(flag) {
                        let key = data_key(
                            entry.region.id,
                            kind,
                            conn.peer,
                            conn.channel,
                            b.peer_incarnation,
                        );
                        wanted.push((key, entry, kind));
                    }
                }
            }
        }
        let before = side.registrations.len();
        side.registrations.retain(|(key, _)| wanted.iter().any(|(k, _, _)| k == key));
        let revoked = side.registrations.len() < before;
        for (key, entry, kind) in wanted {
            if side.registrations.iter().any(|(k, _)| *k == key) {
                continue;
            }
            // SAFETY: the registration lives in the side, which the node drops (with every
            // registration) before the region's memory can go: each region entry holds an
            // `Arc` to its memory for as long as the node lives.
            let registered = unsafe {
                self.domain.register(
                    entry.region.mem.ptr(),
                    entry.region.len_bytes.max(1),
                    matches!(kind, Kind::Read | Kind::Atomic),
                    matches!(kind, Kind::Write | Kind::Atomic),
                    key,
                )
            };
            match registered {
                Ok(r) => side.registrations.push((key, r)),
                // Only a duplicate key or exhausted provider resources get here; the peer's
                // operations are then refused, which is safe.
                Err(_) => continue,
            }
        }
        revoked
    }

    /// Brings the side's registrations in line with its state and flags and, if a right was
    /// taken away now or earlier without a fence, fences, waiting at most `timeout`. The
    /// node's control lock is released before the wait: a peer slow to answer holds up only
    /// this side.
    pub(crate) fn revoke(
        &self,
        control: MutexGuard<'_, Control>,
        conn: ConnId,
        st: &mut SideState,
        timeout: Duration,
    ) -> Result<(), FenceWait> {
        if self.sync_registrations(&control, conn, st) && st.binding.is_some() {
            st.unfenced = true;
            // Streams cut for an earlier right are no barrier for this one either.
            st.cut.clear();
            // A read posted before this right was taken away does not cover it.
            if let Some((old, _)) = st.fence.take() {
                if let Ok(channel) = self.channel(conn.channel) {
                    self.abandon_control(&channel, old);
                }
            }
        }
        drop(control);
        if st.unfenced {
            self.fence(conn, st, timeout)?;
            st.unfenced = false;
        }
        Ok(())
    }

    /// Makes a side's registrations match its state after the data path changed it (an error
    /// completion moved it to the error state).
    pub(crate) fn refresh_registrations(&self, conn: ConnId) {
        let control = self.control.lock().expect("control");
        if let Some(side) = control.sides.get(&conn).cloned() {
            let mut st = side.st.lock().expect("side");
            self.sync_registrations(&control, conn, &mut st);
        }
    }
}
