//! The appointed primary of a leased-reads run: whether its replica serves, and what a member
//! named primary does when its replica cannot take the leadership up.

use super::cluster::{LeaseCluster, Member};
use mu_replica::Appointment;

impl LeaseCluster {
    /// A member named primary whose replica does not stand for leadership (restarted and
    /// not taken back yet, or behind what it knows decided) asks the coordinators to name
    /// another member, once per view: under appointed leaders nobody else may lead, and that
    /// replica waits for a leader to give it what it lacks.
    pub(super) fn hand_on_primaries(&mut self) {
        for m in self.member_ids() {
            if !self.running(m) {
                continue;
            }
            let Some(replica) = self.members[&m].replica.as_ref() else { continue };
            let core = self.uk.nodes[&m].core.as_ref().expect("running");
            let Some(view) = core.view().filter(|v| v.primary == Some(m)) else { continue };
            if replica.status().eligible || self.handed_on.get(&m) == Some(&view.epoch) {
                continue;
            }
            // The next member by node id, round the view: the role goes round until it
            // reaches a replica that takes the leadership up.
            let nodes: Vec<u16> = view.nodes().collect();
            let Some(next) = mu_replica::hand_on(m, &nodes, false) else { continue };
            self.handed_on.insert(m, view.epoch);
            self.handoffs += 1;
            let core = self.uk.nodes.get_mut(&m).and_then(|n| n.core.as_mut()).expect("running");
            core.ask_primary(next);
        }
    }

    /// The latest view's primary, once its replica leads a term under the appointment that
    /// view makes. `Err` says what is not so yet.
    pub fn serving(&self) -> Result<u16, String> {
        let view = self.uk.log.latest().ok_or("no view decided")?;
        let primary =
            view.primary.ok_or_else(|| format!("view {} names no primary", view.epoch))?;
        let uid = view.uid_of(primary).ok_or("the primary is no member")?;
        let appointed = Appointment::from_unique_id(self.replica_node(primary), uid);
        let member = self.members.get(&primary).ok_or("the primary has no replica")?;
        let term = member.replica.as_ref().and_then(|r| r.term());
        match term {
            Some(t) if t.appointment == appointed && self.running(primary) => Ok(primary),
            _ => Err(format!(
                "view {}: the replica of primary {primary} leads {term:?}, not under \
                 {appointed:?}; replicas: {}",
                view.epoch,
                self.describe_replicas()
            )),
        }
    }

    /// Each replica's state, for messages: (member, phase, eligible, recovering, leader, fuo).
    pub fn describe_replicas(&self) -> String {
        let one = |(m, member): (&u16, &Member)| match &member.replica {
            None => format!("{m}: down"),
            Some(r) => {
                let s = r.status();
                format!(
                    "{m}: {}{}{}{}, fuo {}, applied {}, leader {:?}",
                    r.replication.phase_text(),
                    if s.eligible { "" } else { ", not eligible" },
                    if s.recovering { ", recovering" } else { "" },
                    if self.running(*m) { "" } else { ", stopped" },
                    s.fuo,
                    member.applied.len(),
                    s.leader.map(|l| l.0)
                )
            }
        };
        self.members.iter().map(one).collect::<Vec<_>>().join("; ")
    }

    /// The latest view's primary, if it runs and its replica does not stand for leadership
    /// (restarted and not taken back, or behind what it knows decided): under appointed
    /// leaders nobody leads then.
    pub fn primary_standing_aside(&self) -> Option<u16> {
        let primary = self.uk.log.latest()?.primary?;
        let replica = self.members.get(&primary)?.replica.as_ref()?;
        (self.running(primary) && !replica.status().eligible).then_some(primary)
    }

    /// The membership's state at `member`, and the view it last handed the primary role on in.
    pub fn describe_member(&self, member: u16) -> String {
        let core = self.uk.nodes.get(&member).and_then(|n| n.core.as_ref());
        let handed = self.handed_on.get(&member);
        format!("{}; handed on in view {handed:?}", core.map_or("down".into(), |c| c.describe()))
    }
}
