//! Regions registered on this node, and local access to them.

use super::handles::Scoping;
use super::loopback::Loopback;
use super::memory::Memory;
use mu_fabric::{check_bounds, Access, FabricError, LocalRegion, RegionId};
use sideway::ibverbs::memory_region::MemoryRegion;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// How this node's own compare-and-swap is made atomic with its peers'.
pub(crate) enum LocalCas {
    /// The device's atomics are atomic with the CPU's (`IBV_ATOMIC_GLOB`).
    Cpu,
    /// Through the NIC, on a queue pair connected to itself (`IBV_ATOMIC_HCA`).
    Nic(Mutex<Loopback>),
    /// Neither: why not.
    Unsupported(String),
}

/// A region registered on this node.
#[derive(Clone)]
pub struct VerbsRegion {
    pub(crate) inner: Arc<RegionInner>,
}

pub(crate) struct RegionInner {
    pub(crate) id: RegionId,
    pub(crate) len_bytes: usize,
    pub(crate) access: Access,
    /// The region's scope, and the shared registration or the memory window that peers address
    /// under it (see `scope`). Declared first: a window goes before the registration it is bound
    /// on, and every registration before the memory is unmapped.
    pub(crate) scoping: Mutex<Scoping>,
    /// The registration for this node's own requests (its local key) and for binding windows:
    /// local write and window binding only, so its remote key reaches nothing (it is what a
    /// region scoped to nobody publishes). It lives as long as the region, so the data path's
    /// local keys never change with the scope.
    pub(crate) local_mr: Arc<MemoryRegion>,
    /// Another registration, with remote atomic access, for the loopback compare-and-swap only
    /// (its key is never published, so it widens nothing a peer can do).
    pub(crate) cas_mr: Option<Arc<MemoryRegion>>,
    pub(crate) memory: Memory,
    pub(crate) local_cas: Arc<LocalCas>,
}

impl VerbsRegion {
    fn check(&self, offset: usize, len: usize) -> Result<(), FabricError> {
        if check_bounds(offset as u64, len as u64, self.inner.len_bytes as u64) {
            Ok(())
        } else {
            Err(FabricError::OutOfBounds {
                offset: offset as u64,
                len: len as u64,
                region_len: self.inner.len_bytes as u64,
            })
        }
    }

    fn check_word(&self, offset: usize) -> Result<(), FabricError> {
        if offset % 8 != 0 {
            return Err(FabricError::Misaligned(offset as u64));
        }
        self.check(offset, 8)
    }

    /// The region's registered access.
    pub fn access(&self) -> Access {
        self.inner.access
    }

    /// The region's remote key as published now (what peers that bind now address it with): it
    /// changes with the region's scope.
    pub fn rkey(&self) -> u32 {
        self.inner.published_rkey()
    }
}

impl LocalRegion for VerbsRegion {
    fn id(&self) -> RegionId {
        self.inner.id
    }

    fn len_bytes(&self) -> usize {
        self.inner.len_bytes
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), FabricError> {
        self.check(offset, out.len())?;
        self.inner.memory.copy_out(offset, out);
        Ok(())
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<(), FabricError> {
        self.check(offset, data.len())?;
        self.inner.memory.copy_in(offset, data);
        Ok(())
    }

    fn load_u64(&self, offset: usize) -> Result<u64, FabricError> {
        self.check_word(offset)?;
        Ok(self.inner.memory.u64_at(offset).load(Ordering::Acquire))
    }

    fn store_u64(&self, offset: usize, value: u64) -> Result<(), FabricError> {
        self.check_word(offset)?;
        self.inner.memory.u64_at(offset).store(value, Ordering::Release);
        Ok(())
    }

    fn compare_swap_u64(
        &self,
        offset: usize,
        expected: u64,
        desired: u64,
    ) -> Result<u64, FabricError> {
        self.check_word(offset)?;
        match &*self.inner.local_cas {
            LocalCas::Cpu => {
                let word = self.inner.memory.u64_at(offset);
                Ok(
                    match word.compare_exchange(
                        expected,
                        desired,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(old) | Err(old) => old,
                    },
                )
            }
            LocalCas::Nic(loopback) => {
                let cas_mr = self.inner.cas_mr.as_ref().ok_or_else(|| {
                    FabricError::Incompatible(
                        "region has no atomic registration for the loopback compare-and-swap"
                            .into(),
                    )
                })?;
                let addr = self.inner.memory.addr() + offset as u64;
                // A poisoned lock only means another caller panicked mid-call; the loopback
                // recovers by cycling its queue pair.
                let mut loopback = loopback.lock().unwrap_or_else(|e| e.into_inner());
                loopback.compare_swap(cas_mr.rkey(), addr, expected, desired)
            }
            LocalCas::Unsupported(why) => Err(FabricError::Incompatible(format!(
                "this node cannot compare-and-swap its own memory atomically with its peers: {why}"
            ))),
        }
    }
}
