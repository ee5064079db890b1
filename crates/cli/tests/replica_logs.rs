//! The replica's structured logs as an operator meets them: `mu cluster up` leaves each
//! replica's events in its log file after the start marker (the start, the leader it follows,
//! the stop); `mu replica --log-format json` writes one JSON object per line; and a `MU_LOG`
//! that does not parse stops the replica at once with a message naming it, as does a CPU the
//! kernel refuses to pin a thread to (`--replication-cpu`, `--background-cpu`, whose pinning the
//! JSON test checks in `/proc`).

mod common;

use common::{mu, mu_with_log, ok, stderr, Setup};
use std::io::{BufRead, BufReader};

use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The clusters of this file go one at a time: each is up to three replica processes with busy
/// threads, on a machine that may have two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How long a replica may take to say it serves.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Whether a text log line has the field `name` with value `value` (fields are written as
/// `name=value` after the message).
fn has_field(line: &str, name: &str, value: &str) -> bool {
    line.split_whitespace().any(|word| word == format!("{name}={value}"))
}

#[test]
fn cluster_up_leaves_start_leader_and_stop_events_in_each_replica_log() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("up", 0x10a1);
    let up = ok(mu_with_log(&["cluster", "up", "--config", setup.config()], None));
    let leader: u16 = up
        .lines()
        .find_map(|l| l.strip_prefix("leader: replica "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no leader line in: {up}"));
    // A committed write: the leader was ready (and said so) before it answered.
    ok(mu(&["kv", "put", "color", "blue", "--config", setup.config()]));
    // Without --purge: the logs stay.
    ok(mu(&["cluster", "down", "--config", setup.config()]));

    let mut following = 0;
    for id in 0..3u16 {
        let log = setup.log(id);
        let id_text = id.to_string();
        // Everything is this start's: after the marker `up` wrote.
        let (before, events) = log
            .split_once(&format!("--- mu cluster up: starting replica {id} "))
            .unwrap_or_else(|| panic!("replica {id}: no start marker in:\n{log}"));
        assert!(before.trim().is_empty(), "replica {id}: a log of an earlier run:\n{before}");
        let lines: Vec<&str> = events.lines().skip(1).collect();
        let serving = lines
            .iter()
            .position(|l| {
                l.contains(" INFO ")
                    && l.contains(": serving ")
                    && has_field(l, "replica", &id_text)
            })
            .unwrap_or_else(|| panic!("replica {id}: no start event in:\n{log}"));
        assert!(
            lines[serving].split_whitespace().any(|w| w.starts_with("pid=")),
            "replica {id}: the start event names no pid: {}",
            lines[serving]
        );
        let stopping = lines
            .iter()
            .rposition(|l| l.contains(": stopping ") && has_field(l, "replica", &id_text))
            .unwrap_or_else(|| panic!("replica {id}: no stop event in:\n{log}"));
        assert!(serving < stopping, "replica {id}: stopped before it served:\n{log}");
        let leader_text = leader.to_string();
        let follows = lines.iter().any(|l| {
            (l.contains("leader changed") || l.contains("elected:"))
                && has_field(l, "leader", &leader_text)
        });
        following += usize::from(follows);
        if id == leader {
            assert!(follows, "the leader {id} logged no election of itself:\n{log}");
            assert!(
                lines.iter().any(|l| l.contains("ready: leading")),
                "the leader {id} logged no readiness:\n{log}"
            );
        }
        // Nothing per request: one put, and no event says so.
        assert!(!log.contains("color"), "replica {id} logged a request:\n{log}");
    }
    // `up` returned once a majority agreed on the leader: each of them logged it.
    assert!(following >= 2, "fewer than a majority logged leader {leader}");
}

/// `mu replica` of `setup`'s cluster with `args`, logging JSON at `info` on a piped stderr.
fn json_replica(setup: &Setup, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_mu"))
        .args(["replica", "--config", setup.config(), "--log-format", "json"])
        .args(args)
        .env("MU_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mu replica starts")
}

/// Lines from a child's stderr, read on a thread of their own so that waiting has a deadline.
fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().expect("stderr piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Reads JSON log events from `lines` into `events` until one's message is `what` says
/// (`wanted`), and returns it; kills `child` and fails the test if none comes `within`.
fn await_event(
    child: &mut Child,
    lines: &mpsc::Receiver<String>,
    within: Duration,
    events: &mut Vec<serde_json::Value>,
    (what, wanted): (&str, impl Fn(&str) -> bool),
) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = lines.recv_timeout(left) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no {what} event within {within:?}; got {events:#?}");
        };
        let event = parse_event(&line);
        events.push(event.clone());
        if event["fields"]["message"].as_str().is_some_and(&wanted) {
            return event;
        }
    }
}

