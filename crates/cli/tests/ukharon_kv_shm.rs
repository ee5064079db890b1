//! uKharon-KV, and Mu and Velos with leased reads, as processes on shm, through the key-value
//! service's front unchanged (`mu cluster up` with `protocol = "ukharon-kv"`, or `reads =
//! "lease"`; five replicas, the client library): clients put and get a few shared keys under
//! load while the view's primary (the appointed leader) is killed (SIGKILL); then the next
//! primary is stopped (SIGSTOP) until a view without it is served, and resumed (SIGCONT); then
//! the primary and the leading coordinator are killed together. A request sent to the stopped
//! primary after the view without it was decided, on a connection it had accepted before, must
//! get no reply (it may only say that it is not the primary, or nothing), and never take
//! effect. Every client recorded what it invoked and was told on the host's
//! `CLOCK_MONOTONIC`, and the whole history, with every key read back at the end, must be
//! linearizable according to `lincheck` (porcupine); the replicas serving the last view end
//! with equal digests.

mod common;

use common::load::Load;
use common::{mu, ok, Setup};
use mu_daemon::ukharon::status::NodeStatus;
use mu_kv::{Op, Reply, Request};
use mu_procs::clock::monotonic_ns;
use mu_service::wire::{read_frame, write_frame, ClientMessage, ServerMessage, WIRE_VERSION};
use mu_service::{Client, ClientError, ClusterConfig, Endpoint, ReplicaReport};
use mu_sim::history::{History, Operation, Outcome};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Five: Mu and Velos need a majority of them after two are killed.
const REPLICAS: [u16; 5] = [3, 4, 5, 6, 7];
const CLIENTS: u64 = 4;
const KEYS: u64 = 6;
const WAIT: Duration = Duration::from_secs(30);
/// How long the clients run between two faults.
const LOAD: Duration = Duration::from_millis(1500);

/// A cluster of `protocol` on `setup`'s run directory (uKharon-KV, or Mu or Velos with leased
/// reads), with the timings of `mu ukharon`'s file for processes that share a few cores.
fn write_config(setup: &Setup, cluster_id: u64, protocol: &str) {
    let (protocol_keys, log_keys) = match protocol {
        "ukharon-kv" => ("protocol = \"ukharon-kv\"".to_string(), "snapshot_bytes = 1_048_576\n"),
        other => (format!("protocol = \"{other}\"\nreads = \"lease\""), ""),
    };
    let text = format!(
        "cluster_id = {cluster_id}\n{protocol_keys}\nrun_dir = \"{}\"\n\
         replicas = {REPLICAS:?}\n[log]\nslots = 256\nslot_bytes = 1024\n\
         {log_keys}[ukharon]\ncoordinators = [0, 1, 2]\n\
         poll_gap_ns = 200_000\nlease_ns = 3_000_000\nring_read_gap_ns = 10_000_000\n\
         beat_period_ns = 10_000_000\nbeat_timeout_ns = 150_000_000\nrepeat_ns = 5_000_000\n\
         backoff_max_ns = 2_000_000\nreconnect_ns = 5_000_000\n[ukharon.lease]\n\
         lease_max_ns = 100_000_000\nrenew_margin_ns = 1_500_000\n",
        setup.run_dir.display()
    );
    std::fs::write(&setup.config, text).expect("config file");
}

fn key(k: u64) -> Vec<u8> {
    format!("k{k}").into_bytes()
}

/// Puts (values unique across the run) and gets on the shared keys. An operation without a
/// reply has an unknown outcome, and its client goes on under a new id (a client's operations
/// are sequential: the unknown one may take effect at any later time).
fn client_loop(
    t: u64,
    cluster_id: u64,
    endpoints: Vec<(u16, Endpoint)>,
    stop: &AtomicBool,
) -> Vec<Operation> {
    let new_client = || {
        let mut c = Client::new(cluster_id, endpoints.clone()).expect("a client");
        c.set_timeout(WAIT);
        c
    };
    let mut client = new_client();
    let mut operations = Vec::new();
    let mut generation = 0;
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ t;
    for n in 0u64.. {
        if stop.load(Ordering::Acquire) {
            break;
        }
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let k = key(state % KEYS);
        let op = if state % 3 == 0 {
            Op::Get { key: k }
        } else {
            Op::Put { key: k, value: format!("c{t}-{n}").into_bytes() }
        };
        let invoke_ns = monotonic_ns();
        let outcome = match client.call(op.clone()) {
            Ok(reply) => Outcome::Returned { at_ns: monotonic_ns(), reply },
            Err(ClientError::Timeout { .. }) => Outcome::Unknown,
            Err(e) => panic!("client {t}: {op:?}: {e}"),
        };
        let unknown = outcome == Outcome::Unknown;
        // The history names clients by small numbers (the library's ids are random u64s).
        operations.push(Operation { client: t * 1_000 + generation, op, invoke_ns, outcome });
        if unknown {
            client = new_client();
            generation += 1;
        }
    }
    operations
}

