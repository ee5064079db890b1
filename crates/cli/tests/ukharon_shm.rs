//! A uKharon group as processes on shm (`mu ukharon node`): a member killed (the kernel's
//! death signal), a member stopped (SIGSTOP: alive to the kernel, so the heartbeat ring or the
//! beats must catch it; resumed, it is out and joins again under a new unique id), and the
//! coordinator leader killed with a member. Each time every live node learns the new view, and
//! `Active` of every older view is false on every node before the new one is true on any:
//! each member records, on the host's `CLOCK_MONOTONIC`, when `Active` was true per view (from
//! the leases it published), and the test compares them across processes.

mod ukharon_spans;

use mu_daemon::ukharon::demo::{agreed_active, change_without};
use mu_daemon::ukharon::local::LocalGroup;
use mu_daemon::ukharon::status::NodeStatus;
use mu_procs::clock::monotonic_ns;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use ukharon_spans::Spans;

const WAIT: Duration = Duration::from_secs(15);
const COORDINATORS: [u16; 3] = [0, 1, 2];

/// Waits until the live members agree on a view without `gone` and are active in it, and the
/// live coordinators know it too; checks the spans.
/// `since_ns`: when the fault was injected, on the host clock (for the log).
fn removed(
    group: &mut LocalGroup,
    spans: &mut Spans,
    gone: u16,
    coordinators: &[u16],
    since_ns: u64,
) -> u64 {
    // Running children other than `gone` (which may be stopped, not dead).
    let live: Vec<u16> = group.live_members().into_iter().filter(|&m| m != gone).collect();
    let change = group.wait_for(WAIT, |s| change_without(s, &live, gone), "view without it");
    let change = change.unwrap_or_else(|e| panic!("member {gone}: {e}"));
    let epoch = change.view.epoch;
    for (&(id, active), &(_, learnt)) in change.active_from_ns.iter().zip(&change.learnt_ns) {
        assert!(learnt <= active, "member {id}: view {epoch} active before it was learnt");
    }
    let active_ns = change.active_from_ns.iter().map(|&(_, t)| t).max().unwrap_or(0);
    eprintln!(
        "member {gone} out of view {epoch}: active on every live member {:.3} ms after the fault",
        active_ns.saturating_sub(since_ns) as f64 / 1e6
    );
    let learnt = |s: &BTreeMap<u16, NodeStatus>| {
        let knows =
            |c: &u16| s.get(c).and_then(|s| s.view.as_ref()).is_some_and(|v| v.epoch >= epoch);
        coordinators.iter().all(knows).then_some(())
    };
    group.wait_for(WAIT, learnt, "view at the coordinators").unwrap();
    spans.take(&group.statuses());
    spans.check();
    epoch
}

#[test]
fn kill_stop_and_leader_crash_each_give_a_new_view_with_no_overlap() {
    let exe = Path::new(env!("CARGO_BIN_EXE_mu"));
    let members = [3, 4, 5, 6];
    let mut group = LocalGroup::start(exe, "ukharon-test", &COORDINATORS, &members).unwrap();
    let mut spans = Spans::default();
    let first = group.wait_for(WAIT, |s| agreed_active(s, &members), "first view").unwrap();

    // A member killed: the death signal.
    spans.take(&group.statuses());
    let fault_ns = monotonic_ns();
    group.kill(6).unwrap();
    let after_kill = removed(&mut group, &mut spans, 6, &COORDINATORS, fault_ns);
    assert!(after_kill > first.epoch);

    // A member stopped: its process lives, its heartbeat does not move.
    let uid_before = group.status(5).and_then(|s| s.uid).unwrap();
    let fault_ns = monotonic_ns();
    group.signal(5, libc::SIGSTOP).unwrap();
    let after_stop = removed(&mut group, &mut spans, 5, &COORDINATORS, fault_ns);
    assert!(after_stop > after_kill);
    // Resumed, it finds itself out and joins again, under a new unique id.
    group.signal(5, libc::SIGCONT).unwrap();
    let back = group.wait_for(WAIT, |s| agreed_active(s, &[3, 4, 5]), "rejoined view").unwrap();
    let uid_after = back.members.iter().find(|&&(n, _)| n == 5).unwrap().1;
    assert_ne!(uid_after, uid_before, "a unique id was reused");
    spans.take(&group.statuses());
    spans.check();

    // The coordinator leader killed, then a member leaves: the next leader decides the view.
    let leader = leader_of(&group);
    let fault_ns = monotonic_ns();
    group.kill(leader).unwrap();
    group.terminate(4, Duration::from_secs(5)).unwrap();
    let rest: Vec<u16> = COORDINATORS.into_iter().filter(|&c| c != leader).collect();
    let after_leader = removed(&mut group, &mut spans, 4, &rest, fault_ns);
    assert!(after_leader > back.epoch);
    let statuses = group.statuses();
    assert!(rest.iter().any(|c| statuses[c].leading), "no coordinator leads: {statuses:?}");
    group.stop(Duration::from_secs(2));
}

