//! How a replica is set up, and the checks that turn a bad setup into a clear message.

use crate::layout::MAX_REPLICAS;
use mu_fabric::NodeId;
use mu_log::{Integrity, LogLayout};
use mu_replication::{DetectorConfig, ReplicaSet, OUTSTANDING_MAX};

/// Which replication engine a cluster runs. Every replica of a cluster runs the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Protocol {
    /// Mu (OSDI 2020): one-sided writes into followers' logs, made safe by write permissions.
    #[default]
    Mu,
    /// Velos: one-sided compare-and-swap Paxos; no permission switch, faster leader change
    /// (`docs/protocols/velos.md`).
    Velos,
}

impl Protocol {
    /// The name used in configuration files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Mu => "mu",
            Protocol::Velos => "velos",
        }
    }

    /// The value bytes of the largest entry the replicas write themselves (not an
    /// application's request): a membership change, and under Velos also a rejoin entry. A log
    /// whose entries hold less could never change its members or take a restarted replica
    /// back, so [`ReplicaConfig::validate`] refuses it.
    pub fn control_entry_bytes(self) -> usize {
        let change = mu_replication::membership::CHANGE_BYTES;
        match self {
            Protocol::Mu => change,
            Protocol::Velos => change.max(mu_velos::recovery::REJOIN_ENTRY_BYTES),
        }
    }

    /// The name and version replicas record and compare, e.g. `mu/5`, `velos/7`.
    pub fn tag(self) -> String {
        match self {
            Protocol::Mu => mu_replication::protocol_tag(),
            Protocol::Velos => mu_velos::protocol_tag(),
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Protocol, String> {
        match s {
            "mu" => Ok(Protocol::Mu),
            "velos" => Ok(Protocol::Velos),
            other => Err(format!("unknown protocol {other:?}: expected \"mu\" or \"velos\"")),
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything a replica needs to start, besides its fabric.
#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    /// This replica's id.
    pub me: NodeId,
    /// The replication engine (the same on every replica of a cluster).
    pub protocol: Protocol,
    /// Velos only: indices prepared ahead of the one being accepted (§5.1 of the Velos paper),
    /// so that a stable leader decides with one CAS round. 0 to 63.
    pub prepare_ahead: usize,
    /// Every replica that may ever be a member of the cluster, this one included (at most
    /// 64): connections to each are set up in advance, and a replica outside this list can
    /// never join.
    pub replicas: Vec<NodeId>,
    /// The members the cluster was created with, the configuration of log index 0 (§5.4);
    /// `None` means all of `replicas`. Every replica of a cluster, whenever started, is given
    /// the same list: later configurations come from the membership entries in the log
    /// ([`crate::Replica::add_replica`], [`crate::Replica::remove_replica`]), or from the
    /// snapshot a replica restores. A replica outside this list joins once a membership entry
    /// adds it; it must start with `eligible: false`.
    pub members: Option<Vec<NodeId>>,
    /// Slots in the circular log.
    pub slots_count: u64,
    /// Bytes per slot: an entry's 24 bytes of framing plus its value.
    pub slot_bytes: u32,
    /// How followers tell a complete entry (canary where writes land left to right, checksum
    /// everywhere).
    pub integrity: Integrity,
    /// Failure detector and fate sharing (§5.1).
    pub detector: DetectorConfig,
    /// After a majority granted write permission, how long a new leader waits for the others
    /// (§4.2: "briefly waiting for responses from all replicas").
    pub permission_grace_ns: u64,
    /// A would-be leader that has not heard from a majority of permission managers in this long
    /// asks again (requests or acknowledgements may have been lost with a connection).
    pub permission_timeout_ns: u64,
    /// How often the background thread looks for crash notifications from the fabric (a
    /// killed peer's death flag on shm) between heartbeat reads: the time a crash takes to be
    /// detected, at most.
    pub crash_check_period_ns: u64,
    /// How the replica's threads wait when they have nothing to do: back off (the default), or
    /// busy-poll on cores of their own, as in the Mu paper.
    pub threads: Threads,
    /// CPUs the replica's own threads are pinned to; by default none is (the system places
    /// them). See [`ThreadCpus`].
    pub cpus: ThreadCpus,
    /// A proposal that finds the log full (a replica the leader counts on, one of its
    /// confirmed followers or itself, has not applied the entry its slot holds) waits for room
    /// as long as that replica applies entries, at its pace (back-pressure); once it has applied
    /// nothing for this long, the proposal fails with "log full", naming it. Never overwrites
    /// such an entry. A replica the
    /// leader has not confirmed (started late, or cut off) is not waited for: more than a log
    /// behind, it needs a state transfer.
    pub log_full_timeout_ns: u64,
    /// Most requests packed into one log entry when several are proposed at once (§7.4); at
    /// most [`BATCH_REQUESTS_MAX`].
    pub batch_requests_max: usize,
    /// Most entries in the accept phase at once (§7.4): a leader writes the next entry before
    /// the previous one is committed, up to this many.
    pub outstanding_max: usize,
    /// The largest application snapshot a state transfer carries (a region of twice this
    /// size is registered for it).
    pub snapshot_bytes_max: usize,
    /// Whether this replica is a member in good standing: true for a member of a cluster
    /// started together (every log starts empty at index 0). **False for a replica that
    /// restarts** (its log and what it accepted are lost): it rejoins recovering, is not counted
    /// in a new leader's majority until that leader prepared without it, and may lead once it
    /// applied the log a leader gave it back. Restarting with `true` could decide a second
    /// value where the lost log had helped choose one: the replicas that saw the earlier run
    /// refuse such a run, and it stops ([`crate::ReplicaStatus::failure`] says why; see
    /// [`crate::ReplicaStatus::restarted_without_rejoin`] for what the mechanism cannot see).
    pub eligible: bool,
    /// Who picks the leader: the failure detector (the default, Mu paper §5.1), or the
    /// application through [`crate::Replica::appoint`] (leased local reads,
    /// `docs/protocols/lease-reads.md`). The same on every replica of a cluster (it is part of
    /// the fingerprint): a replica electing its own leader would answer what the others' lease
    /// reads cannot see.
    pub leaders: Leaders,
    /// The replicated application's name, the same on every replica (it is part of the
    /// fingerprint): one application's entries mean nothing to another's state machine. Empty
    /// for the default (the key-value store), so that its clusters keep their fingerprints.
    pub application: &'static str,
}

/// Who picks a replica's leader. See [`ReplicaConfig::leaders`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Leaders {
    /// The lowest live eligible replica the pull-score detector sees (Mu paper §5.1).
    #[default]
    Elected,
    /// The replica the application appointed last ([`crate::Replica::appoint`]), if any: the
    /// primary of its membership's latest view. A leadership starts only while the appointment
    /// names this replica, and ends when it names another, or this replica under another
    /// admission. The detector still runs, for fate sharing and status.
    Appointed,
}

/// How a replica's threads wait when they find nothing to do.
///
/// A replica runs a background thread (heartbeat, failure detector, permission manager) and a
/// replication thread (the helper of direct mode, or the replication thread of handover mode),
/// both polling. The Mu paper gives each its own core; a machine with fewer cores than polling
/// threads cannot, and there a thread that never yields keeps the others from running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Threads {
    /// Back off when idle: the replication thread spins for 50 µs, yields until 2 ms, then
    /// sleeps 50 µs at a time, and so does a direct-mode `propose` that waits that long on
    /// other threads (a new leader's permission round); the background thread sleeps between
    /// heartbeat reads (at most a quarter of a read period, and at most
    /// `crash_check_period_ns`). Right on any machine,
    /// at the price of wake-ups: a request or a crash that comes while a thread sleeps waits
    /// for it (tens of microseconds, more where an idle virtual CPU must be woken).
    #[default]
    Shared,
    /// Never sleep nor yield: each thread spins on a core of its own (the Mu paper's set-up).
    /// Permission requests, crash notifications and new entries are noticed within one loop
    /// iteration. Give each replica two cores (plus the application's threads, and on shm a
    /// third where the fabric's liveness thread spins too, `ShmConfig::liveness_spin`, which
    /// `mu replica` and the benchmarks set with this); with fewer, a spinning thread can hold
    /// a core the others need for milliseconds at a time.
    Dedicated,
}

/// CPUs to pin a replica's threads to, each pinned by the thread itself as it starts; `None`
/// leaves a thread where the system puts it (within the set it inherits from the thread that
/// starts the replica). A CPU the kernel refuses (not in the process's cpuset, or no such CPU)
/// fails [`crate::Replica::start`] with a message that names the CPUs allowed.
///
/// Pinning matters with [`Threads::Dedicated`]: a spinning thread that the scheduler moves
/// loses the caches it warmed, and two spinning threads on one CPU take turns by the time
/// slice. Direct mode proposes on the application's thread, which the application pins itself
/// (after starting the replica: threads inherit the affinity of the thread that creates
/// them). The fabric's own threads (the shm liveness thread) are not pinned here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadCpus {
    /// The replication thread: handover mode's, or direct mode's helper.
    pub replication: Option<usize>,
    /// The background thread: heartbeat, failure detector, permission manager.
    pub background: Option<usize>,
}

