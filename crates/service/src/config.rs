//! A cluster's configuration file (TOML), shared by every replica of the cluster and by its
//! clients, and the checks that turn a bad one into a message naming the problem.
//!
//! ```toml
//! cluster_id = 7              # replicas and clients of another cluster cannot attach
//! protocol = "mu"             # the replication engine: "mu" or "velos"
//! app = "kv"                  # what it replicates: "kv" (the key-value store), "orderbook" or
//!                             # "redis" (unmodified Redis, docs/apps/redis.md) or
//!                             # "memcached" (unmodified Memcached, docs/apps/memcached.md)
//! transport = "socket"        # or "fabric": clients on this host may also send requests
//!                             # over request rings (docs/client-path.md; shm only)
//! fabric = "shm"              # processes on one host, over shared memory; or "ofi" (below)
//! run_dir = "/dev/shm/mu-7"   # owner-only: shared memory, sockets, pid and log files; on
//!                             # tmpfs (mu replica and mu cluster up warn where it is not)
//! replicas = [0, 1, 2]
//! mode = "direct"             # or "handover" (a busy-polling replication thread; pinned with
//!                             # mu replica --replication-cpu)
//! threads = "shared"          # or "dedicated": the replica's threads never sleep (a core each)
//!
//! [log]
//! slots = 4096
//! slot_bytes = 4120           # 24 bytes of framing plus the largest request
//! integrity = "checksum"      # or "canary" (only where writes land left to right)
//! snapshot_bytes = 1_048_576  # the largest state a state transfer carries (16 MiB by
//!                             # default for Redis, Memcached and uKharon-KV)
//!
//! [detector]
//! read_period_us = 1000
//! failure_threshold = 2
//! recovery_threshold = 6
//!
//! [metrics]
//! port_base = 9400            # optional: replica N serves Prometheus text on 127.0.0.1:port_base+N
//!
//! [clients.addresses]         # optional: where each replica also accepts clients over TCP
//! 0 = "10.77.0.1:7200"        # (clients on hosts that do not share the run directory; the
//! 1 = "10.77.0.2:7200"        #  client protocol has no authentication: a trusted network)
//! 2 = "10.77.0.3:7200"
//!
//! [ofi]                       # with fabric = "ofi": libfabric over TCP, replicas on any hosts
//! provider = "sockets"       # or "tcp;ofi_rxm" (then one replica per address)
//! [ofi.addresses]             # every replica's host and first port (it uses 5 from there)
//! 0 = "10.77.0.1:7100"
//! 1 = "10.77.0.2:7100"
//! 2 = "10.77.0.3:7100"
//! ```
//!
//! Unknown keys are errors (a misspelt setting must not be silently ignored).
//!
//! `reads = "lease"` (Mu and Velos; default `"log"`): the leader of a uKharon group's active
//! view answers GETs from its own store (`docs/protocols/lease-reads.md`); the file then has
//! a `[ukharon]` section as uKharon-KV's below, with the same keys, and runs on shm only.
//!
//! `protocol = "ukharon-kv"` is uKharon-KV (primary-backup under uKharon's views and leases,
//! `docs/protocols/ukharon-kv.md`): the `replicas` are the group's members, each a `mu replica`
//! process, and `[ukharon]` names the coordinators (processes too, `mu replica --id` one of
//! them) and takes every key of a `mu ukharon` group file under its own name (`poll_gap_ns`,
//! `lease_ns`, `ring_read_gap_ns`, ..., and `[ukharon.lease]`), but for `cluster`, `run_dir`,
//! `members`, `fabric` and `ofi`, which the cluster's `cluster_id`, `run_dir`, `replicas` and
//! `fabric` give. `[log]` sizes each backup's ring of records (`slots` of `slot_bytes`), and
//! `log.snapshot_bytes` the largest store a fresh backup is sent. `mode`, `threads`,
//! `[detector]` and `log.integrity` are Mu's and Velos's, unused. Shm only, for now:
//!
//! ```toml
//! cluster_id = 8
//! protocol = "ukharon-kv"
//! run_dir = "/dev/shm/mu-8"
//! replicas = [3, 4, 5]
//! [log]
//! slots = 256
//! slot_bytes = 1024
//! snapshot_bytes = 16_777_216
//! [ukharon]
//! coordinators = [0, 1, 2]
//! poll_gap_ns = 200_000
//! lease_ns = 3_000_000
//! [ukharon.lease]
//! lease_max_ns = 100_000_000
//! ```

