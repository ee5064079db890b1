//! Regions registered on this node, and local access to them.

use crate::layout::HEADER_BYTES;
use crate::mapping::Mapping;
use mu_fabric::{check_bounds, FabricError, LocalRegion, RegionId};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A region registered on this node.
#[derive(Clone)]
pub struct ShmRegion {
    pub(crate) id: RegionId,
    pub(crate) len_bytes: usize,
    pub(crate) map: Arc<Mapping>,
}

impl ShmRegion {
    fn check(&self, offset: usize, len: usize) -> Result<usize, FabricError> {
        if check_bounds(offset as u64, len as u64, self.len_bytes as u64) {
            Ok(HEADER_BYTES + offset)
        } else {
            Err(FabricError::OutOfBounds {
                offset: offset as u64,
                len: len as u64,
                region_len: self.len_bytes as u64,
            })
        }
    }

    fn check_word(&self, offset: usize) -> Result<usize, FabricError> {
        if offset % 8 != 0 {
            return Err(FabricError::Misaligned(offset as u64));
        }
        self.check(offset, 8)
    }
}

impl LocalRegion for ShmRegion {
    fn id(&self) -> RegionId {
        self.id
    }

    fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), FabricError> {
        let at = self.check(offset, out.len())?;
        self.map.copy_out(at, out);
        Ok(())
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<(), FabricError> {
        let at = self.check(offset, data.len())?;
        self.map.copy_in(at, data);
        Ok(())
    }

    fn load_u64(&self, offset: usize) -> Result<u64, FabricError> {
        Ok(self.map.u64_at(self.check_word(offset)?).load(Ordering::Acquire))
    }

    fn store_u64(&self, offset: usize, value: u64) -> Result<(), FabricError> {
        self.map.u64_at(self.check_word(offset)?).store(value, Ordering::Release);
        Ok(())
    }

    fn compare_swap_u64(
        &self,
        offset: usize,
        expected: u64,
        desired: u64,
    ) -> Result<u64, FabricError> {
        // Peers' compare-and-swaps on this word are the same atomic instruction on the same
        // shared page (see the endpoint), so this one is atomic with them.
        let word = self.map.u64_at(self.check_word(offset)?);
        Ok(match word.compare_exchange(expected, desired, Ordering::AcqRel, Ordering::Acquire) {
            Ok(old) | Err(old) => old,
        })
    }
}
