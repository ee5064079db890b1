//! The state of a replica of an unmodified application (`app = "redis"` or `"memcached"`), as
//! its own server holds it, and which replica leads, as the fronts' direct sockets say: what
//! `mu demo --app redis|memcached` and the applications' tests compare after a failover.

use mu_redis::resp::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a probe or a state read waits for one reply.
const REPLY_WAIT: Duration = Duration::from_secs(10);

/// An unmodified application a cluster can replicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExternalApp {
    Redis,
    Memcached,
}

impl ExternalApp {
    /// Its `app` in a cluster file.
    pub fn name(self) -> &'static str {
        match self {
            ExternalApp::Redis => "redis",
            ExternalApp::Memcached => "memcached",
        }
    }

    /// Its server binary: `MU_REDIS_SERVER` or `MU_MEMCACHED_SERVER` where set, else
    /// `redis-server` or `memcached` on the `PATH` (what every replica runs).
    pub fn server_binary(self) -> PathBuf {
        let (variable, default) = match self {
            ExternalApp::Redis => ("MU_REDIS_SERVER", "redis-server"),
            ExternalApp::Memcached => ("MU_MEMCACHED_SERVER", "memcached"),
        };
        std::env::var_os(variable).map_or_else(|| PathBuf::from(default), PathBuf::from)
    }

    /// Its own load tool: `redis-benchmark` or `memcslap`.
    pub fn tool(self) -> &'static str {
        match self {
            ExternalApp::Redis => "redis-benchmark",
            ExternalApp::Memcached => "memcslap",
        }
    }

    /// Fails, naming the missing binary and the script that installs it, unless the server
    /// (and the load tool, with `tool`) runs; `what` is the command asking, for the message.
    pub fn check_installed(self, what: &str, tool: bool) -> Result<(), String> {
        let server = self.server_binary();
        let tool = tool.then(|| PathBuf::from(self.tool()));
        for binary in std::iter::once(server).chain(tool) {
            if std::process::Command::new(&binary).arg("--version").output().is_err() {
                return Err(format!(
                    "{what}: {} is not installed (scripts/install-peers.sh)",
                    binary.display()
                ));
            }
        }
        Ok(())
    }

    /// The application a cluster file names, if it is an unmodified one.
    pub fn of(config: &mu_service::ClusterConfig) -> Option<ExternalApp> {
        if config.is_redis() {
            Some(ExternalApp::Redis)
        } else if config.is_memcached() {
            Some(ExternalApp::Memcached)
        } else {
            None
        }
    }

    /// Whether replica `id`'s front, asked on its direct socket (which relays nothing), serves
    /// as the leader: followers refuse there, naming the leader.
    pub fn leads(self, run_dir: &Path, id: u16) -> bool {
        matches!(self.front_role(run_dir, id), Ok(FrontRole::Leads))
    }

    /// What replica `id`'s front says on its direct socket: it serves as the leader, or it
    /// refuses, naming the leader it knows. An error where nothing serves there (the replica
    /// is not running, or still starting) or the answer is neither.
    pub fn front_role(self, run_dir: &Path, id: u16) -> std::io::Result<FrontRole> {
        let refusal = match self {
            ExternalApp::Redis => {
                let socket = mu_redis::front::direct_socket(run_dir, id);
                match redis_conn(&socket)?.call(&[b"PING"]).map_err(std::io::Error::other)? {
                    Value::Simple(s) if s == b"PONG" => return Ok(FrontRole::Leads),
                    Value::Error(text) => text,
                    other => return Err(std::io::Error::other(format!("PING: {other:?}"))),
                }
            }
            ExternalApp::Memcached => {
                let socket = mu_memcached::front::direct_socket(run_dir, id);
                let reply = memcached_conn(&socket)?
                    .call(b"get leader-probe\r\n")
                    .map_err(std::io::Error::other)?
                    .concat();
                if reply == b"END\r\n" {
                    return Ok(FrontRole::Leads);
                }
                if !reply.starts_with(b"SERVER_ERROR not the leader") {
                    let reply = String::from_utf8_lossy(&reply).into_owned();
                    return Err(std::io::Error::other(format!("get: {reply}")));
                }
                reply
            }
        };
        Ok(FrontRole::Follows(named_replica(&String::from_utf8_lossy(&refusal))))
    }

    /// Replica `id`'s state as one line: Redis's `DEBUG DIGEST` and key count, or a digest of
    /// every item Memcached holds (key, value, flags, CAS) and of the front's expiry table, with
    /// the item count. An error while the replica is still starting.
    pub fn state_digest(self, run_dir: &Path, id: u16) -> std::io::Result<String> {
        match self {
            ExternalApp::Redis => {
                let (digest, keys) = redis_digest(run_dir, id)?;
                match (digest, keys) {
                    (Value::Bulk(d) | Value::Simple(d), Value::Integer(n)) => {
                        Ok(format!("{} ({n} keys)", String::from_utf8_lossy(&d)))
                    }
                    other => Err(std::io::Error::other(format!("DEBUG DIGEST, DBSIZE: {other:?}"))),
                }
            }
            ExternalApp::Memcached => {
                let (items, expiries) = memcached_state(run_dir, id)?;
                let mut hash = Fnv64::default();
                for item in &items {
                    hash.write(item.as_bytes());
                }
                hash.write(expiries.as_bytes());
                Ok(format!("{:016x} ({} items)", hash.0, items.len()))
            }
        }
    }
}