fn statuses(config: &ClusterConfig) -> Vec<ReplicaReport> {
    let mut client = Client::new(config.cluster_id, config.endpoints()).expect("a client");
    REPLICAS.iter().filter_map(|&id| client.status(id).ok()).collect()
}

/// Polls the replicas' reports until `ready` returns something, or panics after [`WAIT`]
/// saying `what`.
fn wait_for<T>(
    config: &ClusterConfig,
    what: &str,
    mut ready: impl FnMut(&[ReplicaReport]) -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        let reports = statuses(config);
        if let Some(v) = ready(&reports) {
            return v;
        }
        let seen: Vec<String> = reports
            .iter()
            .map(|r| format!("{}: {:?} of {:?}, primary {:?}", r.id, r.role, r.epoch, r.leader))
            .collect();
        assert!(start.elapsed() < WAIT, "no {what} after {WAIT:?}: {}", seen.join("; "));
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The primary every replica in `among` names, and its epoch, once one of them serves as it
/// and the others as its backups in that view.
fn settled(reports: &[ReplicaReport], among: &[u16]) -> Option<(u16, u64)> {
    let serving: Vec<&ReplicaReport> = reports.iter().filter(|r| among.contains(&r.id)).collect();
    let first = serving.first()?;
    let (primary, epoch) = (first.leader?, first.epoch?);
    let agreed = serving.len() == among.len()
        && serving.iter().all(|r| r.leader == Some(primary) && r.epoch == Some(epoch))
        && serving.iter().all(|r| {
            // uKharon-KV's roles, or those of Mu and Velos under leases.
            let roles =
                if r.id == primary { ["primary", "leader"] } else { ["backup", "follower"] };
            r.role.as_deref().is_some_and(|role| roles.contains(&role))
        });
    agreed.then_some((primary, epoch))
}

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status();
    assert!(status.is_ok_and(|s| s.success()), "kill -{signal} {pid}");
}

/// A connection to replica `id` that it has welcomed.
fn welcomed(config: &ClusterConfig, id: u16) -> UnixStream {
    let mut stream = UnixStream::connect(config.socket_path(id)).expect("connect");
    let mut out = Vec::new();
    ClientMessage::Hello { cluster_id: config.cluster_id, wire_version: WIRE_VERSION }
        .encode(&mut out);
    write_frame(&mut stream, &out).expect("hello");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut body = Vec::new();
    assert!(read_frame(&mut stream, &mut body).expect("welcome"));
    assert_eq!(ServerMessage::decode(&body).expect("an answer"), ServerMessage::Welcome);
    stream
}

#[test]
fn failovers_lose_no_answered_write_and_a_stopped_primary_answers_nothing_late() {
    failovers("ukharon-kv", 0x6b76);
}

#[test]
fn mu_with_leased_reads_fails_over_and_a_stopped_leader_answers_nothing_late() {
    failovers("mu", 0x6c6d);
}

#[test]
fn velos_with_leased_reads_fails_over_and_a_stopped_leader_answers_nothing_late() {
    failovers("velos", 0x6c76);
}

