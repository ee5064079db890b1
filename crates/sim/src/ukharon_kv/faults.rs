//! The faults of a uKharon-KV run: the uKharon sim's ([`crate::ukharon::UkFaults`]), with
//! member faults that keep the group's state (a primary-backup group tolerates every member
//! but one holding the state failing, not all: [`KvCluster::may_lose`]), the primary chosen as
//! victim now and then, and the primary crashed together with the leading coordinator; cut and
//! delayed links and lease changes last one step. A member's data plane shares its process's fate ([`KvCluster::sync_data_plane`]).

use super::cluster::KvCluster;
use crate::ukharon::{self, victims, Choices, UkFaults};
use mu_fabric::NodeId;
use mu_fabric_sim::LinkDelay;

/// One fault step: picks an enabled fault and where it strikes. Whether one was injected.
pub(crate) fn inject(
    kv: &mut KvCluster,
    faults: UkFaults,
    choices: &mut Choices,
) -> Result<Option<&'static str>, String> {
    let mut kinds = victims::kinds(faults);
    if faults.crash && faults.coordinator {
        kinds.push("primary-and-leader");
    }
    // While a member lacks the state, nothing else strikes: restarts (joins) and a stopped
    // member resumed only.
    kinds.retain(|&name| group_whole(kv) || matches!(name, "restart" | "pause"));
    if kinds.is_empty() {
        return Ok(None);
    }
    heal_transient(kv);
    let kind = kinds[choices.below(kinds.len() as u64) as usize];
    let injected = match kind {
        "crash" => crash(kv, choices)?,
        "restart" => victims::restart_crashed(&mut kv.uk, choices)?,
        "pause" => pause(kv, choices)?,
        "delay" => delay(kv, choices),
        "partition" => partition(kv, choices),
        "lease" => ask_lease(kv, choices),
        "coordinator" => ukharon::crash_coordinator(&mut kv.uk, choices)?,
        "coordinator-restart" => ukharon::restart_coordinator(&mut kv.uk, choices)?,
        _ => primary_and_leader(kv)?,
    };
    kv.sync_data_plane()?;
    Ok(injected.then_some(kind))
}

/// Heals the links cut or delayed by the step before, and gives back the configured lease to
/// the members that asked for another. Such faults last one step here: one left in place
/// strikes again later, when a member joins across it, and may then remove the one member
/// holding the state and keep the fresh one.
fn heal_transient(kv: &mut KvCluster) {
    let data = &kv.data;
    kv.transient.heal(&mut kv.uk, kv.offset, |m| data.contains_key(&m));
}

/// A running member asks for another lease duration (§6.3: compatible views), until the
/// next step. A short lease that stays may get a member removed later, the one holding the
/// state among them.
fn ask_lease(kv: &mut KvCluster, choices: &mut Choices) -> bool {
    let running: Vec<u16> = kv.member_ids().into_iter().filter(|&m| kv.running(m)).collect();
    let asked = victims::ask_lease(&mut kv.uk, choices, &running);
    kv.transient.leases.extend(asked);
    asked.is_some()
}

/// The members a crash or a stop may strike: while the group is whole, those that run and
/// whose loss it survives, the primary of the latest view alone when `choices` says so.
fn members_to_strike(kv: &KvCluster, choices: &mut Choices) -> Vec<u16> {
    if !group_whole(kv) {
        return Vec::new();
    }
    let running: Vec<u16> = kv.member_ids().into_iter().filter(|&m| kv.running(m)).collect();
    let losable: Vec<u16> = running.into_iter().filter(|&m| kv.may_lose(m)).collect();
    let primary = kv.uk.log.latest().and_then(|v| v.primary);
    match primary.filter(|p| losable.contains(p)) {
        Some(p) if choices.below(2) == 0 => vec![p],
        _ => losable,
    }
}

