//! The coordinators' consensus on views (§5, Appendix A) with operations landing in an order
//! the test chooses: agreement, no gaps, a chain of views that follow each other, progress
//! once one leader is left, and a new leader's one-round re-preparation (§5.3.1); and the same
//! with coordinators restarted without their memory mid-run (`mu_ukharon::restart`).

use mu_ukharon::changes::{uid_for, Change};
use mu_ukharon::coordinator::{Coordinator, CoordinatorConfig, Output};
use mu_ukharon::restart::Memory as Recall;
use mu_ukharon::view::{Member, View};
use mu_velos::{Action, Memory, VelosLayout};
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

type Region = Rc<RefCell<Vec<u8>>>;

const SLOTS: u64 = 16;

struct Mem(Region);

fn word_at(r: &[u8], offset: u64) -> u64 {
    let o = offset as usize;
    u64::from_le_bytes(r[o..o + 8].try_into().unwrap())
}

impl Memory for Mem {
    fn load_word(&self, offset: u64) -> u64 {
        word_at(&self.0.borrow(), offset)
    }
    fn cas_word(&mut self, offset: u64, expected: u64, desired: u64) -> Option<u64> {
        let mut r = self.0.borrow_mut();
        let old = word_at(&r, offset);
        if old == expected {
            r[offset as usize..offset as usize + 8].copy_from_slice(&desired.to_le_bytes());
        }
        Some(old)
    }
    fn read(&self, offset: u64, out: &mut [u8]) {
        let o = offset as usize;
        out.copy_from_slice(&self.0.borrow()[o..o + out.len()]);
    }
    fn write(&mut self, offset: u64, data: &[u8]) {
        let o = offset as usize;
        self.0.borrow_mut()[o..o + data.len()].copy_from_slice(data);
    }
}

/// An operation posted and not landed yet, with the bytes a write carries and the incarnation
/// of its poster (a restarted poster never sees the completions of its earlier incarnation).
type InFlight = (Action, Vec<u8>, u32);

enum Done {
    Cas { op: u64, old: u64 },
    Read { op: u64 },
}

/// Coordinators, their regions, and FIFO queues between them (`queues[from][to]`).
struct Cluster {
    coordinators: Vec<Coordinator>,
    regions: Vec<Region>,
    queues: Vec<Vec<VecDeque<InFlight>>>,
    done: Vec<VecDeque<Done>>,
    cas_failed: Vec<usize>,
    cas_posted: Vec<usize>,
    /// Every decided view by epoch, checked equal wherever it is decided.
    decided: BTreeMap<u64, View>,
    /// Per coordinator, the epoch of the last view it output as decided.
    last_output: Vec<Option<u64>>,
    now_ns: u64,
    rng: u64,
    /// Decisions a coordinator refused as not following (never with the real engine).
    bad: Vec<String>,
    /// Two views decided at one epoch, or a view decided after a gap.
    disagreements: Vec<String>,
    incarnations: Vec<u32>,
    /// Restarted coordinators forget and write no abstaining words (a broken variant).
    forgetful: bool,
    restarts: usize,
    /// Half of the decided views broadcast to the other coordinators are lost.
    lossy: bool,
    /// A coordinator whose acceptor answers nothing: what is posted to it stays in flight.
    cut: Option<usize>,
}

fn initial() -> View {
    let members = (0..3u16).map(|n| Member { node: n, uid: uid_for(0, n) }).collect();
    View::initial(0xC1, members, Some(0), 20_000)
}

impl Cluster {
    fn new(seed: u64) -> Cluster {
        Cluster::with(seed, false)
    }

    fn with(seed: u64, broken: bool) -> Cluster {
        let layout = Cluster::layout();
        let regions: Vec<Region> =
            (0..3).map(|_| Rc::new(RefCell::new(vec![0u8; layout.region_bytes()]))).collect();
        let coordinators = (0..3)
            .map(|me| Coordinator::new(Cluster::config(me)).unwrap())
            .collect::<Vec<Coordinator>>();
        let mut coordinators = coordinators;
        if broken {
            coordinators.iter_mut().for_each(Coordinator::break_keeping_lost_views);
        }
        Cluster {
            coordinators,
            regions,
            queues: (0..3).map(|_| (0..3).map(|_| VecDeque::new()).collect()).collect(),
            done: (0..3).map(|_| VecDeque::new()).collect(),
            cas_failed: vec![0; 3],
            cas_posted: vec![0; 3],
            decided: BTreeMap::new(),
            last_output: vec![None; 3],
            now_ns: 0,
            bad: Vec::new(),
            disagreements: Vec::new(),
            incarnations: vec![0; 3],
            forgetful: false,
            restarts: 0,
            lossy: false,
            cut: None,
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        }
    }

