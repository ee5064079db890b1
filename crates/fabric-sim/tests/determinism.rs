//! Same seed and same calls give the same run; a different seed gives a different one.

use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, LocalRegion, LocalSlice, NodeId, PermError,
    QpState, RegionId, RemoteAddr, Source, Status, WorkRequest,
};
use mu_fabric_sim::{
    FaultConfig, LinkDelay, SimConfig, SimEndpoint, SimFabric, SimRegion, SimRng, SimWorld,
};
use std::collections::BTreeMap;

const NODES: u16 = 4;
const REGION: RegionId = RegionId(0);
const REGION_BYTES: usize = 16 * 1024;

struct Cluster {
    world: SimWorld,
    fabrics: Vec<SimFabric>,
    regions: Vec<SimRegion>,
    endpoints: Vec<SimEndpoint>,
}

fn conn(peer: u16) -> ConnId {
    ConnId::new(NodeId(peer), 0)
}

fn peers(n: u16) -> impl Iterator<Item = u16> {
    (0..NODES).filter(move |&p| p != n)
}

/// (Re)creates node `n`'s region and endpoint and brings up its side of every connection.
fn bring_up(world: &SimWorld, n: u16) -> (SimRegion, SimEndpoint) {
    let fabric = world.node(NodeId(n));
    let region = fabric.register_region(REGION, REGION_BYTES, Access::ALL).unwrap();
    let mut ep = fabric.endpoint(64).unwrap();
    for p in peers(n) {
        // A crashed peer cannot be bound; that connection stays down until it is back.
        let _ = fabric.connect(conn(p), Access::ALL);
        ep.attach(conn(p)).unwrap();
    }
    (region, ep)
}

/// A random workload over four nodes with every fault; returns the trace hash and how many
/// completions of each status it saw.
fn workload(seed: u64) -> (u64, BTreeMap<String, u64>) {
    let faults = FaultConfig {
        out_of_order_landing: true,
        fast_perm_failure_probability: 0.05,
        fast_perm_busy_in_flight_probability: 0.5,
        control_under_way_probability: 0.05,
    };
    let config =
        SimConfig { jitter_ns: 300, retry_timeout_ns: 50_000, faults, ..SimConfig::default() };
    let world = SimWorld::new(config, seed);
    let fabrics: Vec<SimFabric> = (0..NODES).map(|n| world.node(NodeId(n))).collect();
    let (regions, endpoints) = (0..NODES).map(|n| bring_up(&world, n)).unzip();
    let mut c = Cluster { world, fabrics, regions, endpoints };
    let mut rng = SimRng::new(seed ^ 0x00C0_FFEE);
    let mut statuses = BTreeMap::new();
    let mut inline = [0u8; 256];

    for i in 0..4_000u64 {
        let n = rng.below(u64::from(NODES)) as u16;
        let peer = {
            let k = rng.below(u64::from(NODES) - 1) as u16;
            if k >= n {
                k + 1
            } else {
                k
            }
        };
        let action = rng.below(100);
        match action {
            0..=44 => {
                let offset =
                    if rng.chance(0.02) { REGION_BYTES as u64 - 4 } else { rng.below(8192) };
                let len = 1 + rng.below(2048) as u32;
                let op = match rng.below(4) {
                    0 => {
                        let len = 1 + rng.below(256) as usize;
                        inline[..len].fill(i as u8);
                        let wr =
                            WorkRequest::write(i, Source::Inline(&inline[..len]), remote(offset));
                        let _ =
                            c.endpoints[n as usize].post(conn(peer), &with_signal(wr, &mut rng));
                        continue;
                    }
                    1 => {
                        let _ = c.regions[n as usize].write(0, &vec![i as u8; len as usize]);
                        WorkRequest::write(i, Source::Local(local(0, len)), remote(offset))
                    }
                    2 => WorkRequest::read(i, local(8192, len), remote(offset)),
                    _ => WorkRequest::compare_swap(i, remote(offset & !7), rng.below(3), i),
                };
                let _ = c.endpoints[n as usize].post(conn(peer), &with_signal(op, &mut rng));
            }
            45..=59 => {
                let mut out = [Completion::EMPTY; 16];
                for ep in &mut c.endpoints {
                    let got = ep.poll(&mut out);
                    for done in &out[..got] {
                        *statuses.entry(format!("{:?}", done.status)).or_insert(0) += 1;
                    }
                }
            }
            60..=63 => {
                let access = if rng.chance(0.2) { Access::READ } else { Access::ALL };
                match c.fabrics[n as usize].set_access_fast(conn(peer), access) {
                    Err(PermError::Busy(_)) => {
                        let _ = c.fabrics[n as usize].set_access_slow(conn(peer), access);
                    }
                    Ok(()) | Err(PermError::Fabric(_)) => {}
                }
            }
            64 => {
                if c.world.is_partitioned(NodeId(n), NodeId(peer)) {
                    c.world.heal(NodeId(n), NodeId(peer));
                } else if rng.chance(0.25) {
                    c.world.partition(NodeId(n), NodeId(peer));
                }
            }
            65 => {
                if c.world.is_paused(NodeId(n)) {
                    c.world.resume(NodeId(n)).unwrap();
                } else if rng.chance(0.25) {
                    c.world.pause(NodeId(n)).unwrap();
                }
            }
            66 if rng.chance(0.2) => {
                let delay = LinkDelay { extra_ns: rng.below(5_000), jitter_ns: rng.below(2_000) };
                c.world.set_link_delay(NodeId(n), NodeId(peer), delay);
            }
            67 if rng.chance(0.1) => {
                // Crash, let the failure be seen, restart and rejoin.
                c.world.crash(NodeId(n)).unwrap();
                c.world.advance(rng.below(100_000));
                c.world.restart(NodeId(n)).unwrap();
                let (region, ep) = bring_up(&c.world, n);
                c.regions[n as usize] = region;
                c.endpoints[n as usize] = ep;
                for p in peers(n) {
                    let _ = c.fabrics[p as usize].connect(conn(n), Access::ALL);
                }
            }
            68..=79 => {
                // Repair broken connections, as a runtime would.
                let f = &c.fabrics[n as usize];
                if f.qp_state(conn(peer)).ok() != Some(QpState::ReadyToSend) {
                    let _ = f.connect(conn(peer), Access::ALL);
                }
            }
            _ => {
                for _ in 0..rng.below(20) {
                    c.world.step();
                }
                if rng.chance(0.05) {
                    c.world.advance(rng.below(200_000));
                }
            }
        }
    }
    for n in 0..NODES {
        let _ = c.world.resume(NodeId(n));
    }
    c.world.run_until_idle();
    (c.world.trace_hash(), statuses)
}

