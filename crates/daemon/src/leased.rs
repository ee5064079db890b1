//! A Mu or Velos replica with leased reads (`reads = "lease"`, `docs/protocols/lease-reads.md`):
//! its node of the cluster's uKharon group (the coordinators are `mu replica` processes too,
//! run as uKharon-KV's are, [`crate::ukharon_kv::run`]), and the backend that answers under
//! the group's leases. The membership's shm fabric is `<run_dir>/membership`, the replica's
//! own is `run_dir`, both with the replica's id: the view's primary is the replica of that id.

use crate::ukharon_kv::{membership_fabric, private_dir, JOIN_WAIT};
use crate::ukharon_kv_group::{group, membership_dir};
use mu_membership::{JoinOptions, Membership, Polling};
use mu_replica::Replica;
use mu_service::{Backend, ClusterConfig, LeasedBackend, ReplicaBackend, SharedMachine};
use mu_ukharon::view::View;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

/// Replica `id`'s node joins the cluster's group; returns it with every view it learns from its
/// admission on. Waits for the coordinators (`mu cluster up` starts them first).
pub fn join(config: &ClusterConfig, id: u16) -> Result<(Membership, Receiver<View>), String> {
    let group = group(config)?;
    private_dir(&membership_dir(config))?;
    let polling = Polling::from_gap_ns(group.poll_gap_ns);
    let fabric = membership_fabric(&group, id)?;
    let options = JoinOptions { polling, timeout: JOIN_WAIT, incarnation: None };
    Membership::join_watching(fabric, group.membership.clone(), group.lease, options)
        .map_err(|e| format!("replica {id}: joining the group: {e}"))
}

/// The backend of a replica: under the group's leases where it `joined` one, through the log
/// otherwise.
pub fn backend(
    replica: Arc<Replica>,
    machine: SharedMachine,
    joined: Option<(Membership, Receiver<View>)>,
) -> Result<Arc<dyn Backend>, String> {
    let inner = ReplicaBackend { replica, machine };
    Ok(match joined {
        Some((membership, views)) => Arc::new(LeasedBackend::start(inner, membership, views)?),
        None => Arc::new(inner),
    })
}
