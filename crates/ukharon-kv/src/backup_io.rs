//! A backup's side of the runtime: revocations before following a new primary, the follow
//! word and installed words published in its data region, its ring scanned through a copy of
//! the slots it is about to apply, snapshots restored; and a takeover's revocations.

use crate::driver::{backups_of, KvDriver, Role};
use crate::layout::{
    committed_from, SnapshotHeader, COMMITTED_OFFSET, FOLLOW_OFFSET, INSTALLED_OFFSET, RING_OFFSET,
    SNAPSHOT_HEADER_BYTES, SNAPSHOT_HEADER_OFFSET,
};
use mu_fabric::{Fabric, LocalRegion};
use mu_primary_backup::{BackupAction, FollowWord};

impl<F: Fabric, T> KvDriver<F, T> {
    /// Carries out what the backup engine asked for: revocations (a barrier each; one that
    /// has not finished is tried again at the next poll) and its follow word.
    pub(crate) fn backup_actions(&mut self) {
        let Role::Backup(b) = &mut self.role else { return };
        let actions: Vec<BackupAction> = b.drain_actions().collect();
        for action in actions {
            match action {
                BackupAction::Revoke { node } => self.pending_revokes.push(node),
                BackupAction::Publish(word) => self.publish(word),
            }
        }
        self.revoke_pending();
    }

    fn revoke_pending(&mut self) {
        if self.pending_revokes.is_empty() {
            return;
        }
        let mut left = Vec::new();
        for node in std::mem::take(&mut self.pending_revokes) {
            if let Err(e) = self.links.revoke_write(&self.fabric, node) {
                self.problem = Some(format!("taking node {node}'s write access away: {}", e.0));
                left.push(node);
            }
        }
        self.pending_revokes = left;
        if self.pending_revokes.is_empty() {
            if let Role::Backup(b) = &mut self.role {
                b.revoked();
                let actions: Vec<BackupAction> = b.drain_actions().collect();
                for action in actions {
                    if let BackupAction::Publish(word) = action {
                        self.publish(word);
                    }
                }
            }
        }
    }

    /// Writes the follow word where the primary reads it: what it applied and whether it is
    /// whole first, the view last (a torn read of it is harmless: `FollowWord`'s docs).
    fn publish(&mut self, word: FollowWord) {
        let store = |offset: usize, value: u64| self.data.store_u64(FOLLOW_OFFSET + offset, value);
        let ok = store(8, word.applied).is_ok()
            && store(16, u64::from(word.whole)).is_ok()
            && store(0, word.epoch).is_ok();
        if !ok {
            self.problem = Some("publishing the follow word failed".into());
        }
    }

    /// The backup's round: revocations left, a snapshot that landed, records to apply.
    pub(crate) fn poll_backup(&mut self) {
        self.revoke_pending();
        if !self.pending_revokes.is_empty() {
            return;
        }
        self.install_landed();
        let word = |at: usize| self.data.load_u64(at).unwrap_or(0);
        // A word read mid-write is skipped: the primary only raises it, and tells it again.
        let committed = committed_from(word(COMMITTED_OFFSET), word(COMMITTED_OFFSET + 8))
            .unwrap_or(self.last_committed);
        let Role::Backup(b) = &self.role else { return };
        let fresh = self.copy_slots(b.applied());
        if fresh || committed > self.last_committed {
            self.last_committed = committed;
            let Role::Backup(b) = &mut self.role else { return };
            b.scan(&self.mirror, committed);
            self.backup_actions();
        }
    }

    /// Copies into the mirror the slots from `applied + 1` on that hold the positions looked
    /// for, and the first that does not (so the mirror holds no older copy of it); says whether
    /// any record was found.
    fn copy_slots(&mut self, applied: u64) -> bool {
        let ring = self.settings.layout.ring;
        let mut position = applied + 1;
        while position <= applied + ring.slots_count {
            let at = ring.offset(position);
            let slot = &mut self.mirror[at..at + ring.slot_bytes];
            if self.data.read(RING_OFFSET + at, slot).is_err() {
                return false;
            }
            if u64::from_le_bytes(slot[..8].try_into().expect("8 bytes")) != position {
                break;
            }
            position += 1;
        }
        position > applied + 1
    }

    /// Restores a snapshot whose header names the view this backup follows and that was not
    /// restored yet, if its bytes check out (one being overwritten does not: read again later).
    fn install_landed(&mut self) {
        let mut raw = [0; SNAPSHOT_HEADER_BYTES];
        if self.data.read(SNAPSHOT_HEADER_OFFSET, &mut raw).is_err() {
            return;
        }
        let header = SnapshotHeader::decode(&raw);
        let fresh = (header.epoch, header.position) != self.last_installed;
        if header.epoch == 0 || !fresh || Some(header.epoch) != self.epoch() {
            return;
        }
        let len = header.len as usize;
        if len > self.settings.layout.snapshot_bytes_max {
            return;
        }
        let mut bytes = vec![0; len];
        if self.data.read(self.settings.layout.snapshot_offset(), &mut bytes).is_err()
            || !header.checks(&bytes)
        {
            return;
        }
        let Role::Backup(b) = &mut self.role else { return };
        match b.install(&bytes, header.epoch, header.position, header.committed) {
            Ok(true) => {
                self.last_installed = (header.epoch, header.position);
                let installed = |o: usize, v: u64| self.data.store_u64(INSTALLED_OFFSET + o, v);
                // Position first: the primary matches both words.
                let _ = installed(8, header.position).and_then(|_| installed(0, header.epoch));
                self.backup_actions();
            }
            Ok(false) => {}
            Err(e) => {
                self.last_installed = (header.epoch, header.position);
                self.problem = Some(format!("a snapshot from the primary does not restore: {e}"));
            }
        }
    }

    /// A takeover's round: the old primary's write access taken away, then the ring read whole
    /// and the engine made primary of the view's other members.
    pub(crate) fn poll_takeover(&mut self) {
        let Role::Taking { revoke, .. } = &mut self.role else { return };
        let nodes = std::mem::take(revoke);
        let mut left = Vec::new();
        for node in nodes {
            if let Err(e) = self.links.revoke_write(&self.fabric, node) {
                self.problem = Some(format!("taking node {node}'s write access away: {}", e.0));
                left.push(node);
            }
        }
        if !left.is_empty() {
            if let Role::Taking { revoke, .. } = &mut self.role {
                *revoke = left;
            }
            return;
        }
        let ring_bytes = self.settings.layout.ring.bytes();
        if self.data.read(RING_OFFSET, &mut self.mirror[..ring_bytes]).is_err() {
            return;
        }
        let Role::Taking { takeover, .. } = std::mem::replace(&mut self.role, Role::Outside) else {
            unreachable!("matched above")
        };
        let view = self.view.clone().expect("a takeover follows a view");
        let backups = backups_of(&view, self.me);
        match takeover.revoked::<T>(&self.mirror, &backups) {
            Ok(mut primary) => {
                if primary.epoch() < view.epoch {
                    primary.next_view(view.epoch, &backups);
                }
                self.forget_in_flight();
                self.role = Role::Primary(primary);
                self.primary_actions();
            }
            Err(e) => {
                self.role = Role::Incomplete;
                self.problem = Some(e.to_string());
            }
        }
    }
}
