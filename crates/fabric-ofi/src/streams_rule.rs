//! One stream per pair of nodes: where each node listens, which streams break the rule and are
//! shut down, and how long a stream's data may go unacknowledged.

use crate::config::LIVENESS_PORT_OFFSET;
use crate::liveness::Liveness;
use crate::node::Node;
use mu_fabric::{ConnId, NodeId};
use std::net::{SocketAddrV4, ToSocketAddrs};
use std::time::Duration;

/// How the process's count of openers names a peer's host: its IPv4 address where the name
/// resolves to one, as `Node::listening` finds it (so that two spellings of one address count
/// as one), the name as given otherwise.
pub(crate) fn opener_key(host: &str) -> String {
    match first_ipv4(host, 0) {
        Ok(addr) => addr.ip().to_string(),
        Err(_) => host.to_string(),
    }
}

/// The first IPv4 address `host` resolves to, with `port`.
fn first_ipv4(host: &str, port: u16) -> Result<SocketAddrV4, String> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}:{port}: {e}"))?
        .find_map(|a| match a {
            std::net::SocketAddr::V4(a) => Some(a),
            std::net::SocketAddr::V6(_) => None,
        })
        .ok_or_else(|| format!("{host}:{port}: no IPv4 address"))
}

impl Node {
    /// Where `node` listens on `channel`, as the kernel lists addresses.
    pub(crate) fn listening(&self, node: NodeId, channel: u8) -> Result<SocketAddrV4, String> {
        let addr = self.config.addr(node).map_err(|e| e.to_string())?;
        let port = addr.base_port + channel as u16;
        // Resolved once per node: fences and bindings ask for it on the permission-switch
        // path, where a host name would otherwise cost a lookup each time.
        let mut resolved = self.listening_ips.lock().expect("listening ips");
        if let Some(&ip) = resolved.get(&node) {
            return Ok(SocketAddrV4::new(ip, port));
        }
        let found = first_ipv4(&addr.host, port)?;
        resolved.insert(node, *found.ip());
        Ok(found)
    }

    /// Limits how long data sent on the streams with `conn`'s peer may go unacknowledged before
    /// the kernel gives them up (`TCP_USER_TIMEOUT`) to `2 × slow_fence_ms`, instead of the
    /// kernel's `tcp_retries2` retransmissions (about 15 minutes by default). Set after each
    /// binding (on the streams it used or opened) and each fence posted (a stream may have
    /// been opened since). A peer cut off by the network acknowledges nothing: its streams
    /// break, which ends a fence's wait (nothing more of the peer's can land on a broken
    /// stream) and every operation posted to it, instead of filling the channel's queue. A
    /// peer that lives acknowledges in its kernel even while its process is stopped, so this
    /// never breaks the stream of a stopped writer.
    pub(crate) fn limit_unacknowledged(&self, conn: ConnId) {
        let limit_ms = self.config.slow_fence_ms.saturating_mul(2).min(u32::MAX as u64) as u32;
        let (Ok(mine), Ok(theirs)) =
            (self.listening(self.id, conn.channel), self.listening(conn.peer, conn.channel))
        else {
            return;
        };
        for stream in crate::streams::with_peer(mine.port(), theirs).unwrap_or_default() {
            let _ = crate::streams::set_unacknowledged_limit(&stream, limit_ms);
        }
    }