fn with_signal<'a>(wr: WorkRequest<'a>, rng: &mut SimRng) -> WorkRequest<'a> {
    if rng.chance(0.3) {
        wr.unsignaled()
    } else {
        wr
    }
}

fn remote(offset: u64) -> RemoteAddr {
    RemoteAddr { region: REGION, offset }
}

fn local(offset: u64, len: u32) -> LocalSlice {
    LocalSlice { region: REGION, offset, len }
}

#[test]
fn same_seed_same_trace_different_seed_different_trace() {
    let (first, statuses) = workload(1);
    let (again, statuses_again) = workload(1);
    assert_eq!(first, again, "same seed, same calls: same run");
    assert_eq!(statuses, statuses_again);
    let (other, _) = workload(2);
    assert_ne!(first, other, "a different seed changes the run");

    // The workload is only worth something if it hit the interesting paths.
    eprintln!("{statuses:?}");
    for status in
        [Status::Success, Status::PeerUnreachable, Status::Flushed, Status::RemoteAccessDenied]
    {
        assert!(
            statuses.get(&format!("{status:?}")).is_some_and(|&n| n > 0),
            "{status:?}: {statuses:?}"
        );
    }
}

#[test]
fn trace_records_recent_events() {
    let world = SimWorld::new(SimConfig { trace_capacity: 8, ..SimConfig::default() }, 5);
    let empty = world.trace_hash();
    let a = world.node(NodeId(0));
    a.register_region(REGION, 64, Access::ALL).unwrap();
    assert_ne!(world.trace_hash(), empty);
    for i in 0..20 {
        a.register_region(RegionId(i + 1), 64, Access::ALL).unwrap();
    }
    let recent = world.recent_trace();
    assert_eq!(recent.len(), 8);
    assert_eq!(world.trace_len(), 21);
    assert!(recent.iter().all(|e| e.kind == mu_fabric_sim::TraceKind::Register));
}
