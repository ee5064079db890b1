//! What the replication plane and the background plane of one replica share: a few words, each
//! written by one side only, and the guard of the replica's own log. In groups: what the
//! background plane read of the peers, state transfer's hand-offs and the status counters
//! (`signals.rs`), and failover timing (`probe.rs`); the rest, here, is each plane's word about
//! itself (leader, eligibility, configuration, the replication plane's hot [`Progress`]).
//!
//! **Cache lines.** The two planes run on different cores, and a store takes its cache line away
//! from every other core that holds it. So the words written on the hot path (every poll, every
//! proposal) sit on lines of their own ([`OwnLines`]), apart from the words the other plane reads
//! on each of its polls; everything else is written rarely, most of it only when it changes.
//! Before this, with the field order the compiler chose for the struct (printed with
//! `offset_of!`), the FUO and loop counter stored on every poll shared 64 bytes with other
//! counters, and the own-log guard and `in_propose`, stored on every proposal, shared them with
//! the leader, liveness and eligibility words the background thread reads on every loop. What
//! that cost has not been measured with a core per thread.

use crate::ask_ahead::AskAhead;
use crate::config::Leaders;
use crate::lease::{may_lead_appointed, Appointment, Term};
use crate::lines::OwnLines;
use crate::probe::FailoverProbe;
use crate::signals::{PeerSignals, Stats, TransferSignals, SCORE_NONE};
use mu_fabric::NodeId;
use mu_replication::membership::ids_of;
use mu_replication::Phase;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

const NO_LEADER: u32 = u32::MAX;

const _: () = assert!(std::mem::size_of::<OwnLines<Progress>>() == 128);

/// What the replication plane writes on its hot path, read by the background plane only every
/// fate-sharing period (and by status).
///
/// Single writer: every write is made by a `&mut self` method of the one replication driver
/// (Mu's or Velos's) that owns this replica's [`Shared`], whichever thread runs it (in direct
/// mode the application's and the helper's take turns under a mutex; in handover mode and in the
/// simulator one thread). A second writer would break the counters, which are therefore bumped
/// with a load and a store, not a locked read-modify-write: on x86 a locked instruction waits
/// for every earlier store to leave the core, among them the copies into followers' logs, which
/// take their lines from the followers' cores.
pub(crate) struct Progress {
    /// Bumped by every iteration of the replication loop (fate sharing).
    pub loop_count: AtomicU64,
    /// A proposal is inside the engine (fate sharing).
    pub in_propose: AtomicBool,
    /// This replica's FUO as its leader engine knows it (Velos: what it applied).
    pub fuo: AtomicU64,
    /// Entries this replica committed as leader (status).
    pub commits: AtomicU64,
}

impl Progress {
    /// One more iteration of the replication loop. Single writer (see the type).
    pub fn bump_loop(&self) {
        let n = self.loop_count.load(Ordering::Relaxed);
        self.loop_count.store(n.wrapping_add(1), Ordering::Relaxed);
    }

    /// One more committed entry. Single writer (see the type).
    pub fn count_commit(&self) {
        let n = self.commits.load(Ordering::Relaxed);
        self.commits.store(n + 1, Ordering::Relaxed);
    }

    /// Publishes the FUO, storing only when it moved.
    pub fn set_fuo(&self, fuo: u64) {
        if self.fuo.load(Ordering::Relaxed) != fuo {
            self.fuo.store(fuo, Ordering::Release);
        }
    }
}