use crate::app::App;
use crate::socket::Endpoint;
use mu_fabric::NodeId;
use mu_log::Integrity;
use mu_replica::ReplicaConfig;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The largest log a replica may ask for: its region is shared memory (tmpfs), and a log that
/// does not fit there fails later with a bus error rather than a message.
pub const LOG_BYTES_MAX: u64 = 4 << 30;

/// The `app` of a replicated Redis.
pub const REDIS: &str = "redis";

/// The `app` of a replicated Memcached.
pub const MEMCACHED: &str = "memcached";

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    pub cluster_id: u64,
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// The replicated application: "kv" (the key-value store) or "orderbook" (the order
    /// matching engine, `docs/apps/orderbook.md`).
    #[serde(default = "default_app")]
    pub app: String,
    /// How clients reach the replicas: "socket" (Unix sockets, and TCP with `[clients]`) or
    /// "fabric" (request rings on the fabric besides; `docs/client-path.md`).
    #[serde(default = "default_transport")]
    pub transport: String,
    #[serde(default = "default_fabric")]
    pub fabric: String,
    pub run_dir: PathBuf,
    pub replicas: Vec<u16>,
    #[serde(default = "default_mode")]
    pub mode: String,
    /// How the replicas' threads wait when idle: "shared" (back off) or "dedicated" (spin).
    #[serde(default = "default_threads")]
    pub threads: String,
    /// Mu and Velos: how GETs are answered, "log" (proposed like writes) or "lease" (by the
    /// leader of uKharon's active view from its own store; needs `[ukharon]`).
    #[serde(default = "default_reads")]
    pub reads: String,
    #[serde(default)]
    pub log: LogSection,
    #[serde(default)]
    pub detector: DetectorSection,
    #[serde(default)]
    pub metrics: MetricsSection,
    /// The libfabric fabric's settings; required with `fabric = "ofi"`, refused otherwise.
    pub ofi: Option<OfiSection>,
    /// Client access over TCP; without it, clients use the Unix sockets in `run_dir`.
    pub clients: Option<ClientsSection>,
    /// uKharon's group (`protocol = "ukharon-kv"`, or `reads = "lease"`): its coordinators and
    /// the keys of a `mu ukharon` group file (checked whole by the daemon, which reads that
    /// format).
    pub ukharon: Option<toml::Table>,
}

/// How clients reach the replicas (`transport`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Unix sockets (and TCP where `[clients]` says).
    Socket,
    /// Request rings over the fabric besides, for clients on the replicas' host.
    Fabric,
}

/// How a Mu or Velos cluster answers GETs (`reads`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// Through the log, like writes.
    Log,
    /// Locally, by the leader of uKharon's active view (`docs/protocols/lease-reads.md`).
    Lease,
}

/// The protocol name of uKharon-KV.
pub const UKHARON_KV: &str = "ukharon-kv";

/// The largest snapshot a state transfer carries, by default: the store a fresh uKharon-KV
/// backup receives, a Redis or Memcached replica's state.
pub const SNAPSHOT_BYTES_DEFAULT: u64 = 16 << 20;

/// The same for the built-in key-value store and order book under Mu and Velos.
pub const SNAPSHOT_BYTES_BUILT_IN: u64 = 1 << 20;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientsSection {
    /// Replica id (as a key) to `"host:port"`, where it accepts clients.
    pub addresses: std::collections::BTreeMap<String, String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OfiSection {
    #[serde(default = "default_provider")]
    pub provider: String,
    /// Replica id (as a key) to `"host:port"`, the first of the replica's ports.
    pub addresses: std::collections::BTreeMap<String, String>,
}

/// Where a replica listens on the libfabric fabric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfiAddress {
    pub id: u16,
    pub host: String,
    pub base_port: u16,
}