    fn layout() -> VelosLayout {
        CoordinatorConfig::layout_for(3, SLOTS).unwrap()
    }

    fn config(me: usize) -> CoordinatorConfig {
        CoordinatorConfig {
            me,
            layout: Cluster::layout(),
            prepare_ahead: 1,
            initial: initial(),
            backoff_max_ns: 50_000,
            name_primary: false,
        }
    }

    /// Coordinator `i` restarts without its memory: its region is zero again, what was posted
    /// to it never lands (its posters see the connection fail, then set it up again), what it
    /// had posted may still land but its completions reach nobody. It reads the slot words of
    /// the two others and a view from one of their boards, and rejoins.
    fn restart(&mut self, i: usize) {
        self.restarts += 1;
        self.incarnations[i] += 1;
        self.regions[i].borrow_mut().fill(0);
        self.done[i].clear();
        for from in 0..3 {
            let lost: Vec<InFlight> = self.queues[from][i].drain(..).collect();
            for (action, _, incarnation) in lost {
                if from == i || incarnation != self.incarnations[from] {
                    continue;
                }
                match action {
                    Action::Write { .. } => self.coordinators[from].on_write_error(i),
                    Action::Cas { op, .. } | Action::Read { op, .. } => {
                        self.coordinators[from].on_error(op)
                    }
                }
            }
        }
        let mut fresh = Coordinator::with_memory(Cluster::config(i), Recall::Forgotten).unwrap();
        if self.forgetful {
            fresh.break_forgetting_on_restart();
        }
        let layout = Cluster::layout();
        let others: Vec<usize> = (0..3).filter(|&j| j != i).collect();
        let words: Vec<Vec<u64>> = others
            .iter()
            .map(|&j| {
                let r = self.regions[j].borrow();
                (0..SLOTS).map(|slot| word_at(&r, layout.word_offset(slot))).collect()
            })
            .collect();
        let read: Vec<(usize, &[u64])> =
            others.iter().zip(&words).map(|(&j, w)| (j, &w[..])).collect();
        let answers_from = fresh.rejoin(&read, &mut Mem(self.regions[i].clone())).unwrap();
        assert!(!fresh.is_rejoining());
        if let Some(view) = self.coordinators[others[0]].latest() {
            fresh.learned(view.clone());
        }
        self.last_output[i] = fresh.latest().map(|v| v.epoch);
        self.coordinators[i] = fresh;
        for j in others {
            self.coordinators[j].reconnected(i);
            // What its runtime publishes, and the others' runtimes read.
            self.coordinators[j].set_answers_from(i, answers_from);
        }
    }

    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn poll(&mut self, i: usize) {
        let r = self.random();
        let mut mem = Mem(self.regions[i].clone());
        self.coordinators[i].poll(self.now_ns, r, &mut mem);
        self.after(i);
    }

    /// Takes coordinator `i`'s actions into the queues and its outputs into the checks.
    fn after(&mut self, i: usize) {
        let mut actions = Vec::new();
        self.coordinators[i].take_actions(&mut actions);
        for a in actions {
            let (to, data) = match a {
                Action::Write { peer, offset, len } => {
                    let r = self.regions[i].borrow();
                    (peer, r[offset as usize..(offset + u64::from(len)) as usize].to_vec())
                }
                Action::Cas { peer, .. } => {
                    self.cas_posted[i] += 1;
                    (peer, Vec::new())
                }
                Action::Read { peer, .. } => (peer, Vec::new()),
            };
            self.queues[i][to].push_back((a, data, self.incarnations[i]));
        }
        let outputs: Vec<Output> = self.coordinators[i].drain_outputs().collect();
        for out in outputs {
            match out {
                Output::Decided(view) => self.check_decided(i, view),
                Output::BadDecision { index, why } => {
                    self.bad.push(format!("bad decision at {index}: {why}"))
                }
                _ => {}
            }
        }
    }

