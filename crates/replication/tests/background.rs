//! Engine tests of the background plane (Mu paper §5.1 leader election, §5.2 permission
//! management), with no fabric. Each names the part of the paper it checks.

use mu_fabric::NodeId;
use mu_replication::{
    request_word, split_request, Detector, DetectorConfig, FateSharing, PermStep,
    PermissionManager, ReplicaSet, ACK_RECOVERING, REQUEST_SEQ_MAX,
};
use std::collections::BTreeSet;

fn set(ids: &[u16]) -> ReplicaSet {
    ReplicaSet::new(ids.iter().map(|&i| NodeId(i)).collect()).unwrap()
}

fn detector(ids: &[u16], me: u16) -> Detector {
    Detector::new(DetectorConfig::default(), &set(ids), NodeId(me)).unwrap()
}

/// Reads `peer` `reads` times with a counter that moves on every read, starting after `from`.
fn beat(d: &mut Detector, peer: u16, from: u64, reads: u64) -> u64 {
    for c in from + 1..=from + reads {
        d.on_heartbeat(NodeId(peer), c, true);
    }
    from + reads
}

/// Reads `peer` `reads` times with the same counter.
fn stale(d: &mut Detector, peer: u16, counter: u64, reads: u64) {
    for _ in 0..reads {
        d.on_heartbeat(NodeId(peer), counter, true);
    }
}

// ---- §5.1 configuration ------------------------------------------------------------------------

/// §5.1: scores "capped by configurable minimum and maximum values, chosen experimentally to be 0
/// and 15", thresholds "chosen experimentally to be 2 and 6".
#[test]
fn t10_default_config_is_the_papers() {
    let c = DetectorConfig::default();
    assert_eq!((c.score_max, c.failure_threshold, c.recovery_threshold), (15, 2, 6));
    assert_eq!(c.read_period_ns, 100_000);
    assert_eq!(c.fate_check_period_ns, 10_000_000);
    assert_eq!(c.validate(), Ok(()));
}

/// §5.1 "different failure and recovery thresholds ... to avoid oscillation": a configuration
/// that loses the gap, or cannot fail or recover at all, is refused with a message naming the
/// field and its value.
#[test]
fn t11_config_validation_names_the_field_and_value() {
    let check = |edit: fn(&mut DetectorConfig), words: &[&str]| {
        let mut c = DetectorConfig::default();
        edit(&mut c);
        let err = c.validate().expect_err("invalid config accepted");
        for w in words {
            assert!(err.contains(w), "{err:?} should mention {w:?}");
        }
    };
    check(|c| c.score_max = 0, &["score_max", "0"]);
    check(|c| c.failure_threshold = 0, &["failure_threshold", "0"]);
    check(|c| c.failure_threshold = 6, &["failure_threshold (6)", "recovery_threshold (6)"]);
    check(|c| c.failure_threshold = 9, &["failure_threshold (9)", "recovery_threshold (6)"]);
    check(|c| c.recovery_threshold = 16, &["recovery_threshold (16)", "score_max (15)"]);
    // Equal to the cap, a failed replica could never rise above it.
    check(|c| c.recovery_threshold = 15, &["recovery_threshold (15)", "score_max (15)"]);
    check(|c| c.read_period_ns = 0, &["read_period_ns", "0"]);
    check(|c| c.fate_check_period_ns = 0, &["fate_check_period_ns", "0"]);

    let tight = DetectorConfig {
        score_max: 3,
        failure_threshold: 1,
        recovery_threshold: 2,
        ..DetectorConfig::default()
    };
    assert_eq!(tight.validate(), Ok(()));
}

/// §5.1: each replica runs its own detector over the others; it must be one of the set.
#[test]
fn t12_detector_new_checks_me_and_config() {
    let err = Detector::new(DetectorConfig::default(), &set(&[0, 1, 2]), NodeId(7)).unwrap_err();
    assert!(err.contains("n7"), "{err}");
    let bad = DetectorConfig { failure_threshold: 0, ..DetectorConfig::default() };
    assert!(Detector::new(bad, &set(&[0, 1, 2]), NodeId(0)).is_err());
}

// ---- §5.1 pull-score ---------------------------------------------------------------------------