impl ThreadCpus {
    /// What can be checked before any thread starts; the kernel has the last word.
    fn validate(&self, threads: Threads) -> Result<(), ConfigError> {
        if threads == Threads::Dedicated
            && self.replication.is_some()
            && self.replication == self.background
        {
            return Err(ConfigError::Cpus(format!(
                "the replication and background threads are both pinned to cpu {}: with \
                 dedicated threads each spins and needs a CPU of its own",
                self.replication.unwrap_or_default()
            )));
        }
        Ok(())
    }
}

impl ReplicaConfig {
    /// A configuration with the defaults below for everything but the ids.
    ///
    /// | setting | default | why |
    /// |---|---|---|
    /// | `slots_count` | 4096 | a few milliseconds of entries at full speed between log-head reads |
    /// | `slot_bytes` | 4096 + 24 | the largest payload of the paper's figures |
    /// | `integrity` | checksum | correct on every fabric; canary only where writes land in order |
    /// | `permission_grace_ns` | 20 µs | a few permission round trips on shm |
    /// | `permission_timeout_ns` | 50 ms | far above a slow-path permission change (1.2 ms on RDMA) |
    /// | `log_full_timeout_ns` | 100 ms | a replica that applies nothing for that long has stopped |
    /// | `crash_check_period_ns` | 100 µs | a killed replica is known dead within this; a wake-up this often costs little |
    /// | `threads` | shared | right on any machine; dedicated needs a core per polling thread |
    /// | `cpus` | none pinned | which CPUs are free is the deployment's business |
    /// | `batch_requests_max` | 32 | near the paper's best latency/throughput point (§7.4) |
    /// | `outstanding_max` | 2 | the paper's largest gain for the least latency (§7.4) |
    /// | `snapshot_bytes_max` | 1 MiB | room for a small application's state; raise it for more |
    /// | `protocol` | Mu | the protocol of the papers' first system |
    /// | `prepare_ahead` | 4 | (Velos) room for a burst of entries without a prepare on their path |
    /// | `detector.read_period_ns` | 1 ms | see below |
    ///
    /// Batching and outstanding entries only matter when several requests are proposed at once
    /// ([`crate::Replica::propose_many`]); a lone request travels alone.
    ///
    /// The failure detector's read period is the one setting that depends on the machine. A
    /// replica is declared failed after about 14 reads see its heartbeat stand still, so the
    /// period must be well above the longest time a healthy replica's background thread can go
    /// unscheduled. On a two-core machine running three replicas (six threads, some spinning)
    /// that is several milliseconds, hence 1 ms (pause detection in about 15 ms). With a core
    /// per thread, as in the Mu paper, periods of a few microseconds work (pause detection in
    /// tens of microseconds). A killed replica is detected within `crash_check_period_ns`
    /// whatever the period: the fabric notifies the crash (on shm, the kernel-kept death flag).
    pub fn new(me: NodeId, replicas: Vec<NodeId>) -> ReplicaConfig {
        ReplicaConfig {
            me,
            protocol: Protocol::Mu,
            prepare_ahead: 4,
            replicas,
            members: None,
            slots_count: 4096,
            slot_bytes: 4096 + 24,
            integrity: Integrity::Checksum,
            detector: DetectorConfig { read_period_ns: 1_000_000, ..DetectorConfig::default() },
            permission_grace_ns: 20_000,
            permission_timeout_ns: 50_000_000,
            log_full_timeout_ns: 100_000_000,
            crash_check_period_ns: 100_000,
            threads: Threads::Shared,
            cpus: ThreadCpus::default(),
            batch_requests_max: 32,
            outstanding_max: 2,
            snapshot_bytes_max: 1 << 20,
            eligible: true,
            leaders: Leaders::Elected,
            application: "",
        }
    }

