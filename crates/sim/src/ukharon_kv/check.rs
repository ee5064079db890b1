//! uKharon-KV's checks at the end of a run, beside the linearizability of the history: no
//! acknowledged write lost (shared with the leased-reads runs, `crate::kv_run::lost_writes`),
//! and every member's store the same.

use super::cluster::KvCluster;
pub use crate::kv_run::lost_writes::no_acknowledged_write_lost;

/// Every member of the latest view holds the same store.
pub fn digests_equal(cluster: &KvCluster) -> Result<(), String> {
    let view = cluster.uk.log.latest().ok_or("no view decided")?;
    let mut digests = Vec::new();
    for m in view.nodes() {
        let driver = cluster.data.get(&m).and_then(|d| d.driver.as_ref());
        let store = driver.and_then(|d| d.store());
        let Some(store) = store else {
            return Err(format!("member {m} of view {} holds no store", view.epoch));
        };
        digests.push((m, store.digest(), driver.map_or(0, |d| d.position())));
    }
    if digests.windows(2).any(|w| w[0].1 != w[1].1) {
        return Err(format!(
            "stores differ after the liveness phase: (member, digest, position) {digests:?}"
        ));
    }
    Ok(())
}