/// §5.1 pull-score: "If a replica has updated its counter since the last time it was read, we
/// increment that replica's score; otherwise, we decrement it. The score is capped by ... 0 and
/// 15".
#[test]
fn t20_score_climbs_falls_and_clamps() {
    let mut d = detector(&[0, 1, 2], 0);
    let peer = NodeId(1);
    assert_eq!(d.score(peer), Some(6), "peers start at the recovery threshold");
    d.on_heartbeat(peer, 100, true);
    assert_eq!(d.score(peer), Some(6), "the first read is a baseline");
    let c = beat(&mut d, 1, 100, 3);
    assert_eq!(d.score(peer), Some(9));
    let c = beat(&mut d, 1, c, 20);
    assert_eq!(d.score(peer), Some(15), "capped at score_max");
    stale(&mut d, 1, c, 4);
    assert_eq!(d.score(peer), Some(11));
    stale(&mut d, 1, c, 30);
    assert_eq!(d.score(peer), Some(0), "floored at 0");
    // A counter that goes backwards has changed too: "updated", not "grown".
    d.on_heartbeat(peer, c - 50, true);
    assert_eq!(d.score(peer), Some(1));
    // We do not read ourselves, nor replicas outside the set.
    assert_eq!(d.score(NodeId(0)), None);
    assert_eq!(d.score(NodeId(9)), None);
    d.on_heartbeat(NodeId(0), 1, true);
    d.on_heartbeat(NodeId(9), 1, true);
    d.on_unreachable(NodeId(0));
    assert!(d.is_alive(NodeId(0)));
    assert!(!d.is_alive(NodeId(9)));
}

/// §5.1 pull-score: "Once a replica's score drops below a failure threshold, we consider it to
/// have failed; if its score goes above a recovery threshold, we consider it to be active".
/// Between the two, a replica keeps the state it had (hysteresis).
#[test]
fn t21_hysteresis_between_the_thresholds() {
    let mut d = detector(&[0, 1, 2], 0);
    let peer = NodeId(2);
    d.on_heartbeat(peer, 0, true);
    stale(&mut d, 2, 0, 4);
    assert_eq!(d.score(peer), Some(2));
    assert!(d.is_alive(peer), "2 is not below the failure threshold");
    stale(&mut d, 2, 0, 1);
    assert_eq!(d.score(peer), Some(1));
    assert!(!d.is_alive(peer), "1 is below the failure threshold");

    let c = beat(&mut d, 2, 0, 5);
    assert_eq!(d.score(peer), Some(6));
    assert!(!d.is_alive(peer), "failed stays failed up to the recovery threshold");
    let c = beat(&mut d, 2, c, 1);
    assert_eq!(d.score(peer), Some(7));
    assert!(d.is_alive(peer), "7 is above the recovery threshold");

    stale(&mut d, 2, c, 3);
    assert_eq!(d.score(peer), Some(4));
    assert!(d.is_alive(peer), "alive stays alive down to the failure threshold");
}

/// §5.1 pull-score: a replica whose counter never moves (never started, or crashed before we
/// first read it) is failed after a bounded number of reads: one baseline read, then
/// `recovery_threshold - failure_threshold + 1` stale ones.
#[test]
fn t22_a_peer_that_never_moves_fails_after_a_bounded_number_of_reads() {
    for (f, r) in [(2u8, 6u8), (1, 2), (3, 10)] {
        let config = DetectorConfig {
            failure_threshold: f,
            recovery_threshold: r,
            ..DetectorConfig::default()
        };
        let mut d = Detector::new(config, &set(&[0, 1]), NodeId(0)).unwrap();
        d.on_heartbeat(NodeId(1), 0, true); // baseline
        let bound = u64::from(r - f + 1);
        stale(&mut d, 1, 0, bound - 1);
        assert!(d.is_alive(NodeId(1)), "f={f} r={r}: one stale read short of the bound");
        stale(&mut d, 1, 0, 1);
        assert!(!d.is_alive(NodeId(1)), "f={f} r={r}: failed after {bound} stale reads");
    }
}

