//! The replica's own memory as the engines see it, backed by fabric regions.

use crate::shared::Shared;
use mu_fabric::LocalRegion;
use mu_replication::{Area, Memory, Revoked};
use std::sync::Arc;

/// The log and scratch regions, and the own-log guard. Offsets come from the engines, which
/// compute them from the same layout the regions were sized with: an offset outside a region is
/// a bug, and stops the replica with a message rather than corrupting anything.
pub(crate) struct FabricMemory<R: LocalRegion> {
    pub log: R,
    pub scratch: R,
    pub shared: Arc<Shared>,
}

impl<R: LocalRegion> FabricMemory<R> {
    fn region(&self, area: Area) -> &R {
        match area {
            Area::Log => &self.log,
            Area::Scratch => &self.scratch,
        }
    }
}

impl<R: LocalRegion> Memory for FabricMemory<R> {
    fn read(&self, area: Area, offset: u64, out: &mut [u8]) {
        if let Err(e) = self.region(area).read(offset as usize, out) {
            panic!("engine read outside its {area:?} region: {e}");
        }
    }

    fn write(&mut self, area: Area, offset: u64, data: &[u8]) {
        if let Err(e) = self.region(area).write(offset as usize, data) {
            panic!("engine write outside its {area:?} region: {e}");
        }
    }

    fn write_guarded(&mut self, offset: u64, data: &[u8]) -> Result<(), Revoked> {
        let log = &self.log;
        let written = self.shared.guard.write(|| {
            // A lone aligned word (minProposal, FUO) is stored atomically: peers read it with
            // one-sided reads at any time.
            let result = match <[u8; 8]>::try_from(data) {
                Ok(word) if offset % 8 == 0 => {
                    log.store_u64(offset as usize, u64::from_le_bytes(word))
                }
                _ => log.write(offset as usize, data),
            };
            if let Err(e) = result {
                panic!("engine write outside its log region: {e}");
            }
        });
        if written {
            Ok(())
        } else {
            Err(Revoked)
        }
    }

    fn load_u64(&self, area: Area, offset: u64) -> u64 {
        match self.region(area).load_u64(offset as usize) {
            Ok(v) => v,
            Err(e) => panic!("engine load outside its {area:?} region: {e}"),
        }
    }

    fn store_u64(&mut self, area: Area, offset: u64, value: u64) {
        if let Err(e) = self.region(area).store_u64(offset as usize, value) {
            panic!("engine store outside its {area:?} region: {e}");
        }
    }
}
