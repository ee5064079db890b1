//! Revocation as a barrier: after the registrations close, a fence read on the peer's stream,
//! and if it goes unanswered for its budget, cutting the peer's streams.

use crate::in_progress;
use crate::node::Node;
use crate::side::SideState;
use mu_fabric::{ConnId, FabricError, NodeId};
use std::time::{Duration, Instant};

/// Why a fence did not complete.
pub(crate) enum FenceWait {
    /// Its time is not spent: the call's own wait ran out (`OfiConfig::call_wait_us`).
    UnderWay(String),
    /// Its time is spent (or the call was not kept short): no barrier can be claimed.
    Failed(String),
}

impl FenceWait {
    pub(crate) fn into_error(self, peer: NodeId) -> FabricError {
        match self {
            FenceWait::UnderWay(why) => in_progress(peer, format!("fence: {why}")),
            FenceWait::Failed(why) => FabricError::FenceFailed { node: peer, why },
        }
    }
}

impl Node {
    /// After a right was taken away: waits until nothing the peer sent before can still land.
    /// The registrations are already closed, so anything the provider starts from now on is
    /// refused; what remains is an operation it had started, whose bytes arrive on the peer's
    /// connection. A round trip (reading the peer's identity) on that connection comes back
    /// after all of them, as the provider handles a connection's bytes in order; a read that
    /// fails because the connection broke means nothing more comes on it either.
    ///
    /// This holds while the two nodes share one stream. The provider opens a stream inside any
    /// post that finds none, from either side, so two can appear: only the lower node of a pair
    /// opens theirs (`await_hello`, `hello`), and the higher one shuts down any it finds it
    /// opened and claims no fence made while it had one (`enforce_opener`).
    ///
    /// The read is posted once per right taken away and may outlive this call (`st.fence`).
    /// All the calls that wait for one read wait `slow_fence_ms` in all (or `timeout`, if
    /// shorter, each): once that is spent, the peer is cut off (`cut`). A peer that never
    /// answers (stopped, or cut off by the network while its connection lives) then holds up
    /// the revoker, whose heartbeat runs on the same thread, once — not on every attempt of its
    /// permission manager — while a peer slow to answer still gets the full wait across the
    /// fast path and the slow path. The calls that try to post a read the provider refuses
    /// share that budget the same way.
    /// Where calls are kept short (`OfiConfig::call_wait_us`), each waits at most that long
    /// and says the fence is under way until the budget is spent.
    pub(crate) fn fence(
        &self,
        conn: ConnId,
        st: &mut SideState,
        timeout: Duration,
    ) -> Result<(), FenceWait> {
        if st.binding.is_none() {
            return Ok(());
        }
        let channel = self.channel(conn.channel).map_err(|e| FenceWait::Failed(e.to_string()))?;
        if self.gone_for_good(conn) {
            if let Some((number, _)) = st.fence.take() {
                self.abandon_control(&channel, number);
            }
            return Ok(());
        }
        let now = Instant::now();
        if !st.cut.is_empty() {
            return self.await_cut(conn, st, now);
        }
        let budget = Duration::from_millis(self.config.slow_fence_ms);
        // The end of the budget of what began at `since` (at least a short look from now).
        let end_of_budget = |since: Instant| (since + budget).max(now + Duration::from_millis(1));
        let short = self.config.call_wait_us.is_some();
        let (number, posted) = match st.fence {
            Some(fence) => fence,
            None => {
                let refused_since = st.fence_refused_since.unwrap_or(now);
                let post_by = end_of_budget(refused_since).min(now + timeout);
                let post_by = self.call_deadline(now, post_by);
                let dest = channel
                    .address(&self.config, conn.peer)
                    .map_err(|e| FenceWait::Failed(e.to_string()))?;
                let number = match self.post_identity_read(&channel, conn.peer, dest, post_by) {
                    Ok(number) => number,
                    // The provider refused the read: the connection is gone, and with it
                    // everything the peer sent on it.
                    Err(Some(_broken)) => {
                        st.fence_refused_since = None;
                        return self.enforce_opener(conn).map_err(FenceWait::Failed);
                    }
                    // The provider has no stream to post on and is opening one (`tcp;ofi_rxm`
                    // after the last one broke, to a peer cut off or dead): if none is left
                    // that has carried anything, nothing of the peer's can land any more.
                    Err(None) if self.holds_no_stream(conn) => {
                        st.fence_refused_since = None;
                        return Ok(());
                    }
                    Err(None) if Instant::now() >= refused_since + budget => {
                        st.fence_refused_since = Some(refused_since);
                        return self.cut(conn, st, "the fence could not be posted");
                    }
                    Err(None) => {
                        st.fence_refused_since = Some(refused_since);
                        let why = "the fence could not be posted";
                        return Err(if short && Instant::now() < refused_since + budget {
                            FenceWait::UnderWay(format!("{why} yet"))
                        } else {
                            FenceWait::Failed(why.into())
                        });
                    }
                };
                st.fence_refused_since = None;
                st.fence = Some((number, now));
                self.limit_unacknowledged(conn);
                (number, now)
            }
        };
        let deadline = end_of_budget(posted).min(now + timeout);
        match self.wait_control(&channel, number, self.call_deadline(now, deadline)) {
            Some(_answered_or_broken) => {
                st.fence = None;
                // The read went on a stream this node opened, if it had opened one: then it
                // is no barrier for the peer's, and a new fence goes out next time.
                self.enforce_opener(conn).map_err(FenceWait::Failed)
            }
            None if Instant::now() >= posted + budget => {
                self.cut(conn, st, "the fence went unanswered")
            }
            None => {
                let waited = Instant::now().saturating_duration_since(posted).as_micros();
                if short && Instant::now() < posted + budget {
                    Err(FenceWait::UnderWay(format!("no answer yet, {waited} µs after posting it")))
                } else {
                    Err(FenceWait::Failed(format!(
                        "no fence answer within {waited} µs of posting it"
                    )))
                }
            }
        }
    }

