//! State transfer on the replication plane (either engine): the donor takes a snapshot of its
//! state machine between two entries applied and publishes it in its state-transfer region;
//! the receiver restores one the background plane fetched and checked. The background plane
//! does the asking and the one-sided reading (`background.rs`).

use crate::layout::{
    snapshot_digest, SNAPSHOT_DIGEST, SNAPSHOT_ERROR, SNAPSHOT_HEADER_BYTES, SNAPSHOT_INDEX,
    SNAPSHOT_LAST_KIND, SNAPSHOT_LAST_LEN, SNAPSHOT_LEN, SNAPSHOT_MEMBERS, SNAPSHOT_OK,
    SNAPSHOT_TICKET, SNAPSHOT_TOO_LARGE, SNAPSHOT_UNSUPPORTED,
};
use crate::replication::Applier;
use crate::shared::Shared;
use crate::signals::FetchedSnapshot;
use mu_fabric::{LocalRegion, NodeId};
use mu_log::EntryKind;
use mu_replication::ReplicaSet;
use std::sync::atomic::Ordering;
use tracing::{debug, info, warn};

/// The entry just below a snapshot's index, which a Velos leader republishes (its kind, its
/// value).
pub(crate) type LastEntry = (EntryKind, Vec<u8>);

/// Donor side: a peer asked (through our background plane) for our state. Called between two
/// entries applied, so that the snapshot is exactly the state after every entry below `index`
/// (with configuration `members`), and `last` the entry at `index - 1` if we hold it; written
/// into our state-transfer region, the ticket last, where the peer reads it. `last` travels
/// after the application's bytes: a Velos replica that installs the snapshot may lead at
/// once, as one that applied that entry may (otherwise every live member could be waiting
/// for an entry after its transfer, and none would lead to decide one).
#[allow(clippy::too_many_arguments)]
pub(crate) fn serve<R: LocalRegion>(
    shared: &Shared,
    region: &R,
    buf: &mut Vec<u8>,
    bytes_max: usize,
    (me, replicas): (NodeId, &ReplicaSet),
    (index, members): (u64, u64),
    last: Option<(EntryKind, &[u8])>,
    app: &mut dyn Applier,
) {
    let ticket = shared.transfer.snapshot_wanted.load(Ordering::Acquire);
    if ticket == 0 {
        return;
    }
    buf.clear();
    // The requester's position is in the ticket's high word (`layout::snapshot_ticket`).
    let requester = ((ticket >> 32) as usize)
        .checked_sub(1)
        .and_then(|pos| replicas.ids().get(pos))
        .map(|id| id.0);
    let error = take(shared, buf, bytes_max, (me.0, requester), index, last, app);
    publish(region, &buf[..], (index, members), last, error, ticket);
    shared.transfer.snapshots_served.fetch_add(1, Ordering::Relaxed);
    // The buffer lives as long as the replica: one that an oversized snapshot grew would
    // otherwise hold that memory for good. A snapshot that fits leaves it at most about
    // twice `bytes_max`, as the vector doubled to hold it.
    if buf.capacity() > 2 * bytes_max {
        *buf = Vec::new();
    }
    // A newer request may have replaced this one meanwhile: leave it for the next poll.
    let _ = shared.transfer.snapshot_wanted.compare_exchange(
        ticket,
        0,
        Ordering::AcqRel,
        Ordering::Acquire,
    );
}

/// Takes the application's snapshot into `buf` (empty), `last`'s value after it, for
/// `requester` (an id, if the ticket named one); returns the header's error code.
fn take(
    shared: &Shared,
    buf: &mut Vec<u8>,
    bytes_max: usize,
    (replica, requester): (u16, Option<u16>),
    index: u64,
    last: Option<(EntryKind, &[u8])>,
    app: &mut dyn Applier,
) -> u64 {
    let taken = app.snapshot(buf);
    if let Some((_, value)) = last {
        buf.extend_from_slice(value);
    }
    match taken {
        Err(e) => {
            warn!(replica, requester, error = %e, "state transfer: cannot take a snapshot");
            shared.transfer_failed(format!("taking a snapshot for a peer: {e}"));
            SNAPSHOT_UNSUPPORTED
        }
        Ok(()) if buf.len() > bytes_max => {
            warn!(
                replica,
                requester,
                bytes = buf.len(),
                bytes_max,
                "state transfer: the snapshot is larger than snapshot_bytes_max"
            );
            shared.transfer_failed(format!(
                "a snapshot of {} bytes is larger than snapshot_bytes_max ({bytes_max})",
                buf.len()
            ));
            SNAPSHOT_TOO_LARGE
        }
        Ok(()) => {
            info!(
                replica,
                requester,
                index,
                bytes = buf.len(),
                "state transfer: snapshot taken for a peer"
            );
            SNAPSHOT_OK
        }
    }
}

