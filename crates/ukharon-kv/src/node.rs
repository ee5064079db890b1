//! A uKharon-KV node as a thread: the [`KvDriver`] polled on the host's monotonic clock, the
//! views its [`Membership`] learns, `Active` read from the lease the membership thread
//! publishes, and clients' requests from a channel ([`KvNode::submit`]), each answered on a
//! channel of its own.

use crate::driver::{KvDriver, KvEvent, KvSettings, RoleName};
use mu_fabric::Fabric;
use mu_kv::{Reply, Request};
use mu_membership::clock::now_ns;
use mu_membership::{Membership, Polling};
use mu_ukharon::view::View;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What a client is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvAnswer {
    Reply(Reply),
    /// Not answered (the view changed, the lease ran out, the node is stopping): send it again,
    /// with the same sequence number.
    Retry(String),
    /// Not the primary; the view names `primary`.
    NotPrimary(Option<u16>),
    /// Never taken; a retry would fail the same.
    Refused(String),
}

/// A node's state, for status reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvNodeStatus {
    pub node: u16,
    pub role: RoleName,
    pub epoch: Option<u64>,
    pub primary: Option<u16>,
    /// Records applied (a backup) or executed (the primary).
    pub position: u64,
    pub keys: usize,
    /// The store's digest (map and client sessions).
    pub digest: Option<u64>,
    pub problem: Option<String>,
}

enum Job {
    Request(Request, Sender<KvAnswer>),
    Status(Sender<KvNodeStatus>),
}

/// See the module docs. Dropping it stops the thread; the membership handle goes with it, so
/// the node stops renewing its lease and the group removes it.
pub struct KvNode {
    jobs: Sender<Job>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    node: u16,
}

/// How many requests one round takes from the channel at most.
const JOBS_PER_ROUND: usize = 64;

impl KvNode {
    /// Starts the node on `data` (its data fabric node) with `membership` (its membership
    /// node, with the same id) and `views`, every view it learnt from the one that admitted
    /// it ([`Membership::join_watching`]): a node that came in with the group's first members
    /// knows from that view that the empty store it starts is the whole state.
    pub fn start<F: Fabric>(
        data: F,
        (membership, views): (Membership, Receiver<View>),
        settings: KvSettings,
        polling: Polling,
    ) -> Result<KvNode, String> {
        let node = membership.node();
        if u32::from(data.node().0) != u32::from(node) + u32::from(settings.data_node_offset) {
            return Err(format!(
                "the data node is {}, the membership node {node}: the data node must be the \
                 membership node plus data_node_offset ({})",
                data.node().0,
                settings.data_node_offset
            ));
        }
        let driver = KvDriver::new(data, settings)?;
        let (jobs, rx) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("ukharon-kv-{node}"))
                .spawn(move || run(driver, (membership, views), rx, &stop, polling))
                .map_err(|e| format!("starting the thread: {e}"))?
        };
        Ok(KvNode { jobs, stop, thread: Some(thread), node })
    }

    pub fn node(&self) -> u16 {
        self.node
    }

    /// Hands `request` to the node; the answer comes on `answer`.
    pub fn submit(&self, request: Request, answer: Sender<KvAnswer>) {
        if let Err(e) = self.jobs.send(Job::Request(request, answer)) {
            if let Job::Request(_, answer) = e.0 {
                let _ = answer.send(KvAnswer::Retry("the node has stopped".into()));
            }
        }
    }

    /// Sends `request` and waits for its answer.
    pub fn call(&self, request: Request) -> KvAnswer {
        let (tx, rx) = channel();
        self.submit(request, tx);
        rx.recv().unwrap_or_else(|_| KvAnswer::Retry("the node has stopped".into()))
    }

    /// The node's state, taken by its thread between two rounds.
    pub fn status(&self) -> Option<KvNodeStatus> {
        let (tx, rx) = channel();
        self.jobs.send(Job::Status(tx)).ok()?;
        rx.recv().ok()
    }
}

impl Drop for KvNode {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run<F: Fabric>(
    mut driver: KvDriver<F, Sender<KvAnswer>>,
    (membership, views): (Membership, Receiver<View>),
    jobs: Receiver<Job>,
    stop: &AtomicBool,
    polling: Polling,
) {
    let published = membership.published();
    let active = move |epoch: u64| published.active_at(epoch, now_ns());
    // The primary last asked for in place of this node (named without a whole state), and
    // in which view.
    let mut asked = None;
    // A job that woke the idle thread up, taken first in the next round.
    let mut woken_by: Option<Job> = None;
    while !stop.load(Ordering::Acquire) {
        while let Ok(view) = views.try_recv() {
            driver.learn(&view);
        }
        let mut idle = true;
        for _ in 0..JOBS_PER_ROUND {
            let job = match woken_by.take() {
                Some(job) => Ok(job),
                None => jobs.try_recv(),
            };
            match job {
                Ok(Job::Request(request, answer)) => {
                    idle = false;
                    let serving = driver.epoch().is_some_and(&active);
                    driver.request(&request, answer, serving);
                }
                Ok(Job::Status(tx)) => {
                    let _ = tx.send(status_of(&driver));
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return,
            }
        }
        driver.poll(now_ns(), &active);
        if let Some(next) = driver.wants_primary() {
            let ask = (driver.epoch(), next);
            if asked != Some(ask) {
                asked = Some(ask);
                membership.ask_primary(next);
            }
        }
        for event in driver.drain_events() {
            idle = false;
            answer(event);
        }
        if idle {
            match wait_for_job(&jobs, polling) {
                Ok(job) => woken_by = job,
                Err(()) => return,
            }
        }
    }
    // Stopping: whatever still waits is dropped, and its client told to send it again.
    drop(membership);
}

/// An idle round's pause: a request wakes the thread at once rather than wait out the gap
/// (one client sending a request at a time always found the thread asleep: a GET took the
/// whole gap, 200 µs, against 10 µs for the bare store). Polling goes on every gap for what
/// the driver does on its own (views, scans, snapshots). `Err`: the node's handle is gone.
fn wait_for_job(jobs: &Receiver<Job>, polling: Polling) -> Result<Option<Job>, ()> {
    match polling {
        Polling::Spin => {
            std::hint::spin_loop();
            Ok(None)
        }
        Polling::Sleep { gap_ns } => match jobs.recv_timeout(Duration::from_nanos(gap_ns)) {
            Ok(job) => Ok(Some(job)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(()),
        },
    }
}

fn answer(event: KvEvent<Sender<KvAnswer>>) {
    let (token, answer) = match event {
        KvEvent::Answer { token, reply } => (token, KvAnswer::Reply(reply)),
        KvEvent::Drop { token } => (
            token,
            KvAnswer::Retry("not answered in this view (it changed, or its lease ran out)".into()),
        ),
        KvEvent::NotPrimary { token, primary } => (token, KvAnswer::NotPrimary(primary)),
        KvEvent::Refused { token, why } => (token, KvAnswer::Refused(why)),
    };
    let _ = token.send(answer);
}

fn status_of<F: Fabric, T>(driver: &KvDriver<F, T>) -> KvNodeStatus {
    KvNodeStatus {
        node: driver.node(),
        role: driver.role(),
        epoch: driver.epoch(),
        primary: driver.primary(),
        position: driver.position(),
        keys: driver.store().map_or(0, |s| s.keys_count()),
        digest: driver.store().map(|s| s.digest()),
        problem: driver.problem().map(str::to_string),
    }
}