/// Words shared by the two planes of one replica. Who writes each is in its comment.
pub(crate) struct Shared {
    /// The replicas by position (fixed).
    ids: Vec<NodeId>,
    /// The leader the failure detector elected (background).
    leader: AtomicU32,
    /// By position, the permission request word to deliver to that replica's permission
    /// manager, 0 for none (replication). Per replica, because a leader asking again for the
    /// replicas it lacks must not ask the others: a manager that gave our log access to another
    /// leader meanwhile would give it back silently, and we would go on without noticing that
    /// their log changed hands in between.
    pub requests: Vec<OwnLines<AtomicU64>>,
    /// Permission requests sent ahead at an election (both planes).
    pub ask_ahead: AskAhead,
    /// This run's boot id (not 0), published with the heartbeat (in the flags word's high half).
    /// Fixed at start.
    pub boot_id: u32,
    /// The replication plane's hot words (replication).
    pub progress: OwnLines<Progress>,
    /// What the background plane read of the peers (background writes, the replication plane
    /// reads).
    pub peers: PeerSignals,
    /// State transfer between the planes (each word's writer in its comment).
    pub transfer: TransferSignals,
    /// Counters and records for status only.
    pub stats: Stats,
    /// This replica may lead (replication: it clears it when it finds it needs a state transfer,
    /// and sets it again; the background plane reads it to stand for election).
    pub eligible: AtomicBool,
    /// This replica restarted with its log lost (or joined new): it may have forgotten values it
    /// accepted, so its grants say so and a leader does not count it until it has prepared
    /// without it. Distinct from `eligible`: a replica that stepped down because it needs a
    /// state transfer has its log intact and counts in majorities as before (with both in one
    /// flag, two such replicas of five stopped every leader). Replication clears it.
    pub recovering: AtomicBool,
    /// Velos: this replica abstains in an index some live replica has not applied (replication;
    /// published by the background plane as `FLAG_ABSTAINING`).
    pub abstaining: AtomicBool,
    /// This replica's configuration fingerprint (`ReplicaConfig::fingerprint`), published with
    /// its heartbeat. Fixed at start.
    pub config_fingerprint: u16,
    /// A peer refused this replica as restarted without rejoining: it stopped taking part, as a
    /// removed one does, and `failure` says why (background).
    pub refused: AtomicBool,
    /// Velos: this replica's request to rejoin as an acceptor, or 0 (replication; published by
    /// the background plane at `REJOIN_OFFSET`).
    pub rejoin_request: AtomicU64,
    /// Who the permission manager lets write this replica's log, as an id plus one; 0: nobody
    /// (background; for status).
    pub log_holder: AtomicU64,
    /// The heartbeat is going (background, fate sharing and a replica that follows no leader;
    /// for status).
    pub heartbeat_on: AtomicBool,
    /// Failover timing: when a new leader took each step, and how its polls went.
    pub probe: FailoverProbe,
    /// Why the replica stopped on its own: a panic on one of its threads, or in the plane
    /// under an application's call (the commit handler's, most likely). Whichever thread
    /// caught it (`Replica::fail`), or the background plane when refused by a peer; the first
    /// reason is kept.
    pub failure: std::sync::Mutex<Option<String>>,
    /// While leading, the confirmed followers (ourselves included) by position, as a bit mask
    /// (replication).
    pub confirmed_mask: AtomicU64,
    /// Write access to our own log (background grants and revokes; replication writes, with a
    /// store to it before and after every write of its own log).
    pub guard: OwnLines<OwnLogGuard>,
    /// The configuration after the entries this replica applied (§5.4), by position
    /// (replication, through [`Shared::set_members`]).
    pub members: AtomicU64,
    /// Every replica that was a member in a configuration this replica applied (replication,
    /// with `members`).
    pub ever_members: AtomicU64,
    /// A decided membership entry removed this replica: it stopped taking part. Set, never
    /// cleared, by the plane that finds it out: the replication plane applying the entry, or
    /// the background plane reading a peer that applied it (`notice_removal`).
    pub removed: AtomicBool,
    /// Who picks the leader (fixed at start, [`crate::ReplicaConfig::leaders`]).
    pub leaders: Leaders,
    /// Appointed leaders: the application's latest appointment as a word
    /// ([`crate::Appointment::word`]), 0 for none (the application; the background plane
    /// publishes its leader as `leader`, the replication plane checks its term against it).
    pub appointment: AtomicU64,
    /// The leadership under way on this replica, as [`Shared::term`] reads it: its serial, 0
    /// while not leading, stored after `term_appointment` (replication).
    term_serial: AtomicU64,
    /// The appointment word the leadership under way started under (replication).
    term_appointment: AtomicU64,
}

