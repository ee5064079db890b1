//! A uKharon group's TOML file: its coordinators and members, the fabric they run on, where
//! they keep their run files, and every key of `MembershipConfig` and of the lease engine's
//! `LeaseConfig` under the field's own name. Errors name the key.
//!
//! ```toml
//! cluster = 0x756b      # the cluster id
//! run_dir = "/dev/shm/mu-ukharon"
//! fabric = "shm"        # processes on this host; or "ofi" (libfabric over TCP, any hosts):
//! # [ofi]               # then, as in a cluster's file (`mu_service::config`):
//! # provider = "sockets"  # or "tcp;ofi_rxm" (then one node per address)
//! # [ofi.addresses]     # every node's host and first port (it uses 5 from there)
//! # 0 = "10.77.0.1:7100"
//! coordinators = [0, 1, 2]
//! members = [3, 4, 5]
//! # nodes_max = 6       # default: the highest id plus one
//! poll_gap_ns = 200_000 # between two polls of a node's core; 0 spins on a core
//! lease_ns = 3_000_000
//! ring_read_gap_ns = 10_000_000
//! beat_period_ns = 10_000_000
//! beat_timeout_ns = 150_000_000
//! repeat_ns = 5_000_000
//! backoff_max_ns = 2_000_000
//! reconnect_ns = 5_000_000
//! # slots_count = 1024
//! [lease]
//! lease_max_ns = 100_000_000
//! renew_margin_ns = 1_500_000
//! # drift_ppm = 10_000, cross_core_ns = 64
//! ```
//!
//! A key left out takes the paper's value (`MembershipConfig::new`, `LeaseConfig::default`):
//! 20 µs leases, a 30 µs ring gap, 1 ms beat timeout, for nodes that each spin on a core of
//! their own. Where processes share a few cores (this project's 2-vCPU machines run six of
//! them), a process is descheduled for milliseconds at a time, and the paper's values would
//! remove live nodes and let leases lapse; [`shared_host`] holds the values above, chosen so:
//!
//! * `poll_gap_ns` 200 µs: a thread that sleeps between polls leaves the cores to the others;
//! * `lease_ns` 3 ms with `renew_margin_ns` 1.5 ms: a lease is renewed by a poll that comes up
//!   to 1.5 ms late, so that `Active` stays true through ordinary scheduling delays;
//! * `ring_read_gap_ns` 10 ms: the ring reports a successor whose counter did not move
//!   between two reads 10 ms apart, ten times the scheduling delays seen here under load,
//!   and still catches a stopped process (SIGSTOP) in a few tens of milliseconds;
//! * `beat_period_ns` 10 ms, `beat_timeout_ns` 150 ms: the catastrophic detector only fires
//!   on a node silent for 150 ms (a stopped process, a partition);
//! * `repeat_ns` 5 ms, `reconnect_ns` 5 ms, `backoff_max_ns` 2 ms: retries at the pace of
//!   the polls;
//! * `lease_max_ns` 100 ms: above `lease_ns`, which the default (1 ms) is not.

use mu_membership::MembershipConfig;
use mu_service::config::{NodeNames, OfiAddress, OfiSection};
use mu_ukharon::lease::LeaseConfig;
use std::path::{Path, PathBuf};
use toml::{Table, Value};

/// See the module docs.
#[derive(Clone, Debug)]
pub struct UkharonConfig {
    pub membership: MembershipConfig,
    pub lease: LeaseConfig,
    pub members: Vec<u16>,
    pub run_dir: PathBuf,
    pub poll_gap_ns: u64,
    pub fabric: FabricChoice,
}

/// The fabric the nodes run on (`fabric`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FabricChoice {
    /// Processes on this host, over shared memory in `run_dir`.
    Shm,
    /// libfabric over TCP (`[ofi]`): every node at its address, on any host.
    Ofi { provider: String, addresses: Vec<OfiAddress> },
}

/// How messages about `ofi.addresses` name a group's nodes.
const NODES: NodeNames = NodeNames { noun: "node", list_key: "coordinators, members or caches" };

