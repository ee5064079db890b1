//! Keeping region scopes on the device: the shared registration and the type 2 memory windows
//! (the bookkeeping is in `scope`, with its table of keys).
//!
//! # When a window is bound
//!
//! A type 2 window is bound by a work request on the queue pair it is bound to: here this node's
//! side of the one connection a region is scoped to. The bind is posted by the control plane,
//! holding the node's control lock, only while the side is ready to send (its word says so, and
//! nothing changes the word without that lock). Scoping a region to a side that is not ready to
//! send leaves the window *pending*: it is bound when the side next moves to ready to send
//! (`modify_qp`, `set_access_slow`). Until then the window's key, already published, reaches
//! nothing, so on verbs a scope to one connection holds for operations its peer posts after
//! this node's side of it is ready to send, as well as after the peer's next bind.
//!
//! # When a window is replaced
//!
//! A window bound on a side that is then reset is replaced by a fresh, pending one with another
//! key (published), bound at the side's next ready-to-send. What a reset does to a type 2 window
//! bound to the queue pair is not something this backend relies on, and a bind posted while the
//! queue pair had failed on its own (a responder's access error moves it to error without the
//! control plane knowing) was flushed without a trace: a fresh window after a reset is bound
//! exactly once, whichever it was. The cost: after this node's side of a scoped connection is
//! reset, its peer must bind after that reset to reach the region (a reset side has to be
//! connected again from both ends on verbs anyway: its packet sequence numbers start over).
//!
//! # Narrowing
//!
//! Dropping a window deallocates it, which kills its key without posting anything. It is no
//! barrier (the fabric API says so): a request admitted before may still land, and a bind still
//! queued behind the side's own requests targets a window that is gone; should the device give
//! the same index and key to a later window before that bind runs, the bind could attach it to
//! the old side. Callers that need a barrier reset the side first, which discards what it had
//! queued.

use super::device::{access_flags, errno_text};
use super::handles::{MemoryWindow, Window};
use super::node::{lock, Node};
use super::region::{RegionInner, VerbsRegion};
use super::scope::{key_source, next_tag, plan, window_key, KeySource, ScopeChange};
use super::side::{Side, SideWord};
use mu_fabric::{ConnId, FabricError, QpState, RegionId, RegionScope};

impl RegionInner {
    /// The remote key peers are told to use (see the table in `scope`). A scope whose window
    /// could not be replaced publishes the local registration's key, which reaches nothing.
    pub(crate) fn published_rkey(&self) -> u32 {
        let scoping = lock(&self.scoping);
        let key = match key_source(scoping.scope) {
            KeySource::Shared => scoping.shared_mr.as_ref().map(|mr| mr.rkey()),
            KeySource::Window => scoping.window.as_ref().map(|w| w.rkey),
            KeySource::Local => None,
        };
        key.unwrap_or_else(|| self.local_mr.rkey())
    }
}

impl Node {
    /// `Fabric::scope_region`: checks, then changes the region's keys (module docs), then
    /// publishes them.
    pub(crate) fn scope_region(&self, id: RegionId, scope: RegionScope) -> Result<(), FabricError> {
        self.check_alive()?;
        let _control = lock(&self.control);
        let region = lock(&self.regions).get(&id).cloned().ok_or(FabricError::UnknownRegion(id))?;
        if let RegionScope::Only(conn) = scope {
            self.side(conn)?;
            if let Err(why) = &self.device.windows {
                return Err(FabricError::Incompatible(format!(
                    "region {id} cannot be scoped to {conn} alone: this needs type 2 memory \
                     windows, and {why}"
                )));
            }
        }
        self.change_scope(&region, scope)?;
        self.publish()
    }

    /// Makes what `plan` says. The fallible steps (a registration, a window and its bind) come
    /// first: if one fails the region keeps its scope and keys. Then what the old scope held
    /// goes, which kills its key (narrowing is no barrier: a request admitted before may land).
    fn change_scope(&self, region: &VerbsRegion, scope: RegionScope) -> Result<(), FabricError> {
        let inner = &region.inner;
        let mut scoping = lock(&inner.scoping);
        let change: ScopeChange = plan(scoping.scope, scope);
        let shared_mr = if change.register_shared {
            let flags = access_flags(inner.access);
            // SAFETY: the registration is kept in `inner.scoping`, which `RegionInner` declares
            // before the memory: it is deregistered before the memory is unmapped.
            Some(unsafe { self.register_memory(&inner.memory, inner.len_bytes, flags, inner.id) }?)
        } else {
            None
        };
        let window = match change.window_for {
            Some(conn) => Some(self.new_window(inner, conn)?),
            None => None,
        };
        if change.drop_window {
            scoping.window = None;
        }
        if change.drop_shared {
            scoping.shared_mr = None;
        }
        if shared_mr.is_some() {
            scoping.shared_mr = shared_mr;
        }
        if window.is_some() {
            scoping.window = window;
        }
        scoping.scope = scope;
        Ok(())
    }

