//! The proposer engine with no fabric: acceptors in plain memory, operations landing when the
//! test says. Each test names the part of the Velos paper it checks.

mod common;

use common::*;
use mu_log::EntryKind;
use mu_velos::word::{Proposals, PROPOSAL_MAX};
use mu_velos::{Event, Phase, Proposer, ProposerConfig, SlotWord, StopReason};

/// Submits `value` and runs everything to its decision; returns the decided index.
fn decide(net: &mut Net, me: usize, p: &mut Proposer, value: &[u8]) -> u64 {
    decide_seeing(net, me, p, value, &mut Vec::new())
}

/// [`decide`], keeping every event the proposer gave on the way in `seen`.
fn decide_seeing(
    net: &mut Net,
    me: usize,
    p: &mut Proposer,
    value: &[u8],
    seen: &mut Vec<Event>,
) -> u64 {
    p.submit(EntryKind::Request, value).unwrap();
    for _ in 0..100 {
        for e in step(net, me, p) {
            seen.push(e.clone());
            if let Event::Decided { index, submitted: true } = e {
                return index;
            }
        }
        net.deliver_all();
    }
    panic!("{value:?} not decided");
}

fn cas_posted(actions: &[mu_velos::Action]) -> usize {
    actions.iter().filter(|a| matches!(a, mu_velos::Action::Cas { .. })).count()
}

/// §5.1 pre-preparation: once the window is prepared, a stable leader decides each value with
/// one accept round: a value write and a CAS per remote acceptor, and the decision as soon as
/// one remote CAS (a majority with its own) succeeds. The indices ahead are prepared in one
/// batch once all four are used, after that value's accept; a leader with nothing pending
/// prepares what is free at once.
#[test]
fn t01_stable_leader_decides_with_one_cas_round() {
    let (mut net, mut p) = leading(3, 16, 4);
    let mut mem = net.mem(0);
    p.poll(&mut mem);
    // The window (index 0 and four ahead) is prepared with one CAS per index and remote acceptor.
    let prepares: Vec<_> = p.drain_actions().collect();
    assert_eq!(cas_posted(&prepares), 5 * 2);
    for a in &prepares {
        net.queues[0][match a {
            mu_velos::Action::Cas { peer, .. } => *peer,
            _ => unreachable!(),
        }]
        .push_back(InFlight { action: *a, data: Vec::new() });
    }
    net.deliver_all();
    net.complete(0, &mut p);
    assert_eq!(p.phase(), Some(Phase::Prepared));
    for k in 0..10u64 {
        p.submit(EntryKind::Request, format!("v{k}").as_bytes()).unwrap();
        p.poll(&mut mem);
        let actions: Vec<_> = p.drain_actions().collect();
        // The accept of index k (write + CAS to each of two peers) first; when no index ahead
        // is left prepared (after indices 0–3 took the four ahead), the prepares of the four
        // that entered the window (one CAS to each peer).
        let writes = actions.iter().filter(|a| matches!(a, mu_velos::Action::Write { .. })).count();
        assert_eq!(writes, 2, "index {k}: {actions:?}");
        assert!(matches!(actions[1], mu_velos::Action::Cas { .. }), "the accept goes first");
        let batch = k > 0 && k % 4 == 0;
        assert_eq!(
            cas_posted(&actions),
            if batch { 2 + 4 * 2 } else { 2 },
            "index {k}: {actions:?}"
        );
        let mut local = actions.clone();
        local.retain(|a| {
            matches!(
                a,
                mu_velos::Action::Write { peer: 1, .. } | mu_velos::Action::Cas { peer: 1, .. }
            )
        });
        for a in actions {
            let to = match a {
                mu_velos::Action::Write { peer, .. } | mu_velos::Action::Cas { peer, .. } => peer,
                _ => unreachable!(),
            };
            let data = match a {
                mu_velos::Action::Write { offset, len, .. } => net.regions[0].borrow()
                    [offset as usize..(offset + u64::from(len)) as usize]
                    .to_vec(),
                _ => Vec::new(),
            };
            net.queues[0][to].push_back(InFlight { action: a, data });
        }
        // Only acceptor 1 answers: with this replica's own acceptor, a majority.
        while net.deliver(0, 1) {}
        net.complete(0, &mut p);
        let events: Vec<_> = p.drain_events().collect();
        assert_eq!(events, vec![Event::Decided { index: k, submitted: true }]);
        net.deliver_all();
        net.complete(0, &mut p);
    }
    assert_eq!(net.cas_failed, 0, "a stable leader's predictions are right");
    // Indices 13 and 14 entered the window since the last batch (8 took 9–12): with nothing
    // pending they are prepared now, off any value's path.
    p.poll(&mut mem);
    let idle: Vec<_> = p.drain_actions().collect();
    assert_eq!(cas_posted(&idle), 2 * 2, "{idle:?}");
}