    fn check_decided(&mut self, i: usize, view: View) {
        let epoch = view.epoch;
        if let Some(last) = self.last_output[i] {
            assert!(epoch > last, "coordinator {i} decided {epoch} after {last}");
        }
        self.last_output[i] = Some(epoch);
        match self.decided.get(&epoch) {
            Some(v) if v != &view => {
                self.disagreements.push(format!("two views decided at epoch {epoch}"))
            }
            Some(_) => {}
            None => {
                if epoch > 0 {
                    match self.decided.get(&(epoch - 1)) {
                        None => self.disagreements.push(format!("a gap before view {epoch}")),
                        Some(prev) if !view.follows(prev) => self
                            .disagreements
                            .push(format!("view {epoch} does not follow its predecessor")),
                        Some(_) => {}
                    }
                }
                self.decided.insert(epoch, view.clone());
            }
        }
        for j in 0..3 {
            // A lost broadcast (board writes are unsignaled) leaves a coordinator behind, to
            // lead later from an older view.
            if j != i && !(self.lossy && self.random() % 2 == 0) {
                self.coordinators[j].learned(view.clone());
            }
        }
    }

    /// Lands the oldest operation from `from` to `to`.
    fn deliver(&mut self, from: usize, to: usize) -> bool {
        if self.cut == Some(to) {
            return false;
        }
        let Some((action, data, incarnation)) = self.queues[from][to].pop_front() else {
            return false;
        };
        // The completion of an operation of an earlier incarnation of its poster reaches nobody.
        let current = incarnation == self.incarnations[from];
        let mut target = Mem(self.regions[to].clone());
        match action {
            Action::Write { offset, .. } => target.write(offset, &data),
            Action::Cas { offset, expected, desired, op, .. } => {
                let old = target.cas_word(offset, expected, desired).unwrap();
                if old != expected {
                    self.cas_failed[from] += 1;
                }
                if current {
                    self.done[from].push_back(Done::Cas { op, old });
                }
            }
            Action::Read { remote, local, len, op, .. } => {
                let mut bytes = vec![0u8; len as usize];
                target.read(remote, &mut bytes);
                if current {
                    Mem(self.regions[from].clone()).write(local, &bytes);
                    self.done[from].push_back(Done::Read { op });
                }
            }
        }
        true
    }

    fn complete(&mut self, i: usize) -> bool {
        let Some(done) = self.done[i].pop_front() else { return false };
        let r = self.random();
        let mut mem = Mem(self.regions[i].clone());
        match done {
            Done::Cas { op, old } => self.coordinators[i].on_cas(op, old, self.now_ns, r, &mut mem),
            Done::Read { op } => self.coordinators[i].on_read(op, self.now_ns, r, &mut mem),
        }
        self.after(i);
        true
    }

    /// Everything in flight lands and completes, everyone polls, until nothing moves.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            let mut moved = false;
            for i in 0..3 {
                for j in 0..3 {
                    while self.deliver(i, j) {
                        moved = true;
                    }
                }
                while self.complete(i) {
                    moved = true;
                }
                self.poll(i);
            }
            self.now_ns += 1_000;
            let cut = self.cut;
            let landed =
                (0..3).all(|to| cut == Some(to) || self.queues.iter().all(|q| q[to].is_empty()));
            if !moved && landed {
                return;
            }
        }
        panic!("the coordinators never settled");
    }

    fn leader_latest(&self, i: usize) -> u64 {
        self.coordinators[i].latest().map_or(0, |v| v.epoch)
    }
}

fn join(node: u16, incarnation: u64) -> Change {
    Change::Join { node, incarnation }
}

/// The safety phase: random beliefs about who is alive, random delivery order on the FIFO
/// connections, random changes sent to random coordinators. Whether two led at once.
fn duel(c: &mut Cluster) -> bool {
    duel_with(c, false)
}

