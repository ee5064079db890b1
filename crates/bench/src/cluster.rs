//! Replica processes for `mu bench replication` and `mu bench failover`: a private run directory,
//! the `mu bench-replica` children on it, the words each child publishes for the benchmark, and
//! the clock the benchmark and its children share.
//!
//! Nothing is left behind: [`Cluster`] kills (SIGKILL works on stopped processes too) and reaps
//! its children when dropped, on success and on every error path, and [`RunDir`] then removes the
//! directory with the fabric's files. A child also dies with its parent (`PR_SET_PDEATHSIG`), so
//! even a benchmark that is itself killed leaves no replica running.

use crate::app_servers;
use crate::interrupt;
use crate::words::Words;
use mu_daemon::app_state::ExternalApp;
use mu_procs::run_dir::RunDir;
use std::ops::Range;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The cluster id of the benchmarks' replicas (distinct from `mu bench fabric`'s nodes).
pub const CLUSTER_ID: u64 = 0x6d75_6265_6e72;

/// What a benchmark replica's commit handler does with each entry (Mu paper §7.1: Mu
/// "standalone" and attached to an application).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum App {
    /// Nothing but note how far it has applied.
    Standalone,
    /// Decodes the entry as a key-value request and applies it to a store, as the key-value
    /// service does; the leader's values are puts of the payload's size.
    Kv,
    /// Decodes the entry as an order book request and applies it to a book
    /// ([`mu_orderbook::Engine`]); the leader's values are limit orders that cross now and
    /// then, each as long as an order's encoding is (the payload size does not change it).
    Orderbook,
    /// Redis's state machine feeding a `redis-server` per follower ([`crate::app_servers`]);
    /// the leader's values are its pump's entries, each a `SET` of a payload-sized value.
    Redis,
    /// Memcached's state machine applying to a `memcached` per replica
    /// ([`crate::app_servers`]); the leader's values are `set`s of a payload-sized value.
    Memcached,
}

impl App {
    pub fn name(self) -> &'static str {
        match self {
            App::Standalone => "standalone",
            App::Kv => "kv",
            App::Orderbook => "orderbook",
            App::Redis => "redis",
            App::Memcached => "memcached",
        }
    }

    /// The unmodified server this application's replicas apply to, if any.
    pub fn external(self) -> Option<ExternalApp> {
        match self {
            App::Redis => Some(ExternalApp::Redis),
            App::Memcached => Some(ExternalApp::Memcached),
            App::Standalone | App::Kv | App::Orderbook => None,
        }
    }

    /// Replica `me`'s commit handler ([`App::commit_handler`], or for an application with a
    /// server its state machine, see [`app_servers::attach`]) and its server, which it keeps
    /// as long as it runs. `leads`: the replica that proposes (Redis's runs no server).
    pub fn attach(
        self,
        run_dir: &Path,
        me: u16,
        leads: bool,
        applied: impl Fn(u64) + Send + 'static,
    ) -> Result<(app_servers::Handler, Option<app_servers::Server>), String> {
        match self.external() {
            Some(app) => app_servers::attach(app, run_dir, me, leads, applied),
            None => Ok((Box::new(self.commit_handler(applied)), None)),
        }
    }

    /// The size of the entry of a value of `payload_bytes` ([`App::value`]'s length).
    pub fn entry_bytes(self, payload_bytes: usize) -> usize {
        let mut out = Vec::new();
        self.value(payload_bytes, 1, &mut out);
        out.len()
    }

    /// A commit handler for this application, calling `applied(index)` after each entry.
    pub fn commit_handler(
        self,
        applied: impl Fn(u64) + Send + 'static,
    ) -> impl FnMut(u64, &[u8]) + Send + 'static {
        let mut store = (self == App::Kv).then(mu_kv::Store::new);
        let mut book = (self == App::Orderbook).then(mu_orderbook::Engine::new);
        move |index, entry| {
            // A malformed entry is answered (in the session table), never fatal.
            if let Some(store) = store.as_mut() {
                let _ = store.apply_bytes(entry);
            }
            if let Some(book) = book.as_mut() {
                let _ = book.apply_bytes(entry);
            }
            applied(index);
        }
    }

    /// The `i`-th value a leader proposes, `payload_bytes` long where the application allows:
    /// for the key-value store a put over 1,000 keys whose encoding is `payload_bytes` long, or
    /// as short as a put can be (28 bytes) for smaller payloads; for Redis and Memcached an
    /// entry holding a write of a `payload_bytes` value (Redis's 0-th: the leadership's marker).
    pub fn value(self, payload_bytes: usize, i: u64, out: &mut Vec<u8>) {
        match self {
            App::Standalone => {
                out.resize(payload_bytes, 0);
                let stamp = i.to_le_bytes();
                let n = stamp.len().min(out.len());
                out[..n].copy_from_slice(&stamp[..n]);
            }
            App::Kv => {
                let key = format!("k{:03}", i % 1000).into_bytes();
                let mut request = mu_kv::Request {
                    client: 1,
                    seq: i + 1,
                    op: mu_kv::Op::Put { key, value: Vec::new() },
                };
                let overhead = request.encode().map_or(0, |e| e.len());
                if let mu_kv::Op::Put { value, .. } = &mut request.op {
                    value.resize(payload_bytes.saturating_sub(overhead), b'v');
                }
                *out = request.encode().expect("a put within the store's limits");
            }
            App::Orderbook => *out = order(i).encode(),
            App::Redis | App::Memcached => {
                let app = self.external().expect("an application with a server");
                app_servers::entry(app, payload_bytes, i, out);
            }
        }
    }
}

