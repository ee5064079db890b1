//! A key-value cluster of three `mu replica` child processes on the shared-memory fabric, in a
//! private run directory: what `mu demo`, `mu bench e2e` and `mu bench ukharon-kv` run
//! against. A uKharon-KV cluster ([`KvCluster::start_ukharon_kv`]), and a Mu or Velos one with
//! leased reads ([`KvCluster::start_leased`]), have three coordinator processes besides; one
//! replicating an unmodified Redis or Memcached ([`KvCluster::start_external`], what
//! `mu demo --app redis|memcached` runs) has each replica's server as that replica's child. The
//! processes die with this one (they watch its pid) and are killed and reaped when the cluster
//! is dropped; then the run directory and its shared memory are removed.

use crate::app_state::{ExternalApp, FrontRole};
use crate::interrupt;
use mu_procs::run_dir::RunDir;
use mu_service::{Client, ClusterConfig, ReplicaReport};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const REPLICAS: u16 = 3;

/// How long a uKharon-KV replica may take to serve a view once started.
const START_WAIT: Duration = Duration::from_secs(20);

/// uKharon's timings for processes that share a few cores, as `ukharon::config::shared_host`
/// writes them (see there why each), under a uKharon-KV cluster's `[ukharon]`.
const SHARED_HOST_TIMINGS: &str = "poll_gap_ns = 200_000\nlease_ns = 3_000_000\n\
    ring_read_gap_ns = 10_000_000\nbeat_period_ns = 10_000_000\nbeat_timeout_ns = 150_000_000\n\
    repeat_ns = 5_000_000\nbackoff_max_ns = 2_000_000\nreconnect_ns = 5_000_000\n\
    [ukharon.lease]\nlease_max_ns = 100_000_000\nrenew_margin_ns = 1_500_000\n";

/// What a [`KvCluster`] runs.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Mu or Velos, every request through the log.
    Replicated(mu_replica::Protocol),
    /// Mu or Velos with leased reads, beside a uKharon group.
    Leased(mu_replica::Protocol),
    /// Mu or Velos replicating the order book (`app = "orderbook"`).
    Orderbook(mu_replica::Protocol),
    /// uKharon-KV.
    UkharonKv,
    /// Mu or Velos replicating an unmodified Redis or Memcached (`app = "redis"` or
    /// `"memcached"`), whose clients speak its own protocol to each replica's front; on
    /// [`REPLICAS`] replicas, or on replica 0 alone where `alone`.
    External(mu_replica::Protocol, ExternalApp, bool),
}

/// The log of each replica.
pub struct LogShape {
    pub slots: u64,
    pub slot_bytes: u32,
}

/// A running cluster. Fields drop in order: the processes before their run directory.
pub struct KvCluster {
    processes: Processes,
    pub config: ClusterConfig,
    _dir: RunDir,
}

impl KvCluster {
    /// Writes a configuration into a fresh run directory named after `tag` and starts the
    /// replicas; does not wait for them (see [`KvCluster::wait_for_leader`]).
    pub fn start(
        tag: &str,
        log: LogShape,
        protocol: mu_replica::Protocol,
    ) -> Result<KvCluster, String> {
        KvCluster::start_from(tag, &log, Kind::Replicated(protocol))
    }

    /// [`KvCluster::start`] for uKharon-KV: replicas 3, 4 and 5 and coordinators 0, 1 and 2,
    /// with the timings of `mu ukharon`'s shared-host file (`ukharon::config::shared_host`:
    /// processes that share a few cores). Returns once every replica serves.
    pub fn start_ukharon_kv(tag: &str, log: LogShape) -> Result<KvCluster, String> {
        KvCluster::start_from(tag, &log, Kind::UkharonKv)
    }

    /// [`KvCluster::start`] with leased reads (`reads = "lease"`): replicas 3, 4 and 5 of
    /// `protocol` beside coordinators 0, 1 and 2, with the timings of
    /// [`KvCluster::start_ukharon_kv`].
    pub fn start_leased(
        tag: &str,
        log: LogShape,
        protocol: mu_replica::Protocol,
    ) -> Result<KvCluster, String> {
        KvCluster::start_from(tag, &log, Kind::Leased(protocol))
    }

