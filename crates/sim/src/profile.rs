//! Hardware profiles (`spec/profiles/*.toml`): the cost of each fabric primitive on a paper's
//! testbed, each value with the sentence or figure it comes from, and the one place that turns
//! them into the simulator's settings ([`Profile::fabric`], [`Profile::apply`]).
//!
//! Only primitive costs are inputs. A value the paper does not state carries a `derived` note,
//! and `checked_against` names the end-to-end figures that then depend on it, which the
//! benchmark marks as not independent ([`Profile::depends`]).

use mu_fabric_sim::SimConfig;
use mu_replica::ReplicaConfig;
use toml::{Table, Value};

/// The profiles built in, by name, with their text.
pub const BUILTIN: [(&str, &str); 3] = [
    ("mu-osdi2020", include_str!("../../../spec/profiles/mu-osdi2020.toml")),
    ("velos", include_str!("../../../spec/profiles/velos.toml")),
    ("ukharon", include_str!("../../../spec/profiles/ukharon.toml")),
];

/// Every key a profile must give, each a table with `value` and `source`.
pub const KEYS: [&str; 17] = [
    "write_round_trip_ns",
    "cas_round_trip_ns",
    "read_round_trip_ns",
    "link_bits_per_s",
    "inline_max_bytes",
    "non_inline_extra_ns",
    "post_cpu_ns",
    "access_flags_change_ns",
    "qp_state_cycle_ns",
    "poll_period_ns",
    "detector_score_max",
    "detector_failure_threshold",
    "detector_recovery_threshold",
    "detector_read_period_ns",
    "crash_notice_ns",
    "retry_timeout_ns",
    "jitter_ns",
];

/// One primitive's cost and where it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct Primitive {
    pub value: u64,
    pub source: String,
    pub derived: Option<String>,
    pub checked_against: Vec<String>,
}

/// A paper's testbed as primitive costs.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub name: String,
    pub hardware: String,
    /// By key of [`KEYS`], in that order.
    pub primitives: Vec<(&'static str, Primitive)>,
}

impl Profile {
    /// The built-in profile called `name`.
    pub fn builtin(name: &str) -> Result<Profile, String> {
        let (_, text) = BUILTIN.iter().find(|(n, _)| *n == name).ok_or_else(|| {
            let names: Vec<_> = BUILTIN.iter().map(|(n, _)| *n).collect();
            format!("no hardware profile {name:?}; there are {}", names.join(", "))
        })?;
        Profile::parse(text)
    }

    /// Reads a profile; every key of [`KEYS`] must be there with a whole `value` and a
    /// non-empty `source`, and no other.
    pub fn parse(text: &str) -> Result<Profile, String> {
        let table: Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        let string = |key: &str| -> Result<String, String> {
            match table.get(key) {
                Some(Value::String(s)) => Ok(s.clone()),
                _ => Err(format!("profile: {key} must be a string")),
            }
        };
        let (name, hardware) = (string("name")?, string("hardware")?);
        for key in table.keys() {
            if !KEYS.contains(&key.as_str()) && key != "name" && key != "hardware" {
                return Err(format!("profile {name}: unknown key {key}"));
            }
        }
        let primitives = KEYS
            .iter()
            .map(|&key| Ok((key, primitive(&table, key).map_err(|e| format!("{name}: {e}"))?)))
            .collect::<Result<_, String>>()?;
        Ok(Profile { name, hardware, primitives })
    }

    /// The value of primitive `key` (one of [`KEYS`]).
    pub fn get(&self, key: &str) -> u64 {
        let found = self.primitives.iter().find(|(k, _)| *k == key);
        found.unwrap_or_else(|| panic!("no primitive {key}")).1.value
    }

    /// Whether end-to-end figure `figure` depends on a value derived for it (then it is no
    /// independent check of the model).
    pub fn depends(&self, figure: &str) -> bool {
        self.primitives.iter().any(|(_, p)| p.checked_against.iter().any(|f| f == figure))
    }