/// [`duel`], and with `restarts` a random coordinator restarts without its memory every 200
/// steps while half of the broadcasts of decided views are lost (so that some coordinator
/// leads from an older view, and prepares again an index decided without it).
fn duel_with(c: &mut Cluster, restarts: bool) -> bool {
    let mut dueled = false;
    c.lossy = restarts;
    for step in 0..3_000u64 {
        dueled |= c.coordinators[0].is_leading() && c.coordinators[1].is_leading();
        if restarts && step % 200 == 100 {
            let i = (c.random() % 3) as usize;
            // One at a time: the others answer at the next index to decide. Two coordinators
            // of three that abstain there leave no majority, and nothing is decided again
            // (two that forgot an index decided with them leave no one who knows it).
            let next = c.decided.keys().next_back().map_or(0, |e| e + 1);
            let others_answer = (0..3)
                .filter(|&j| j != i)
                .all(|j| c.coordinators[j].answers_from().is_none_or(|b| b <= next));
            if others_answer {
                c.restart(i);
            }
        }
        let r = c.random();
        let i = (r % 3) as usize;
        match (r >> 8) % 30 {
            0 => {
                // Each coordinator's own belief: often everyone, sometimes without 0.
                let alive = if (r >> 16) % 3 == 0 { 0b110 } else { 0b111 };
                c.coordinators[i].set_alive(alive);
            }
            1 => {
                let node = 10 + ((r >> 20) % 6) as u16;
                c.coordinators[i].request(join(node, r >> 32));
                c.after(i);
            }
            2 => {
                if let Some(m) = c.coordinators[i].latest().and_then(|v| v.members.last()) {
                    let m = *m;
                    c.coordinators[i].request(Change::Leave { member: m });
                    c.after(i);
                }
            }
            3 => c.coordinators[i].request(Change::Lease { lease_ns: 1_000 * (step % 40) }),
            4..=15 => {
                let j = ((r >> 24) % 3) as usize;
                c.deliver(i, j);
            }
            16..=25 => {
                c.complete(i);
            }
            _ => c.poll(i),
        }
        c.now_ns += 100;
    }
    dueled
}

/// §5.3.1: several coordinators may believe they lead (a partial partition); safety holds.
/// Random beliefs about who is alive, random delivery order on FIFO connections, random
/// changes: every epoch is decided with one view, without gaps, each view following the
/// previous; once every coordinator agrees on the leader, the cluster decides again.
#[test]
fn dueling_coordinators_agree_without_gaps() {
    let (mut duels, mut decided_in_duels, mut cas_failed) = (0, 0, 0);
    for seed in 0..150 {
        let mut c = Cluster::new(seed);
        let dueled = duel(&mut c);
        assert!(c.bad.is_empty(), "seed {seed}: {:?}", c.bad);
        duels += usize::from(dueled);
        decided_in_duels += c.decided.len();
        cas_failed += c.cas_failed.iter().sum::<usize>();
        // Liveness: one leader for everyone.
        liveness(&mut c, seed);
    }
    // The test tests something: leaders dueled in most seeds, and views were decided.
    // The test tests something: leaders dueled in most seeds, their CASes collided, and views
    // were decided meanwhile.
    println!("{duels} of 150 seeds with two leaders at once, {cas_failed} failed CASes, {decided_in_duels} views decided");
    assert!(duels > 100 && cas_failed > 100, "{duels} duels, {cas_failed} failed CASes");
    assert!(decided_in_duels > 150 * 8, "{decided_in_duels} views");
}

/// §5.3.1 pre-preparation and leader change: a stable leader keeps the next slot prepared; a
/// new leader predicts that its predecessor prepared every acceptor alike and re-prepares in
/// one round: none of its CASes fails.
#[test]
fn a_new_leader_reprepares_in_one_round() {
    let mut c = Cluster::new(7);
    c.settle();
    for node in 10..15u16 {
        c.coordinators[0].request(join(node, u64::from(node)));
        c.settle();
    }
    assert_eq!(c.leader_latest(0), 5);
    assert_eq!(c.cas_failed[0], 0, "a stable leader's predictions hold");
    // Coordinator 0 stops proposing (its acceptor still answers); everyone elects 1.
    for i in 0..3 {
        c.coordinators[i].set_alive(0b110);
    }
    c.settle();
    let posted = c.cas_posted[1];
    c.coordinators[1].request(join(20, 20));
    c.settle();
    assert_eq!(c.leader_latest(1), 6);
    assert_eq!(c.cas_failed[1], 0, "the new leader predicted every word");
    // One prepare and one accept of the new view, one prepare ahead, on three acceptors.
    assert!(c.cas_posted[1] - posted <= 9, "{} CASes", c.cas_posted[1] - posted);
    assert_eq!(c.coordinators[2].latest().map(|v| v.epoch), Some(6));
}

/// Requests sent to a coordinator that does not lead are handed back for the leader.
#[test]
fn only_the_leader_takes_changes() {
    let mut c = Cluster::new(1);
    c.settle();
    c.coordinators[1].request(join(30, 1));
    let outputs: Vec<Output> = c.coordinators[1].drain_outputs().collect();
    assert!(matches!(outputs[..], [Output::NotLeader { .. }]), "{outputs:?}");
}

