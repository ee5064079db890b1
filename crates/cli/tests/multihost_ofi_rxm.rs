//! The multi-host test (`multihost/mod.rs`) on the ofi provider `tcp;ofi_rxm`.

#![cfg(feature = "ofi")]

mod common;
mod multihost;
mod netns;

#[test]
fn a_kv_cluster_on_three_rxm_hosts_survives_its_leader_cut_off_then_killed() {
    multihost::three_hosts("tcp;ofi_rxm", 0x3e);
}
