//! Aeron Cluster: three members on loopback, each one JVM (media driver, archive, consensus
//! module and a service container running an echo service), and a client JVM that times one
//! message at a time. The Java side is in `crates/peers/aeron` (`Member`, `EchoService`,
//! `Client`); `scripts/build-aeron-peer.sh` builds it into a jar with Aeron's beside it.
//!
//! One operation is one message sent to the cluster, timed inside the client from before the
//! send until the echo arrives. Aeron Cluster gives a message to the service only once the
//! message is committed (appended to the logs of a majority of the members), and only the
//! leader's echo reaches the client: the sample is what a client pays to know its message was
//! committed and applied. The client is driven through its standard streams, one line per
//! message, and that exchange is outside the timed span. Every member answers on a control port
//! how many messages its service applied and the last one, which the final check reads.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use crate::process::{self, PrivateDir, Server};
use crate::workload;
use crate::{Options, PeerError, Samples, System};

const SYSTEM_NAME: &str = "aeron-cluster";
const DEBIAN_JAVA: &str = "/usr/bin/java";
const MEMBERS_COUNT: usize = 3;

/// Loopback ports each member needs: Aeron's five (ingress, consensus, log, catch-up, archive
/// control) and the control port the final check asks.
const PORTS_PER_MEMBER_COUNT: usize = 6;

/// Where the build puts the jar, relative to this crate, with Aeron's jar in `lib/` beside it.
const JAR_DIR: &str = "aeron/target";
const JAR_NAME: &str = "mu-peers-aeron.jar";

/// Options for every JVM. Aeron's buffers live outside the heap, so a small heap suffices; the
/// serial collector keeps the thread count down on a machine with few cores; Aeron's transport
/// reaches into two JDK packages that Java 17 closes by default. No performance data file is
/// written, so that a killed JVM leaves nothing in the shared temporary directory.
const JVM_OPTIONS: [&str; 7] = [
    "-Xms64m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "-Daeron.print.configuration=false",
];

/// JVM start-up, Aeron's start-up and an election take seconds, more on a loaded machine.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the client may take to answer for one message (it gives up after 10 s itself).
const OPERATION_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the final check waits for a follower to apply the last message: it is committed,
/// but a follower learns of the commit a moment later.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// The running members. Field order matters: members are killed before their directory is
/// removed.
struct Cluster {
    members: Vec<Server>,
    /// Ports of member `i` at `ports[i * PORTS_PER_MEMBER_COUNT..]`, in the order of [`Port`].
    ports: Vec<u16>,
    dir: PrivateDir,
}

/// A member's ports, by their place in its slice of [`Cluster::ports`].
#[derive(Clone, Copy)]
enum Port {
    Ingress = 0,
    Consensus = 1,
    Log = 2,
    Catchup = 3,
    Archive = 4,
    Control = 5,
}

impl Cluster {
    fn port(&self, member: usize, port: Port) -> u16 {
        self.ports[member * PORTS_PER_MEMBER_COUNT + port as usize]
    }

    /// The members in Aeron's format: `id,ingress,consensus,log,catchup,archive|...`.
    fn members_text(&self) -> String {
        let mut text = String::new();
        for member in 0..MEMBERS_COUNT {
            if member > 0 {
                text.push('|');
            }
            write!(text, "{member}").expect("writing to a String");
            for port in [Port::Ingress, Port::Consensus, Port::Log, Port::Catchup, Port::Archive] {
                write!(text, ",127.0.0.1:{}", self.port(member, port))
                    .expect("writing to a String");
            }
        }
        text
    }

    /// The ingress endpoints in the client's format: `0=host:port,1=...`.
    fn ingress_endpoints(&self) -> String {
        (0..MEMBERS_COUNT)
            .map(|member| format!("{member}=127.0.0.1:{}", self.port(member, Port::Ingress)))
            .collect::<Vec<_>>()
            .join(",")
    }
}