/// The `i`-th order of [`App::Orderbook`]'s leader: limit orders alternating sides around a
/// price of 100 ticks, so that about half of them trade with what rests.
pub fn order(i: u64) -> mu_orderbook::Request {
    use mu_orderbook::{Command, NewOrder, Side};
    let side = if i % 2 == 0 { Side::Buy } else { Side::Sell };
    let price = 97 + (i * 3) % 7;
    let order = NewOrder::limit(i + 1, side, price, 1 + i % 5);
    mu_orderbook::Request { client: 1, seq: i + 1, command: Command::Submit(order) }
}

/// Which of the replica's modes runs the replication plane (Mu paper §7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplicaMode {
    /// `propose` runs the replication plane on the caller's thread.
    Direct,
    /// `propose` hands the value to a dedicated, busy-polling replication thread.
    Handover,
}

/// How the replicas' threads wait when idle ([`mu_replica::Threads`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ThreadsChoice {
    /// Back off when idle (spin, yield, then sleep): right on any machine.
    #[default]
    Shared,
    /// Spin and never sleep, a core per thread (the Mu paper's set-up); the benchmark's
    /// proposer also waits for leadership by spinning. Needs about four cores per replica.
    Dedicated,
}

impl ThreadsChoice {
    pub fn threads(self) -> mu_replica::Threads {
        match self {
            ThreadsChoice::Shared => mu_replica::Threads::Shared,
            ThreadsChoice::Dedicated => mu_replica::Threads::Dedicated,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ThreadsChoice::Shared => "shared",
            ThreadsChoice::Dedicated => "dedicated",
        }
    }
}

