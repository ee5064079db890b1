//! `mu ukharon node --config FILE --id N`: one node of a uKharon group, a coordinator or a
//! member by its id, on the file's fabric (shm or libfabric), until SIGINT or SIGTERM (a member then leaves,
//! waiting up to a second for a view without it). It writes its pid file and, every few
//! milliseconds, its status (see [`super::status`]).

use super::config::{FabricChoice, Role, UkharonConfig};
use super::status::{CliqueSummary, NodeStatus, ViewSummary, HISTORY_KEPT};
use crate::interrupt;
use mu_fabric::{Fabric, NodeId};
use mu_fabric_shm::{ShmConfig, ShmFabric};
use mu_membership::channels::{Shifted, SHIFT_TO_FOUR_CHANNELS};
use mu_membership::{CoordinatorService, JoinOptions, Membership, Polling};
use mu_procs::clock::monotonic_ns;
use mu_ukharon::restart::Memory;
use mu_ukharon::view::View;
use std::path::PathBuf;
use std::time::Duration;

/// What runs on the fabric (see `ShmConfig::protocol`): a Mu replica refuses the directory.
pub const SHM_PROTOCOL: &str = "ukharon/1";
/// How often a node writes its status.
const STATUS_PERIOD: Duration = Duration::from_millis(5);
/// How long a member that is asked to stop waits for a view without it.
const LEAVE_WAIT: Duration = Duration::from_secs(1);

#[derive(clap::Args)]
pub struct NodeArgs {
    /// The group's configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// This node's id: one of the file's coordinators or members.
    #[arg(long)]
    pub id: u16,
    /// Exit when this process exits (for the demo's and tests' children).
    #[arg(long, hide = true)]
    pub parent: Option<u32>,
    /// A coordinator that starts with the whole group, which has decided nothing yet (`mu
    /// ukharon up` passes it). Without it a coordinator rejoins: the fabric kept none of its
    /// memory across the restart, so it first reads the other coordinators' words and abstains
    /// wherever it may have answered before. Restart one coordinator at a time.
    #[arg(long)]
    pub new_group: bool,
}

pub fn run(args: &NodeArgs) -> Result<(), String> {
    if let Some(parent) = args.parent {
        mu_procs::parent::die_with_parent(parent)?;
    }
    interrupt::catch();
    let config = UkharonConfig::load(&args.config)?;
    let id = args.id;
    let role = config.role(id).ok_or_else(|| {
        format!("node {id} is neither a coordinator nor a member in {}", args.config.display())
    })?;
    if args.new_group && role != Role::Coordinator {
        return Err(format!(
            "node {id}: --new-group is for coordinators, and node {id} is a {}",
            role.name()
        ));
    }
    config.prepare_run_dir()?;
    let _pid = super::pid::write_own(&config, id)?;
    let memory = if args.new_group { Memory::Remembered } else { Memory::Forgotten };
    let fabric_error = |e: mu_fabric::FabricError| format!("node {id}: fabric: {e}");
    match &config.fabric {
        FabricChoice::Shm => {
            let mut shm = ShmConfig::new(&config.run_dir, config.membership.cluster, NodeId(id));
            shm.protocol = SHM_PROTOCOL.into();
            let shm = ShmFabric::create(shm).map_err(fabric_error)?;
            run_role(&config, id, role, shm, memory)
        }
        #[cfg(feature = "ofi")]
        FabricChoice::Ofi { .. } => {
            let ofi = config.ofi_config(id).expect("an ofi group");
            let ofi = mu_fabric_ofi::OfiFabric::open(ofi).map_err(fabric_error)?;
            run_role(&config, id, role, ofi, memory)
        }
        #[cfg(not(feature = "ofi"))]
        FabricChoice::Ofi { .. } => Err(crate::fabric_config::OFI_NOT_BUILT.into()),
    }
}