    /// The initial configuration as a mask of positions in `replicas` (validated).
    pub(crate) fn initial_members(&self, replicas: &ReplicaSet) -> Result<u64, ConfigError> {
        let Some(members) = &self.members else {
            return Ok(mu_replication::membership::all(replicas));
        };
        let mask = mu_replication::membership::mask_of(replicas, members)
            .map_err(|e| ConfigError::Replicas(format!("members: {e}")))?;
        if mask == 0 {
            return Err(ConfigError::Replicas("members: a cluster needs at least one".into()));
        }
        if mask.count_ones() as usize != members.len() {
            return Err(ConfigError::Replicas(format!("members must be distinct: {members:?}")));
        }
        if !members.contains(&self.me) && self.eligible {
            return Err(ConfigError::Replicas(format!(
                "replica {} is not among the initial members {members:?}: it joins when a \
                 membership entry adds it, and must start with eligible: false",
                self.me
            )));
        }
        Ok(mask)
    }

    /// Checks the configuration and derives the replica set and the log layout.
    pub fn validate(&self) -> Result<(ReplicaSet, LogLayout), ConfigError> {
        let replicas = ReplicaSet::new(self.replicas.clone()).map_err(ConfigError::Replicas)?;
        if replicas.len() > MAX_REPLICAS {
            return Err(ConfigError::Replicas(format!(
                "{} replicas, at most {MAX_REPLICAS} are supported",
                replicas.len()
            )));
        }
        if replicas.position(self.me).is_none() {
            return Err(ConfigError::Replicas(format!(
                "this replica's id {} is not among the replicas {:?}",
                self.me,
                replicas.ids()
            )));
        }
        self.initial_members(&replicas)?;
        let layout = LogLayout::new(self.slots_count, self.slot_bytes, self.integrity)
            .map_err(|e| ConfigError::Log(e.to_string()))?;
        let control = self.protocol.control_entry_bytes();
        if layout.max_value_bytes() < control {
            let framing = self.slot_bytes as usize - layout.max_value_bytes();
            return Err(ConfigError::Log(format!(
                "slots of {} bytes hold values of {} bytes (an entry's framing takes {framing}); \
                 {} writes entries of {control} bytes itself (membership changes{}), so slots \
                 must be at least {} bytes, and as large as the largest request plus {framing}",
                self.slot_bytes,
                layout.max_value_bytes(),
                self.protocol.name(),
                if self.protocol == Protocol::Velos { ", rejoins" } else { "" },
                (control + framing).next_multiple_of(8)
            )));
        }
        self.detector.validate().map_err(ConfigError::Detector)?;
        for (name, value) in [
            ("permission_timeout_ns", self.permission_timeout_ns),
            ("log_full_timeout_ns", self.log_full_timeout_ns),
            ("crash_check_period_ns", self.crash_check_period_ns),
        ] {
            if value == 0 {
                return Err(ConfigError::Timing(format!("{name} must be above 0")));
            }
            // Deadlines are the clock plus these: an hour keeps them far from overflowing, and
            // a replica that waits longer for anything is as good as stuck.
            const TIMING_NS_MAX: u64 = 3_600_000_000_000;
            if value > TIMING_NS_MAX {
                return Err(ConfigError::Timing(format!(
                    "{name} is {value} ns: at most {TIMING_NS_MAX} (an hour)"
                )));
            }
        }
        if !(1..=OUTSTANDING_MAX).contains(&self.outstanding_max) {
            return Err(ConfigError::Batching(format!(
                "outstanding_max is {}, must be 1 to {OUTSTANDING_MAX}",
                self.outstanding_max
            )));
        }
        if self.outstanding_max as u64 >= self.slots_count {
            return Err(ConfigError::Batching(format!(
                "outstanding_max ({}) must be below slots_count ({})",
                self.outstanding_max, self.slots_count
            )));
        }
        if self.snapshot_bytes_max == 0 || self.snapshot_bytes_max > u32::MAX as usize {
            return Err(ConfigError::Log(format!(
                "snapshot_bytes_max is {}, must be 1 to {} (one read carries it)",
                self.snapshot_bytes_max,
                u32::MAX
            )));
        }
        if self.protocol == Protocol::Velos {
            self.validate_velos(&replicas, layout)?;
        }
        if !(1..=BATCH_REQUESTS_MAX).contains(&self.batch_requests_max) {
            return Err(ConfigError::Batching(format!(
                "batch_requests_max is {}, must be 1 to {BATCH_REQUESTS_MAX} (a call's requests \
                 are planned in buffers of that many, made when the replica starts)",
                self.batch_requests_max
            )));
        }
        if self.permission_grace_ns >= self.permission_timeout_ns {
            return Err(ConfigError::Timing(format!(
                "permission_grace_ns ({}) must be below permission_timeout_ns ({})",
                self.permission_grace_ns, self.permission_timeout_ns
            )));
        }
        self.cpus.validate(self.threads)?;
        Ok((replicas, layout))
    }
}

