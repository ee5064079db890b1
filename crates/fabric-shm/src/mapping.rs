//! Shared memory files and their mappings: every `unsafe` memory access of the backend goes
//! through [`Mapping`]. Public for the benchmark's bare ping-pong; not a stable API.

use mu_fabric::FabricError;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// A shared, read-write mapping of a whole file. The mapping stays valid until dropped, even if the
/// file is unlinked or replaced, which is what lets a peer keep a dead node's memory mapped and
/// read its death flag.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access through it is either atomic or a raw
// copy whose races with other processes are part of the fabric's documented semantics (see
// `Mapping::copy_in`). Nothing in it is tied to the thread that created it.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only hands out atomics and raw copies.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Creates `path` (owner read/write only, failing if it exists), sizes it to `len` bytes of
    /// zeros and maps it.
    pub fn create(path: &Path, len: usize) -> Result<Mapping, FabricError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| FabricError::io(format!("creating {}", path.display()), e))?;
        file.set_len(len as u64)
            .map_err(|e| FabricError::io(format!("sizing {} to {len} bytes", path.display()), e))?;
        // Reserve the memory now: on a full tmpfs this is a clear error here instead of a SIGBUS
        // at the first touch of an unbacked page.
        {
            use std::os::fd::AsRawFd;
            // SAFETY: posix_fallocate on a descriptor we own; no memory is passed.
            let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
            if rc != 0 {
                let _ = std::fs::remove_file(path);
                return Err(FabricError::io(
                    format!("reserving {len} bytes for {}", path.display()),
                    std::io::Error::from_raw_os_error(rc),
                ));
            }
        }
        Mapping::map(&file, len, path, true)
    }

    /// Maps an existing file of at least `min_len` bytes, whole.
    pub fn open(path: &Path, min_len: usize) -> Result<Mapping, FabricError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| FabricError::io(format!("opening {}", path.display()), e))?;
        let len = file
            .metadata()
            .map_err(|e| FabricError::io(format!("reading {}", path.display()), e))?
            .len() as usize;
        if len < min_len {
            return Err(FabricError::Incompatible(format!(
                "{} has {len} bytes, fewer than the {min_len} its header needs",
                path.display()
            )));
        }
        Mapping::map(&file, len, path, false)
    }

    fn map(file: &File, len: usize, path: &Path, populate: bool) -> Result<Mapping, FabricError> {
        use std::os::fd::AsRawFd;
        if len == 0 {
            return Err(FabricError::BadRegionSize { len_bytes: 0, why: "empty mapping" });
        }
        // Pre-fault new mappings so that the first operations do not take page faults.
        let flags = libc::MAP_SHARED | if populate { libc::MAP_POPULATE } else { 0 };
        // SAFETY: mapping a file we just opened read-write, with a length not larger than the
        // file; the kernel picks the address. The result is checked for MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(FabricError::io(
                format!("mapping {}", path.display()),
                std::io::Error::last_os_error(),
            ));
        }
        // A child forked without exec must not inherit the mapping: it would keep a dead node's
        // memory writable behind the fabric's back. (Children that exec lose it anyway.)
        // SAFETY: advises on exactly the range just mapped; failure only loses the advice.
        unsafe { libc::madvise(ptr, len, libc::MADV_DONTFORK) };
        let ptr = NonNull::new(ptr.cast::<u8>()).expect("mmap never returns null on success");
        Ok(Mapping { ptr, len })
    }

    pub fn len_bytes(&self) -> usize {
        self.len
    }

    /// The 8-byte word at `offset`, as an atomic.
    ///
    /// Panics if `offset` is out of range or misaligned: callers check bounds first, so this is
    /// an internal invariant, not input validation.
    pub fn u64_at(&self, offset: usize) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.len, "u64 at {offset} of {}", self.len);
        // SAFETY: in bounds and 8-byte aligned (the mapping is page aligned), shared memory that
        // lives as long as `self`; AtomicU64 has the layout of u64. Header and slot words are only
        // ever accessed atomically; region words may also be written by a peer's plain copy, the
        // race that `copy_in` documents.
        unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    /// The 4-byte word at `offset`, as an atomic. Same contract as [`Mapping::u64_at`].
    pub fn u32_at(&self, offset: usize) -> &AtomicU32 {
        assert!(offset % 4 == 0 && offset + 4 <= self.len, "u32 at {offset} of {}", self.len);
        // SAFETY: in bounds and 4-byte aligned, shared memory living as long as `self`, accessed
        // only atomically.
        unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    /// A reference to a `T` at `offset`. `T` must be a type made only of atomics (and padding),
    /// valid for the all-zero bit pattern.
    pub fn atomics_at<T: AtomicsOnly>(&self, offset: usize) -> &T {
        let size = std::mem::size_of::<T>();
        assert!(offset % std::mem::align_of::<T>() == 0 && offset + size <= self.len);
        // SAFETY: in bounds and aligned (checked above; the mapping is page aligned); the
        // `AtomicsOnly` contract makes every bit pattern another process can write valid, and all
        // access to `T` is through atomics.
        unsafe { &*self.ptr.as_ptr().add(offset).cast::<T>() }
    }

    /// Copies `data` into the mapping at `offset`.
    ///
    /// Other processes may read or write these bytes at the same time. That race is the fabric's
    /// semantics (a one-sided write races with the target's reads, as on RDMA), and protocols
    /// guard against torn reads with canaries or checksums. In the Rust memory model it is a data
    /// race, as in a seqlock: we rely on it being a plain `memcpy` over memory the compiler knows
    /// nothing about (outside any Rust allocation, reached only through raw pointers), whose torn
    /// results the protocols detect, rather than on the language's guarantees.
    pub fn copy_in(&self, offset: usize, data: &[u8]) {
        assert!(offset.checked_add(data.len()).is_some_and(|end| end <= self.len));
        // SAFETY: in bounds (checked above); `data` is a Rust borrow, never a slice of a mapping
        // (none is ever handed out), so the ranges cannot overlap. Races: see the doc comment.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len())
        }
    }

    /// Copies bytes at `offset` out of the mapping into `out`.
    pub fn copy_out(&self, offset: usize, out: &mut [u8]) {
        assert!(offset.checked_add(out.len()).is_some_and(|end| end <= self.len));
        // SAFETY: in bounds (checked above); races with writers are the fabric's semantics, as in
        // `copy_in`; `out` is a unique borrow so it cannot overlap the shared mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        }
    }

    /// Copies `len` bytes from `src` at `src_offset` to `self` at `dst_offset` (a write from a
    /// local region into a remote one, or a read the other way). The two may be the same mapping
    /// and the ranges may overlap.
    pub fn copy_from(&self, dst_offset: usize, src: &Mapping, src_offset: usize, len: usize) {
        assert!(dst_offset.checked_add(len).is_some_and(|end| end <= self.len));
        assert!(src_offset.checked_add(len).is_some_and(|end| end <= src.len));
        // SAFETY: both ranges are in bounds (checked above); `ptr::copy` allows them to overlap.
        // Races with other processes: see `copy_in`.
        unsafe {
            std::ptr::copy(src.ptr.as_ptr().add(src_offset), self.ptr.as_ptr().add(dst_offset), len)
        }
    }

    /// Fills in the page tables of the whole mapping, writable, so that no later access to it
    /// takes a page fault. Whether it did: `false` where the kernel refused (a file shorter than
    /// the mapping, no memory), which leaves the pages to fault in on use. Costs about 0.1 ms
    /// per megabyte here, so callers do it off the data path (see `crate::prefault`).
    pub fn prefault(&self) -> bool {
        // SAFETY: advises on exactly the range `map` mapped, which lives as long as `self`.
        // MADV_POPULATE_WRITE only fills page tables as a write fault would; it changes no byte.
        let rc =
            unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, libc::MADV_POPULATE_WRITE) };
        if rc == 0 {
            return true;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            // Not for touching: reading a page past the end of a shortened file would raise
            // SIGBUS.
            return false;
        }
        // A kernel older than 5.14 has no MADV_POPULATE_WRITE: touch each page instead. A read
        // of a shared tmpfs page maps it writable (tmpfs tracks no dirty pages), which is all a
        // write would do, and a read cannot race with anyone's bytes.
        let page = 4096;
        let mut at = 0;
        while at < self.len {
            // SAFETY: in bounds (`at < len`); a volatile read of one byte of shared memory
            // that lives as long as `self`.
            unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(at)) };
            at += page;
        }
        true
    }

    /// The raw address of `offset`, for the pthread calls that need one.
    pub fn raw_at(&self, offset: usize) -> *mut u8 {
        assert!(offset < self.len);
        // SAFETY: in bounds (checked above).
        unsafe { self.ptr.as_ptr().add(offset) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped; no reference into the mapping outlives
        // `self` (all accessors borrow `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Types that may be viewed in shared memory: made only of atomics and padding, valid when zeroed.
///
/// # Safety
/// Implementors must be `repr(C)`, contain only atomics and byte padding, and be valid for every
/// bit pattern.
pub unsafe trait AtomicsOnly {}

// SAFETY: `Slot<Hardware>` is repr(C), made of two AtomicU64 words and u8 padding arrays.
unsafe impl AtomicsOnly for crate::guard::Slot<crate::guard::Hardware> {}

/// Creates a private directory (mode 0700), or checks that an existing one is private and ours.
pub fn ensure_private_dir(path: &Path) -> Result<(), FabricError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) => {
            return Err(FabricError::io(format!("creating run directory {}", path.display()), e))
        }
    }
    let meta = std::fs::metadata(path)
        .map_err(|e| FabricError::io(format!("reading run directory {}", path.display()), e))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if meta.uid() != uid {
        return Err(FabricError::Config(format!(
            "run directory {} belongs to uid {}, not to this user (uid {uid})",
            path.display(),
            meta.uid()
        )));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(FabricError::Config(format!(
            "run directory {} is accessible to other users (mode {mode:o}); make it private with \
             `chmod 700` or choose another directory",
            path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Minor page faults taken by this thread so far.
    fn minor_faults() -> i64 {
        // SAFETY: getrusage fills the zeroed struct we pass; RUSAGE_THREAD needs nothing else.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) }, 0);
        usage.ru_minflt
    }

    /// Writes a byte into every page of `map`; returns the page faults that took.
    fn faults_writing_every_page(map: &Mapping) -> i64 {
        let before = minor_faults();
        for at in (0..map.len_bytes()).step_by(4096) {
            map.copy_in(at, &[1]);
        }
        minor_faults() - before
    }

    #[test]
    fn a_prefaulted_mapping_takes_no_page_fault_on_writes() {
        let dir = std::env::temp_dir().join(format!("mu-shm-prefault-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        ensure_private_dir(&dir).unwrap();
        let path = dir.join("region");
        let len = 4 << 20;
        let _owner = Mapping::create(&path, len).unwrap();
        let pages = (len / 4096) as i64;

        // A peer's view, as binding maps it: no page tables yet.
        let cold = Mapping::open(&path, 8).unwrap();
        let cold_faults = faults_writing_every_page(&cold);
        assert!(cold_faults >= pages / 2, "{cold_faults} faults for {pages} pages: not cold");

        let warm = Mapping::open(&path, 8).unwrap();
        assert!(warm.prefault());
        let warm_faults = faults_writing_every_page(&warm);
        assert!(warm_faults < pages / 100, "{warm_faults} faults for {pages} prefaulted pages");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
