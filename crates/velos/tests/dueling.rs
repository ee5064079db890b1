//! Safety under contention (Velos Algorithm 5, Lemma 4.6 and §5): several proposers lead at
//! once, operations land in random order (FIFO per connection), connections fail and come
//! back, proposers stop and start again, the circular log wraps. However it goes, no two
//! decisions or learned values for one index differ.

mod common;

use common::*;
use mu_log::EntryKind;
use mu_velos::{Event, Proposer};
use std::collections::HashMap;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

struct Run {
    net: Net,
    proposers: Vec<Proposer>,
    /// index -> value, from the first decision or learned value seen.
    chosen: HashMap<u64, Vec<u8>>,
    /// Per replica: indices below it are known decided here (applied).
    applied: Vec<u64>,
    decisions: usize,
}

impl Run {
    fn record(&mut self, who: &str, index: u64, value: Vec<u8>) {
        match self.chosen.get(&index) {
            Some(v) => assert_eq!(
                v,
                &value,
                "{who}: index {index} decided as {:?} and as {:?}",
                String::from_utf8_lossy(v),
                String::from_utf8_lossy(&value)
            ),
            None => {
                self.chosen.insert(index, value);
            }
        }
    }

    fn step(&mut self, me: usize) {
        let events = step(&mut self.net, me, &mut self.proposers[me]);
        for e in events {
            if let Event::Decided { index, .. } = e {
                assert_eq!(index, self.applied[me], "decisions come in index order");
                let v = decided_value(&self.net, me, index);
                self.record(&format!("proposer {me}"), index, v);
                self.applied[me] = index + 1;
                self.decisions += 1;
            }
        }
    }

    /// Followers apply what their own words tell.
    fn learn(&mut self, me: usize) {
        if self.proposers[me].is_leading() {
            return;
        }
        loop {
            let index = self.applied[me];
            if let Some(v) = self.net.learned(me, index) {
                self.record(&format!("learner {me}"), index, v);
            } else if let Some((from, v)) =
                (0..self.proposers.len()).find_map(|q| Some((q, self.net.learned(q, index)?)))
            {
                // Catching up by reading another replica's word and entry (a follower the
                // leader could not write to).
                self.record(&format!("learner {me} from {from}"), index, v);
            } else {
                break;
            }
            self.applied[me] += 1;
        }
    }
}

fn run(seed: u64, n: usize, slots: u64, steps: usize) -> usize {
    let layout = layout(n, slots);
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut r = Run {
        net: Net::new(layout),
        proposers: (0..n).map(|me| proposer(layout, me, rng.below(4) as usize)).collect(),
        chosen: HashMap::new(),
        applied: vec![0; n],
        decisions: 0,
    };
    let mut counter = 0u64;
    for _ in 0..steps {
        let me = rng.below(n as u64) as usize;
        match rng.below(100) {
            0..=49 => {
                let to = rng.below(n as u64) as usize;
                r.net.deliver(me, to);
            }
            50..=74 => r.step(me),
            75..=84 => {
                if r.proposers[me].is_leading() && !r.proposers[me].has_pending() {
                    counter += 1;
                    let v = format!("p{me}-{counter}");
                    r.proposers[me].submit(EntryKind::Request, v.as_bytes()).unwrap();
                }
            }
            85..=89 => r.learn(me),
            90..=93 => {
                // Leadership comes and goes: at most one would lead with a good detector, but
                // safety must hold with any number. Mostly one leads at a time, so that runs
                // also decide a lot.
                let leaders = r.proposers.iter().filter(|p| p.is_leading()).count();
                if r.proposers[me].is_leading() {
                    if rng.chance(25) {
                        r.proposers[me].stop();
                    }
                } else if leaders == 0 || rng.chance(15) {
                    let mut mem = r.net.mem(me);
                    let first = r.applied[me];
                    let last = first.checked_sub(1).map(|i| r.chosen[&i].clone());
                    r.proposers[me].start(
                        first,
                        last.as_ref().map(|v| (EntryKind::Request, &v[..])),
                        &mut mem,
                    );
                    r.net.post(me, &mut r.proposers[me]);
                }
            }
            94..=96 => {
                let to = rng.below(n as u64) as usize;
                if to != me {
                    r.net.cut[me][to] = !r.net.cut[me][to];
                }
                if r.net.broken[me][to] {
                    r.net.reconnect(me, to, &mut r.proposers[me]);
                    r.step(me);
                }
            }
            _ => {
                let floor = *r.applied.iter().min().unwrap();
                for p in &mut r.proposers {
                    p.set_applied_floor(floor);
                }
            }
        }
    }
    // Heal everything, let one proposer run alone: it must decide (Algorithm 5's decision
    // property for a proposer running alone).
    for from in 0..n {
        for to in 0..n {
            r.net.cut[from][to] = false;
        }
    }
    r.net.deliver_all();
    for me in 0..n {
        r.step(me);
        r.proposers[me].stop();
    }
    r.net.deliver_all();
    for me in 0..n {
        for to in 0..n {
            r.net.reconnect(me, to, &mut r.proposers[me]);
        }
        r.step(me);
    }
    r.net.deliver_all();
    for me in 0..n {
        r.net.complete(me, &mut r.proposers[me]);
        r.learn(me);
    }
    let floor = *r.applied.iter().min().unwrap();
    let leader = rng.below(n as u64) as usize;
    let mut mem = r.net.mem(leader);
    let first = r.applied[leader];
    let last = first.checked_sub(1).map(|i| r.chosen[&i].clone());
    r.proposers[leader].start(first, last.as_ref().map(|v| (EntryKind::Request, &v[..])), &mut mem);
    r.net.post(leader, &mut r.proposers[leader]);
    r.proposers[leader].set_applied_floor(floor);
    r.proposers[leader].submit(EntryKind::Request, b"final").unwrap();
    let mut done = false;
    for _ in 0..200 {
        let events = step(&mut r.net, leader, &mut r.proposers[leader]);
        for e in events {
            if let Event::Decided { index, submitted } = e {
                let v = decided_value(&r.net, leader, index);
                r.record("final leader", index, v);
                r.applied[leader] = index + 1;
                done |= submitted;
            }
        }
        if done {
            break;
        }
        r.net.deliver_all();
    }
    assert!(
        done,
        "seed {seed}: proposer {leader} running alone did not decide: leading {}, next {}, \
         phase {:?}, waits for room {}, floor {floor}, applied {:?}, down {:#x}",
        r.proposers[leader].is_leading(),
        r.proposers[leader].next_index(),
        r.proposers[leader].phase(),
        r.proposers[leader].waits_for_room(),
        r.applied,
        r.proposers[leader].down()
    );
    r.decisions
}

/// Runs every seed and checks that they decided enough to mean something.
fn sweep(seeds: std::ops::Range<u64>, n: usize, slots: u64, steps: usize, at_least: usize) {
    let decisions: usize = seeds.map(|seed| run(seed, n, slots, steps)).sum();
    eprintln!("{decisions} decisions");
    assert!(decisions > at_least, "the runs decided too little to mean much: {decisions}");
}

#[test]
fn t10_no_two_decisions_differ_three_replicas() {
    sweep(0..2000, 3, 8, 3000, 20_000);
}

#[test]
fn t11_no_two_decisions_differ_five_replicas() {
    sweep(10_000..11_000, 5, 16, 4000, 2_000);
}
