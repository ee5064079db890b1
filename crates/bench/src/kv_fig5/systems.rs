//! The systems `mu bench ukharon-kv` measures: each one enum value and its start function.

use crate::local_server::{Answering, LeaseCheck, LocalServer};
use crate::ukharon::group::{Group, Timings};
use mu_daemon::kv_cluster::{KvCluster, LogShape};
use mu_service::Client;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The run directory tag of every cluster and server the benchmark starts (one at a time).
pub const TAG: &str = "ukharon-kv";
/// How long a Mu or Velos cluster may take to agree on a leader.
const LEADER_WAIT: Duration = Duration::from_secs(10);
/// How long the in-process uKharon group may take to make its member active.
const GROUP_WAIT: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum System {
    /// A server thread that answers at once with a canned reply: the client transport alone.
    Transport,
    /// The same thread applying each request to a key-value store: the bare store.
    Unreplicated,
    /// The bare store with `Active(view)` checked before and after each request, the lease held
    /// by a member of an in-process uKharon group (three coordinators and the member, threads).
    ActiveChecked,
    /// Three `mu replica` processes running Mu: every request, GETs included, through the log.
    Mu,
    /// The same with Velos.
    Velos,
    /// Three Mu replica processes with leased reads (`reads = "lease"`) beside three uKharon
    /// coordinators: PUTs through the log, GETs from the appointed leader's store.
    MuLease,
    /// The same with Velos.
    VelosLease,
    /// Three uKharon-KV replica processes and three coordinator processes: PUTs written to
    /// the backups, GETs answered by the primary under `Active`.
    UkharonKv,
}

impl System {
    /// The systems whose GETs and PUTs are timed, in the order they are shown.
    pub const LATENCY: [System; 8] = [
        System::Transport,
        System::Unreplicated,
        System::ActiveChecked,
        System::Mu,
        System::Velos,
        System::MuLease,
        System::VelosLease,
        System::UkharonKv,
    ];

    /// The systems whose failovers are timed.
    pub const FAILOVER: [System; 3] = [System::UkharonKv, System::Mu, System::Velos];

    pub fn name(self) -> &'static str {
        match self {
            System::Transport => "transport",
            System::Unreplicated => "unreplicated",
            System::ActiveChecked => "active-checked",
            System::Mu => "mu",
            System::Velos => "velos",
            System::MuLease => "mu-lease",
            System::VelosLease => "velos-lease",
            System::UkharonKv => "ukharon-kv",
        }
    }

    /// Starts the system for `payload`-byte values and waits until it serves.
    pub fn start(self, payload: u32) -> Result<Served, String> {
        let running = match self {
            System::Transport => Running::Local(LocalServer::start(TAG, Answering::Canned)?),
            System::Unreplicated => Running::Local(LocalServer::start(TAG, Answering::Store)?),
            System::ActiveChecked => start_under_lease()?,
            System::Mu
            | System::Velos
            | System::MuLease
            | System::VelosLease
            | System::UkharonKv => Running::Cluster(Box::new(self.start_cluster(payload)?)),
        };
        let client = match &running {
            Running::Local(server) | Running::UnderLease { server, .. } => server.client()?,
            Running::Cluster(cluster) => cluster.client()?,
        };
        Ok(Served { client, running })
    }

    /// A fresh cluster of replica processes for `payload`-byte values, serving: for the
    /// systems that replicate; an error for the others.
    pub fn start_cluster(self, payload: u32) -> Result<KvCluster, String> {
        let (protocol, leased) = match self {
            System::Mu => (mu_replica::Protocol::Mu, false),
            System::Velos => (mu_replica::Protocol::Velos, false),
            System::MuLease => (mu_replica::Protocol::Mu, true),
            System::VelosLease => (mu_replica::Protocol::Velos, true),
            System::UkharonKv => {
                // The ring of records a backup has not applied yet: a few hundred is plenty
                // for one client (as `mu demo` has it).
                let slot_bytes = (payload + 256).next_multiple_of(8).max(1024);
                let mut cluster =
                    KvCluster::start_ukharon_kv(TAG, LogShape { slots: 256, slot_bytes })?;
                // Already serving (the start waits for each replica); this names the primary.
                cluster.wait_for_leader(LEADER_WAIT)?;
                return Ok(cluster);
            }
            other => return Err(format!("{} has no replica processes", other.name())),
        };
        let shape = LogShape { slots: 16_384, slot_bytes: (payload + 256).next_multiple_of(8) };
        let mut cluster = match leased {
            true => KvCluster::start_leased(TAG, shape, protocol)?,
            false => KvCluster::start(TAG, shape, protocol)?,
        };
        cluster.wait_for_leader(LEADER_WAIT)?;
        Ok(cluster)
    }
}

/// A system serving, and a client of it.
pub struct Served {
    pub client: Client,
    running: Running,
}

/// What keeps a system serving; fields drop in order (a server thread before its group).
enum Running {
    Local(LocalServer),
    UnderLease { server: LocalServer, _group: Group, inactive: Arc<AtomicU64> },
    Cluster(Box<KvCluster>),
}

impl Served {
    /// Stops the system; fails if a replica process died while it was measured. Returns how
    /// many requests found the view inactive (active-checked only; 0 for the others).
    pub fn stop(self) -> Result<u64, String> {
        match self.running {
            Running::Local(_) => Ok(0),
            Running::UnderLease { inactive, .. } => Ok(inactive.load(Ordering::Relaxed)),
            Running::Cluster(mut cluster) => cluster.check_alive().map(|()| 0),
        }
    }
}

/// The store behind `Active` checks: an in-process uKharon group with one member (uKharon's
/// host timings: 3 ms leases renewed 1.5 ms before their end), the server reading the member's
/// lease on the view that admitted it.
fn start_under_lease() -> Result<Running, String> {
    let group = Group::start(Timings::host(), 0, 1)?;
    let (view, _) = group.converge(GROUP_WAIT)?;
    let member = group.live().next().ok_or("the uKharon group has no member")?;
    let inactive = Arc::new(AtomicU64::new(0));
    let check =
        LeaseCheck { lease: member.published(), epoch: view.epoch, inactive: inactive.clone() };
    let server = LocalServer::start(TAG, Answering::StoreUnderLease(check))?;
    Ok(Running::UnderLease { server, _group: group, inactive })
}