/// Writes the snapshot in `buf` (none unless `error` is `SNAPSHOT_OK`) and its header into our
/// state-transfer region, the ticket cleared first and written last, where the peer reads it.
fn publish<R: LocalRegion>(
    region: &R,
    buf: &[u8],
    (index, members): (u64, u64),
    last: Option<(EntryKind, &[u8])>,
    error: u64,
    ticket: u64,
) {
    let put = |offset: u64, value: u64| {
        region.store_u64(offset as usize, value).expect("snapshot header in the region")
    };
    put(SNAPSHOT_TICKET, 0); // being rewritten
    let len = if error == SNAPSHOT_OK { buf.len() } else { 0 };
    region
        .write(SNAPSHOT_HEADER_BYTES as usize, &buf[..len])
        .expect("snapshot fits the region: checked above");
    put(SNAPSHOT_INDEX, index);
    put(SNAPSHOT_LEN, len as u64);
    put(SNAPSHOT_MEMBERS, members);
    let last_word = match last {
        Some((kind, value)) if error == SNAPSHOT_OK => (kind as u64) << 32 | value.len() as u64,
        _ => 0,
    };
    put(SNAPSHOT_LAST_KIND, last_word >> 32);
    put(SNAPSHOT_LAST_LEN, last_word & 0xffff_ffff);
    put(SNAPSHOT_DIGEST, snapshot_digest(index, members, last_word, &buf[..len]));
    put(SNAPSHOT_ERROR, error);
    put(SNAPSHOT_TICKET, ticket);
}