    /// A fresh window for `conn` with a key of its own, bound at once if the side is ready to
    /// send (the caller holds the control lock), else pending.
    fn new_window(&self, inner: &RegionInner, conn: ConnId) -> Result<Window, FabricError> {
        let failed = |message: String| FabricError::Io {
            context: format!("scoping region {} to {conn}", inner.id),
            message,
        };
        let window = MemoryWindow::alloc(&self.device.pd).map_err(failed)?;
        let mut tag = lock(&self.window_tag);
        *tag = next_tag(*tag, window.allocated_rkey());
        let rkey = window_key(window.allocated_rkey(), *tag);
        drop(tag);
        let mut window = Window { conn, rkey, bound: false, window };
        let side = self.side(conn)?;
        if side.load().state == QpState::ReadyToSend {
            self.bind(side, inner, &mut window).map_err(|errno| failed(bind_error_text(errno)))?;
        }
        Ok(window)
    }

    /// Posts the bind of `window` on `side` (ready to send, control lock held).
    fn bind(&self, side: &Side, inner: &RegionInner, window: &mut Window) -> Result<(), i32> {
        debug_assert_eq!(side.conn, window.conn);
        side.raw.bind_window(
            &window.window,
            window.rkey,
            &inner.local_mr,
            inner.memory.addr(),
            inner.len_bytes as u64,
            inner.access,
        )?;
        window.bound = true;
        Ok(())
    }

    /// Binds the pending windows of regions scoped to `side`, which has just moved to ready to
    /// send (control lock held). A bind that cannot be posted leaves the side in error, as a
    /// failed request would, so the caller learns of it instead of the peer being refused.
    pub(crate) fn bind_pending_windows(&self, side: &Side) -> Result<(), FabricError> {
        let regions: Vec<VerbsRegion> = lock(&self.regions).values().cloned().collect();
        for region in regions {
            let inner = &region.inner;
            let mut scoping = lock(&inner.scoping);
            let Some(window) = scoping.window.as_mut().filter(|w| w.conn == side.conn) else {
                continue;
            };
            if window.bound {
                continue;
            }
            if let Err(errno) = self.bind(side, inner, window) {
                let _ = side.raw.move_to_error();
                side.store(SideWord { state: QpState::Error, ..side.load() });
                return Err(FabricError::Io {
                    context: format!(
                        "binding region {}'s memory window on {} (now in error)",
                        inner.id, side.conn
                    ),
                    message: bind_error_text(errno),
                });
            }
        }
        Ok(())
    }

    /// Replaces the windows bound on `side`, which has just been reset (control lock held; see
    /// the module docs), and publishes their new keys. A window that cannot be replaced is
    /// dropped: its region then publishes a key that reaches nothing, until it is scoped again.
    /// Never fails the reset: a file that could not be rewritten still holds the old window's
    /// key, which died with it, so the peer is refused, never let in.
    pub(crate) fn renew_windows_after_reset(&self, side: &Side) {
        let regions: Vec<VerbsRegion> = lock(&self.regions).values().cloned().collect();
        let mut renewed = false;
        for region in regions {
            let inner = &region.inner;
            let mut scoping = lock(&inner.scoping);
            if !scoping.window.as_ref().is_some_and(|w| w.conn == side.conn && w.bound) {
                continue;
            }
            // The old window goes first: its key must be dead whatever happens next.
            scoping.window = None;
            scoping.window = self.new_window(inner, side.conn).ok();
            renewed = true;
        }
        if renewed {
            let _ = self.publish();
        }
    }
}

/// Why a bind could not be posted, in words.
fn bind_error_text(errno: i32) -> String {
    if errno == libc::ENOMEM {
        // Binds take send-queue entries beyond the endpoint's, freed as its completions are
        // polled (see `RawQp::bind_window`).
        format!(
            "{}: the side's send queue has no room left for window binds (poll the endpoint the \
             connection is attached to, or reset the connection)",
            errno_text(errno)
        )
    } else {
        errno_text(errno)
    }
}

#[cfg(test)]
mod tests {
    use super::bind_error_text;

    #[test]
    fn a_full_send_queue_says_how_to_make_room() {
        let full = bind_error_text(libc::ENOMEM);
        assert!(full.contains("no room left for window binds"), "{full}");
        let other = bind_error_text(libc::EINVAL);
        assert!(!other.contains("window binds"), "{other}");
    }
}