/// Algorithm 5, lines 27–31 and 47–51: a failed CAS returns the acceptor's word, which becomes
/// the prediction; it aborts the phase, and the next attempt (with a higher proposal) succeeds.
/// A failed CAS changes nothing at the acceptor.
#[test]
fn t02_wrong_predictions_abort_then_are_corrected() {
    let layout = layout(3, 16);
    let mut net = Net::new(layout);
    // Someone else (position 2) promised a high proposal for index 0 at acceptors 1 and 2.
    let theirs = SlotWord { min: 3 * 50 + 3, accepted: 0, lap: 0, prev_decided: false }.pack();
    for a in [1, 2] {
        net.set_word(a, 0, theirs);
    }
    let mut p = proposer(layout, 0, 0);
    let mut mem = net.mem(0);
    p.start(0, None, &mut mem);
    let index = decide(&mut net, 0, &mut p, b"mine");
    assert_eq!(index, 0);
    assert!(net.cas_failed >= 2, "the first prepare failed at both remote acceptors");
    // The proposal finally used is above the other proposer's promise, and is ours.
    let w = SlotWord::unpack(net.word(1, 0));
    assert!(w.accepted > 153 && Proposals::new(3).proposer(w.accepted) == 0, "{w:?}");
    assert_eq!(decided_value(&net, 0, 0), b"mine");
}

/// §5.2 value indirection: every acceptor that accepted holds the value in the proposer's
/// value log, written before the CAS on the same connection; a new leader that finds it
/// accepted reads it from there and decides it again, under its own proposal.
#[test]
fn t03_value_indirection_survives_the_proposer() {
    let (mut net, mut old) = leading(3, 16, 2);
    let layout = net.layout;
    old.submit(EntryKind::Request, b"accepted-once").unwrap();
    // Prepare everywhere, then the accept lands at acceptor 2 only; the proposer then dies.
    step(&mut net, 0, &mut old);
    net.deliver_all();
    step(&mut net, 0, &mut old);
    while net.deliver(0, 2) {}
    net.queues[0][1].clear();
    let (proposal, value) = net.entry(2, 0, 0).expect("the value landed before the CAS");
    assert_eq!(value, b"accepted-once");
    assert_eq!(u64::from(SlotWord::unpack(net.word(2, 0)).accepted), proposal);
    // Replica 1 leads: its own word shows only a promise, so it prepares; acceptor 2 reports the
    // accepted proposal, and replica 1 reads the value from replica 2's copy of 0's value log.
    let mut new = proposer(layout, 1, 2);
    let mut mem1 = net.mem(1);
    new.start(0, None, &mut mem1);
    new.submit(EntryKind::Request, b"new-value").unwrap();
    let mut decided = Vec::new();
    for _ in 0..50 {
        decided.extend(step(&mut net, 1, &mut new));
        net.deliver_all();
    }
    assert_eq!(
        decided[..2],
        [
            Event::Decided { index: 0, submitted: false },
            Event::Decided { index: 1, submitted: true }
        ]
    );
    assert_eq!(decided_value(&net, 1, 0), b"accepted-once");
    assert_eq!(decided_value(&net, 1, 1), b"new-value");
}