impl OfiSection {
    /// Every node's address, in id order: one per node of `ids` (called `nodes.noun` in
    /// messages), each key one of them, every port above zero. Other files with an `[ofi]`
    /// section (a uKharon group's) read it with this too.
    pub fn addresses_of(&self, nodes: &NodeNames, ids: &[u16]) -> Result<Vec<OfiAddress>, String> {
        Ok(host_ports("ofi.addresses", &self.addresses, nodes, ids)?
            .into_iter()
            .map(|(id, host, base_port)| OfiAddress { id, host, base_port })
            .collect())
    }
}

/// How messages about a table of addresses name its nodes.
pub struct NodeNames {
    /// One node: "replica".
    pub noun: &'static str,
    /// The key that lists them: "replicas".
    pub list_key: &'static str,
}

/// A cluster's replicas.
pub const REPLICAS: NodeNames = NodeNames { noun: "replica", list_key: "replicas" };

/// A table of one `"host:port"` per node of `ids` (`name` in messages), in id order: every key
/// one of `ids`, every node present, every port above zero.
pub fn host_ports(
    name: &str,
    table: &std::collections::BTreeMap<String, String>,
    nodes: &NodeNames,
    ids: &[u16],
) -> Result<Vec<(u16, String, u16)>, String> {
    let (noun, list_key) = (nodes.noun, nodes.list_key);
    let mut out = Vec::new();
    for (key, value) in table {
        let id: u16 = key.parse().map_err(|_| format!("{name}: key {key:?} is not a {noun} id"))?;
        if id.to_string() != *key {
            // "0", "00" and "+0" would all be node 0, each with its own address.
            return Err(format!("{name}: write key {key:?} as \"{id}\""));
        }
        if !ids.contains(&id) {
            return Err(format!("{name}: {noun} {id} is not in {list_key}"));
        }
        let (host, port) = value
            .rsplit_once(':')
            .ok_or_else(|| format!("{name}.{id} = {value:?}: write \"host:port\""))?;
        let port: u16 = port
            .parse()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| format!("{name}.{id} = {value:?}: bad port {port:?}"))?;
        if host.is_empty() {
            return Err(format!("{name}.{id} = {value:?}: empty host"));
        }
        out.push((id, host.to_string(), port));
    }
    if let Some(missing) = ids.iter().find(|r| !out.iter().any(|a| a.0 == **r)) {
        return Err(format!("{name}: no address for {noun} {missing}"));
    }
    out.sort_by_key(|a| a.0);
    Ok(out)
}

/// A section may name only some settings: the others keep their defaults.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    pub slots: u64,
    pub slot_bytes: u32,
    pub integrity: String,
    /// The largest snapshot a state transfer carries, in bytes ([`ClusterConfig::snapshot_bytes`]).
    pub snapshot_bytes: Option<u64>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DetectorSection {
    pub read_period_us: u64,
    pub failure_threshold: u8,
    pub recovery_threshold: u8,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    pub port_base: Option<u16>,
}

fn default_protocol() -> String {
    "mu".into()
}
fn default_provider() -> String {
    "sockets".into()
}
fn default_fabric() -> String {
    "shm".into()
}
fn default_transport() -> String {
    "socket".into()
}
fn default_app() -> String {
    "kv".into()
}
fn default_reads() -> String {
    "log".into()
}

fn default_threads() -> String {
    "shared".into()
}
fn default_mode() -> String {
    "direct".into()
}

impl Default for LogSection {
    fn default() -> LogSection {
        LogSection {
            slots: 4096,
            slot_bytes: 4096 + 24,
            integrity: "checksum".into(),
            snapshot_bytes: None,
        }
    }
}

impl Default for DetectorSection {
    fn default() -> DetectorSection {
        DetectorSection { read_period_us: 1000, failure_threshold: 2, recovery_threshold: 6 }
    }
}

impl ClusterConfig {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<ClusterConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading the configuration {}: {e}", path.display()))?;
        ClusterConfig::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses and checks a configuration.
    pub fn parse(text: &str) -> Result<ClusterConfig, String> {
        let config: ClusterConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        config.check()?;
        Ok(config)
    }

