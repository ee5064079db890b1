//! Replication latency of real peer systems, measured on this machine so that Mu's numbers can be
//! set beside them (the comparison of the Mu paper's Figure 4).
//!
//! Each peer replicates one small write to three nodes over loopback, and one sample is the time
//! a client waits until the write is durable in the peer's own sense:
//!
//! * [`System::RedisWait`]: Redis with one primary and two replicas; `SET` then `WAIT 2`, the
//!   write counted when the primary says both replicas acknowledged it.
//! * [`System::Etcd`]: a three-member etcd cluster (Raft, data on tmpfs); a put through the v3
//!   JSON gateway to the leader, counted when the leader answers (committed by a majority).
//! * [`System::Openraft`]: three openraft nodes in one process with an in-process network and
//!   in-memory storage; `client_write` on the leader, counted when it returns (committed by a
//!   majority and applied on the leader). This is a floor for a Raft library: no network, no disk.
//! * [`System::AeronCluster`]: Aeron Cluster with three members on loopback, each its own JVM,
//!   and an echo service; a client JVM sends one message and times it until the leader's echo
//!   (the message committed by a majority and applied).
//!
//! [`measure`] starts the peer's servers itself (private directories, free loopback ports), runs
//! warmup and then measured operations, checks at the end that the last write is readable with the
//! right value on every node, and always stops the servers and removes their directories. The
//! servers are the Debian packages `redis-server` and `etcd-server`, and for Aeron Cluster a Java
//! runtime with our own members and client (`crates/peers/aeron`, built against Aeron from Maven
//! Central): `scripts/install-peers.sh` installs and builds them.

mod aeron;
mod base64;
mod etcd;
mod http;
mod openraft_cluster;
mod process;
mod redis;
mod resp;
mod workload;

use std::fmt;
use std::str::FromStr;

/// A peer system whose replication latency [`measure`] can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum System {
    /// Redis 7: one primary, two replicas, `SET` then `WAIT 2 5000`.
    RedisWait,
    /// etcd 3.4: three members, a put through the v3 JSON gateway to the leader.
    Etcd,
    /// openraft 0.9: three nodes in one process, `client_write` on the leader.
    Openraft,
    /// Aeron Cluster 1.44: three members, one JVM each, an echo service; a message from a client
    /// JVM timed until the leader's echo.
    AeronCluster,
}

impl System {
    /// Every system, in the order a report lists them.
    pub const ALL: [System; 4] =
        [System::RedisWait, System::Etcd, System::Openraft, System::AeronCluster];

    /// The name used on the command line and in reports.
    pub fn name(&self) -> &'static str {
        match self {
            System::RedisWait => "redis-wait",
            System::Etcd => "etcd",
            System::Openraft => "openraft",
            System::AeronCluster => "aeron-cluster",
        }
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of [`System::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown peer system {name:?}: expected one of redis-wait, etcd, openraft, aeron-cluster")]
pub struct UnknownSystem {
    /// The name that was given.
    pub name: String,
}

impl FromStr for System {
    type Err = UnknownSystem;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        System::ALL
            .into_iter()
            .find(|system| system.name() == name)
            .ok_or_else(|| UnknownSystem { name: name.to_string() })
    }
}

/// What to measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Size of each written value.
    pub payload_bytes: usize,
    /// Measured operations; at least 1.
    pub samples: u64,
    /// Operations run before the measured ones and not recorded, so that connections, caches and
    /// the peer's own batching have settled.
    pub warmup: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options { payload_bytes: 64, samples: 10_000, warmup: 1_000 }
    }
}

/// The outcome of one [`measure`] run.
#[derive(Debug, Clone)]
pub struct Samples {
    /// The system measured.
    pub system: System,
    /// One latency per measured operation, in the order they ran.
    pub latencies_ns: Vec<u64>,
    /// The peer's version as the running server reported it, e.g. "Redis 7.0.15".
    pub version: String,
    /// How the number was taken (setup, what one operation is, what was verified), for reports.
    pub notes: String,
}

/// Why a measurement could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The peer's server binary is not on this machine.
    #[error("{system}: {binary} is not installed ({hint})")]
    NotInstalled {
        /// The system that needs it.
        system: &'static str,
        /// The binary that was looked for.
        binary: String,
        /// What to run to install it.
        hint: String,
    },
    /// The peer's servers did not start or did not form a cluster in time.
    #[error("starting the peer failed: {0}")]
    Start(String),
    /// An operation failed, or the final check found a node without the last write.
    #[error("measuring the peer failed: {0}")]
    Failed(String),
}

/// Starts `system`'s servers, runs `opts.warmup` then `opts.samples` writes of
/// `opts.payload_bytes`-byte values (keys cycle over a fixed set, so consecutive writes go to
/// different keys), checks that the last write reached every node, and stops the servers.
///
/// `progress` is called with the number of measured operations done, every few hundred and once
/// at the end.
pub fn measure(
    system: System,
    opts: &Options,
    progress: &mut dyn FnMut(u64),
) -> Result<Samples, PeerError> {
    if opts.samples == 0 {
        return Err(PeerError::Failed("samples must be at least 1".to_string()));
    }
    let samples = match system {
        System::RedisWait => redis::measure(opts, progress)?,
        System::Etcd => etcd::measure(opts, progress)?,
        System::Openraft => openraft_cluster::measure(opts, progress)?,
        System::AeronCluster => aeron::measure(opts, progress)?,
    };
    assert_eq!(samples.system, system);
    assert_eq!(samples.latencies_ns.len() as u64, opts.samples);
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for system in System::ALL {
            assert_eq!(system.name().parse::<System>(), Ok(system));
            assert_eq!(system.to_string(), system.name());
        }
        assert!("redis".parse::<System>().is_err());
        assert!("".parse::<System>().is_err());
    }

    #[test]
    fn zero_samples_is_an_error_not_a_panic() {
        let opts = Options { payload_bytes: 64, samples: 0, warmup: 0 };
        let result = measure(System::Openraft, &opts, &mut |_| {});
        assert!(matches!(result, Err(PeerError::Failed(_))));
    }
}
