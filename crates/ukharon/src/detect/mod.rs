//! Failure detection, three levels (§4.1–§4.2), as state machines the node core feeds: it moves
//! the bytes (reads, writes, the fabric's death signal), reads the clock and hands both here.
//!
//! * [`crash`]: userspace failures, without a timeout. The paper's "deadbeat" is a kernel patch
//!   that multicasts a notification when a process dies; here the fabric's kernel-kept death
//!   signal (never true for a live peer) is polled per watched peer.
//! * [`ring`]: kernel failures. Members form a ring in the view's order; each reads its
//!   successor's heartbeat counter, a read issued a fixed gap after the previous one completed,
//!   and reports the successor when it reads the same value twice.
//! * [`beat`]: catastrophic failures. Every node writes heartbeats into every member's board and
//!   watches those it receives; one silent for the timeout is reported as a lost link.
//! * [`graph`]: the coordinator leader's side: the connectivity graph from every member's
//!   reports, and the next view's members, the largest clique that contains the leader.
//!
//! All three detectors report the same way ([`Report`], [`Reports`]): "the first two detectors
//! broadcast failure notifications \[...\] Dropping these notifications is safe, as uKharon-Core
//! rebroadcasts a failure notification until a new membership excludes the failed node" (§4.2).
//! A report names the suspect's unique id, so a report about an old incarnation never excludes a
//! node that rejoined under a new one, and the reporter's epoch, so the leader ignores reports
//! made against another view. A report travels as [`REPORT_BYTES`] checksummed bytes
//! ([`Report::encode`]), written into the reporter's mailbox at the leader.

pub mod beat;
pub mod crash;
pub mod graph;
pub mod ring;
#[cfg(test)]
mod scenarios;

use crate::view::{Member, View};
use thiserror::Error;

/// What a report says about its suspect, by the detector that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// The fabric's death signal: the suspect's process is gone (no timeout, no false positive).
    Crash,
    /// The suspect's heartbeat counter read the same twice in a row (a kernel-level failure).
    Ring,
    /// The reporter has not heard the suspect's broadcast heartbeat for the timeout.
    Link,
    /// The reporter hears the suspect again: the link of an earlier `Link` report is back.
    LinkBack,
}

/// One report, as the node core sends it to the coordinator leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Report {
    pub reporter: Member,
    pub suspect: Member,
    pub level: Level,
    /// The epoch of the reporter's view when this copy was sent.
    pub reporter_epoch: u64,
}

const REPORT_MAGIC: u32 = u32::from_le_bytes(*b"UKrp");
/// The version of a report's bytes.
pub const REPORT_VERSION: u16 = 1;
/// The length of a report's bytes ([`Report::encode`]).
pub const REPORT_BYTES: usize = 48;
const REPORT_CHECKSUM_SEED: u64 = 0x756b_6861_726f_6e52;

/// Why bytes are not a report.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ReportError {
    #[error("{len} bytes are too few for a report ({REPORT_BYTES} needed)")]
    TooShort { len: usize },
    #[error("not a report (magic {found:#010x})")]
    Magic { found: u32 },
    #[error("report version {found}, this build reads {REPORT_VERSION}")]
    Version { found: u16 },
    #[error("report checksum mismatch: torn or corrupted bytes")]
    Checksum,
    #[error("unknown report level {found}")]
    Level { found: u16 },
}

impl Level {
    fn code(self) -> u16 {
        match self {
            Level::Crash => 1,
            Level::Ring => 2,
            Level::Link => 3,
            Level::LinkBack => 4,
        }
    }

    fn from_code(code: u16) -> Option<Level> {
        [Level::Crash, Level::Ring, Level::Link, Level::LinkBack]
            .into_iter()
            .find(|l| l.code() == code)
    }
}

impl Report {
    /// Appends the report's [`REPORT_BYTES`] bytes (little endian, checksum last) to `out`: what
    /// a node writes into its mailbox at the leader.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&REPORT_MAGIC.to_le_bytes());
        out.extend_from_slice(&REPORT_VERSION.to_le_bytes());
        out.extend_from_slice(&self.level.code().to_le_bytes());
        out.extend_from_slice(&self.reporter.node.to_le_bytes());
        out.extend_from_slice(&self.suspect.node.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        for word in [self.reporter.uid, self.suspect.uid, self.reporter_epoch] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        let sum = mu_log::digest(REPORT_CHECKSUM_SEED, &out[start..]);
        out.extend_from_slice(&sum.to_le_bytes());
        debug_assert_eq!(out.len() - start, REPORT_BYTES);
    }

