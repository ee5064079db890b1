//! The primary's side of the runtime: the engine's actions as work requests on the data
//! fabric, their completions back into the engine, snapshots sent one at a time, and the
//! answers released under `Active`.

use crate::driver::{Installing, KvDriver, KvEvent, Outgoing, Posted, Role};
use crate::layout::{
    committed_bytes, SnapshotHeader, COMMITTED_OFFSET, DATA_REGION, FOLLOW_AREA_BYTES,
    INSTALLED_OFFSET, RING_OFFSET, SNAPSHOT_HEADER_OFFSET, STAGING_REGION,
};
use mu_fabric::{
    Endpoint, Fabric, LocalRegion, LocalSlice, RemoteAddr, Source, Status, WorkRequest,
};
use mu_primary_backup::{Action, FollowWord};

impl<F: Fabric, T> KvDriver<F, T> {
    /// Carries out what the primary engine asked for.
    pub(crate) fn primary_actions(&mut self) {
        let Role::Primary(p) = &mut self.role else { return };
        let actions: Vec<Action<T>> = p.drain_actions().collect();
        for action in actions {
            match action {
                Action::Write { to, offset, position, bytes } => {
                    self.post_record(to, offset, position, &bytes)
                }
                Action::WriteCommitted { to, committed } => self.post_committed(to, committed),
                Action::ReadFollow { to } => self.post_follow_read(to),
                Action::Snapshot { to, epoch, position, committed, snapshot } => self
                    .snapshots
                    .push_back(Outgoing { to, epoch, position, committed, bytes: snapshot }),
                Action::Answer { token, reply } => {
                    self.events.push(KvEvent::Answer { token, reply })
                }
                Action::Drop { token } => self.events.push(KvEvent::Drop { token }),
            }
        }
    }

