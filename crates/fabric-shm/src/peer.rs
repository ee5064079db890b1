//! A peer incarnation as this node sees it: its control segment, its process, and its regions
//! mapped so far.

use crate::config::{ShmConfig, MAX_REGION_BYTES};
use crate::fence::PeerProcess;
use crate::layout::{self, HEADER_BYTES};
use crate::lock;
use crate::mapping::Mapping;
use crate::prefault::Prefaulter;
use crate::remote_region::RemoteRegion;
use mu_fabric::{NodeId, RegionId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A peer incarnation's control segment and the regions of it mapped so far.
pub(crate) struct Peer {
    pub(crate) node: NodeId,
    pub(crate) incarnation: u32,
    pub(crate) process: PeerProcess,
    pub(crate) ctl: Mapping,
    pub(crate) regions: Mutex<HashMap<RegionId, Arc<RemoteRegion>>>,
    /// The peer's count of registered regions (`layout::H_REGIONS`) when we last mapped them.
    pub(crate) regions_seen: AtomicU64,
}

impl Peer {
    /// Whether every thread of the peer's process is gone (so nothing of it still copies).
    pub(crate) fn process_exited(&self) -> bool {
        self.process.exited() == Some(true)
    }
}

impl Peer {
    /// Maps the regions the peer registered since we last looked, while binding, rather than
    /// on the first operation into each: opening and mapping a file costs tens of
    /// microseconds, and the first operation can be a new leader's first round (it was most of
    /// a new Velos leader's first batch of compare-and-swaps). One load when nothing is new. A
    /// region registered after the last binding is mapped by its first operation.
    pub(crate) fn map_registered(&self, config: &ShmConfig, prefault: &Prefaulter) {
        let registered = self.ctl.u64_at(layout::H_REGIONS).load(Ordering::Acquire);
        if self.regions_seen.swap(registered, Ordering::AcqRel) == registered {
            return;
        }
        for id in layout::region_files(&config.run_dir, self.node, self.incarnation) {
            let _ = self.region(config, prefault, id);
        }
    }

    /// The peer's region `id`, mapped on first use; `prefault` pre-faults a new mapping in the
    /// background.
    pub(crate) fn region(
        &self,
        config: &ShmConfig,
        prefault: &Prefaulter,
        id: RegionId,
    ) -> Option<Arc<RemoteRegion>> {
        let mut regions = lock(&self.regions);
        if let Some(r) = regions.get(&id) {
            return Some(r.clone());
        }
        let run_dir = &config.run_dir;
        let path = layout::region_file(run_dir, self.node, self.incarnation, id);
        let map = Mapping::open(&path, HEADER_BYTES).ok()?;
        let h =
            layout::read_region_header(&map, &path, self.node, config.cluster_id, self.incarnation)
                .ok()?;
        // A header of another region (a file copied or renamed by hand), or larger than any
        // node registers (another build's, whose pages the pre-fault would all allocate), is
        // not this region.
        if h.region != id || h.len_bytes > MAX_REGION_BYTES as u64 {
            return None;
        }
        let r = Arc::new(RemoteRegion { map, len_bytes: h.len_bytes, access: h.access });
        regions.insert(id, r.clone());
        prefault.queue(r.clone());
        Some(r)
    }
}
