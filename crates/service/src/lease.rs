//! A Mu or Velos replica that answers under uKharon's leases (`reads = "lease"`,
//! `docs/protocols/lease-reads.md`): its leader is appointed from the membership's views
//! ([`Appointer`], rule 1), its answers go out only while the view naming it is active (rule
//! 2), and a GET is answered from its own store when the lease rules allow it (rule 3),
//! through the log otherwise.

use crate::app::App;
use crate::backend::{Backend, Pending, ReplicaBackend};
use crate::report::ReplicaReport;
use crate::wire::ServerMessage;
use mu_fabric::NodeId;
use mu_kv::{Op, Reply};
use mu_membership::clock::now_ns;
use mu_membership::published::PublishedLease;
use mu_membership::Membership;
use mu_replica::{next_appointment, Appointment, LeaseGate, Replica};
use mu_ukharon::view::View;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the appointer looks whether the view naming this replica became active here (a
/// first lease starts after the view's wait).
const PENDING_POLL: Duration = Duration::from_micros(100);
/// How long the appointer waits for a view when none is pending (it then checks for a stop).
const IDLE_WAIT: Duration = Duration::from_millis(20);

/// The latest view as the rules need it: its epoch and whom it appoints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Named {
    pub epoch: u64,
    pub appointed: Option<Appointment>,
    /// This replica is a member of the view.
    pub member: bool,
}

impl Named {
    /// What `view` names, seen from replica `me`: its primary's node is the replica of the
    /// same id.
    pub fn of(view: &View, me: u16) -> Named {
        let appointed = view.primary.and_then(|p| {
            let uid = view.uid_of(p)?;
            Appointment::from_unique_id(NodeId(p), uid)
        });
        Named { epoch: view.epoch, appointed, member: view.uid_of(me).is_some() }
    }
}

/// What the backend and the appointer share.
struct Views {
    named: Mutex<Option<Named>>,
    lease: Arc<PublishedLease>,
    stop: AtomicBool,
}

