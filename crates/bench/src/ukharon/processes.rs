//! Figure 3's last row: crash notification against the heartbeat ring, with the group as
//! processes (`mu ukharon node` children of this binary on shm, `mu_daemon::ukharon::local`).
//!
//! Each run starts a fresh group (three coordinators, three members), waits until every member
//! is active in a view of all three, then sends member 5 SIGKILL (its fabric node dies: the
//! crash notification) or SIGSTOP (it lives on to the kernel: the heartbeat ring or the beats
//! must catch it). Failover time = from just before the signal until `Active(new view)` was
//! true on every live member, from the times each member recorded on the host's clock.

use mu_daemon::ukharon::demo::{agreed_active, change_without};
use mu_daemon::ukharon::local::LocalGroup;
use mu_procs::clock::monotonic_ns;
use std::time::Duration;

const COORDINATORS: [u16; 3] = [0, 1, 2];
const MEMBERS: [u16; 3] = [3, 4, 5];
const VICTIM: u16 = 5;
const WAIT: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Kill,
    Stop,
}

impl Signal {
    pub const ALL: [Signal; 2] = [Signal::Kill, Signal::Stop];

    pub fn name(self) -> &'static str {
        match self {
            Signal::Kill => "member SIGKILL (crash notification), processes",
            Signal::Stop => "member SIGSTOP (heartbeat ring), processes",
        }
    }
}

pub fn one(signal: Signal) -> Result<u64, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
    let mut group = LocalGroup::start(&exe, "bench-ukharon-procs", &COORDINATORS, &MEMBERS)?;
    group.wait_for(WAIT, |s| agreed_active(s, &MEMBERS), "first view")?;
    let fault_ns = monotonic_ns();
    match signal {
        Signal::Kill => group.kill(VICTIM)?,
        Signal::Stop => group.signal(VICTIM, libc::SIGSTOP)?,
    }
    let live: Vec<u16> = MEMBERS.into_iter().filter(|&m| m != VICTIM).collect();
    let change = group.wait_for(WAIT, |s| change_without(s, &live, VICTIM), "view without it")?;
    let active_ns = change.active_from_ns.iter().map(|&(_, t)| t).max().unwrap_or(fault_ns);
    group.stop(Duration::from_secs(2));
    Ok(active_ns.saturating_sub(fault_ns))
}