    /// Everything that can be checked without touching the machine.
    fn check(&self) -> Result<(), String> {
        self.check_protocol()?;
        match (self.fabric.as_str(), &self.ofi) {
            ("shm", None) => {}
            ("shm", Some(_)) => {
                return Err("[ofi] is set but fabric is \"shm\": set fabric = \"ofi\" or remove \
                            the section"
                    .into())
            }
            ("ofi", None) => {
                return Err(
                    "fabric \"ofi\" needs an [ofi] section with every replica's address".into()
                )
            }
            ("ofi", Some(_)) => {
                self.ofi_addresses()?;
            }
            (other, _) => {
                return Err(format!("fabric \"{other}\": use \"shm\" or \"ofi\""));
            }
        }
        self.client_addresses()?;
        self.transport()?;
        if !matches!(self.mode.as_str(), "direct" | "handover") {
            return Err(format!("mode \"{}\": use \"direct\" or \"handover\"", self.mode));
        }
        self.threads()?;
        self.check_replica_ids()?;
        if let Some(base) = self.metrics.port_base {
            let highest = self.replicas.iter().max().copied().unwrap_or(0);
            if base == 0 || base.checked_add(highest).is_none() {
                return Err(format!(
                    "metrics.port_base {base}: replica N serves on port_base + N, so it must be \
                     1 to {} for ids up to {highest}",
                    u16::MAX - highest
                ));
            }
        }
        if !self.run_dir.is_absolute() {
            return Err(format!("run_dir {} must be an absolute path", self.run_dir.display()));
        }
        let log_bytes = self.log.slots.saturating_mul(u64::from(self.log.slot_bytes));
        if log_bytes > LOG_BYTES_MAX {
            return Err(format!(
                "log: {} slots of {} bytes is {log_bytes} bytes, more than a replica may map \
                 ({LOG_BYTES_MAX})",
                self.log.slots, self.log.slot_bytes
            ));
        }
        // The settings the replica's own checks also make, named as this file names them.
        let slot_bytes = self.log.slot_bytes;
        let framing = mu_log::MIN_SLOT_BYTES;
        if slot_bytes < framing || slot_bytes % 8 != 0 {
            return Err(format!(
                "log.slot_bytes is {slot_bytes}: slots are a multiple of 8 bytes and at least \
                 {framing} (an entry's framing) plus the largest request"
            ));
        }
        // The replica's detector takes periods of up to a second.
        const READ_PERIOD_US_MAX: u64 = 1_000_000;
        match self.detector.read_period_us {
            0 => {
                return Err("detector.read_period_us is 0: heartbeats must be read at some \
                            period (the default is 1000)"
                    .into())
            }
            p if p > READ_PERIOD_US_MAX => {
                return Err(format!(
                    "detector.read_period_us is {p}: at most {READ_PERIOD_US_MAX} (1 s); a \
                     failure detector that reads less often could not tell a failure for many \
                     seconds"
                ))
            }
            _ => {}
        }
        let value_bytes = (slot_bytes - framing) as usize;
        if value_bytes < mu_kv::PUT_BYTES_MIN {
            return Err(format!(
                "log.slot_bytes is {slot_bytes}: an entry then holds {value_bytes} bytes, less \
                 than the smallest put ({} bytes: an empty key and value); make it the largest \
                 request plus {framing}",
                mu_kv::PUT_BYTES_MIN
            ));
        }
        if !self.is_ukharon_kv() {
            self.replica_config(self.replicas[0])?
                .validate()
                .map_err(|e| format!("configuration: {e}"))?;
        }
        Ok(())
    }

