//! Membership changes made at random (§5.4), for `mu sim --faults membership` and the scenario
//! tests of random changes: who the members are now, how many of them may be out at once while
//! a change is undecided, and a change made at the leader the replicas agree on.
//!
//! One change at a time: a change submitted and not yet seen decided may still be decided (a
//! new leader adopts it), so from its submission until the most advanced replica applied it,
//! the fault budget must hold in the configuration it makes as well as in the current one.
//! Once applied there it is decided, but until every live member applied it the budget still
//! holds in both: if the replicas that applied it crash, the most advanced live one is back in
//! the configuration before it, and the change must still find a majority in the one after
//! (kept as the configuration itself: a later change may undo the change, and the one before
//! is what a lagging replica has).
//! A removal is asked for only if the configuration before it keeps a majority with the
//! removed member out ([`RemovalBudget`]): it stops once it applies its removal, perhaps before
//! the others, who count majorities of that configuration until they apply it.
//! A change that failed stays in doubt for the rest of the run, which only makes the budget
//! stricter, unless its outcome says it can never take effect ([`Changes::poll`]): then the
//! validity checker makes sure that no replica applies it.

use crate::cluster::SimCluster;
use mu_fabric::NodeId;
use mu_fabric_sim::SimRng;
use mu_replica::{Change, ProposeError, Protocol};

/// How a removal is checked against the fault budget before it is asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RemovalBudget {
    /// A majority must stay in the configuration after it, and in the one before it with the
    /// removed member out: that member stops once it applies its removal, which may be before
    /// the others learn of it, and until they do they still need a majority of the
    /// configuration that counts it (`mu sim` seed 32684, Mu, 7 replicas).
    #[default]
    BothConfigurations,
    /// In the configuration after it only: the rule under which the scenario seeds of
    /// `scenarios.rs` `t99`, `t101` and `t102` were found, kept so that they replay the paths
    /// that found their bugs.
    AfterOnly,
}

/// The change in doubt, if any.
#[derive(Default)]
pub struct Changes {
    removal_budget: RemovalBudget,
    in_doubt: Option<Change>,
    /// Configurations decided (the most advanced replica applied the change that made them)
    /// that some live member may not have reached yet, each with how many entries that replica
    /// had applied when it was seen there: a live member that applied as many has reached it,
    /// or a later one.
    decided: Vec<(Vec<usize>, usize)>,
    /// Where the change in doubt was submitted (position, boot), until its outcome is read.
    submitted: Option<(usize, u32)>,
}

/// The configuration `members` once `change` is applied.
fn with(members: &[usize], change: Change) -> Vec<usize> {
    let mut after = members.to_vec();
    match change {
        Change::Add(id) if !after.contains(&(id.0 as usize)) => after.push(id.0 as usize),
        Change::Remove(id) => after.retain(|&p| p != id.0 as usize),
        Change::Add(_) => {}
    }
    after
}

/// Whether replica `pos` is out of majorities: crashed, unable to lead, restarted and not
/// counted yet, or removed: a removed replica stops, while a lagging replica's configuration
/// may still count it.
pub fn is_out(c: &SimCluster, pos: usize) -> bool {
    c.cores[pos].as_ref().is_none_or(|k| {
        let status = k.status();
        !status.eligible || status.recovering || status.removed
    })
}

/// How many of `members` are out.
pub fn out_count(c: &SimCluster, members: &[usize]) -> usize {
    members.iter().filter(|&&p| is_out(c, p)).count()
}

impl Changes {
    /// No change made yet, removals checked by `removal_budget`.
    pub fn with_removal_budget(removal_budget: RemovalBudget) -> Changes {
        Changes { removal_budget, ..Changes::default() }
    }

    /// The change submitted and not yet seen decided.
    pub fn in_doubt(&self) -> Option<Change> {
        self.in_doubt
    }

    /// The last configuration seen decided that some live member may not have reached yet.
    pub fn latest_decided(&self) -> Option<&[usize]> {
        self.decided.last().map(|(config, _)| &config[..])
    }

    /// The members now (positions), as the replica that applied the most applied them. The
    /// change in doubt is decided once it shows there; the configuration it made is forgotten
    /// once every live member applied as many entries as that replica had then.
    pub fn members(&mut self, c: &SimCluster) -> Vec<usize> {
        let members: Vec<usize> = c.members_now().iter().map(|id| id.0 as usize).collect();
        if let Some(change) = self.in_doubt {
            if with(&members, change).len() == members.len() {
                // As far as the replica `members_now` read applied.
                let applied_most = (0..c.cores.len())
                    .filter(|&p| c.in_cluster(p))
                    .map(|p| c.applied[p].len())
                    .max()
                    .unwrap_or(0);
                self.in_doubt = None;
                self.decided.push((members.clone(), applied_most));
            }
        }
        // A replica that is out (restarted and not taken back, say) counts so in every
        // configuration, and the leader that takes it back brings it up to date: it holds none
        // back. A live one that is in may lead, or elect a leader, under what it applied.
        let lagging = |applied: usize| {
            (0..c.cores.len())
                .any(|p| c.in_cluster(p) && !is_out(c, p) && c.applied[p].len() < applied)
        };
        self.decided.retain(|&(_, applied)| lagging(applied));
        members
    }