/// §5.4 piggybacked decisions: a follower learns index i from its own word i + 1, with no
/// extra communication, one entry behind; an acceptor the leader could not write the value of
/// i to does not get the bit.
#[test]
fn t04_followers_learn_from_the_next_word() {
    let (mut net, mut p) = leading(3, 16, 2);
    for k in 0..5u64 {
        assert_eq!(decide(&mut net, 0, &mut p, format!("v{k}").as_bytes()), k);
        net.deliver_all();
        net.complete(0, &mut p);
    }
    for f in [1, 2] {
        for k in 0..4u64 {
            assert_eq!(net.learned(f, k), Some(format!("v{k}").into_bytes()), "follower {f}");
        }
        assert_eq!(net.learned(f, 4), None, "the last entry is learned with the next");
    }
    // Acceptor 2's connection fails while index 5 is accepted: its write of 5 is lost.
    net.cut[0][2] = true;
    assert_eq!(decide(&mut net, 0, &mut p, b"v5"), 5);
    net.cut[0][2] = false;
    net.reconnect(0, 2, &mut p);
    assert_eq!(decide(&mut net, 0, &mut p, b"v6"), 6);
    net.deliver_all();
    assert_eq!(net.learned(1, 5), Some(b"v5".to_vec()));
    assert_eq!(net.learned(2, 5), None, "no bit where the value of 5 never went");
    assert!(SlotWord::unpack(net.word(2, 6)).accepted != 0, "yet 6 was accepted there");
}

/// §5.1, end: a new leader predicts every acceptor's word to be its own local one (the old
/// leader CASed all alike), so re-preparing the old leader's window takes one round with no
/// failed CAS.
#[test]
fn t05_leader_change_reprepares_in_one_round() {
    let (mut net, mut old) = leading(3, 64, 8);
    for k in 0..20u64 {
        decide(&mut net, 0, &mut old, format!("v{k}").as_bytes());
    }
    net.deliver_all();
    net.complete(0, &mut old);
    drop(old); // crashed; its window (20..28) is prepared everywhere
    let failed_before = net.cas_failed;
    let mut new = proposer(net.layout, 1, 8);
    let mut mem1 = net.mem(1);
    // Replica 1 applied up to 18 (it learns 19 with 20).
    new.start(19, Some((EntryKind::Request, b"v18")), &mut mem1);
    new.submit(EntryKind::Request, b"after").unwrap();
    let mut events = Vec::new();
    for _ in 0..20 {
        events.extend(step(&mut net, 1, &mut new));
        net.deliver_all();
    }
    assert_eq!(net.cas_failed, failed_before, "every prediction held");
    assert_eq!(
        events[..2],
        [
            Event::Decided { index: 19, submitted: false },
            Event::Decided { index: 20, submitted: true }
        ]
    );
    assert_eq!(decided_value(&net, 1, 19), b"v19");
}

/// Proposal numbers near their limit: a proposer that would need a number above PROPOSAL_MAX
/// stops with ProposalsExhausted and leaves every word as it was: no wrap.
#[test]
fn t06_proposal_numbers_never_wrap() {
    let layout = layout(3, 16);
    let mut net = Net::new(layout);
    let near = SlotWord { min: PROPOSAL_MAX - 1, accepted: 0, lap: 0, prev_decided: false }.pack();
    for a in 0..3 {
        net.set_word(a, 0, near);
    }
    let mut p = proposer(layout, 0, 0);
    let mut mem = net.mem(0);
    p.start(0, None, &mut mem);
    p.submit(EntryKind::Request, b"x").unwrap();
    let events = step(&mut net, 0, &mut p);
    assert_eq!(events, vec![Event::Stopped(StopReason::ProposalsExhausted { index: 0 })]);
    assert!(!p.is_leading());
    assert_eq!(net.pending(), 0, "nothing posted");
    for a in 0..3 {
        assert_eq!(net.word(a, 0), near);
    }
    // Just below the limit the last numbers are used.
    let mut net = Net::new(layout);
    let below = SlotWord { min: PROPOSAL_MAX - 4, accepted: 0, lap: 0, prev_decided: false }.pack();
    for a in 0..3 {
        net.set_word(a, 0, below);
    }
    let mut p = proposer(layout, 0, 0);
    let mut mem = net.mem(0);
    p.start(0, None, &mut mem);
    assert_eq!(decide(&mut net, 0, &mut p, b"last"), 0);
    assert!(SlotWord::unpack(net.word(0, 0)).accepted > PROPOSAL_MAX - 4);
}

