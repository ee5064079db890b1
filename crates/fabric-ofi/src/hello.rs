//! Hellos: the lower node of a pair writes a fresh word into the higher node's hello board on the
//! stream it opened, and the higher node waits for one before it posts anything to the lower.

use crate::config::{CHANNELS, LIVENESS_PORT_OFFSET};
use crate::keys::{hello_offset, HELLO_BYTES, HELLO_KEY};
use crate::liveness::Liveness;
use crate::node::Node;
use crate::{in_progress, unreachable};
use mu_fabric::{ConnId, FabricError, NodeId};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Node {
    /// Says hello to a higher peer on `channel`: writes a new word into its hello board, on
    /// the stream this node opens to it (or has open). Nobody waits for it; the peer sees it
    /// land. Only the lower node of a pair says hello (see `enforce_opener`). Gives up if the
    /// provider does not take the write by `until`.
    pub(crate) fn hello(&self, channel: u8, to: NodeId, until: Instant) {
        if to <= self.id || channel >= CHANNELS {
            return;
        }
        let Ok(ch) = self.channel(channel) else { return };
        let Ok(dest) = ch.address(&self.config, to) else { return };
        let count = loop {
            let n = self.hello_count.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
            if n != 0 {
                break n;
            }
        };
        let word = (self.incarnation as u64) << 32 | count as u64;
        let offset = hello_offset(channel, self.id) as u64;
        let buf: Box<[u8]> = word.to_le_bytes().to_vec().into_boxed_slice();
        let posted = self.post_control(&ch, to, buf, until, |ptr, ctx| {
            // SAFETY: `ptr` is the control buffer, parked until the write completes.
            unsafe { ch.ep.write(ptr, 8, dest, offset, HELLO_KEY, ctx, true, false) }
        });
        if let Ok(number) = posted {
            self.abandon_control(&ch, number);
        }
    }

    /// The hello word `from` last wrote here on `channel`.
    fn hello_word(&self, channel: u8, from: NodeId) -> u64 {
        let at = hello_offset(channel, from);
        debug_assert!(at + 8 <= HELLO_BYTES);
        // SAFETY: in bounds of the board (`hello_offset`) and 8-byte aligned (the board is
        // page aligned); the provider writes the word with a raw copy, so a torn value can be
        // read, which still shows that bytes came in on the peer's stream.
        unsafe { std::ptr::read_volatile(self.hello_board.ptr().add(at).cast::<u64>()) }
    }

    /// Before this node (the higher of the pair) posts anything to a lower peer on a channel
    /// it binds: waits until the peer said hello since the last binding, asking it to over its
    /// liveness port if it has not. A hello landed here came on the stream the peer opened, and
    /// the provider registered that stream before it handled any of its bytes, so this node's
    /// posts to the peer now go on it instead of opening a second one.
    ///
    /// Waits until `until`; then fails, as still under way if that is before `deadline` (the
    /// binding's whole time), or as unreachable.
    pub(crate) fn await_hello(
        &self,
        conn: ConnId,
        until: Instant,
        deadline: Instant,
    ) -> Result<(), FabricError> {
        let key = (conn.channel, conn.peer);
        let taken = self.hellos_taken.lock().expect("hellos").get(&key).copied().unwrap_or(0);
        let fresh = |w: u64| w != 0 && w != taken;
        if !fresh(self.hello_word(conn.channel, conn.peer)) {
            let addr = self.config.addr(conn.peer)?;
            let wait = until.saturating_duration_since(Instant::now());
            Liveness::ask_hello(
                &addr.host,
                addr.base_port + LIVENESS_PORT_OFFSET,
                conn.channel,
                self.id,
                wait.max(Duration::from_millis(1)),
            )
            .map_err(|e| unreachable(conn.peer, e))?;
        }
        loop {
            let word = self.hello_word(conn.channel, conn.peer);
            if fresh(word) {
                self.hellos_taken.lock().expect("hellos").insert(key, word);
                return Ok(());
            }
            if Instant::now() >= until {
                if until < deadline {
                    return Err(in_progress(conn.peer, "binding: asked for a hello, none yet"));
                }
                return Err(unreachable(conn.peer, "asked for a hello, none came in time"));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}