pub(crate) fn measure(opts: &Options, progress: &mut dyn FnMut(u64)) -> Result<Samples, PeerError> {
    let java = process::find_binary(SYSTEM_NAME, DEBIAN_JAVA, "java")?;
    let classpath = classpath(&Path::new(env!("CARGO_MANIFEST_DIR")).join(JAR_DIR))?;
    let mut cluster = start_with_retries(&java, &classpath)?;
    let mut client = Client::start(&java, &classpath, &cluster)?;
    let version = client.version.clone();

    let latencies_ns = workload::run(opts, progress, |index| {
        client.time(&workload::value(index, opts.payload_bytes))
    })?;

    let applied_count = opts.warmup.saturating_add(opts.samples);
    let last = workload::value(workload::last_index(opts), opts.payload_bytes);
    verify_members(&mut cluster, applied_count, &last)?;
    drop(client);
    let notes = format!(
        "{MEMBERS_COUNT} members on loopback (one JVM each: media driver, archive, consensus \
         module, echo service; Aeron's default idle strategies; data on tmpfs); one operation = \
         one message from a client JVM, timed until the leader's echo (the message committed by \
         a majority and applied); checked: every member applied all {applied_count} messages, \
         the last one last"
    );
    Ok(Samples { system: System::AeronCluster, latencies_ns, version, notes })
}

/// The class path of the built jar and Aeron's, or [`PeerError::NotInstalled`].
fn classpath(jar_dir: &Path) -> Result<String, PeerError> {
    let jar = jar_dir.join(JAR_NAME);
    let lib = jar_dir.join("lib");
    let aeron_present = std::fs::read_dir(&lib).is_ok_and(|entries| {
        entries.flatten().any(|entry| entry.file_name().to_string_lossy().starts_with("aeron-all"))
    });
    if !jar.is_file() || !aeron_present {
        return Err(PeerError::NotInstalled {
            system: SYSTEM_NAME,
            binary: format!("{} (with Aeron's jar in {})", jar.display(), lib.display()),
            hint: process::INSTALL_HINT.to_string(),
        });
    }
    Ok(format!("{}:{}/*", jar.display(), lib.display()))
}

