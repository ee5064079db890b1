//! Mu and Velos with leased local reads in the simulator (`mu sim --protocol mu|velos --reads
//! lease`, `docs/protocols/lease-reads.md`): a few seeds of each pass every check with reads
//! answered locally, and a service without a local read's second check, or without rule 2's
//! gate, is caught.

use mu_replica::Protocol;
use mu_sim::check::linearizability::find_lincheck;
use mu_sim::lease_reads::{run, LeaseMutation, LeaseReport, LeaseRunConfig};

fn seed(protocol: Protocol, seed: u64, mutation: LeaseMutation) -> LeaseReport {
    let mut config = LeaseRunConfig { mutation, ..LeaseRunConfig::new(seed, protocol) };
    config.setup.lincheck = find_lincheck();
    run(&config)
}

fn a_few_seeds_pass(protocol: Protocol) {
    let (mut local, mut stalls) = (0, 0);
    for s in 0..3 {
        let r = seed(protocol, s, LeaseMutation::None);
        assert!(r.violation.is_none(), "{protocol:?} seed {s}: {:?}", r.violation);
        assert!(r.ops_returned > 100 && r.faults_injected > 0, "{r:?}");
        local += r.local_answers;
        stalls += r.stalls;
    }
    assert!(local > 0, "{protocol:?}: no read was answered locally");
    assert!(stalls > 0, "{protocol:?}: no local read stalled between its checks");
}

/// The first of `seeds` where `mutation` is caught, with what caught it.
fn caught(protocol: Protocol, mutation: LeaseMutation, seeds: u64) -> Option<(u64, String)> {
    (0..seeds).find_map(|s| {
        let r = seed(protocol, s, mutation);
        r.violation.map(|(checker, why)| (s, format!("{checker}: {why}")))
    })
}

#[test]
fn mu_leased_reads_pass() {
    a_few_seeds_pass(Protocol::Mu);
}

#[test]
fn velos_leased_reads_pass() {
    a_few_seeds_pass(Protocol::Velos);
}

#[test]
fn a_local_read_without_its_second_check_is_caught() {
    for protocol in [Protocol::Mu, Protocol::Velos] {
        let found = caught(protocol, LeaseMutation::LeaseReadWithoutSecondCheck, 4);
        let (s, why) = found.unwrap_or_else(|| panic!("{protocol:?}: not caught in 4 seeds"));
        assert!(why.starts_with("stale-answer: ") && why.contains("a local read"), "{s}: {why}");
    }
}

#[test]
fn an_answer_without_rule_2_is_caught() {
    let found = caught(Protocol::Velos, LeaseMutation::UngatedAnswer, 6);
    let (s, why) = found.expect("velos: an ungated answer not caught in 6 seeds");
    assert!(why.starts_with("stale-answer: "), "{s}: {why}");
}
