//! `mu replica --config FILE --id N`: one replica of a key-value cluster, serving clients on
//! its Unix socket until SIGINT or SIGTERM.

use crate::cluster_cmd::{inspect_pid_file, PidFile};
use crate::interrupt;
use mu_fabric::NodeId;
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_replica::Replica;
use mu_service::{ClusterConfig, Server, SharedMachine};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// The cluster's configuration file (TOML).
    #[arg(long)]
    config: PathBuf,
    /// This replica's id (one of the configuration's `replicas`).
    #[arg(long)]
    id: u16,
    /// This replica restarts after losing its log: it rejoins as recovering (it is not counted
    /// in a leader's majority until that leader has prepared without it) and gets the others'
    /// state. Required after a crash; starting such a replica as new could decide a second
    /// value where its lost log had helped choose one.
    #[arg(long)]
    rejoin: bool,
    /// Die with this process (used by `mu demo`).
    #[arg(long, hide = true)]
    parent: Option<u32>,
}

pub fn run(args: Args) -> Result<(), String> {
    interrupt::catch();
    if let Some(parent) = args.parent {
        crate::cluster::die_with_parent(parent)?;
    }
    let config = ClusterConfig::load(&args.config)?;
    config.prepare_run_dir()?;
    let mut replica_config = config.replica_config(args.id)?;
    replica_config.eligible = !args.rejoin;
    let pid_path = config.pid_path(args.id);
    // The same check `mu cluster` makes: a pid reused by another program is not "running".
    if let PidFile::Running(target) = inspect_pid_file(&config, args.id)? {
        return Err(format!(
            "replica {} already runs (pid {} in {})",
            args.id,
            target.pid,
            pid_path.display()
        ));
    }
    let shm = ShmConfig::new(&config.run_dir, config.cluster_id, NodeId(args.id))
        .with_protocol(mu_replica::protocol_tag());
    let fabric = ShmFabric::create(shm).map_err(|e| format!("replica {}: fabric: {e}", args.id))?;
    let machine = SharedMachine::new();
    let started = Instant::now();
    let replica = Replica::start_with_state(replica_config, fabric, config.mode(), machine.clone())
        .map_err(|e| format!("replica {}: {e}", args.id))?;
    let replica = Arc::new(replica);
    let socket = config.socket_path(args.id);
    let server =
        Server::start(config.cluster_id, replica.clone(), machine.clone(), &socket, started)?;
    if let Some(base) = config.metrics.port_base {
        let port = base.checked_add(args.id).ok_or("metrics.port_base + id is above 65535")?;
        let sources = mu_service::metrics::Sources {
            replica: replica.clone(),
            machine,
            counters: server.counters.clone(),
            started,
            slots_count: config.log.slots,
        };
        let addr = mu_service::metrics::serve(port, sources)?;
        eprintln!("mu replica {}: metrics on http://{addr}/metrics", args.id);
    }
    std::fs::write(&pid_path, format!("{}\n", std::process::id()))
        .map_err(|e| format!("writing {}: {e}", pid_path.display()))?;
    eprintln!(
        "mu replica {} of cluster {}: serving on {} (pid {})",
        args.id,
        config.cluster_id,
        socket.display(),
        std::process::id()
    );
    let mut leader = None;
    while interrupt::check().is_ok() {
        std::thread::sleep(Duration::from_millis(20));
        let now = replica.leader();
        if now != leader {
            leader = now;
            match now {
                Some(l) => eprintln!("mu replica {}: leader is {l}", args.id),
                None => eprintln!("mu replica {}: no leader", args.id),
            }
        }
    }
    eprintln!("mu replica {}: stopping", args.id);
    drop(server);
    let _ = std::fs::remove_file(&pid_path);
    Ok(())
}
