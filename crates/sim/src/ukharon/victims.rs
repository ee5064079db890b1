//! Where a fault step strikes, for the uKharon sim and the uKharon-KV sim alike: each takes
//! the same draws from the run's choices, and each run says which members may be struck
//! (the uKharon sim: while two stay running; uKharon-KV: while the group keeps its state).

use super::cluster::UkCluster;
use super::{Choices, UkFaults};

/// One of `from` (not empty).
pub(crate) fn pick(choices: &mut Choices, from: &[u16]) -> u16 {
    from[choices.below(from.len() as u64) as usize]
}

/// Two distinct nodes of `from`, or none (fewer than two, or both draws fell on one).
pub(crate) fn pick_two(choices: &mut Choices, from: &[u16]) -> Option<(u16, u16)> {
    if from.len() < 2 {
        return None;
    }
    let (a, b) = (pick(choices, from), pick(choices, from));
    (a != b).then_some((a, b))
}

/// The fault steps `faults` enables, in the order a step draws from.
pub(crate) fn kinds(faults: UkFaults) -> Vec<&'static str> {
    let f = faults;
    [
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
    .collect()
}

/// What a crash strikes: now and then a cache, while another stays up (the members that
/// asked it ask another), or else one of the members `members` draws; none if there is none.
pub(crate) fn crash_victim(
    cluster: &UkCluster,
    choices: &mut Choices,
    members: impl FnOnce(&mut Choices) -> Vec<u16>,
) -> Option<u16> {
    let caches = cluster.live_caches();
    let victims = if !caches.is_empty() && choices.below(4) == 0 {
        if caches.len() < 2 {
            return None;
        }
        caches
    } else {
        members(choices)
    };
    (!victims.is_empty()).then(|| pick(choices, &victims))
}

/// What a pause step does: half the time there is a stopped node, resumes one; or else stops
/// one of the members `members` draws. The node, and whether it stops.
pub(crate) fn pause_victim(
    cluster: &UkCluster,
    choices: &mut Choices,
    members: impl FnOnce(&mut Choices) -> Vec<u16>,
) -> Option<(u16, bool)> {
    let paused: Vec<u16> =
        cluster.live_nodes().into_iter().filter(|n| cluster.nodes[n].paused).collect();
    if !paused.is_empty() && choices.below(2) == 0 {
        return Some((pick(choices, &paused), false));
    }
    let victims = members(choices);
    (!victims.is_empty()).then(|| (pick(choices, &victims), true))
}

/// Starts a crashed node (a member or a cache) again as a new process. Whether there was one.
pub(crate) fn restart_crashed(
    cluster: &mut UkCluster,
    choices: &mut Choices,
) -> Result<bool, String> {
    let crashed: Vec<u16> =
        cluster.nodes.iter().filter(|(_, n)| n.core.is_none()).map(|(&id, _)| id).collect();
    if crashed.is_empty() {
        return Ok(false);
    }
    cluster.restart(pick(choices, &crashed))?;
    Ok(true)
}

/// One of `from` asks for another lease duration (§6.3: a compatible view); the one that did.
pub(crate) fn ask_lease(
    cluster: &mut UkCluster,
    choices: &mut Choices,
    from: &[u16],
) -> Option<u16> {
    if from.is_empty() {
        return None;
    }
    let n = pick(choices, from);
    let lease_ns = [10_000, 20_000, 40_000][choices.below(3) as usize];
    let core = cluster.nodes.get_mut(&n).and_then(|n| n.core.as_mut())?;
    core.ask_lease(lease_ns);
    Some(n)
}
