//! etcd: three members on loopback with a static initial cluster, each member's data directory on
//! tmpfs (so its log fsyncs cost memory speed, as Mu's log in memory does).
//!
//! One operation is a put through etcd's v3 JSON gateway (`POST /v3/kv/put`, the path etcd 3.4
//! and later serve; key and value base64-encoded), sent to the leader's client URL over one
//! keep-alive HTTP/1.1 connection and timed from before the request is written until the response
//! is read. The leader answers a put once a majority has the entry in its log and the leader has
//! applied it. The leader is found first (`POST /v3/maintenance/status` on every member), so the
//! number includes no forwarding from a follower.
//!
//! The JSON gateway adds some cost over etcd's native gRPC API: the request is decoded from JSON
//! and re-issued as a gRPC call inside the server, and the answer is encoded back to JSON. The
//! number is therefore somewhat above what a gRPC client would see; the replication work itself
//! (the Raft round trip to the followers and the log write) is the same.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::base64;
use crate::http::{self, Response};
use crate::process::{self, PrivateDir, Server};
use crate::workload;
use crate::{Options, PeerError, Samples, System};

const SYSTEM_NAME: &str = "etcd";
const DEBIAN_BINARY: &str = "/usr/bin/etcd";
const MEMBERS_COUNT: usize = 3;

/// How long the final check waits for a member to show the last write: a follower applies a
/// committed entry shortly after the leader answered (at the latest with the next heartbeat).
const VERIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// The running members. Field order matters: servers are dropped (killed) before the directory
/// holding their data is removed.
struct Cluster {
    servers: Vec<Server>,
    /// Client ports, in the order of `servers`.
    client_ports: Vec<u16>,
    _dir: PrivateDir,
}

/// What `maintenance/status` says about one member.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MemberStatus {
    member_id: u64,
    /// The member this one believes leads; 0 while there is none.
    leader_id: u64,
    version: String,
}

pub(crate) fn measure(opts: &Options, progress: &mut dyn FnMut(u64)) -> Result<Samples, PeerError> {
    let binary = process::find_binary(SYSTEM_NAME, DEBIAN_BINARY, "etcd")?;
    let mut cluster = start_with_retries(&binary)?;
    let client_ports = cluster.client_ports.clone();
    let (leader_index, statuses) =
        process::wait_for("the members to agree on a leader", &mut cluster.servers, || {
            let statuses: Option<Vec<MemberStatus>> =
                client_ports.iter().map(|&port| member_status(port).ok()).collect();
            let statuses = statuses?;
            let leader_id = statuses[0].leader_id;
            let agreed = leader_id != 0 && statuses.iter().all(|s| s.leader_id == leader_id);
            let leader_index = statuses.iter().position(|s| s.member_id == leader_id)?;
            agreed.then_some((leader_index, statuses))
        })?;
    let leader_status = &statuses[leader_index];
    let leader_name = cluster.servers[leader_index].name().to_string();
    let leader_port = cluster.client_ports[leader_index];
    let version = format!("etcd {}", leader_status.version);

    let mut leader = http::Connection::connect(leader_port).map_err(|error| {
        PeerError::Failed(format!("etcd: connecting to leader {leader_name}: {error}"))
    })?;
    let mut body = String::new();
    let latencies_ns = workload::run(opts, progress, |index| {
        let key = workload::key(index);
        let value = workload::value(index, opts.payload_bytes);
        body.clear();
        body.push_str("{\"key\":\"");
        base64::encode_into(&mut body, key.as_bytes());
        body.push_str("\",\"value\":\"");
        base64::encode_into(&mut body, &value);
        body.push_str("\"}");
        let start = Instant::now();
        let response = leader.post_json("/v3/kv/put", body.as_bytes());
        let latency = start.elapsed();
        match response {
            Ok(Response { status: 200, .. }) => Ok(latency),
            Ok(response) => Err(PeerError::Failed(format!(
                "etcd: put {key} answered {}: {}",
                response.status,
                response.body_text()
            ))),
            Err(error) => Err(PeerError::Failed(format!("etcd: put {key}: {error}"))),
        }
    })?;

    // A leader change during the run would have made later puts cost a forward; say so.
    let leader_now = member_status(leader_port)?;
    let leadership = if leader_now.leader_id == leader_status.member_id {
        format!("leader {leader_name} throughout")
    } else {
        format!("leadership moved away from {leader_name} during the run")
    };
    let last_index = workload::last_index(opts);
    verify_members(&cluster, last_index, opts.payload_bytes)?;
    let notes = format!(
        "{MEMBERS_COUNT} members on loopback, data on tmpfs; one operation = POST /v3/kv/put \
         (JSON gateway, which adds some cost over gRPC) to the leader on one keep-alive \
         connection; {leadership}; checked: the last write reads back (serializable range) on \
         every member"
    );
    Ok(Samples { system: System::Etcd, latencies_ns, version, notes })
}

