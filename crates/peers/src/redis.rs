//! Redis with `WAIT`: one primary and two replicas on loopback, persistence off, each server in
//! its own private directory.
//!
//! One operation is `SET key value` followed by `WAIT 2 5000`, both written in one system call on
//! one connection to the primary, timed from before that write until `WAIT` answers. `WAIT`
//! returns once both replicas have acknowledged the replication offset that includes the `SET`,
//! so the sample is what a client pays to know its write reached both replicas. Pipelining the two
//! commands saves the client one round trip that is no part of replication: the peer gets its best
//! case. A `WAIT` answer below 2 (a replica did not acknowledge within 5000 ms) is an error, not a
//! sample. Redis replication is asynchronous and `WAIT` does not make it consensus: this is the
//! cheapest "acknowledged by every replica" a widely deployed system offers.

use std::io;
use std::time::{Duration, Instant};

use crate::process::{self, PrivateDir, Server};
use crate::resp::{self, Connection, Reply};
use crate::workload;
use crate::{Options, PeerError, Samples, System};

const SYSTEM_NAME: &str = "redis-wait";
const DEBIAN_BINARY: &str = "/usr/bin/redis-server";
const REPLICAS_COUNT: usize = 2;

/// `WAIT`'s own timeout: a replica slower than this makes the operation fail (generous: on a
/// loaded machine a replica can be descheduled for a second, and the run would stop there).
const WAIT_TIMEOUT_MS: u64 = 5000;

/// How long the final check waits for a replica to show the last write (it should already: `WAIT`
/// said it was acknowledged, and a replica applies a write before acknowledging it).
const VERIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// The running servers. Field order matters: servers are dropped (killed) before the directory
/// holding their files is removed.
struct Cluster {
    /// Index 0 is the primary.
    servers: Vec<Server>,
    /// Client ports, in the order of `servers`.
    ports: Vec<u16>,
    _dir: PrivateDir,
}

pub(crate) fn measure(opts: &Options, progress: &mut dyn FnMut(u64)) -> Result<Samples, PeerError> {
    let binary = process::find_binary(SYSTEM_NAME, DEBIAN_BINARY, "redis-server")?;
    let mut cluster = start_with_retries(&binary)?;
    let primary_port = cluster.ports[0];
    let mut primary = connect(primary_port, "primary")?;
    let version = server_version(&mut primary)?;

    let wait_timeout_ms = WAIT_TIMEOUT_MS.to_string();
    let replicas_count = REPLICAS_COUNT.to_string();
    let mut request = Vec::new();
    let latencies_ns = workload::run(opts, progress, |index| {
        let key = workload::key(index);
        let value = workload::value(index, opts.payload_bytes);
        request.clear();
        resp::encode_command(&mut request, &[b"SET", key.as_bytes(), &value]);
        resp::encode_command(
            &mut request,
            &[b"WAIT", replicas_count.as_bytes(), wait_timeout_ms.as_bytes()],
        );
        let start = Instant::now();
        primary.send(&request).map_err(|error| io_failure("writing SET and WAIT", error))?;
        let set_reply =
            primary.read_reply().map_err(|error| io_failure("reading SET's reply", error))?;
        let wait_reply =
            primary.read_reply().map_err(|error| io_failure("reading WAIT's reply", error))?;
        let latency = start.elapsed();
        if set_reply != Reply::Simple("OK".to_string()) {
            return Err(PeerError::Failed(format!("SET {key} answered {set_reply:?}")));
        }
        match wait_reply {
            Reply::Integer(acknowledged) if acknowledged >= REPLICAS_COUNT as i64 => Ok(latency),
            other => Err(PeerError::Failed(format!(
                "WAIT {REPLICAS_COUNT} {WAIT_TIMEOUT_MS} after SET {key} answered {other:?}: \
                 not every replica acknowledged the write"
            ))),
        }
    })?;

    let last_index = workload::last_index(opts);
    verify_replicas(&mut cluster, last_index, opts.payload_bytes)?;
    let notes = format!(
        "1 primary + {REPLICAS_COUNT} replicas on loopback, persistence off; one operation = SET \
         then WAIT {REPLICAS_COUNT} {WAIT_TIMEOUT_MS} pipelined on one connection, timed until \
         WAIT answers {REPLICAS_COUNT}; checked: the last write reads back on both replicas"
    );
    Ok(Samples { system: System::RedisWait, latencies_ns, version, notes })
}