impl Shared {
    /// Words for a replica of `ids` (by position).
    pub fn new(
        eligible: bool,
        ids: Vec<NodeId>,
        members: u64,
        boot_id: u32,
        config_fingerprint: u16,
    ) -> Shared {
        let n = ids.len();
        let replicas_count = ids.len();
        Shared {
            ids,
            leader: AtomicU32::new(NO_LEADER),
            requests: (0..replicas_count).map(|_| OwnLines(AtomicU64::new(0))).collect(),
            ask_ahead: AskAhead::new(boot_id, false),
            boot_id,
            progress: OwnLines(Progress {
                loop_count: AtomicU64::new(0),
                in_propose: AtomicBool::new(false),
                fuo: AtomicU64::new(0),
                commits: AtomicU64::new(0),
            }),
            eligible: AtomicBool::new(eligible),
            recovering: AtomicBool::new(!eligible),
            abstaining: AtomicBool::new(false),
            config_fingerprint,
            refused: AtomicBool::new(false),
            rejoin_request: AtomicU64::new(0),
            log_holder: AtomicU64::new(0),
            heartbeat_on: AtomicBool::new(true),
            confirmed_mask: AtomicU64::new(0),
            failure: std::sync::Mutex::new(None),
            probe: FailoverProbe::new(),
            peers: PeerSignals::new(n),
            transfer: TransferSignals::new(),
            stats: Stats::new(),
            guard: OwnLines(OwnLogGuard::new()),
            members: AtomicU64::new(members),
            ever_members: AtomicU64::new(members),
            removed: AtomicBool::new(false),
            leaders: Leaders::Elected,
            appointment: AtomicU64::new(0),
            term_serial: AtomicU64::new(0),
            term_appointment: AtomicU64::new(0),
        }
    }

    /// The leadership under way, if any. Read as a sequence lock: serials are never reused, so
    /// an appointment read between two equal serials is that leadership's.
    pub fn term(&self) -> Option<Term> {
        loop {
            let serial = self.term_serial.load(Ordering::Acquire);
            if serial == 0 {
                return None;
            }
            let word = self.term_appointment.load(Ordering::Acquire);
            if self.term_serial.load(Ordering::Acquire) == serial {
                return Some(Term { appointment: Appointment::from_word(word), serial });
            }
        }
    }

    /// The application's appointment ([`crate::Replica::appoint`]).
    pub fn appoint(&self, appointment: Option<Appointment>) {
        self.appointment.store(appointment.map_or(0, Appointment::word), Ordering::Release);
    }

    /// Rule 1 of leased reads (`docs/protocols/lease-reads.md`): whether this replica may take
    /// up a leadership, or keep `term`, the one under way. Always where leaders are elected;
    /// where appointed, only while the appointment names `me`, under the admission `term`
    /// started under. Also returns the appointment word read, for [`Shared::start_term`].
    pub fn may_lead_appointed(&self, me: NodeId, term: Option<Term>) -> (bool, u64) {
        if self.leaders == Leaders::Elected {
            return (true, 0);
        }
        let word = self.appointment.load(Ordering::Acquire);
        let term_word = term.map(|t| t.appointment.map_or(0, |a| a.word()));
        (may_lead_appointed(me, word, term_word), word)
    }

    /// Starts the leadership numbered `serial` under the appointment word `appointment` (the
    /// one [`Shared::may_lead_appointed`] allowed it under) and publishes it.
    pub fn start_term(&self, serial: u64, appointment: u64) -> Term {
        let term = Term { appointment: Appointment::from_word(appointment), serial };
        self.set_term(Some(term));
        term
    }

    /// Publishes the leadership under way (`None`: not leading). Only the replication plane
    /// calls it, and only when it changed.
    pub fn set_term(&self, term: Option<Term>) {
        self.term_serial.store(0, Ordering::Release);
        if let Some(t) = term {
            self.term_appointment.store(t.appointment.map_or(0, |a| a.word()), Ordering::Release);
            self.term_serial.store(t.serial, Ordering::Release);
        }
    }