/// §5.1 "Large network delays": the longer timeout of the connection fires (a counter read
/// fails) and the replica is failed at once; it comes back only by a counter that moves, and a
/// restarted replica's counter, which starts again from 0, is a fresh start, not compared with
/// its old one.
#[test]
fn t23_unreachable_fails_at_once_and_a_restarted_counter_recovers() {
    let mut d = detector(&[0, 1, 2], 0);
    let peer = NodeId(1);
    let c = beat(&mut d, 1, 0, 20);
    assert_eq!(d.score(peer), Some(15));
    d.on_unreachable(peer);
    assert_eq!(d.score(peer), Some(0));
    assert!(!d.is_alive(peer));
    assert_eq!(d.leader(), Some(NodeId(0)));

    // The restarted peer counts again from 0. Its first counter is a baseline even though it
    // differs from the old one (c).
    assert_ne!(c, 0);
    d.on_heartbeat(peer, 0, true);
    assert_eq!(d.score(peer), Some(0), "fresh start: not compared with the old counter");
    let n = beat(&mut d, 1, 0, 6);
    assert_eq!(d.score(peer), Some(6));
    assert!(!d.is_alive(peer), "not above the recovery threshold yet");
    beat(&mut d, 1, n, 1);
    assert!(d.is_alive(peer));
    assert_eq!(d.leader(), Some(NodeId(0)));
}

// ---- §5.1 the lowest-id rule -------------------------------------------------------------------

/// §5.1: "replica i decides that j is leader if j is the replica with the lowest id, among those
/// that i considers to be alive"; i always considers itself alive.
#[test]
fn t30_leader_is_the_lowest_alive_id() {
    for ids in [&[3u16, 5, 9][..], &[1, 2, 3, 4], &[10, 11, 12, 13, 14]] {
        let me = *ids.last().unwrap();
        let mut d = detector(ids, me);
        assert_eq!(d.alive().len(), ids.len(), "{ids:?}: everyone starts alive");
        assert_eq!(d.leader(), Some(NodeId(ids[0])), "{ids:?}");
        // Fail the peers one by one, lowest first: leadership moves up to us.
        for (k, &peer) in ids[..ids.len() - 1].iter().enumerate() {
            d.on_unreachable(NodeId(peer));
            assert_eq!(d.leader(), Some(NodeId(ids[k + 1])), "{ids:?} after {peer} failed");
        }
        assert_eq!(d.alive(), [NodeId(me)], "{ids:?}: we are always alive to ourselves");
        assert!(d.is_alive(NodeId(me)));
        // The lowest comes back: it leads again.
        let c = beat(&mut d, ids[0], 0, 8);
        assert!(c > 0);
        assert_eq!(d.leader(), Some(NodeId(ids[0])), "{ids:?}");
    }
}

/// §5.1 with the eligibility flag: a replica that restarted with an empty log may not lead until
/// it had a state transfer, however alive it is; the next lowest alive eligible id leads.
#[test]
fn t31_an_ineligible_replica_is_never_elected() {
    let mut d = detector(&[0, 1, 2, 3], 2);
    let mut c = 0;
    for _ in 0..30 {
        d.on_heartbeat(NodeId(0), c, false);
        d.on_heartbeat(NodeId(1), c, true);
        c += 1;
        assert!(d.is_alive(NodeId(0)), "ineligible is not failed");
        assert_eq!(d.leader(), Some(NodeId(1)));
    }
    d.on_unreachable(NodeId(1));
    assert_eq!(d.leader(), Some(NodeId(2)), "we lead: 0 is ineligible, 1 failed");
    d.set_self_eligible(false);
    assert_eq!(d.leader(), Some(NodeId(3)), "we are ineligible too: 3 is alive and eligible");
    d.on_unreachable(NodeId(3));
    assert_eq!(d.leader(), None, "no one alive is eligible");
    assert!(d.is_alive(NodeId(2)), "ineligible, we are still alive to ourselves");
    // 0 had its state transfer.
    d.on_heartbeat(NodeId(0), c, true);
    assert_eq!(d.leader(), Some(NodeId(0)));
    d.set_self_eligible(true);
    assert_eq!(d.leader(), Some(NodeId(0)));
}

// ---- §5.1 fate sharing -------------------------------------------------------------------------

