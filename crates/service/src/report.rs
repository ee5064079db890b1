//! What a replica of the service reports about itself (`mu cluster status`, the status
//! request of the client protocol).

use crate::machine::SharedMachine;
use mu_replica::Replica;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// One replica's view of itself and of the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaReport {
    pub id: u16,
    /// The leader this replica's failure detector elected.
    pub leader: Option<u16>,
    /// Its first undecided offset as its leader engine last knew it (moves while it leads).
    pub fuo: u64,
    /// The index after the last entry its state machine applied (its log head).
    pub applied: u64,
    /// A digest of its application's state: equal on replicas that applied the same entries.
    pub digest: String,
    /// The key-value store's keys, or the order book's resting orders.
    pub keys: u64,
    /// Entries it committed as leader, attempts it aborted, leader changes it saw.
    pub commits: u64,
    pub aborts: u64,
    pub leader_changes: u64,
    /// Permission requests its permission manager served (and how many by the slow path).
    pub permission_switches: u64,
    pub slow_permission_switches: u64,
    pub heartbeat_on: bool,
    pub eligible: bool,
    /// It restarted without its log and does not count in majorities yet
    /// (`ReplicaStatus::recovering`): restart no other replica until this is false.
    #[serde(default)]
    pub recovering: bool,
    /// While it leads: the replicas it writes to, itself included.
    pub confirmed: Vec<u16>,
    pub members: Vec<u16>,
    /// Its failure detector's score (0–15) of each other replica.
    pub scores: Vec<(u16, u8)>,
    /// Who its permission manager lets write its log.
    pub log_holder: Option<u16>,
    /// Peers it refuses because they restarted without rejoining after losing their logs
    /// (`ReplicaStatus::restarted_without_rejoin`).
    #[serde(default)]
    pub restarted_without_rejoin: Vec<u16>,
    /// Peers whose heartbeat shows another configuration (`ReplicaStatus::other_configuration`).
    #[serde(default)]
    pub other_configuration: Vec<u16>,
    pub uptime_ms: u64,
    pub pid: u32,
    /// A uKharon-KV node's part in its view: "primary", "backup", "taking over", "outside",
    /// "removed" or "incomplete"; its `leader` is the view's primary, and `fuo` and `applied`
    /// its position (records executed, or applied). A Mu or Velos replica with `reads =
    /// "lease"`: "leader" (appointed, its view active here), "follower" or "outside". Absent
    /// for Mu and Velos otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// A uKharon-KV node's view, or that of a Mu or Velos replica with `reads = "lease"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// Why a uKharon-KV node does not serve, if it does not (an incomplete state, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// A Mu or Velos replica with `reads = "lease"`: GETs it answered from its own store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_reads: Option<u64>,
}

impl ReplicaReport {
    pub fn new(replica: &Replica, machine: &SharedMachine, started: Instant) -> ReplicaReport {
        let s = replica.status();
        let (applied, digest, keys) = {
            let m = machine.lock();
            (m.applied, m.state.digest(), m.state.items_count())
        };
        ReplicaReport {
            id: s.me.0,
            leader: s.leader.map(|l| l.0),
            fuo: s.fuo,
            applied,
            digest: format!("{digest:016x}"),
            keys,
            commits: s.commits,
            aborts: s.aborts,
            leader_changes: s.leader_changes,
            permission_switches: s.permission_switches,
            slow_permission_switches: s.slow_permission_switches,
            heartbeat_on: s.heartbeat_on,
            eligible: s.eligible,
            recovering: s.recovering,
            confirmed: s.confirmed.iter().map(|n| n.0).collect(),
            members: s.members.iter().map(|n| n.0).collect(),
            scores: s.scores.iter().map(|&(n, score)| (n.0, score)).collect(),
            log_holder: s.log_holder.map(|n| n.0),
            restarted_without_rejoin: s.restarted_without_rejoin.iter().map(|n| n.0).collect(),
            other_configuration: s.other_configuration.iter().map(|n| n.0).collect(),
            uptime_ms: started.elapsed().as_millis() as u64,
            pid: std::process::id(),
            role: None,
            epoch: None,
            problem: None,
            local_reads: None,
        }
    }

    /// The leader more than half of a cluster of `replicas_count` names in `reports`, if any:
    /// the one clients and operators can take as the leader.
    pub fn agreed_leader<'a>(
        reports: impl IntoIterator<Item = &'a ReplicaReport>,
        replicas_count: usize,
    ) -> Option<u16> {
        let mut votes = std::collections::BTreeMap::<u16, usize>::new();
        for leader in reports.into_iter().filter_map(|r| r.leader) {
            *votes.entry(leader).or_default() += 1;
        }
        votes.into_iter().find(|&(_, n)| 2 * n > replicas_count).map(|(l, _)| l)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }

    pub fn from_json(text: &str) -> Result<ReplicaReport, String> {
        serde_json::from_str(text).map_err(|e| format!("status report: {e}"))
    }
}