/// The dueling test catches a broken driver: one that keeps a view whose index another view
/// won, and offers it at the next index, where it does not follow.
#[test]
fn a_driver_that_keeps_lost_views_is_caught() {
    let caught = (0..150).find(|&seed| {
        let mut c = Cluster::with(seed, true);
        duel(&mut c);
        !c.bad.is_empty()
    });
    assert!(caught.is_some(), "no seed caught the broken driver");
}

/// The liveness phase after a duel: one leader for everyone, a join, and every coordinator
/// ends with the view that carries it, without gaps.
fn converge(c: &mut Cluster, seed: u64) {
    c.lossy = false;
    let latest = c.decided.values().next_back().cloned();
    for i in 0..3 {
        if let Some(view) = &latest {
            c.coordinators[i].learned(view.clone());
        }
    }
    liveness(c, seed);
}

/// One leader for everyone: a join is decided, and every coordinator ends with the view that
/// carries it, without gaps.
fn liveness(c: &mut Cluster, seed: u64) {
    for i in 0..3 {
        c.coordinators[i].set_alive(0b111);
    }
    c.now_ns += 1_000_000;
    c.settle();
    let before = c.leader_latest(0);
    c.coordinators[0].request(join(40, seed));
    c.settle();
    let latest = c.coordinators[0].latest().expect("decided views").clone();
    let states: Vec<String> = c.coordinators.iter().map(Coordinator::describe).collect();
    assert!(latest.epoch > before, "seed {seed}: no view decided after the duel: {states:#?}");
    assert!(latest.uid_of(40).is_some(), "seed {seed}: the join was not carried out");
    for i in 1..3 {
        assert_eq!(c.coordinators[i].latest(), Some(&latest), "seed {seed}: {i} behind");
    }
    assert_eq!(c.decided.len() as u64, latest.epoch + 1, "seed {seed}: gaps");
}

/// A coordinator restarted without its memory abstains wherever it may have answered before
/// (`mu_ukharon::restart`): the dueling test with a random coordinator restarted every 500
/// steps (its region zeroed, what was posted to it lost) keeps agreement and has no gaps, and
/// the cluster decides again once one leader is left.
#[test]
fn coordinators_restarted_without_memory_agree_without_gaps() {
    let (mut restarts, mut decided_in_duels) = (0, 0);
    for seed in 0..500 {
        let mut c = Cluster::new(seed);
        duel_with(&mut c, true);
        assert!(c.disagreements.is_empty(), "seed {seed}: {:?}", c.disagreements);
        assert!(c.bad.is_empty(), "seed {seed}: {:?}", c.bad);
        restarts += c.restarts;
        decided_in_duels += c.decided.len();
        converge(&mut c, seed);
        assert!(c.disagreements.is_empty(), "seed {seed}: {:?}", c.disagreements);
    }
    println!("{restarts} restarts, {decided_in_duels} views decided in the duels");
    assert!(restarts > 500 * 3, "{restarts} restarts");
    assert!(decided_in_duels > 500 * 6, "{decided_in_duels} views");
}

/// The restart test catches a restarted coordinator that does not abstain (it answers at once
/// with zero words, as if it had never taken part): two views are decided at one epoch.
#[test]
fn a_restarted_coordinator_that_does_not_abstain_is_caught() {
    let caught: Vec<u64> = (0..1000)
        .filter(|&seed| {
            let mut c = Cluster::new(seed);
            c.forgetful = true;
            duel_with(&mut c, true);
            !c.disagreements.is_empty()
        })
        .collect();
    println!("the forgetful coordinator is caught at {} of 1000 seeds: {caught:?}", caught.len());
    assert!(!caught.is_empty(), "no seed caught the forgetful coordinator");
}

/// A restarted coordinator takes part again from the index its rejoin named: once the others
/// decided past it, the cluster decides with it when another coordinator answers nothing.
#[test]
fn a_restarted_coordinator_answers_again_past_its_bound() {
    let mut c = Cluster::new(3);
    c.settle();
    for node in 10..13u16 {
        c.coordinators[0].request(join(node, u64::from(node)));
        c.settle();
    }
    c.restart(2);
    let from = c.coordinators[2].answers_from().expect("rejoined");
    assert!(c.coordinators[2].describe().contains("the next one among them"));
    // With nothing to change, the leader decides views that change nothing until it is past
    // the indices 2 abstains in.
    c.settle();
    assert_eq!(c.leader_latest(0) + 1, from, "{}", c.coordinators[0].describe());
    let latest = c.coordinators[0].latest().unwrap().clone();
    let members = c.decided[&(from - 2)].members.clone();
    assert_eq!(latest.members, members, "views that change nothing");
    assert!(c.coordinators[2].describe().contains("answers again"));
    // Coordinator 1 answers nothing from now on: 0 decides with 2 only.
    c.cut = Some(1);
    let before = c.leader_latest(0);
    c.coordinators[0].request(join(40, 40));
    c.settle();
    assert_eq!(c.leader_latest(0), before + 1, "{}", c.coordinators[0].describe());
    assert_eq!(c.coordinators[2].latest().map(|v| v.epoch), Some(before + 1));
    assert!(c.disagreements.is_empty(), "{:?}", c.disagreements);
}