    pub fn status(&self, me: NodeId) -> crate::ReplicaStatus {
        let ids = &self.ids;
        crate::ReplicaStatus {
            me,
            leader: self.leader(),
            fuo: self.progress.fuo.load(Ordering::Acquire),
            commits: self.progress.commits.load(Ordering::Relaxed),
            aborts: self.stats.aborts.load(Ordering::Relaxed),
            leader_changes: self.stats.leader_changes.load(Ordering::Relaxed),
            permission_switches: self.stats.permission_switches.load(Ordering::Relaxed),
            slow_permission_switches: self.stats.slow_permission_switches.load(Ordering::Relaxed),
            heartbeat_on: self.heartbeat_on.load(Ordering::Acquire),
            eligible: self.eligible.load(Ordering::Acquire),
            recovering: self.recovering.load(Ordering::Acquire),
            elected_at_ns: self.probe.elected_at_ns.load(Ordering::Acquire).checked_sub(1),
            permitted_at_ns: self.probe.permitted_at_ns.load(Ordering::Acquire).checked_sub(1),
            phases_entered_at_ns: Phase::ALL
                .iter()
                .zip(&self.probe.phase_entered_at_ns)
                .filter_map(|(phase, at)| {
                    at.load(Ordering::Acquire).checked_sub(1).map(|ns| (*phase, ns))
                })
                .collect(),
            phases_busy_ns: Phase::ALL
                .iter()
                .zip(self.probe.phase_busy_ns.iter().zip(&self.probe.phase_polls))
                .filter_map(|(phase, (ns, polls))| {
                    let polls = polls.load(Ordering::Relaxed);
                    (polls > 0).then(|| (*phase, ns.load(Ordering::Relaxed), polls))
                })
                .collect(),
            velos_steps_at_ns: crate::VelosStep::ALL
                .iter()
                .zip(&self.probe.velos_step_at_ns)
                .filter_map(|(step, at)| {
                    at.load(Ordering::Acquire).checked_sub(1).map(|ns| (*step, ns))
                })
                .collect(),
            velos_busy_ns: (
                self.probe.velos_busy_ns.load(Ordering::Relaxed),
                self.probe.velos_polls.load(Ordering::Relaxed),
            ),
            setup_polls: self.probe.setup_trace.polls(),
            ready_at_ns: self.probe.ready_at_ns.load(Ordering::Acquire).checked_sub(1),
            last_abort: *self.stats.last_abort.lock().unwrap_or_else(|p| p.into_inner()),
            confirmed: ids_of(ids, self.confirmed_mask.load(Ordering::Acquire)),
            members: ids_of(ids, self.members.load(Ordering::Acquire)),
            removed: self.removed.load(Ordering::Acquire),
            scores: ids
                .iter()
                .zip(&self.peers.scores)
                .filter_map(|(&id, s)| {
                    let score = s.load(Ordering::Relaxed);
                    (score != SCORE_NONE).then_some((id, score))
                })
                .collect(),
            log_holder: self
                .log_holder
                .load(Ordering::Acquire)
                .checked_sub(1)
                .map(|id| NodeId(id as u16)),
            leaderships: self.stats.leaderships.load(Ordering::Relaxed),
            snapshots_served: self.transfer.snapshots_served.load(Ordering::Relaxed),
            snapshots_installed: self.transfer.snapshots_installed.load(Ordering::Relaxed),
            state_transfer_error: self
                .transfer
                .state_transfer_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            failure: self.failure.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            other_configuration: ids_of(ids, self.peers.config_other.load(Ordering::Acquire)),
            restarted_without_rejoin: ids_of(ids, self.peers.refused.load(Ordering::Acquire)),
        }
    }

    /// Whether this replica still takes part: neither removed (§5.4) nor refused as restarted
    /// without rejoining.
    pub fn takes_part(&self) -> bool {
        !self.removed.load(Ordering::Acquire) && !self.refused.load(Ordering::Acquire)
    }

    /// Whether the replica at `pos` is a member, as far as this replica applied.
    pub fn is_member(&self, pos: usize) -> bool {
        self.members.load(Ordering::Acquire) >> pos & 1 != 0
    }

    /// Whether the replica at `pos` was a member and has been removed, as far as this replica
    /// applied.
    pub fn is_removed(&self, pos: usize) -> bool {
        let ever = self.ever_members.load(Ordering::Acquire);
        (ever & !self.members.load(Ordering::Acquire)) >> pos & 1 != 0
    }

