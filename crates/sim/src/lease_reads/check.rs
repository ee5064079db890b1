//! The checks of a leased-reads run beside the linearizability of the history, the uKharon
//! sim's (active spans, views) and stale answers ([`super::cluster::LeaseCluster::serve`]):
//! agreement of the replicas' applied entries (Mu's checker), and every live replica's store
//! the same after the liveness phase. No acknowledged write lost is uKharon-KV's check
//! ([`crate::kv_run::lost_writes::no_acknowledged_write_lost`]).

use super::cluster::LeaseCluster;

/// No two replicas applied different entries at one index, each in order from 0.
pub fn agreement(c: &LeaseCluster) -> Result<(), String> {
    let applied: Vec<Vec<(u64, Vec<Vec<u8>>)>> =
        c.members.values().map(|m| m.applied.clone()).collect();
    crate::check::agreement::check(&applied).map_err(|e| {
        let ids: Vec<u16> = c.member_ids();
        format!("{e} (replica positions are members {ids:?})")
    })
}

/// Every live replica (running, counted in majorities) holds the same store (the leader may
/// have applied one entry more: the marker, which changes no store).
pub fn digests_equal(c: &LeaseCluster) -> Result<(), String> {
    let live: Vec<(u16, u64, usize)> = c
        .member_ids()
        .into_iter()
        .filter(|&m| c.running(m) && !c.replica_out(m))
        .map(|m| (m, c.members[&m].store.digest(), c.members[&m].applied.len()))
        .collect();
    if live.is_empty() {
        return Err("no live replica".into());
    }
    if live.windows(2).any(|w| w[0].1 != w[1].1) {
        return Err(format!(
            "stores differ after the liveness phase: (member, digest, entries applied) {live:?}"
        ));
    }
    Ok(())
}
