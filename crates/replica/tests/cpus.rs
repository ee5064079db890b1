//! `ReplicaConfig::cpus`: a replica's replication and background threads run pinned to the CPUs
//! asked for, and a CPU the kernel refuses, or two dedicated threads on one CPU, fail the start
//! with a message that says why. One replica alone, in this process, on the shared-memory
//! fabric: the threads are found by name in /proc/self/task and their affinity read there, as
//! the kernel reports it.

mod common;

use mu_fabric::NodeId;
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_replica::{Mode, Replica, ReplicaConfig, StartError, ThreadCpus, Threads};
use std::path::Path;
use std::time::{Duration, Instant};

const CLUSTER_ID: u64 = 0x6d75_6370;

/// The tests find threads by name, and every replica here is node 0: one test at a time.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn start(
    dir: &Path,
    mode: Mode,
    threads: Threads,
    cpus: ThreadCpus,
) -> Result<Replica, StartError> {
    let fabric = ShmFabric::create(ShmConfig::new(dir, CLUSTER_ID, NodeId(0))).expect("fabric");
    let mut config = ReplicaConfig::new(NodeId(0), vec![NodeId(0)]);
    config.slots_count = 64;
    config.slot_bytes = 128;
    config.threads = threads;
    config.cpus = cpus;
    Replica::start(config, fabric, mode, |_, _| {})
}

/// The CPUs the kernel lets the thread of this process named `name` run on, as it lists them
/// (compared with `mu_cpu::cpu_list` of what is expected).
fn thread_cpus(name: &str) -> String {
    let mut found = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let task = task.expect("task").path();
        let Ok(comm) = std::fs::read_to_string(task.join("comm")) else { continue };
        if comm.trim_end() != name {
            continue;
        }
        let status = std::fs::read_to_string(task.join("status")).expect("status");
        let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"));
        found.push(list.expect("Cpus_allowed_list").trim().to_string());
    }
    assert_eq!(found.len(), 1, "threads named {name}: {found:?}");
    found.pop().unwrap()
}

fn propose_until_committed(replica: &Replica) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match replica.propose(b"pinned") {
            Ok(_) => return,
            Err(e) => {
                assert!(Instant::now() < deadline, "no commit within 10 s: {e}");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

#[test]
fn each_thread_runs_on_the_cpu_it_was_given_and_the_replica_works() {
    let _one = one_at_a_time();
    let allowed = mu_cpu::allowed_cpus();
    // The last CPU for the replication thread, the first for the background one: different
    // CPUs where there are two, and the pinning is visible either way against the full set.
    let (repl, bg) = (*allowed.last().unwrap(), allowed[0]);
    for mode in [Mode::Handover, Mode::Direct] {
        let dir = common::fresh_run_dir(&format!("cpus-{mode:?}"));
        let cpus = ThreadCpus { replication: Some(repl), background: Some(bg) };
        let replica = start(&dir, mode, Threads::Shared, cpus).expect("starts pinned");
        assert_eq!(thread_cpus("mu-repl-n0"), mu_cpu::cpu_list(&[repl]), "{mode:?}");
        assert_eq!(thread_cpus("mu-bg-n0"), mu_cpu::cpu_list(&[bg]), "{mode:?}");
        // The thread that started the replica keeps its own set.
        assert_eq!(mu_cpu::allowed_cpus(), allowed);
        propose_until_committed(&replica);
        drop(replica);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn unpinned_threads_keep_the_set_they_inherit() {
    let _one = one_at_a_time();
    let allowed = mu_cpu::allowed_cpus();
    let dir = common::fresh_run_dir("cpus-none");
    let replica = start(&dir, Mode::Handover, Threads::Shared, ThreadCpus::default()).unwrap();
    assert_eq!(thread_cpus("mu-repl-n0"), mu_cpu::cpu_list(&allowed));
    assert_eq!(thread_cpus("mu-bg-n0"), mu_cpu::cpu_list(&allowed));
    drop(replica);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn refused_cpus_fail_the_start_and_say_why() {
    let _one = one_at_a_time();
    let allowed = mu_cpu::allowed_cpus();
    let listed = mu_cpu::cpu_list(&allowed);
    // A CPU no kernel has (beyond CPU_SETSIZE), then one past this process's set.
    for (cpus, says) in [
        (ThreadCpus { replication: Some(1 << 20), background: None }, "does not exist"),
        (
            ThreadCpus { replication: None, background: Some(allowed.last().unwrap() + 1) },
            "pinning",
        ),
    ] {
        let dir = common::fresh_run_dir("cpus-refused");
        let e = start(&dir, Mode::Handover, Threads::Shared, cpus).err().expect("refused");
        let text = e.to_string();
        assert!(matches!(e, StartError::Config(_)), "{text}");
        assert!(text.contains(says) && text.contains(&listed), "{text}");
        // Nothing was left running: no thread of that name remains.
        for name in ["mu-repl-n0", "mu-bg-n0"] {
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::fs::read_dir("/proc/self/task").unwrap().any(|t| {
                std::fs::read_to_string(t.unwrap().path().join("comm"))
                    .is_ok_and(|c| c.trim_end() == name)
            }) {
                assert!(Instant::now() < deadline, "{name} still runs after a refused start");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    // Two spinning threads on one CPU: refused before anything starts.
    let same = ThreadCpus { replication: Some(allowed[0]), background: Some(allowed[0]) };
    let dir = common::fresh_run_dir("cpus-same");
    let e = start(&dir, Mode::Handover, Threads::Dedicated, same).err().expect("refused");
    assert!(e.to_string().contains("a CPU of its own"), "{e}");
    // The same pair is fine for threads that back off.
    let replica = start(&dir, Mode::Handover, Threads::Shared, same).expect("shared threads");
    propose_until_committed(&replica);
    drop(replica);
    let _ = std::fs::remove_dir_all(&dir);
}
