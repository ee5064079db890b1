//! A member's three failure detectors (§4.2, `mu_ukharon::detect`) together, as the node core
//! drives them: what to read, what to write, and the reports to send to the coordinator leader,
//! packed into one mailbox frame.

use crate::config::MembershipConfig;
use mu_ukharon::detect::beat::{BeatConfig, Beats};
use mu_ukharon::detect::crash::Crashes;
use mu_ukharon::detect::ring::{ReadTicket, Reading, Ring, RingConfig};
use mu_ukharon::detect::{Detector, Report, REPORT_BYTES};
use mu_ukharon::view::{Member, View};

/// The most reports one frame carries (a mailbox's payload holds 480 bytes).
pub const REPORTS_PER_FRAME: usize = 10;

/// See the module docs.
pub struct Detectors {
    ring: Ring,
    beats: Beats,
    crashes: Crashes,
    ring_read: Option<ReadTicket>,
    /// Reports due and not sent yet (more than one frame holds).
    queued: Vec<Report>,
}

impl Detectors {
    /// The detectors of `me`, a member of `view`.
    pub fn new(config: &MembershipConfig, me: Member, view: &View, now_ns: u64) -> Detectors {
        let ring = RingConfig { read_gap_ns: config.ring_read_gap_ns, repeat_ns: config.repeat_ns };
        let beats = BeatConfig {
            timeout_ns: config.beat_timeout_ns,
            broadcast_period_ns: config.beat_period_ns,
            repeat_ns: config.repeat_ns,
        };
        Detectors {
            ring: Ring::new(ring, me, view, now_ns),
            beats: Beats::new(beats, me, view, now_ns),
            crashes: Crashes::new(config.repeat_ns, me, view),
            ring_read: None,
            queued: Vec::new(),
        }
    }

    /// A newer view: the ring's successor, the members watched and heard, the reports.
    pub fn on_view(&mut self, view: &View, now_ns: u64) {
        self.ring.on_view(view, now_ns);
        self.beats.on_view(view, now_ns);
        self.crashes.on_view(view, now_ns);
        if self.ring_read.is_some_and(|t| view.contains(t.target)) {
            return;
        }
        self.ring_read = None;
    }

    /// The counter to publish where the predecessor in the ring reads it.
    pub fn heartbeat(&mut self) -> u64 {
        self.ring.heartbeat()
    }

    /// The successor whose heartbeat to read now, if a read is due.
    pub fn ring_read_due(&mut self, now_ns: u64) -> Option<Member> {
        if self.ring_read.is_some() {
            return None;
        }
        let ticket = self.ring.poll(now_ns)?;
        self.ring_read = Some(ticket);
        Some(ticket.target)
    }

    /// The ring read completed with `value` (`None`: it failed).
    pub fn on_ring_read(&mut self, value: Option<u64>, now_ns: u64) {
        let Some(ticket) = self.ring_read.take() else { return };
        let reading = value.map_or(Reading::Error, Reading::Value);
        self.ring.on_read(ticket, reading, now_ns);
    }

    /// The ring read due could not be posted (no connection to the successor yet): no reading.
    pub fn ring_read_not_posted(&mut self, now_ns: u64) {
        if let Some(ticket) = self.ring_read.take() {
            self.ring.on_not_posted(ticket, now_ns);
        }
    }

    /// The beat to write into every member's board now, if one is due.
    pub fn beat_due(&mut self, now_ns: u64) -> Option<u64> {
        self.beats.poll(now_ns)
    }

    /// The beat word `node` last wrote here.
    pub fn on_beat(&mut self, node: u16, value: u64, now_ns: u64) {
        self.beats.on_beat(node, value, now_ns);
    }

    /// The members whose death signal to look at.
    pub fn watched(&self) -> Vec<Member> {
        self.crashes.watched().collect()
    }

    /// The fabric says `member`'s process is dead.
    pub fn on_death(&mut self, member: Member, now_ns: u64) {
        self.crashes.on_death(member, now_ns);
    }

    /// The reports to send now, encoded one after another into `payload` (emptied first);
    /// false when none is due.
    pub fn reports_due(&mut self, now_ns: u64, payload: &mut Vec<u8>) -> bool {
        self.queued.extend(self.ring.reports().due(now_ns));
        self.queued.extend(self.beats.reports().due(now_ns));
        self.queued.extend(self.crashes.reports().due(now_ns));
        payload.clear();
        let count = self.queued.len().min(REPORTS_PER_FRAME);
        for report in self.queued.drain(..count) {
            report.encode(payload);
        }
        debug_assert_eq!(payload.len(), count * REPORT_BYTES);
        count > 0
    }
}

/// The reports a frame's payload carries; a torn or malformed one ends the list.
pub fn decode_reports(payload: &[u8]) -> Vec<Report> {
    payload.chunks_exact(REPORT_BYTES).map_while(|bytes| Report::decode(bytes).ok()).collect()
}
