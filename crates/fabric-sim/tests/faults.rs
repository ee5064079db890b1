//! Each injected fault, and the error semantics around it.

mod common;

use common::*;
use mu_fabric::{
    Access, Completion, Endpoint, Fabric, FabricError, LocalRegion, NodeId, PermError, PostError,
    QpState, Source, Status, WorkRequest,
};
use mu_fabric_sim::{FaultConfig, LinkDelay, SimConfig, SimEndpoint, SimWorld};

fn write(id: u64, data: &'static [u8], offset: u64) -> WorkRequest<'static> {
    WorkRequest::write(id, Source::Inline(data), remote(offset))
}

#[test]
fn crashed_target_cannot_ack_and_fails_after_the_retry_timeout() {
    let mut p = pair(SimConfig::default(), 1);
    let (c, _) = timed(&p.world, &mut p.ep, |ep| ep.post(conn(B), &write(1, b"ok", 0)).unwrap());
    assert_eq!(c.status, Status::Success);

    p.world.crash(B).unwrap();
    assert!(p.world.is_crashed(B));
    let (c, took) = timed(&p.world, &mut p.ep, |ep| ep.post(conn(B), &write(2, b"no", 8)).unwrap());
    assert_eq!((c.wr_id, c.status), (2, Status::PeerUnreachable));
    assert!(took >= 1_000_000, "fails only once the retry timeout has passed, took {took} ns");
    assert_eq!(p.a.qp_state(conn(B)).unwrap(), QpState::Error);
    assert_eq!(read_back(&p.b_region, 8, 2), [0, 0], "nothing lands in a dead node");

    // The crashed node's CPU is gone.
    let mut b_ep_err = p.b.endpoint(4).unwrap_err();
    assert!(matches!(b_ep_err, FabricError::PeerUnreachable(n, _) if n == B), "{b_ep_err}");
    b_ep_err = p.b.connect(conn(A), Access::ALL).unwrap_err();
    assert!(matches!(b_ep_err, FabricError::PeerUnreachable(..)));
    // Nor can anyone bind a new connection to it.
    assert!(matches!(
        p.a.connect(conn(B), Access::ALL),
        Err(FabricError::PeerUnreachable(n, _)) if n == B
    ));
    assert_eq!(p.world.crash(NodeId(99)).map_err(|_| ()), Err(()), "unknown node");
}

#[test]
fn a_crashed_initiators_posted_writes_still_land_but_it_cannot_post() {
    let world = SimWorld::new(SimConfig::default(), 2);
    let p = pair_in(&world);
    let (b, b_region) = (p.1, p.3);
    let mut b_ep = b.endpoint(8).unwrap();
    b_ep.attach(conn(A)).unwrap();
    b_ep.post(conn(A), &write(1, b"last words", 0)).unwrap();
    world.crash(B).unwrap();
    assert_eq!(b_ep.post(conn(A), &write(2, b"x", 0)), Err(PostError::Paused(B)));
    world.run_until_idle();
    assert_eq!(read_back(&p.2, 0, 10), b"last words", "it left the NIC before the crash");
    assert_eq!(read_back(&b_region, 0, 1), [0], "its memory stays readable");
}

/// `pair`, in an existing world: (a, b, a_region, b_region).
fn pair_in(
    world: &SimWorld,
) -> (
    mu_fabric_sim::SimFabric,
    mu_fabric_sim::SimFabric,
    mu_fabric_sim::SimRegion,
    mu_fabric_sim::SimRegion,
) {
    let a = world.node(A);
    let b = world.node(B);
    let ra = a.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    let rb = b.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    a.connect(conn(B), Access::ALL).unwrap();
    b.connect(conn(A), Access::ALL).unwrap();
    (a, b, ra, rb)
}

#[test]
fn restart_makes_a_new_incarnation_that_needs_reconnecting() {
    let mut p = pair(SimConfig::default(), 3);
    assert_eq!(wait_post(&p.world, &mut p.ep, write(1, b"old", 0)).status, Status::Success);
    assert_eq!(p.world.incarnation(B), Some(0));
    p.world.crash(B).unwrap();
    p.world.restart(B).unwrap();
    assert_eq!(p.world.incarnation(B), Some(1));
    assert!(!p.world.is_crashed(B));

    // Old handles of B are dead; its memory is gone with the old incarnation.
    assert_eq!(p.b_region.read(0, &mut [0; 3]), Err(FabricError::UnknownRegion(DATA)));
    assert_eq!(p.b.qp_state(conn(A)).unwrap(), QpState::Reset);

    // A's connection is bound to the old incarnation: unreachable until cycled.
    let c = wait_post(&p.world, &mut p.ep, write(2, b"new", 0));
    assert_eq!(c.status, Status::PeerUnreachable);

    // B comes back: fresh zeroed region, connections brought up again on both sides.
    let b_region = p.b.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    assert_eq!(read_back(&b_region, 0, 3), [0, 0, 0]);
    p.b.connect(conn(A), Access::ALL).unwrap();
    p.a.connect(conn(B), Access::ALL).unwrap();
    assert_eq!(wait_post(&p.world, &mut p.ep, write(3, b"new", 0)).status, Status::Success);
    assert_eq!(read_back(&b_region, 0, 3), b"new");

    // If only B cycles its side after restarting again, A's stale side still cannot reach it;
    // if only A cycles, B's side is in reset and refuses.
    p.world.restart(B).unwrap();
    let b_region = p.b.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    p.b.connect(conn(A), Access::ALL).unwrap();
    p.a.connect(conn(B), Access::ALL).unwrap();
    assert_eq!(wait_post(&p.world, &mut p.ep, write(4, b"x", 0)).status, Status::Success);
    p.world.restart(B).unwrap();
    p.a.connect(conn(B), Access::ALL).unwrap();
    assert_eq!(
        wait_post(&p.world, &mut p.ep, write(5, b"y", 0)).status,
        Status::RemoteAccessDenied
    );
    drop(b_region);
}

fn wait_post(world: &SimWorld, ep: &mut SimEndpoint, wr: WorkRequest<'_>) -> Completion {
    ep.post(conn(B), &wr).unwrap();
    wait(world, ep)
}

#[test]
fn a_restarted_initiators_operations_vanish() {
    let mut p = pair(SimConfig::default(), 4);
    p.ep.post(conn(B), &write(1, b"ghost", 0)).unwrap();
    p.world.restart(A).unwrap();
    p.world.run_until_idle();
    assert_eq!(read_back(&p.b_region, 0, 5), [0; 5]);
    let mut out = [Completion::EMPTY; 4];
    assert_eq!(p.ep.poll(&mut out), 0);
    assert_eq!(p.ep.post(conn(B), &write(2, b"x", 0)), Err(PostError::NotAttached(conn(B))));
}

#[test]
fn a_paused_node_cannot_post_but_its_nic_finishes_what_it_posted() {
    let mut p = pair(SimConfig::default(), 5);
    p.ep.post(conn(B), &write(1, b"before", 0)).unwrap();
    p.world.pause(A).unwrap();
    assert!(p.world.is_paused(A));
    assert_eq!(p.ep.post(conn(B), &write(2, b"during", 0)), Err(PostError::Paused(A)));
    let c = wait(&p.world, &mut p.ep);
    assert_eq!((c.wr_id, c.status), (1, Status::Success));
    assert_eq!(read_back(&p.b_region, 0, 6), b"before");

    // A paused node's memory still takes remote writes.
    let mut b_ep = p.b.endpoint(4).unwrap();
    b_ep.attach(conn(A)).unwrap();
    b_ep.post(conn(A), &write(3, b"to a", 0)).unwrap();
    assert_eq!(wait(&p.world, &mut b_ep).status, Status::Success);
    assert_eq!(read_back(&p.a_region, 0, 4), b"to a");

    p.world.resume(A).unwrap();
    assert!(!p.world.is_paused(A));
    assert_eq!(wait_post(&p.world, &mut p.ep, write(4, b"after", 0)).status, Status::Success);
    assert!(p.world.pause(NodeId(77)).is_err());
}

#[test]
fn partitions_cut_links_until_healed_and_reconnected() {
    let mut p = pair(SimConfig::default(), 6);
    p.world.partition(A, B);
    assert!(p.world.is_partitioned(B, A), "partitions are symmetric");
    let (c, took) =
        timed(&p.world, &mut p.ep, |ep| ep.post(conn(B), &write(1, b"cut", 0)).unwrap());
    assert_eq!(c.status, Status::PeerUnreachable);
    assert!(took >= 1_000_000);
    assert_eq!(read_back(&p.b_region, 0, 3), [0; 3]);

    p.world.heal(A, B);
    assert!(!p.world.is_partitioned(A, B));
    assert_eq!(p.a.qp_state(conn(B)).unwrap(), QpState::Error, "broken until cycled");
    assert_eq!(wait_post(&p.world, &mut p.ep, write(2, b"x", 0)).status, Status::Flushed);
    p.a.connect(conn(B), Access::ALL).unwrap();
    assert_eq!(wait_post(&p.world, &mut p.ep, write(3, b"healed", 0)).status, Status::Success);
    assert_eq!(read_back(&p.b_region, 0, 6), b"healed");
}

#[test]
fn a_partition_in_the_middle_of_a_write_keeps_what_landed() {
    let mut p = pair(SimConfig::default(), 7);
    p.a_region.write(0, &[7; 4096]).unwrap();
    p.ep.post(conn(B), &WorkRequest::write(1, Source::Local(local(0, 4096)), remote(0))).unwrap();
    while !matches!(p.world.in_flight(A).first(), Some(op) if op.landed_bytes >= 1024) {
        assert!(p.world.step());
    }
    p.world.partition(A, B);
    let c = wait(&p.world, &mut p.ep);
    assert_eq!(c.status, Status::PeerUnreachable);
    let landed = read_back(&p.b_region, 0, 4096).iter().filter(|&&x| x == 7).count();
    assert!((1024..4096).contains(&landed), "{landed} bytes landed");
}

#[test]
fn fast_permission_change_can_be_made_to_fail() {
    // Always failing: the side goes to error, and the slow path recovers it.
    let faults = FaultConfig { fast_perm_failure_probability: 1.0, ..FaultConfig::default() };
    let mut p = pair(SimConfig { faults, ..SimConfig::default() }, 8);
    assert_eq!(p.b.set_access_fast(conn(A), Access::READ), Err(PermError::Busy(conn(A))));
    assert_eq!(p.b.qp_state(conn(A)).unwrap(), QpState::Error);
    assert_eq!(
        wait_post(&p.world, &mut p.ep, write(1, b"x", 0)).status,
        Status::RemoteAccessDenied
    );
    p.b.set_access_slow(conn(A), Access::READ_WRITE).unwrap();
    p.a.connect(conn(B), Access::ALL).unwrap();
    assert_eq!(wait_post(&p.world, &mut p.ep, write(2, b"y", 0)).status, Status::Success);

    // Failing only with operations in flight.
    let faults =
        FaultConfig { fast_perm_busy_in_flight_probability: 1.0, ..FaultConfig::default() };
    p.world.set_faults(faults);
    p.b.set_access_fast(conn(A), Access::READ_WRITE).expect("nothing in flight");
    p.ep.post(conn(B), &write(3, b"z", 0)).unwrap();
    assert_eq!(p.b.set_access_fast(conn(A), Access::READ), Err(PermError::Busy(conn(A))));
    let c = wait(&p.world, &mut p.ep);
    assert_eq!(
        (c.wr_id, c.status),
        (3, Status::RemoteAccessDenied),
        "the error state is a barrier"
    );
    assert_eq!(read_back(&p.b_region, 0, 1), b"y");

    // Changing flags needs a side that is ready to send.
    let err = p.b.set_access_fast(conn(NodeId(5)), Access::READ).unwrap_err();
    assert!(matches!(err, PermError::Fabric(FabricError::InvalidTransition { .. })), "{err}");
}

#[test]
fn control_calls_can_be_made_to_stay_under_way() {
    let mut p = pair(SimConfig::default(), 8);
    assert_eq!(wait_post(&p.world, &mut p.ep, write(1, b"x", 0)).status, Status::Success);
    let faults = FaultConfig { control_under_way_probability: 1.0, ..FaultConfig::default() };
    p.world.set_faults(faults);
    // A slow change under way has taken the rights away: the side is in error, a barrier.
    let err = p.b.set_access_slow(conn(A), Access::READ).unwrap_err();
    assert!(matches!(err, FabricError::InProgress(peer, _) if peer == A), "{err}");
    assert_eq!(p.b.qp_state(conn(A)).unwrap(), QpState::Error);
    assert_eq!(
        wait_post(&p.world, &mut p.ep, write(2, b"y", 0)).status,
        Status::RemoteAccessDenied
    );
    // A binding under way leaves the side where it was.
    let err = p.a.connect(conn(B), Access::ALL).unwrap_err();
    assert!(matches!(err, FabricError::InProgress(peer, _) if peer == B), "{err}");
    assert_eq!(p.a.qp_state(conn(B)).unwrap(), QpState::Init);
    // Made again once the fault is off, both go through.
    p.world.set_faults(FaultConfig::default());
    p.b.set_access_slow(conn(A), Access::READ_WRITE).unwrap();
    p.a.connect(conn(B), Access::ALL).unwrap();
    assert_eq!(wait_post(&p.world, &mut p.ep, write(3, b"z", 0)).status, Status::Success);
    assert_eq!(read_back(&p.b_region, 0, 1), b"z");
}

#[test]
fn fast_permission_failure_probability_is_seeded() {
    let run = |seed| {
        let faults = FaultConfig { fast_perm_failure_probability: 0.5, ..FaultConfig::default() };
        let p = pair(SimConfig { faults, ..SimConfig::default() }, seed);
        (0..64)
            .map(|_| {
                let busy = p.b.set_access_fast(conn(A), Access::ALL).is_err();
                if busy {
                    p.b.set_access_slow(conn(A), Access::ALL).unwrap();
                }
                busy
            })
            .collect::<Vec<bool>>()
    };
    let first = run(9);
    assert_eq!(first, run(9));
    assert_ne!(first, run(10));
    let fails = first.iter().filter(|&&b| b).count();
    assert!((16..48).contains(&fails), "{fails} of 64");
}

#[test]
fn link_delay_and_jitter_stretch_round_trips() {
    let config = SimConfig { jitter_ns: 0, ..SimConfig::default() };
    let mut p = pair(config, 10);
    let rtt = |p: &mut common::Pair| {
        timed(&p.world, &mut p.ep, |ep| ep.post(conn(B), &write(1, b"d", 0)).unwrap()).1
    };
    assert_eq!(rtt(&mut p), 1_200);
    p.world.set_link_delay(B, A, LinkDelay { extra_ns: 5_000, jitter_ns: 0 });
    assert_eq!(p.world.link_delay(A, B).extra_ns, 5_000);
    assert_eq!(rtt(&mut p), 1_200 + 2 * 5_000, "both directions are delayed");

    p.world.set_link_delay(A, B, LinkDelay { extra_ns: 0, jitter_ns: 3_000 });
    let samples: Vec<u64> = (0..100).map(|_| rtt(&mut p)).collect();
    assert!(samples.iter().all(|&r| (1_200..=7_200).contains(&r)), "{samples:?}");
    let spread = samples.iter().max().unwrap() - samples.iter().min().unwrap();
    assert!(spread > 2_000, "jitter spreads round trips: {spread} ns");

    p.world.set_link_delay(A, B, LinkDelay::default());
    assert_eq!(rtt(&mut p), 1_200);
}

#[test]
fn connections_stay_fifo_under_heavy_jitter() {
    let config = SimConfig { jitter_ns: 50_000, ..SimConfig::default() };
    let mut p = pair(config, 11);
    p.world.set_link_delay(A, B, LinkDelay { extra_ns: 0, jitter_ns: 50_000 });
    // Each write overwrites the same word with a larger value, then a CAS checks the last one.
    for i in 1..=40u64 {
        p.a_region.store_u64(8 * i as usize, i).unwrap();
        let wr = WorkRequest::write(i, Source::Local(local(8 * i, 8)), remote(0)).unsignaled();
        p.ep.post(conn(B), &wr).unwrap();
    }
    p.ep.post(conn(B), &WorkRequest::compare_swap(99, remote(0), 40, 41)).unwrap();
    let c = wait(&p.world, &mut p.ep);
    assert_eq!((c.wr_id, c.status, c.value), (99, Status::Success, 40), "landed in post order");
    assert_eq!(p.b_region.load_u64(0).unwrap(), 41);
}

#[test]
fn held_writer_is_stopped_mid_write_and_revocation_is_a_barrier() {
    let mut p = pair(SimConfig::default(), 12);
    p.a_region.write(0, &[5; 8192]).unwrap();
    p.ep.post(conn(B), &WorkRequest::write(1, Source::Local(local(0, 8192)), remote(0))).unwrap();
    p.ep.post(conn(B), &write(2, b"second", 9000)).unwrap();
    while !matches!(p.world.in_flight(A).first(), Some(op) if op.landed_bytes > 0) {
        assert!(p.world.step());
    }
    p.world.hold_outgoing(A);
    assert!(p.world.is_held(A));
    p.world.run_until_idle();
    let in_flight = p.world.in_flight(A);
    assert_eq!(in_flight.len(), 2, "{in_flight:?}");
    assert!(in_flight[0].parked && in_flight[0].landed_bytes < 8192);
    let before = read_back(&p.b_region, 0, 10_000);

    p.b.set_access_fast(conn(A), Access::READ).unwrap();
    p.world.release_outgoing(A);
    let first = wait(&p.world, &mut p.ep);
    assert_eq!((first.wr_id, first.status), (1, Status::RemoteAccessDenied));
    let second = wait(&p.world, &mut p.ep);
    assert_eq!((second.wr_id, second.status), (2, Status::Flushed));
    p.world.run_until_idle();
    assert_eq!(read_back(&p.b_region, 0, 10_000), before, "nothing landed after the revoke");
}

#[test]
fn queue_depth_counts_outstanding_and_unpolled() {
    let p = pair(SimConfig::default(), 13);
    let mut ep = p.a.endpoint(2).unwrap();
    drop(p.ep);
    ep.attach(conn(B)).unwrap();
    ep.post(conn(B), &write(1, b"1", 0)).unwrap();
    ep.post(conn(B), &write(2, b"2", 0).unsignaled()).unwrap();
    assert_eq!(ep.post(conn(B), &write(3, b"3", 0)), Err(PostError::QueueFull));
    p.world.run_until_idle();
    // One unpolled completion (the unsignaled write left none): one slot free.
    ep.post(conn(B), &write(4, b"4", 0)).unwrap();
    assert_eq!(ep.post(conn(B), &write(5, b"5", 0)), Err(PostError::QueueFull));
    let mut out = [Completion::EMPTY; 4];
    p.world.run_until_idle();
    assert_eq!(ep.poll(&mut out), 2);
    assert_eq!((out[0].wr_id, out[1].wr_id), (1, 4));
    assert!(matches!(p.a.endpoint(0), Err(FabricError::Config(_))));
}

#[test]
fn bad_input_returns_errors() {
    let mut p = pair(SimConfig::default(), 14);
    assert_eq!(
        p.a.register_region(DATA, 16, Access::ALL).unwrap_err(),
        FabricError::RegionExists(DATA)
    );
    assert!(matches!(
        p.a.register_region(mu_fabric::RegionId(1), 0, Access::ALL),
        Err(FabricError::BadRegionSize { .. })
    ));
    assert!(matches!(
        p.a.register_region(mu_fabric::RegionId(1), usize::MAX, Access::ALL),
        Err(FabricError::BadRegionSize { .. })
    ));
    assert!(matches!(
        p.a_region.write(DATA_BYTES - 1, &[1, 2]),
        Err(FabricError::OutOfBounds { .. })
    ));
    assert!(matches!(
        p.a_region.read(usize::MAX, &mut [0; 2]),
        Err(FabricError::OutOfBounds { .. })
    ));
    assert_eq!(p.a_region.load_u64(4), Err(FabricError::Misaligned(4)));
    assert_eq!(p.a_region.store_u64(12, 1), Err(FabricError::Misaligned(12)));
    assert_eq!(
        p.ep.post(mu_fabric::ConnId::new(B, 3), &write(1, b"x", 0)),
        Err(PostError::NotAttached(mu_fabric::ConnId::new(B, 3)))
    );
    let err = p.a.modify_qp(conn(B), QpState::ReadyToReceive, Access::ALL).unwrap_err();
    assert!(matches!(err, FabricError::InvalidTransition { .. }));
    // A local write slice outside its region is the initiator's protection error.
    let wr = WorkRequest::write(2, Source::Local(local(DATA_BYTES as u64, 1)), remote(0));
    assert_eq!(wait_post(&p.world, &mut p.ep, wr).status, Status::LocalProtection);
    assert_eq!(p.a.qp_state(conn(B)).unwrap(), QpState::Error);
}

#[test]
fn reads_land_in_the_local_slice_when_they_complete() {
    let mut p = pair(SimConfig::default(), 15);
    p.b_region.write(100, b"snapshot").unwrap();
    p.ep.post(conn(B), &WorkRequest::read(1, local(0, 8), remote(100))).unwrap();
    // Run until the read has landed (snapshotted) but not completed.
    while !p.world.in_flight(A).is_empty() {
        assert!(p.world.step());
    }
    p.b_region.write(100, b"changed!").unwrap();
    assert_eq!(read_back(&p.a_region, 0, 8), [0; 8], "not there before the completion");
    assert_eq!(wait(&p.world, &mut p.ep).status, Status::Success);
    assert_eq!(read_back(&p.a_region, 0, 8), b"snapshot", "the bytes as they were at landing");
}

/// `SimConfig::connection_depth`: a connection holds so many unfinished requests, whatever room
/// its endpoint has; one that finished makes room for the next.
#[test]
fn a_connection_refuses_requests_past_its_depth() {
    let mut p = pair(SimConfig { connection_depth: 2, ..SimConfig::default() }, 9);
    p.ep.post(conn(B), &write(1, b"a", 0)).unwrap();
    p.ep.post(conn(B), &write(2, b"b", 8)).unwrap();
    assert_eq!(p.ep.post(conn(B), &write(3, b"c", 16)), Err(PostError::QueueFull));
    assert_eq!(wait(&p.world, &mut p.ep).wr_id, 1);
    p.ep.post(conn(B), &write(3, b"c", 16)).unwrap();
    assert_eq!(wait(&p.world, &mut p.ep).wr_id, 2);
    assert_eq!(wait(&p.world, &mut p.ep).wr_id, 3);
    assert_eq!(read_back(&p.b_region, 16, 1), *b"c");
}