impl ReplicaConfig {
    /// A 16-bit digest of what every replica of a cluster must agree on: the protocol and its
    /// version, the log's shape (slots, slot size, integrity check), the largest snapshot (a
    /// donor's snapshot region is read whole, at the size the reader expects) and the
    /// configured replicas. Each replica publishes it with its heartbeat; a peer that publishes another is
    /// never counted alive and its permission requests are not served, so a replica started
    /// with another log shape cannot take part (its entries would be read at the wrong
    /// offsets, and what it acknowledged lost), and the application. Never 0, which a heartbeat
    /// not yet read holds.
    pub fn fingerprint(&self) -> u16 {
        // FNV-1a over the fields, folded to 16 bits: a guard against misconfiguration, not
        // against an adversary.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                hash = (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        eat(self.protocol.tag().as_bytes());
        eat(&self.slots_count.to_le_bytes());
        eat(&self.slot_bytes.to_le_bytes());
        eat(&[matches!(self.integrity, Integrity::Checksum) as u8]);
        eat(&(self.snapshot_bytes_max as u64).to_le_bytes());
        // In id order, as `ReplicaSet` keeps them: the order a list was written in changes
        // nothing else.
        let mut ids: Vec<u16> = self.replicas.iter().map(|id| id.0).collect();
        ids.sort_unstable();
        for id in ids {
            eat(&id.to_le_bytes());
        }
        // Only where appointed, so that elected clusters keep the fingerprints they had.
        if self.leaders == Leaders::Appointed {
            eat(b"appointed");
        }
        if !self.application.is_empty() {
            eat(b"application ");
            eat(self.application.as_bytes());
        }
        let folded = (hash ^ hash >> 16 ^ hash >> 32 ^ hash >> 48) as u16;
        folded.max(1)
    }