    /// The simulated fabric's model: each primitive unchanged, except the one-way latency,
    /// which is the write round trip less the one post a measured round trip includes, halved.
    pub fn fabric(&self) -> SimConfig {
        let post_cpu_ns = self.get("post_cpu_ns");
        let write_ns = self.get("write_round_trip_ns");
        SimConfig {
            one_way_ns: write_ns.saturating_sub(post_cpu_ns) / 2,
            jitter_ns: self.get("jitter_ns"),
            // Picoseconds per byte: 8 bits over the link's rate.
            per_byte_ps: 8_000_000_000_000 / self.get("link_bits_per_s").max(1),
            cas_extra_ns: self.get("cas_round_trip_ns").saturating_sub(write_ns),
            max_inline_bytes: self.get("inline_max_bytes") as usize,
            non_inline_extra_ns: self.get("non_inline_extra_ns"),
            post_cpu_ns,
            retry_timeout_ns: self.get("retry_timeout_ns"),
            fast_access_change_ns: self.get("access_flags_change_ns"),
            slow_access_change_ns: self.get("qp_state_cycle_ns"),
            crash_notice_ns: self.get("crash_notice_ns"),
            // Mu §5.2: a permission manager 'revokes write access from the current holder,
            // grants write access to ℓ, and sends an ack': the ack leaves after both changes.
            control_blocks_posts: true,
            // One port per NIC (the papers' testbeds): a leader's writes to its followers share
            // the link's rate.
            port_bandwidth: true,
            ..SimConfig::default()
        }
    }

    /// Sets a replica's detector as the profile says, and has it look for crash notices once
    /// per poll (a busy-polling thread sees a notice as soon as it is there).
    pub fn apply(&self, config: &mut ReplicaConfig) {
        let narrow = |key: &str| u8::try_from(self.get(key)).expect("a score fits a byte");
        config.detector.score_max = narrow("detector_score_max");
        config.detector.failure_threshold = narrow("detector_failure_threshold");
        config.detector.recovery_threshold = narrow("detector_recovery_threshold");
        config.detector.read_period_ns = self.get("detector_read_period_ns");
        config.crash_check_period_ns = self.get("poll_period_ns");
    }

    /// How often the simulator polls each replica.
    pub fn poll_period_ns(&self) -> u64 {
        self.get("poll_period_ns").max(1)
    }
}

impl Profile {
    /// A cluster of `n` replicas, all members, on this profile's fabric, polled at its poll
    /// period, with its detector; `tweak` sets the rest of each replica's configuration.
    pub fn cluster(
        &self,
        n: u16,
        seed: u64,
        tweak: impl Fn(&mut ReplicaConfig),
    ) -> crate::SimCluster {
        let members: Vec<u16> = (0..n).collect();
        let mut cluster = crate::SimCluster::with_fabric(n, &members, seed, self.fabric(), |c| {
            self.apply(c);
            tweak(c);
        });
        cluster.poll_period_ns = self.poll_period_ns();
        cluster.block_on_control = true;
        cluster
    }
}