/// One JSON log line: an object with the time, the level, the target and the event's fields
/// (its message among them), as tracing-subscriber's JSON format writes them.
fn parse_event(line: &str) -> serde_json::Value {
    let event: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    for key in ["timestamp", "level", "target", "fields"] {
        assert!(event.get(key).is_some(), "no {key:?} in {line}");
    }
    assert!(event["fields"]["message"].is_string(), "no message in {line}");
    event
}

#[test]
fn a_replica_logs_json_lines_with_fields() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("json", 0x10a2);
    // Its threads pinned, as an operator would with dedicated cores: the last CPU this test may
    // use for the replication thread, the first for the background thread.
    let allowed = mu_cpu::allowed_cpus();
    let (repl_cpu, bg_cpu) = (allowed.last().unwrap().to_string(), allowed[0].to_string());
    // Replica 1 alone: it serves (and says so) without peers.
    let pins = ["--replication-cpu", &repl_cpu, "--background-cpu", &bg_cpu];
    let mut child = json_replica(&setup, &[&["--id", "1"][..], &pins].concat());
    let lines = stderr_lines(&mut child);
    let mut events = Vec::new();
    let serving = ("\"serving\"", |m: &str| m == "serving");
    let serving = await_event(&mut child, &lines, START_TIMEOUT, &mut events, serving);
    let fields = &serving["fields"];
    assert_eq!(serving["level"], "INFO", "{serving}");
    assert_eq!(fields["replica"], 1, "{serving}");
    assert_eq!(fields["cluster_id"], 0x10a2, "{serving}");
    assert_eq!(fields["pid"], child.id(), "{serving}");
    let socket = setup.run_dir.join("kv-1.sock");
    assert_eq!(fields["socket"], socket.to_str().unwrap(), "{serving}");
    assert_eq!(fields["replication_cpu"].to_string(), repl_cpu, "{serving}");
    assert_eq!(fields["background_cpu"].to_string(), bg_cpu, "{serving}");
    // As the kernel has it.
    assert_eq!(thread_cpus(child.id(), "mu-repl-n1"), repl_cpu);
    assert_eq!(thread_cpus(child.id(), "mu-bg-n1"), bg_cpu);

    // SIGTERM: the replica stops cleanly and says so, still in JSON.
    // SAFETY: kill takes a pid and a signal number, no memory; the child is not reaped yet.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => events.push(parse_event(&line)),
            Err(mpsc::RecvTimeoutError::Disconnected) => break, // stderr closed: it exited
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the replica did not stop within {START_TIMEOUT:?}");
            }
        }
    }
    let status = child.wait().expect("the replica is reaped");
    assert!(status.success(), "exit {status:?}");
    assert!(
        events.iter().any(|e| e["fields"]["message"] == "stopping" && e["fields"]["replica"] == 1),
        "no stop event in {events:#?}"
    );
    // MU_LOG=info: nothing below it.
    assert!(events.iter().all(|e| e["level"] != "DEBUG" && e["level"] != "TRACE"), "{events:#?}");
}

/// The CPUs the kernel lets process `pid`'s thread `name` run on, as it lists them.
fn thread_cpus(pid: u32, name: &str) -> String {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the replica's tasks");
    for task in tasks {
        let task = task.expect("task").path();
        if std::fs::read_to_string(task.join("comm")).is_ok_and(|c| c.trim_end() == name) {
            let status = std::fs::read_to_string(task.join("status")).expect("status");
            let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"));
            return list.expect("Cpus_allowed_list").trim().to_string();
        }
    }
    panic!("no thread {name} in process {pid}");
}