fn start_with_retries(binary: &Path) -> Result<Cluster, PeerError> {
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

/// Starts the members and waits until each answers on its client URL.
fn start(binary: &Path) -> Result<Cluster, PeerError> {
    let dir = PrivateDir::create(&process::memory_backed_parent(), "mu-peers-etcd")?;
    let ports = process::free_ports(2 * MEMBERS_COUNT)?;
    let (client_ports, peer_ports) = ports.split_at(MEMBERS_COUNT);
    let names: Vec<String> = (0..MEMBERS_COUNT).map(|index| format!("member{index}")).collect();
    let initial_cluster: Vec<String> = names
        .iter()
        .zip(peer_ports)
        .map(|(name, port)| format!("{name}=http://127.0.0.1:{port}"))
        .collect();
    let initial_cluster = initial_cluster.join(",");
    // A token unique to this run, so that members of another run can never join this cluster.
    let token = format!("mu-peers-{}-{}", std::process::id(), peer_ports[0]);

    let mut servers = Vec::with_capacity(MEMBERS_COUNT);
    for (index, name) in names.iter().enumerate() {
        let data_dir = dir.subdir(name)?;
        let client_url = format!("http://127.0.0.1:{}", client_ports[index]);
        let peer_url = format!("http://127.0.0.1:{}", peer_ports[index]);
        let data_dir_text = data_dir.display().to_string();
        let args = process::args([
            "--name",
            name.as_str(),
            "--data-dir",
            data_dir_text.as_str(),
            "--listen-client-urls",
            client_url.as_str(),
            "--advertise-client-urls",
            client_url.as_str(),
            "--listen-peer-urls",
            peer_url.as_str(),
            "--initial-advertise-peer-urls",
            peer_url.as_str(),
            "--initial-cluster",
            initial_cluster.as_str(),
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            token.as_str(),
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
        ]);
        let log_path = dir.path().join(format!("{name}.log"));
        // etcd reads every flag from an ETCD_* variable too, and refuses to start when a variable
        // and a flag name the same setting: the environment of this process must not leak in.
        let server =
            Server::spawn(&format!("etcd {name}"), binary, &args, &log_path, Some("ETCD_"))?;
        servers.push(server);
    }
    let mut cluster = Cluster { servers, client_ports: client_ports.to_vec(), _dir: dir };
    for index in 0..MEMBERS_COUNT {
        let port = cluster.client_ports[index];
        let what = format!("{} to answer on its client URL", cluster.servers[index].name());
        process::wait_for(&what, &mut cluster.servers, || member_status(port).ok())?;
    }
    Ok(cluster)
}

/// Asks the member on `port` for its status, on a connection of its own.
fn member_status(port: u16) -> Result<MemberStatus, PeerError> {
    let json = post(port, "/v3/maintenance/status", b"{}")?;
    parse_status(&json).ok_or_else(|| {
        PeerError::Failed(format!("etcd: maintenance/status on port {port} answered {json}"))
    })
}

fn parse_status(json: &Value) -> Option<MemberStatus> {
    Some(MemberStatus {
        member_id: json_u64(json.get("header")?.get("member_id")?)?,
        // The gateway leaves out fields at their zero value: no leader yet reads as 0.
        leader_id: json.get("leader").map_or(Some(0), json_u64)?,
        version: json.get("version")?.as_str()?.to_string(),
    })
}

/// The gateway writes 64-bit integers as JSON strings (JavaScript numbers cannot hold them);
/// plain numbers are accepted too.
fn json_u64(value: &Value) -> Option<u64> {
    match value {
        Value::String(text) => text.parse().ok(),
        other => other.as_u64(),
    }
}

/// One request on a fresh connection, its 200 response parsed as JSON.
fn post(port: u16, path: &str, body: &[u8]) -> Result<Value, PeerError> {
    let failed =
        |what: String| PeerError::Failed(format!("etcd: POST {path} on port {port}: {what}"));
    let mut connection =
        http::Connection::connect(port).map_err(|error| failed(error.to_string()))?;
    let response = connection.post_json(path, body).map_err(|error| failed(error.to_string()))?;
    if response.status != 200 {
        return Err(failed(format!("status {}: {}", response.status, response.body_text())));
    }
    serde_json::from_slice(&response.body).map_err(|error| failed(format!("bad JSON: {error}")))
}

/// Checks that every member's own state (a serializable range, answered locally without asking
/// the leader) has the last written value.
fn verify_members(
    cluster: &Cluster,
    last_index: u64,
    payload_bytes: usize,
) -> Result<(), PeerError> {
    let key = workload::key(last_index);
    let expected = workload::value(last_index, payload_bytes);
    let request =
        format!("{{\"key\":\"{}\",\"serializable\":true}}", base64::encode(key.as_bytes()));
    for (server, &port) in cluster.servers.iter().zip(&cluster.client_ports) {
        let deadline = Instant::now() + VERIFY_TIMEOUT;
        loop {
            let json = post(port, "/v3/kv/range", request.as_bytes())?;
            let value = json
                .get("kvs")
                .and_then(|kvs| kvs.get(0))
                .and_then(|kv| kv.get("value"))
                .and_then(Value::as_str)
                .and_then(base64::decode);
            if value.as_deref() == Some(expected.as_slice()) {
                break;
            }
            if Instant::now() >= deadline {
                return Err(PeerError::Failed(format!(
                    "{} does not have the last write to {key} after {} s: range answered {json}",
                    server.name(),
                    VERIFY_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(process::POLL_INTERVAL);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_parsing_reads_string_integers_and_missing_leader() {
        let json: Value = serde_json::from_str(
            r#"{"header":{"cluster_id":"1","member_id":"13847567121247652255","revision":"2"},
                "version":"3.4.23","leader":"13847567121247652255"}"#,
        )
        .unwrap();
        assert_eq!(
            parse_status(&json),
            Some(MemberStatus {
                member_id: 13847567121247652255,
                leader_id: 13847567121247652255,
                version: "3.4.23".to_string(),
            })
        );
        let no_leader: Value =
            serde_json::from_str(r#"{"header":{"member_id":"7"},"version":"3.4.23"}"#).unwrap();
        assert_eq!(parse_status(&no_leader).map(|s| s.leader_id), Some(0));
        let garbage: Value = serde_json::from_str(r#"{"header":{"member_id":"x"}}"#).unwrap();
        assert_eq!(parse_status(&garbage), None);
    }
}