/// Node `id` in its `role` on `fabric`, which offers four channels per pair of nodes (shm and
/// ofi both): the membership's channels are moved onto them ([`Shifted`]). A coordinator
/// starts with `memory`.
fn run_role<F: Fabric>(
    config: &UkharonConfig,
    id: u16,
    role: Role,
    fabric: F,
    memory: Memory,
) -> Result<(), String> {
    let fabric = Shifted::new(fabric, SHIFT_TO_FOUR_CHANNELS);
    let polling = Polling::from_gap_ns(config.poll_gap_ns);
    match role {
        Role::Coordinator => coordinator(config, id, fabric, polling, memory),
        Role::Member => member(config, id, fabric, polling, Role::Member),
        Role::Cache => member(config, id, fabric, polling, Role::Cache),
    }
}

fn base_status(id: u16, role: Role) -> NodeStatus {
    NodeStatus {
        id,
        role,
        pid: std::process::id(),
        written_ns: 0,
        view: None,
        leading: false,
        clique: None,
        uid: None,
        active: false,
        spans: Vec::new(),
        learnt: Vec::new(),
        history: Vec::new(),
        problem: None,
    }
}

pub(crate) fn coordinator<F: Fabric>(
    config: &UkharonConfig,
    id: u16,
    fabric: Shifted<F>,
    polling: Polling,
    memory: Memory,
) -> Result<(), String> {
    // Coordinators are not members (they run no node core): the first view is empty and
    // members join it.
    let initial =
        View::initial(config.membership.cluster, Vec::new(), None, config.membership.lease_ns);
    let seed = monotonic_ns() ^ u64::from(id);
    let membership = config.membership.clone();
    let service =
        CoordinatorService::start_with_memory(fabric, membership, initial, seed, polling, memory)?;
    let path = config.status_path(id);
    while interrupt::check().is_ok() {
        if !service.is_running() {
            return Err(format!("coordinator {id}: its thread stopped"));
        }
        let s = service.status();
        let mut status = base_status(id, Role::Coordinator);
        status.view = s.latest.as_ref().map(ViewSummary::of);
        status.leading = s.leading;
        status.clique = s.last_clique.as_ref().map(CliqueSummary::of);
        status.problem = match s.rejoining {
            true => Some(format!(
                "rejoining: restarted without its memory, it reads the words of {} other \
                 coordinators, then abstains until the views pass its bound; stop no other \
                 coordinator meanwhile (a whole group that starts anew starts its coordinators \
                 with --new-group, as `mu ukharon up` does)",
                config.membership.coordinators.len() - config.membership.coordinators.len() / 2
            )),
            false => s.last_problem,
        };
        status.written_ns = monotonic_ns();
        status.write(&path)?;
        std::thread::sleep(STATUS_PERIOD);
    }
    service.stop();
    Ok(())
}

/// A member, or a lease cache (`role`): a node core in a thread, its status written
/// periodically.
fn member<F: Fabric>(
    config: &UkharonConfig,
    id: u16,
    fabric: Shifted<F>,
    polling: Polling,
    role: Role,
) -> Result<(), String> {
    let options = JoinOptions { polling, ..JoinOptions::default() };
    let (membership, lease) = (config.membership.clone(), config.lease);
    let membership = match role {
        Role::Cache => Membership::serve_cache(fabric, membership, lease, options),
        _ => Membership::start(fabric, membership, lease, options),
    };
    let membership = membership.map_err(|e| format!("{} {id}: {e}", role.name()))?;
    let path = config.status_path(id);
    let views = membership.views();
    let mut history: Vec<ViewSummary> = Vec::new();
    let mut write = |m: &Membership| -> Result<(), String> {
        history.extend(views.try_iter().map(|v| ViewSummary::of(&v)));
        history.drain(..history.len().saturating_sub(HISTORY_KEPT));
        let latest = m.latest();
        let mut status = base_status(id, role);
        status.active = latest.as_ref().is_some_and(|v| m.active(v));
        status.view = latest.as_ref().map(ViewSummary::of);
        status.uid = m.member().map(|m| m.uid);
        status.spans = m.active_spans();
        status.learnt = m.learnt_times();
        status.history = history.clone();
        status.problem = m.last_problem();
        status.written_ns = monotonic_ns();
        status.write(&path)
    };
    while interrupt::check().is_ok() {
        write(&membership)?;
        std::thread::sleep(STATUS_PERIOD);
    }
    if role == Role::Member {
        if let Err(e) = membership.leave(LEAVE_WAIT) {
            note!("mu ukharon node {id}: leaving: {e}");
        }
    }
    Ok(())
}