/// The runs of this file go one at a time: each is eight processes with busy threads, on a
/// machine that may have two cores (run together, their groups changed views thousands of
/// times and none settled within the wait).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The run of the module docs on a cluster of `protocol`.
fn failovers(protocol: &str, tag: u64) {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let cluster_id = tag << 16 | u64::from(std::process::id() & 0xffff);
    let setup = Setup::new(protocol, cluster_id);
    write_config(&setup, cluster_id, protocol);
    ok(mu(&["cluster", "up", "--config", setup.config(), "--timeout-s", "30"]));
    let config = ClusterConfig::load(&setup.config).expect("the configuration");
    let mut live = REPLICAS.to_vec();
    wait_for(&config, "settled view", |r| settled(r, &live));
    let load = Load::start(CLIENTS, &config, client_loop);
    std::thread::sleep(LOAD);
    kill_primary(&config, &mut live, false);
    std::thread::sleep(LOAD);
    stop_primary(&config, &live);
    std::thread::sleep(LOAD);
    kill_primary(&config, &mut live, true);
    std::thread::sleep(LOAD);
    let mut operations: Vec<Operation> = load.finish().into_iter().flatten().collect();
    if protocol != "ukharon-kv" {
        // Leased reads happened: the last leader answered GETs from its own store.
        let local: u64 = statuses(&config).iter().filter_map(|r| r.local_reads).sum();
        assert!(local > 0, "no GET was answered locally");
        eprintln!("GETs answered locally by the live replicas: {local}");
    }
    operations.extend(read_back(&config, protocol));
    operations.sort_by_key(|o| (o.invoke_ns, o.client));
    let source = format!(
        "{protocol} on shm: primary killed; primary stopped and resumed; primary and leading \
         coordinator killed"
    );
    let history = History { source, operations };
    check_linearizable(&setup, &history);
    let digests = wait_for(&config, "equal digests", |r| equal_digests(r, &live));
    eprintln!("digests of the last view: {digests:?}");
}

/// Kills the primary of the view `live` settled on (and, with `coordinator_too`, the leading
/// coordinator with it) and waits until the other replicas serve a later view.
fn kill_primary(config: &ClusterConfig, live: &mut Vec<u16>, coordinator_too: bool) {
    let (primary, epoch) = wait_for(config, "settled view", |r| settled(r, live));
    let pid = statuses(config).iter().find(|r| r.id == primary).expect("the primary").pid;
    let coordinator = coordinator_too.then(|| leading_coordinator(config));
    signal(pid, "KILL");
    if let Some((id, pid)) = coordinator {
        signal(pid, "KILL");
        eprintln!("killed coordinator {id} (pid {pid}), the leader");
    }
    eprintln!("killed primary {primary} (pid {pid}) of view {epoch}");
    live.retain(|&r| r != primary);
    wait_for(config, "view without the killed primary", |r| {
        settled(r, live).filter(|&(_, e)| e > epoch)
    });
}

/// The coordinator that leads, and its pid, from the status files the coordinators write.
fn leading_coordinator(config: &ClusterConfig) -> (u16, u32) {
    let dir = config.run_dir.join("membership");
    let leading = config.coordinators().unwrap().into_iter().find_map(|id| {
        let status = NodeStatus::read(&dir.join(format!("ukharon-{id}.status.json")))?;
        status.leading.then_some((id, status.pid))
    });
    leading.expect("a leading coordinator")
}

/// Stops the primary of the view `live` settled on until the others serve a view without it,
/// sends it a put on a connection it welcomed before, resumes it, and checks that it does not
/// reply; waits until it serves again, a fresh backup.
fn stop_primary(config: &ClusterConfig, live: &[u16]) {
    let (primary, epoch) = wait_for(config, "settled view", |r| settled(r, live));
    let mut stream = welcomed(config, primary);
    let pid = statuses(config).iter().find(|r| r.id == primary).expect("the primary").pid;
    signal(pid, "STOP");
    eprintln!("stopped primary {primary} (pid {pid}) of view {epoch}");
    let rest: Vec<u16> = live.iter().copied().filter(|&r| r != primary).collect();
    let (next, later) = wait_for(config, "view without the stopped primary", |r| {
        settled(r, &rest).filter(|&(_, e)| e > epoch)
    });
    let mut out = Vec::new();
    ClientMessage::Kv(late_put().encode().expect("a request")).encode(&mut out);
    write_frame(&mut stream, &out).expect("the late request is taken by the socket");
    signal(pid, "CONT");
    let mut body = Vec::new();
    let answer = match read_frame(&mut stream, &mut body) {
        Ok(true) => Some(ServerMessage::decode(&body).expect("an answer")),
        _ => None,
    };
    assert!(
        !matches!(answer, Some(ServerMessage::Reply(_))),
        "the stopped primary {primary} answered {answer:?} after view {later} (primary {next})"
    );
    eprintln!("primary {primary} resumed; its answer after view {later}: {answer:?}");
    wait_for(config, "the resumed replica back", |r| settled(r, live).filter(|&(_, e)| e > later));
}