fn start_with_retries(java: &Path, classpath: &str) -> Result<Cluster, PeerError> {
    let mut attempt = 1;
    loop {
        match start(java, classpath) {
            Err(error)
                if process::is_port_conflict(&error) && attempt < process::START_ATTEMPTS_COUNT =>
            {
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// The JVM options and class path for a JVM whose files go under `dir`.
fn jvm_args(dir: &Path, classpath: &str, class: &str) -> Vec<String> {
    let mut args = process::args(JVM_OPTIONS);
    args.push(format!("-Djava.io.tmpdir={}", dir.display()));
    args.push(format!("-XX:ErrorFile={}/hs_err_%p.log", dir.display()));
    args.extend(process::args(["-cp", classpath, class]));
    args
}

/// Starts the members and waits until one is the leader and the others follow it.
fn start(java: &Path, classpath: &str) -> Result<Cluster, PeerError> {
    let dir = PrivateDir::create(&process::memory_backed_parent(), "mu-peers-aeron")?;
    let ports = process::free_ports(MEMBERS_COUNT * PORTS_PER_MEMBER_COUNT)?;
    let mut cluster = Cluster { members: Vec::with_capacity(MEMBERS_COUNT), ports, dir };
    let members_text = cluster.members_text();
    for member in 0..MEMBERS_COUNT {
        let name = format!("member{member}");
        let member_dir = cluster.dir.subdir(&name)?;
        let mut args = jvm_args(&member_dir, classpath, "mu.peers.aeron.Member");
        args.extend([
            member.to_string(),
            members_text.clone(),
            cluster.port(member, Port::Archive).to_string(),
            cluster.port(member, Port::Control).to_string(),
            member_dir.display().to_string(),
        ]);
        let log_path = cluster.dir.path().join(format!("{name}.log"));
        let server = Server::spawn(&format!("aeron {name}"), java, &args, &log_path, None)?;
        cluster.members.push(server);
    }

    let control_ports: Vec<u16> =
        (0..MEMBERS_COUNT).map(|member| cluster.port(member, Port::Control)).collect();
    process::wait_for_within(
        STARTUP_TIMEOUT,
        "a leader with every other member following it",
        &mut cluster.members,
        || {
            let roles: Vec<String> =
                control_ports.iter().map(|&port| ask(port, "role").ok()).collect::<Option<_>>()?;
            let leaders_count = roles.iter().filter(|role| *role == "LEADER").count();
            let followers_count = roles.iter().filter(|role| *role == "FOLLOWER").count();
            (leaders_count == 1 && followers_count == MEMBERS_COUNT - 1).then_some(())
        },
    )?;
    Ok(cluster)
}

/// Sends one control request to the member on `port` and returns its one-line answer.
fn ask(port: u16, request: &str) -> io::Result<String> {
    let (mut reader, mut writer) = process::connect_loopback(port)?;
    writer.write_all(format!("{request}\n").as_bytes())?;
    let mut answer = String::new();
    if reader.read_line(&mut answer)? == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "no answer"));
    }
    Ok(answer.trim_end().to_string())
}

/// Checks that every member's service applied `applied_count` messages, `last` the last.
fn verify_members(cluster: &mut Cluster, applied_count: u64, last: &[u8]) -> Result<(), PeerError> {
    for member in 0..MEMBERS_COUNT {
        let port = cluster.port(member, Port::Control);
        verify_member(member, port, applied_count, last, VERIFY_TIMEOUT)?;
    }
    Ok(())
}

/// Asks the member on control port `port` what it applied until it answers `applied_count` and
/// `last`, or `timeout` passes.
fn verify_member(
    member: usize,
    port: u16,
    applied_count: u64,
    last: &[u8],
    timeout: Duration,
) -> Result<(), PeerError> {
    let expected = format!("{applied_count} {}", hex(last));
    let deadline = Instant::now() + timeout;
    loop {
        let answer = ask(port, "applied").map_err(|error| {
            PeerError::Failed(format!("aeron member{member}: asking what it applied: {error}"))
        })?;
        if answer == expected {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(PeerError::Failed(format!(
                "aeron member{member} does not have the last write: it answered {answer:?}, \
                 expected {expected:?} (count, then the last message in hexadecimal)"
            )));
        }
        thread::sleep(process::POLL_INTERVAL);
    }
}

/// Lowercase hexadecimal, as the member writes it.
fn hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        write!(text, "{byte:02x}").expect("writing to a String");
    }
    text
}

/// The client JVM, killed and reaped when dropped.
struct Client {
    child: Child,
    stdin: ChildStdin,
    /// Lines of its standard output, read by a thread so that every wait has a time limit.
    lines: Receiver<String>,
    log_path: PathBuf,
    /// "Aeron Cluster 1.44.1 (Java 17...)", as the client printed it once connected.
    version: String,
}