    /// The configurations in which a majority must stay in: `members`, the one the change in
    /// doubt makes, those decided that some live member may not have reached, and under Velos
    /// every configuration a live replica still has (until every live replica applied a
    /// change, a new leader may have to decide the change's index again in the configuration
    /// before it, where a recovering replica answers nothing).
    fn budget_configs(&self, c: &SimCluster, members: &[usize]) -> Vec<Vec<usize>> {
        let mut configs: Vec<Vec<usize>> = vec![members.to_vec()];
        let decided = self.decided.iter().map(|(config, _)| config.clone());
        for config in self.in_doubt.map(|change| with(members, change)).into_iter().chain(decided) {
            if !configs.contains(&config) {
                configs.push(config);
            }
        }
        if c.configs.first().is_some_and(|config| config.protocol == Protocol::Velos) {
            for k in c.cores.iter().flatten() {
                let seen: Vec<usize> = k.status().members.iter().map(|id| id.0 as usize).collect();
                // None known yet (restarted, not taken back): nothing to hold.
                if !seen.is_empty() && !configs.contains(&seen) {
                    configs.push(seen);
                }
            }
        }
        configs
    }

    /// Whether one more of `members` may go out (crash) with a majority left in every
    /// configuration that counts (fewer than a minority out now).
    pub fn may_lose_one(&self, c: &SimCluster, members: &[usize]) -> bool {
        self.budget_configs(c, members)
            .iter()
            .all(|config| out_count(c, config) < config.len().saturating_sub(1) / 2)
    }

    /// Tries a change at the leader the replicas agree on: adding a replica outside the
    /// configuration (started for it: fresh if it never ran, restarted if it crashed, a new
    /// process in place of a removed one), or removing a member (the leader too), each only
    /// if a majority stays in. None: nothing was tried (no agreed leader that is free, a change
    /// already in doubt, or the budget forbids the change drawn); otherwise what the leader
    /// said to the submission.
    pub fn try_change(
        &mut self,
        c: &mut SimCluster,
        rng: &mut SimRng,
        members: &[usize],
    ) -> Option<Result<(Change, usize), ProposeError>> {
        let leader = c.agreed_leader()?.0 as usize;
        if c.paused[leader] || c.outstanding[leader].is_some() || self.in_doubt.is_some() {
            return None;
        }
        let outside: Vec<usize> = (0..c.cores.len()).filter(|p| !members.contains(p)).collect();
        let add = !outside.is_empty() && (members.len() <= 2 || rng.below(2) == 0);
        let change = if add {
            // The newcomer is out until it is brought up to date.
            if out_count(c, members) + 1 > members.len() / 2 {
                return None;
            }
            let pos = outside[rng.below(outside.len() as u64) as usize];
            match &c.cores[pos] {
                None if !c.ran[pos] => c.start(pos),
                None => c.restart(pos),
                Some(_) => {
                    // Removed earlier: a new process takes its place.
                    c.crash(pos);
                    c.restart(pos);
                }
            }
            Change::Add(NodeId(pos as u16))
        } else {
            // Removing a member that is out keeps the others' majority; removing one that is in
            // may leave too few. And a removed member stops once it applies its removal, which
            // may be before the others do: until then it is out of the configuration they
            // still have ([`RemovalBudget`]).
            let pos = members[rng.below(members.len() as u64) as usize];
            let out_now = out_count(c, members);
            let out_after = out_now - usize::from(is_out(c, pos));
            let out_before_applied = out_now + usize::from(!is_out(c, pos));
            let before_too = self.removal_budget == RemovalBudget::BothConfigurations;
            if members.len() <= 2
                || out_after > (members.len() - 2) / 2
                || (before_too && out_before_applied > (members.len() - 1) / 2)
            {
                return None;
            }
            Change::Remove(NodeId(pos as u16))
        };
        Some(c.submit_change(leader, change).map(|()| {
            self.in_doubt = Some(change);
            self.submitted = Some((leader, c.boot_of[leader]));
            (change, leader)
        }))
    }

    /// After a round: reads the outcome of the change submitted, if it came. One that says the
    /// change never takes effect ([`ProposeError::never_applied`]) ends the doubt, and a change
    /// asked for only once is recorded as refused, so that the validity checker fails the run
    /// if a replica applies it. Returns that outcome. Any other failure, or the leader's death, leaves it in
    /// doubt: a later leader may still decide it.
    pub fn poll(&mut self, c: &mut SimCluster) -> Option<Result<u64, ProposeError>> {
        let (pos, boot) = self.submitted?;
        if c.cores[pos].is_none() || c.boot_of[pos] != boot {
            self.submitted = None;
            return None;
        }
        let outcome = c.outcomes[pos].take()?.pop().expect("one outcome for a change");
        self.submitted = None;
        if let (Err(e), Some(change)) = (&outcome, self.in_doubt) {
            if e.never_applied() {
                self.in_doubt = None;
                // Only a change asked for once: an earlier submission of the same one may
                // have been decided.
                let label = crate::cluster::change_label(&change.encode());
                if !c.retried.contains(&label) {
                    c.refused.insert(label);
                }
            }
        }
        Some(outcome)
    }
}
