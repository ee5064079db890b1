//! Every `mu bench` command, and the replica and peer processes they start.

#[macro_use]
extern crate mu_procs;

pub mod all;
pub mod app_servers;
pub mod cluster;
pub mod e2e;
pub mod e2e_apps;
pub mod fabric;
pub mod failover;
pub mod kv_fig5;
pub mod kv_ops;
pub mod local_server;
pub mod measure;
#[cfg(feature = "ofi")]
pub mod ofi;
#[cfg(feature = "ofi")]
pub mod ofi_loopback;
pub mod order_ops;
pub mod payload;
pub mod peers;
pub mod relay;
pub mod replica_child;
pub mod replication;
pub mod sim_rdma;
pub mod suite;
pub mod targets;
pub mod throughput;
pub mod ukharon;
pub mod words;

use mu_procs::{counts, interrupt};

/// The `mu bench` commands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// One-sided operation round trips on the shared-memory fabric, beside a bare cache-line
    /// ping-pong: the floor every later latency figure is divided by.
    Fabric(crate::fabric::Args),
    /// Propose latency on the leader of three replicas on the shared-memory fabric, standalone,
    /// over payloads of 32 to 4096 bytes, beside the fabric's write2 round trip.
    Replication(crate::replication::Args),
    /// Failover time under load: the leader is killed (SIGKILL) or stopped (SIGSTOP) again and
    /// again; total, detection and permission-switch times per failover.
    ///
    /// In kill mode every failover runs on a fresh three-replica cluster: a killed replica could
    /// rejoin only by a state transfer, which the benchmark's replicas (a commit handler, no
    /// state machine that takes snapshots) cannot serve. In pause mode one cluster serves all
    /// failovers: the stopped leader is continued after the new leader's first commit and, as
    /// the lowest id, leads again (a fail-back, reported apart).
    Failover(crate::failover::Args),
    /// Replication latency against payload size, standalone and attached to the key-value
    /// store, direct and handover mode (Mu paper Fig. 3).
    Payload(crate::payload::Args),
    /// Mu's replication latency beside Redis (WAIT), etcd, openraft and Aeron Cluster, measured
    /// in the same run on this machine (Mu paper Fig. 4). Installs nothing: run
    /// scripts/install-peers.sh.
    Peers(crate::peers::Args),
    /// Throughput against latency for 1 to 8 outstanding entries and 1 to 128 requests per
    /// entry, 64-byte requests (Mu paper Fig. 7).
    Throughput(crate::throughput::Args),
    /// Every benchmark of the suite into one output directory (payload, peers, e2e, failover
    /// in kill and pause mode, throughput); `--quick` for a smoke run of a few minutes.
    All(crate::all::Args),
    /// Key-value operations end to end through the client library (Mu paper Fig. 5): the
    /// client transport alone, an unreplicated server, and the replicated service.
    E2e(crate::e2e::Args),
    /// The replication and failover targets (replication against the fabric's write2, Velos
    /// against Mu, failover in kill and pause mode, Mu on libfabric), measured on this machine
    /// in one run, each with its verdict.
    Targets(crate::targets::Args),
    /// The uKharon paper's figures on this host: Active beside a clock read, Active true at
    /// once against the lease δ idle and under load, failover time per kind of failure, and
    /// bytes per lease renewal (threads of this process on shm).
    Ukharon(crate::ukharon::Args),
    /// The uKharon paper's Fig. 5: GET and PUT latency through the client library of the bare
    /// store, the store behind `Active` checks, Mu, Velos, both with leased reads, and
    /// uKharon-KV, and failover time of uKharon-KV, Mu and Velos (kill mode, shm), with the
    /// targets as ratios of the same run.
    ///
    /// Every failover runs on a fresh cluster (three replicas; uKharon-KV's three coordinators
    /// besides), killed once: a second kill would leave Mu and Velos without a majority.
    UkharonKv(crate::kv_fig5::Args),
    /// The papers' figures on a simulated RDMA cluster: the production engines in virtual time
    /// on a fabric whose primitives cost what a hardware profile (`spec/profiles/`) says, each
    /// figure beside the paper's (simulated, not measured on hardware).
    Sim(crate::sim_rdma::Args),
}

/// Runs one `mu bench` command.
pub fn run(command: Command) -> Result<(), String> {
    match command {
        Command::Fabric(args) => fabric::run(args),
        Command::Replication(args) => replication::run(args),
        Command::Failover(args) => failover::run(args),
        Command::E2e(args) => e2e::run(args),
        Command::All(args) => all::run(args),
        Command::Throughput(args) => throughput::run(args),
        Command::Payload(args) => payload::run(args),
        Command::Peers(args) => peers::run(args),
        Command::Targets(args) => targets::run(args),
        Command::Ukharon(args) => ukharon::run(args),
        Command::UkharonKv(args) => kv_fig5::run(args),
        Command::Sim(args) => sim_rdma::run(args),
    }
}