/// What a node is in the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Coordinator,
    Member,
    /// A lease cache (§6.3): members renew through it.
    Cache,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Coordinator => "coordinator",
            Role::Member => "member",
            Role::Cache => "cache",
        }
    }
}

/// The keys of the top level and of `[lease]`; any other is refused (a misspelt key would
/// otherwise leave the paper's value in place without a word).
const TOP_KEYS: &[&str] = &[
    "cluster",
    "run_dir",
    "fabric",
    "ofi",
    "coordinators",
    "members",
    "caches",
    "cache_lease_ns",
    "nodes_max",
    "poll_gap_ns",
    "lease_ns",
    "slots_count",
    "ring_read_gap_ns",
    "beat_period_ns",
    "beat_timeout_ns",
    "repeat_ns",
    "backoff_max_ns",
    "reconnect_ns",
    "lease",
];
const LEASE_KEYS: &[&str] = &["drift_ppm", "cross_core_ns", "renew_margin_ns", "lease_max_ns"];

impl UkharonConfig {
    pub fn load(path: &Path) -> Result<UkharonConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading the configuration {}: {e}", path.display()))?;
        UkharonConfig::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses and checks a configuration.
    pub fn parse(text: &str) -> Result<UkharonConfig, String> {
        let table: Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        UkharonConfig::from_table(&table)
    }

