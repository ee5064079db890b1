//! How to open a node on the verbs fabric.

use mu_fabric::NodeId;
use std::path::PathBuf;

/// How to open a node ([`crate::VerbsFabric::open`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsConfig {
    /// The run directory the cluster's nodes exchange queue-pair information through (one small
    /// file per node). Every node of the cluster must see the same directory: one host, or a
    /// shared file system. Created private (0700) if absent.
    pub run_dir: PathBuf,
    /// The cluster's id: a node refuses a run directory or a peer of another cluster.
    pub cluster_id: u64,
    /// This node's id, below `max_nodes`.
    pub node: NodeId,
    /// The RDMA device to use by name (`mlx5_0`, `rxe0`, …); `None` takes the first one listed.
    pub device_name: Option<String>,
    /// The device port, counted from 1 as verbs does.
    pub port: u8,
    /// The GID table index to route with. `None`: InfiniBand ports route by LID alone, Ethernet
    /// (RoCE) ports take the first non-link-local GID, else the first non-zero one.
    pub gid_index: Option<u32>,
    /// Node ids a peer may have: one queue pair is created per (peer, channel) when the node opens,
    /// so that a peer can connect to it before this node has touched the connection.
    pub max_nodes: u16,
    /// Channels per pair of nodes.
    pub channels: u8,
    /// Work requests each connection's send queue holds.
    pub send_queue_depth: u32,
    /// The local ACK timeout as verbs encodes it: 4.096 µs × 2^`ack_timeout_exponent` per try.
    pub ack_timeout_exponent: u8,
    /// Retransmissions before a work request fails with "retry exceeded" (at most 7).
    pub retry_count: u8,
}

impl VerbsConfig {
    /// Defaults: first device, port 1, 16 node ids, 4 channels, 128 work requests per send queue,
    /// and an ACK timeout of 4.096 µs × 2^14 ≈ 67 ms with 7 retries (a dead peer shows as
    /// `PeerUnreachable` after about half a second).
    pub fn new(run_dir: impl Into<PathBuf>, cluster_id: u64, node: NodeId) -> VerbsConfig {
        VerbsConfig {
            run_dir: run_dir.into(),
            cluster_id,
            node,
            device_name: None,
            port: 1,
            gid_index: None,
            max_nodes: 16,
            channels: 4,
            send_queue_depth: 128,
            ack_timeout_exponent: 14,
            retry_count: 7,
        }
    }

    /// Checks what can be checked without a device.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_nodes == 0 || self.max_nodes > 1024 {
            return Err(format!("max_nodes {} is out of range: 1 to 1024", self.max_nodes));
        }
        if self.node.0 >= self.max_nodes {
            return Err(format!(
                "node id {} is too large: ids go up to {} (raise max_nodes)",
                self.node.0,
                self.max_nodes - 1
            ));
        }
        if self.channels == 0 {
            return Err("a node needs at least one channel".into());
        }
        if self.port == 0 {
            return Err("ports are counted from 1".into());
        }
        if !(2..=1 << 15).contains(&self.send_queue_depth) {
            return Err(format!(
                "send_queue_depth {} is out of range: 2 to 32768",
                self.send_queue_depth
            ));
        }
        if self.ack_timeout_exponent == 0 || self.ack_timeout_exponent > 31 {
            return Err(format!(
                "ack_timeout_exponent {} is out of range: 1 to 31 (0 waits for ever)",
                self.ack_timeout_exponent
            ));
        }
        if self.retry_count > 7 {
            return Err(format!("retry_count {} is out of range: 0 to 7", self.retry_count));
        }
        Ok(())
    }

    /// The index of (peer, channel) among the node's connection sides.
    pub fn side_index(&self, peer: NodeId, channel: u8) -> Option<usize> {
        (peer.0 < self.max_nodes && channel < self.channels)
            .then(|| usize::from(peer.0) * usize::from(self.channels) + usize::from(channel))
    }
}

#[cfg(test)]
mod tests {
    use super::VerbsConfig;
    use mu_fabric::NodeId;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        let config = VerbsConfig::new("/tmp/x", 1, NodeId(3));
        assert_eq!(config.validate(), Ok(()));
        let too_big = VerbsConfig { node: NodeId(16), ..config.clone() };
        assert!(too_big.validate().unwrap_err().contains("node id 16"));
        let no_channel = VerbsConfig { channels: 0, ..config.clone() };
        assert!(no_channel.validate().is_err());
        assert_eq!(config.side_index(NodeId(2), 3), Some(11));
        assert_eq!(config.side_index(NodeId(2), 4), None);
        assert_eq!(config.side_index(NodeId(16), 0), None);
    }
}
