//! The latency model: defaults, and what operations cost in virtual time.

mod common;

use common::*;
use mu_fabric::{Access, Endpoint, Fabric, LocalRegion, QpState, Source, Status, WorkRequest};
use mu_fabric_sim::{FaultConfig, SimConfig};

#[test]
fn defaults_are_the_documented_ones() {
    let c = SimConfig::default();
    assert_eq!(c.one_way_ns, 600);
    assert_eq!(c.jitter_ns, 40);
    assert_eq!(c.per_byte_ps, 80);
    assert_eq!(c.cas_extra_ns, 700);
    assert_eq!(c.chunk_bytes, 64);
    assert_eq!(c.max_inline_bytes, 256);
    assert_eq!(c.retry_timeout_ns, 1_000_000);
    assert_eq!(c.fast_access_change_ns, 88_000);
    assert_eq!(c.slow_access_change_ns, 1_200_000);
    assert_eq!(c.faults, FaultConfig::default());
    assert!(!c.faults.out_of_order_landing);
}

/// Round trips of `count` operations built by `wr`, in virtual ns.
fn round_trips(wr: impl Fn(u64) -> WorkRequest<'static>, count: u64) -> Vec<u64> {
    let mut p = pair(SimConfig::default(), 11);
    p.b_region.store_u64(0, 0).unwrap();
    (0..count)
        .map(|i| {
            let (c, rtt) = timed(&p.world, &mut p.ep, |ep| ep.post(conn(B), &wr(i)).unwrap());
            assert_eq!(c.status, Status::Success);
            rtt
        })
        .collect()
}

fn check_range(what: &str, rtts: &[u64], low_ns: u64, high_ns: u64) {
    let mean = rtts.iter().sum::<u64>() / rtts.len() as u64;
    for &rtt in rtts {
        assert!((low_ns..=high_ns).contains(&rtt), "{what}: round trip {rtt} ns");
    }
    // Jitter is drawn, not constant: the round trips must not all be equal.
    assert!(rtts.iter().any(|&r| r != rtts[0]), "{what}: no jitter in {rtts:?}");
    eprintln!("{what}: mean round trip {mean} ns");
}

#[test]
fn write_round_trip_is_about_1_2_us() {
    let rtts = round_trips(|i| WorkRequest::write(i, Source::Inline(b"entry"), remote(64)), 200);
    // 2 × 600 ns, plus up to 2 × 40 ns of jitter, plus a byte or so of serialization.
    check_range("write", &rtts, 1_200, 1_300);
}

#[test]
fn read_round_trip_is_about_1_2_us() {
    let rtts = round_trips(|i| WorkRequest::read(i, local(0, 8), remote(64)), 200);
    check_range("read", &rtts, 1_200, 1_300);
}

#[test]
fn cas_round_trip_is_about_1_9_us() {
    let rtts = round_trips(|i| WorkRequest::compare_swap(i, remote(0), i, i + 1), 200);
    check_range("cas", &rtts, 1_900, 2_000);
}

#[test]
fn larger_writes_cost_per_byte() {
    let config = SimConfig { jitter_ns: 0, ..SimConfig::default() };
    let mut p = pair(config, 1);
    let post = |len: u32| {
        move |ep: &mut mu_fabric_sim::SimEndpoint| {
            ep.post(conn(B), &WorkRequest::write(1, Source::Local(local(0, len)), remote(0)))
                .unwrap()
        }
    };
    let (_, small) = timed(&p.world, &mut p.ep, post(8));
    let (_, large) = timed(&p.world, &mut p.ep, post(4096));
    assert_eq!(small, 1_200, "8 bytes: 2 × 600 ns, serialization rounds to 0");
    // 4096 bytes × 80 ps = 327.68 ns.
    assert_eq!(large, 1_200 + 327, "4 KiB");
}