    /// `replicas`: at least one, none twice, each below 64.
    fn check_replica_ids(&self) -> Result<(), String> {
        if self.replicas.is_empty() {
            return Err("replicas: the cluster needs at least one".into());
        }
        let mut seen = self.replicas.clone();
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("replicas: id {} appears twice", w[0]));
        }
        if let Some(&id) = self.replicas.iter().find(|&&id| id >= 64) {
            return Err(format!("replicas: id {id} is too large (ids are 0 to 63)"));
        }
        Ok(())
    }

    /// The protocol, how it reads, and the sections that go with them.
    fn check_protocol(&self) -> Result<(), String> {
        let reads = self.reads()?;
        if self.is_redis() {
            if self.is_ukharon_kv() || reads == Reads::Lease || self.fabric != "shm" {
                return Err("app = \"redis\" runs with protocol = \"mu\" or \"velos\", reads through the log \
                            and fabric = \"shm\": other protocols, fabrics and lease reads \
                            are not built for it (docs/apps/redis.md)"
                    .into());
            }
            return Ok(());
        }
        if self.is_memcached() {
            if self.is_ukharon_kv() || reads == Reads::Lease || self.fabric != "shm" {
                return Err("app = \"memcached\" runs with protocol = \"mu\" or \"velos\", reads \
                            through the log and fabric = \"shm\": other protocols, fabrics and \
                            lease reads are not built for it (docs/apps/memcached.md)"
                    .into());
            }
            return Ok(());
        }
        if self.app()? == App::Orderbook {
            if self.is_ukharon_kv() {
                return Err(format!(
                    "app = \"orderbook\": protocol = \"{UKHARON_KV}\" replicates the key-value \
                     store only; use protocol = \"mu\" or \"velos\""
                ));
            }
            if reads == Reads::Lease {
                return Err("reads = \"lease\" answers key-value GETs locally; the order book \
                            (app = \"orderbook\") has no reads: remove it"
                    .into());
            }
        }
        if self.is_ukharon_kv() {
            if self.reads != default_reads() {
                return Err(format!(
                    "reads: for Mu and Velos (protocol = \"{UKHARON_KV}\" always answers GETs \
                     from the primary's store, under its lease)"
                ));
            }
            return self.check_ukharon_kv();
        }
        self.protocol()?;
        if reads == Reads::Lease {
            self.check_group("reads = \"lease\"")?;
        } else if self.ukharon.is_some() {
            return Err(format!(
                "ukharon: a section for protocol = \"{UKHARON_KV}\" or reads = \"lease\" only \
                 (protocol is \"{}\", reads \"{}\")",
                self.protocol, self.reads
            ));
        }
        self.check_snapshot_bytes("a state transfer needs room for the application's state")
    }

    /// `log.snapshot_bytes`, if set: 1 to [`LOG_BYTES_MAX`].
    fn check_snapshot_bytes(&self, why: &str) -> Result<(), String> {
        match self.log.snapshot_bytes {
            Some(0) => Err(format!("log.snapshot_bytes: 0; {why}")),
            Some(n) if n > LOG_BYTES_MAX => {
                Err(format!("log.snapshot_bytes: {n}, above {LOG_BYTES_MAX}"))
            }
            _ => Ok(()),
        }
    }

    /// Whether the cluster runs uKharon-KV rather than a replication engine.
    pub fn is_ukharon_kv(&self) -> bool {
        self.protocol == UKHARON_KV
    }

    /// What `protocol = "ukharon-kv"` asks of the rest of the file: `[ukharon]` with
    /// coordinators that are not replicas, the shm fabric, a ring the records fit in.
    fn check_ukharon_kv(&self) -> Result<(), String> {
        self.check_group(&format!("protocol = \"{UKHARON_KV}\""))?;
        mu_primary_backup::Ring::new(self.log.slots, self.log.slot_bytes as usize)
            .map_err(|e| format!("log: {e} (the ring of records each backup holds)"))?;
        self.check_snapshot_bytes("a fresh backup needs room for the store")
    }

    /// What a cluster with a uKharon group (`what` says why it has one) asks of the file:
    /// `[ukharon]` with coordinators that are not replicas, and the shm fabric.
    fn check_group(&self, what: &str) -> Result<(), String> {
        if self.ukharon.is_none() {
            return Err(format!(
                "ukharon: missing ({what} needs [ukharon] with the coordinators, e.g. \
                 coordinators = [0, 1, 2])"
            ));
        }
        if self.fabric != "shm" {
            return Err(format!(
                "fabric \"{}\": {what} runs on \"shm\" only, for now",
                self.fabric
            ));
        }
        let coordinators = self.coordinators()?;
        if let Some(c) = coordinators.iter().find(|c| self.replicas.contains(c)) {
            return Err(format!("ukharon.coordinators: node {c} is also a replica"));
        }
        Ok(())
    }

    /// How clients reach the replicas (`transport`).
    pub fn transport(&self) -> Result<Transport, String> {
        match (self.transport.as_str(), self.fabric.as_str()) {
            ("socket", _) => Ok(Transport::Socket),
            ("fabric", "shm") => Ok(Transport::Fabric),
            ("fabric", other) => Err(format!(
                "transport = \"fabric\": for fabric = \"shm\" only, for now (fabric is \
                 \"{other}\"); use transport = \"socket\""
            )),
            (other, _) => Err(format!(
                "transport \"{other}\": use \"socket\" (Unix sockets, and TCP with \
                 [clients]) or \"fabric\" (request rings over the fabric besides)"
            )),
        }
    }

    /// Where replica `id`'s fabric node for clients lives (`transport = "fabric"`): clients
    /// start theirs there.
    pub fn clients_fabric_dir(&self, id: u16) -> PathBuf {
        self.run_dir.join(format!("clients-{id}"))
    }

    /// A client of this cluster: its endpoints, and the fabric where the transport is.
    pub fn client(&self) -> Result<crate::Client, String> {
        let mut client =
            crate::Client::new(self.cluster_id, self.endpoints()).map_err(|e| e.to_string())?;
        client.over_fabric(self.transport()? == Transport::Fabric);
        // Replicas on this host, on shm: their crashes are noticed at once.
        if self.fabric == "shm" && !self.is_ukharon_kv() {
            client.watch_crashes(self.run_dir.clone());
        }
        Ok(client)
    }

    /// `app = "redis"`: unmodified Redis replicated by its effect stream (`mu-redis`,
    /// docs/apps/redis.md), beside the service's applications rather than one of them.
    pub fn is_redis(&self) -> bool {
        self.app == REDIS
    }

    /// `app = "memcached"`: unmodified Memcached replicated by request capture
    /// (`mu-memcached`, docs/apps/memcached.md), beside the service's applications too.
    pub fn is_memcached(&self) -> bool {
        self.app == MEMCACHED
    }

    /// The replicated application (`app`) of the service (not Redis: [`Self::is_redis`]).
    pub fn app(&self) -> Result<App, String> {
        App::parse(&self.app)
    }

    /// How GETs are answered (`reads`).
    pub fn reads(&self) -> Result<Reads, String> {
        match self.reads.as_str() {
            "log" => Ok(Reads::Log),
            "lease" => Ok(Reads::Lease),
            other => Err(format!(
                "reads \"{other}\": use \"log\" (GETs go through the log) or \"lease\" (the \
                 leader of uKharon's active view answers them from its store)"
            )),
        }
    }

    /// Whether the cluster has a uKharon group: uKharon-KV, or Mu and Velos with leased reads.
    pub fn has_group(&self) -> bool {
        self.is_ukharon_kv() || self.reads == "lease"
    }

    /// uKharon's coordinators (`ukharon.coordinators`); none without a group.
    pub fn coordinators(&self) -> Result<Vec<u16>, String> {
        let Some(table) = &self.ukharon else { return Ok(Vec::new()) };
        let key = "ukharon.coordinators";
        let Some(toml::Value::Array(items)) = table.get("coordinators") else {
            return Err(format!("{key}: a list of node ids is expected"));
        };
        let ids = items
            .iter()
            .map(|v| match v.as_integer() {
                Some(i) if (0..64).contains(&i) => Ok(i as u16),
                _ => Err(format!("{key}: {v:?} is not a node id (0 to 63)")),
            })
            .collect::<Result<Vec<u16>, String>>()?;
        if ids.is_empty() {
            return Err(format!("{key}: at least one coordinator is needed"));
        }
        Ok(ids)
    }

    /// Every process of the cluster, in the order they start: uKharon-KV's coordinators (which
    /// the replicas join), then the replicas.
    pub fn processes(&self) -> Vec<u16> {
        let coordinators = self.coordinators().unwrap_or_default();
        coordinators.iter().chain(&self.replicas).copied().collect()
    }

    /// The largest snapshot a state transfer carries: the store a fresh uKharon-KV backup
    /// receives, or the application's state a Mu or Velos replica reads from a peer. By
    /// default [`SNAPSHOT_BYTES_DEFAULT`], but 1 MiB for the built-in key-value store and
    /// order book under Mu and Velos (each replica registers a region of twice this size).
    pub fn snapshot_bytes(&self) -> u64 {
        let built_in = !self.is_ukharon_kv() && !self.is_redis() && !self.is_memcached();
        let default = if built_in { SNAPSHOT_BYTES_BUILT_IN } else { SNAPSHOT_BYTES_DEFAULT };
        self.log.snapshot_bytes.unwrap_or(default)
    }

    /// The replica configuration of replica `id`.
    pub fn replica_config(&self, id: u16) -> Result<ReplicaConfig, String> {
        if !self.replicas.contains(&id) {
            return Err(format!(
                "replica {id} is not in this cluster (replicas: {:?})",
                self.replicas
            ));
        }
        let ids = self.replicas.iter().map(|&r| NodeId(r)).collect();
        let mut c = ReplicaConfig::new(NodeId(id), ids);
        c.protocol = self.protocol()?;
        c.slots_count = self.log.slots;
        c.slot_bytes = self.log.slot_bytes;
        c.integrity = match self.log.integrity.as_str() {
            "checksum" => Integrity::Checksum,
            "canary" => Integrity::Canary,
            other => {
                return Err(format!("log.integrity \"{other}\": use \"checksum\" or \"canary\""))
            }
        };
        c.snapshot_bytes_max = usize::try_from(self.snapshot_bytes())
            .map_err(|_| "log.snapshot_bytes: too large for this host".to_string())?;
        c.detector.read_period_ns = self.detector.read_period_us.saturating_mul(1000);
        c.threads = self.threads()?;
        c.detector.failure_threshold = self.detector.failure_threshold;
        c.detector.recovery_threshold = self.detector.recovery_threshold;
        if self.reads()? == Reads::Lease {
            c.leaders = mu_replica::Leaders::Appointed;
        }
        c.application = match self.app() {
            _ if self.is_redis() => REDIS,
            _ if self.is_memcached() => MEMCACHED,
            Ok(App::Kv) => "",
            other => other?.name(),
        };
        Ok(c)
    }

    /// Every replica's address on the libfabric fabric, in id order (`fabric = "ofi"`).
    pub fn ofi_addresses(&self) -> Result<Vec<OfiAddress>, String> {
        let Some(ofi) = &self.ofi else { return Err("no [ofi] section".into()) };
        ofi.addresses_of(&REPLICAS, &self.replicas)
    }

    /// Every replica's TCP address for clients (`"host:port"`), in id order, if the
    /// configuration has a `[clients]` section.
    pub fn client_addresses(&self) -> Result<Option<Vec<(u16, String)>>, String> {
        let Some(clients) = &self.clients else { return Ok(None) };
        let addresses =
            host_ports("clients.addresses", &clients.addresses, &REPLICAS, &self.replicas)?;
        Ok(Some(
            addresses.into_iter().map(|(id, host, port)| (id, format!("{host}:{port}"))).collect(),
        ))
    }

    /// The libfabric provider (`fabric = "ofi"`).
    pub fn ofi_provider(&self) -> &str {
        self.ofi.as_ref().map_or("sockets", |o| o.provider.as_str())
    }

    /// The replication engine.
    pub fn protocol(&self) -> Result<mu_replica::Protocol, String> {
        self.protocol.parse::<mu_replica::Protocol>().map_err(|e| format!("protocol: {e}"))
    }

    /// How the replicas' threads wait when idle.
    pub fn threads(&self) -> Result<mu_replica::Threads, String> {
        match self.threads.as_str() {
            "shared" => Ok(mu_replica::Threads::Shared),
            "dedicated" => Ok(mu_replica::Threads::Dedicated),
            other => Err(format!(
                "threads \"{other}\": use \"shared\" (threads back off when idle) or \
                 \"dedicated\" (they spin, each on a core of its own)"
            )),
        }
    }

    pub fn mode(&self) -> mu_replica::Mode {
        match self.mode.as_str() {
            "handover" => mu_replica::Mode::Handover,
            _ => mu_replica::Mode::Direct,
        }
    }

    /// Where replica `id` serves clients.
    pub fn socket_path(&self, id: u16) -> PathBuf {
        self.run_dir.join(format!("kv-{id}.sock"))
    }

    /// Where replica `id` writes its process id while it runs.
    pub fn pid_path(&self, id: u16) -> PathBuf {
        self.run_dir.join(format!("replica-{id}.pid"))
    }

    /// Where `mu cluster up` sends replica `id`'s output.
    pub fn log_path(&self, id: u16) -> PathBuf {
        self.run_dir.join(format!("replica-{id}.log"))
    }

    /// Every replica's id and socket in the run directory.
    pub fn socket_endpoints(&self) -> Vec<(u16, PathBuf)> {
        self.replicas.iter().map(|&id| (id, self.socket_path(id))).collect()
    }

    /// Every replica's id and endpoint, for a client: its TCP address if the configuration
    /// has a `[clients]` section, else its socket in the run directory.
    pub fn endpoints(&self) -> Vec<(u16, Endpoint)> {
        match self.client_addresses() {
            Ok(Some(addresses)) => {
                addresses.into_iter().map(|(id, addr)| (id, Endpoint::Tcp(addr))).collect()
            }
            // `check` refused a bad section when the configuration was loaded.
            _ => self
                .socket_endpoints()
                .into_iter()
                .map(|(id, path)| (id, Endpoint::Unix(path)))
                .collect(),
        }
    }

    /// Where replica `id` accepts clients over TCP, if anywhere.
    pub fn client_address(&self, id: u16) -> Option<String> {
        self.client_addresses().ok().flatten()?.into_iter().find(|a| a.0 == id).map(|a| a.1)
    }

    /// The name (before a `-<pid>-<n>` suffix) of the file `prepare_run_dir` writes to learn
    /// whether the run directory is writable and whose it is; removed at once.
    pub const WRITE_PROBE: &'static str = ".mu-write-probe";

    /// Creates the run directory (owner-only) if needed and checks that it is a writable
    /// directory of this user that others cannot enter.
    pub fn prepare_run_dir(&self) -> Result<(), String> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        let dir = &self.run_dir;
        if dir.exists() && !dir.is_dir() {
            // Said plainly: creating it would fail with "File exists".
            return Err(format!("run_dir {} is not a directory", dir.display()));
        }
        match std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) => return Err(format!("run_dir {}: cannot create it: {e}", dir.display())),
        }
        let meta = std::fs::metadata(dir).map_err(|e| format!("run_dir {}: {e}", dir.display()))?;
        if !meta.is_dir() {
            return Err(format!("run_dir {} is not a directory", dir.display()));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(format!(
                "run_dir {} is open to other users (mode {:o}): it must be owner-only (chmod 700)",
                dir.display(),
                meta.mode() & 0o777
            ));
        }
        // A file we create is ours: its owner is who we are (no unsafe call needed for it).
        // Each caller has its own probe, and asks the open file (not the path) who owns it:
        // the replicas of `mu cluster up` prepare the same directory at the same moment, and
        // with one shared name one replica removed the probe between another's write and its
        // look at it.
        static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let number = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let probe = dir.join(format!("{}-{}-{number}", Self::WRITE_PROBE, std::process::id()));
        let file = std::fs::File::create(&probe)
            .map_err(|e| format!("run_dir {} is not writable: {e}", dir.display()))?;
        let me = file.metadata().map(|m| m.uid());
        drop(file);
        let _ = std::fs::remove_file(&probe);
        if me.map_err(|e| format!("run_dir {}: {e}", dir.display()))? != meta.uid() {
            return Err(format!(
                "run_dir {} belongs to another user (uid {}): refusing to use it",
                dir.display(),
                meta.uid()
            ));
        }
        Ok(())
    }
}