impl ReplicaMode {
    pub fn mode(self) -> mu_replica::Mode {
        match self {
            ReplicaMode::Direct => mu_replica::Mode::Direct,
            ReplicaMode::Handover => mu_replica::Mode::Handover,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ReplicaMode::Direct => "direct",
            ReplicaMode::Handover => "handover",
        }
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: one clock for every process of the host.
pub fn monotonic_ns() -> u64 {
    mu_procs::clock::monotonic_ns()
}

/// Converts this process's `Instant`s to `CLOCK_MONOTONIC` nanoseconds. `Instant` is that clock
/// on Linux but opaque, so the two are read together once and the offset kept.
pub struct ClockMap {
    instant: Instant,
    monotonic_ns: u64,
}

impl ClockMap {
    pub fn sample() -> ClockMap {
        let before = Instant::now();
        let monotonic_ns = monotonic_ns();
        let after = Instant::now();
        ClockMap { instant: before + (after - before) / 2, monotonic_ns }
    }

    pub fn monotonic_ns(&self, t: Instant) -> u64 {
        if t >= self.instant {
            self.monotonic_ns + (t - self.instant).as_nanos() as u64
        } else {
            self.monotonic_ns.saturating_sub((self.instant - t).as_nanos() as u64)
        }
    }
}

/// How the replica processes are set up.
#[derive(Clone, Debug)]
pub struct Spec {
    pub replicas: u16,
    /// The fabric every replica of the cluster runs on.
    pub fabric: FabricChoice,
    pub mode: ReplicaMode,
    /// The failure detector's read period; `None` for `ReplicaConfig`'s default.
    pub read_period_us: Option<u64>,
    pub threads: ThreadsChoice,
    pub slots_count: u64,
    pub slot_bytes: u32,
    /// Bytes of the values a process proposes whenever it leads; 0: it never proposes.
    pub propose_bytes: usize,
    pub app: App,
    pub protocol: mu_replica::Protocol,
    /// Each replica thread (and each proposing thread) on a CPU of its own: [`Spec::node_cpus`].
    pub pin: bool,
}

/// Checks that a pinned cluster of `replicas` has the CPUs it needs ([`Spec::node_cpus`]: three
/// per replica, the fabric's own threads left unpinned), before anything starts.
pub fn check_pin_cpus(replicas: u16) -> Result<(), String> {
    let allowed = mu_cpu::allowed_cpus();
    let needed = 3 * usize::from(replicas);
    if allowed.len() < needed {
        return Err(format!(
            "--pin puts each thread of the {replicas} replicas (proposing, replication, \
             background) on a CPU of its own and needs {needed} CPUs; this process may run on {} \
             ({})",
            allowed.len(),
            mu_cpu::cpu_list(&allowed)
        ));
    }
    Ok(())
}

/// The `mu bench-replica` options that pin a replica's threads to `cpus`.
fn cpu_args(cpus: NodeCpus) -> Vec<String> {
    let mut args = Vec::new();
    for (flag, cpu) in [
        ("--proposer-cpu", cpus.proposer),
        ("--replication-cpu", cpus.replica.replication),
        ("--background-cpu", cpus.replica.background),
    ] {
        if let Some(cpu) = cpu {
            args.extend([flag.to_string(), cpu.to_string()]);
        }
    }
    args
}

/// The CPUs of one benchmark replica's threads when the cluster is pinned; `None` where not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCpus {
    /// The process's proposing thread (the application's thread, which proposes in direct mode).
    pub proposer: Option<usize>,
    pub replica: mu_replica::ThreadCpus,
}

impl Spec {
    /// Where replica `node`'s threads run: nowhere in particular unless the cluster is pinned.
    /// Pinned, with R replicas and the allowed CPUs in order, the thread that does a replica's
    /// work takes the `node`th CPU — the proposing thread of a process that proposes in direct
    /// mode (`proposes`), the replication thread otherwise — its other thread the `R + node`th,
    /// its background thread the `2R + node`th. So replicas 0, 1 and 2 work on the CPUs that
    /// `mu bench fabric` pins A, B and C to, and a `write2` floor measured there compares with
    /// them core for core.
    pub fn node_cpus(&self, node: u16, proposes: bool) -> NodeCpus {
        self.node_cpus_among(&mu_cpu::allowed_cpus(), node, proposes)
    }