/// The lap: a proposer that finds an acceptor's word already in a later lap knows the index
/// was recycled without it and stops, rather than deciding an old index again.
#[test]
fn t07_a_stale_proposer_stops() {
    let layout = layout(3, 4);
    let mut net = Net::new(layout);
    let newer = SlotWord { min: 7, accepted: 7, lap: 3, prev_decided: true }.pack();
    for a in 0..3 {
        net.set_word(a, 1, newer);
    }
    let mut p = proposer(layout, 0, 0);
    let mut mem = net.mem(0);
    p.start(1, Some((EntryKind::Request, b"v0")), &mut mem);
    let events = step(&mut net, 0, &mut p);
    assert_eq!(events, vec![Event::Stopped(StopReason::Stale { index: 1 })]);
}

/// Recycling: the circular log is reused only for indices whose previous lap every live
/// acceptor applied; the leader waits for the floor otherwise, and the reused words move to the
/// new lap by CAS like any other state.
#[test]
fn t08_recycling_waits_for_the_applied_floor() {
    let (mut net, mut p) = leading(3, 4, 2);
    for k in 0..4u64 {
        assert_eq!(decide(&mut net, 0, &mut p, format!("v{k}").as_bytes()), k);
    }
    p.submit(EntryKind::Request, b"v4").unwrap();
    for _ in 0..5 {
        assert!(step(&mut net, 0, &mut p).is_empty(), "index 4 reuses index 0's slot");
        net.deliver_all();
    }
    assert!(p.waits_for_room());
    p.set_applied_floor(3);
    let mut events = Vec::new();
    for _ in 0..5 {
        events.extend(step(&mut net, 0, &mut p));
        net.deliver_all();
    }
    assert_eq!(events, vec![Event::Decided { index: 4, submitted: true }]);
    p.set_applied_floor(5);
    for k in 5..30u64 {
        assert_eq!(decide(&mut net, 0, &mut p, format!("v{k}").as_bytes()), k);
        p.set_applied_floor(k + 1);
    }
    let w = SlotWord::unpack(net.word(1, 29));
    assert_eq!(w.lap, 7);
    assert_eq!(net.cas_failed, 0);
    assert_eq!(net.learned(1, 28), Some(b"v28".to_vec()));
}

/// A replica restarted without its memory abstains in the slots it may have answered for
/// (`mu_velos::recovery`): an abstaining acceptor is no answer, not a refusal. The others
/// decide without an abort (every index at the first proposal); with too few others the
/// proposer posts nothing and waits; past the abstaining lap the acceptor answers again.
#[test]
fn t09_an_abstaining_acceptor_is_no_answer() {
    let (mut net, mut p) = leading(3, 4, 1);
    for k in 0..4 {
        net.set_word(2, k, SlotWord::abstaining(0));
    }
    for k in 0..4u64 {
        assert_eq!(decide(&mut net, 0, &mut p, format!("v{k}").as_bytes()), k);
        let w = SlotWord::unpack(net.word(1, k));
        assert_eq!((w.min, w.accepted), (1, 1), "index {k} decided at the first proposal");
        assert!(SlotWord::unpack(net.word(2, k)).is_abstaining(), "never changed");
    }
    // Index 4 is in lap 1: acceptor 2 answers again (its word moves to the new lap).
    p.set_applied_floor(4);
    assert_eq!(decide(&mut net, 0, &mut p, b"v4"), 4);
    let w = SlotWord::unpack(net.word(2, 4));
    assert!(!w.is_abstaining() && w.lap == 1 && w.accepted != 0, "{w:?}");

    // Two of three abstaining in the slots of lap 1: nothing is asked, nothing decided.
    let (mut net, mut p) = leading(3, 4, 1);
    for k in 0..4 {
        net.set_word(1, k, SlotWord::abstaining(1));
        net.set_word(2, k, SlotWord::abstaining(1));
    }
    p.submit(EntryKind::Request, b"stuck").unwrap();
    for round in 0..6 {
        let events = step(&mut net, 0, &mut p);
        assert!(events.is_empty(), "{events:?}");
        if round > 1 {
            assert_eq!(net.pending(), 0, "round {round}: nothing posted once both answered");
        }
        net.deliver_all();
    }
    assert_eq!(p.phase(), Some(Phase::Idle));
}

