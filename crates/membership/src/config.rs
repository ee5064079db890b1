//! The membership service's configuration: what every coordinator, member and cache of one
//! cluster must agree on, and the timing parameters of the failure detectors (§4.2) and
//! leases (§6.2). The paper's values are the defaults.

use thiserror::Error;

/// A configuration key that is missing or wrong, named as in the TOML file.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{key}: {why}")]
pub struct ConfigError {
    pub key: &'static str,
    pub why: String,
}

fn bad(key: &'static str, why: impl Into<String>) -> Result<(), ConfigError> {
    Err(ConfigError { key, why: why.into() })
}

/// See the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipConfig {
    /// The cluster's id: views, mailbox frames and boards of another cluster are refused.
    pub cluster: u64,
    /// The coordinators' node ids; a coordinator's position is its index here (the lowest live
    /// position leads, §5.3.1).
    pub coordinators: Vec<u16>,
    /// Every node id is below this: boards hold one beat word and one mailbox per node id.
    pub nodes_max: u16,
    /// The lease duration δ of the views the coordinators propose (§6.2: about 20 µs); through
    /// caches, the lease every application holds.
    pub lease_ns: u64,
    /// Lease caches' node ids (§6.3). When there are some, every member renews its lease
    /// through them, never with the coordinators directly: leases of both kinds in one cluster
    /// could overlap (a cache's lease outlives a member's wait by up to ∆).
    pub caches: Vec<u16>,
    /// ∆: how long a cache's lease lasts, and how long its first lease on a view waits (§6.3:
    /// 25 µs).
    pub cache_lease_ns: u64,
    /// Slot words of the coordinators' consensus region (a view's index is its epoch modulo).
    pub slots_count: u64,
    /// Heartbeat ring: the wait after a read completed before the next (§4.2: 30 µs).
    pub ring_read_gap_ns: u64,
    /// Catastrophic detector: how often each node writes its beat to every member.
    pub beat_period_ns: u64,
    /// Catastrophic detector: a member not heard from for this long is reported (§4.2: 1 ms).
    pub beat_timeout_ns: u64,
    /// How often an unanswered report or request is sent again (§4.2: reports are repeated
    /// until a view excludes the node).
    pub repeat_ns: u64,
    /// A coordinator whose proposer stopped backs off for a random time below this.
    pub backoff_max_ns: u64,
    /// How often a broken connection is set up again.
    pub reconnect_ns: u64,
    /// Every view with members names a primary: the oldest member when the last primary left
    /// or none was named yet (uKharon-KV's groups). Otherwise views name none.
    pub name_primary: bool,
}

impl MembershipConfig {
    /// A configuration with the paper's parameters.
    pub fn new(cluster: u64, coordinators: Vec<u16>, nodes_max: u16) -> MembershipConfig {
        MembershipConfig {
            cluster,
            coordinators,
            nodes_max,
            lease_ns: 20_000,
            caches: Vec::new(),
            cache_lease_ns: 25_000,
            slots_count: 1024,
            ring_read_gap_ns: 30_000,
            beat_period_ns: 100_000,
            beat_timeout_ns: 1_000_000,
            repeat_ns: 50_000,
            backoff_max_ns: 100_000,
            reconnect_ns: 200_000,
            name_primary: false,
        }
    }