/// §5.1 "Fate sharing": "if the replication thread is stuck inside a call to propose, the
/// replication thread stops incrementing the local counter, to allow a new leader to be
/// elected"; the heartbeat resumes once the replication thread moves again.
#[test]
fn t40_fate_sharing_stops_and_resumes_the_heartbeat() {
    let mut f = FateSharing::new();
    assert!(f.check(10, true), "the first check has nothing to compare with");
    assert!(f.check(20, true), "moving inside propose is not stuck");
    assert!(f.check(20, false), "idle outside propose is not stuck");
    assert!(!f.check(20, true), "inside propose and not moving: stuck");
    assert!(!f.check(20, true));
    assert!(!f.check(20, false), "still stuck until the loop moves, even out of propose");
    assert!(f.check(21, true), "moved: the heartbeat resumes");
    assert!(f.check(22, true));
    assert!(!f.check(22, true), "stuck again");
    assert!(f.check(23, false));
}

// ---- §5.2 permission management ----------------------------------------------------------------

struct Perms {
    pm: PermissionManager,
    requests: Vec<u64>,
    plan: Vec<PermStep>,
    ids: Vec<u16>,
}

impl Perms {
    fn new(ids: &[u16], me: u16) -> Perms {
        Perms {
            pm: PermissionManager::new(NodeId(me), &set(ids)).unwrap(),
            requests: vec![0; ids.len()],
            plan: Vec::new(),
            ids: ids.to_vec(),
        }
    }

    /// `requester` (an id) writes a request word into our array.
    fn ask(&mut self, requester: u16, incarnation: u32, seq: u32) -> u64 {
        let pos = self.ids.iter().position(|&i| i == requester).unwrap();
        self.requests[pos] = request_word(incarnation, seq);
        self.requests[pos]
    }

    fn next(&mut self) -> Option<u16> {
        self.pm.next(&self.requests, &mut self.plan).map(|id| id.0)
    }

    /// Plans the next request and reports it done with `ok`; returns the plan.
    fn handle(&mut self, ok: bool) -> (u16, Vec<PermStep>) {
        let requester = self.next().expect("a pending request");
        self.pm.done(NodeId(requester), ok);
        (requester, self.plan.clone())
    }
}

fn grant(peer: u16, incarnation: u32, rebind: bool) -> PermStep {
    PermStep::Grant { peer: NodeId(peer), incarnation, rebind }
}

fn revoke(peer: u16) -> PermStep {
    PermStep::Revoke { peer: NodeId(peer) }
}

fn ack(peer: u16, word: u64) -> PermStep {
    PermStep::Ack { peer: NodeId(peer), word }
}

/// §5.2: "this is done through a simple RDMA Write to a permission request array": a word of
/// the requester's incarnation and a sequence number, 0 meaning no request.
#[test]
fn t50_request_words() {
    let w = request_word(7, 3);
    assert_eq!(w, (7 << 32) | 3);
    assert_eq!(split_request(w), (7, 3));
    let highest = REQUEST_SEQ_MAX;
    assert_eq!(split_request(request_word(u32::MAX, highest)), (u32::MAX, highest));
    assert_eq!(request_word(u32::MAX, highest) & ACK_RECOVERING, 0, "the recovering bit is free");
    assert_ne!(request_word(0, 1), 0);
    assert!(std::panic::catch_unwind(|| request_word(0, 0)).is_err());
    assert!(std::panic::catch_unwind(|| request_word(1, highest + 1)).is_err());
}

/// §5.2: "r revokes write access from the current holder, grants write access to ℓ, and sends
/// an ack to ℓ" — with no holder yet, there is nothing to revoke. The first grant to a peer
/// rebinds: we do not know which incarnation its connection reached.
#[test]
fn t51_first_request_is_granted_without_revoke() {
    let mut p = Perms::new(&[0, 1, 2], 2);
    assert_eq!(p.next(), None, "nothing pending");
    assert!(p.plan.is_empty());
    assert_eq!(p.pm.holder(), None);
    let w = p.ask(1, 1, 1);
    assert_eq!(p.next(), Some(1));
    assert_eq!(p.plan, [grant(1, 1, true), ack(1, w)]);
    assert_eq!(p.pm.holder(), None, "not applied before done");
    p.pm.done(NodeId(1), true);
    assert_eq!(p.pm.holder(), Some(NodeId(1)));
    assert_eq!(p.next(), None, "the request was handled");
}

