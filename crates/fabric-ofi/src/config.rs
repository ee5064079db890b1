//! What a node needs to know: its provider, its cluster, and every node's address.

use crate::unreachable;
use mu_fabric::{FabricError, NodeId};
use std::collections::BTreeMap;
use std::net::ToSocketAddrs;

/// The providers this backend passes the conformance suite with.
pub const PROVIDERS: [&str; 2] = ["sockets", "tcp;ofi_rxm"];

/// What the backend must know of a provider's ways beyond what `fi_getinfo` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProviderWays {
    /// An operation that fails because the target refused it and one that fails because the
    /// target's process died both complete as "canceled": the target's provider closes the
    /// connection on a refused key, so the initiator sees a closed connection either way. The
    /// backend then asks the peer's liveness port whether the same incarnation still answers
    /// (see `Node::classify_cancel`).
    pub cancel_is_ambiguous: bool,
    /// After a connection closed, the provider replaces it only once it has handled the
    /// closing itself, a few milliseconds later; until then operations to the peer complete
    /// as "not connected", and binding again waits that out (see `Node::bind_once`).
    pub reconnects_lazily: bool,
    /// The provider itself keeps at most one live connection per pair of endpoints, whichever
    /// side opened it: rxm's connection manager holds one message endpoint per peer, rejects
    /// a second request while one is up (or replaces the old one, closing it, when the
    /// request comes from a new process) and settles simultaneous requests by address. A
    /// fence then always goes on the one stream whose bytes this node still applies, and the
    /// backend's own rule that only the lower node opens (`Node::enforce_opener`) is not
    /// needed. `sockets` keeps a stream per opener, so it needs the rule.
    pub one_stream_per_pair: bool,
    /// Each node must have an address of its own. The provider opens its streams from
    /// unnamed ports, so this node tells a peer's streams from another's only by address;
    /// and a dead peer is fenced by finding that this process holds no stream with it any
    /// more (`Node::gone_for_good`), since rxm keeps trying to reconnect and posts to it are
    /// never refused outright. With a shared address another node's stream would hold that
    /// up for ever.
    pub needs_own_address: bool,
}

impl ProviderWays {
    /// The ways of `provider`, one of [`PROVIDERS`].
    pub(crate) fn of(provider: &str) -> ProviderWays {
        // `tcp;ofi_rxm`: the tcp provider disables a connection on a refused key (and on any
        // other error on it), and rxm replaces a disabled connection when it reads the event
        // that says so. `sockets` reports a refused key as such and keeps the connection.
        let rxm = provider == "tcp;ofi_rxm";
        ProviderWays {
            cancel_is_ambiguous: rxm,
            reconnects_lazily: rxm,
            one_stream_per_pair: rxm,
            needs_own_address: rxm,
        }
    }
}

/// Channels per node: channel `c` of a node listens on its `base_port + c`.
pub const CHANNELS: u8 = 4;

/// The port after the channels' (`base_port + CHANNELS`): where a node accepts the plain TCP
/// connections its peers keep open to learn of its death (see `liveness`).
pub const LIVENESS_PORT_OFFSET: u16 = CHANNELS as u16;

/// Ports a node uses from its base port: the channels and the liveness port.
pub const PORTS_PER_NODE: u16 = LIVENESS_PORT_OFFSET + 1;

/// Region ids and node ids are packed into registration keys (see `keys`).
pub const MAX_REGION_ID: u16 = 255;
pub const MAX_NODE_ID: u16 = 1023;

/// Where a node listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAddr {
    /// A host name or address of the node's interface (`"10.0.0.1"`, `"127.0.0.1"`).
    pub host: String,
    /// The first of its [`PORTS_PER_NODE`] consecutive ports.
    pub base_port: u16,
}