    /// [`KvCluster::start`] with the order book as the replicated application
    /// (`app = "orderbook"`): clients send orders ([`Client::order`]).
    pub fn start_orderbook(
        tag: &str,
        log: LogShape,
        protocol: mu_replica::Protocol,
    ) -> Result<KvCluster, String> {
        KvCluster::start_from(tag, &log, Kind::Orderbook(protocol))
    }

    /// [`KvCluster::start`] (or [`KvCluster::start_orderbook`] with `orderbook`) whose
    /// clients reach the replicas over the fabric (`transport = "fabric"`): [`KvCluster::client`]
    /// gives such clients.
    pub fn start_over_fabric(
        tag: &str,
        log: LogShape,
        protocol: mu_replica::Protocol,
        orderbook: bool,
    ) -> Result<KvCluster, String> {
        let kind = if orderbook { Kind::Orderbook(protocol) } else { Kind::Replicated(protocol) };
        KvCluster::start_file(tag, &log, kind, ("transport = \"fabric\"\n", ""))
    }

    /// [`KvCluster::start`] (or [`KvCluster::start_orderbook`] with `orderbook`) whose
    /// clients reach the replicas over TCP on loopback (`[clients.addresses]`, on ports free
    /// when it starts).
    pub fn start_over_tcp(
        tag: &str,
        log: LogShape,
        protocol: mu_replica::Protocol,
        orderbook: bool,
    ) -> Result<KvCluster, String> {
        let kind = if orderbook { Kind::Orderbook(protocol) } else { Kind::Replicated(protocol) };
        KvCluster::start_file(tag, &log, kind, ("", &loopback_addresses()?))
    }

    /// A cluster of `protocol` replicating an unmodified `app`: each replica's front listens on
    /// a TCP port on loopback ([`KvCluster::client_addresses`]) and runs the app's server as
    /// its child. Does not wait for them ([`KvCluster::wait_for_app_leader`]).
    pub fn start_external(
        tag: &str,
        log: LogShape,
        protocol: mu_replica::Protocol,
        app: ExternalApp,
    ) -> Result<KvCluster, String> {
        let kind = Kind::External(protocol, app, false);
        KvCluster::start_file(tag, &log, kind, ("", &loopback_addresses()?))
    }

    /// [`KvCluster::start_external`] whose fronts take clients on their Unix sockets only
    /// (`redis-N.sock`, `memcached-N.sock` in the run directory; no `[clients.addresses]`, so
    /// no port another process could take between choosing and binding it), on [`REPLICAS`]
    /// replicas, or with `alone` on one (`replicas = [0]`: the front and its log, with no
    /// follower to replicate to). What `mu bench e2e` measures the fronts by.
    pub fn start_external_on_sockets(
        tag: &str,
        log: LogShape,
        protocol: mu_replica::Protocol,
        app: ExternalApp,
        alone: bool,
    ) -> Result<KvCluster, String> {
        KvCluster::start_from(tag, &log, Kind::External(protocol, app, alone))
    }

    /// Each replica's TCP client address, by id (none unless the cluster has them).
    pub fn client_addresses(&self) -> Vec<(u16, String)> {
        self.config.client_addresses().ok().flatten().unwrap_or_default()
    }

