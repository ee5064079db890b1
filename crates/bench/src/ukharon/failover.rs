//! Figure 3 (the paper's Table 2): failover time for failures of a member, of a member and the
//! coordinator leader, of a member and a lease cache, and of all three.
//!
//! Each run starts a fresh in-process group on shm (three coordinators, three members, and two
//! caches where one fails) with `mu ukharon`'s host timings, waits until every member is active
//! in a view of all of them, then crashes the chosen threads: each stops and its fabric node
//! dies with it, which the fabric signals to the others (the crash notification; the process
//! machinery's SIGKILL does the same). Failover time = from just before the crash until every
//! live member learnt the view without the failed member and is active in it (polled every
//! 20 µs by this thread). A crashed thread ends after its current pause (up to the 200 µs poll
//! gap), and that time is inside the figure.
//!
//! The heartbeat ring against crash notification (SIGSTOP against SIGKILL) needs members as
//! processes (a thread cannot be stopped while its fabric node lives on): [`super::processes`].

use crate::ukharon::group::{Group, Timings};
use mu_membership::clock::now_ns;
use std::time::Duration;

const CONVERGE_TIMEOUT: Duration = Duration::from_secs(5);
const MEMBERS: u16 = 3;
const CACHES: u16 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Member,
    MemberLeader,
    MemberCache,
    All,
}

impl Fault {
    pub const ALL: [Fault; 4] =
        [Fault::Member, Fault::MemberLeader, Fault::MemberCache, Fault::All];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Member => "member",
            Fault::MemberLeader => "member+leader",
            Fault::MemberCache => "member+cache",
            Fault::All => "member+leader+cache",
        }
    }

    fn cache(self) -> bool {
        matches!(self, Fault::MemberCache | Fault::All)
    }

    fn leader(self) -> bool {
        matches!(self, Fault::MemberLeader | Fault::All)
    }
}

/// The failovers of one fault, in nanoseconds, and the runs that did not converge.
pub struct Failovers {
    pub name: &'static str,
    pub times_ns: Vec<u64>,
    pub failed_runs: u32,
    pub last_problem: Option<String>,
}

impl Failovers {
    pub fn median_ns(&self) -> Option<u64> {
        let mut t = self.times_ns.clone();
        t.sort_unstable();
        t.get(t.len() / 2).copied()
    }
}

pub fn measure(fault: Fault, runs: u32) -> Result<Failovers, String> {
    repeat(fault.name(), runs, || one(fault))
}

/// `runs` failovers timed by `one`; a run that fails is counted and the next one starts.
pub fn repeat(
    name: &'static str,
    runs: u32,
    mut one: impl FnMut() -> Result<u64, String>,
) -> Result<Failovers, String> {
    let mut out = Failovers { name, times_ns: Vec::new(), failed_runs: 0, last_problem: None };
    for _ in 0..runs {
        crate::interrupt::check()?;
        match one() {
            Ok(ns) => out.times_ns.push(ns),
            Err(e) => {
                out.failed_runs += 1;
                out.last_problem = Some(e);
            }
        }
    }
    Ok(out)
}

fn one(fault: Fault) -> Result<u64, String> {
    let caches = if fault.cache() { CACHES } else { 0 };
    let mut group = Group::start(Timings::host(), caches, MEMBERS)?;
    group.converge(CONVERGE_TIMEOUT)?;
    let fault_ns = now_ns();
    drop(group.members.last_mut().and_then(Option::take));
    if fault.cache() {
        // Members ask cache number `node % caches` first: with members 5, 6 and 7 and the last
        // one crashed, cache 0 (node 3) serves member 6, which must move to the other cache.
        drop(group.caches[0].take());
    }
    if fault.leader() {
        drop(group.coordinators[0].take());
    }
    let (_, active_ns) = group.converge(CONVERGE_TIMEOUT)?;
    Ok(active_ns - fault_ns)
}
