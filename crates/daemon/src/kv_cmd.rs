//! `mu kv get|put|del|cas ... --config FILE`: one key-value operation on a running cluster,
//! through the client library (which finds the leader and retries with the same sequence
//! number, so an operation takes effect once).
//!
//! What it prints, on stdout:
//!
//! | operation | prints | exit status |
//! |---|---|---|
//! | `get KEY` | the value (its bytes, then a newline) | 0 |
//! | `get KEY`, key absent | nothing (`(absent)` on stderr) | [`EXIT_NO`] |
//! | `put KEY VALUE` | `OK` | 0 |
//! | `del KEY` | `deleted`, or `absent` if there was no such key | 0 |
//! | `cas KEY EXPECTED VALUE` | `swapped` | 0 |
//! | ... when the key does not hold EXPECTED | `not swapped` | [`EXIT_NO`] |
//! | `cas --absent KEY VALUE` | as above, with "the key is absent" as the condition | |
//!
//! Every value given on the command line is literal: "the key is absent" is said with
//! `--absent`, never with a special value, so that any value can be expected. An error (the
//! cluster unreachable or without a leader within the timeout, a refused or invalid request)
//! is a message on stderr and exit status 1; the outcome of a write that timed out is unknown.

use mu_service::{Client, ClientError};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// The exit status of a `get` that found no value and of a `cas` that did not swap: the
/// operation worked, and its answer is "no" (1 is an error, 2 a usage error).
pub const EXIT_NO: u8 = 3;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    op: KvOp,
}

#[derive(clap::Subcommand)]
pub enum KvOp {
    /// Print KEY's value; nothing (exit status 3) if it is absent.
    Get {
        /// The key: any text of up to 1024 bytes (the empty key too).
        key: String,
        #[command(flatten)]
        target: Target,
    },
    /// Set KEY to VALUE.
    Put {
        /// The key: any text of up to 1024 bytes (the empty key too).
        key: String,
        /// The value, taken literally (as large as the cluster's log.slot_bytes allows).
        value: String,
        #[command(flatten)]
        target: Target,
    },
    /// Remove KEY (prints whether it was there).
    Del {
        /// The key: any text of up to 1024 bytes (the empty key too).
        key: String,
        #[command(flatten)]
        target: Target,
    },
    /// Set KEY to VALUE if it holds EXPECTED (or, with --absent, if it is absent); exit status
    /// 3 if it did not.
    #[command(override_usage = "mu kv cas KEY EXPECTED VALUE --config FILE\n       \
                          mu kv cas --absent KEY VALUE --config FILE")]
    Cas {
        /// KEY EXPECTED VALUE, or KEY VALUE with --absent.
        #[arg(value_name = "ARG", num_args = 1..=3, required = true)]
        args: Vec<String>,
        /// Swap only if KEY is absent (EXPECTED is then left out).
        #[arg(long)]
        absent: bool,
        #[command(flatten)]
        target: Target,
    },
}

/// Which cluster, and how long to wait for it.
#[derive(clap::Args)]
pub struct Target {
    /// The cluster's configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Give up after this many milliseconds without an answer.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    timeout_ms: u64,
}

/// Ends the process as the argument parser ends it for a command line it refuses (the message
/// and the usage of the subcommand at the path given, exit status 2): `mu kv cas` can tell only
/// once parsed how many values it was given.
pub type UsageError = fn(&[&str], String) -> !;

/// Runs the operation and prints its outcome. `Ok(false)`: the answer is "no" (a `get` of an
/// absent key, a `cas` that did not swap), for the exit status [`EXIT_NO`].
pub fn run(args: Args, usage_error: UsageError) -> Result<bool, String> {
    let mut out = std::io::stdout().lock();
    let printed = |r: std::io::Result<()>| r.map_err(|e| format!("writing the answer: {e}"));
    match args.op {
        KvOp::Get { key, target } => {
            let mut client = connect(&target)?;
            match client.get(key.as_bytes()).map_err(|e| explain("get", &key, e, &target))? {
                Some(value) => {
                    printed(out.write_all(&value).and_then(|()| out.write_all(b"\n")))?;
                    Ok(true)
                }
                None => {
                    note!("(absent)");
                    Ok(false)
                }
            }
        }
        KvOp::Put { key, value, target } => {
            let mut client = connect(&target)?;
            client
                .put(key.as_bytes(), value.as_bytes())
                .map_err(|e| explain("put", &key, e, &target))?;
            printed(writeln!(out, "OK"))?;
            Ok(true)
        }
        KvOp::Del { key, target } => {
            let mut client = connect(&target)?;
            let existed =
                client.delete(key.as_bytes()).map_err(|e| explain("del", &key, e, &target))?;
            printed(writeln!(out, "{}", if existed { "deleted" } else { "absent" }))?;
            Ok(true)
        }
        KvOp::Cas { args, absent, target } => {
            let (key, expected, value) = match (absent, args.as_slice()) {
                (false, [key, expected, value]) => (key, Some(expected), value),
                (true, [key, value]) => (key, None, value),
                // The wrong number of arguments is a usage error, as the parser's own are.
                (false, a) => usage_error(
                    &["kv", "cas"],
                    format!(
                        "cas takes KEY EXPECTED VALUE, or --absent KEY VALUE; got {} argument{}",
                        a.len(),
                        if a.len() == 1 { "" } else { "s" }
                    ),
                ),
                (true, a) => usage_error(
                    &["kv", "cas"],
                    format!(
                        "cas --absent takes KEY VALUE (no EXPECTED: the key must be absent); got \
                         {} argument{}",
                        a.len(),
                        if a.len() == 1 { "" } else { "s" }
                    ),
                ),
            };
            let mut client = connect(&target)?;
            let swapped = client
                .cas(key.as_bytes(), expected.map(|e| e.as_bytes()), value.as_bytes())
                .map_err(|e| explain("cas", key, e, &target))?;
            printed(writeln!(out, "{}", if swapped { "swapped" } else { "not swapped" }))?;
            Ok(swapped)
        }
    }
}

fn connect(target: &Target) -> Result<Client, String> {
    let config = crate::config::load_config(&target.config)?;
    // With no socket at all, nothing runs on this host: say so now rather than after the
    // timeout (clients of replicas on other hosts, `[clients]`, cannot tell).
    let local_only = config.clients.is_none();
    // `try_exists` tells "no such file" from "cannot look" (a run directory of another user):
    // only the first means nothing runs.
    let absent = |socket: &std::path::Path| matches!(socket.try_exists(), Ok(false));
    if local_only && config.socket_endpoints().iter().all(|(_, socket)| absent(socket)) {
        return Err(format!(
            "the cluster is not running: no replica socket in {} (start it with `mu cluster up \
             --config {}`)",
            config.run_dir.display(),
            target.config.display()
        ));
    }
    // Over the fabric where the cluster's transport is.
    let mut client = config.client()?;
    client.set_timeout(Duration::from_millis(target.timeout_ms));
    Ok(client)
}

/// The client's error, with what was asked and what to do about it.
fn explain(op: &str, key: &str, e: ClientError, target: &Target) -> String {
    let hint = match &e {
        ClientError::Timeout { .. } => format!(
            " (is the cluster up? see `mu cluster status --config {}`{})",
            target.config.display(),
            if op == "get" { "" } else { "; the write may or may not have taken effect" }
        ),
        ClientError::Refused(_) | ClientError::Invalid(_) => String::new(),
    };
    format!("{op} {key:?}: {e}{hint}")
}