/// Not in the paper: a word whose accepted field is all ones is no word a proposer writes
/// (corrupted memory, or a faulty peer). Packed back into a CAS it tripped an assertion, in
/// every leader in turn; it is now an acceptor that abstains in that index, and the others
/// decide it, leaving the word as it was. The proposer says so (`Event::MalformedWord`), once
/// per acceptor each time it starts, however many indexes hold such a word.
#[test]
fn t13_a_malformed_word_is_no_answer() {
    // Bits 37..12 hold the accepted proposal.
    let accepted_all_ones = ((1u64 << mu_velos::word::PROPOSAL_BITS) - 1) << 12;
    let malformed = SlotWord { min: 3, ..SlotWord::default() }.pack() | accepted_all_ones;
    let (mut net, mut p) = leading(3, 4, 1);
    for k in 0..4 {
        net.set_word(2, k, malformed);
    }
    let mut seen = Vec::new();
    for k in 0..4u64 {
        assert_eq!(decide_seeing(&mut net, 0, &mut p, format!("v{k}").as_bytes(), &mut seen), k);
        assert_eq!(net.word(2, k), malformed, "index {k}: left alone");
        assert_eq!(SlotWord::unpack(net.word(1, k)).accepted, 1, "index {k}");
    }
    let reports: Vec<_> =
        seen.iter().filter(|e| matches!(e, Event::MalformedWord { .. })).cloned().collect();
    assert_eq!(reports.len(), 1, "{seen:?}");
    assert!(matches!(reports[0], Event::MalformedWord { acceptor: 2, .. }), "{reports:?}");

    // On the proposer's own acceptor: the others are not guessed to hold it too (then none
    // was asked, and the index was never prepared).
    let (mut net, mut p) = leading(3, 4, 1);
    net.set_word(0, 0, malformed);
    let mut p0 = proposer(net.layout, 0, 1);
    p0.start(0, None, &mut net.mem(0));
    p.stop();
    let mut seen = Vec::new();
    assert_eq!(decide_seeing(&mut net, 0, &mut p0, b"v0", &mut seen), 0);
    assert_eq!(net.word(0, 0), malformed, "left alone");
    assert!(seen.contains(&Event::MalformedWord { index: 0, acceptor: 0 }), "{seen:?}");
}

/// A memory whose compare-and-swap fails, as a verbs loopback that timed out.
struct NoSwap(Mem);

impl mu_velos::Memory for NoSwap {
    fn load_word(&self, offset: u64) -> u64 {
        self.0.load_word(offset)
    }
    fn cas_word(&mut self, _: u64, _: u64, _: u64) -> Option<u64> {
        None
    }
    fn read(&self, offset: u64, out: &mut [u8]) {
        self.0.read(offset, out)
    }
    fn write(&mut self, offset: u64, data: &[u8]) {
        self.0.write(offset, data)
    }
}