    /// Posts `wr` to `to`, or, when the connection is down or the post fails, leaves the peer
    /// to be reset in the engine once the connection is up again.
    fn post<'a>(
        &mut self,
        to: u16,
        posted: Posted,
        wr: impl FnOnce(u64) -> WorkRequest<'a>,
    ) -> bool {
        if !self.links.is_up(to) || self.lost.contains(&to) {
            self.peer_lost(to);
            return false;
        }
        let id = self.next_wr_id(posted);
        let conn = self.links.conn(to);
        if self.endpoint.post(conn, &wr(id)).is_err() {
            self.posted.remove(&id);
            self.peer_lost(to);
            return false;
        }
        true
    }

    /// What is in flight to `to` no longer counts; the engine resends from its follow word
    /// once the connection is up.
    pub(crate) fn peer_lost(&mut self, to: u16) {
        *self.gens.entry(to).or_default() += 1;
        self.installing.remove(&to);
        // The engine sends it a new one if it still needs one: an older one sent after that
        // would take the backup back.
        self.snapshots.retain(|s| s.to != to);
        if !self.lost.contains(&to) {
            self.lost.push(to);
        }
        if self.links.is_up(to) {
            // Up, but the post failed: it is set up again first.
            self.links.down(to, 0);
        }
    }

    fn post_record(&mut self, to: u16, offset: usize, position: u64, bytes: &[u8]) {
        let gen = self.gen(to);
        let remote = RemoteAddr { region: DATA_REGION, offset: (RING_OFFSET + offset) as u64 };
        if bytes.len() <= self.fabric.max_inline_bytes() {
            let posted = Posted::Record { to, position, gen };
            self.post(to, posted, |id| WorkRequest::write(id, Source::Inline(bytes), remote));
            return;
        }
        let at = self.settings.layout.record_staging(to, offset);
        if self.staging.write(at, bytes).is_err() {
            self.problem = Some("staging a record failed".into());
            return;
        }
        let local =
            LocalSlice { region: STAGING_REGION, offset: at as u64, len: bytes.len() as u32 };
        let posted = Posted::Record { to, position, gen };
        self.post(to, posted, |id| WorkRequest::write(id, Source::Local(local), remote));
    }

    fn post_committed(&mut self, to: u16, committed: u64) {
        let remote = RemoteAddr { region: DATA_REGION, offset: COMMITTED_OFFSET as u64 };
        let posted = Posted::Committed { to, gen: self.gen(to) };
        let bytes = committed_bytes(committed);
        self.post(to, posted, |id| WorkRequest::write(id, Source::Inline(&bytes), remote));
    }

    pub(crate) fn post_follow_read(&mut self, to: u16) {
        let at = self.settings.layout.follow_landing(to) as u64;
        let local =
            LocalSlice { region: STAGING_REGION, offset: at, len: FOLLOW_AREA_BYTES as u32 };
        let remote = RemoteAddr { region: DATA_REGION, offset: 0 };
        let posted = Posted::Follow { to, gen: self.gen(to) };
        self.post(to, posted, |id| WorkRequest::read(id, local, remote));
    }

    /// Sends the next snapshot waiting, if none is on its way: its bytes, then its header (on
    /// the same connection, so the header lands last).
    fn send_snapshot(&mut self) {
        if self.snapshot_in_flight {
            return;
        }
        let Some(s) = self.snapshots.pop_front() else { return };
        let max = self.settings.layout.snapshot_bytes_max;
        if s.bytes.len() > max {
            self.problem = Some(format!(
                "a snapshot of {} bytes does not fit the {max} bytes configured \
                 (snapshot_bytes_max): backup {} cannot be brought up",
                s.bytes.len(),
                s.to
            ));
            return;
        }
        let staged = self.settings.layout.snapshot_staging();
        let header = SnapshotHeader::new(s.epoch, s.position, s.committed, &s.bytes);
        let body_at = staged + 64;
        if self.staging.write(body_at, &s.bytes).is_err()
            || self.staging.write(staged, &header.encode()).is_err()
        {
            self.problem = Some("staging a snapshot failed".into());
            return;
        }
        let gen = self.gen(s.to);
        let body_remote = RemoteAddr {
            region: DATA_REGION,
            offset: self.settings.layout.snapshot_offset() as u64,
        };
        let body = LocalSlice {
            region: STAGING_REGION,
            offset: body_at as u64,
            len: s.bytes.len() as u32,
        };
        let body_posted = self.post(s.to, Posted::SnapshotBody { to: s.to, gen }, |id| {
            WorkRequest::write(id, Source::Local(body), body_remote)
        });
        if !body_posted {
            return; // the engine sends another once the connection is up again
        }
        let header_local = LocalSlice {
            region: STAGING_REGION,
            offset: staged as u64,
            len: header.encode().len() as u32,
        };
        let header_remote =
            RemoteAddr { region: DATA_REGION, offset: SNAPSHOT_HEADER_OFFSET as u64 };
        let posted = Posted::SnapshotHeader { to: s.to, gen, epoch: s.epoch, position: s.position };
        self.snapshot_in_flight = self.post(s.to, posted, |id| {
            WorkRequest::write(id, Source::Local(header_local), header_remote)
        });
    }

    /// Completions of every role's work requests: one batch per round. A completion may post
    /// again (a follow word read again), and shared memory completes at once: taking until
    /// none is left would never end.
    pub(crate) fn poll_completions(&mut self, now_ns: u64) {
        let n = self.endpoint.poll(&mut self.completions);
        for i in 0..n {
            let c = self.completions[i];
            if let Some(posted) = self.posted.remove(&c.wr_id) {
                self.completed(posted, c.status, now_ns);
            }
        }
    }

    fn completed(&mut self, posted: Posted, status: Status, now_ns: u64) {
        let (to, gen) = match posted {
            Posted::Record { to, gen, .. }
            | Posted::Committed { to, gen }
            | Posted::Follow { to, gen }
            | Posted::SnapshotBody { to, gen }
            | Posted::SnapshotHeader { to, gen, .. } => (to, gen),
        };
        if matches!(posted, Posted::SnapshotHeader { .. })
            || (status != Status::Success && matches!(posted, Posted::SnapshotBody { .. }))
        {
            self.snapshot_in_flight = false;
        }
        if gen != self.gen(to) {
            return; // posted before the connection broke or the view changed
        }
        if status != Status::Success {
            self.peer_lost(to);
            return;
        }
        let Role::Primary(p) = &mut self.role else { return };
        match posted {
            Posted::Record { to, position, .. } => p.completed(to, position),
            Posted::Follow { to, .. } => self.follow_read(to, now_ns),
            Posted::SnapshotHeader { to, epoch, position, .. } => {
                self.installing.insert(to, Installing { epoch, position, read_at_ns: Some(0) });
            }
            Posted::Committed { .. } | Posted::SnapshotBody { .. } => {}
        }
    }

    /// A follow-word read from `to` landed in the staging region.
    fn follow_read(&mut self, to: u16, now_ns: u64) {
        let at = self.settings.layout.follow_landing(to);
        let word = |offset: usize| self.staging.load_u64(at + offset).unwrap_or(0);
        let follow = FollowWord { epoch: word(0), applied: word(8), whole: word(16) != 0 };
        let installed = (word(INSTALLED_OFFSET), word(INSTALLED_OFFSET + 8));
        let Role::Primary(p) = &mut self.role else { return };
        p.followed(to, follow);
        if let Some(i) = self.installing.get_mut(&to) {
            if installed == (i.epoch, i.position) {
                let position = i.position;
                self.installing.remove(&to);
                p.installed(to, position);
            } else {
                i.read_at_ns = Some(now_ns);
            }
        }
        self.primary_actions();
    }

    /// The primary's round: snapshots, follow reads for those installing, answers released
    /// under `Active`, and the committed position told when nothing else is to do.
    pub(crate) fn poll_primary(&mut self, now_ns: u64, active: &dyn Fn(u64) -> bool) {
        self.send_snapshot();
        let gap = self.settings.install_poll_ns;
        let due: Vec<u16> = self
            .installing
            .iter()
            .filter(|(_, i)| i.read_at_ns.is_some_and(|at| now_ns >= at + gap))
            .map(|(&to, _)| to)
            .collect();
        for to in due {
            if let Some(i) = self.installing.get_mut(&to) {
                i.read_at_ns = None; // until this read completes
            }
            self.post_follow_read(to);
        }
        let Role::Primary(p) = &mut self.role else { return };
        p.release(active(p.epoch()));
        if self.posted.is_empty() {
            p.flush_committed();
        }
        self.primary_actions();
    }
}
