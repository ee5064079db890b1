//! Binding a connection: reading the peer's identity through the channel, once at a time per
//! (channel, peer), and remembering a binding that is under way or failed.

use crate::channel::Channel;
use crate::config::LIVENESS_PORT_OFFSET;
use crate::keys::Identity;
use crate::liveness::Liveness;
use crate::node::{BindAttempt, Node};
use crate::side::Binding;
use crate::{in_progress, unreachable};
use mu_fabric::{ConnId, FabricError, NodeId, Status};
use std::time::{Duration, Instant};

/// How many connect timeouts a binding read stays out before it is given up and posted anew;
/// also how many times longer than a failed binding held its caller the next one to the same
/// peer waits before trying the network again. Either way a peer that does not answer holds
/// up the callers (the background plane's heartbeat among them) for about a tenth of the time.
pub(crate) const BIND_PATIENCE: u32 = 10;

/// Why a binding failed whose read the provider kept refusing with "again".
const REFUSED_AGAIN: &str = "the provider did not take the read in time (it could not open a \
                             connection, or its queue stayed full)";

/// A binding's read that the provider would not take.
fn post_refused(peer: NodeId, why: Option<String>) -> FabricError {
    unreachable(peer, why.unwrap_or_else(|| REFUSED_AGAIN.into()))
}

/// A binding read out: its number, when it was posted, and until when this call waits for it.
struct BindRead {
    number: u64,
    posted: Instant,
    wait_until: Instant,
}

impl Node {
    /// Binds `conn` to the peer's current incarnation: reads its identity through the channel.
    pub(crate) fn bind(&self, conn: ConnId) -> Result<Binding, FabricError> {
        let began = Instant::now();
        let result = self.bind_once(conn);
        let key = (conn.channel, conn.peer);
        let mut binds = self.binds_under_way.lock().expect("binds");
        match &result {
            Err(FabricError::PeerUnreachable(_, why)) if !binds.contains_key(&key) => {
                let failed = BindAttempt::Failed {
                    at: Instant::now(),
                    held: began.elapsed(),
                    why: why.clone(),
                };
                binds.insert(key, failed);
            }
            _ => {}
        }
        result
    }

    /// One binding: the identity read (an earlier call's, still out, or a new one), its answer,
    /// the pair's one stream, and the identity checked.
    pub(crate) fn bind_once(&self, conn: ConnId) -> Result<Binding, FabricError> {
        let channel = self.channel(conn.channel)?;
        // The address stays in the table: removing it would make the provider open another
        // connection to the peer while the peer may go on writing on the first (see `fence`).
        // The provider itself replaces a connection that broke (the peer restarted).
        let dest = channel.address(&self.config, conn.peer)?;
        let read = self.bind_read(conn, &channel, dest)?;
        let bytes = self.await_bind_read(conn, &channel, dest, read)?;
        self.enforce_opener(conn).map_err(|e| unreachable(conn.peer, e))?;
        self.limit_unacknowledged(conn);
        self.accept_identity(conn, &bytes)
    }

    /// The binding read this call waits for: one an earlier call left out (looked at briefly),
    /// or a new one ([`Node::post_bind_read`]) — unless the last binding failed too recently
    /// to try again.
    fn bind_read(
        &self,
        conn: ConnId,
        channel: &Channel,
        dest: u64,
    ) -> Result<BindRead, FabricError> {
        let timeout = Duration::from_millis(self.config.connect_timeout_ms);
        let key = (conn.channel, conn.peer);
        let earlier = self.binds_under_way.lock().expect("binds").remove(&key);
        let now = Instant::now();
        match earlier {
            // A read from an earlier call is still out: a short look, not a second full wait,
            // so that a peer that stopped answering holds up its callers (the background
            // plane's heartbeat among them) once, not on every retry.
            Some(BindAttempt::UnderWay { number, posted })
                if posted.elapsed() < timeout * BIND_PATIENCE =>
            {
                let wait_until = self.call_deadline(now, now + Duration::from_millis(1));
                Ok(BindRead { number, posted, wait_until })
            }
            // The last one failed slowly (a post that waited for a connection the provider
            // could not open, a read that went unanswered and then broke): not again yet. A
            // peer that refuses at once (restarting) is tried again almost at once.
            Some(BindAttempt::Failed { at, held, why }) if at.elapsed() < held * BIND_PATIENCE => {
                let again = held * BIND_PATIENCE - at.elapsed();
                let said = format!("{why} (tried again in {} ms)", again.as_millis());
                self.binds_under_way
                    .lock()
                    .expect("binds")
                    .insert(key, BindAttempt::Failed { at, held, why });
                Err(unreachable(conn.peer, said))
            }
            stale => self.post_bind_read(conn, channel, dest, stale, now),
        }
    }

