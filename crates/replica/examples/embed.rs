//! Mu embedded in an application: three replicas of a counter on the shared-memory fabric,
//! here as three threads of one process (in production, one process per replica, each started
//! the same way with its own id).
//!
//! ```sh
//! cargo run --release -p mu-replica --example embed
//! ```
//!
//! What it shows, in order: a private run directory on tmpfs for the fabric's files; a fabric
//! node and a `ReplicaConfig` per replica, alike on every replica but for `me`; a
//! `StateMachine` (a commit handler with snapshots, so that a replica that falls behind can be
//! brought back); waiting for a leader; proposing on the leader and handling `NotLeader`;
//! every replica applying the same entries in the same order; shutting down.

use mu_fabric::NodeId;
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_replica::{Mode, ProposeError, Replica, ReplicaConfig, StateMachine};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Any number the replicas of one cluster share; nodes of another cluster are refused.
const CLUSTER_ID: u64 = 0x6578_616d;
const REPLICAS: u16 = 3;
const PROPOSALS: u64 = 1_000;

/// The replicated state: a sum of the values applied, and how many there were. Shared with the
/// example's main thread only to print and compare it.
#[derive(Default)]
struct Counter {
    sum: u64,
    applied: u64,
}

/// The state machine a replica drives: `apply` runs on every replica, in log order.
struct Replicated(Arc<Mutex<Counter>>);

impl StateMachine for Replicated {
    fn apply(&mut self, _index: u64, request: &[u8]) {
        let value = u64::from_le_bytes(request.try_into().expect("8-byte requests"));
        let mut counter = self.0.lock().unwrap();
        counter.sum += value;
        counter.applied += 1;
    }

    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        let counter = self.0.lock().unwrap();
        out.extend_from_slice(&counter.sum.to_le_bytes());
        out.extend_from_slice(&counter.applied.to_le_bytes());
        Ok(())
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let words: Vec<u64> =
            snapshot.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().unwrap())).collect();
        let [sum, applied] = words[..] else {
            return Err(format!("a snapshot of {} bytes, not 16", snapshot.len()));
        };
        *self.0.lock().unwrap() = Counter { sum, applied };
        Ok(())
    }
}

/// Starts replica `me`: its fabric node in `run_dir`, then the replica on it.
fn start(run_dir: &Path, me: u16, counter: Arc<Mutex<Counter>>) -> Result<Replica, String> {
    let config = {
        let ids = (0..REPLICAS).map(NodeId).collect();
        let mut c = ReplicaConfig::new(NodeId(me), ids);
        c.slots_count = 4096; // the log goes round; every replica must agree on its shape
        c.slot_bytes = 64; // 24 bytes of framing, room for a request of up to 40
        c
    };
    // The fabric records which protocol the run directory serves: replicas of another build
    // or engine are refused there.
    let shm = ShmConfig::new(run_dir, CLUSTER_ID, NodeId(me)).with_protocol(config.protocol.tag());
    let fabric = ShmFabric::create(shm).map_err(|e| format!("replica {me}: fabric: {e}"))?;
    Replica::start_with_state(config, fabric, Mode::Direct, Replicated(counter))
        .map_err(|e| format!("replica {me}: {e}"))
}

fn main() -> Result<(), String> {
    // Owner-only, and on tmpfs where there is one: the logs are shared memory in files here.
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let run_dir = base.join(format!("mu-example-embed-{}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&run_dir)
        .map_err(|e| format!("creating {}: {e}", run_dir.display()))?;
    let outcome = run(&run_dir);
    let _ = std::fs::remove_dir_all(&run_dir);
    outcome
}

fn run(run_dir: &Path) -> Result<(), String> {
    let counters: Vec<Arc<Mutex<Counter>>> = (0..REPLICAS).map(|_| Arc::default()).collect();
    let replicas = (0..REPLICAS)
        .map(|me| start(run_dir, me, counters[me as usize].clone()))
        .collect::<Result<Vec<Replica>, String>>()?;

    // The lowest id a majority hears leads; wait until replica 0 sees a leader.
    let started = Instant::now();
    let leader = loop {
        if let Some(leader) = replicas[0].leader() {
            break leader;
        }
        if started.elapsed() > Duration::from_secs(10) {
            return Err("no leader within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    println!("replica {} leads ({} ms after start)", leader.0, started.elapsed().as_millis());

    // Propose on the leader. A replica that does not lead names the one it believes does; a
    // proposal cut short by a leader change may or may not be committed (an application with
    // clients resends it under the same client sequence number, and applies it once).
    let mut at = leader;
    let mut expected_sum = 0;
    let began = Instant::now();
    for value in 1..=PROPOSALS {
        loop {
            match replicas[at.0 as usize].propose(&value.to_le_bytes()) {
                Ok(_index) => break,
                Err(ProposeError::NotLeader { leader: Some(l) }) => at = l,
                Err(ProposeError::NotLeader { leader: None }) => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => return Err(format!("proposing {value}: {e}")),
            }
        }
        expected_sum += value;
    }
    // (Replicas that share a process share its caches: time them as separate processes, with
    // `mu bench replication`.)
    println!("{PROPOSALS} proposals committed in {} µs", began.elapsed().as_micros());

    // Every replica applies every committed entry, in log order; followers a moment later.
    let deadline = Instant::now() + Duration::from_secs(10);
    for (me, counter) in counters.iter().enumerate() {
        loop {
            let c = counter.lock().unwrap();
            if c.applied == PROPOSALS {
                if c.sum != expected_sum {
                    return Err(format!("replica {me}: sum {} != {expected_sum}", c.sum));
                }
                println!("replica {me}: applied {} values, sum {}", c.applied, c.sum);
                break;
            }
            drop(c);
            if Instant::now() > deadline {
                return Err(format!("replica {me} did not apply everything within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    // Shutting down stops each replica's threads; dropping a replica does the same.
    for replica in replicas {
        replica.shutdown();
    }
    Ok(())
}