    /// The report whose bytes start `bytes` (bytes after it are ignored), checked.
    pub fn decode(bytes: &[u8]) -> Result<Report, ReportError> {
        if bytes.len() < REPORT_BYTES {
            return Err(ReportError::TooShort { len: bytes.len() });
        }
        let half = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let magic = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        if magic != REPORT_MAGIC {
            return Err(ReportError::Magic { found: magic });
        }
        if half(4) != REPORT_VERSION {
            return Err(ReportError::Version { found: half(4) });
        }
        if mu_log::digest(REPORT_CHECKSUM_SEED, &bytes[..REPORT_BYTES - 8]) != word(40) {
            return Err(ReportError::Checksum);
        }
        let level = Level::from_code(half(6)).ok_or(ReportError::Level { found: half(6) })?;
        Ok(Report {
            reporter: Member { node: half(8), uid: word(16) },
            suspect: Member { node: half(10), uid: word(24) },
            level,
            reporter_epoch: word(32),
        })
    }
}

/// What the node core does alike with every detector: hand it each new view, and send what its
/// reports say is due.
pub trait Detector {
    /// A new view (an older or the same one is ignored).
    fn on_view(&mut self, view: &View, now_ns: u64);
    /// The detector's reports: [`Reports::due`] says what to send.
    fn reports(&mut self) -> &mut Reports;
}

/// One report waiting to be (re)sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    suspect: Member,
    level: Level,
    due_ns: u64,
    /// Sent once and dropped (a `LinkBack`), rather than repeated.
    once: bool,
}

/// The reports one detector of one node is making: what to (re)send at `now_ns`. A raised
/// report is sent at once, then again every `repeat_ns`, until a view excludes its suspect
/// ([`Reports::on_view`]) or its detector withdraws it.
#[derive(Clone, Debug)]
pub struct Reports {
    me: Member,
    epoch: u64,
    repeat_ns: u64,
    pending: Vec<Pending>,
}

