//! A uKharon-KV group as the shared clients and phases drive it ([`crate::kv_run`]): requests
//! go to a member's data node, the drivers serve, faults keep the group's state, and a run ends
//! (counted apart) once the state is lost; at the end the primary tells its backups what is
//! committed and every member's store is the same.

use super::cluster::KvCluster;
use super::{check, faults, STATE_LOST};
use crate::kv_run::phases::Run;
use crate::kv_run::{Found, KvGroup, Token};
use crate::ukharon::cluster::UkCluster;
use crate::ukharon::{self, Choices, UkFaults};
use mu_kv::Request;
use mu_ukharon_kv::KvEvent;

impl KvGroup for KvCluster {
    const CHOICES_SALT: u64 = 0x6b76_5f73_696d;
    const CLIENTS_SALT: u64 = 0x6b76_636c_6965_6e74;
    const CLIENT_TIMEOUT_NS: u64 = 100_000;
    const ATTEMPTS_PER_OPERATION: bool = true;

    fn uk(&self) -> &UkCluster {
        &self.uk
    }

    fn uk_mut(&mut self) -> &mut UkCluster {
        &mut self.uk
    }

    fn member_ids(&self) -> Vec<u16> {
        KvCluster::member_ids(self)
    }

    fn incarnation(&self, member: u16) -> Option<u64> {
        let data = &self.data[&member];
        data.driver.is_some().then_some(data.incarnation)
    }

    fn deliver(&mut self, member: u16, request: Request, token: Token) {
        let data = self.data.get_mut(&member).expect("clients send to members");
        data.inbox.push((request, token));
    }

    /// The drivers poll; no local read stalls here.
    fn serve(
        &mut self,
        _choices: &mut Choices,
        _stall_reads: bool,
    ) -> Result<Vec<(u16, KvEvent<Token>)>, String> {
        self.poll_drivers()
    }

    fn inject(
        &mut self,
        faults: UkFaults,
        choices: &mut Choices,
    ) -> Result<Option<&'static str>, String> {
        faults::inject(self, faults, choices)
    }

    fn serving(&self) -> Result<u16, String> {
        KvCluster::serving(self)
    }

    /// Links heal, stopped processes run again (crashed ones stay down), on both planes.
    fn heal(&mut self) -> Result<(), String> {
        ukharon::heal(&mut self.uk)?;
        self.heal_data_links();
        self.sync_data_plane()
    }

    fn answers(&self) -> u64 {
        self.answers
    }

    fn primaries(&self) -> &[(u16, u64)] {
        &self.primaries
    }

    /// Once the group has lost its state, nothing it does later can serve.
    fn ended(&self) -> Option<Found> {
        self.state_lost().map(|why| (STATE_LOST, why))
    }

    /// The primary tells its backups what is committed once idle; then every member's store
    /// is the same.
    fn settle(run: &mut Run<'_, KvCluster>, deadline: u64) -> Result<(), Found> {
        run.run_for(1_000_000, false, false)?;
        run.until(deadline + 1_000_000, false, "serve after the final reads", |run| {
            run.group.serving().map(|_| ())
        })?;
        check::digests_equal(run.group).map_err(|e| ("digests", e))
    }
}