/// Not in the paper: a compare-and-swap on the proposer's own word that fails (on verbs it goes
/// through the network card, and may time out) stops the proposer with `LocalSwapFailed` at the
/// next poll, with nothing posted after; it panicked the replica before. The round it was in
/// goes on as with an unreachable acceptor (here it decides, with the other two), and the next
/// proposer finds its value.
#[test]
fn t14_a_failed_local_swap_stops_the_proposer() {
    let (mut net, mut p) = leading(3, 4, 0);
    assert_eq!(decide(&mut net, 0, &mut p, b"a"), 0);
    p.submit(EntryKind::Request, b"b").unwrap();
    let mut events = Vec::new();
    for _ in 0..10 {
        net.complete(0, &mut p);
        p.poll(&mut NoSwap(net.mem(0)));
        net.post(0, &mut p);
        events.extend(p.drain_events());
        if !p.is_leading() {
            break;
        }
        net.deliver_all();
    }
    // The two other acceptors are a majority: index 1 is decided without ours, then it stops.
    let stopped = Event::Stopped(StopReason::LocalSwapFailed { index: 1 });
    assert_eq!(events, [Event::Decided { index: 1, submitted: true }, stopped]);
    assert!(!p.is_leading());
    net.deliver_all();
    net.complete(0, &mut p);
    p.poll(&mut net.mem(0));
    net.post(0, &mut p);
    assert_eq!(net.pending(), 0, "nothing posted once stopped");

    // Another proposer takes over from index 1 and decides it.
    let mut q = proposer(net.layout, 1, 0);
    q.start(1, Some((EntryKind::Request, b"a")), &mut net.mem(1));
    let index = decide(&mut net, 1, &mut q, b"c");
    assert_eq!(index, 2, "index 1 holds the value decided without our own acceptor");
    assert_eq!(decided_value(&net, 1, 1), b"b");

    // Stopped for another reason before the poll that would stop it (stepping down), and
    // started again: its own acceptor counts again. Marked down like a peer's, nothing took
    // it back, and with a peer out too no majority was ever reachable.
    let (mut net, mut p) = leading(3, 4, 0);
    assert_eq!(decide(&mut net, 0, &mut p, b"a"), 0);
    p.submit(EntryKind::Request, b"b").unwrap();
    // Index 1 prepared (its CASes answered), so that the next poll accepts "b" there.
    net.deliver_all();
    net.complete(0, &mut p);
    p.poll(&mut NoSwap(net.mem(0)));
    p.stop();
    p.drain_events().for_each(drop);
    net.deliver_all();
    net.complete(0, &mut p);
    p.exclude(2);
    p.start(1, Some((EntryKind::Request, b"a")), &mut net.mem(0));
    let index = decide(&mut net, 0, &mut p, b"c");
    assert!(index >= 1, "decided at {index} with acceptors 0 and 1");
}

/// Not in the paper (laps count modulo 2048 in our words): the driver keeps the proposer from
/// an acceptor whose words may be too old to read rightly. An excluded acceptor is sent nothing
/// and majorities form without it; once given back it is asked again.
#[test]
fn t10_an_excluded_acceptor_is_sent_nothing() {
    let (mut net, mut p) = leading(3, 4, 1);
    // Acceptor 2 holds a word that a proposer would misread (as newer than the index).
    let misread = SlotWord { min: 9, accepted: 9, lap: 1, prev_decided: false }.pack();
    for k in 0..4 {
        net.set_word(2, k, misread);
    }
    p.exclude(2);
    assert_eq!(p.down(), 0b100);
    for k in 0..3u64 {
        p.submit(EntryKind::Request, format!("v{k}").as_bytes()).unwrap();
        let mut decided = false;
        for _ in 0..20 {
            let events = step(&mut net, 0, &mut p);
            assert!(net.queues[0][2].is_empty(), "nothing goes to an excluded acceptor");
            decided |= events.contains(&Event::Decided { index: k, submitted: true });
            if decided {
                break;
            }
            net.deliver_all();
        }
        assert!(decided, "index {k} decided by acceptors 0 and 1");
        assert_eq!(net.word(2, k), misread, "acceptor 2 untouched");
    }
    // Given back (its words replaced meanwhile), it is asked again.
    for k in 0..4 {
        net.set_word(2, k, 0);
    }
    p.reconnected(2);
    for k in 3..8u64 {
        p.set_applied_floor(k);
        assert_eq!(decide(&mut net, 0, &mut p, format!("v{k}").as_bytes()), k);
    }
    // Prepared after it was given back: in the window of the next lap.
    let w = SlotWord::unpack(net.word(2, 7));
    assert!(w.lap == 1 && w.min != 0, "acceptor 2 answers again: {w:?}");
}

