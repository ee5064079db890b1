//! The `mu` command.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[macro_use]
extern crate mu_procs;

mod demo;
mod demo_apps;
mod demo_orderbook;
mod demo_shared;
mod sim;
mod sim_lease;
mod sim_seeds;
mod sim_ukharon;
mod sim_ukharon_kv;

#[cfg(feature = "bench")]
use mu_bench as bench;
use mu_daemon::{cluster, kv_cmd, serve, ukharon};

#[derive(Parser)]
#[command(
    name = "mu",
    version,
    about = "Mu: state machine replication for microsecond applications"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmarks.
    #[cfg(feature = "bench")]
    Bench {
        #[command(subcommand)]
        which: bench::Command,
    },
    /// Whole clusters in the deterministic simulator: replay one seed, or sweep many, with
    /// key-value clients, faults drawn from the seed, and every checker on.
    Sim(sim::Args),
    /// One replica of a key-value cluster, serving clients on its Unix socket until SIGINT or
    /// SIGTERM.
    Replica(serve::Args),
    /// A replicated key-value cluster in one command: three replica processes, a workload with
    /// a live progress line, the leader killed, failover time, no acknowledged write lost
    /// (`--app orderbook`, `--app redis`, `--app memcached` for other applications).
    Demo(demo::Args),
    /// A key-value cluster's replicas as background processes on this host: start them, show
    /// their status, stop them.
    Cluster(cluster::Args),
    /// One key-value operation on a running cluster: get, put, del, cas.
    Kv(kv_cmd::Args),
    /// A uKharon membership group's coordinators and members as processes on this host: up,
    /// status, down, one node, and a demo that kills a member.
    Ukharon(ukharon::Args),
    /// One peer process of a benchmark (started by the benchmark itself).
    #[cfg(feature = "bench")]
    #[command(hide = true)]
    BenchPeer(bench::fabric::PeerArgs),
    /// One replica process of a benchmark (started by the benchmark itself).
    #[cfg(feature = "bench")]
    #[command(hide = true)]
    BenchReplica(bench::replica_child::Args),
}

/// What a panic says, where it says it in text.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("")
}

/// What `println!` panics with when stdout fails.
const STDOUT_FAILED: &str = "failed printing to stdout: ";

/// Reports a failed write to stdout in one line rather than as a crash with a backtrace: the
/// reader went away (`mu sim --seed 1 | head`) or the disk is full. The command still stops
/// by unwinding, so what it started (a demo's replica processes) is cleaned up on the way, and
/// `main` then exits with an error's status, not a crash's.
fn quiet_stdout_failures() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = panic_message(info.payload());
        if let Some(error) = message.strip_prefix(STDOUT_FAILED) {
            // Best effort: stderr may be gone too.
            note!("mu: cannot write to stdout ({error}); stopping");
        } else if !message.starts_with("failed printing to stderr: ") {
            // (Where stderr itself fails there is nowhere to say anything.)
            report(info);
        }
    }));
}

/// Ends the process as the argument parser ends it for a command line it refuses (the message
/// and the usage of the subcommand at `path` on stderr, exit status 2), for what only the
/// command can see, such as how many values one argument list holds. Called before the command
/// starts anything, since nothing is dropped on the way out.
pub fn usage_error(path: &[&str], message: String) -> ! {
    use clap::CommandFactory;
    let mut command = Cli::command();
    command.build();
    let mut at = &mut command;
    for name in path {
        at = at.find_subcommand_mut(name).expect("a subcommand of mu");
    }
    at.error(clap::error::ErrorKind::WrongNumberOfValues, message).exit()
}

fn main() -> ExitCode {
    quiet_stdout_failures();
    let cli = Cli::parse();
    // AssertUnwindSafe: nothing the command touched is looked at after a panic; the process
    // ends at once.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cli.command))) {
        Ok(code) => code,
        // Already reported by the hook, in one line.
        Err(payload) if panic_message(&*payload).starts_with(STDOUT_FAILED) => ExitCode::FAILURE,
        Err(payload) => std::panic::resume_unwind(payload),
    }
}

