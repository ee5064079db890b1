//! The `mu` command.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod bench_fabric;
mod pin;

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
    Bench {
        #[command(subcommand)]
        which: Bench,
    },
    /// One peer process of a benchmark (started by the benchmark itself).
    #[command(hide = true)]
    BenchPeer(bench_fabric::PeerArgs),
}

#[derive(Subcommand)]
enum Bench {
    /// One-sided operation round trips on the shared-memory fabric, beside a bare cache-line
    /// ping-pong: the floor every later latency figure is divided by.
    Fabric(bench_fabric::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench { which: Bench::Fabric(args) } => bench_fabric::run(args),
        Command::BenchPeer(args) => bench_fabric::peer(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mu: error: {e}");
            ExitCode::FAILURE
        }
    }
}
