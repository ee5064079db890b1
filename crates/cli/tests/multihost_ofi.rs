//! The multi-host test (`multihost/mod.rs`) on the ofi provider `sockets`.

#![cfg(feature = "ofi")]

mod common;
mod multihost;
mod netns;

#[test]
fn a_kv_cluster_on_three_hosts_survives_its_leader_cut_off_then_killed() {
    multihost::three_hosts("sockets", 0x3d);
}
