//! `mu ukharon demo`: three coordinators and three members as processes on shm, one member
//! killed (SIGKILL), and the new view with how long it took from the kill until `Active(new
//! view)` was true on every live member. Every time is on the host's `CLOCK_MONOTONIC`, which
//! every process reads alike: the kill's from this process, each member's from the lease it
//! published (recorded in its status).

use super::local::LocalGroup;
use super::status::{node_list, NodeStatus, ViewSummary};
use crate::interrupt;
use mu_procs::clock::monotonic_ns;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Print one JSON object instead of lines of text.
    #[arg(long)]
    pub json: bool,
}

const COORDINATORS: [u16; 3] = [0, 1, 2];
const MEMBERS: [u16; 3] = [3, 4, 5];
const VICTIM: u16 = 5;
const WAIT: Duration = Duration::from_secs(30);

/// The view every node of `members` is in and `Active` on, if they agree on one that holds
/// exactly `members`.
pub fn agreed_active(s: &BTreeMap<u16, NodeStatus>, members: &[u16]) -> Option<ViewSummary> {
    let view = s.get(&members[0])?.view.clone()?;
    let ok = view.nodes() == members
        && members
            .iter()
            .all(|m| s.get(m).is_some_and(|s| s.active && s.view == Some(view.clone())));
    ok.then_some(view)
}

/// What a view change looked like from the live members: the view they all learnt without
/// `gone`, and when `Active` on it became true on each.
pub struct Change {
    pub view: ViewSummary,
    /// (member, the first time `Active(view)` was true there).
    pub active_from_ns: Vec<(u16, u64)>,
    /// (member, when it learnt the view).
    pub learnt_ns: Vec<(u16, u64)>,
    /// The last time `Active` of any earlier view was true on a live member.
    pub older_until_ns: u64,
}

/// The [`Change`], once every node of `live` is active on one view without `gone`.
pub fn change_without(s: &BTreeMap<u16, NodeStatus>, live: &[u16], gone: u16) -> Option<Change> {
    let view = s.get(&live[0])?.view.clone()?;
    if view.has(gone) {
        return None;
    }
    let mut active_from_ns = Vec::new();
    let mut learnt_ns = Vec::new();
    let mut older_until_ns = 0;
    for id in live {
        let status = s.get(id)?;
        if status.view.as_ref() != Some(&view) || !status.active {
            return None;
        }
        let span = status.spans.iter().find(|sp| sp.epoch == view.epoch)?;
        active_from_ns.push((*id, span.from_ns));
        let learnt = status.learnt.iter().find(|&&(e, _)| e == view.epoch)?;
        learnt_ns.push((*id, learnt.1));
        let older = status.spans.iter().filter(|sp| sp.epoch < view.epoch);
        older_until_ns = older.map(|sp| sp.until_ns).fold(older_until_ns, u64::max);
    }
    Some(Change { view, active_from_ns, learnt_ns, older_until_ns })
}

pub fn demo(args: &DemoArgs) -> Result<(), String> {
    interrupt::catch();
    let exe = std::env::current_exe().map_err(|e| format!("finding the mu binary: {e}"))?;
    let mut group = LocalGroup::start(&exe, "ukharon-demo", &COORDINATORS, &MEMBERS)?;
    let say = |line: String| {
        if !args.json {
            println!("{line}");
        }
    };
    say(format!(
        "started coordinators {} and members {} as processes on shm ({})",
        node_list(&COORDINATORS),
        node_list(&MEMBERS),
        group.dir().display()
    ));
    let wanted = "view of every member, active on every member";
    let first = group.wait_for(WAIT, |s| agreed_active(s, &MEMBERS), wanted)?;
    say(format!(
        "view {}: members {}, Active(view {}) true on every member",
        first.epoch,
        node_list(&first.nodes()),
        first.epoch
    ));
    let kill_ns = monotonic_ns();
    group.kill(VICTIM)?;
    say(format!("killed member {VICTIM} (SIGKILL)"));
    let live = group.live_members();
    let wanted = "view without the killed member, active on every live member";
    let change = group.wait_for(WAIT, |s| change_without(s, &live, VICTIM), wanted)?;
    group.stop(Duration::from_secs(2));
    report(args.json, kill_ns, &first, &change);
    Ok(())
}

fn report(as_json: bool, kill_ns: u64, first: &ViewSummary, change: &Change) {
    let after = |t: u64| t.saturating_sub(kill_ns);
    let took_ns = change.active_from_ns.iter().map(|&(_, t)| after(t)).max().unwrap_or(0);
    let first_new_ns = change.active_from_ns.iter().map(|&(_, t)| t).min().unwrap_or(0);
    let margin_ns = first_new_ns as i128 - change.older_until_ns as i128;
    if as_json {
        let per_member: BTreeMap<String, u64> =
            change.active_from_ns.iter().map(|&(id, t)| (id.to_string(), after(t))).collect();
        let learnt: BTreeMap<String, u64> =
            change.learnt_ns.iter().map(|&(id, t)| (id.to_string(), after(t))).collect();
        let out = json!({
            "killed": VICTIM,
            "old_epoch": first.epoch,
            "view": {"epoch": change.view.epoch, "members": change.view.nodes()},
            "learnt_after_kill_ns": learnt,
            "active_after_kill_ns": per_member,
            "took_ns": took_ns,
            "old_inactive_before_new_active_ns": margin_ns,
        });
        println!("{out}");
        return;
    }
    println!(
        "view {}: members {} (member {VICTIM} removed)",
        change.view.epoch,
        node_list(&change.view.nodes())
    );
    for (&(id, active), &(_, learnt)) in change.active_from_ns.iter().zip(&change.learnt_ns) {
        println!(
            "  member {id}: learnt view {} at +{}, Active(view {}) true from +{} (after the \
             wait for older leases)",
            change.view.epoch,
            ms(after(learnt)),
            change.view.epoch,
            ms(after(active))
        );
    }
    println!(
        "(+: since the kill, on the host's CLOCK_MONOTONIC)\nfrom the kill until Active(view {}) was true on every live member: {}",
        change.view.epoch,
        ms(took_ns)
    );
    if margin_ns >= 0 {
        println!(
            "Active of every older view was false on every live member {} before view {} was \
             active anywhere",
            ms(margin_ns as u64),
            change.view.epoch
        );
    } else {
        println!(
            "WRONG: an older view was still active {} after view {} was active somewhere",
            ms(margin_ns.unsigned_abs() as u64),
            change.view.epoch
        );
    }
    println!("stopped every node");
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}