    /// The replayer applied up to configuration `members`.
    pub fn set_members(&self, members: u64) {
        self.ever_members.fetch_or(members, Ordering::AcqRel);
        self.members.store(members, Ordering::Release);
    }

    /// Sets `transfer.replayer_stuck`, storing only when it changes (a follower's replication
    /// plane says so on every poll that applies something).
    pub fn set_replayer_stuck(&self, stuck: bool) {
        if self.transfer.replayer_stuck.load(Ordering::Relaxed) != stuck {
            self.transfer.replayer_stuck.store(stuck, Ordering::Release);
        }
    }

    /// Records what went wrong in a state transfer, for status.
    pub fn transfer_failed(&self, why: String) {
        *self.transfer.state_transfer_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }

    /// The replicas the failure detector considers failed, as a mask of positions; none until
    /// the background plane has published its view (`me_bit`, ours, is always set in it).
    pub fn suspected(&self, me_bit: u64) -> u64 {
        let alive = self.peers.alive_mask.load(Ordering::Acquire);
        if alive & me_bit == 0 {
            0
        } else {
            !alive
        }
    }

    pub fn leader(&self) -> Option<NodeId> {
        match self.leader.load(Ordering::Acquire) {
            NO_LEADER => None,
            id => Some(NodeId(id as u16)),
        }
    }