/// §5.2: "r revokes write access from the current holder, grants write access to ℓ".
#[test]
fn t52_a_second_requester_revokes_the_first() {
    let mut p = Perms::new(&[0, 1, 2], 2);
    p.ask(1, 1, 1);
    p.handle(true);
    let w = p.ask(0, 4, 1);
    let (who, plan) = p.handle(true);
    assert_eq!(who, 0);
    assert_eq!(plan, [revoke(1), grant(0, 4, true), ack(0, w)]);
    assert_eq!(p.pm.holder(), Some(NodeId(0)));
    // 1 had been bound: when it asks again with the same incarnation, flags suffice.
    let w = p.ask(1, 1, 2);
    assert_eq!(p.handle(true).1, [revoke(0), grant(1, 1, false), ack(1, w)]);
}

/// §5.2: "the permission request array may contain multiple entries. A permission management
/// thread monitors and handles permission change requests one by one in order of requester id".
#[test]
fn t53_requests_are_handled_one_at_a_time_in_id_order() {
    let mut p = Perms::new(&[0, 1, 2, 3, 4], 0);
    let w3 = p.ask(3, 1, 1);
    let w1 = p.ask(1, 1, 1);
    assert_eq!(p.next(), Some(1), "lowest id first, whoever wrote first");
    assert_eq!(p.plan, [grant(1, 1, true), ack(1, w1)]);
    p.pm.done(NodeId(1), true);
    assert_eq!(p.next(), Some(3));
    assert_eq!(p.plan, [revoke(1), grant(3, 1, true), ack(3, w3)]);
    p.pm.done(NodeId(3), true);
    assert_eq!(p.next(), None);
    assert_eq!(p.pm.holder(), Some(NodeId(3)));
}

/// §5.2 with §4.2: a leader re-requests permission at every new attempt; from the holder itself
/// (same incarnation) that is re-acked with a grant — the runtime's chance to repair the
/// holder's connection — and revokes nothing.
#[test]
fn t54_the_holder_asking_again_is_not_revoked() {
    let mut p = Perms::new(&[0, 1, 2], 0);
    p.ask(2, 5, 1);
    p.handle(true);
    let w = p.ask(2, 5, 2);
    let (who, plan) = p.handle(true);
    assert_eq!(who, 2);
    assert_eq!(plan, [grant(2, 5, false), ack(2, w)]);
    assert_eq!(p.pm.holder(), Some(NodeId(2)));
    // The same word again is not a new request.
    assert_eq!(p.next(), None);
}

/// §5.2 "only one replica at a time has write permission on its log", across restarts: a new
/// incarnation of the holder asks; the old incarnation's access goes first, then the connection
/// is rebuilt for the new one.
#[test]
fn t55_a_new_incarnation_of_the_holder_is_revoked_then_rebound() {
    let mut p = Perms::new(&[0, 1, 2], 0);
    p.ask(1, 1, 9);
    p.handle(true);
    let w = p.ask(1, 2, 1);
    assert_eq!(p.handle(true).1, [revoke(1), grant(1, 2, true), ack(1, w)]);
    assert_eq!(p.pm.holder(), Some(NodeId(1)));
    let w = p.ask(1, 2, 2);
    assert_eq!(p.handle(true).1, [grant(1, 2, false), ack(1, w)], "now bound to incarnation 2");
}

/// §5.2 for our own replication thread (Listing 2: a leader asks every replica, itself
/// included): its access is our own log guard; its ack is stored locally.
#[test]
fn t56_our_own_request_revokes_the_remote_holder_then_grants_our_own() {
    let mut p = Perms::new(&[0, 1, 2], 1);
    p.ask(2, 1, 1);
    p.handle(true);
    let w = p.ask(1, 3, 1);
    let (who, plan) = p.handle(true);
    assert_eq!(who, 1);
    assert_eq!(plan, [revoke(2), PermStep::GrantOwn, ack(1, w)]);
    assert_eq!(p.pm.holder(), Some(NodeId(1)));
    // We ask again while holding: nothing to revoke.
    let w = p.ask(1, 3, 2);
    assert_eq!(p.handle(true).1, [PermStep::GrantOwn, ack(1, w)]);
}