/// What a replica's front says of itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontRole {
    /// It serves as the leader.
    Leads,
    /// It refuses on its direct socket, naming the leader it knows (`None`: it knows none).
    Follows(Option<u16>),
}

/// The replica a front's refusal names ("replica 2 does", "replica 2 leads"), if any.
fn named_replica(refusal: &str) -> Option<u16> {
    refusal.split("replica ").skip(1).find_map(|after| {
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

fn redis_conn(socket: &Path) -> std::io::Result<mu_redis::server::Conn> {
    let conn = mu_redis::server::Conn::connect(socket)?;
    conn.stream.set_read_timeout(Some(REPLY_WAIT))?;
    Ok(conn)
}

fn memcached_conn(socket: &Path) -> std::io::Result<mu_memcached::server::Conn> {
    mu_memcached::server::Conn::connect(socket)?.with_timeout(REPLY_WAIT)
}

/// `DEBUG DIGEST` and `DBSIZE` of replica `id`'s own `redis-server`, asked directly (its front
/// refuses `DEBUG`).
pub fn redis_digest(run_dir: &Path, id: u16) -> std::io::Result<(Value, Value)> {
    let socket = mu_redis::server::ServerPaths::new(run_dir, id).socket;
    let mut c = redis_conn(&socket)?;
    let digest = c.call(&[b"DEBUG", b"DIGEST"]).map_err(std::io::Error::other)?;
    let keys = c.call(&[b"DBSIZE"]).map_err(std::io::Error::other)?;
    Ok((digest, keys))
}

/// Replica `id`'s Memcached state: every item its server holds (key, value, flags, CAS; each
/// `mg` reply, sorted) and its front's expiry table (`stats expiries`).
pub fn memcached_state(run_dir: &Path, id: u16) -> std::io::Result<(Vec<String>, String)> {
    let socket = mu_memcached::server::ServerPaths::new(run_dir, id).socket;
    let mut server = memcached_conn(&socket)?;
    let keys = mu_memcached::transfer::read_keys(&mut server).map_err(std::io::Error::other)?;
    let mut items = Vec::new();
    for key in keys {
        let mut request = b"mg ".to_vec();
        request.extend_from_slice(&mu_memcached::text::base64_encode(&key));
        request.extend_from_slice(b" b k v f c\r\n");
        let item = server.call(&request).map_err(std::io::Error::other)?.concat();
        items.push(String::from_utf8_lossy(&item).into_owned());
    }
    items.sort();
    let front = mu_memcached::NodeConfig::front_socket(run_dir, id);
    let expiries = memcached_conn(&front)?
        .call(b"stats expiries\r\n")
        .map_err(std::io::Error::other)?
        .concat();
    Ok((items, String::from_utf8_lossy(&expiries).into_owned()))
}

/// FNV-1a, 64 bits: a digest that is the same in every process (the standard library's hasher
/// is seeded per process). Each write ends with a separator byte, so that ("ab", "c") and
/// ("a", "bc") differ.
struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv64 {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().chain(&[0xff]) {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_leader_it_knows() {
        let redis = "NOTLEADER this replica does not lead the cluster; replica 12 does";
        assert_eq!(named_replica(redis), Some(12));
        let memcached = "SERVER_ERROR not the leader: replica 2 leads, its clients connect to x";
        assert_eq!(named_replica(memcached), Some(2));
        assert_eq!(named_replica("NOTLEADER ...; no leader is known yet"), None);
        assert_eq!(named_replica("SERVER_ERROR not the leader: replica x"), None);
    }

    #[test]
    fn the_digest_separates_its_writes() {
        let (mut one, mut other) = (Fnv64::default(), Fnv64::default());
        one.write(b"ab");
        one.write(b"c");
        other.write(b"a");
        other.write(b"bc");
        assert_ne!(one.0, other.0);
    }
}