/// Whether every member of the latest view holds the state: only then does a fault strike a
/// member or its links. The membership may remove a member for a fault that did not aim at it
/// (a delayed link, a stopped neighbour in the heartbeat ring), and one removed while the
/// others lack a whole state would leave the view's primary, the oldest member, without one.
fn group_whole(kv: &KvCluster) -> bool {
    let view = kv.uk.log.latest();
    view.is_some_and(|v| v.nodes().all(|m| kv.holds_state(m)))
}

/// Crashes a member whose loss the group survives (the primary half the time it may), or,
/// now and then, a cache (one stays up).
fn crash(kv: &mut KvCluster, choices: &mut Choices) -> Result<bool, String> {
    let Some(n) = victims::crash_victim(&kv.uk, choices, |c| members_to_strike(kv, c)) else {
        return Ok(false);
    };
    kv.uk.crash_node(n)?;
    Ok(true)
}

/// Stops a member whose loss the group survives (the primary half the time it may), or
/// resumes a stopped one. A stopped primary keeps its requests and answers none of them once
/// it runs again in a view that is over.
fn pause(kv: &mut KvCluster, choices: &mut Choices) -> Result<bool, String> {
    let picked = victims::pause_victim(&kv.uk, choices, |c| members_to_strike(kv, c));
    let Some((n, pause)) = picked else { return Ok(false) };
    kv.uk.set_paused(n, pause)?;
    Ok(true)
}

/// A link gets an extra delay (up to 20 µs): between two nodes of the membership and, where
/// both are members, between their data nodes too, until the next step. One that touches a
/// member only while the group is whole.
fn delay(kv: &mut KvCluster, choices: &mut Choices) -> bool {
    let count = u64::from(kv.uk.config.nodes_max);
    let (a, b) = (choices.below(count) as u16, choices.below(count) as u16);
    let delay = LinkDelay { extra_ns: choices.below(20_000), jitter_ns: choices.below(5_000) };
    let members = kv.data.contains_key(&a) || kv.data.contains_key(&b);
    if members && !group_whole(kv) {
        return false;
    }
    kv.uk.world.set_link_delay(NodeId(a), NodeId(b), delay);
    kv.transient.links.push((a, b));
    if kv.data.contains_key(&a) && kv.data.contains_key(&b) {
        let (da, db) = (kv.data_node(a), kv.data_node(b));
        kv.uk.world.set_link_delay(da, db, delay);
    }
    true
}

/// Cuts both planes' links between two live members until the next step. A cut may get
/// either removed: only while the group is whole.
fn partition(kv: &mut KvCluster, choices: &mut Choices) -> bool {
    let Some((a, b)) = victims::pick_two(choices, &kv.uk.live_nodes()) else { return false };
    if !group_whole(kv) {
        return false;
    }
    kv.uk.world.partition(NodeId(a), NodeId(b));
    kv.set_data_partition(a, b, true);
    kv.transient.links.push((a, b));
    true
}

/// The primary and the leading coordinator crash at once (the coordinators that are left
/// elect a leader, which must remove the primary).
fn primary_and_leader(kv: &mut KvCluster) -> Result<bool, String> {
    let Some(primary) = kv.uk.log.latest().and_then(|v| v.primary) else { return Ok(false) };
    let leader = (0..kv.uk.coordinators.len()).find(|&c| {
        !kv.uk.coordinator_paused[c]
            && kv.uk.coordinators[c].as_ref().is_some_and(|d| d.is_leading())
    });
    let Some(leader) = leader else { return Ok(false) };
    let rejoining =
        (0..kv.uk.coordinators.len()).any(|i| i != leader && kv.uk.coordinator_still_rejoining(i));
    if !group_whole(kv)
        || !kv.may_lose(primary)
        || !ukharon::may_stop_coordinator(&kv.uk, leader)
        || rejoining
    {
        return Ok(false);
    }
    kv.uk.crash_coordinator(leader)?;
    kv.uk.crash_node(primary)?;
    Ok(true)
}