/// A node's configuration.
#[derive(Clone, Debug)]
pub struct OfiConfig {
    /// One of [`PROVIDERS`].
    pub provider: String,
    /// Nodes of other clusters refuse this one's connections.
    pub cluster_id: u64,
    /// This node.
    pub node: NodeId,
    /// Every node's address, this one's included.
    pub nodes: BTreeMap<NodeId, NodeAddr>,
    /// How long binding a connection waits for the peer to answer (it reads the peer's identity).
    pub connect_timeout_ms: u64,
    /// How long a fast revocation waits for its fence (a round trip on the connection) before it
    /// gives up with `Busy`.
    pub fast_fence_us: u64,
    /// How long a slow revocation waits for its fence before it gives up with `FenceFailed`.
    pub slow_fence_ms: u64,
    /// How long a call waits for the provider to close the streams a revocation shut down once
    /// its fence went unanswered (`Node::cut`). A call that gives up returns `FenceFailed`
    /// (or `InProgress` with `call_wait_us`), and the next revocation goes on waiting for the
    /// same streams: the provider's thread closes them when it next runs, which on a loaded
    /// machine can be later than the default 100 ms.
    pub cut_wait_ms: u64,
    /// The longest one control call (binding, revoking) waits on the network, if set. A
    /// binding or a fence not done by then goes on, and the call returns
    /// `FabricError::InProgress`; a later call takes it up, until the operation's own time
    /// above is spent. Unset, a call waits that whole time. A replica sets it: its background
    /// plane beats its heartbeat on the thread that makes these calls, and a wait of the
    /// connect timeout there would make the other replicas find it failed.
    pub call_wait_us: Option<u64>,
}

impl OfiConfig {
    /// Where `peer` listens, as configured.
    pub(crate) fn addr(&self, peer: NodeId) -> Result<&NodeAddr, FabricError> {
        self.nodes.get(&peer).ok_or_else(|| unreachable(peer, "no address configured"))
    }

    /// A configuration with the default timeouts.
    pub fn new(
        provider: &str,
        cluster_id: u64,
        node: NodeId,
        nodes: BTreeMap<NodeId, NodeAddr>,
    ) -> OfiConfig {
        OfiConfig {
            provider: provider.to_string(),
            cluster_id,
            node,
            nodes,
            connect_timeout_ms: 500,
            // A fence is a round trip through both sides' provider threads: about 100 µs here,
            // but milliseconds at its p99.9 on a loaded machine. Too short a wait reports a
            // peer with nothing in flight as busy.
            fast_fence_us: 50_000,
            slow_fence_ms: 500,
            cut_wait_ms: 100,
            call_wait_us: None,
        }
    }

    /// Checks everything that can be checked before opening anything.
    pub fn validate(&self) -> Result<(), FabricError> {
        if !PROVIDERS.contains(&self.provider.as_str()) {
            return Err(FabricError::Config(format!(
                "ofi provider {:?} is not supported: use one of {}",
                self.provider,
                PROVIDERS.join(", ")
            )));
        }
        if !self.nodes.contains_key(&self.node) {
            return Err(FabricError::Config(format!("no address for this node {}", self.node)));
        }
        for (node, addr) in &self.nodes {
            if node.0 > MAX_NODE_ID {
                return Err(FabricError::Config(format!(
                    "node id {} is above the ofi backend's limit {MAX_NODE_ID}",
                    node.0
                )));
            }
            if addr.host.is_empty() {
                return Err(FabricError::Config(format!("node {node}: empty host")));
            }
            if addr.base_port == 0 || addr.base_port.checked_add(PORTS_PER_NODE - 1).is_none() {
                return Err(FabricError::Config(format!(
                    "node {node}: base port {} leaves no room for its {PORTS_PER_NODE} ports",
                    addr.base_port
                )));
            }
        }
        if ProviderWays::of(&self.provider).needs_own_address {
            self.check_own_addresses()?;
        }
        if self.connect_timeout_ms == 0
            || self.fast_fence_us == 0
            || self.slow_fence_ms == 0
            || self.cut_wait_ms == 0
        {
            return Err(FabricError::Config("ofi timeouts must be above zero".into()));
        }
        if self.call_wait_us == Some(0) {
            return Err(FabricError::Config(
                "ofi call_wait_us is 0: no call could wait for even one answer; leave it unset \
                 to wait each operation's whole time"
                    .into(),
            ));
        }
        Ok(())
    }
}