fn start_with_retries(binary: &std::path::Path) -> Result<Cluster, PeerError> {
    let mut attempt = 1;
    loop {
        match start(binary) {
            Err(error)
                if process::is_port_conflict(&error) && attempt < process::START_ATTEMPTS_COUNT =>
            {
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// Starts the primary and the replicas and waits until both replicas are connected and in sync.
fn start(binary: &std::path::Path) -> Result<Cluster, PeerError> {
    let dir = PrivateDir::create(&std::env::temp_dir(), "mu-peers-redis")?;
    let ports = process::free_ports(1 + REPLICAS_COUNT)?;
    let mut servers = Vec::with_capacity(ports.len());
    for (index, &port) in ports.iter().enumerate() {
        let name = if index == 0 { "primary".to_string() } else { format!("replica{index}") };
        let data_dir = dir.subdir(&name)?;
        let port_text = port.to_string();
        let data_dir_text = data_dir.display().to_string();
        let mut args = process::args([
            "--port",
            port_text.as_str(),
            "--bind",
            "127.0.0.1",
            "--dir",
            data_dir_text.as_str(),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--logfile",
            "",
            // A replica's first full sync streams the data set without writing a file, and
            // starts at once instead of after the default few seconds' wait for more replicas.
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ]);
        if index > 0 {
            args.extend(process::args(["--replicaof", "127.0.0.1", &ports[0].to_string()]));
        }
        let log_path = dir.path().join(format!("{name}.log"));
        servers.push(Server::spawn(&format!("redis {name}"), binary, &args, &log_path, None)?);
    }
    let mut cluster = Cluster { servers, ports, _dir: dir };

    for index in 0..cluster.ports.len() {
        let port = cluster.ports[index];
        let what = format!("{} to answer PING on port {port}", cluster.servers[index].name());
        process::wait_for(&what, &mut cluster.servers, || {
            let mut connection = Connection::connect(port).ok()?;
            match connection.command(&[b"PING"]) {
                Ok(Reply::Simple(pong)) if pong == "PONG" => Some(()),
                _ => None,
            }
        })?;
    }

    let primary_port = cluster.ports[0];
    let what = format!("{REPLICAS_COUNT} replicas to be connected and online at the primary");
    process::wait_for(&what, &mut cluster.servers, || {
        let mut connection = Connection::connect(primary_port).ok()?;
        let info = info_section(&mut connection, "replication").ok()?;
        replicas_online(&info).then_some(())
    })?;
    Ok(cluster)
}

/// Whether `INFO replication` text shows the expected number of replicas, all online.
fn replicas_online(info: &str) -> bool {
    let connected = info
        .lines()
        .find_map(|line| line.strip_prefix("connected_slaves:"))
        .and_then(|count| count.trim().parse::<usize>().ok());
    let online_count = info
        .lines()
        .filter(|line| {
            line.strip_prefix("slave")
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
                && line.contains("state=online")
        })
        .count();
    connected == Some(REPLICAS_COUNT) && online_count == REPLICAS_COUNT
}

fn info_section(connection: &mut Connection, section: &str) -> Result<String, PeerError> {
    match connection.command(&[b"INFO", section.as_bytes()]) {
        Ok(Reply::Bulk(Some(bytes))) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Ok(other) => Err(PeerError::Failed(format!("INFO {section} answered {other:?}"))),
        Err(error) => Err(io_failure(&format!("INFO {section}"), error)),
    }
}

/// "Redis 7.0.15", from the server's `INFO server`.
fn server_version(connection: &mut Connection) -> Result<String, PeerError> {
    let info = info_section(connection, "server")?;
    info.lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .map(|version| format!("Redis {}", version.trim()))
        .ok_or_else(|| PeerError::Failed("INFO server has no redis_version".to_string()))
}

/// Checks that every server, replicas included, returns the last written value for its key.
fn verify_replicas(
    cluster: &mut Cluster,
    last_index: u64,
    payload_bytes: usize,
) -> Result<(), PeerError> {
    let key = workload::key(last_index);
    let expected = workload::value(last_index, payload_bytes);
    for (server, &port) in cluster.servers.iter().zip(&cluster.ports) {
        let mut connection = connect(port, server.name())?;
        let deadline = Instant::now() + VERIFY_TIMEOUT;
        loop {
            let reply = connection
                .command(&[b"GET", key.as_bytes()])
                .map_err(|error| io_failure(&format!("GET {key} on {}", server.name()), error))?;
            if reply == Reply::Bulk(Some(expected.clone())) {
                break;
            }
            if Instant::now() >= deadline {
                return Err(PeerError::Failed(format!(
                    "{} does not have the last write: GET {key} answered {reply:?}, expected a \
                     {payload_bytes}-byte value starting {:?}",
                    server.name(),
                    String::from_utf8_lossy(&expected[..expected.len().min(20)])
                )));
            }
            std::thread::sleep(process::POLL_INTERVAL);
        }
    }
    Ok(())
}

fn connect(port: u16, name: &str) -> Result<Connection, PeerError> {
    Connection::connect(port)
        .map_err(|error| io_failure(&format!("connecting to redis {name} on port {port}"), error))
}

fn io_failure(what: &str, error: io::Error) -> PeerError {
    PeerError::Failed(format!("redis: {what}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_online_needs_both_replicas_online() {
        let both = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
                    slave0:ip=127.0.0.1,port=1,state=online,offset=1,lag=0\r\n\
                    slave1:ip=127.0.0.1,port=2,state=online,offset=1,lag=0\r\n";
        assert!(replicas_online(both));
        let syncing = both.replacen("state=online", "state=wait_bgsave", 1);
        assert!(!replicas_online(&syncing));
        let one = "connected_slaves:1\r\nslave0:ip=127.0.0.1,port=1,state=online\r\n";
        assert!(!replicas_online(one));
    }
}
