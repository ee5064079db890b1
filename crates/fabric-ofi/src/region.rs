//! A region's memory and local access to it.
//!
//! The provider writes into a region from its progress calls while the owner reads and writes it
//! with these methods, as a NIC does on RDMA: races between the two are the fabric's semantics,
//! which the protocols handle (canaries, checksums, compare-and-swap words).

use mu_fabric::{check_bounds, FabricError, LocalRegion, RegionId};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Page-aligned, zeroed memory from an anonymous mapping, never moved while registered.
pub(crate) struct Memory {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: plain memory; every access through `Memory` is atomic or a raw copy whose races are
// the fabric's semantics (see the module docs).
unsafe impl Send for Memory {}
// SAFETY: as above.
unsafe impl Sync for Memory {}

impl Memory {
    pub(crate) fn new(len: usize) -> Result<Memory, FabricError> {
        let map_len = len.max(1);
        // SAFETY: an anonymous private mapping; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(FabricError::io("mmap region", std::io::Error::last_os_error()));
        }
        let ptr = NonNull::new(ptr.cast()).expect("mmap never returns null on success");
        Ok(Memory { ptr, len: map_len })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.len);
        // SAFETY: in bounds and 8-byte aligned (the mapping is page aligned); the memory lives
        // as long as `self` and is only accessed atomically or by raw copies.
        unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU64>() }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped. Registrations of this memory hold an
        // `Arc` to it, so none is left.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A region registered on this node.
#[derive(Clone)]
pub struct OfiRegion {
    pub(crate) id: RegionId,
    pub(crate) len_bytes: usize,
    pub(crate) mem: Arc<Memory>,
}

impl OfiRegion {
    fn check(&self, offset: usize, len: usize) -> Result<(), FabricError> {
        if check_bounds(offset as u64, len as u64, self.len_bytes as u64) {
            Ok(())
        } else {
            Err(FabricError::OutOfBounds {
                offset: offset as u64,
                len: len as u64,
                region_len: self.len_bytes as u64,
            })
        }
    }

    fn check_word(&self, offset: usize) -> Result<(), FabricError> {
        if offset % 8 != 0 {
            return Err(FabricError::Misaligned(offset as u64));
        }
        self.check(offset, 8)
    }
}

impl LocalRegion for OfiRegion {
    fn id(&self) -> RegionId {
        self.id
    }

    fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), FabricError> {
        self.check(offset, out.len())?;
        // SAFETY: in bounds (checked above); `out` is a Rust borrow, never region memory.
        unsafe {
            std::ptr::copy_nonoverlapping(self.mem.ptr().add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<(), FabricError> {
        self.check(offset, data.len())?;
        // SAFETY: in bounds (checked above); `data` is a Rust borrow, never region memory.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.mem.ptr().add(offset), data.len())
        };
        Ok(())
    }

    fn load_u64(&self, offset: usize) -> Result<u64, FabricError> {
        self.check_word(offset)?;
        Ok(self.mem.word(offset).load(Ordering::Acquire))
    }

    fn store_u64(&self, offset: usize, value: u64) -> Result<(), FabricError> {
        self.check_word(offset)?;
        self.mem.word(offset).store(value, Ordering::Release);
        Ok(())
    }

    fn compare_swap_u64(
        &self,
        offset: usize,
        expected: u64,
        desired: u64,
    ) -> Result<u64, FabricError> {
        self.check_word(offset)?;
        // Peers' compare-and-swaps are applied by the provider's atomic handlers with the CPU's
        // compare-and-exchange on this same memory (checked by this crate's tests), so this one
        // is atomic with them.
        let word = self.mem.word(offset);
        Ok(match word.compare_exchange(expected, desired, Ordering::AcqRel, Ordering::Acquire) {
            Ok(old) | Err(old) => old,
        })
    }
}