    /// Posts a new binding read, after what an earlier, `stale` attempt left: its read is
    /// abandoned, and a provider refusing to take one shares the connect timeout with it.
    /// Before posting: a peer whose process died must answer on its liveness port, and the
    /// pair's hello goes first.
    fn post_bind_read(
        &self,
        conn: ConnId,
        channel: &Channel,
        dest: u64,
        stale: Option<BindAttempt>,
        now: Instant,
    ) -> Result<BindRead, FabricError> {
        let timeout = Duration::from_millis(self.config.connect_timeout_ms);
        let since = match stale {
            Some(BindAttempt::UnderWay { number, .. }) => {
                self.abandon_control(channel, number);
                now
            }
            Some(BindAttempt::Posting { since }) if since.elapsed() < timeout => since,
            // Refused for the whole connect timeout: unreachable, as one call that
            // waited that long would have found it. `bind` records the failure as
            // having held this call only, so the next call tries again soon: these
            // calls held nobody up, and a live peer whose connection is slow to open
            // must not be shut out for ten connect timeouts.
            Some(BindAttempt::Posting { .. }) => {
                return Err(unreachable(conn.peer, REFUSED_AGAIN));
            }
            _ => now,
        };
        let deadline = since + timeout;
        let call_until = self.call_deadline(now, deadline);
        self.check_not_dead(conn.peer, call_until)?;
        // Unless the provider keeps one stream per pair itself, only the lower node of
        // the pair opens their stream (`enforce_opener`): it says hello first, on the
        // stream this read follows; the higher one posts nothing until that hello has
        // landed.
        if !self.ways.one_stream_per_pair {
            if conn.peer < self.id {
                self.await_hello(conn, call_until, deadline)?;
            } else {
                self.hello(conn.channel, conn.peer, call_until);
            }
        }
        let number = match self.post_identity_read(channel, conn.peer, dest, call_until) {
            Ok(number) => number,
            Err(None) if call_until < deadline => {
                let posting = BindAttempt::Posting { since };
                let key = (conn.channel, conn.peer);
                self.binds_under_way.lock().expect("binds").insert(key, posting);
                return Err(in_progress(
                    conn.peer,
                    "binding: the provider has not taken the read yet (it is opening a \
                     connection)",
                ));
            }
            Err(why) => return Err(post_refused(conn.peer, why)),
        };
        Ok(BindRead { number, posted: Instant::now(), wait_until: call_until })
    }

    /// Waits for the binding read's answer until `read.wait_until`: the peer's identity bytes.
    /// A read left unanswered stays out for the next call (`BindAttempt::UnderWay`).
    fn await_bind_read(
        &self,
        conn: ConnId,
        channel: &Channel,
        dest: u64,
        read: BindRead,
    ) -> Result<Box<[u8]>, FabricError> {
        let BindRead { mut number, posted, wait_until } = read;
        let timeout = Duration::from_millis(self.config.connect_timeout_ms);
        loop {
            match self.wait_control(channel, number, wait_until) {
                // A connection that closed (an operation was refused, the peer restarted) is
                // not replaced yet: the read goes out again until the provider has (see
                // `ProviderWays::reconnects_lazily`).
                Some(Err(e))
                    if e == libc::ENOTCONN
                        && self.ways.reconnects_lazily
                        && Instant::now() < wait_until =>
                {
                    channel.progress();
                    std::thread::sleep(Duration::from_micros(100));
                    number = self
                        .post_identity_read(channel, conn.peer, dest, wait_until)
                        .map_err(|e| post_refused(conn.peer, e))?;
                }
                Some(result) => {
                    return result
                        .map_err(|e| unreachable(conn.peer, crate::ffi::strerror(e as i64)))
                }
                None => {
                    let key = (conn.channel, conn.peer);
                    self.binds_under_way
                        .lock()
                        .expect("binds")
                        .insert(key, BindAttempt::UnderWay { number, posted });
                    if self.config.call_wait_us.is_some() && posted.elapsed() < timeout {
                        return Err(in_progress(conn.peer, "binding: no answer yet"));
                    }
                    return Err(unreachable(
                        conn.peer,
                        format!("no answer within {} ms", timeout.as_millis()),
                    ));
                }
            }
        }
    }