/// §5.2: a remote would-be leader asks while our own replication thread holds our log: our own
/// guard is closed first (our leader's next guarded write fails and it aborts).
#[test]
fn t57_a_remote_request_while_we_hold_revokes_our_own_access_first() {
    let mut p = Perms::new(&[0, 1, 2], 1);
    p.ask(1, 1, 1);
    assert_eq!(p.handle(true).1, [PermStep::GrantOwn, ack(1, request_word(1, 1))]);
    let w = p.ask(0, 1, 1);
    assert_eq!(p.handle(true).1, [PermStep::RevokeOwn, grant(0, 1, true), ack(0, w)]);
    assert_eq!(p.pm.holder(), Some(NodeId(0)));
}

/// §5.2, a plan that fails part way: the holder stays (its revoke may have failed), the failed
/// requester is counted as a possible writer (its grant may have half happened), and the request
/// is dropped, so that a requester that cannot be served does not come back until it asks again.
#[test]
fn t58_a_failed_plan_keeps_the_holder_and_drops_the_request() {
    let mut p = Perms::new(&[0, 1, 2, 3], 3);
    p.ask(2, 1, 1);
    p.handle(true);
    let w = p.ask(1, 1, 1);
    let (who, plan) = p.handle(false);
    assert_eq!(who, 1);
    assert_eq!(plan, [revoke(2), grant(1, 1, true), ack(1, w)]);
    assert_eq!(p.pm.holder(), Some(NodeId(2)), "holder unchanged");
    assert_eq!(p.next(), None, "the failed request is not retried");
    // Someone else asks: both the holder and the failed requester are revoked.
    let w0 = p.ask(0, 1, 1);
    let (who, plan) = p.handle(true);
    assert_eq!(who, 0);
    assert_eq!(plan, [revoke(1), revoke(2), grant(0, 1, true), ack(0, w0)]);
    // 1 asks again (a new word): served.
    let w1 = p.ask(1, 1, 2);
    assert_eq!(p.handle(true).1, [revoke(0), grant(1, 1, true), ack(1, w1)]);
    assert_eq!(p.pm.holder(), Some(NodeId(1)));
    assert_eq!(p.next(), None);
}

/// §5.2 and liveness: a requester whose grant cannot succeed (it died after asking) must not
/// take our log away from a live leader again and again. Its failed request is dropped; the live
/// leader's next request is served and stays served.
#[test]
fn t59_a_dead_requester_does_not_keep_taking_the_log() {
    let mut p = Perms::new(&[0, 1, 2, 3], 3);
    p.ask(3, 1, 1);
    p.handle(true);
    p.ask(0, 1, 1); // 0 asks, then dies
    let (who, plan) = p.handle(false);
    assert_eq!((who, plan[0]), (0, PermStep::RevokeOwn));
    let w = p.ask(3, 1, 2); // we ask again
    assert_eq!(p.handle(true).1, [revoke(0), PermStep::GrantOwn, ack(3, w)]);
    assert_eq!(p.next(), None, "0's request does not come back");
    assert_eq!(p.pm.holder(), Some(NodeId(3)));
}

/// §5.2 across restarts: a peer found restarted or dead no longer holds our log (its connection
/// was broken) and its next grant must rebuild the connection.
#[test]
fn t60_forget_drops_the_holder_and_the_next_grant_rebinds() {
    let mut p = Perms::new(&[0, 1, 2], 0);
    p.ask(2, 1, 1);
    p.handle(true);
    p.pm.forget(NodeId(2));
    assert_eq!(p.pm.holder(), None);
    let w = p.ask(2, 1, 2);
    assert_eq!(
        p.handle(true).1,
        [grant(2, 1, true), ack(2, w)],
        "no revoke (the broken connection cannot write), and a rebind"
    );
    // Forgetting someone who does not hold our log leaves the holder alone.
    p.ask(1, 1, 1);
    p.handle(true);
    p.pm.forget(NodeId(2));
    p.pm.forget(NodeId(0)); // ourselves: ignored
    p.pm.forget(NodeId(9)); // outside the set: ignored
    assert_eq!(p.pm.holder(), Some(NodeId(1)));
    let w = p.ask(2, 1, 3);
    assert_eq!(p.handle(true).1, [revoke(1), grant(2, 1, true), ack(2, w)]);
}