/// The leader itself restarted without its memory: leading again once it rejoined, with
/// nothing to change, it decides views that change nothing until it is past its own bound
/// (otherwise it sat on the index it prepared; had it missed views decided while it rejoined,
/// it never adopted them, found by `mu sim --protocol ukharon`).
#[test]
fn a_restarted_leader_goes_past_its_own_bound() {
    let mut c = Cluster::new(5);
    c.settle();
    c.coordinators[0].request(join(10, 10));
    c.settle();
    let before = c.leader_latest(0);
    c.restart(0);
    let from = c.coordinators[0].answers_from().expect("rejoined");
    assert!(from > before + 1, "it abstains in the next index");
    c.settle();
    assert!(c.coordinators[0].is_leading(), "{}", c.coordinators[0].describe());
    assert_eq!(c.leader_latest(0) + 1, from, "{}", c.coordinators[0].describe());
    assert!(c.coordinators[0].describe().contains("answers again"));
    let members = c.decided[&before].members.clone();
    assert!((before..from).all(|e| c.decided[&e].members == members), "views that change nothing");
    assert!(c.disagreements.is_empty() && c.bad.is_empty(), "{:?} {:?}", c.disagreements, c.bad);
}

/// Before its bound, it answers nothing: with coordinator 1 cut off right after the restart,
/// the index after the latest view is not decided.
#[test]
fn a_restarted_coordinator_abstains_below_its_bound() {
    let mut c = Cluster::new(4);
    c.settle();
    c.coordinators[0].request(join(10, 10));
    c.settle();
    c.restart(2);
    c.cut = Some(1);
    let before = c.leader_latest(0);
    c.coordinators[0].request(join(11, 11));
    c.settle();
    assert_eq!(c.leader_latest(0), before, "decided with an acceptor that forgot");
}

/// A rejoin takes the words of enough distinct other coordinators, every slot of each, once.
#[test]
fn a_rejoin_refuses_what_it_cannot_rest_on() {
    use mu_ukharon::restart::RejoinError;
    let words = vec![0u64; SLOTS as usize];
    let mut mem = Mem(Rc::new(RefCell::new(vec![0u8; Cluster::layout().region_bytes()])));
    let mut c = Coordinator::with_memory(Cluster::config(0), Recall::Forgotten).unwrap();
    let too_few = c.rejoin(&[(1, &words)], &mut mem);
    assert_eq!(too_few, Err(RejoinError::TooFew { got: 1, needed: 2 }));
    let itself = c.rejoin(&[(0, &words), (1, &words)], &mut mem);
    assert_eq!(itself, Err(RejoinError::BadPosition { position: 0, count: 3 }));
    let twice = c.rejoin(&[(1, &words), (1, &words)], &mut mem);
    assert_eq!(twice, Err(RejoinError::BadPosition { position: 1, count: 3 }));
    let short = c.rejoin(&[(1, &words[1..]), (2, &words)], &mut mem);
    assert!(matches!(short, Err(RejoinError::WrongLength { position: 1, .. })), "{short:?}");
    assert!(c.is_rejoining());
    // Nothing decided anywhere: it abstains in the indices up to prepare_ahead only.
    assert_eq!(c.rejoin(&[(1, &words), (2, &words)], &mut mem), Ok(2));
    assert_eq!(c.rejoin(&[(1, &words), (2, &words)], &mut mem), Err(RejoinError::NotRejoining));
    let mut remembered = Coordinator::new(Cluster::config(1)).unwrap();
    let again = remembered.rejoin(&[(0, &words), (2, &words)], &mut mem);
    assert_eq!(again, Err(RejoinError::NotRejoining));
    let one = CoordinatorConfig {
        layout: CoordinatorConfig::layout_for(1, SLOTS).unwrap(),
        ..Cluster::config(0)
    };
    assert!(Coordinator::with_memory(one, Recall::Forgotten).is_err());
}