impl Reports {
    /// Reports made by `me` while its view has epoch `epoch`.
    pub fn new(me: Member, epoch: u64, repeat_ns: u64) -> Reports {
        Reports { me, epoch, repeat_ns, pending: Vec::new() }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Starts reporting `suspect` at `level`, due at once; a report already raised is left as
    /// it is (its repeat period runs on).
    pub fn raise(&mut self, suspect: Member, level: Level, now_ns: u64) {
        if !self.is_raised(suspect, level) {
            self.pending.push(Pending { suspect, level, due_ns: now_ns, once: false });
        }
    }

    /// Sends one report about `suspect` at `level` at the next [`Reports::due`], not repeated.
    pub fn send_once(&mut self, suspect: Member, level: Level, now_ns: u64) {
        self.pending.retain(|p| !(p.suspect == suspect && p.level == level));
        self.pending.push(Pending { suspect, level, due_ns: now_ns, once: true });
    }

    /// Stops reporting `suspect` at `level`.
    pub fn withdraw(&mut self, suspect: Member, level: Level) {
        self.pending.retain(|p| !(p.suspect == suspect && p.level == level));
    }

    /// Whether a repeated report about `suspect` at `level` is raised.
    pub fn is_raised(&self, suspect: Member, level: Level) -> bool {
        self.pending.iter().any(|p| p.suspect == suspect && p.level == level && !p.once)
    }

    /// A new view (epochs only move forward; an older one is ignored): reports about suspects
    /// it excludes are dropped (a member under another unique id is another node); the others
    /// now carry its epoch and are due at once, since the leader ignored the copies sent
    /// against the old view once it had the new one.
    pub fn on_view(&mut self, view: &View, now_ns: u64) {
        if view.epoch <= self.epoch {
            return;
        }
        self.epoch = view.epoch;
        self.pending.retain(|p| view.contains(p.suspect));
        for p in &mut self.pending {
            p.due_ns = now_ns;
        }
    }

    /// The reports to send at `now_ns`: each repeated one is due again `repeat_ns` later, each
    /// one-off is dropped.
    pub fn due(&mut self, now_ns: u64) -> Vec<Report> {
        let mut out = Vec::new();
        let (me, epoch, repeat_ns) = (self.me, self.epoch, self.repeat_ns);
        self.pending.retain_mut(|p| {
            if p.due_ns > now_ns {
                return true;
            }
            out.push(Report {
                reporter: me,
                suspect: p.suspect,
                level: p.level,
                reporter_epoch: epoch,
            });
            p.due_ns = now_ns.saturating_add(repeat_ns);
            !p.once
        });
        out
    }

    /// When the next report is due, if any is pending.
    pub fn next_due_ns(&self) -> Option<u64> {
        self.pending.iter().map(|p| p.due_ns).min()
    }

    /// The reports pending, in the order they were raised.
    pub fn pending(&self) -> impl Iterator<Item = (Member, Level)> + '_ {
        self.pending.iter().map(|p| (p.suspect, p.level))
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(node: u16, uid: u64) -> Member {
        Member { node, uid }
    }

    fn view(epoch: u64, members: &[Member]) -> View {
        let mut v = View::initial(1, members.to_vec(), None, 20_000);
        v.epoch = epoch;
        v
    }

    /// §4.2 last paragraph: "uKharon-Core rebroadcasts a failure notification until a new
    /// membership excludes the failed node": sent at once, again every repeat period, dropped
    /// by the view that excludes the suspect, kept (with the new epoch, due at once) by a view
    /// that does not.
    #[test]
    fn reports_repeat_until_a_view_excludes_the_suspect() {
        let (me, x, y) = (m(1, 10), m(2, 20), m(3, 30));
        let mut reports = Reports::new(me, 4, 100);
        reports.raise(x, Level::Ring, 1_000);
        reports.raise(y, Level::Link, 1_050);
        let sent = reports.due(1_050);
        assert_eq!(sent.len(), 2);
        assert_eq!(
            sent[0],
            Report { reporter: me, suspect: x, level: Level::Ring, reporter_epoch: 4 }
        );
        assert!(reports.due(1_149).is_empty(), "nothing before the repeat period");
        reports.raise(x, Level::Ring, 1_100);
        assert_eq!(reports.next_due_ns(), Some(1_150), "raising again keeps the period");
        assert_eq!(reports.due(1_150).len(), 2);
        reports.on_view(&view(5, &[me, y]), 1_200);
        let sent = reports.due(1_200);
        assert_eq!(
            sent,
            vec![Report { reporter: me, suspect: y, level: Level::Link, reporter_epoch: 5 }]
        );
        reports.on_view(&view(3, &[me]), 1_300);
        assert_eq!(reports.epoch(), 5, "an older view is ignored");
        assert!(reports.is_raised(y, Level::Link));
    }

    /// §3.1 unique ids: a view in which the suspect's node is back under a new unique id
    /// excludes the suspect; the report about the old incarnation stops.
    #[test]
    fn a_rejoined_node_is_another_suspect() {
        let me = m(1, 10);
        let mut reports = Reports::new(me, 0, 100);
        reports.raise(m(2, 20), Level::Crash, 0);
        reports.on_view(&view(1, &[me, m(2, 21)]), 10);
        assert!(reports.is_empty() && reports.due(10).is_empty());
    }

    /// §4.2's notifications travel here as one-sided writes into mailboxes: a report's bytes
    /// round-trip, and every single-bit change is refused, never read as another report.
    #[test]
    fn reports_round_trip_and_torn_bytes_are_refused() {
        for level in [Level::Crash, Level::Ring, Level::Link, Level::LinkBack] {
            let report =
                Report { reporter: m(3, 77), suspect: m(9, u64::MAX), level, reporter_epoch: 12 };
            let mut bytes = vec![0xEE];
            report.encode(&mut bytes);
            assert_eq!(bytes.len(), 1 + REPORT_BYTES);
            bytes.push(0xAB);
            assert_eq!(Report::decode(&bytes[1..]), Ok(report));
            for bit in 8..REPORT_BYTES * 8 + 8 {
                let mut torn = bytes.clone();
                torn[bit / 8] ^= 1 << (bit % 8);
                assert!(Report::decode(&torn[1..]).is_err(), "bit {bit} flipped still decodes");
            }
            assert_eq!(Report::decode(&bytes[1..40]), Err(ReportError::TooShort { len: 39 }));
        }
        assert_eq!(Report::decode(&[0; 48]), Err(ReportError::Magic { found: 0 }));
    }

    /// A one-off (the catastrophic detector's "the link is back") is sent once, and replaces a
    /// pending one of the same kind; withdrawing stops a repeated report.
    #[test]
    fn one_off_reports_are_sent_once() {
        let (me, x) = (m(1, 10), m(2, 20));
        let mut reports = Reports::new(me, 0, 100);
        reports.raise(x, Level::Link, 0);
        reports.withdraw(x, Level::Link);
        reports.send_once(x, Level::LinkBack, 5);
        assert!(!reports.is_raised(x, Level::LinkBack));
        assert!(reports.due(4).is_empty(), "not due yet, and not lost either");
        assert_eq!(reports.pending().collect::<Vec<_>>(), vec![(x, Level::LinkBack)]);
        assert_eq!(reports.due(5).len(), 1);
        assert!(reports.due(1_000).is_empty() && reports.is_empty());
    }
}