/// Membership changes (the Mu paper's §5.4, carried over: a configuration per index, changed
/// by a decided entry for the indices after it). Four positions, three members: acceptor 3 is
/// sent nothing. Once the configuration takes it in, the indices prepared ahead are prepared
/// again, now at 3 as well, and a decision needs three of the four: acceptor 1's answer with
/// our own is no longer enough. Removed, acceptor 1 is sent nothing more; a proposer removed
/// itself goes on with a majority of the members.
#[test]
fn t11_a_new_configuration_prepares_again_and_counts_its_members() {
    let layout = layout(4, 16);
    let mut net = Net::new(layout);
    let members = 0b0111;
    let config = ProposerConfig { me: 0, layout, members, prepare_ahead: 2 };
    let mut p = Proposer::new(config).unwrap();
    p.start(0, None, &mut net.mem(0));
    for k in 0..3u64 {
        assert_eq!(decide(&mut net, 0, &mut p, format!("v{k}").as_bytes()), k);
        assert!(net.queues[0][3].is_empty(), "index {k}: nothing goes to a non-member");
    }
    assert_eq!(net.word(3, 3), 0, "a non-member's words are untouched");
    // Indices 3 and 4 are prepared ahead by now, by acceptors 0–2.
    assert_ne!(SlotWord::unpack(net.word(1, 4)).min, 0);
    p.set_members(0b1111);
    step(&mut net, 0, &mut p);
    let to_3: Vec<_> = net.queues[0][3].iter().map(|f| f.action).collect();
    assert_eq!(to_3.len(), 3, "the window (indices 3–5) is prepared at the new member: {to_3:?}");
    net.deliver_all();
    net.complete(0, &mut p);
    // Acceptors 2 and 3 are cut off: 0 and 1 are two of four, not a majority.
    net.cut[0][2] = true;
    net.cut[0][3] = true;
    p.submit(EntryKind::Request, b"w").unwrap();
    for _ in 0..10 {
        let events = step(&mut net, 0, &mut p);
        assert!(events.is_empty(), "decided without a majority of four: {events:?}");
        net.deliver_all();
    }
    // Acceptor 3 back: 0, 1 and 3 decide.
    net.cut[0][3] = false;
    net.reconnect(0, 3, &mut p);
    let mut decided = false;
    for _ in 0..20 {
        decided |=
            step(&mut net, 0, &mut p).contains(&Event::Decided { index: 3, submitted: true });
        if decided {
            break;
        }
        net.deliver_all();
    }
    assert!(decided, "index 3 decided by three of four");
    // Acceptor 1 removed: nothing more goes to it.
    net.cut[0][2] = false;
    net.reconnect(0, 2, &mut p);
    net.deliver_all();
    net.complete(0, &mut p);
    p.set_members(0b1101);
    net.queues[0][1].clear();
    assert_eq!(decide(&mut net, 0, &mut p, b"x"), 4);
    assert!(net.queues[0][1].is_empty(), "nothing goes to a removed member");
    // This proposer removed: it keeps leading (a proposer need not be an acceptor) and
    // decides with a majority of the new configuration, asking its own acceptor nothing. Its
    // runtime decides one entry more that way, from which the others learn the removal.
    p.set_members(0b1100);
    assert!(p.is_leading() && !p.is_member());
    assert_eq!(decide(&mut net, 0, &mut p, b"y"), 5);
    assert_eq!(decide(&mut net, 0, &mut p, b"z"), 6);
    assert!(net.queues[0][1].is_empty(), "nothing goes to a removed member");
    // Index 8 is first touched after the removal: prepared at the members, not at its own.
    step(&mut net, 0, &mut p);
    net.deliver_all();
    assert_ne!(SlotWord::unpack(net.word(2, 8)).min, 0, "index 8 is prepared ahead");
    assert_eq!(net.word(0, 8), 0, "its own acceptor is asked nothing");
}