    /// A pair of nodes holds one stream, which the lower node opens, so that both post on it
    /// and a fence is ordered after everything the peer sent (see `fence`). The provider opens
    /// a stream whenever a post finds none to use, so a higher node whose stream to a lower
    /// peer broke can still open one, and two threads of the lower node that post while none
    /// exists can open one each. After each binding and each fence, this looks for such
    /// streams and shuts them down (the provider reads end-of-file and drops them), and fails:
    /// neither the binding nor the fence is claimed.
    ///
    /// * On the higher node: the streams its process opened to the peer's channel port, found
    ///   exactly. It asks the peer for a hello, so that the peer opens one.
    /// * On the lower node: the streams accepted on its own channel port from the peer's
    ///   address. A lower node than this one on that address could have opened those too, so
    ///   that look is made only when none is (one replica per host; the lowest node
    ///   everywhere). And more than one stream its process opened to the peer's channel port:
    ///   all are shut down (the peer may be writing on any of them). That count is this node's
    ///   only where no other node of the process may open streams to the peer
    ///   (`streams::Opener`): one replica per process. Its next post opens a stream again.
    /// * With a provider that keeps one stream per pair itself
    ///   (`ProviderWays::one_stream_per_pair`), there is nothing to enforce.
    pub(crate) fn enforce_opener(&self, conn: ConnId) -> Result<(), String> {
        if conn.peer == self.id || self.ways.one_stream_per_pair {
            return Ok(());
        }
        let theirs = self.listening(conn.peer, conn.channel)?;
        let higher = conn.peer < self.id;
        // One still connecting has carried nothing, so no fence or binding went on it: a post
        // of this node's data path to a peer cut off by the network tries to open one each
        // time (and gives up after `FI_SOCKETS_CONN_TIMEOUT`). Counting them would fail every
        // fence to that peer, the one that ends the wait for a cut-off leader included.
        let carried = |s: &crate::streams::Stream| !s.connecting;
        let (wrong, doubled): (Vec<crate::streams::Stream>, bool) = if higher {
            let opened = crate::streams::opened_to(theirs)
                .map_err(|e| format!("listing this process's streams to {theirs}: {e}"))?;
            (opened.into_iter().filter(carried).collect(), false)
        } else {
            let shared = self.config.nodes.keys().any(|&n| {
                n < self.id && self.listening(n, conn.channel).is_ok_and(|a| a.ip() == theirs.ip())
            });
            let mine = self.listening(self.id, conn.channel)?;
            let base_port = self.config.addr(conn.peer).map_err(|e| e.to_string())?.base_port;
            let sole_opener = self.opener.sole_opener_of(&theirs.ip().to_string(), base_port);
            // Listed last, just before they are shut down: a descriptor closed in between is
            // found out (`streams::shut_down`), but the less time, the fewer streams missed.
            let held = crate::streams::held()
                .map_err(|e| format!("listing this process's streams: {e}"))?;
            let mut wrong: Vec<_> = held
                .iter()
                .filter(|s| {
                    !shared && s.local.port() == mine.port() && s.remote.ip() == theirs.ip()
                })
                .filter(|s| carried(s))
                .copied()
                .collect();
            let opened: Vec<_> = held.iter().filter(|s| s.remote == theirs && carried(s)).collect();
            let doubled = opened.len() > 1 && sole_opener;
            if doubled {
                let more: Vec<_> = opened.into_iter().filter(|s| !wrong.contains(s)).collect();
                wrong.extend(more);
            }
            (wrong, doubled)
        };
        if wrong.is_empty() {
            return Ok(());
        }
        for stream in &wrong {
            let _ = crate::streams::shut_down(stream);
        }
        let (me, channel) = (self.id, conn.channel);
        if higher {
            let addr = self.config.addr(conn.peer).map_err(|e| e.to_string())?.clone();
            let timeout = Duration::from_millis(self.config.connect_timeout_ms);
            // Off this thread: a cut-off peer would hold it for the whole connect timeout.
            let _ = std::thread::Builder::new().name("mu-ofi-ask-hello".into()).spawn(move || {
                let _ = Liveness::ask_hello(
                    &addr.host,
                    addr.base_port + LIVENESS_PORT_OFFSET,
                    channel,
                    me,
                    timeout,
                );
            });
        }
        if doubled {
            return Err(format!(
                "node {me} had opened more than one stream to node {} on channel {channel} \
                 ({} shut down in all), where a pair holds one: its next post opens one",
                conn.peer,
                wrong.len(),
            ));
        }
        let (opener, from) = if higher { (me, conn.peer) } else { (conn.peer, me) };
        Err(format!(
            "node {opener} had opened {} stream(s) to node {from} on channel {channel}, which \
             only the lower node opens: shut down, and node {from} opens one",
            wrong.len(),
        ))
    }

    /// Whether this process holds no stream with `conn`'s peer on the channel that can have
    /// carried anything (one still connecting has not). Called once the rights are taken away
    /// (the registrations closed): an operation of the peer can then still apply only if its
    /// key was checked before, and it is being received on a stream this process holds; one
    /// that comes on a stream opened later finds its key refused. A stream that ended was
    /// handled up to its end (the peer closed it), or broke, and then the provider drops what
    /// it had not handled. Exact when every node has an address of its own
    /// (`ProviderWays::needs_own_address`); where nodes share one, another node's stream makes
    /// this say no, and the fence goes out.
    pub(crate) fn holds_no_stream(&self, conn: ConnId) -> bool {
        let (Ok(mine), Ok(theirs)) =
            (self.listening(self.id, conn.channel), self.listening(conn.peer, conn.channel))
        else {
            return false;
        };
        crate::streams::with_peer(mine.port(), theirs)
            .is_ok_and(|streams| streams.iter().all(|s| s.connecting))
    }
}