    /// [`Spec::node_cpus`] with `allowed` as the CPUs this process may use.
    fn node_cpus_among(&self, allowed: &[usize], node: u16, proposes: bool) -> NodeCpus {
        let at =
            |k: usize| allowed.get(k * usize::from(self.replicas) + usize::from(node)).copied();
        if !self.pin {
            return NodeCpus::default();
        }
        let (proposer, replication) = if proposes && self.mode == ReplicaMode::Direct {
            (at(0), at(1))
        } else {
            (at(1), at(0))
        };
        NodeCpus {
            proposer: if proposes { proposer } else { None },
            replica: mu_replica::ThreadCpus { replication, background: at(2) },
        }
    }
}

/// The ofi provider that the `--fabric` and `--provider` options ask for: none on shm, where
/// naming one is an error.
pub fn fabric_provider(
    fabric: &str,
    provider_name: Option<&str>,
) -> Result<Option<&'static str>, String> {
    match (fabric, provider_name) {
        ("shm", None) => Ok(None),
        ("shm", Some(p)) => Err(format!("--provider {p:?} is for --fabric ofi; shm has none")),
        #[cfg(feature = "ofi")]
        ("ofi", p) => crate::ofi_loopback::provider(p).map(Some),
        #[cfg(not(feature = "ofi"))]
        ("ofi", _) => Err(mu_daemon::config::OFI_NOT_BUILT.into()),
        (other, _) => Err(format!("unknown fabric {other:?}: use shm or ofi")),
    }
}

/// The fabric of a benchmark's replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FabricChoice {
    /// Shared memory in the run directory.
    Shm,
    /// libfabric over loopback TCP with `provider` (one of `mu_fabric_ofi::PROVIDERS`), each
    /// node's ports from its block after `base_port` (`ofi::loopback_config`).
    #[cfg(feature = "ofi")]
    Ofi { base_port: u16, provider: &'static str },
}

impl FabricChoice {
    /// From the `--fabric` and `--provider` options: `shm`, or `ofi` (provider `sockets` unless
    /// one is named) with a block of free ports for `replicas`.
    #[cfg_attr(not(feature = "ofi"), allow(unused_variables))]
    pub fn parse(
        name: &str,
        provider: Option<&str>,
        replicas: u16,
    ) -> Result<FabricChoice, String> {
        Ok(match fabric_provider(name, provider)? {
            None => FabricChoice::Shm,
            #[cfg(not(feature = "ofi"))]
            Some(_) => unreachable!("no provider without the ofi backend"),
            #[cfg(feature = "ofi")]
            Some(provider) => FabricChoice::Ofi {
                base_port: crate::ofi_loopback::free_port_block(replicas)?,
                provider,
            },
        })
    }