/// The Mu paper's Listing 2, line 34 ("if value == myValue"), in Velos: a proposer whose
/// accept reached its own acceptor only finds, when it prepares again, its value adopted by
/// another proposer and decided from the other's value log. It is the submitted value,
/// decided: proposed again at the next index it would be decided twice, and a request
/// acknowledged once would take effect twice (simulator seed 120109, two leaders at once).
/// Once written, it is no longer withdrawn ("log full" would say it never takes effect).
#[test]
fn t12_the_submitted_value_adopted_by_another_proposer_is_decided_once() {
    let layout = layout(3, 16);
    let mut net = Net::new(layout);
    let mut p0 = proposer(layout, 0, 0);
    let mut p2 = proposer(layout, 2, 0);
    p0.start(0, None, &mut net.mem(0));
    step(&mut net, 0, &mut p0);
    net.deliver_all();
    net.complete(0, &mut p0);
    // Proposer 2 prepares index 0 at its own acceptor, and a third proposer (position 1)
    // promised acceptor 1 a proposal between proposer 0's and proposer 2's.
    p2.start(0, None, &mut net.mem(2));
    step(&mut net, 2, &mut p2);
    net.set_word(1, 0, SlotWord { min: 2, accepted: 0, lap: 0, prev_decided: false }.pack());
    // Proposer 0's accept of "mine" lands at its own acceptor only.
    p0.submit(EntryKind::Request, b"mine").unwrap();
    let accepting = |net: &Net| {
        net.queues[0][1].iter().any(|f| matches!(f.action, mu_velos::Action::Write { .. }))
    };
    for _ in 0..3 {
        if !accepting(&net) {
            step(&mut net, 0, &mut p0);
        }
    }
    assert!(accepting(&net), "proposer 0 accepts");
    for to in 0..3 {
        while net.deliver(0, to) {}
    }
    net.complete(0, &mut p0);
    assert_eq!(SlotWord::unpack(net.word(0, 0)).accepted, 1, "accepted at acceptor 0");
    assert!(p0.has_pending(), "not decided: acceptors 1 and 2 promised others");
    assert!(!p0.withdraw(), "a value written is not withdrawn");
    // Proposer 2, with a value of its own, finds "mine" at acceptor 0, adopts it and decides
    // it from its own value log first.
    p2.submit(EntryKind::Request, b"theirs").unwrap();
    let mut adopted = false;
    for _ in 0..20 {
        for to in 0..3 {
            while net.deliver(2, to) {}
        }
        let events = step(&mut net, 2, &mut p2);
        adopted |= events.contains(&Event::Decided { index: 0, submitted: false });
    }
    assert!(adopted, "proposer 2 decided proposer 0's value at index 0");
    assert_eq!(decided_value(&net, 2, 0), b"mine");
    // Proposer 0 prepares again and finds its value in proposer 2's log: decided, as the
    // submitted value, once.
    let mut events = Vec::new();
    for _ in 0..20 {
        for to in 0..3 {
            while net.deliver(0, to) {}
        }
        events.extend(step(&mut net, 0, &mut p0));
    }
    assert_eq!(events.first(), Some(&Event::Decided { index: 0, submitted: true }), "{events:?}");
    assert!(!p0.has_pending());
    // What it decides next is proposer 2's value, not "mine" again.
    let again = events.iter().skip(1).any(|e| matches!(e, Event::Decided { submitted: true, .. }));
    assert!(!again, "{events:?}");
}