impl Client {
    fn start(java: &Path, classpath: &str, cluster: &Cluster) -> Result<Client, PeerError> {
        let dir = cluster.dir.subdir("client")?;
        let log_path = cluster.dir.path().join("client.log");
        let log = File::create(&log_path).map_err(|error| {
            PeerError::Start(format!("aeron client: creating {}: {error}", log_path.display()))
        })?;
        let mut args = jvm_args(&dir, classpath, "mu.peers.aeron.Client");
        args.extend([cluster.ingress_endpoints(), dir.display().to_string()]);
        let mut child = Command::new(java)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|error| PeerError::Start(format!("aeron client: starting java: {error}")))?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(stdin), Some(stdout)) => (stdin, stdout),
            _ => unreachable!("both streams were asked for as pipes"),
        };
        let (sender, lines) = mpsc::channel();
        thread::spawn(move || {
            // Ends when the client exits (end of its output) or the receiver is gone.
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        let mut client = Client { child, stdin, lines, log_path, version: String::new() };
        let ready = client.next_line(STARTUP_TIMEOUT, "connecting to the cluster")?;
        client.version = ready
            .strip_prefix("ready ")
            .ok_or_else(|| client.failure(&format!("expected \"ready\", got {ready:?}")))?
            .to_string();
        Ok(client)
    }

    /// Sends `message` and returns how long the client waited for its echo.
    fn time(&mut self, message: &[u8]) -> Result<Duration, PeerError> {
        assert!(!message.contains(&b'\n'), "a message is one line to the client");
        let mut line = Vec::with_capacity(message.len() + 1);
        line.extend_from_slice(message);
        line.push(b'\n');
        self.stdin
            .write_all(&line)
            .and_then(|()| self.stdin.flush())
            .map_err(|error| self.failure(&format!("sending a message to the client: {error}")))?;
        let answer = self.next_line(OPERATION_TIMEOUT, "the echo")?;
        let latency_ns: u64 = answer.parse().map_err(|_| {
            self.failure(&format!("waiting for the echo, the client said {answer:?}"))
        })?;
        Ok(Duration::from_nanos(latency_ns))
    }

    fn next_line(&self, timeout: Duration, what: &str) -> Result<String, PeerError> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Timeout) => {
                Err(self.failure(&format!("no answer within {} s for {what}", timeout.as_secs())))
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err(self.failure(&format!("the client exited before {what}")))
            }
        }
    }

    fn failure(&self, what: &str) -> PeerError {
        PeerError::Failed(format!(
            "aeron client: {what}; last lines of its log:\n{}",
            process::log_tail(&self.log_path, 20)
        ))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // Killing fails only if the client has already exited; waiting reaps it either way.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_and_two_digits_a_byte() {
        assert_eq!(hex(b"\x00\x0fA~"), "000f417e");
        assert_eq!(hex(b""), "");
    }

    /// A stand-in for a member's control port that answers every request with `answer`.
    fn fake_member(answer: &'static str) -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut request = String::new();
                if BufReader::new(&stream).read_line(&mut request).is_ok() {
                    let _ = stream.write_all(format!("{answer}\n").as_bytes());
                }
            }
        });
        port
    }

    #[test]
    fn verify_member_needs_the_count_and_the_last_message() {
        let port = fake_member("2 6162");
        let short = Duration::from_millis(50);
        verify_member(0, port, 2, b"ab", short).unwrap();
        let error = verify_member(0, port, 3, b"ab", short).unwrap_err().to_string();
        assert!(error.contains("does not have the last write"), "{error}");
        assert!(verify_member(0, port, 2, b"ac", short).is_err());
    }

    #[test]
    fn members_text_lists_five_endpoints_per_member() {
        let dir = PrivateDir::create(&std::env::temp_dir(), "mu-peers-test").unwrap();
        let ports = (0..18).map(|port| 20_000 + port).collect();
        let cluster = Cluster { members: Vec::new(), ports, dir };
        let text = cluster.members_text();
        let members: Vec<&str> = text.split('|').collect();
        assert_eq!(members.len(), MEMBERS_COUNT);
        assert_eq!(
            members[1],
            "1,127.0.0.1:20006,127.0.0.1:20007,127.0.0.1:20008,127.0.0.1:20009,127.0.0.1:20010"
        );
        assert_eq!(
            cluster.ingress_endpoints(),
            "0=127.0.0.1:20000,1=127.0.0.1:20006,2=127.0.0.1:20012"
        );
    }

    #[test]
    fn missing_jar_is_not_installed() {
        let error = classpath(Path::new("/nonexistent/mu-peers-no-jar")).unwrap_err();
        assert!(matches!(error, PeerError::NotInstalled { system: SYSTEM_NAME, .. }));
        assert!(error.to_string().contains("install-peers.sh"), "{error}");
    }
}