    /// [`KvCluster::wait_for_leader`] for a cluster of an unmodified `app`: the one replica
    /// among `ids` whose front serves as the leader, once every front among `ids` answers.
    pub fn wait_for_app_leader(
        &mut self,
        app: ExternalApp,
        ids: &[u16],
        timeout: Duration,
    ) -> Result<u16, String> {
        let deadline = Instant::now() + timeout;
        loop {
            interrupt::check()?;
            self.processes.check_alive()?;
            // Every front must answer: a replica whose front never came up would otherwise go
            // unnoticed until the failover needs it.
            let roles: Vec<(u16, std::io::Result<FrontRole>)> =
                ids.iter().map(|&id| (id, app.front_role(&self.config.run_dir, id))).collect();
            let leading: Vec<u16> = roles
                .iter()
                .filter(|(_, r)| matches!(r, Ok(FrontRole::Leads)))
                .map(|(id, _)| *id)
                .collect();
            let silent: Vec<String> = roles
                .iter()
                .filter_map(|(id, r)| r.as_ref().err().map(|e| format!("replica {id}: {e}")))
                .collect();
            if let ([leader], true) = (&leading[..], silent.is_empty()) {
                return Ok(*leader);
            }
            if Instant::now() > deadline {
                let why = if silent.is_empty() {
                    format!("{} fronts lead", leading.len())
                } else {
                    format!("not answering: {}", silent.join("; "))
                };
                return Err(format!(
                    "the fronts did not agree on one leader within {} s ({why})",
                    timeout.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Writes the file of a cluster of `kind` into a fresh run directory and starts its
    /// processes.
    fn start_from(tag: &str, log: &LogShape, kind: Kind) -> Result<KvCluster, String> {
        KvCluster::start_file(tag, log, kind, ("", ""))
    }

    /// [`KvCluster::start_from`] with `top` keys at the file's top level and `tail` (tables)
    /// at its end.
    fn start_file(
        tag: &str,
        log: &LogShape,
        kind: Kind,
        (top, tail): (&str, &str),
    ) -> Result<KvCluster, String> {
        let dir = RunDir::create(tag)?;
        let config_path = dir.path().join("cluster.toml");
        let text = format!("{top}{}{tail}", cluster_file(tag, dir.path(), log, kind));
        std::fs::write(&config_path, text)
            .map_err(|e| format!("writing the configuration: {e}"))?;
        let config = crate::config::load_config(&config_path)?;
        let processes = Processes::spawn(&config_path, &config)?;
        Ok(KvCluster { processes, config, _dir: dir })
    }

    pub fn run_dir(&self) -> &Path {
        &self.config.run_dir
    }

    /// A client of this cluster (over the fabric where the cluster's transport is).
    pub fn client(&self) -> Result<Client, String> {
        self.config.client()
    }

    /// Waits until a majority of the replicas agree on a leader; fails if a replica exits, on
    /// an interrupt, or after `timeout`.
    pub fn wait_for_leader(&mut self, timeout: Duration) -> Result<u16, String> {
        let deadline = Instant::now() + timeout;
        loop {
            interrupt::check()?;
            self.processes.check_alive()?;
            if let Ok(leader) = self.current_leader() {
                return Ok(leader);
            }
            if Instant::now() > deadline {
                return Err(format!("no leader within {} s", timeout.as_secs()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The leader a majority of the replicas' detectors agree on.
    pub fn current_leader(&self) -> Result<u16, String> {
        let mut client = self.client()?;
        let reports: Vec<ReplicaReport> =
            self.config.replicas.iter().filter_map(|&id| client.status(id).ok()).collect();
        ReplicaReport::agreed_leader(&reports, self.config.replicas.len())
            .ok_or_else(|| "no leader agreed on yet".into())
    }

    /// Kills replica `id` (SIGKILL) and reaps it.
    pub fn kill(&mut self, id: u16) -> Result<(), String> {
        self.processes.kill(id)
    }

    /// Sends `signal` to process `id` (SIGSTOP and SIGCONT, say).
    pub fn signal(&self, id: u16, signal: libc::c_int) -> Result<(), String> {
        self.processes.signal(id, signal)
    }

    /// Fails if a replica that was not killed has exited, with the end of its log.
    pub fn check_alive(&mut self) -> Result<(), String> {
        self.processes.check_alive()
    }
}

/// A `[clients.addresses]` table naming a port on loopback for each replica, free when it is
/// written.
fn loopback_addresses() -> Result<String, String> {
    let mut addresses = String::from("\n[clients.addresses]\n");
    // Free now; taken by the replicas a moment later (another process could take one in
    // between: the replica then fails to start, and says so).
    let listeners: Vec<std::net::TcpListener> = (0..REPLICAS)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("finding free ports on loopback: {e}"))?;
    for (id, l) in listeners.iter().enumerate() {
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        addresses.push_str(&format!("{id} = \"127.0.0.1:{port}\"\n"));
    }
    Ok(addresses)
}

/// The text of a cluster file in `run_dir`: three replicas of Mu or Velos (ids 0 to 2, direct
/// mode, checksummed log entries), replicating the key-value store or the order book; the same
/// with leased reads (ids 3 to 5, `reads = "lease"`);
/// or uKharon-KV's (ids 3 to 5, a snapshot limit). The last two have a `[ukharon]` section
/// naming coordinators 0 to 2 with [`SHARED_HOST_TIMINGS`].
fn cluster_file(tag: &str, run_dir: &Path, log: &LogShape, kind: Kind) -> String {
    // The process id in the cluster id keeps the clusters of runs side by side apart.
    let (id_bits, protocol, reads, replicas, log_tail) = match kind {
        Kind::Replicated(p) => (0xde, p.name(), "", "[0, 1, 2]", "integrity = \"checksum\"\n"),
        Kind::Orderbook(p) => {
            (0x0b, p.name(), "app = \"orderbook\"\n", "[0, 1, 2]", "integrity = \"checksum\"\n")
        }
        Kind::Leased(p) => {
            (0x6c, p.name(), "reads = \"lease\"\n", "[3, 4, 5]", "integrity = \"checksum\"\n")
        }
        Kind::UkharonKv => {
            (0x6b, mu_service::config::UKHARON_KV, "", "[3, 4, 5]", "snapshot_bytes = 16_777_216\n")
        }
        Kind::External(p, app, alone) => {
            let id_bits = if app == ExternalApp::Redis { 0x7e } else { 0x3c };
            let replicas = if alone { "[0]" } else { "[0, 1, 2]" };
            (id_bits, p.name(), external_app_line(app), replicas, "")
        }
    };
    let ukharon = match kind {
        Kind::Replicated(_) | Kind::Orderbook(_) => String::new(),
        // The failure detector's period of the applications' tests: their servers share the
        // cores with the replicas.
        Kind::External(..) => "\n[detector]\nread_period_us = 4000\n".to_string(),
        _ => format!("\n[ukharon]\ncoordinators = [0, 1, 2]\n{SHARED_HOST_TIMINGS}"),
    };
    let cluster_id = u64::from(std::process::id()) << 16 | id_bits;
    format!(
        "# written by mu {tag}\ncluster_id = {cluster_id}\nprotocol = \"{protocol}\"\n{reads}\
         fabric = \"shm\"\nrun_dir = \"{}\"\nreplicas = {replicas}\nmode = \"direct\"\n\n[log]\n\
         slots = {}\nslot_bytes = {}\n{log_tail}{ukharon}",
        run_dir.display(),
        log.slots,
        log.slot_bytes
    )
}

fn external_app_line(app: ExternalApp) -> &'static str {
    match app {
        ExternalApp::Redis => "app = \"redis\"\n",
        ExternalApp::Memcached => "app = \"memcached\"\n",
    }
}

/// The cluster's processes (replicas, and uKharon-KV's coordinators), by id; killed and
/// reaped when dropped.
struct Processes {
    children: BTreeMap<u16, Child>,
    logs: BTreeMap<u16, PathBuf>,
}

impl Processes {
    fn spawn(config_path: &Path, config: &ClusterConfig) -> Result<Processes, String> {
        let exe = std::env::current_exe().map_err(|e| format!("finding the mu binary: {e}"))?;
        let mut p = Processes { children: BTreeMap::new(), logs: BTreeMap::new() };
        for id in config.processes() {
            let log_path = config.log_path(id);
            let log = std::fs::File::create(&log_path)
                .map_err(|e| format!("creating {}: {e}", log_path.display()))?;
            let err = log.try_clone().map_err(|e| format!("log file: {e}"))?;
            let mut cmd = Command::new(&exe);
            cmd.arg("replica")
                .arg("--config")
                .arg(config_path)
                .arg("--id")
                .arg(id.to_string())
                .arg("--parent")
                .arg(std::process::id().to_string())
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err);
            // Own process group: the terminal's Ctrl-C reaches only the demo, which stops them.
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
            let child = cmd.spawn().map_err(|e| format!("starting replica {id}: {e}"))?;
            p.children.insert(id, child);
            p.logs.insert(id, log_path);
            if config.is_ukharon_kv() && config.replicas.contains(&id) {
                let check = || p.check_alive().and_then(|()| interrupt::check());
                crate::ukharon_kv::wait_serving(config, id, START_WAIT, check)?;
            }
        }
        Ok(p)
    }

    fn kill(&mut self, id: u16) -> Result<(), String> {
        let mut child = self.children.remove(&id).ok_or("already gone")?;
        child.kill().map_err(|e| format!("killing replica {id}: {e}"))?;
        let _ = child.wait();
        Ok(())
    }

    fn signal(&self, id: u16, signal: libc::c_int) -> Result<(), String> {
        let child = self.children.get(&id).ok_or(format!("no process {id}"))?;
        mu_procs::child::signal(child, signal).map_err(|e| format!("signal to {id}: {e}"))
    }

    /// Fails if a process we did not kill has exited, with the end of its log.
    fn check_alive(&mut self) -> Result<(), String> {
        let exited = self
            .children
            .iter_mut()
            .find_map(|(&id, child)| child.try_wait().ok().flatten().map(|status| (id, status)));
        let Some((id, status)) = exited else { return Ok(()) };
        self.children.remove(&id);
        let log = std::fs::read_to_string(&self.logs[&id]).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Err(format!(
            "replica {id} exited unexpectedly ({status}); its last output:\n  {}",
            tail.join("\n  ")
        ))
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for child in self.children.values_mut() {
            let _ = mu_procs::child::signal(child, libc::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of file is a valid cluster file, each with what only its kind has.
    #[test]
    fn every_kind_of_cluster_file_parses() {
        let log = LogShape { slots: 256, slot_bytes: 1024 };
        let dir = Path::new("/nonexistent/run");
        for engine in [mu_replica::Protocol::Mu, mu_replica::Protocol::Velos] {
            let text = cluster_file("test", dir, &log, Kind::Replicated(engine));
            let c = ClusterConfig::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(c.protocol(), Ok(engine), "{text}");
            assert_eq!(c.replicas, [0, 1, 2]);
            assert!(!c.has_group() && c.ukharon.is_none(), "{text}");
            assert_eq!(c.mode(), mu_replica::Mode::Direct);
            let text = cluster_file("test", dir, &log, Kind::Leased(engine));
            let c = ClusterConfig::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(c.protocol(), Ok(engine), "{text}");
            assert_eq!(c.reads(), Ok(mu_service::config::Reads::Lease), "{text}");
            assert_eq!(c.processes(), [0, 1, 2, 3, 4, 5], "{text}");
            crate::ukharon_kv_group::group(&c).expect("a valid [ukharon] section");
            let text = cluster_file("test", dir, &log, Kind::Orderbook(engine));
            let c = ClusterConfig::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(c.app(), Ok(mu_service::App::Orderbook), "{text}");
            assert_eq!(c.protocol(), Ok(engine), "{text}");
        }
        for app in [ExternalApp::Redis, ExternalApp::Memcached] {
            // As `mu demo --app` starts it (TCP addresses), and as `mu bench e2e` does (Unix
            // sockets only; three replicas, or one).
            for (alone, tcp) in [(false, true), (false, false), (true, false)] {
                let kind = Kind::External(mu_replica::Protocol::Velos, app, alone);
                let addresses = if tcp { loopback_addresses().unwrap() } else { String::new() };
                let text = cluster_file("test", dir, &log, kind) + &addresses;
                let c = ClusterConfig::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
                assert_eq!(c.is_redis(), app == ExternalApp::Redis, "{text}");
                assert_eq!(c.is_memcached(), app == ExternalApp::Memcached, "{text}");
                assert_eq!(c.protocol(), Ok(mu_replica::Protocol::Velos), "{text}");
                let replicas: &[u16] = if alone { &[0] } else { &[0, 1, 2] };
                assert_eq!(c.replicas, replicas, "{text}");
                let addresses = c.client_addresses().unwrap().map(|a| a.len());
                assert_eq!(addresses, tcp.then_some(3), "{text}");
            }
        }
        let text = cluster_file("test", dir, &log, Kind::UkharonKv);
        let c = ClusterConfig::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(c.is_ukharon_kv(), "{text}");
        assert_eq!(c.replicas, [3, 4, 5]);
        assert_eq!(c.coordinators(), Ok(vec![0, 1, 2]));
        assert_eq!(c.snapshot_bytes(), 16_777_216);
        let group = crate::ukharon_kv_group::group(&c).expect("a valid [ukharon] section");
        assert_eq!(group.poll_gap_ns, 200_000);
        assert_eq!(c.run_dir, dir);
    }
}
