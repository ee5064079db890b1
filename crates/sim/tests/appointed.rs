//! Appointed leaders (`ReplicaConfig::leaders = Appointed`, `docs/protocols/lease-reads.md`
//! rule 1) on whole Mu and Velos replicas in the simulator: the application, not the failure
//! detector, says who leads, and a leadership remembers the appointment it started under.

use mu_fabric::NodeId;
use mu_replica::{Appointment, Leaders, ProposeError, Protocol};
use mu_sim::SimCluster;

const LIMIT_NS: u64 = 20_000_000;

fn cluster(protocol: Protocol, seed: u64) -> SimCluster {
    SimCluster::with(3, seed, |c| {
        c.protocol = protocol;
        c.leaders = Leaders::Appointed;
    })
}

fn appoint(c: &mut SimCluster, leader: u16, admission: u64) {
    let a = Appointment::new(NodeId(leader), admission);
    for core in c.cores.iter().flatten() {
        core.appoint(a);
    }
}

fn term_of(c: &SimCluster, pos: usize) -> Option<(Option<Appointment>, u64)> {
    c.cores[pos].as_ref().unwrap().term().map(|t| (t.appointment, t.serial))
}

/// Runs until replica `pos` leads a term, for at most [`LIMIT_NS`].
fn await_term(c: &mut SimCluster, pos: usize) -> (Option<Appointment>, u64) {
    let end = c.world.now_ns() + LIMIT_NS;
    while c.world.now_ns() < end {
        if let Some(t) = term_of(c, pos) {
            return t;
        }
        c.round();
    }
    panic!("replica {pos} never led: {}", c.describe());
}

fn nobody_leads_until_appointed(protocol: Protocol) {
    let mut c = cluster(protocol, 3);
    // Replica 0 would win the detector's election at once: appointed, nobody leads.
    c.run_for(2_000_000);
    assert_eq!(c.agreed_leader(), None, "{}", c.describe());
    assert!((0..3).all(|p| term_of(&c, p).is_none()));
    let outcome = c.propose(0, b"too early", 1_000_000).expect("an outcome");
    assert!(matches!(outcome, Err(ProposeError::NotLeader { .. })), "{outcome:?}");
}

fn the_appointed_replica_leads_and_hands_over(protocol: Protocol) {
    let mut c = cluster(protocol, 4);
    appoint(&mut c, 1, 5);
    assert_eq!(c.await_leader(LIMIT_NS), NodeId(1));
    let (appointment, first) = await_term(&mut c, 1);
    assert_eq!(appointment, Appointment::new(NodeId(1), 5));
    c.propose(1, b"under 1", LIMIT_NS).unwrap().unwrap();
    assert_eq!(term_of(&c, 1), Some((appointment, first)), "one leadership throughout");

    // Another replica appointed: the first steps down and the new one carries the log on.
    appoint(&mut c, 2, 7);
    let (appointment, _) = await_term(&mut c, 2);
    assert_eq!(appointment, Appointment::new(NodeId(2), 7));
    assert_eq!(term_of(&c, 1), None, "the replica no longer appointed stopped leading");
    c.propose(2, b"under 2", LIMIT_NS).unwrap().unwrap();
    c.run_for(500_000);
    c.check_agreement();
    c.check_acked_applied(2);
}

fn a_new_admission_starts_a_new_leadership(protocol: Protocol) {
    let mut c = cluster(protocol, 5);
    appoint(&mut c, 0, 5);
    let (_, first) = await_term(&mut c, 0);
    c.propose(0, b"admission 5", LIMIT_NS).unwrap().unwrap();
    // Replica 0 removed and admitted again (a new unique id): the leadership it had is not
    // the one it may read under now.
    appoint(&mut c, 0, 9);
    let end = c.world.now_ns() + LIMIT_NS;
    let (appointment, serial) = loop {
        match term_of(&c, 0) {
            Some((a, s)) if s != first => break (a, s),
            _ if c.world.now_ns() >= end => panic!("no new leadership: {}", c.describe()),
            _ => c.round(),
        }
    };
    assert_eq!(appointment, Appointment::new(NodeId(0), 9));
    assert!(serial > first);
    c.propose(0, b"admission 9", LIMIT_NS).unwrap().unwrap();
    c.run_for(500_000);
    c.check_agreement();
}

#[test]
fn mu_nobody_leads_until_appointed() {
    nobody_leads_until_appointed(Protocol::Mu);
}

#[test]
fn velos_nobody_leads_until_appointed() {
    nobody_leads_until_appointed(Protocol::Velos);
}

#[test]
fn mu_the_appointed_replica_leads_and_hands_over() {
    the_appointed_replica_leads_and_hands_over(Protocol::Mu);
}

#[test]
fn velos_the_appointed_replica_leads_and_hands_over() {
    the_appointed_replica_leads_and_hands_over(Protocol::Velos);
}

#[test]
fn mu_a_new_admission_starts_a_new_leadership() {
    a_new_admission_starts_a_new_leadership(Protocol::Mu);
}

#[test]
fn velos_a_new_admission_starts_a_new_leadership() {
    a_new_admission_starts_a_new_leadership(Protocol::Velos);
}