impl Views {
    fn named(&self) -> Option<Named> {
        *self.named.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the latest view is active here now.
    fn active(&self, named: Option<Named>) -> bool {
        named.is_some_and(|n| self.lease.active_at(n.epoch, now_ns()))
    }
}

/// Turns the membership's views into the replica's appointments (rule 1), on a thread of its
/// own: another replica at once, this one once the view naming it is active here.
pub struct Appointer {
    views: Arc<Views>,
    thread: Option<JoinHandle<()>>,
}

impl Appointer {
    fn start(
        replica: Arc<Replica>,
        membership: Arc<Membership>,
        views: Arc<Views>,
        rx: Receiver<View>,
    ) -> Result<Appointer, String> {
        let shared = views.clone();
        let thread = std::thread::Builder::new()
            .name("mu-appointer".into())
            .spawn(move || appoint_from_views(&replica, &membership, &shared, &rx))
            .map_err(|e| format!("starting the appointer: {e}"))?;
        Ok(Appointer { views, thread: Some(thread) })
    }
}

impl Drop for Appointer {
    fn drop(&mut self) {
        self.views.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn appoint_from_views(
    replica: &Replica,
    membership: &Membership,
    views: &Views,
    rx: &Receiver<View>,
) {
    let me = replica.id();
    let mut current: Option<Option<Appointment>> = None;
    let mut pending = false;
    // The latest view, and the one in which this replica last handed the role on.
    let mut latest_view: Option<View> = None;
    let mut handed_on: Option<u64> = None;
    while !views.stop.load(Ordering::Acquire) {
        let wait = if pending { PENDING_POLL } else { IDLE_WAIT };
        let mut latest = match rx.recv_timeout(wait) {
            Ok(view) => Some(view),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        while let Ok(view) = rx.try_recv() {
            latest = Some(view);
        }
        if let Some(view) = latest {
            let named = Named::of(&view, me.0);
            *views.named.lock().unwrap_or_else(|p| p.into_inner()) = Some(named);
            latest_view = Some(view);
        }
        if let Some(view) = latest_view.as_ref().filter(|v| v.primary == Some(me.0)) {
            if handed_on != Some(view.epoch) && hand_on_if_standing_aside(replica, membership, view)
            {
                handed_on = Some(view.epoch);
            }
        }
        let named = views.named();
        let Some(n) = named else { continue };
        match next_appointment(me, n.appointed, views.active(named)) {
            None => pending = true,
            Some(a) => {
                pending = false;
                if current != Some(a) {
                    replica.appoint(a);
                    current = Some(a);
                }
            }
        }
    }
}

/// A replica named primary that does not stand for leadership asks for another member in
/// its place ([`mu_replica::hand_on`]); returns whether it asked.
fn hand_on_if_standing_aside(replica: &Replica, membership: &Membership, view: &View) -> bool {
    let members: Vec<u16> = view.nodes().collect();
    let eligible = replica.eligible();
    let Some(next) = mu_replica::hand_on(replica.id().0, &members, eligible) else {
        return false;
    };
    tracing::info!(
        replica = replica.id().0,
        epoch = view.epoch,
        next,
        "named primary while standing aside (not eligible): asking for another member"
    );
    membership.ask_primary(next);
    true
}

/// Counts for status and the benchmarks.
#[derive(Debug, Default)]
pub struct LeaseCounts {
    /// GETs answered from the local store.
    pub local_reads: AtomicU64,
    /// Answers held back because the view naming this replica was not active after the
    /// request was applied (rule 2): the client retries.
    pub gated: AtomicU64,
}

/// See the module docs.
pub struct LeasedBackend {
    inner: ReplicaBackend,
    views: Arc<Views>,
    gate: Mutex<LeaseGate>,
    pub counts: LeaseCounts,
    // Dropped in this order: the appointer stops before the membership does.
    _appointer: Appointer,
    _membership: Arc<Membership>,
}

impl LeasedBackend {
    /// A backend for `inner`'s replica (started with appointed leaders), with `membership`
    /// this replica's node of the group and `views` every view it learns from its admission on
    /// ([`Membership::join_watching`]).
    pub fn start(
        inner: ReplicaBackend,
        membership: Membership,
        views: Receiver<View>,
    ) -> Result<LeasedBackend, String> {
        let shared = Arc::new(Views {
            named: Mutex::new(membership.latest().map(|v| Named::of(&v, membership.node()))),
            lease: membership.published(),
            stop: AtomicBool::new(false),
        });
        let membership = Arc::new(membership);
        let appointer =
            Appointer::start(inner.replica.clone(), membership.clone(), shared.clone(), views)?;
        Ok(LeasedBackend {
            inner,
            views: shared,
            gate: Mutex::new(LeaseGate::new()),
            counts: LeaseCounts::default(),
            _appointer: appointer,
            _membership: membership,
        })
    }

    fn gate(&self) -> MutexGuard<'_, LeaseGate> {
        self.gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rule 2 for this replica now.
    fn may_answer(&self) -> bool {
        let named = self.views.named();
        let appointed = named.and_then(|n| n.appointed);
        LeaseGate::may_answer(self.inner.replica.id(), appointed, self.views.active(named))
    }

    /// Rule 3: the GETs of `batch` answered from the local store, by place in the batch, if
    /// the lease allows it before and after reading them; none otherwise.
    fn read_locally(&self, batch: &[Pending]) -> Vec<Option<ServerMessage>> {
        let mut local: Vec<Option<ServerMessage>> = vec![None; batch.len()];
        let named = self.views.named();
        let appointed = named.and_then(|n| n.appointed);
        let term = self.inner.replica.term();
        if !self.gate().may_read(term, appointed, self.views.active(named)) {
            return local;
        }
        {
            // Under the lock the applier takes: the store read is a prefix of the log.
            let m = self.inner.machine.lock();
            for (slot, p) in local.iter_mut().zip(batch) {
                let get = p.request.kv().and_then(|r| match &r.op {
                    Op::Get { key } => Some(key),
                    _ => None,
                });
                if let (Some(key), Some(store)) = (get, m.state.kv()) {
                    let value = store.get(key).map(<[u8]>::to_vec);
                    *slot = Some(ServerMessage::Reply(Reply::Value(value)));
                }
            }
        }
        // The second check, after the read: the same view, still active, the same term.
        let again = self.views.named();
        let still = again == named && self.may_answer() && self.inner.replica.term() == term;
        if !still {
            local.iter_mut().for_each(|s| *s = None);
        }
        local
    }
}

impl Backend for LeasedBackend {
    fn node(&self) -> u16 {
        self.inner.node()
    }

    fn app(&self) -> App {
        self.inner.app()
    }

    fn serve(&self, batch: &[Pending], answers: &mut Vec<ServerMessage>) {
        let local = self.read_locally(batch);
        let reads = local.iter().filter(|l| l.is_some()).count() as u64;
        self.counts.local_reads.fetch_add(reads, Ordering::Relaxed);
        // Copied only where some of the batch was read locally (a batch of writes, the
        // usual case, goes through as it came).
        let rest: Option<Vec<Pending>> = (reads > 0).then(|| {
            let left = batch.iter().zip(&local).filter(|(_, l)| l.is_none());
            left.map(|(p, _)| Pending { request: p.request.clone(), bytes: p.bytes.clone() })
                .collect()
        });
        let rest = rest.as_deref().unwrap_or(batch);
        let mut logged = Vec::with_capacity(rest.len());
        if !rest.is_empty() {
            let before = self.inner.replica.term();
            self.inner.serve(rest, &mut logged);
            let after = self.inner.replica.term();
            if logged.iter().any(ServerMessage::is_answer) {
                self.gate().applied_own(before, after);
            }
            gate_answers(&mut logged, self.may_answer(), &self.counts.gated);
        }
        let mut logged = logged.into_iter();
        for l in local {
            answers.push(l.unwrap_or_else(|| logged.next().expect("an answer per request")));
        }
    }

    /// The replica's report, with the view it serves under: `leader` while its answers may go
    /// out (appointed, and the view naming it active here), `follower` in the view otherwise,
    /// `outside` while no view it knows has it.
    fn report(&self, started: Instant) -> ReplicaReport {
        let mut report = self.inner.report(started);
        let named = self.views.named();
        report.epoch = named.map(|n| n.epoch);
        let role = match named {
            _ if self.may_answer() => "leader",
            Some(n) if n.member => "follower",
            _ => "outside",
        };
        report.role = Some(role.into());
        report.local_reads = Some(self.counts.local_reads.load(Ordering::Relaxed));
        report
    }
}

/// Rule 2 on the answers of requests that went through the log: replies go out only where
/// `may_answer` (the view naming this replica was active after they were applied); otherwise
/// they become retries, with the same sequence number, which the store applies once.
fn gate_answers(answers: &mut [ServerMessage], may_answer: bool, gated: &AtomicU64) {
    if may_answer {
        return;
    }
    for a in answers.iter_mut() {
        if a.is_answer() {
            *a = ServerMessage::Retry(
                "this replica's lease was not active after the request was applied; send it \
                 again"
                    .into(),
            );
            gated.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mu_kv::Reply;

    #[test]
    fn answers_without_an_active_lease_become_retries() {
        let gated = AtomicU64::new(0);
        let mut answers = vec![
            ServerMessage::Reply(Reply::Stored),
            ServerMessage::NotLeader { leader: Some(2) },
            ServerMessage::Refused("too large".into()),
        ];
        gate_answers(&mut answers, true, &gated);
        assert!(matches!(answers[0], ServerMessage::Reply(_)));
        gate_answers(&mut answers, false, &gated);
        assert!(matches!(answers[0], ServerMessage::Retry(_)));
        assert!(matches!(answers[1], ServerMessage::NotLeader { leader: Some(2) }));
        assert!(matches!(answers[2], ServerMessage::Refused(_)));
        assert_eq!(gated.load(Ordering::Relaxed), 1);
    }
}
