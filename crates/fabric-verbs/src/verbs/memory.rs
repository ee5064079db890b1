//! Page-aligned, zeroed memory for regions and scratch words: every raw access to memory a NIC
//! may also write goes through [`Memory`].

use mu_fabric::FabricError;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

/// An anonymous private mapping of `len_bytes` (rounded up to pages), zeroed, unmapped on drop.
/// Its address never changes, which is what a memory registration needs.
pub(crate) struct Memory {
    ptr: NonNull<u8>,
    len_bytes: usize,
}

// SAFETY: plain memory owned by this value; every access through it is atomic or a raw copy whose
// races with the NIC's DMA are the fabric's documented semantics (a region is shared with peers).
unsafe impl Send for Memory {}
// SAFETY: as above; `&Memory` hands out only atomics and raw copies.
unsafe impl Sync for Memory {}

impl Memory {
    pub(crate) fn new(len_bytes: usize) -> Result<Memory, FabricError> {
        let mapped = len_bytes.max(1);
        // SAFETY: an anonymous mapping at an address of the kernel's choosing; no memory of ours
        // is passed, and the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(FabricError::io(
                format!("mapping {len_bytes} bytes"),
                std::io::Error::last_os_error(),
            ));
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| FabricError::Io {
            context: format!("mapping {len_bytes} bytes"),
            message: "mmap returned a null address".into(),
        })?;
        Ok(Memory { ptr, len_bytes: mapped })
    }

    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Copies `data` to `offset`. The caller has checked `offset + data.len() <= len`.
    pub(crate) fn copy_in(&self, offset: usize, data: &[u8]) {
        assert!(offset.checked_add(data.len()).is_some_and(|end| end <= self.len_bytes));
        // SAFETY: the destination lies inside the mapping (asserted) and cannot overlap `data`,
        // which Rust code cannot borrow from this mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len())
        }
    }

    /// Copies `out.len()` bytes at `offset` into `out`. The caller has checked the range.
    pub(crate) fn copy_out(&self, offset: usize, out: &mut [u8]) {
        assert!(offset.checked_add(out.len()).is_some_and(|end| end <= self.len_bytes));
        // SAFETY: the source lies inside the mapping (asserted) and `out` is a distinct buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        }
    }

    /// The 8-byte word at `offset` (8-byte aligned, inside the mapping) as an atomic.
    pub(crate) fn u64_at(&self, offset: usize) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset.checked_add(8).is_some_and(|end| end <= self.len_bytes));
        // SAFETY: the mapping is page-aligned, so an 8-aligned offset is an 8-aligned address,
        // inside the mapping (asserted), which lives as long as `&self`; the word is only ever
        // accessed atomically by Rust code (the NIC's accesses are its own).
        unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU64>() }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped; every registration of it was dropped first
        // (the owners declare the registration before the memory, and fields drop in order).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len_bytes) };
    }
}
