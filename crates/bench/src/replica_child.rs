//! `mu bench-replica`: one replica process of `mu bench replication` or `mu bench failover`,
//! started by the benchmark itself.
//!
//! It runs a [`Replica`] on the shared-memory fabric with a commit handler that publishes how far
//! it has applied, and does nothing else (standalone, as in the Mu paper §7.1) or first applies
//! the entry to a key-value store (`--app kv`, attached); and, if asked to, proposes values
//! of a given size in a loop whenever it leads. It publishes what the benchmark needs in its
//! words file ([`crate::words::SharedWords`]) and runs until the benchmark kills it (or exits: it dies
//! with it).

use crate::cluster::{self, App, ClockMap, FabricChoice, ReplicaMode, ThreadsChoice};
use crate::words::{self, Words};
use mu_fabric::NodeId;
use mu_replica::{ProposeError, ReplicaConfig, ReplicaStatus};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often the replica's status is written to `status-<node>.txt` in the run directory.
const STATUS_PERIOD: Duration = Duration::from_millis(50);

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    run_dir: PathBuf,
    /// The words file the benchmark created for this process.
    #[arg(long)]
    words: PathBuf,
    #[arg(long)]
    node: u16,
    #[arg(long)]
    replicas: u16,
    #[arg(long, value_enum)]
    mode: ReplicaMode,
    #[arg(long)]
    slots: u64,
    #[arg(long)]
    slot_bytes: u32,
    /// Bytes of the values proposed whenever this replica leads; 0: never propose.
    #[arg(long)]
    propose_bytes: usize,
    /// The failure detector's read period (default: `ReplicaConfig`'s).
    #[arg(long)]
    read_period_us: Option<u64>,
    /// What the commit handler does with each entry.
    #[arg(long, value_enum, default_value_t = App::Standalone)]
    app: App,
    /// The benchmark's pid: this process dies with it.
    #[arg(long)]
    parent: u32,
    /// The replication engine.
    #[arg(long, default_value = "mu")]
    protocol: mu_replica::Protocol,
    /// The fabric: shm, or ofi (with --ofi-base-port, the benchmark's block of ports).
    #[arg(long, default_value = "shm")]
    fabric: String,
    #[arg(long)]
    ofi_base_port: Option<u16>,
    /// The ofi provider [default: sockets].
    #[arg(long)]
    ofi_provider: Option<String>,
    /// How the replica's threads wait when idle; with `dedicated`, this process also waits for
    /// leadership by spinning.
    #[arg(long, value_enum, default_value_t = ThreadsChoice::Shared)]
    threads: ThreadsChoice,
    /// Pin the thread that proposes (this process's main thread) to this CPU.
    #[arg(long)]
    proposer_cpu: Option<usize>,
    /// Pin the replica's replication thread to this CPU.
    #[arg(long)]
    replication_cpu: Option<usize>,
    /// Pin the replica's background thread to this CPU.
    #[arg(long)]
    background_cpu: Option<usize>,
}

impl Args {
    /// Where this process's threads are to run.
    pub(crate) fn cpus(&self) -> cluster::NodeCpus {
        cluster::NodeCpus {
            proposer: self.proposer_cpu,
            replica: mu_replica::ThreadCpus {
                replication: self.replication_cpu,
                background: self.background_cpu,
            },
        }
    }
}

/// The replica configuration of the benchmarks: `ReplicaConfig::new`'s defaults but for the log's
/// shape, the threads' waiting and, where given, the read period.
pub fn config(
    me: u16,
    replicas: u16,
    (slots_count, slot_bytes): (u64, u32),
    read_period_us: Option<u64>,
    threads: ThreadsChoice,
    protocol: mu_replica::Protocol,
) -> ReplicaConfig {
    let mut c = ReplicaConfig::new(NodeId(me), (0..replicas).map(NodeId).collect());
    c.protocol = protocol;
    c.threads = threads.threads();
    c.slots_count = slots_count;
    c.slot_bytes = slot_bytes;
    if let Some(us) = read_period_us {
        c.detector.read_period_ns = us.saturating_mul(1000);
    }
    c
}