    /// Checks every key; the error names the first bad one.
    pub fn check(&self) -> Result<(), ConfigError> {
        let c = &self.coordinators;
        if c.is_empty() || c.len() > 64 {
            return bad("coordinators", format!("{} coordinators, 1 to 64 allowed", c.len()));
        }
        if self.nodes_max == 0 || self.nodes_max > 1024 {
            return bad("nodes_max", format!("{}, 1 to 1024 allowed", self.nodes_max));
        }
        for (i, &node) in c.iter().enumerate() {
            if node >= self.nodes_max {
                return bad("coordinators", format!("node {node} is not below nodes_max"));
            }
            if c[..i].contains(&node) {
                return bad("coordinators", format!("node {node} listed twice"));
            }
        }
        for (i, &node) in self.caches.iter().enumerate() {
            if node >= self.nodes_max || c.contains(&node) || self.caches[..i].contains(&node) {
                let why = format!("node {node}: below nodes_max, not a coordinator, listed once");
                return bad("caches", why);
            }
        }
        if !self.caches.is_empty()
            && (self.cache_lease_ns == 0 || self.cache_lease_ns > 10_000_000_000)
        {
            return bad("cache_lease_ns", format!("{} ns: from 1 ns to 10 s", self.cache_lease_ns));
        }
        if !self.slots_count.is_power_of_two() || self.slots_count < 4 {
            return bad("slots_count", format!("{}: a power of two, at least 4", self.slots_count));
        }
        if self.lease_ns > 10_000_000_000 {
            return bad("lease_ns", format!("{} ns: at most 10 s", self.lease_ns));
        }
        for (key, v) in [
            ("ring_read_gap_ns", self.ring_read_gap_ns),
            ("beat_period_ns", self.beat_period_ns),
            ("beat_timeout_ns", self.beat_timeout_ns),
            ("repeat_ns", self.repeat_ns),
            ("reconnect_ns", self.reconnect_ns),
        ] {
            if v == 0 {
                return bad(key, "must be above 0");
            }
        }
        if self.beat_timeout_ns <= 2 * self.beat_period_ns {
            return bad(
                "beat_timeout_ns",
                format!(
                    "{} ns: more than two beat periods ({} ns) are needed",
                    self.beat_timeout_ns, self.beat_period_ns
                ),
            );
        }
        Ok(())
    }

    /// A digest of everything the nodes of a cluster must agree on: each node publishes it on
    /// its board, and coordinators refuse peers whose digest differs (a configuration file
    /// edited on one machine only).
    pub fn fingerprint(&self) -> u64 {
        let mut words = vec![self.cluster, u64::from(self.nodes_max), self.slots_count];
        if self.name_primary {
            words.push(1); // coordinators must agree on it; groups without it keep their digest
        }
        words.extend(self.coordinators.iter().map(|&n| u64::from(n)));
        words.push(u64::MAX); // between the lists
        words.extend(self.caches.iter().map(|&n| u64::from(n)));
        if !self.caches.is_empty() {
            words.extend([self.lease_ns, self.cache_lease_ns]); // δ and ∆ must agree too
        }
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        // Never 0: a board whose fingerprint word is 0 has not been set up yet.
        mu_log::digest(0x6d65_6d62_6572_7368, &bytes) | 1
    }

    /// The position of `node` among the coordinators.
    pub fn position(&self, node: u16) -> Option<usize> {
        self.coordinators.iter().position(|&c| c == node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_keys_are_named() {
        let ok = MembershipConfig::new(1, vec![0, 1, 2], 16);
        ok.check().unwrap();
        let key = |f: fn(&mut MembershipConfig)| {
            let mut c = ok.clone();
            f(&mut c);
            c.check().unwrap_err().key
        };
        assert_eq!(key(|c| c.coordinators.clear()), "coordinators");
        assert_eq!(key(|c| c.coordinators.push(1)), "coordinators");
        assert_eq!(key(|c| c.coordinators.push(16)), "coordinators");
        assert_eq!(key(|c| c.nodes_max = 0), "nodes_max");
        assert_eq!(key(|c| c.slots_count = 1000), "slots_count");
        assert_eq!(key(|c| c.repeat_ns = 0), "repeat_ns");
        assert_eq!(key(|c| c.beat_timeout_ns = c.beat_period_ns), "beat_timeout_ns");
        assert_eq!(key(|c| c.caches = vec![1]), "caches");
        assert_eq!(key(|c| c.caches = vec![5, 5]), "caches");
        assert_eq!(key(|c| (c.caches, c.cache_lease_ns) = (vec![5], 0)), "cache_lease_ns");
    }

    #[test]
    fn the_fingerprint_tells_configurations_apart() {
        let a = MembershipConfig::new(1, vec![0, 1, 2], 16);
        let mut b = a.clone();
        assert_eq!(a.fingerprint(), b.fingerprint());
        b.coordinators = vec![0, 2, 1];
        assert_ne!(a.fingerprint(), b.fingerprint());
        b = a.clone();
        b.lease_ns = 5; // timing may differ between nodes
        assert_eq!(a.fingerprint(), b.fingerprint());
    }
}