    /// What Velos does not do yet, said plainly rather than run badly.
    fn validate_velos(&self, replicas: &ReplicaSet, layout: LogLayout) -> Result<(), ConfigError> {
        // A value log per replica besides the slot words: a log that fits in memory once may
        // not fit that many times, and that is the configuration's fault, found here rather
        // than as the engine's refusal at start.
        mu_velos::VelosLayout::new(layout, replicas.len()).map_err(ConfigError::Log)?;
        if !self.eligible && replicas.len() <= 2 {
            return Err(ConfigError::Replicas(format!(
                "a velos replica that restarts without its memory rejoins through an entry a \
                 majority decides without it; a cluster of {} has none, and its log is lost: \
                 start it as a new cluster",
                replicas.len()
            )));
        }
        if self.prepare_ahead > mu_velos::PREPARE_AHEAD_MAX
            || self.prepare_ahead as u64 >= self.slots_count
        {
            return Err(ConfigError::Batching(format!(
                "prepare_ahead is {}, must be at most {} and below slots_count ({})",
                self.prepare_ahead,
                mu_velos::PREPARE_AHEAD_MAX,
                self.slots_count
            )));
        }
        Ok(())
    }
}

/// The largest `batch_requests_max`: far above the batches that help (the paper's best point
/// is a few tens), and buffers of that many requests are made when a replica starts.
pub const BATCH_REQUESTS_MAX: usize = 65_536;

