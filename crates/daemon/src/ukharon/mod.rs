//! `mu ukharon`: a uKharon membership group's coordinators and members as processes on shm
//! or on libfabric (`fabric = "ofi"`), from a TOML file ([`config`]), like `mu cluster` for
//! replicas.
//!
//! * `up` starts every node in the background and returns once every member is active in one
//!   view; `status` shows what each node publishes (its latest view, whether it leads or holds
//!   a lease, as a table or JSON); `down` stops them and removes their files.
//! * `node` is the process each node runs ([`node`]): a coordinator or a member by its id.
//! * `demo` starts a group, kills a member and shows the new view and how long it took.
//!
//! Run files, in the file's `run_dir`: `ukharon-<id>.pid`, `ukharon-<id>.log`,
//! `ukharon-<id>.status.json`, and, on shm, the fabric's `n<id>.*`.

pub mod config;
pub mod demo;
mod down;
pub mod local;
pub mod node;
mod pid;
pub mod status;
mod up;

use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: UkharonCommand,
}

#[derive(clap::Subcommand)]
pub enum UkharonCommand {
    /// Start every coordinator and member of the file in the background; returns once every
    /// member is active in one view.
    Up {
        /// The group's configuration file (TOML).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Seconds to wait for the members' view.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
        timeout_s: u64,
    },
    /// Each node's latest view, whether a member holds a lease now, which coordinator leads.
    Status {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Print a JSON array: each node's status with its `state` and `up`.
        #[arg(long)]
        json: bool,
    },
    /// Stop every node (SIGTERM: members leave; SIGKILL after 5 s) and remove their files.
    Down {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Also remove the logs, and the run directory once nothing else is in it.
        #[arg(long)]
        purge: bool,
    },
    /// One node of the group (what `up` starts): a coordinator or a member by its id.
    Node(node::NodeArgs),
    /// Three coordinators and three members as processes on shm; one member killed; the new
    /// view and how long until every live member was active in it.
    Demo(demo::DemoArgs),
}

pub fn run(args: Args) -> Result<(), String> {
    match args.command {
        UkharonCommand::Up { config, timeout_s } => up::up(&config, Duration::from_secs(timeout_s)),
        UkharonCommand::Status { config, json } => status::status(&config, json),
        UkharonCommand::Down { config, purge } => down::down(&config, purge),
        UkharonCommand::Node(args) => node::run(&args),
        UkharonCommand::Demo(args) => demo::demo(&args),
    }
}