    /// Checks a configuration read already (a uKharon-KV cluster's `[ukharon]`, completed).
    pub fn from_table(table: &Table) -> Result<UkharonConfig, String> {
        let table = table.clone();
        refuse_unknown(&table, TOP_KEYS, "")?;
        let lease_table = match table.get("lease") {
            None => Table::new(),
            Some(Value::Table(t)) => t.clone(),
            Some(_) => return Err("lease: a table ([lease]) is expected".into()),
        };
        refuse_unknown(&lease_table, LEASE_KEYS, "lease.")?;
        let cluster = int(&table, "cluster")?.ok_or("cluster: missing (the cluster's id)")?;
        let run_dir = match table.get("run_dir") {
            Some(Value::String(s)) if !s.is_empty() => PathBuf::from(s),
            Some(_) => return Err("run_dir: a non-empty string (a directory) is expected".into()),
            None => return Err("run_dir: missing (where the nodes keep their files)".into()),
        };
        let coordinators = ids(&table, "coordinators")?;
        let members = ids(&table, "members")?;
        if let Some(&n) = members.iter().find(|n| coordinators.contains(n)) {
            return Err(format!("members: node {n} is also a coordinator"));
        }
        check_distinct("members", &members)?;
        let caches = match table.get("caches") {
            None => Vec::new(),
            Some(_) => ids(&table, "caches")?,
        };
        if let Some(&n) = caches.iter().find(|n| coordinators.contains(n) || members.contains(n)) {
            return Err(format!("caches: node {n} is also a coordinator or a member"));
        }
        let highest =
            coordinators.iter().chain(&members).chain(&caches).copied().max().unwrap_or(0);
        let nodes_max = match int(&table, "nodes_max")? {
            None => highest + 1,
            Some(n) => u16::try_from(n).map_err(|_| format!("nodes_max: {n} is too large"))?,
        };
        if nodes_max <= highest {
            return Err(format!("nodes_max: {nodes_max}, but node {highest} is configured"));
        }
        // The shm fabric's node ids are below 64.
        if highest >= mu_fabric_shm::layout::MAX_NODES as u16 {
            return Err(format!("members: node {highest}: shm node ids are below 64"));
        }
        let all: Vec<u16> = coordinators.iter().chain(&members).chain(&caches).copied().collect();
        let fabric = fabric_choice(&table, &all)?;
        let mut m = MembershipConfig::new(cluster, coordinators, nodes_max);
        m.caches = caches;
        let fields: [(&'static str, &mut u64); 9] = [
            ("cache_lease_ns", &mut m.cache_lease_ns),
            ("lease_ns", &mut m.lease_ns),
            ("slots_count", &mut m.slots_count),
            ("ring_read_gap_ns", &mut m.ring_read_gap_ns),
            ("beat_period_ns", &mut m.beat_period_ns),
            ("beat_timeout_ns", &mut m.beat_timeout_ns),
            ("repeat_ns", &mut m.repeat_ns),
            ("backoff_max_ns", &mut m.backoff_max_ns),
            ("reconnect_ns", &mut m.reconnect_ns),
        ];
        for (key, field) in fields {
            if let Some(v) = int(&table, key)? {
                *field = v;
            }
        }
        m.check().map_err(|e| e.to_string())?;
        let lease = lease_config(&lease_table)?;
        if m.lease_ns > lease.lease_max_ns {
            return Err(format!(
                "lease.lease_max_ns: {} ns is below lease_ns ({} ns): members would refuse \
                 every view",
                lease.lease_max_ns, m.lease_ns
            ));
        }
        let poll_gap_ns = int(&table, "poll_gap_ns")?.unwrap_or(0);
        if poll_gap_ns >= m.lease_ns.max(1) {
            return Err(format!(
                "poll_gap_ns: {poll_gap_ns} ns, not below lease_ns ({} ns): no lease would be \
                 renewed in time",
                m.lease_ns
            ));
        }
        let config = UkharonConfig { membership: m, lease, members, run_dir, poll_gap_ns, fabric };
        config.check_fabric()?;
        Ok(config)
    }

    /// The libfabric fabric's own checks (provider, ports), made when the file is read so that
    /// every command refuses the same mistakes; a build without it refuses `fabric = "ofi"`.
    #[cfg(feature = "ofi")]
    fn check_fabric(&self) -> Result<(), String> {
        let Some(ofi) = self.ofi_config(self.nodes()[0]) else { return Ok(()) };
        if !mu_fabric_ofi::PROVIDERS.contains(&ofi.provider.as_str()) {
            let known = mu_fabric_ofi::PROVIDERS.join(", ");
            return Err(format!(
                "ofi.provider: {:?} is not supported: use one of {known}",
                ofi.provider
            ));
        }
        ofi.validate().map_err(|e| format!("ofi.addresses: {e}"))
    }

    #[cfg(not(feature = "ofi"))]
    fn check_fabric(&self) -> Result<(), String> {
        match self.fabric {
            FabricChoice::Shm => Ok(()),
            FabricChoice::Ofi { .. } => {
                Err(format!("fabric: \"ofi\": {}", crate::fabric_config::OFI_NOT_BUILT))
            }
        }
    }

    /// Node `node`'s configuration of the libfabric fabric, if the group runs on it. Its
    /// control calls wait at most a quarter of `lease_ns` (within [50 µs, 1 ms]): the node's
    /// core makes them in its polls, between which it renews its lease and beats.
    #[cfg(feature = "ofi")]
    pub fn ofi_config(&self, node: u16) -> Option<mu_fabric_ofi::OfiConfig> {
        let FabricChoice::Ofi { provider, addresses } = &self.fabric else { return None };
        let m = &self.membership;
        let mut ofi = crate::fabric_config::ofi_config_from(provider, m.cluster, node, addresses);
        ofi.call_wait_us = Some(crate::fabric_config::call_wait_us(m.lease_ns / 1000));
        Some(ofi)
    }

    /// Every node id: the coordinators, the members, then the lease caches.
    pub fn nodes(&self) -> Vec<u16> {
        let (c, caches) = (&self.membership.coordinators, &self.membership.caches);
        c.iter().chain(&self.members).chain(caches).copied().collect()
    }

    pub fn role(&self, id: u16) -> Option<Role> {
        if self.membership.coordinators.contains(&id) {
            Some(Role::Coordinator)
        } else if self.members.contains(&id) {
            Some(Role::Member)
        } else if self.membership.caches.contains(&id) {
            Some(Role::Cache)
        } else {
            None
        }
    }

    pub fn pid_path(&self, id: u16) -> PathBuf {
        self.run_dir.join(format!("ukharon-{id}.pid"))
    }

    pub fn log_path(&self, id: u16) -> PathBuf {
        self.run_dir.join(format!("ukharon-{id}.log"))
    }

    pub fn status_path(&self, id: u16) -> PathBuf {
        self.run_dir.join(format!("ukharon-{id}.status.json"))
    }

    /// Creates the run directory, private to this user, if it is not there.
    pub fn prepare_run_dir(&self) -> Result<(), String> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = &self.run_dir;
        if dir.exists() && !dir.is_dir() {
            return Err(format!("run_dir {} is not a directory", dir.display()));
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("run_dir {}: cannot create it: {e}", dir.display()))
    }
}