/// A configuration that cannot work, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The replica list: empty, repeated ids, more than the fabric's limit, or `me` not in it.
    #[error("replicas: {0}")]
    Replicas(String),
    /// The log's shape: slot count and size, the snapshot limit, entries the protocol needs.
    #[error("log: {0}")]
    Log(String),
    /// The failure detector's thresholds and read period.
    #[error("failure detector: {0}")]
    Detector(String),
    /// A timeout or period: zero, above an hour, or out of order with another.
    #[error("timing: {0}")]
    Timing(String),
    /// `outstanding_max` or `batch_requests_max` out of range.
    #[error("batching: {0}")]
    Batching(String),
    /// The CPUs to pin threads to: both dedicated threads on one CPU, or (found when the thread
    /// starts) a CPU this process may not run on.
    #[error("cpus: {0}")]
    Cpus(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(protocol: Protocol, slot_bytes: u32) -> ReplicaConfig {
        let ids = (0..3).map(NodeId).collect();
        let mut c = ReplicaConfig::new(NodeId(0), ids);
        c.protocol = protocol;
        c.slot_bytes = slot_bytes;
        c
    }

    /// A log whose entries cannot hold the replicas' own entries could never change its
    /// members (nor, under Velos, take a restarted replica back): refused, with the size that
    /// would do.
    #[test]
    fn slots_must_hold_the_protocols_own_entries() {
        let refused = |protocol, slot_bytes| match config(protocol, slot_bytes).validate() {
            Err(ConfigError::Log(why)) => why,
            other => panic!("{protocol:?} with {slot_bytes}-byte slots: {other:?}"),
        };
        let why = refused(Protocol::Mu, 24);
        assert!(why.contains("at least 32 bytes") && why.contains("membership"), "{why}");
        let why = refused(Protocol::Velos, 32);
        assert!(why.contains("at least 40 bytes") && why.contains("rejoins"), "{why}");
        assert!(config(Protocol::Mu, 32).validate().is_ok());
        assert!(config(Protocol::Velos, 40).validate().is_ok());
        for protocol in [Protocol::Mu, Protocol::Velos] {
            let value_bytes = 8 * protocol.control_entry_bytes().div_ceil(8);
            let (_, layout) = config(protocol, 24 + value_bytes as u32).validate().unwrap();
            assert!(layout.max_value_bytes() >= protocol.control_entry_bytes());
        }
    }

    /// A Velos log that fits in memory once but not once per replica (each has a value log) is
    /// a configuration error found by `validate`, not an engine's refusal at start.
    #[test]
    fn velos_logs_must_fit_once_per_replica() {
        let mut c = config(Protocol::Velos, 4096);
        c.slots_count = (isize::MAX as u64) / 4096 / 2;
        let mut mu = c.clone();
        mu.protocol = Protocol::Mu;
        assert!(mu.validate().is_ok(), "one log of that size fits");
        match c.validate() {
            Err(ConfigError::Log(why)) => assert!(why.contains("do not fit"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// A batch size whose buffers could not be made is refused, not a panic at start.
    #[test]
    fn batches_are_bounded() {
        let mut huge = config(Protocol::Mu, 128);
        huge.batch_requests_max = usize::MAX;
        assert!(matches!(huge.validate(), Err(ConfigError::Batching(_))));
        huge.batch_requests_max = BATCH_REQUESTS_MAX;
        assert!(huge.validate().is_ok());
    }
}