/// Runs one command; what it returns is the process's exit status.
fn run(command: Command) -> ExitCode {
    let result = match command {
        #[cfg(feature = "bench")]
        Command::Bench { which } => bench::run(which),
        Command::Sim(args) if args.reads == "lease" => sim_lease::run(&args),
        Command::Sim(args) if args.protocol == "ukharon" => sim_ukharon::run(&args),
        Command::Sim(args) if args.protocol == "ukharon-kv" => sim_ukharon_kv::run(&args),
        Command::Sim(args) => sim::run(args),
        Command::Replica(args) => serve::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Cluster(args) => cluster::run(args),
        Command::Ukharon(args) => ukharon::run(args),
        Command::Kv(args) => match kv_cmd::run(args, usage_error) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(kv_cmd::EXIT_NO),
            Err(e) => Err(e),
        },
        #[cfg(feature = "bench")]
        Command::BenchPeer(args) => bench::fabric::peer(args),
        #[cfg(feature = "bench")]
        Command::BenchReplica(args) => bench::replica_child::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            note!("mu: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn out_of_range_arguments_are_refused() {
        for args in [
            &["mu", "bench", "replication", "--payload", "0"][..],
            &["mu", "bench", "replication", "--payload", "4097"],
            &["mu", "bench", "replication", "--samples", "0"],
            &["mu", "bench", "replication", "--mode", "sideways"],
            &["mu", "bench", "failover", "--count", "0"],
            &["mu", "bench", "failover", "--mode", "crash"],
            &["mu", "bench", "failover", "--read-period-us", "0"],
            &["mu", "sim", "--seeds", "0"],
            &["mu", "sim", "--seed", "1", "--seeds", "3"],
            &["mu", "sim", "--replicas", "10"],
            &["mu", "sim", "--faults", "crash,meteor"],
            &["mu", "sim", "--faults", ""],
            &["mu", "sim", "--faults", "crash,"],
            &["mu", "sim", "--faults", "none,crash"],
            &["mu", "sim", "--seeds", "1000000001"],
            &["mu", "bench", "replication", "--samples", "18446744073709551615"],
            &["mu", "bench", "replication", "--read-period-us", "1000001"],
            &["mu", "bench", "e2e", "--samples", "18446744073709551615"],
            &["mu", "bench", "fabric", "--crash-samples", "0"],
            &["mu", "bench", "sim", "--profile", "connectx-9"],
            &["mu", "bench", "sim", "--quick"],
            &["mu", "sim", "--protocol", "raft"],
            &["mu", "sim", "--reads", "lazy"],
            &["mu", "sim", "--no-lincheck", "--lincheck", "x"],
            &["mu", "cluster", "up"],
            &["mu", "cluster", "up", "--config", "c.toml", "--timeout-s", "0"],
            &["mu", "cluster", "restart", "--config", "c.toml"],
            &["mu", "kv", "get", "a"],
            &["mu", "kv", "put", "a", "--config", "c.toml"],
            &["mu", "kv", "get", "a", "--config", "c.toml", "--timeout-ms", "0"],
            &["mu", "kv", "cas", "--config", "c.toml"],
            &["mu", "kv", "cas", "a", "b", "c", "d", "--config", "c.toml"],
            &["mu", "ukharon", "up"],
            &["mu", "ukharon", "node", "--config", "u.toml"],
            &["mu", "ukharon", "node", "--config", "u.toml", "--id", "70000"],
            &["mu", "ukharon", "restart", "--config", "u.toml"],
            &["mu", "demo", "--protocol", "raft"],
            &["mu", "demo", "--reads", "cache"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?}");
        }
        for args in [
            &["mu", "bench", "replication", "--payload", "4096", "--quick", "--json"][..],
            &["mu", "bench", "replication", "--mode", "handover", "--samples", "10"],
            &["mu", "bench", "failover", "--mode", "pause", "--count", "1"],
            &["mu", "bench", "failover", "--quick", "--read-period-us", "250"],
            &["mu", "bench", "sim", "--profile", "velos", "--quick", "--json"],
            &["mu", "bench", "sim", "--profile", "mu-osdi2020", "--seed", "3"],
            &["mu", "sim", "--seeds", "200", "--protocol", "mu", "--json"],
            &["mu", "sim", "--seed", "7", "--replicas", "5", "--faults", "crash,restart"],
            &["mu", "sim", "--protocol", "ukharon-kv", "--seeds", "200", "--json"],
            &["mu", "sim", "--protocol", "ukharon-kv", "--seed", "3", "--faults", "crash,drift"],
            &["mu", "sim", "--protocol", "velos", "--reads", "lease", "--seeds", "20"],
            &["mu", "cluster", "up", "--config", "c.toml", "--timeout-s", "30"],
            &["mu", "cluster", "status", "--config", "c.toml", "--json"],
            &["mu", "cluster", "down", "--config", "c.toml", "--purge"],
            &["mu", "kv", "get", "a", "--config", "c.toml", "--timeout-ms", "100"],
            &["mu", "kv", "put", "a", "1", "--config", "c.toml"],
            &["mu", "kv", "del", "a", "--config", "c.toml"],
            &["mu", "kv", "cas", "a", "1", "2", "--config", "c.toml"],
            &["mu", "kv", "cas", "--absent", "a", "2", "--config", "c.toml"],
            &["mu", "demo", "--seconds", "1", "--json"],
            &["mu", "demo", "--protocol", "ukharon", "--json"],
            &["mu", "demo", "--protocol", "velos", "--reads", "lease"],
            &["mu", "replica", "--config", "c.toml", "--id", "0", "--rejoin"],
            &["mu", "ukharon", "up", "--config", "u.toml", "--timeout-s", "30"],
            &["mu", "ukharon", "status", "--config", "u.toml", "--json"],
            &["mu", "ukharon", "down", "--config", "u.toml", "--purge"],
            &["mu", "ukharon", "node", "--config", "u.toml", "--id", "3"],
            &["mu", "ukharon", "demo", "--json"],
        ] {
            assert!(Cli::try_parse_from(args).is_ok(), "{args:?}");
        }
    }
}