/// The values of the module docs, for processes that share a few cores.
pub fn shared_host(cluster: u64, run_dir: &Path, coordinators: &[u16], members: &[u16]) -> String {
    shared_host_with_caches(cluster, run_dir, coordinators, members, &[])
}

/// [`shared_host`] with lease caches (§6.3; ∆ of 4 ms beside the members' 3 ms leases).
pub fn shared_host_with_caches(
    cluster: u64,
    run_dir: &Path,
    coordinators: &[u16],
    members: &[u16],
    caches: &[u16],
) -> String {
    let list = |ids: &[u16]| ids.iter().map(u16::to_string).collect::<Vec<_>>().join(", ");
    let caches = match caches {
        [] => String::new(),
        ids => format!("caches = [{}]\ncache_lease_ns = 4_000_000\n", list(ids)),
    };
    caches
        + &format!(
            "cluster = {cluster:#x}\nrun_dir = {:?}\ncoordinators = [{}]\nmembers = [{}]\n\
         poll_gap_ns = 200_000\nlease_ns = 3_000_000\nring_read_gap_ns = 10_000_000\n\
         beat_period_ns = 10_000_000\nbeat_timeout_ns = 150_000_000\nrepeat_ns = 5_000_000\n\
         backoff_max_ns = 2_000_000\nreconnect_ns = 5_000_000\n\n[lease]\n\
         lease_max_ns = 100_000_000\nrenew_margin_ns = 1_500_000\n",
            run_dir.display().to_string(),
            list(coordinators),
            list(members)
        )
}

/// `fabric` and, with `fabric = "ofi"`, `[ofi]` read as a cluster's file reads it: the
/// provider, and an address for every node of `nodes`.
fn fabric_choice(table: &Table, nodes: &[u16]) -> Result<FabricChoice, String> {
    let fabric = match table.get("fabric") {
        None => "shm",
        Some(Value::String(s)) => s.as_str(),
        Some(v) => return Err(format!("fabric: \"shm\" or \"ofi\" is expected, not {}", shown(v))),
    };
    let ofi = table.get("ofi");
    match (fabric, ofi) {
        ("shm", None) => Ok(FabricChoice::Shm),
        ("shm", Some(_)) => {
            Err("ofi: a section for fabric = \"ofi\" only (fabric is \"shm\")".into())
        }
        ("ofi", None) => {
            Err("ofi: missing (fabric = \"ofi\" needs [ofi] with every node's address)".into())
        }
        ("ofi", Some(section)) => {
            let section: OfiSection =
                section.clone().try_into().map_err(|e| format!("ofi: {}", e.message()))?;
            let addresses = section.addresses_of(&NODES, nodes)?;
            Ok(FabricChoice::Ofi { provider: section.provider, addresses })
        }
        (other, _) => Err(format!("fabric: {other:?}: use \"shm\" or \"ofi\"")),
    }
}

fn refuse_unknown(table: &Table, known: &[&str], prefix: &str) -> Result<(), String> {
    match table.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => {
            Err(format!("{prefix}{k}: not a key of this file (known: {})", known.join(", ")))
        }
        None => Ok(()),
    }
}

/// A non-negative integer under `key`, if present.
fn int(table: &Table, key: &str) -> Result<Option<u64>, String> {
    match table.get(key) {
        None => Ok(None),
        Some(Value::Integer(i)) if *i >= 0 => Ok(Some(*i as u64)),
        Some(v) => Err(format!("{key}: a non-negative integer is expected, not {}", shown(v))),
    }
}

