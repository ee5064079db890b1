//! The faults of a leased-reads run: the uKharon sim's ([`crate::ukharon::UkFaults`]) applied
//! to whole member processes (membership node and replica together), never more than a
//! minority of the replicas out at once (crashed, stopped, or restarted and not counted in
//! majorities yet: [`LeaseCluster::may_lose_one`]), the primary chosen as victim half the time
//! it may be; cut and delayed links last one step. Local reads stopped between their two checks
//! come with `pause` ([`super::server`]). Lease requests last one step too.

use super::cluster::LeaseCluster;
use crate::ukharon::{self, Choices, UkFaults};
use mu_fabric::NodeId;
use mu_fabric_sim::LinkDelay;

/// One fault step: picks an enabled fault and where it strikes. The fault injected, if any.
pub(crate) fn inject(
    c: &mut LeaseCluster,
    faults: UkFaults,
    choices: &mut Choices,
) -> Result<Option<&'static str>, String> {
    let f = faults;
    let kinds: Vec<&'static str> = [
        (f.crash, "crash"),
        (f.restart, "restart"),
        (f.pause, "pause"),
        (f.delay, "delay"),
        (f.partition, "partition"),
        (f.lease, "lease"),
        (f.coordinator, "coordinator"),
        (f.coordinator_restart, "coordinator-restart"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if kinds.is_empty() {
        return Ok(None);
    }
    heal_transient(c);
    let kind = kinds[choices.below(kinds.len() as u64) as usize];
    let injected = match kind {
        "crash" => crash(c, choices)?,
        "restart" => restart(c, choices)?,
        "pause" => pause(c, choices)?,
        "delay" => delay(c, choices),
        "partition" => partition(c, choices),
        "lease" => ask_lease(c, choices),
        "coordinator" => ukharon::crash_coordinator(&mut c.uk, choices)?,
        _ => ukharon::restart_coordinator(&mut c.uk, choices)?,
    };
    c.sync_replicas()?;
    Ok(injected.then_some(kind))
}

/// A running member asks for another lease duration (§6.3: compatible views) until the next
/// step. One left in place keeps the member asking for it while the views carry another
/// member's, and a member asks for nothing else meanwhile: not to hand the primary role on.
fn ask_lease(c: &mut LeaseCluster, choices: &mut Choices) -> bool {
    let running: Vec<u16> = c.member_ids().into_iter().filter(|&m| c.running(m)).collect();
    if running.is_empty() {
        return false;
    }
    let n = ukharon::pick(choices, &running);
    let lease_ns = [10_000, 20_000, 40_000][choices.below(3) as usize];
    let Some(core) = c.uk.nodes.get_mut(&n).and_then(|n| n.core.as_mut()) else {
        return false;
    };
    core.ask_lease(lease_ns);
    c.transient.leases.push(n);
    true
}

/// Heals the links cut or delayed by the step before, on both planes, and gives the members
/// that asked for another lease the configured one back.
pub(crate) fn heal_transient(c: &mut LeaseCluster) {
    let members = &c.members;
    c.transient.heal(&mut c.uk, c.offset, |m| members.contains_key(&m));
}

/// Running members whose loss leaves a majority of replicas, the latest view's primary alone
/// half the time it is one of them.
fn victims(c: &LeaseCluster, choices: &mut Choices) -> Vec<u16> {
    if !c.may_lose_one() {
        return Vec::new();
    }
    let running: Vec<u16> = c.member_ids().into_iter().filter(|&m| c.running(m)).collect();
    let primary = c.uk.log.latest().and_then(|v| v.primary);
    match primary.filter(|p| running.contains(p)) {
        Some(p) if choices.below(2) == 0 => vec![p],
        _ => running,
    }
}

/// Crashes a member process (membership node and replica), or now and then a cache (one
/// stays up).
fn crash(c: &mut LeaseCluster, choices: &mut Choices) -> Result<bool, String> {
    let caches = c.uk.live_caches();
    let victims =
        if caches.len() >= 2 && choices.below(4) == 0 { caches } else { victims(c, choices) };
    if victims.is_empty() {
        return Ok(false);
    }
    let n = ukharon::pick(choices, &victims);
    c.uk.world.crash(NodeId(n)).map_err(|e| e.to_string())?;
    c.uk.nodes.get_mut(&n).expect("a node").core = None;
    Ok(true)
}

/// Starts a crashed node again as a new process: a member joins uKharon under a new unique id
/// and its replica restarts without its log (`eligible: false`).
fn restart(c: &mut LeaseCluster, choices: &mut Choices) -> Result<bool, String> {
    let crashed: Vec<u16> =
        c.uk.nodes.iter().filter(|(_, n)| n.core.is_none()).map(|(&id, _)| id).collect();
    if crashed.is_empty() {
        return Ok(false);
    }
    c.uk.restart(ukharon::pick(choices, &crashed))?;
    Ok(true)
}

/// Stops a member process, or resumes a stopped one (not one stalled in a local read: its
/// stall ends on its own).
fn pause(c: &mut LeaseCluster, choices: &mut Choices) -> Result<bool, String> {
    let paused: Vec<u16> = c
        .member_ids()
        .into_iter()
        .filter(|m| c.uk.nodes[m].core.is_some() && c.uk.nodes[m].paused)
        .filter(|m| !c.stalls.contains_key(m))
        .collect();
    if !paused.is_empty() && choices.below(2) == 0 {
        c.set_paused(ukharon::pick(choices, &paused), false)?;
        return Ok(true);
    }
    let victims = victims(c, choices);
    if victims.is_empty() {
        return Ok(false);
    }
    c.set_paused(ukharon::pick(choices, &victims), true)?;
    Ok(true)
}

/// A link gets an extra delay (up to 20 µs), on both planes where both ends are members,
/// until the next step.
fn delay(c: &mut LeaseCluster, choices: &mut Choices) -> bool {
    let count = u64::from(c.uk.config.nodes_max);
    let (a, b) = (choices.below(count) as u16, choices.below(count) as u16);
    let delay = LinkDelay { extra_ns: choices.below(20_000), jitter_ns: choices.below(5_000) };
    c.uk.world.set_link_delay(NodeId(a), NodeId(b), delay);
    c.transient.links.push((a, b));
    if c.members.contains_key(&a) && c.members.contains_key(&b) {
        let (ra, rb) = (c.replica_node(a), c.replica_node(b));
        c.uk.world.set_link_delay(ra, rb, delay);
    }
    true
}

/// Cuts both planes' links between two live members until the next step.
fn partition(c: &mut LeaseCluster, choices: &mut Choices) -> bool {
    let live = c.uk.live_nodes();
    if live.len() < 2 {
        return false;
    }
    let (a, b) = (ukharon::pick(choices, &live), ukharon::pick(choices, &live));
    if a == b {
        return false;
    }
    c.uk.world.partition(NodeId(a), NodeId(b));
    c.set_replica_partition(a, b, true);
    c.transient.links.push((a, b));
    true
}
