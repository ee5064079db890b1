//! uKharon's failover (the paper's Table 2, §7.2) on a fabric with a hardware profile's costs:
//! three coordinators, three members and, in the rows with caches, two lease caches, all on one
//! simulated fabric whose primitives cost what the profile says. Once every member is active in
//! a view of all of them, a member fails, with the coordinator leader and a lease cache in some
//! cases; the failover is the virtual time from the failure until every surviving member is
//! active in a view without the failed member (the paper: "the failure of the application node
//! results in global unavailability that is resolved only by a new (active) membership that
//! excludes it").
//!
//! A failure is a crash, which the fabric notifies after the profile's `crash_notice_ns` (the
//! deadbeat, §4.2), or a stop, which no notice reports, so that the heartbeat ring's reads
//! (30 µs apart) find it (the paper's right-hand figures). The paper kills every failed process
//! by SIGKILL for both columns and turns the kernel's notice off for the right one; a stopped
//! process is what the ring sees of a killed one without the notice.

use super::cluster::{Clock, UkCluster};
use super::Choices;
use mu_fabric::NodeId;
use mu_fabric_sim::SimConfig;
use mu_ukharon::lease::LeaseConfig;

const COORDINATORS: u16 = 3;
const MEMBERS: u16 = 3;
const CACHES: u16 = 2;
/// Virtual time the cluster may take to make every member active before the failure.
const SETTLE_LIMIT_NS: u64 = 100_000_000;
/// Virtual time a failover may take before the run is called broken.
const FAILOVER_LIMIT_NS: u64 = 20_000_000;

/// How the failure is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detection {
    /// A crash, notified by the fabric (the kernel's broadcast).
    Deadbeat,
    /// A stop that no notice reports: the heartbeat ring finds it.
    Heartbeat,
}

/// One cell of Table 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    /// Whether the cluster has lease caches (the table's rows).
    pub caches: bool,
    /// The coordinator leader fails with the member.
    pub leader: bool,
    /// A lease cache fails with the member (rows with caches only).
    pub cache: bool,
    pub detection: Detection,
}

/// One failover of `case` on a fresh cluster on `fabric`, in virtual ns from the failure until
/// every surviving member is active in a view without the failed one.
pub fn failover_ns(
    fabric: SimConfig,
    case: Case,
    poll_period_ns: u64,
    seed: u64,
) -> Result<u64, String> {
    let caches = if case.caches { CACHES } else { 0 };
    if case.cache && caches == 0 {
        return Err("a cache fails only where there are caches".into());
    }
    let counts = (COORDINATORS, MEMBERS, caches);
    let clocks =
        vec![Clock { offset_ns: 0, rate_ppm: 0 }; usize::from(COORDINATORS + MEMBERS + caches)];
    let mut cluster =
        UkCluster::with_fabric(seed, counts, LeaseConfig::default(), &clocks, fabric, |_| {})?;
    let step_ns = poll_period_ns.max(1);
    settle(&mut cluster, step_ns)?;
    // The failure falls anywhere in a lease's renewal period.
    let phase_ns = Choices(seed).below(cluster.config.lease_ns);
    cluster.run_for(phase_ns, step_ns)?;
    let member = COORDINATORS + MEMBERS - 1;
    let failed_at_ns = cluster.world.now_ns();
    fail(&mut cluster, case, member)?;
    let survivors: Vec<u16> = (COORDINATORS..member).collect();
    while cluster.world.now_ns() < failed_at_ns + FAILOVER_LIMIT_NS {
        cluster.poll_all()?;
        let now_ns = cluster.world.now_ns();
        if all_active_without(&cluster, &survivors) {
            cluster.spans.check(&cluster.log.views)?;
            return Ok(now_ns - failed_at_ns);
        }
        cluster.world.run_until(now_ns + step_ns);
    }
    let latest = cluster.log.latest().map(|v| (v.epoch, v.nodes().collect::<Vec<_>>()));
    Err(format!(
        "no view without member {member} active {FAILOVER_LIMIT_NS} ns after the failure: \
         latest view {latest:?}, {:?}",
        cluster.converged()
    ))
}

/// Runs until every member is active in a view of all of them.
fn settle(cluster: &mut UkCluster, step_ns: u64) -> Result<(), String> {
    let members: Vec<u16> = (COORDINATORS..COORDINATORS + MEMBERS).collect();
    while cluster.world.now_ns() < SETTLE_LIMIT_NS {
        cluster.run_for(20_000, step_ns)?;
        if all_active_without(cluster, &members) {
            return Ok(());
        }
    }
    Err(format!("members not active after {SETTLE_LIMIT_NS} ns: {:?}", cluster.converged()))
}

/// Crashes (deadbeat) or stops (heartbeat) the member and, as the case says, the coordinator
/// leader (position 0 leads while it runs) and the cache the first surviving member renews
/// through (member `m` asks cache `m % caches` first).
fn fail(cluster: &mut UkCluster, case: Case, member: u16) -> Result<(), String> {
    let err = |e: mu_fabric::FabricError| e.to_string();
    let cache = case.cache.then(|| {
        let caches = &cluster.config.caches;
        caches[usize::from(COORDINATORS) % caches.len()]
    });
    match case.detection {
        Detection::Deadbeat => {
            cluster.crash_node(member)?;
            if let Some(cache) = cache {
                cluster.crash_node(cache)?;
            }
            if case.leader {
                cluster.crash_coordinator(0)?;
            }
        }
        Detection::Heartbeat => {
            cluster.set_paused(member, true)?;
            if let Some(cache) = cache {
                cluster.set_paused(cache, true)?;
            }
            if case.leader {
                cluster.coordinator_paused[0] = true;
                cluster.world.pause(NodeId(0)).map_err(err)?;
            }
        }
    }
    Ok(())
}

/// Whether the latest decided view's members are exactly `members` and each is active in it.
fn all_active_without(cluster: &UkCluster, members: &[u16]) -> bool {
    let Some(latest) = cluster.log.latest() else { return false };
    if !latest.nodes().eq(members.iter().copied()) {
        return false;
    }
    let now_ns = cluster.world.now_ns();
    members.iter().all(|n| {
        let node = &cluster.nodes[n];
        let Some(core) = node.core.as_ref() else { return false };
        core.published().active_at(latest.epoch, node.clock.local(now_ns))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(caches: bool, leader: bool, cache: bool, detection: Detection) -> Case {
        Case { caches, leader, cache, detection }
    }

    #[test]
    fn a_notified_crash_fails_over_faster_than_one_the_ring_finds() {
        let fabric = SimConfig { crash_notice_ns: 30_000, ..SimConfig::default() };
        let deadbeat =
            failover_ns(fabric.clone(), case(false, false, false, Detection::Deadbeat), 100, 1)
                .unwrap();
        let heartbeat =
            failover_ns(fabric, case(false, false, false, Detection::Heartbeat), 100, 1).unwrap();
        assert!(deadbeat >= 30_000, "not before the notice: {deadbeat} ns");
        assert!(heartbeat > deadbeat, "the ring ({heartbeat} ns) after the notice ({deadbeat} ns)");
    }

    #[test]
    fn the_same_seed_gives_the_same_failover() {
        let fabric = SimConfig { crash_notice_ns: 30_000, ..SimConfig::default() };
        let c = case(true, true, true, Detection::Deadbeat);
        assert_eq!(failover_ns(fabric.clone(), c, 100, 5), failover_ns(fabric, c, 100, 5));
    }
}
