//! Helpers shared by the simulator's integration tests.
#![allow(dead_code)]

use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, LocalRegion, LocalSlice, NodeId, RegionId,
    RemoteAddr,
};
use mu_fabric_sim::{SimConfig, SimEndpoint, SimFabric, SimRegion, SimWorld};

pub const DATA: RegionId = RegionId(0);
pub const DATA_BYTES: usize = 64 * 1024;
pub const A: NodeId = NodeId(0);
pub const B: NodeId = NodeId(1);

pub fn conn(peer: NodeId) -> ConnId {
    ConnId::new(peer, 0)
}

pub fn remote(offset: u64) -> RemoteAddr {
    RemoteAddr { region: DATA, offset }
}

pub fn local(offset: u64, len: u32) -> LocalSlice {
    LocalSlice { region: DATA, offset, len }
}

/// Nodes A and B with a data region each, connected both ways with everything granted, and an
/// endpoint on A attached to its connection to B.
pub struct Pair {
    pub world: SimWorld,
    pub a: SimFabric,
    pub b: SimFabric,
    pub a_region: SimRegion,
    pub b_region: SimRegion,
    pub ep: SimEndpoint,
}

pub fn pair(config: SimConfig, seed: u64) -> Pair {
    let world = SimWorld::new(config, seed);
    let a = world.node(A);
    let b = world.node(B);
    let a_region = a.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    let b_region = b.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    a.connect(conn(B), Access::ALL).unwrap();
    b.connect(conn(A), Access::ALL).unwrap();
    let mut ep = a.endpoint(64).unwrap();
    ep.attach(conn(B)).unwrap();
    Pair { world, a, b, a_region, b_region, ep }
}

/// Runs the world until `ep` has a completion; panics if the world goes idle first.
pub fn wait(world: &SimWorld, ep: &mut SimEndpoint) -> Completion {
    let mut out = [Completion::EMPTY; 1];
    loop {
        if ep.poll(&mut out) == 1 {
            return out[0];
        }
        assert!(world.step(), "the world went idle with no completion");
    }
}

/// Runs the world until `ep` has a completion and returns it with the virtual time it took.
pub fn timed(
    world: &SimWorld,
    ep: &mut SimEndpoint,
    post: impl FnOnce(&mut SimEndpoint),
) -> (Completion, u64) {
    let start = world.now_ns();
    post(ep);
    let c = wait(world, ep);
    (c, world.now_ns() - start)
}

pub fn read_back(region: &SimRegion, offset: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    region.read(offset, &mut out).unwrap();
    out
}