/// The request array is laid out by position: one word per replica of the set.
#[test]
#[should_panic(expected = "one word per replica")]
fn t61_a_request_array_of_the_wrong_length_is_a_bug() {
    let mut pm = PermissionManager::new(NodeId(0), &set(&[0, 1, 2])).unwrap();
    pm.next(&[0, 0], &mut Vec::new());
}

/// §5.2 "one by one": a plan must be reported done before the next is planned.
#[test]
#[should_panic(expected = "still running")]
fn t62_one_plan_at_a_time() {
    let mut p = Perms::new(&[0, 1, 2], 0);
    p.ask(1, 1, 1);
    p.ask(2, 1, 1);
    p.next();
    p.next();
}

#[test]
#[should_panic(expected = "in flight is for n1")]
fn t63_done_names_the_requester_of_the_plan() {
    let mut p = Perms::new(&[0, 1, 2], 0);
    p.ask(1, 1, 1);
    p.next();
    p.pm.done(NodeId(2), true);
}

#[test]
fn t64_new_checks_me() {
    let err = PermissionManager::new(NodeId(5), &set(&[0, 1, 2])).unwrap_err();
    assert!(err.contains("n5"), "{err}");
}

/// §5.2 "Each replica maintains the invariant that only one replica at a time has write
/// permission on its log", under random requests, restarts and failed steps. A model runtime
/// executes each plan step by step and stops at the first step that fails; a grant may fail
/// after taking effect. After every step at most one replica can write, and after a successful
/// plan exactly the requester can. With the seed printed on failure.
#[test]
fn t70_one_writer_at_a_time_under_random_faults() {
    for seed in 1..=200u64 {
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut rand = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let ids = [0u16, 1, 2, 3, 4];
        let me_pos = rand(5) as usize;
        let mut p = Perms::new(&ids, ids[me_pos]);
        let mut incarnation = [1u32; 5];
        let mut seq = [0u32; 5];
        // Who can actually write our log, by position.
        let mut writers = BTreeSet::new();
        for round in 0..200 {
            let ctx = format!("seed {seed} round {round}");
            match rand(10) {
                0..=3 => {
                    let pos = rand(5) as usize;
                    seq[pos] += 1;
                    p.ask(ids[pos], incarnation[pos], seq[pos]);
                }
                4 => {
                    // A peer restarts: the runtime breaks its connection.
                    let pos = rand(5) as usize;
                    if pos != me_pos {
                        incarnation[pos] += 1;
                        seq[pos] = 0;
                        writers.remove(&pos);
                        p.pm.forget(NodeId(ids[pos]));
                    }
                }
                _ => {
                    let Some(requester) = p.next() else { continue };
                    let r = ids.iter().position(|&i| i == requester).unwrap();
                    let mut ok = true;
                    for step in p.plan.clone() {
                        let fails = rand(6) == 0;
                        match step {
                            PermStep::Revoke { peer } if !fails => {
                                writers.remove(&(peer.0 as usize));
                            }
                            PermStep::RevokeOwn if !fails => {
                                writers.remove(&me_pos);
                            }
                            // A grant may take effect and still be reported failed.
                            PermStep::Grant { peer, .. } if !fails || rand(2) == 0 => {
                                writers.insert(peer.0 as usize);
                            }
                            PermStep::GrantOwn if !fails || rand(2) == 0 => {
                                writers.insert(me_pos);
                            }
                            _ => {}
                        }
                        assert!(writers.len() <= 1, "{ctx}: writers {writers:?} after {step:?}");
                        if fails {
                            ok = false;
                            break;
                        }
                    }
                    p.pm.done(NodeId(requester), ok);
                    if ok {
                        assert_eq!(writers, BTreeSet::from([r]), "{ctx}");
                        assert_eq!(p.pm.holder(), Some(NodeId(requester)), "{ctx}");
                    }
                }
            }
        }
        // Liveness: with no more faults, every pending request is served, each once (failed
        // ones were dropped: their requesters ask again with new words).
        let mut served = 0;
        while let Some(requester) = p.next() {
            p.pm.done(NodeId(requester), true);
            served += 1;
            assert!(served <= ids.len(), "seed {seed}: a request served twice");
        }
    }
}