pub fn run(args: Args) -> Result<(), String> {
    mu_procs::parent::die_with_parent(args.parent)?;
    let me = args.node;
    let words = std::sync::Arc::new(Words::open(&args.words)?);
    // The server, if any, lives as long as this process runs its replica.
    let (replica, _server) = start(&args, &words)?;
    let clock = ClockMap::sample();
    let started_at = replica.started_at();
    // Status times count from the replica's start; the benchmark compares them across processes.
    let to_monotonic =
        |ns_since_start: u64| clock.monotonic_ns(started_at + Duration::from_nanos(ns_since_start));
    words.started.set(1);
    let leader_changes = replica.watch_leader();
    let mut value = Vec::new();
    // The readiness time of the term whose first commit was published; `None` outside a term.
    let mut term: Option<Option<u64>> = None;
    let mut proposals: u64 = 0;
    // The engine's abort count when this replica last stopped being the elected leader (or at
    // start): a term's set-up aborts are those after it. A leadership that never committed
    // counts too (at a cluster's start, replica 1 may lead before replica 0 is up, and abort
    // when 0 takes over). Read when leadership moves away from us, off the failover path.
    let mut aborts_base = replica.status().aborts;
    let mut was_elected = false;
    let status_path = args.run_dir.join(format!("status-{me}.txt"));
    let mut status_written = Instant::now();
    loop {
        // The replica's own status, for the benchmark's error messages.
        if status_written.elapsed() >= STATUS_PERIOD {
            status_written = Instant::now();
            let _ = std::fs::write(&status_path, format!("{:?}", replica.status()));
        }
        let leader = replica.leader();
        words.leader_seen.set(leader.map_or(0, |l| u64::from(l.0) + 1));
        let go = words.go.get();
        let elected = leader == Some(NodeId(me));
        if was_elected && !elected {
            aborts_base = replica.status().aborts;
        }
        was_elected = elected;
        if args.propose_bytes == 0 || !elected || go == words::GO_WAIT {
            term = None;
            if args.threads == ThreadsChoice::Dedicated && args.propose_bytes > 0 {
                // A core of its own: a wake-up from sleep would be part of every failover.
                while leader_changes.try_recv().is_ok() {}
                std::hint::spin_loop();
                continue;
            }
            // Woken at once by a leader change; the timeout only refreshes LEADER_SEEN.
            let _ = leader_changes.recv_timeout(Duration::from_millis(5));
            while leader_changes.try_recv().is_ok() {}
            continue;
        }
        proposals += 1;
        args.app.value(args.propose_bytes, proposals, &mut value);
        match replica.propose(&value) {
            Ok(_) => {
                let now_ns = cluster::monotonic_ns();
                let status = replica.status();
                // A new term: the first commit since this replica became (or became again)
                // leader. The engine dates its readiness anew after every set-up, also when the
                // detector's choice did not change (a leader stopped and continued).
                if term != Some(status.ready_at_ns) {
                    publish_term(&words, &status, now_ns, aborts_base, &to_monotonic);
                    term = Some(status.ready_at_ns);
                }
                // A leader stopped and continued may go on in its term (Velos: its next CAS
                // fails, and it prepares again without stepping down): the pause dates its
                // return instead.
                record_commit(&words, now_ns);
                if go == words::GO_SLOW {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            Err(ProposeError::NotLeader { .. } | ProposeError::Aborted) => {
                // Leadership moved while proposing: expected around a failover.
                term = None;
                words.lost_proposals.add(1);
            }
            Err(ProposeError::LogFull { .. }) => {
                // A live follower is slow (on a loaded machine, its threads wait for a CPU): the
                // leader overwrites nothing and waits. The benchmark's own timeouts catch a
                // follower that never catches up.
                words.log_full_waits.add(1);
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(format!("replica {me}: propose failed: {e}")),
        }
    }
}

/// Starts this process's replica as `args` say, its commit handler publishing how far it has
/// applied (with its application's server, if it has one), and pins the calling (proposing)
/// thread where they say.
fn start(
    args: &Args,
    words: &std::sync::Arc<Words>,
) -> Result<(mu_replica::Replica, Option<crate::app_servers::Server>), String> {
    let me = args.node;
    let fabric = match (args.fabric.as_str(), args.ofi_base_port) {
        ("shm", _) => FabricChoice::Shm,
        #[cfg(feature = "ofi")]
        ("ofi", Some(base_port)) => FabricChoice::Ofi {
            base_port,
            provider: crate::ofi_loopback::provider(args.ofi_provider.as_deref())?,
        },
        (other, _) => return Err(format!("replica {me}: fabric {other:?} without its ports")),
    };
    let mut config = config(
        me,
        args.replicas,
        (args.slots, args.slot_bytes),
        args.read_period_us,
        args.threads,
        args.protocol,
    );
    let cpus = args.cpus();
    config.cpus = cpus.replica;
    // The commit handler only says how far this replica has applied (a follower more than a log
    // behind needs a state transfer, which a replica without snapshots cannot have).
    let applied = words.clone();
    let leads = args.propose_bytes > 0;
    let (on_commit, server) =
        args.app.attach(&args.run_dir, me, leads, move |index| applied.applied.set(index + 1))?;
    let replica = fabric.start_replica(&args.run_dir, config, args.mode.mode(), on_commit)?;
    // Once the replica's threads run: they would inherit this thread's CPU.
    if let Some(cpu) = cpus.proposer {
        mu_cpu::pin_to(cpu).map_err(|e| format!("replica {me}: the proposing thread: {e}"))?;
    }
    Ok((replica, server))
}

/// Publishes a commit at `now_ns`, and a resume if it came long after the one before.
fn record_commit(words: &Words, now_ns: u64) {
    let last_ns = words.last_commit_ns.get();
    if last_ns != 0 && now_ns.saturating_sub(last_ns) > words::RESUME_GAP_NS {
        words.resumed_ns.set(now_ns);
        words.resumes.add(1);
    }
    words.last_commit_ns.set(now_ns);
    words.commits.add(1);
}

fn publish_term(
    words: &Words,
    status: &ReplicaStatus,
    first_commit_ns: u64,
    aborts_base: u64,
    to_monotonic: &impl Fn(u64) -> u64,
) {
    words.first_commit_ns.set(first_commit_ns);
    let aborts = status.aborts.saturating_sub(aborts_base);
    words.setup_aborts.set(aborts);
    let last = if aborts > 0 { status.last_abort } else { None };
    words.last_abort_kind.set(words::abort_kind(last));
    words.elected_ns.set(status.elected_at_ns.map_or(0, to_monotonic));
    words.ready_ns.set(status.ready_at_ns.map_or(0, to_monotonic));
    words.permitted_ns.set(status.permitted_at_ns.map_or(0, to_monotonic));
    for phase in mu_replication::Phase::ALL {
        let at = status.phases_entered_at_ns.iter().find(|(p, _)| *p == phase);
        words.phases_ns[phase as usize].set(at.map_or(0, |(_, ns)| to_monotonic(*ns)));
    }
    for phase in mu_replication::Phase::ALL {
        let busy = status.phases_busy_ns.iter().find(|(p, _, _)| *p == phase);
        let (ns, polls) = busy.map_or((0, 0), |&(_, ns, polls)| (ns, polls));
        words.phase_busy_ns[phase as usize].set(ns);
        words.phase_polls[phase as usize].set(polls);
    }
    words.velos_busy_ns.set(status.velos_busy_ns.0);
    words.setup_polls_len.set(status.setup_polls.len() as u64);
    for (i, poll) in status.setup_polls.iter().enumerate() {
        let [figures, idle] = poll.pack();
        words.setup_polls[i][0].set(to_monotonic(poll.start_ns));
        words.setup_polls[i][1].set(figures);
        words.setup_polls[i][2].set(idle);
    }
    words.velos_polls.set(status.velos_busy_ns.1);
    for step in mu_replica::VelosStep::ALL {
        let at = status.velos_steps_at_ns.iter().find(|(s, _)| *s == step);
        words.velos_steps_ns[step as usize].set(at.map_or(0, |(_, ns)| to_monotonic(*ns)));
    }
    words.terms.add(1);
}
