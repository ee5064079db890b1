//! Mu or Velos replicas beside a uKharon group as the shared clients and phases drive them
//! ([`crate::kv_run`]): requests go to a member's service, which serves them and may stop in
//! the middle of a local read; a run whose latest view appoints a replica standing aside says
//! so; at the end the primary proposes markers until every live replica holds the same store.

use super::cluster::LeaseCluster;
use super::{check, faults, STANDS_ASIDE};
use crate::kv_run::phases::Run;
use crate::kv_run::{Found, KvGroup, Token};
use crate::ukharon::cluster::UkCluster;
use crate::ukharon::{self, Choices, UkFaults};
use mu_kv::Request;
use mu_ukharon_kv::KvEvent;

impl KvGroup for LeaseCluster {
    const CHOICES_SALT: u64 = 0x6c65_6173_6573_696d;
    const CLIENTS_SALT: u64 = 0x6c65_6173_6563_6c69;
    /// Longer than a local read's longest stall, so that the answer of a member stopped
    /// between a read's two checks still counts.
    const CLIENT_TIMEOUT_NS: u64 = 500_000;
    const ATTEMPTS_PER_OPERATION: bool = false;

    fn uk(&self) -> &UkCluster {
        &self.uk
    }

    fn uk_mut(&mut self) -> &mut UkCluster {
        &mut self.uk
    }

    fn member_ids(&self) -> Vec<u16> {
        LeaseCluster::member_ids(self)
    }

    fn incarnation(&self, member: u16) -> Option<u64> {
        let m = &self.members[&member];
        m.replica.is_some().then_some(m.incarnation)
    }

    fn deliver(&mut self, member: u16, request: Request, token: Token) {
        let m = self.members.get_mut(&member).expect("clients send to members");
        m.server.inbox.push((request, token));
    }

    fn serve(
        &mut self,
        choices: &mut Choices,
        stall_reads: bool,
    ) -> Result<Vec<(u16, KvEvent<Token>)>, String> {
        LeaseCluster::serve(self, choices, stall_reads)
    }

    fn inject(
        &mut self,
        faults: UkFaults,
        choices: &mut Choices,
    ) -> Result<Option<&'static str>, String> {
        faults::inject(self, faults, choices)
    }

    fn serving(&self) -> Result<u16, String> {
        LeaseCluster::serving(self)
    }

    /// Stalls end, links heal on both planes (those of the last fault step too), stopped
    /// processes run again (crashed ones stay down).
    fn heal(&mut self) -> Result<(), String> {
        self.stalls.clear();
        faults::heal_transient(self);
        ukharon::heal(&mut self.uk)?;
        self.heal_replica_links();
        self.sync_replicas()
    }

    fn answers(&self) -> u64 {
        self.answers
    }

    fn primaries(&self) -> &[(u16, u64)] {
        &self.primaries
    }

    /// A view appointing a replica that stands aside: a known liveness gap, not a failure.
    fn stuck(&self, what: &str, why: &str) -> Option<Found> {
        let p = self.primary_standing_aside()?;
        Some((
            STANDS_ASIDE,
            format!(
                "the healed group did not {what}: the latest view appoints member {p}, whose \
                 replica stands aside (not eligible: it waits for entries it lacks from another \
                 leader, and under appointed leaders no other replica may lead); member {p}: {}; \
                 {why}",
                self.describe_member(p)
            ),
        ))
    }

    /// The primary proposes a marker, so that followers learn that everything before it is
    /// decided and apply it, until every live replica holds the same store (within two
    /// milliseconds past the liveness bound); the replicas agree all along.
    fn settle(run: &mut Run<'_, LeaseCluster>, deadline: u64) -> Result<(), Found> {
        let deadline = deadline + 2_000_000;
        check::agreement(run.group).map_err(|e| ("agreement", e))?;
        loop {
            if let Ok(primary) = run.group.serving() {
                let member = run.group.members.get_mut(&primary).expect("a member");
                member.server.propose_marker();
            }
            run.run_for(200_000, false, false)?;
            check::agreement(run.group).map_err(|e| ("agreement", e))?;
            match check::digests_equal(run.group) {
                Ok(()) => return Ok(()),
                Err(e) if run.group.uk.world.now_ns() >= deadline => return Err(("digests", e)),
                Err(_) => {}
            }
        }
    }
}