/// The put sent to a stopped primary.
fn late_put() -> Request {
    Request {
        client: u64::from(std::process::id()) << 20 | 0xdead,
        seq: 1,
        op: Op::Put { key: b"late".to_vec(), value: b"from the stopped primary".to_vec() },
    }
}

/// Every key read back, as operations of one more client. The late put must not be there
/// with uKharon-KV (the stopped primary lost its write access to the backups). With Mu or
/// Velos it may be, unanswered: resumed before its appointer has seen the new views, the
/// stopped leader may lead again under its old appointment and commit it to the log, and
/// only the answer is held back (`docs/protocols/lease-reads.md`, "Both checks matter").
fn read_back(config: &ClusterConfig, protocol: &str) -> Vec<Operation> {
    let mut reader = Client::new(config.cluster_id, config.endpoints()).expect("a client");
    reader.set_timeout(WAIT);
    let late = reader.get(b"late").expect("a read back");
    let Op::Put { value, .. } = late_put().op else { unreachable!("the late request is a put") };
    if protocol == "ukharon-kv" || late.is_some() {
        let expected = (protocol != "ukharon-kv").then_some(value);
        assert_eq!(late, expected, "the put sent to the stopped primary took effect");
    }
    (0..KEYS)
        .map(|k| {
            let op = Op::Get { key: key(k) };
            let invoke_ns = monotonic_ns();
            let reply = reader.call(op.clone()).expect("a read back");
            let outcome = Outcome::Returned { at_ns: monotonic_ns(), reply };
            Operation { client: CLIENTS * 1_000, op, invoke_ns, outcome }
        })
        .collect()
}

/// The digests of the replicas `live`, once they serve one view and agree.
fn equal_digests(reports: &[ReplicaReport], live: &[u16]) -> Option<Vec<(u16, String)>> {
    settled(reports, live)?;
    let view: Vec<&ReplicaReport> = reports.iter().filter(|r| live.contains(&r.id)).collect();
    let same = view.windows(2).all(|w| w[0].applied == w[1].applied && w[0].digest == w[1].digest);
    same.then(|| view.iter().map(|r| (r.id, r.digest.clone())).collect())
}

fn check_linearizable(setup: &Setup, history: &History) {
    let returned = history.returned_count();
    assert!(returned > 100, "only {returned} operations returned");
    let json = history.to_json().unwrap_or_else(|e| panic!("a reply no client can get: {e}"));
    let path = setup.dir.join("history.json");
    std::fs::write(&path, json).unwrap();
    let lincheck = mu_sim::check::linearizability::find_lincheck()
        .expect("lincheck: build it with scripts/lincheck.sh (target/lincheck/lincheck)");
    mu_sim::check::linearizability::check(&lincheck, &path).unwrap_or_else(|e| {
        panic!("{} operations ({} returned): {e}", history.operations.len(), returned)
    });
    // A checker that accepts anything would pass the above: the same history with one read
    // of a value nobody wrote must be refused.
    let mut corrupted = history.clone();
    let read = corrupted.operations.iter_mut().rev().find(|o| matches!(o.op, Op::Get { .. }));
    let read = read.expect("a read in the history");
    read.outcome = Outcome::Returned {
        at_ns: monotonic_ns(),
        reply: Reply::Value(Some(b"never written".to_vec())),
    };
    let path = setup.dir.join("corrupted.json");
    std::fs::write(&path, corrupted.to_json().expect("a history")).unwrap();
    let verdict = mu_sim::check::linearizability::check(&lincheck, &path);
    assert!(verdict.is_err(), "lincheck took a read of a value nobody wrote");
    eprintln!(
        "{} operations ({returned} returned, {} unknown): linearizable",
        history.operations.len(),
        history.unknown_count()
    );
}
