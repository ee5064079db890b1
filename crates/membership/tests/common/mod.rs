//! Coordinators on a simulated fabric, polled in rounds of virtual time.

#![allow(dead_code)]

use mu_fabric::NodeId;
use mu_fabric_sim::{SimConfig, SimFabric, SimWorld};
use mu_membership::{CoordinatorDriver, CoordinatorEvent, MembershipConfig};
use mu_ukharon::view::View;

pub const CLUSTER: u64 = 0xC0FFEE;

pub fn config() -> MembershipConfig {
    MembershipConfig::new(CLUSTER, vec![0, 1, 2], 8)
}

/// The first view: no members yet (the coordinators here run no node core, so they are not
/// members: members that heard no beats from them would report them).
pub fn initial() -> View {
    View::initial(CLUSTER, Vec::new(), None, 20_000)
}

pub struct Sim {
    pub world: SimWorld,
    pub coordinators: Vec<Option<CoordinatorDriver<SimFabric>>>,
    pub decided: Vec<View>,
}

impl Sim {
    pub fn new(seed: u64, configs: Vec<MembershipConfig>) -> Sim {
        let world = SimWorld::new(SimConfig::default(), seed);
        let coordinators = configs
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let fabric = world.node(NodeId(i as u16));
                Some(CoordinatorDriver::new(fabric, c, initial(), seed + i as u64).unwrap())
            })
            .collect();
        Sim { world, coordinators, decided: Vec::new() }
    }

    /// Polls every live coordinator once; returns what they saw.
    pub fn poll(&mut self) -> Vec<CoordinatorEvent> {
        let now = self.world.now_ns();
        let mut events = Vec::new();
        for c in self.coordinators.iter_mut().flatten() {
            c.poll(now);
            for e in c.drain_events() {
                if let CoordinatorEvent::Decided(v) = &e {
                    match self.decided.iter().find(|d| d.epoch == v.epoch) {
                        Some(d) => assert_eq!(d, v, "two views at epoch {}", v.epoch),
                        None => self.decided.push(v.clone()),
                    }
                }
                events.push(e);
            }
        }
        events
    }

    /// Polls every live coordinator, then lets the fabric run for `step_ns`, for `ns`.
    pub fn run_for(&mut self, ns: u64, step_ns: u64) -> Vec<CoordinatorEvent> {
        let end = self.world.now_ns() + ns;
        let mut events = Vec::new();
        while self.world.now_ns() < end {
            let now = self.world.now_ns();
            events.extend(self.poll());
            self.world.run_until(now + step_ns);
        }
        events
    }
}