    /// What the identity read says, checked: a node of this cluster, the one addressed. Its
    /// process is watched from now on.
    fn accept_identity(&self, conn: ConnId, bytes: &[u8]) -> Result<Binding, FabricError> {
        let identity =
            Identity::decode(bytes).map_err(|e| match Identity::of_this_build(bytes) {
                // Read while it was rewritten, or damaged: tried again later.
                true => unreachable(conn.peer, e),
                false => FabricError::Incompatible(format!("node {}: {e}", conn.peer)),
            })?;
        if identity.cluster_id != self.config.cluster_id || identity.node != conn.peer {
            return Err(FabricError::Incompatible(format!(
                "the node at {}'s address is node {} of cluster {:#x}, not of cluster {:#x}",
                conn.peer, identity.node, identity.cluster_id, self.config.cluster_id
            )));
        }
        let addr = self.config.addr(conn.peer)?;
        let timeout = Duration::from_millis(self.config.connect_timeout_ms);
        self.liveness.watch(conn.peer, &addr.host, addr.base_port + LIVENESS_PORT_OFFSET, timeout);
        Ok(Binding {
            peer_incarnation: identity.incarnation,
            peer_regions: identity.regions.into_iter().collect(),
        })
    }

    /// Before binding to a peer whose watched process died: fails at once unless something
    /// answers on its liveness port (it restarted). Binding would otherwise wait the whole
    /// connect timeout with a provider that keeps trying to reconnect (`tcp;ofi_rxm`), on the
    /// thread that runs the background plane.
    ///
    /// The question waits until `until` (at least 1 ms: a TCP exchange).
    fn check_not_dead(&self, peer: NodeId, until: Instant) -> Result<(), FabricError> {
        if !self.liveness.dead(peer) {
            return Ok(());
        }
        let addr = self.config.addr(peer)?;
        let wait = until.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        Liveness::ask_incarnation(&addr.host, addr.base_port + LIVENESS_PORT_OFFSET, wait)
            .map(|_| ())
            .map_err(|e| unreachable(peer, format!("its process died, and since then: {e}")))
    }

    /// What an operation to `peer` that completed as "canceled" means, on a provider that
    /// reports a refused key and a dead target alike (`ProviderWays::cancel_is_ambiguous`):
    /// a refusal if the incarnation it was posted to still answers on its liveness port, and
    /// an unreachable peer otherwise (dead, restarted, stopped or cut off). A process that
    /// answers after the operation failed was alive when it failed, so a death is never read
    /// as a refusal; a live peer that cannot answer within the connect timeout is read as
    /// unreachable, which the protocols take as the weaker claim.
    pub(crate) fn classify_cancel(&self, peer: NodeId, incarnation: u32) -> Status {
        if self.liveness.dead(peer) {
            return Status::PeerUnreachable;
        }
        let Ok(addr) = self.config.addr(peer) else { return Status::PeerUnreachable };
        let timeout = Duration::from_millis(self.config.connect_timeout_ms);
        let port = addr.base_port + LIVENESS_PORT_OFFSET;
        match Liveness::ask_incarnation(&addr.host, port, timeout) {
            Ok(answered) if answered == incarnation => Status::RemoteAccessDenied,
            _ => Status::PeerUnreachable,
        }
    }
}
