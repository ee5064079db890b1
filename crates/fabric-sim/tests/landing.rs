//! Visibility order within a write: left to right by default, shuffled with out-of-order landing.
//!
//! A Mu follower that polls for a canary at the end of an entry is only safe where writes land
//! left to right; these tests show the simulator exposes the difference to such a reader.

mod common;

use common::*;
use mu_fabric::{Endpoint, LocalRegion, Source, Status, WorkRequest};
use mu_fabric_sim::{FaultConfig, SimConfig};

const ENTRY_BYTES: usize = 1024;

/// What a reader polling the target between every two events saw over `rounds` writes.
struct Seen {
    /// The last byte (the canary) was set while some earlier byte was not.
    canary_before_body: bool,
    /// The bytes of the current round did not form a prefix of the entry.
    not_a_prefix: bool,
    /// Separate landing events observed (a write is not one event).
    partial_views: usize,
}

fn poll_entries(out_of_order: bool, seed: u64, rounds: u8) -> Seen {
    let faults = FaultConfig { out_of_order_landing: out_of_order, ..FaultConfig::default() };
    let mut p = pair(SimConfig { faults, ..SimConfig::default() }, seed);
    let mut seen = Seen { canary_before_body: false, not_a_prefix: false, partial_views: 0 };
    for round in 1..=rounds {
        p.a_region.write(0, &[round; ENTRY_BYTES]).unwrap();
        let wr = WorkRequest::write(
            u64::from(round),
            Source::Local(local(0, ENTRY_BYTES as u32)),
            remote(0),
        );
        p.ep.post(conn(B), &wr).unwrap();
        let mut out = [mu_fabric::Completion::EMPTY; 1];
        loop {
            let entry = read_back(&p.b_region, 0, ENTRY_BYTES);
            let new = entry.iter().filter(|&&x| x == round).count();
            if new > 0 && new < ENTRY_BYTES {
                seen.partial_views += 1;
            }
            if entry[ENTRY_BYTES - 1] == round && entry.iter().any(|&x| x != round) {
                seen.canary_before_body = true;
            }
            if entry[..new].iter().any(|&x| x != round) {
                seen.not_a_prefix = true;
            }
            if p.ep.poll(&mut out) == 1 {
                assert_eq!(out[0].status, Status::Success);
                assert_eq!(entry, [round; ENTRY_BYTES], "the completion comes after every byte");
                break;
            }
            assert!(p.world.step());
        }
    }
    seen
}

#[test]
fn left_to_right_landing_never_shows_the_canary_first() {
    let seen = poll_entries(false, 21, 30);
    assert!(seen.partial_views > 0, "a write lands in several events, so prefixes are visible");
    assert!(!seen.not_a_prefix, "left to right: what has landed is always a prefix");
    assert!(!seen.canary_before_body, "the canary is the last byte to land");
}

#[test]
fn out_of_order_landing_can_show_the_canary_before_the_body() {
    let seen = poll_entries(true, 21, 30);
    assert!(seen.partial_views > 0);
    assert!(seen.not_a_prefix);
    assert!(seen.canary_before_body, "with reordering a canary alone proves nothing");
}

#[test]
fn chunks_land_at_distinct_times_within_the_flight() {
    let faults = FaultConfig { out_of_order_landing: true, ..FaultConfig::default() };
    let mut p = pair(SimConfig { faults, jitter_ns: 0, ..SimConfig::default() }, 22);
    let start = p.world.now_ns();
    p.ep.post(conn(B), &WorkRequest::write(1, Source::Local(local(0, 4096)), remote(0))).unwrap();
    let mut times = Vec::new();
    let mut last_landed = 0;
    while p.world.step() {
        let landed = p.world.in_flight(A).first().map_or(4096, |op| op.landed_bytes);
        if landed != last_landed {
            times.push(p.world.now_ns());
            last_landed = landed;
        }
    }
    assert_eq!(times.len(), 4096 / 64, "one event per 64-byte chunk");
    assert!(times.windows(2).all(|w| w[0] < w[1]), "distinct, increasing times");
    assert_eq!(times[0] - start, 600, "the first chunk lands one way after posting");
    assert_eq!(times[times.len() - 1] - times[0], 327, "spread over the serialization time");
}
