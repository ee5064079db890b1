//! Appointed leaders and the rules of leased local reads (`docs/protocols/lease-reads.md`).
//!
//! Under [`crate::Leaders::Appointed`] the application, not the failure detector, says who
//! leads: the primary its membership's latest view names ([`Appointment`]). A leader's term
//! remembers the appointment it started under ([`Term`]); [`LeaseGate`] holds the rules a
//! server applies before answering from its own state. Pure: no clock, no membership — the
//! caller passes what `Active(view)` answered.

use mu_fabric::NodeId;

/// Who leads, as the application's membership says: a replica and the admission that names it
/// (uKharon's unique id without the node: a replica removed and admitted again is appointed
/// under a new admission, so its earlier term cannot pass for the new one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Appointment {
    /// The replica appointed to lead.
    pub leader: NodeId,
    /// Which admission of `leader` (not 0, below 2^48).
    pub admission: u64,
}

/// The most admissions an [`Appointment`] tells apart (48 bits, beside the 16 of the node).
pub const ADMISSION_MAX: u64 = (1 << 48) - 1;

impl Appointment {
    /// An appointment of `leader` under `admission`; `None` where the admission is 0 or does
    /// not fit in 48 bits.
    pub fn new(leader: NodeId, admission: u64) -> Option<Appointment> {
        (admission != 0 && admission <= ADMISSION_MAX).then_some(Appointment { leader, admission })
    }

    /// An appointment from one of uKharon's unique ids (`((epoch + 1) << 16) | node`), whose
    /// node is `leader` on the replicas' fabric.
    pub fn from_unique_id(leader: NodeId, unique_id: u64) -> Option<Appointment> {
        Appointment::new(leader, unique_id >> 16)
    }

    /// The appointment as one word (never 0), to publish atomically.
    pub fn word(self) -> u64 {
        self.admission << 16 | u64::from(self.leader.0)
    }

    /// The appointment `word` holds; `None` for 0 (nobody appointed).
    pub fn from_word(word: u64) -> Option<Appointment> {
        Appointment::new(NodeId(word as u16), word >> 16)
    }
}

/// A leadership of this replica: the appointment it started under (rule 1: taken up only while
/// the appointment named this replica) and its serial number (every leadership of the replica
/// has its own, so two terms under one appointment are told apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Term {
    /// What the replica was appointed under when it took the leadership up; `None` where
    /// leaders are elected.
    pub appointment: Option<Appointment>,
    /// The replica's leaderships so far, this one included (`ReplicaStatus::leaderships`).
    pub serial: u64,
}

/// Rule 1 on the replication plane: whether a replica may take up (or keep) a leadership under
/// the appointment word `appointed` (0: nobody) — only where it names `me`. `term_word` is the
/// appointment the current leadership started under, if one runs: a new appointment of this
/// replica (another admission) ends that leadership, so that a fresh one takes over.
pub(crate) fn may_lead_appointed(me: NodeId, appointed: u64, term_word: Option<u64>) -> bool {
    let named = Appointment::from_word(appointed).is_some_and(|a| a.leader == me);
    named && term_word.is_none_or(|w| w == appointed)
}

/// Rule 1 where the application turns its membership's views into appointments: what to
/// appoint now, given the primary of the latest view (its node on the replicas' fabric and
/// its admission) and whether that view is `Active` here. Another replica is appointed at
/// once; this one only once the view naming it is active here. `None`: leave the appointment
/// as it is (the view names this replica and is not active here yet).
pub fn next_appointment(
    me: NodeId,
    primary: Option<Appointment>,
    active_here: bool,
) -> Option<Option<Appointment>> {
    match primary {
        Some(p) if p.leader == me && !active_here => None,
        other => Some(other),
    }
}

/// What a replica named primary does when it does not stand for leadership (`eligible`
/// false: restarted without its log and not taken back yet, or behind what it knows decided):
/// under appointed leaders nobody else may lead, and it waits for a leader to give it what it
/// lacks, so it asks for another member in its place. Returns that member: the next of
/// `members` (the view's, by node id) after `me`, round the view; `None` where this replica
/// stands, or is alone.
pub fn hand_on(me: u16, members: &[u16], eligible: bool) -> Option<u16> {
    if eligible {
        return None;
    }
    let after = members.iter().copied().filter(|&n| n > me).min();
    after.or_else(|| members.iter().copied().min()).filter(|&n| n != me)
}

/// The rules a server applies around a leader's answers (rules 2 and 3). One per server: it
/// remembers which term has had a proposal of its own applied.
#[derive(Debug, Default)]
pub struct LeaseGate {
    /// The latest term known to have applied a proposal of its own: its catch-up is applied.
    confirmed: Option<Term>,
}

impl LeaseGate {
    /// A gate that knows of no term.
    pub fn new() -> LeaseGate {
        LeaseGate::default()
    }

    /// A proposal was applied and answered between `before` and `after`, the replica's terms
    /// read just before proposing and just after: where both are the same term, it committed
    /// and applied an entry of its own (a proposal is only ever committed by the leadership
    /// that proposed it), so everything before that entry is applied too.
    pub fn applied_own(&mut self, before: Option<Term>, after: Option<Term>) {
        if let (Some(b), Some(a)) = (before, after) {
            if b == a && b.appointment.is_some() {
                self.confirmed = Some(a);
            }
        }
    }