#[test]
fn permission_changes_charge_the_node_not_the_clock() {
    let p = pair(SimConfig::default(), 2);
    let t0 = p.world.now_ns();
    let before = p.world.node_busy_until(B);
    assert!(before >= t0, "connecting is charged too");
    p.b.set_access_fast(conn(A), Access::READ).unwrap();
    assert_eq!(p.world.node_busy_until(B), before.max(t0) + 88_000);
    assert_eq!(p.world.now_ns(), t0, "the global clock does not move");

    // Let the node's busy time pass, then measure one slow change alone.
    p.world.run_until(p.world.node_busy_until(B) + 1);
    let t1 = p.world.now_ns();
    p.b.set_access_slow(conn(A), Access::READ_WRITE).unwrap();
    assert_eq!(p.world.node_busy_until(B), t1 + 1_200_000);
    assert_eq!(p.b.qp_state(conn(A)).unwrap(), QpState::ReadyToSend);
    assert_eq!(p.world.now_ns(), t1);
    assert_eq!(p.world.node_busy_until(mu_fabric::NodeId(42)), 0, "unknown node");
}

#[test]
fn a_write_from_memory_pays_the_non_inline_step_and_an_inline_one_does_not() {
    let config = SimConfig { jitter_ns: 0, non_inline_extra_ns: 300, ..SimConfig::default() };
    let mut p = pair(config, 3);
    let data = [7u8; 64];
    let (_, inline) = timed(&p.world, &mut p.ep, |ep| {
        ep.post(conn(B), &WorkRequest::write(1, Source::Inline(&data), remote(0))).unwrap()
    });
    let (_, local_write) = timed(&p.world, &mut p.ep, |ep| {
        ep.post(conn(B), &WorkRequest::write(2, Source::Local(local(0, 64)), remote(0))).unwrap()
    });
    // One 64-byte chunk: it lands whole, so serialization adds nothing either way.
    assert_eq!(inline, 1_200, "inline: no DMA read of the payload");
    assert_eq!(local_write, 1_200 + 300, "from memory: the DMA read first");
}

#[test]
fn posts_of_one_node_leave_one_post_cost_apart() {
    let config = SimConfig { jitter_ns: 0, post_cpu_ns: 250, ..SimConfig::default() };
    let mut p = pair(config, 4);
    let t0 = p.world.now_ns();
    for i in 0..3 {
        p.ep.post(conn(B), &WorkRequest::write(i, Source::Inline(b"x"), remote(0))).unwrap();
    }
    let done: Vec<u64> = (0..3)
        .map(|_| {
            wait(&p.world, &mut p.ep);
            p.world.now_ns() - t0
        })
        .collect();
    assert_eq!(done, vec![250 + 1_200, 500 + 1_200, 750 + 1_200]);
}

#[test]
fn a_crash_is_notified_after_the_notice_delay() {
    let config = SimConfig { crash_notice_ns: 30_000, ..SimConfig::default() };
    let p = pair(config, 5);
    p.world.crash(B).unwrap();
    let t0 = p.world.now_ns();
    assert!(!p.a.crash_notified(B), "not at once");
    p.world.run_until(t0 + 29_999);
    assert!(!p.a.crash_notified(B), "not before the delay");
    p.world.run_until(t0 + 30_000);
    assert!(p.a.crash_notified(B), "once the delay has passed");
}

#[test]
fn posts_wait_for_a_control_call_only_when_asked() {
    for blocks in [false, true] {
        let config =
            SimConfig { jitter_ns: 0, control_blocks_posts: blocks, ..SimConfig::default() };
        let mut p = pair(config, 6);
        p.world.run_until(p.world.node_busy_until(A) + 1);
        let t0 = p.world.now_ns();
        p.a.set_access_fast(conn(B), Access::ALL).unwrap();
        let (_, rtt) = timed(&p.world, &mut p.ep, |ep| {
            ep.post(conn(B), &WorkRequest::write(1, Source::Inline(b"ack"), remote(0))).unwrap()
        });
        let expected = if blocks { 88_000 + 1_200 } else { 1_200 };
        assert_eq!(rtt, expected, "blocks: {blocks}");
        assert_eq!(p.world.node_busy_until(A), t0 + 88_000);
    }
}