#[test]
fn a_cpu_the_kernel_refuses_is_an_error_naming_the_cpus_allowed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("cpus", 0x10a4);
    let allowed = mu_cpu::allowed_cpus();
    let beyond = (allowed.last().unwrap() + 1).to_string();
    for flag in ["--replication-cpu", "--background-cpu"] {
        let out = mu(&["replica", "--config", setup.config(), "--id", "0", flag, &beyond]);
        assert!(!out.status.success(), "{flag} {beyond} was taken");
        let err = stderr(&out);
        assert!(err.contains(&format!("cpu {beyond}")), "{flag}: {err}");
        assert!(err.contains(&mu_cpu::cpu_list(&allowed)), "{flag}: {err}");
        assert!(!err.contains("panicked"), "{flag}: {err}");
    }
    assert!(!setup.run_dir.join("kv-0.sock").exists(), "a replica on a refused CPU served");
    // Refused before anything was made there: no fabric files, no lock.
    let left: Vec<_> = std::fs::read_dir(&setup.run_dir)
        .map(|dir| dir.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left in the run directory: {left:?}");
}

#[test]
fn a_bad_mu_log_is_an_error_naming_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("bad", 0x10a3);
    for bad in ["nonsense=", "mu_replica=loud", "=info", "info,"] {
        let out = mu_with_log(&["replica", "--config", setup.config(), "--id", "0"], Some(bad));
        assert!(!out.status.success(), "MU_LOG={bad:?} was taken");
        let err = stderr(&out);
        assert!(err.contains("MU_LOG"), "MU_LOG={bad:?}: {err}");
        assert!(!err.contains("panicked"), "MU_LOG={bad:?}: {err}");
    }
    assert!(!setup.run_dir.join("kv-0.sock").exists(), "a replica with a bad MU_LOG served");

    // Through `mu cluster up`: its replicas inherit the variable, fail at once, and `up` shows
    // the error from the end of the log, after this start's marker.
    let out = mu_with_log(&["cluster", "up", "--config", setup.config()], Some("nonsense="));
    assert!(!out.status.success(), "cluster up with a bad MU_LOG succeeded");
    let err = stderr(&out);
    assert!(err.contains("exited during start-up") && err.contains("MU_LOG"), "{err}");
}

/// A pipe whose write end is full (4 KiB of capacity, all of it written): a process given it as
/// stderr blocks on its first write until the read end is read.
fn stalled_pipe() -> (std::fs::File, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given; the calls after it take
    // descriptors and integer arguments only, on descriptors this test owns.
    unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
        libc::fcntl(fds[1], libc::F_SETPIPE_SZ, 4096);
        libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK);
        let chunk = [b'#'; 512];
        while libc::write(fds[1], chunk.as_ptr().cast(), chunk.len()) > 0 {}
        // The replica's writes block, as on a stalled reader.
        libc::fcntl(fds[1], libc::F_SETFL, 0);
        (std::fs::File::from_raw_fd(fds[0]), std::os::fd::OwnedFd::from_raw_fd(fds[1]))
    }
}

/// Child processes killed and reaped on drop if they are still running (a failed assertion).
struct Reaped(Vec<Child>);