impl OfiConfig {
    /// Refuses two nodes on one IPv4 address (as the backend resolves them: the first IPv4
    /// address of the host). A host that does not resolve is left for opening to report.
    fn check_own_addresses(&self) -> Result<(), FabricError> {
        let mut owners: BTreeMap<std::net::Ipv4Addr, NodeId> = BTreeMap::new();
        for (&node, addr) in &self.nodes {
            let Ok(resolved) = (addr.host.as_str(), addr.base_port).to_socket_addrs() else {
                continue;
            };
            let ip = resolved.into_iter().find_map(|a| match a {
                std::net::SocketAddr::V4(a) => Some(*a.ip()),
                std::net::SocketAddr::V6(_) => None,
            });
            if let Some(ip) = ip {
                if let Some(other) = owners.insert(ip, node) {
                    return Err(FabricError::Config(format!(
                        "ofi provider {:?}: nodes {other} and {node} share the address {ip}; \
                         each node needs one of its own (on one machine, 127.0.0.1, 127.0.0.2 \
                         and so on all reach it)",
                        self.provider
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(provider: &str) -> OfiConfig {
        let nodes = [(NodeId(0), NodeAddr { host: "127.0.0.1".into(), base_port: 7000 })];
        OfiConfig::new(provider, 1, NodeId(0), nodes.into_iter().collect())
    }

    #[test]
    fn providers_are_checked_with_reasons() {
        assert!(config("sockets").validate().is_ok());
        assert!(config("tcp;ofi_rxm").validate().is_ok());
        // Two nodes on one address: sockets tells their streams apart, rxm cannot.
        let mut shared = config("sockets");
        let second = NodeAddr { host: "127.0.0.1".into(), base_port: 7100 };
        shared.nodes.insert(NodeId(1), second);
        assert!(shared.validate().is_ok());
        shared.provider = "tcp;ofi_rxm".into();
        let err = shared.validate().unwrap_err().to_string();
        assert!(err.contains("share the address 127.0.0.1") && err.contains("127.0.0.2"), "{err}");
        shared.nodes.get_mut(&NodeId(1)).unwrap().host = "127.0.0.2".into();
        assert!(shared.validate().is_ok());
        let err = config("verbs").validate().unwrap_err().to_string();
        assert!(err.contains("not supported") && err.contains("sockets, tcp;ofi_rxm"), "{err}");
        assert!(!ProviderWays::of("sockets").cancel_is_ambiguous);
        assert!(ProviderWays::of("tcp;ofi_rxm").reconnects_lazily);
    }

    #[test]
    fn a_call_wait_of_zero_is_refused() {
        let mut c = config("sockets");
        c.call_wait_us = Some(250);
        assert!(c.validate().is_ok());
        c.call_wait_us = Some(0);
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("call_wait_us is 0") && err.contains("leave it unset"), "{err}");
    }

    #[test]
    fn every_timeout_of_zero_is_refused() {
        let zeroed: [fn(&mut OfiConfig); 4] = [
            |c| c.connect_timeout_ms = 0,
            |c| c.fast_fence_us = 0,
            |c| c.slow_fence_ms = 0,
            |c| c.cut_wait_ms = 0,
        ];
        for zero in zeroed {
            let mut c = config("sockets");
            zero(&mut c);
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains("timeouts must be above zero"), "{err}");
        }
    }

    #[test]
    fn addresses_are_checked() {
        let mut c = config("sockets");
        c.node = NodeId(1);
        assert!(c.validate().unwrap_err().to_string().contains("no address for this node"));
        let mut c = config("sockets");
        c.nodes.get_mut(&NodeId(0)).unwrap().base_port = 65_534;
        assert!(c.validate().unwrap_err().to_string().contains("leaves no room"));
        let mut c = config("sockets");
        c.fast_fence_us = 0;
        assert!(c.validate().is_err());
    }
}