/// Receiving side: the background plane fetched and checked a snapshot. Restores it if it is
/// ahead of `head` (the next index to apply) and this replica does not lead (a leader's state
/// is what others follow); returns its index, its configuration and the entry below the index
/// if the donor sent it (and it is at most `last_bytes_max` long).
pub(crate) fn install(
    shared: &Shared,
    last_bytes_max: usize,
    me: NodeId,
    head: u64,
    leading: bool,
    app: &mut dyn Applier,
) -> Option<(u64, u64, Option<LastEntry>)> {
    if !shared.transfer.snapshot_fetched.load(Ordering::Acquire) {
        return None;
    }
    let fetched = shared.transfer.fetched_snapshot.lock().unwrap_or_else(|p| p.into_inner()).take();
    let Some(FetchedSnapshot { index, members, last_word, bytes }) = fetched else {
        shared.transfer.snapshot_fetched.store(false, Ordering::Release);
        return None;
    };
    let len = bytes.len();
    // Checked by the digest with the bytes; a length past them is no last entry.
    let last_len = ((last_word & 0xffff_ffff) as usize).min(len);
    let last_kind = EntryKind::from_u8((last_word >> 32) as u8);
    let mut installed = None;
    if index > head && !leading {
        let (state, last_value) =
            bytes.split_at(len - if last_kind.is_some() { last_len } else { 0 });
        // An entry longer than one fits no slot: only a faulty donor sends one, and a Velos
        // leader that republished it would stop. Left out, the replica waits for a leader.
        let last = last_kind
            .filter(|_| last_value.len() <= last_bytes_max)
            .map(|kind| (kind, last_value.to_vec()));
        match app.restore(state) {
            Ok(()) => {
                info!(
                    replica = me.0,
                    index,
                    bytes = len,
                    from_head = head,
                    "state transfer: snapshot installed"
                );
                shared.transfer.snapshots_installed.fetch_add(1, Ordering::Relaxed);
                installed = Some((index, members, last));
            }
            Err(e) => {
                warn!(replica = me.0, index, error = %e, "state transfer: restore failed");
                shared.transfer.restore_failures.fetch_add(1, Ordering::Release);
                shared.transfer_failed(format!("restoring a snapshot: {e}"))
            }
        }
    } else {
        debug!(
            replica = me.0,
            index, head, "state transfer: fetched snapshot not installed (not ahead, or leading)"
        );
    }
    shared.transfer.snapshot_fetched.store(false, Ordering::Release);
    installed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{snapshot_region_bytes, snapshot_ticket};
    use mu_fabric::{FabricError, RegionId};
    use std::sync::{Arc, Mutex};

    /// A region in this process's memory: what `serve` writes, to be read back.
    #[derive(Clone)]
    struct Memory(Arc<Mutex<Vec<u8>>>);

    impl LocalRegion for Memory {
        fn id(&self) -> RegionId {
            crate::layout::SNAPSHOT_REGION
        }
        fn len_bytes(&self) -> usize {
            self.0.lock().unwrap().len()
        }
        fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), FabricError> {
            out.copy_from_slice(&self.0.lock().unwrap()[offset..offset + out.len()]);
            Ok(())
        }
        fn write(&self, offset: usize, data: &[u8]) -> Result<(), FabricError> {
            self.0.lock().unwrap()[offset..offset + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn load_u64(&self, offset: usize) -> Result<u64, FabricError> {
            let mut word = [0; 8];
            self.read(offset, &mut word)?;
            Ok(u64::from_le_bytes(word))
        }
        fn store_u64(&self, offset: usize, value: u64) -> Result<(), FabricError> {
            self.write(offset, &value.to_le_bytes())
        }
        fn compare_swap_u64(&self, offset: usize, old: u64, new: u64) -> Result<u64, FabricError> {
            let seen = self.load_u64(offset)?;
            if seen == old {
                self.store_u64(offset, new)?;
            }
            Ok(seen)
        }
    }

    /// An application whose snapshots are `bytes` long.
    struct Sized(usize);

    impl Applier for Sized {
        fn apply(&mut self, _: u64, _: EntryKind, _: &[u8]) {}
        fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
            out.resize(self.0, 7);
            Ok(())
        }
        fn restore(&mut self, _: &[u8]) -> Result<(), String> {
            Ok(())
        }
    }

    /// A snapshot far larger than `snapshot_bytes_max` is refused to the requester, and the
    /// memory it took is given back rather than kept by the donor for good; one that fits is
    /// published whole.
    #[test]
    fn an_oversized_snapshot_is_refused_and_its_memory_freed() {
        let bytes_max = 4096;
        let ids: Vec<NodeId> = (0..3).map(NodeId).collect();
        let replicas = ReplicaSet::new(ids.clone()).unwrap();
        let shared = Shared::new(true, ids, 0b111, 1, 1);
        let region = Memory(Arc::new(Mutex::new(vec![0; snapshot_region_bytes(bytes_max)])));
        let mut buf = Vec::new();
        let mut serve_one = |app: &mut Sized, seq| {
            shared.transfer.snapshot_wanted.store(snapshot_ticket(1, seq), Ordering::Release);
            let at = (NodeId(0), &replicas);
            serve(&shared, &region, &mut buf, bytes_max, at, (5, 0b111), None, app);
            let word = |field| region.load_u64(field as usize).unwrap();
            (word(SNAPSHOT_ERROR), word(SNAPSHOT_LEN), buf.capacity())
        };
        let (error, len, capacity) = serve_one(&mut Sized(100 * bytes_max), 1);
        assert_eq!((error, len), (SNAPSHOT_TOO_LARGE, 0));
        assert!(capacity <= 2 * bytes_max, "the donor keeps {capacity} bytes");
        let (error, len, capacity) = serve_one(&mut Sized(bytes_max), 2);
        assert_eq!((error, len), (SNAPSHOT_OK, bytes_max as u64));
        assert!(capacity >= bytes_max, "a buffer that fits is kept for the next snapshot");
    }
}