impl Reaped {
    fn signal(&self, i: usize, signal: libc::c_int) {
        // SAFETY: kill takes a pid and a signal number, no memory; the child is not reaped yet.
        unsafe { libc::kill(self.0[i].id() as libc::pid_t, signal) };
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Logging never holds up a replica: with every replica's stderr a full pipe nobody reads, the
/// cluster elects a leader, commits, loses its leader (SIGKILL) and commits again under a new
/// one. (Writing events straight to stderr, each replica's first event blocked the thread that
/// logged it: the election, on the background thread that also beats the heartbeat.) Once the
/// pipes are read, each replica's events come out whole.
#[test]
fn replicas_serve_and_fail_over_while_nobody_reads_their_stderr() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("stalled", 0x10a4);
    let mut pipes = Vec::new();
    let mut replicas = Reaped(Vec::new());
    for id in 0..3u16 {
        let (read_end, write_end) = stalled_pipe();
        let child = Command::new(env!("CARGO_BIN_EXE_mu"))
            .args(["replica", "--config", setup.config(), "--id", &id.to_string()])
            .env("MU_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(write_end))
            .spawn()
            .expect("mu replica starts");
        replicas.0.push(child);
        pipes.push(read_end);
    }
    // Every replica serves its socket before the first request (`mu cluster up` waits so too).
    let deadline = Instant::now() + START_TIMEOUT;
    while !(0..3).all(|id| setup.run_dir.join(format!("kv-{id}.sock")).exists()) {
        assert!(Instant::now() < deadline, "the replicas did not serve within {START_TIMEOUT:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let put = |key: &str| {
        mu(&["kv", "put", key, "v", "--config", setup.config(), "--timeout-ms", "20000"])
    };
    let first = put("before");
    // The lowest live id leads: replica 0.
    replicas.signal(0, libc::SIGKILL);
    let second = put("after");
    let got = mu(&["kv", "get", "before", "--config", setup.config(), "--timeout-ms", "20000"]);

    // Read the pipes now, so that the survivors can write out their logs and stop.
    let readers: Vec<_> = pipes
        .into_iter()
        .map(|mut pipe| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = std::io::Read::read_to_string(&mut pipe, &mut text);
                text
            })
        })
        .collect();
    replicas.signal(1, libc::SIGTERM);
    replicas.signal(2, libc::SIGTERM);
    let deadline = Instant::now() + START_TIMEOUT;
    for (i, child) in replicas.0.iter_mut().enumerate() {
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "replica {i} did not stop within {START_TIMEOUT:?}");
            std::thread::sleep(Duration::from_millis(10));
        };
        // Replica 0 was killed; the others stop cleanly once their logs are read.
        assert!(i == 0 || status.success(), "replica {i}: {status:?}");
    }
    let logs: Vec<String> = readers.into_iter().map(|r| r.join().expect("reader")).collect();
    ok(first);
    ok(second);
    assert_eq!(ok(got).trim(), "v");
    for (id, log) in logs.iter().enumerate().skip(1) {
        let events = log.trim_start_matches('#');
        assert!(events.contains(": serving "), "replica {id}: no start event in:\n{events}");
        assert!(events.contains(": stopping "), "replica {id}: no stop event in:\n{events}");
        assert!(
            events.lines().all(|l| l.contains(" mu")),
            "replica {id}: a broken line:\n{events}"
        );
    }
    let failure_logged = |log: &String| {
        log.lines().any(|l| l.contains("peer judged failed") && has_field(l, "peer", "0"))
    };
    assert!(logs[1..].iter().any(failure_logged), "no survivor logged 0's failure: {logs:#?}");
}

/// A replica started with --rejoin and nobody to take it back (here: alone in the
/// configuration's three, the others never started) says now and then that it is still
/// recovering, rather than serving nothing in silence.
#[test]
fn a_replica_that_stays_recovering_says_so() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("recovering", 0x10a5);
    let mut child = json_replica(&setup, &["--id", "2", "--rejoin"]);
    let lines = stderr_lines(&mut child);
    // The note comes every 10 s; allow for a slow start.
    let within = Duration::from_secs(10) + START_TIMEOUT;
    let recovering = ("\"still recovering\"", |m: &str| m.starts_with("still recovering"));
    let note = await_event(&mut child, &lines, within, &mut Vec::new(), recovering);
    assert_eq!(note["level"], "WARN", "{note}");
    assert_eq!(note["fields"]["replica"], 2, "{note}");
    // SAFETY: kill takes a pid and a signal number, no memory; the child is not reaped yet.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait().expect("the replica is reaped");
    assert!(status.success(), "exit {status:?}");
}