fn primitive(table: &Table, key: &str) -> Result<Primitive, String> {
    let Some(Value::Table(t)) = table.get(key) else {
        return Err(format!("{key} missing (a table with value and source)"));
    };
    let value = match t.get("value") {
        Some(Value::Integer(v)) if *v >= 0 => *v as u64,
        _ => return Err(format!("{key}.value must be a whole number, 0 or more")),
    };
    let text = |field: &str| match t.get(field) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
        None => Ok(None),
        _ => Err(format!("{key}.{field} must be a non-empty string")),
    };
    let source = text("source")?.ok_or_else(|| format!("{key}.source missing"))?;
    let checked_against = match t.get("checked_against") {
        None => Vec::new(),
        Some(Value::Array(a)) => a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
        Some(_) => return Err(format!("{key}.checked_against must be a list of figure names")),
    };
    Ok(Primitive { value, source, derived: text("derived")?, checked_against })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mu_fabric::{Access, ConnId, Endpoint, Fabric, NodeId, RegionId};
    use mu_fabric::{Completion, LocalSlice, RemoteAddr, Source, WorkRequest};
    use mu_fabric_sim::SimWorld;

    #[test]
    fn every_builtin_profile_parses_with_a_source_for_each_value() {
        for (name, _) in BUILTIN {
            let p = Profile::builtin(name).unwrap();
            assert_eq!(p.name, name);
            assert_eq!(p.primitives.len(), KEYS.len());
            for (key, prim) in &p.primitives {
                assert!(prim.source.len() > 20, "{name}.{key}: a source worth the name");
            }
        }
        assert!(Profile::builtin("connectx-9").is_err());
    }

    #[test]
    fn a_profile_without_a_source_or_with_a_stray_key_is_refused() {
        let text = BUILTIN[0].1;
        let no_source = text.replacen("source = \"Mu §6", "note = \"Mu §6", 1);
        assert!(Profile::parse(&no_source).unwrap_err().contains("inline_max_bytes"));
        let stray = format!("{text}\n[tcp_round_trip_ns]\nvalue = 1\nsource = \"x\"\n");
        assert!(Profile::parse(&stray).unwrap_err().contains("unknown key"));
    }

    #[test]
    fn the_profile_reaches_the_model_unchanged() {
        let p = Profile::builtin("mu-osdi2020").unwrap();
        let f = p.fabric();
        assert_eq!(f.one_way_ns * 2 + f.post_cpu_ns, p.get("write_round_trip_ns"));
        assert_eq!(f.one_way_ns * 2 + f.post_cpu_ns + f.cas_extra_ns, p.get("cas_round_trip_ns"));
        assert_eq!(f.per_byte_ps, 80, "100 Gbps");
        assert_eq!(f.max_inline_bytes as u64, p.get("inline_max_bytes"));
        assert_eq!(f.non_inline_extra_ns, p.get("non_inline_extra_ns"));
        assert_eq!(f.fast_access_change_ns, p.get("access_flags_change_ns"));
        assert_eq!(f.slow_access_change_ns, p.get("qp_state_cycle_ns"));
        assert_eq!(f.crash_notice_ns, p.get("crash_notice_ns"));
        let mut c = ReplicaConfig::new(NodeId(0), vec![NodeId(0), NodeId(1)]);
        p.apply(&mut c);
        assert_eq!(c.detector.read_period_ns, p.get("detector_read_period_ns"));
        assert_eq!(u64::from(c.detector.score_max), p.get("detector_score_max"));
        assert!(c.validate().is_ok(), "{:?}", c.validate());
    }

    /// Posts one write of `len` bytes (inline when `inline`) on a fresh two-node world made
    /// from `p` without jitter; returns its round trip.
    fn write_round_trip(p: &Profile, len: u32, inline: bool) -> u64 {
        let world = SimWorld::new(SimConfig { jitter_ns: 0, ..p.fabric() }, 1);
        let (a, b) = (world.node(NodeId(0)), world.node(NodeId(1)));
        let region = RegionId(1);
        a.register_region(region, 4096, Access::ALL).unwrap();
        b.register_region(region, 4096, Access::ALL).unwrap();
        let conn = |peer| ConnId::new(NodeId(peer), 0);
        a.connect(conn(1), Access::ALL).unwrap();
        b.connect(conn(0), Access::ALL).unwrap();
        let mut ep = a.endpoint(8).unwrap();
        ep.attach(conn(1)).unwrap();
        let data = vec![1u8; len as usize];
        let source = if inline {
            Source::Inline(&data)
        } else {
            Source::Local(LocalSlice { region, offset: 0, len })
        };
        let remote = RemoteAddr { region, offset: 0 };
        // Setting up the connection kept the CPU busy (queue-pair transitions cost time).
        world.run_until(world.node_busy_until(NodeId(0)));
        let t0 = world.now_ns();
        ep.post(conn(1), &WorkRequest::write(1, source, remote)).unwrap();
        let mut out = [Completion::EMPTY; 1];
        while ep.poll(&mut out) == 0 {
            assert!(world.step(), "a completion comes");
        }
        world.now_ns() - t0
    }

    /// How long after its first 64-byte chunk a write's last one lands at 100 Gbps (80 ps a
    /// byte): a one-chunk write lands whole.
    fn spread_ns(len: u32) -> u64 {
        let chunks = u64::from(len.div_ceil(64));
        if chunks <= 1 {
            0
        } else {
            (u64::from(len) * 80 / 1000).max(chunks - 1)
        }
    }

    /// Posts a write of `len` bytes from memory to each of two peers, one right after the
    /// other; returns how long after the first the second completed.
    fn second_write_after_first_ns(config: SimConfig, len: u32) -> u64 {
        let world = SimWorld::new(SimConfig { jitter_ns: 0, ..config }, 1);
        let region = RegionId(1);
        let nodes: Vec<_> = (0..3).map(|n| world.node(NodeId(n))).collect();
        for node in &nodes {
            node.register_region(region, len as usize, Access::ALL).unwrap();
        }
        let conn = |peer| ConnId::new(NodeId(peer), 0);
        let mut ep = nodes[0].endpoint(8).unwrap();
        for peer in 1..3u16 {
            nodes[0].connect(conn(peer), Access::ALL).unwrap();
            nodes[usize::from(peer)].connect(conn(0), Access::ALL).unwrap();
            ep.attach(conn(peer)).unwrap();
        }
        world.run_until(world.node_busy_until(NodeId(0)));
        let source = Source::Local(LocalSlice { region, offset: 0, len });
        let remote = RemoteAddr { region, offset: 0 };
        for peer in 1..3u16 {
            let wr = WorkRequest::write(u64::from(peer), source, remote);
            ep.post(conn(peer), &wr).unwrap();
        }
        let mut done_ns = Vec::new();
        let mut out = [Completion::EMPTY; 2];
        while done_ns.len() < 2 {
            let n = ep.poll(&mut out);
            done_ns.extend(std::iter::repeat_n(world.now_ns(), n));
            if n == 0 {
                assert!(world.step(), "both writes complete");
            }
        }
        done_ns[1] - done_ns[0]
    }

    #[test]
    fn writes_to_two_peers_share_the_port() {
        let p = Profile::builtin("mu-osdi2020").unwrap();
        let len = 16 * 1024;
        let span_ns = u64::from(len) * p.fabric().per_byte_ps / 1000;
        let shared = second_write_after_first_ns(p.fabric(), len);
        assert!(shared >= span_ns, "the second write's bytes follow the first's: {shared} ns");
        let apart = SimConfig { port_bandwidth: false, ..p.fabric() };
        let apart = second_write_after_first_ns(apart, len);
        assert_eq!(apart, p.get("post_cpu_ns"), "without a shared port: one post apart");
    }

    #[test]
    fn a_write_of_n_bytes_costs_what_the_profile_says_inline_or_not() {
        for (name, _) in BUILTIN {
            let p = Profile::builtin(name).unwrap();
            let rtt = p.get("write_round_trip_ns");
            let step = p.get("non_inline_extra_ns");
            let inline_max = p.get("inline_max_bytes") as u32;
            assert_eq!(write_round_trip(&p, 64, true), rtt, "{name}: 64 B inline");
            let at_limit = write_round_trip(&p, inline_max, true);
            assert_eq!(at_limit, rtt + spread_ns(inline_max), "{name}: at the inline limit");
            // 512 bytes from memory: the DMA step, and 8 chunks of 64 B spread over 512 × 80 ps.
            assert_eq!(spread_ns(512), 40);
            assert_eq!(write_round_trip(&p, 512, false), rtt + step + 40, "{name}: 512 B");
        }
    }
}