    /// Rule 2: whether an answer of this replica may go out. `appointed` is the appointment of
    /// the view the caller just found `Active` (`active`), read after the request was applied.
    pub fn may_answer(me: NodeId, appointed: Option<Appointment>, active: bool) -> bool {
        active && appointed.is_some_and(|a| a.leader == me)
    }

    /// Rule 3's first check: whether a local read may start, with `term` the replica's current
    /// term and `appointed`/`active` as for [`LeaseGate::may_answer`], checked before the read.
    /// The caller then reads the state at once and asks [`LeaseGate::may_answer`] again after
    /// it (the second check); only if both hold is the read answered.
    pub fn may_read(
        &self,
        term: Option<Term>,
        appointed: Option<Appointment>,
        active: bool,
    ) -> bool {
        let Some(term) = term else { return false };
        active
            && term.appointment.is_some()
            && term.appointment == appointed
            && self.confirmed == Some(term)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(node: u16, admission: u64) -> Appointment {
        Appointment::new(NodeId(node), admission).unwrap()
    }

    fn term(node: u16, admission: u64, serial: u64) -> Option<Term> {
        Some(Term { appointment: Some(a(node, admission)), serial })
    }

    #[test]
    fn an_appointment_is_one_word_and_back() {
        let x = a(7, 0x1234_5678_9abc);
        assert_eq!(Appointment::from_word(x.word()), Some(x));
        assert_eq!(Appointment::from_word(0), None);
        assert_eq!(Appointment::new(NodeId(1), 0), None);
        assert_eq!(Appointment::new(NodeId(1), ADMISSION_MAX + 1), None);
        // uKharon's id of node 3 admitted by the view of epoch 4.
        assert_eq!(Appointment::from_unique_id(NodeId(3), (5 << 16) | 3), Some(a(3, 5)));
    }

    #[test]
    fn a_term_starts_only_where_the_appointment_names_this_replica() {
        let me = NodeId(1);
        assert!(may_lead_appointed(me, a(1, 5).word(), None));
        assert!(!may_lead_appointed(me, a(2, 5).word(), None));
        assert!(!may_lead_appointed(me, 0, None));
        // The leadership under admission 5 goes on; one under admission 4 ends.
        assert!(may_lead_appointed(me, a(1, 5).word(), Some(a(1, 5).word())));
        assert!(!may_lead_appointed(me, a(1, 5).word(), Some(a(1, 4).word())));
    }

    #[test]
    fn a_local_read_needs_an_active_view_naming_a_confirmed_term() {
        let mut gate = LeaseGate::new();
        let t = term(1, 5, 3);
        assert!(!gate.may_read(t, Some(a(1, 5)), true), "no own proposal applied yet");
        gate.applied_own(t, term(1, 5, 4));
        assert!(!gate.may_read(t, Some(a(1, 5)), true), "the proposal spanned two terms");
        gate.applied_own(t, t);
        assert!(gate.may_read(t, Some(a(1, 5)), true));
        assert!(!gate.may_read(t, Some(a(1, 5)), false), "not active");
        assert!(!gate.may_read(t, Some(a(1, 6)), true), "another admission");
        assert!(!gate.may_read(term(1, 5, 4), Some(a(1, 5)), true), "a later term");
        assert!(!gate.may_read(None, Some(a(1, 5)), true), "not leading");
        // Elected leaders (no appointment) never read locally.
        let elected = Some(Term { appointment: None, serial: 9 });
        gate.applied_own(elected, elected);
        assert!(!gate.may_read(elected, None, true));
    }

    #[test]
    fn this_replica_is_appointed_only_once_its_view_is_active_here() {
        let me = NodeId(1);
        assert_eq!(next_appointment(me, Some(a(2, 5)), false), Some(Some(a(2, 5))));
        assert_eq!(next_appointment(me, Some(a(1, 5)), false), None);
        assert_eq!(next_appointment(me, Some(a(1, 5)), true), Some(Some(a(1, 5))));
        assert_eq!(next_appointment(me, None, false), Some(None));
    }

    #[test]
    fn a_primary_that_cannot_lead_hands_the_role_on_round_the_view() {
        assert_eq!(hand_on(4, &[3, 4, 6], true), None, "it stands: it keeps the role");
        assert_eq!(hand_on(4, &[3, 4, 6], false), Some(6));
        assert_eq!(hand_on(6, &[3, 4, 6], false), Some(3), "round the view");
        assert_eq!(hand_on(6, &[6], false), None, "alone");
    }

    #[test]
    fn answers_need_an_active_view_naming_this_replica() {
        assert!(LeaseGate::may_answer(NodeId(1), Some(a(1, 5)), true));
        assert!(!LeaseGate::may_answer(NodeId(1), Some(a(1, 5)), false));
        assert!(!LeaseGate::may_answer(NodeId(1), Some(a(2, 5)), true));
        assert!(!LeaseGate::may_answer(NodeId(1), None, true));
    }
}