    /// The same fabric for a new cluster of `replicas`: on ofi, a fresh block of ports.
    #[cfg_attr(not(feature = "ofi"), allow(unused_variables))]
    pub fn fresh(self, replicas: u16) -> Result<FabricChoice, String> {
        match self {
            FabricChoice::Shm => Ok(FabricChoice::Shm),
            #[cfg(feature = "ofi")]
            FabricChoice::Ofi { provider, .. } => Ok(FabricChoice::Ofi {
                base_port: crate::ofi_loopback::free_port_block(replicas)?,
                provider,
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FabricChoice::Shm => "shm",
            #[cfg(feature = "ofi")]
            FabricChoice::Ofi { .. } => "ofi",
        }
    }

    /// The fabric and, on ofi, its provider: `shm`, `ofi (sockets)`.
    pub fn label(self) -> String {
        match self {
            FabricChoice::Shm => "shm".into(),
            #[cfg(feature = "ofi")]
            FabricChoice::Ofi { provider, .. } => format!("ofi ({provider})"),
        }
    }

    /// Starts replica `config.me` of a benchmark cluster on this fabric.
    pub fn start_replica(
        self,
        run_dir: &Path,
        config: mu_replica::ReplicaConfig,
        mode: mu_replica::Mode,
        on_commit: impl FnMut(u64, &[u8]) + Send + 'static,
    ) -> Result<mu_replica::Replica, String> {
        let me = config.me;
        let replica = match self {
            FabricChoice::Shm => {
                let mut shm = mu_fabric_shm::ShmConfig::new(run_dir, CLUSTER_ID, me)
                    .with_protocol(config.protocol.tag());
                shm.liveness_spin = config.threads == mu_replica::Threads::Dedicated;
                let fabric = mu_fabric_shm::ShmFabric::create(shm)
                    .map_err(|e| format!("replica {me}: fabric: {e}"))?;
                mu_replica::Replica::start(config, fabric, mode, on_commit)
            }
            #[cfg(feature = "ofi")]
            FabricChoice::Ofi { base_port, provider } => {
                let replicas = config.replicas.len() as u16;
                let mut ofi =
                    crate::ofi_loopback::loopback_config(provider, base_port, replicas, me.0);
                // Calls kept short, as `mu replica`'s are (docs/fabric.md).
                ofi.call_wait_us =
                    Some(mu_daemon::config::call_wait_us(config.detector.read_period_ns / 1000));
                let fabric = mu_fabric_ofi::OfiFabric::open(ofi)
                    .map_err(|e| format!("replica {me}: fabric: {e}"))?;
                mu_replica::Replica::start(config, fabric, mode, on_commit)
            }
        };
        replica.map_err(|e| format!("replica {me}: {e}"))
    }
}

struct Process {
    node: u16,
    /// `None` once reaped.
    child: Option<Child>,
    words: Words,
}

/// Replica processes on one run directory. Dropping it kills and reaps them all, then removes
/// the directory.
pub struct Cluster {
    processes: Vec<Process>,
    dir: RunDir,
}

impl Cluster {
    /// A cluster of no process yet on `dir`.
    pub fn new(dir: RunDir) -> Cluster {
        Cluster { processes: Vec::new(), dir }
    }

    /// Starts `mu bench-replica` processes for `nodes`; each publishes its words in
    /// `words-<node>.mem` in the run directory. Call it from a thread that outlives the cluster:
    /// the children die with the thread that started them (`PR_SET_PDEATHSIG` follows the
    /// thread).
    pub fn spawn(&mut self, spec: &Spec, nodes: Range<u16>) -> Result<(), String> {
        let exe = std::env::current_exe().map_err(|e| format!("finding the mu binary: {e}"))?;
        for node in nodes {
            let words_path = self.dir.path().join(format!("words-{node}.mem"));
            let words = Words::create(&words_path)?;
            let mut cmd = Command::new(&exe);
            cmd.arg("bench-replica")
                .arg("--run-dir")
                .arg(self.dir.path())
                .arg("--words")
                .arg(&words_path)
                .args(["--node", &node.to_string(), "--replicas", &spec.replicas.to_string()])
                .args(["--mode", spec.mode.name(), "--slots", &spec.slots_count.to_string()])
                .args(["--slot-bytes", &spec.slot_bytes.to_string()])
                .args(["--propose-bytes", &spec.propose_bytes.to_string()])
                .args(["--app", spec.app.name()])
                .args(["--protocol", spec.protocol.name()])
                .args(["--fabric", spec.fabric.name()])
                .args(["--threads", spec.threads.name()])
                .args(["--parent", &std::process::id().to_string()]);
            if let Some(us) = spec.read_period_us {
                cmd.args(["--read-period-us", &us.to_string()]);
            }
            cmd.args(cpu_args(spec.node_cpus(node, spec.propose_bytes > 0)));
            #[cfg(feature = "ofi")]
            if let FabricChoice::Ofi { base_port, provider } = spec.fabric {
                cmd.args(["--ofi-base-port", &base_port.to_string(), "--ofi-provider", provider]);
            }
            // Their own process group: the terminal's Ctrl-C reaches the benchmark only, which
            // then stops them and cleans up (a child killed under it would read as a failure).
            let child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .process_group(0)
                .spawn()
                .map_err(|e| format!("starting replica {node}: {e}"))?;
            self.processes.push(Process { node, child: Some(child), words });
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn process(&self, node: u16) -> &Process {
        self.processes.iter().find(|p| p.node == node).expect("a node of this cluster")
    }

    fn process_mut(&mut self, node: u16) -> &mut Process {
        self.processes.iter_mut().find(|p| p.node == node).expect("a node of this cluster")
    }

    pub fn words(&self, node: u16) -> &Words {
        &self.process(node).words
    }

    /// Waits until every process runs its replica.
    pub fn wait_started(&mut self, timeout: Duration) -> Result<(), String> {
        poll_until("the replica processes to start", timeout, || {
            self.check_alive(&[])?;
            Ok(self.processes.iter().all(|p| p.words.started.get() == 1).then_some(()))
        })
    }

    /// Waits until every process's detector elects `leader`.
    pub fn wait_leader(&mut self, leader: u16, timeout: Duration) -> Result<(), String> {
        poll_until(&format!("every replica to see replica {leader} lead"), timeout, || {
            self.check_alive(&[])?;
            let agreed =
                self.processes.iter().all(|p| p.words.leader_seen.get() == u64::from(leader) + 1);
            Ok(agreed.then_some(()))
        })
    }

    /// Sets [`SharedWords::go`](crate::words::SharedWords::go) of every process to `go`.
    pub fn set_go(&self, go: u64) {
        for p in &self.processes {
            p.words.go.set(go);
        }
    }

    /// Fails if a process other than those in `except` has exited (or was reaped).
    pub fn check_alive(&mut self, except: &[u16]) -> Result<(), String> {
        for p in &mut self.processes {
            if except.contains(&p.node) {
                continue;
            }
            let Some(child) = p.child.as_mut() else {
                return Err(format!("replica {} is not running", p.node));
            };
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                p.child = None;
                return Err(format!(
                    "replica {} exited unexpectedly ({status}; its own message, if any, is above)",
                    p.node
                ));
            }
        }
        Ok(())
    }

    /// How `node` ended, once it has (reaping it); `None` while it runs.
    pub fn exit_status(&mut self, node: u16) -> Result<Option<ExitStatus>, String> {
        let p = self.process_mut(node);
        match p.child.as_mut() {
            None => Err(format!("replica {node} was already reaped")),
            Some(child) => {
                let status = child.try_wait().map_err(|e| e.to_string())?;
                if status.is_some() {
                    p.child = None;
                }
                Ok(status)
            }
        }
    }

    /// Sends `signal` to `node`.
    pub fn signal(&self, node: u16, signal: libc::c_int) -> Result<(), String> {
        let Some(child) = self.process(node).child.as_ref() else {
            return Err(format!("replica {node} is not running"));
        };
        mu_procs::child::signal(child, signal)
            .map_err(|e| format!("signal {signal} to replica {node}: {e}"))
    }

    /// Waits for `node`, which was sent SIGKILL, to be gone, and reaps it.
    pub fn reap(&mut self, node: u16) -> Result<ExitStatus, String> {
        let p = self.process_mut(node);
        let Some(mut child) = p.child.take() else {
            return Err(format!("replica {node} was already reaped"));
        };
        child.wait().map_err(|e| format!("waiting for replica {node}: {e}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in &mut self.processes {
            if let Some(child) = p.child.as_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // The fields drop next: the mappings, then the run directory.
    }
}

/// Calls `ready` every millisecond until it gives a value or fails; fails after `timeout` (with
/// `what` in the message) and on an interrupt.
pub fn poll_until<T>(
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> Result<Option<T>, String>,
) -> Result<T, String> {
    let start = Instant::now();
    loop {
        interrupt::check()?;
        if let Some(value) = ready()? {
            return Ok(value);
        }
        if start.elapsed() > timeout {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_convert_to_the_monotonic_clock() {
        let clock = ClockMap::sample();
        let before = monotonic_ns();
        let converted = clock.monotonic_ns(Instant::now());
        let after = monotonic_ns();
        // Within the sampling error (the two clocks are one on Linux), plus scheduling slack.
        assert!(converted + 1_000_000 >= before && converted <= after + 1_000_000);
        let earlier = clock.monotonic_ns(Instant::now() - Duration::from_millis(5));
        assert!(earlier < converted);
    }

    fn spec(mode: ReplicaMode, pin: bool) -> Spec {
        Spec {
            replicas: 3,
            fabric: FabricChoice::Shm,
            mode,
            read_period_us: None,
            threads: ThreadsChoice::Dedicated,
            slots_count: 64,
            slot_bytes: 128,
            propose_bytes: 0,
            app: App::Standalone,
            protocol: mu_replica::Protocol::Mu,
            pin,
        }
    }

    /// What `mu bench-replica` makes of the options `Cluster::spawn` gives it for `cpus`.
    fn as_the_child_reads_them(cpus: NodeCpus) -> NodeCpus {
        use clap::Parser;
        let mut line: Vec<String> = ["mu", "bench-replica", "--run-dir", "r", "--words", "w"]
            .into_iter()
            .chain(["--node", "0", "--replicas", "3", "--mode", "direct", "--slots", "64"])
            .chain(["--slot-bytes", "128", "--propose-bytes", "0", "--parent", "1"])
            .map(String::from)
            .collect();
        line.extend(cpu_args(cpus));
        /// `mu bench-replica`'s command line, as the `mu` binary parses it.
        #[derive(clap::Parser)]
        struct Line {
            #[command(subcommand)]
            command: Child,
        }
        #[derive(clap::Subcommand)]
        enum Child {
            BenchReplica(crate::replica_child::Args),
        }
        let Child::BenchReplica(args) =
            Line::try_parse_from(line).expect("the child's command line").command;
        args.cpus()
    }

    #[test]
    fn a_pinned_cluster_gives_each_thread_a_cpu_of_its_own_and_the_children_are_told() {
        // Numbered with gaps, as a cpuset may be.
        let allowed: Vec<usize> = (0..12).map(|c| 2 * c + 1).collect();
        let at = |k: usize| Some(allowed[k]);
        let direct = spec(ReplicaMode::Direct, true);
        // `mu bench replication`: replica 0 proposes on its application's thread, on the first
        // CPU (write2's A); the followers' replication threads on the next two (B and C).
        let leader = direct.node_cpus_among(&allowed, 0, true);
        assert_eq!((leader.proposer, leader.replica.replication), (at(0), at(3)));
        assert_eq!(leader.replica.background, at(6));
        for node in 1..3u16 {
            let follower = direct.node_cpus_among(&allowed, node, false);
            let n = usize::from(node);
            assert_eq!(follower.proposer, None);
            assert_eq!(follower.replica.replication, at(n));
            assert_eq!(follower.replica.background, at(6 + n));
        }
        // In handover mode the replication thread does the leader's work.
        let handover = spec(ReplicaMode::Handover, true).node_cpus_among(&allowed, 0, true);
        assert_eq!((handover.replica.replication, handover.proposer), (at(0), at(3)));
        // `mu bench failover`: every process proposes; nine CPUs, none shared.
        let mut used: Vec<usize> = (0..3)
            .flat_map(|node| {
                let c = direct.node_cpus_among(&allowed, node, true);
                [c.proposer, c.replica.replication, c.replica.background]
            })
            .map(|c| c.expect("a CPU for every thread"))
            .collect();
        used.sort_unstable();
        used.dedup();
        assert_eq!(used.len(), 9);
        // The children pin what they are told.
        for (node, proposes) in [(0, true), (1, false), (2, true)] {
            let cpus = direct.node_cpus_among(&allowed, node, proposes);
            assert_eq!(as_the_child_reads_them(cpus), cpus);
        }
        // Unpinned: nothing, whatever the CPUs.
        let free = spec(ReplicaMode::Direct, false).node_cpus_among(&allowed, 0, true);
        assert_eq!(free, NodeCpus::default());
        assert!(cpu_args(free).is_empty());
        assert_eq!(as_the_child_reads_them(free), free);
    }

    #[test]
    fn a_run_directory_is_private_and_removed() {
        let dir = RunDir::create("unit-test").expect("a run directory");
        let path = dir.path().to_path_buf();
        let sub = dir.subdirectory("cluster-0").expect("a subdirectory");
        let words = Words::create(&sub.path().join("words.mem")).expect("words");
        words.commits.set(41);
        words.commits.add(1);
        assert_eq!(Words::open(&sub.path().join("words.mem")).unwrap().commits.get(), 42);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o700);
        drop(words);
        drop(sub);
        drop(dir);
        assert!(!path.exists());
    }
}