    /// Returns whether the leader changed. `me` and `now_ns` date this replica's election.
    /// Only the background thread calls it.
    pub fn set_leader(&self, leader: Option<NodeId>, me: NodeId, now_ns: u64) -> bool {
        let word = leader.map_or(NO_LEADER, |l| u32::from(l.0));
        if self.leader.load(Ordering::Acquire) == word {
            return false;
        }
        // Dated before it is published: whoever sees us elected sees when.
        let elected = if leader == Some(me) { now_ns + 1 } else { 0 };
        self.probe.elected_at_ns.store(elected, Ordering::Release);
        self.leader.store(word, Ordering::Release);
        self.stats.leader_changes.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// The replicas of `mask` (by position in `ids`) as a list for a log event: "0,1,2".
pub(crate) fn ids_text(ids: &[NodeId], mask: u64) -> String {
    let ids: Vec<String> = ids_of(ids, mask).iter().map(|id| id.0.to_string()).collect();
    ids.join(",")
}

/// The guard of the replica's own log: the leader engine writes the consensus part of its own
/// log only while its permission manager grants it access, exactly as a remote leader writes only
/// while its connection allows it. Revoking is a barrier: once [`OwnLogGuard::revoke`] returns,
/// no guarded write of ours lands.
///
/// Both sides use sequentially consistent accesses (Dekker's pattern): the writer stores
/// `in_flight` then loads `granted`; the revoker stores `granted` then loads `in_flight`. In the
/// single total order of these four accesses, either the writer sees the revoke and does not
/// write, or the revoker sees the writer in flight and waits for it. The two threads are in one
/// process, so a stopped writer stops its revoker too; a copy is at most one slot.
///
/// Rejected: a writer entering with a compiler fence only, the revoker issuing a private
/// expedited `membarrier(2)` (no locked instruction on a proposal's path). It held on the
/// hardware, but it was half of a lever whose other half, the shared-memory fabric's guard, did
/// not (`docs/fabric.md`), and alone its gain was never measured.
pub(crate) struct OwnLogGuard {
    granted: AtomicBool,
    in_flight: AtomicBool,
}

impl OwnLogGuard {
    fn new() -> OwnLogGuard {
        OwnLogGuard { granted: AtomicBool::new(false), in_flight: AtomicBool::new(false) }
    }

    /// Runs `write` if access is granted; returns whether it ran.
    pub fn write(&self, write: impl FnOnce()) -> bool {
        self.in_flight.store(true, Ordering::SeqCst);
        let granted = self.granted.load(Ordering::SeqCst);
        if granted {
            write();
        }
        self.in_flight.store(false, Ordering::Release);
        granted
    }

    /// Whether our own leader may write our log now.
    pub fn is_granted(&self) -> bool {
        self.granted.load(Ordering::SeqCst)
    }

    pub fn grant(&self) {
        self.granted.store(true, Ordering::SeqCst);
    }

    /// Takes access away and waits until no write of ours is in flight.
    pub fn revoke(&self) {
        self.granted.store(false, Ordering::SeqCst);
        let mut spins: u32 = 0;
        while self.in_flight.load(Ordering::SeqCst) {
            spins = spins.wrapping_add(1);
            if spins % 64 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Both threads arrive, then both leave. (Not pinned: this crate has no unsafe code, and two
    /// spinning threads get two CPUs where there are two.)
    fn meet(mine: &AtomicU64, theirs: &AtomicU64, round: u64) {
        mine.store(round, Ordering::SeqCst);
        while theirs.load(Ordering::SeqCst) < round {
            std::hint::spin_loop();
        }
    }

    /// [`OwnLogGuard::write`] with the writer's locked store replaced by a plain one and a
    /// compiler fence: the misuse the test below must be able to catch.
    fn write_unfenced(guard: &OwnLogGuard, write: impl FnOnce()) {
        guard.in_flight.store(true, Ordering::Relaxed);
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        if guard.granted.load(Ordering::Acquire) {
            write();
        }
        guard.in_flight.store(false, Ordering::Release);
    }

    /// Rounds of a writer writing through a fresh granted guard while the revoker revokes it
    /// (the writer unfenced with `unfenced`); returns the rounds run and those in which the
    /// writer, inside its guarded write, saw the revocation already returned (what the guard
    /// forbids). Stops once `enough` were seen.
    fn rounds(unfenced: bool, rounds: usize, enough: usize) -> (usize, usize) {
        const CHUNK: usize = 20_000;
        let (mut run, mut forbidden) = (0, 0);
        while run < rounds && forbidden < enough {
            let guards: Arc<Vec<OwnLogGuard>> = Arc::new(
                (0..CHUNK)
                    .map(|_| {
                        let g = OwnLogGuard::new();
                        g.grant();
                        g
                    })
                    .collect(),
            );
            let (w_at, r_at, revoked) = (
                Arc::new(AtomicU64::new(0)),
                Arc::new(AtomicU64::new(0)),
                Arc::new(AtomicU64::new(0)),
            );
            let writer = std::thread::spawn({
                let (guards, w_at, r_at, revoked) =
                    (guards.clone(), w_at.clone(), r_at.clone(), revoked.clone());
                move || {
                    let mut seen = 0;
                    for (i, g) in guards.iter().enumerate() {
                        let round = i as u64 + 1;
                        meet(&w_at, &r_at, round);
                        let body = || {
                            // Long enough for an unhindered revocation to return meanwhile.
                            for _ in 0..2_000 {
                                std::hint::spin_loop();
                            }
                            if revoked.load(Ordering::SeqCst) >= round {
                                seen += 1;
                            }
                        };
                        if unfenced {
                            write_unfenced(g, body);
                        } else {
                            g.write(body);
                        }
                    }
                    seen
                }
            });
            for (i, g) in guards.iter().enumerate() {
                let round = i as u64 + 1;
                meet(&r_at, &w_at, round);
                g.revoke();
                revoked.store(round, Ordering::SeqCst);
            }
            forbidden += writer.join().expect("writer thread");
            run += CHUNK;
        }
        (run, forbidden)
    }

    /// The own-log guard's barrier on this machine's hardware, and the misuse of a writer
    /// entering without its locked store, which must show at least once so that the check is
    /// known to be able to fail (with two CPUs; with one it cannot reorder).
    #[test]
    fn the_own_log_guard_is_a_barrier() {
        let (run, bad) = rounds(false, 40_000, 1);
        assert_eq!(bad, 0, "a write went on after the revocation returned ({run} rounds)");
        if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
            return;
        }
        let (run, bad) = rounds(true, 2_000_000, 3);
        println!("writer without its locked store: {bad} forbidden outcomes in {run} rounds");
        assert!(bad > 0, "in {run} rounds the misuse never showed: this test could not fail");
    }
}