/// A value as an error shows it (this build's TOML has no printer).
fn shown(v: &Value) -> String {
    match v {
        Value::Integer(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Boolean(b) => b.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Datetime(_) => "a date".into(),
        Value::Array(_) => "a list".into(),
        Value::Table(_) => "a table".into(),
    }
}

/// A non-empty list of node ids under `key`.
fn ids(table: &Table, key: &'static str) -> Result<Vec<u16>, String> {
    let Some(Value::Array(items)) = table.get(key) else {
        return Err(format!("{key}: a list of node ids is expected"));
    };
    let ids = items
        .iter()
        .map(|v| match v {
            Value::Integer(i) if (0..64).contains(i) => Ok(*i as u16),
            v => Err(format!("{key}: {} is not a node id (0 to 63)", shown(v))),
        })
        .collect::<Result<Vec<u16>, String>>()?;
    if ids.is_empty() {
        return Err(format!("{key}: at least one node is needed"));
    }
    check_distinct(key, &ids)?;
    Ok(ids)
}

fn check_distinct(key: &str, ids: &[u16]) -> Result<(), String> {
    match ids.iter().enumerate().find(|(i, n)| ids[..*i].contains(n)) {
        Some((_, n)) => Err(format!("{key}: node {n} listed twice")),
        None => Ok(()),
    }
}

fn lease_config(table: &Table) -> Result<LeaseConfig, String> {
    let mut lease = LeaseConfig::default();
    let fields: [(&'static str, &mut u64); 4] = [
        ("drift_ppm", &mut lease.drift_ppm),
        ("cross_core_ns", &mut lease.cross_core_ns),
        ("renew_margin_ns", &mut lease.renew_margin_ns),
        ("lease_max_ns", &mut lease.lease_max_ns),
    ];
    for (key, field) in fields {
        if let Some(v) = int(table, key).map_err(|e| format!("lease.{e}"))? {
            *field = v;
        }
    }
    lease.validate().map_err(|e| format!("lease.{}: {}", e.key, e.why))?;
    Ok(lease)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(feature = "ofi")]
    use mu_fabric::NodeId;

    fn good() -> String {
        shared_host(0x756b, Path::new("/dev/shm/x"), &[0, 1, 2], &[3, 4, 5])
    }

    #[test]
    fn the_shared_host_file_parses_into_its_fields() {
        let c = UkharonConfig::parse(&good()).unwrap();
        assert_eq!(c.membership.cluster, 0x756b);
        assert_eq!(c.membership.coordinators, vec![0, 1, 2]);
        assert_eq!(c.members, vec![3, 4, 5]);
        assert_eq!(c.membership.nodes_max, 6);
        assert_eq!(c.membership.beat_timeout_ns, 150_000_000);
        assert_eq!(c.lease.renew_margin_ns, 1_500_000);
        assert_eq!(c.poll_gap_ns, 200_000);
        assert_eq!(c.role(1), Some(Role::Coordinator));
        assert_eq!(c.role(4), Some(Role::Member));
        assert_eq!(c.role(9), None);
    }

    #[test]
    fn errors_name_the_key() {
        let key_of = |edit: &dyn Fn(String) -> String| {
            let err = UkharonConfig::parse(&edit(good())).unwrap_err();
            err.split(':').next().unwrap().to_string()
        };
        let cases: &[(&str, &dyn Fn(String) -> String)] = &[
            ("cluster", &|s| s.replace("cluster = 0x756b\n", "")),
            ("members", &|s| s.replace("members = [3, 4, 5]", "members = [3, 2]")),
            ("members", &|s| s.replace("members = [3, 4, 5]", "members = [3, 3]")),
            ("coordinators", &|s| s.replace("[0, 1, 2]", "[]")),
            ("beat_timeout_ns", &|s| s.replace("150_000_000", "15_000_000")),
            ("lease.lease_max_ns", &|s| s.replace("100_000_000", "2_000_000")),
            ("lease.drift_ppm", &|s| s + "drift_ppm = 900000\n"),
            ("lease.renew_margin_ns", &|s| s.replace("1_500_000", "-1")),
            ("poll_gap_ns", &|s| s.replace("poll_gap_ns = 200_000", "poll_gap_ns = 9_000_000")),
            ("ring_read_gap_ns", &|s| {
                s.replace("ring_read_gap_ns = 10_000_000", "ring_read_gap_ns = 0")
            }),
            ("run_dir", &|s| s.replace("run_dir = \"/dev/shm/x\"", "run_dir = 3")),
            ("leese_ns", &|s| format!("leese_ns = 5\n{s}")),
            ("nodes_max", &|s| format!("nodes_max = 4\n{s}")),
        ];
        for (key, edit) in cases {
            assert_eq!(key_of(*edit), *key);
        }
    }

    /// Three coordinators and two members on libfabric, one host each.
    fn on_ofi() -> String {
        let addresses: String =
            (0..5).map(|n| format!("{n} = \"10.77.0.{}:7100\"\n", n + 1)).collect();
        shared_host(0x756b, Path::new("/dev/shm/x"), &[0, 1, 2], &[3, 4])
            .replace("poll_gap_ns", "fabric = \"ofi\"\npoll_gap_ns")
            + &format!("\n[ofi]\nprovider = \"sockets\"\n[ofi.addresses]\n{addresses}")
    }

    #[test]
    fn shm_is_the_default_fabric() {
        assert_eq!(UkharonConfig::parse(&good()).unwrap().fabric, FabricChoice::Shm);
    }

    /// `[ofi]` as a cluster's file has it: the provider and an address for every node.
    #[cfg(feature = "ofi")]
    #[test]
    fn an_ofi_group_has_every_nodes_address() {
        let c = UkharonConfig::parse(&on_ofi()).unwrap();
        let FabricChoice::Ofi { provider, addresses } = &c.fabric else { panic!("{c:?}") };
        assert_eq!(provider, "sockets");
        let hosts: Vec<(u16, &str, u16)> =
            addresses.iter().map(|a| (a.id, a.host.as_str(), a.base_port)).collect();
        assert_eq!(hosts[4], (4, "10.77.0.5", 7100));
        assert_eq!(hosts.len(), 5);
        let ofi = c.ofi_config(3).unwrap();
        assert_eq!((ofi.node, ofi.cluster_id, ofi.nodes.len()), (NodeId(3), 0x756b, 5));
        assert_eq!(ofi.call_wait_us, Some(750), "a quarter of the 3 ms lease");
    }

    #[test]
    fn ofi_errors_name_the_key() {
        let key_of = |text: String| {
            let err = UkharonConfig::parse(&text).unwrap_err();
            err.split(':').next().unwrap().to_string()
        };
        let ofi = on_ofi();
        assert_eq!(key_of(ofi.replace("\"ofi\"\npoll", "\"rdma\"\npoll")), "fabric");
        assert_eq!(key_of(ofi.replace("fabric = \"ofi\"", "fabric = 3")), "fabric");
        assert_eq!(key_of(ofi.replace("fabric = \"ofi\"", "fabric = \"shm\"")), "ofi");
        assert_eq!(key_of(ofi.split("\n[ofi]").next().unwrap().to_string()), "ofi");
        if cfg!(feature = "ofi") {
            assert_eq!(key_of(ofi.replace("\"sockets\"", "\"verbs\"")), "ofi.provider");
            assert_eq!(key_of(ofi.replace(":7100\"\n", ":65535\"\n")), "ofi.addresses");
        }
        let err = UkharonConfig::parse(&ofi.replace("4 = ", "9 = ")).unwrap_err();
        assert!(err.starts_with("ofi.addresses: node 9 is not in"), "{err}");
        let err = UkharonConfig::parse(&ofi.replace("provider", "provder")).unwrap_err();
        assert!(err.starts_with("ofi: unknown field `provder`"), "{err}");
    }
}