    /// The fence for a right taken away went unanswered (or could not be posted) for its whole
    /// budget: the peer is stopped, or cut off while its streams live, and may have an
    /// operation half received. This side shuts down every stream this process holds with the
    /// peer on the channel (`why` says what came first), and the revocation holds once the
    /// provider has closed them all (`await_cut`).
    ///
    /// Why that is a barrier: the rights were taken away first (the registrations closed), so
    /// an operation of the peer can still apply only if its key was checked before, and it is
    /// being received on one of these streams. A stream shut down in both directions gives its
    /// reader what had arrived before and then an end; what the peer sends after it never
    /// reaches the reader (the kernel answers it with a reset). The provider handles a stream's
    /// bytes in order up to that end and closes it then. A stream opened later carries only
    /// operations whose keys are checked after the close, and refused. A stream still
    /// connecting has carried nothing. Where nodes share an address, the streams another node
    /// of that address opened to this one are shut down too: they cannot be told apart (their
    /// operations fail, and they reconnect).
    pub(crate) fn cut(&self, conn: ConnId, st: &mut SideState, why: &str) -> Result<(), FenceWait> {
        let (Ok(mine), Ok(theirs)) =
            (self.listening(self.id, conn.channel), self.listening(conn.peer, conn.channel))
        else {
            return Err(FenceWait::Failed(format!("{why}, and its streams cannot be found")));
        };
        let streams = crate::streams::with_peer(mine.port(), theirs)
            .map_err(|e| FenceWait::Failed(format!("{why}, and listing its streams: {e}")))?;
        let mut cut: Vec<u64> = Vec::new();
        for stream in streams.iter().filter(|s| !s.connecting) {
            // A stream that cannot be shut down any more is no longer connected: it is waited
            // for all the same.
            let _ = crate::streams::shut_down(stream);
            cut.push(stream.inode);
        }
        if cut.is_empty() {
            // Nothing left that has carried anything (`holds_no_stream`).
            return Ok(());
        }
        st.cut = cut;
        self.await_cut(conn, st, Instant::now())
    }

    /// Waits (`cut_wait_ms`, or a short call's wait) until the provider has closed every stream
    /// `cut` shut down; then the revocation holds. Closed means its descriptor is gone, not
    /// that the kernel's table no longer lists it: once the peer has sent its end too, a stream
    /// leaves that table while bytes that came before the end may still wait to be read.
    fn await_cut(&self, conn: ConnId, st: &mut SideState, now: Instant) -> Result<(), FenceWait> {
        let until = self.call_deadline(now, now + Duration::from_millis(self.config.cut_wait_ms));
        loop {
            let open = crate::streams::open_sockets().map_err(|e| {
                FenceWait::Failed(format!("listing this process's descriptors: {e}"))
            })?;
            if !st.cut.iter().any(|inode| open.contains(inode)) {
                st.cut.clear();
                st.fence_refused_since = None;
                if let Some((number, _)) = st.fence.take() {
                    if let Ok(channel) = self.channel(conn.channel) {
                        self.abandon_control(&channel, number);
                    }
                }
                return Ok(());
            }
            if Instant::now() >= until {
                let why = format!(
                    "the fence went unanswered; {} stream(s) with the peer shut down, not yet \
                     closed by the provider",
                    st.cut.len()
                );
                return Err(if self.config.call_wait_us.is_some() {
                    FenceWait::UnderWay(why)
                } else {
                    FenceWait::Failed(why)
                });
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Whether `conn`'s peer died and this process holds no stream with it on the channel any
    /// more (`holds_no_stream`): then nothing of the peer's can land here again, since a
    /// provider handles a stream's bytes in order up to its end before it closes it. A fence is
    /// needless then, and `tcp;ofi_rxm`, which keeps trying to reconnect to a dead peer and
    /// answers "again" to every post meanwhile, could not post one.
    pub(crate) fn gone_for_good(&self, conn: ConnId) -> bool {
        self.liveness.dead(conn.peer) && self.holds_no_stream(conn)
    }
}