fn leader_of(group: &LocalGroup) -> u16 {
    let statuses = group.statuses();
    let leader = COORDINATORS.into_iter().find(|c| statuses.get(c).is_some_and(|s| s.leading));
    leader.expect("a coordinator leads")
}

/// A member killed after the coordinator leader died: the others' failure reports reach the
/// new leader (a node moves its leader hint past coordinators the fabric reports dead, and
/// past those it cannot reach).
#[test]
fn a_member_killed_after_the_leader_is_removed_by_the_next_leader() {
    let exe = Path::new(env!("CARGO_BIN_EXE_mu"));
    let members = [3, 4, 5];
    let mut group = LocalGroup::start(exe, "ukharon-leader", &COORDINATORS, &members).unwrap();
    let mut spans = Spans::default();
    group.wait_for(WAIT, |s| agreed_active(s, &members), "first view").unwrap();
    let leader = leader_of(&group);
    let fault_ns = monotonic_ns();
    group.kill(leader).unwrap();
    group.kill(5).unwrap();
    let rest: Vec<u16> = COORDINATORS.into_iter().filter(|&c| c != leader).collect();
    removed(&mut group, &mut spans, 5, &rest, fault_ns);
    group.stop(Duration::from_secs(2));
}

/// A coordinator killed and started again by hand (`mu ukharon node`, no `--new-group`): the
/// fabric kept none of its memory, so it rejoins (`mu_ukharon::restart`), and then takes part:
/// with another coordinator killed, it and the last one are the majority that decides the view
/// removing a killed member.
#[test]
fn a_coordinator_restarted_without_its_memory_rejoins_and_decides() {
    let exe = Path::new(env!("CARGO_BIN_EXE_mu"));
    let members = [3, 4, 5];
    let mut group = LocalGroup::start(exe, "ukharon-rejoin", &COORDINATORS, &members).unwrap();
    let mut spans = Spans::default();
    let first = group.wait_for(WAIT, |s| agreed_active(s, &members), "first view").unwrap();
    let leader = leader_of(&group);
    let restarted = COORDINATORS.into_iter().find(|&c| c != leader).unwrap();
    group.kill(restarted).unwrap();
    group.restart(exe, restarted).unwrap();
    let pid = group.pid(restarted).unwrap();
    let rejoined = |s: &BTreeMap<u16, NodeStatus>| {
        let s = s.get(&restarted)?;
        let knows_first = s.view.as_ref().is_some_and(|v| v.epoch >= first.epoch);
        (s.pid == pid && knows_first && s.problem.is_none()).then_some(())
    };
    group.wait_for(WAIT, rejoined, "the restarted coordinator rejoined").unwrap();
    let other = COORDINATORS.into_iter().find(|&c| c != leader && c != restarted).unwrap();
    group.kill(other).unwrap();
    let fault_ns = monotonic_ns();
    group.kill(5).unwrap();
    removed(&mut group, &mut spans, 5, &[leader, restarted], fault_ns);
    group.stop(Duration::from_secs(2));
}

/// §6.3 lease caches as processes: the members renew through two caches; one is killed, the
/// members stay active (they ask the other), and a member killed afterwards is still removed
/// with no overlap.
#[test]
fn members_renew_through_caches_and_outlive_one() {
    let exe = Path::new(env!("CARGO_BIN_EXE_mu"));
    let members = [3, 4, 5];
    let mut group =
        LocalGroup::start_with_caches(exe, "ukharon-caches", &COORDINATORS, &members, &[6, 7])
            .unwrap();
    let mut spans = Spans::default();
    let first = group.wait_for(WAIT, |s| agreed_active(s, &members), "first view").unwrap();
    assert!(first.members.iter().all(|&(n, _)| members.contains(&n)), "caches do not join");
    group.kill(6).unwrap();
    // Still active through cache 7, in the same view, well after the killed cache's leases
    // would have run out.
    std::thread::sleep(Duration::from_millis(100));
    let still = group.wait_for(WAIT, |s| agreed_active(s, &members), "active after").unwrap();
    assert_eq!(still.epoch, first.epoch, "killing a cache changes no view");
    spans.take(&group.statuses());
    let fault_ns = monotonic_ns();
    group.kill(5).unwrap();
    removed(&mut group, &mut spans, 5, &COORDINATORS, fault_ns);
    group.stop(Duration::from_secs(2));
}
