//! The C shim's functions (csrc/shim.c) and owning wrappers around its handles. Every `unsafe`
//! call into libfabric of the backend is in this file.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::NonNull;

#[repr(C)]
struct RawDomain {
    _private: [u8; 0],
}
#[repr(C)]
struct RawEp {
    _private: [u8; 0],
}
#[repr(C)]
struct RawMr {
    _private: [u8; 0],
}

/// One completion read from a completion queue: the operation's context, and 0 or the positive
/// libfabric error number.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct RawCompletion {
    pub context: u64,
    pub err: i32,
    pub prov_errno: i32,
}

const SIGNALED: c_int = 1;
const INJECT: c_int = 2;

extern "C" {
    fn mu_ofi_strerror(rc: c_int) -> *const c_char;
    fn mu_ofi_domain_open(
        provider: *const c_char,
        node: *const c_char,
        service: *const c_char,
        out: *mut *mut RawDomain,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn mu_ofi_domain_inject_bytes(d: *const RawDomain) -> usize;
    fn mu_ofi_domain_manual_progress(d: *const RawDomain) -> c_int;
    fn mu_ofi_domain_close(d: *mut RawDomain);
    fn mu_ofi_ep_open(
        d: *mut RawDomain,
        node: *const c_char,
        service: *const c_char,
        depth: usize,
        out: *mut *mut RawEp,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn mu_ofi_ep_close(e: *mut RawEp);
    fn mu_ofi_av_insert(
        e: *mut RawEp,
        node: *const c_char,
        service: *const c_char,
        addr: *mut u64,
    ) -> c_int;
    fn mu_ofi_mr_reg(
        d: *mut RawDomain,
        buf: *mut c_void,
        len: usize,
        remote_read: c_int,
        remote_write: c_int,
        key: u64,
        out: *mut *mut RawMr,
    ) -> c_int;
    fn mu_ofi_mr_close(mr: *mut RawMr) -> c_int;
    fn mu_ofi_write(
        e: *mut RawEp,
        buf: *const c_void,
        len: usize,
        dest: u64,
        offset: u64,
        key: u64,
        context: u64,
        flags: c_int,
    ) -> isize;
    fn mu_ofi_read(
        e: *mut RawEp,
        buf: *mut c_void,
        len: usize,
        dest: u64,
        offset: u64,
        key: u64,
        context: u64,
        flags: c_int,
    ) -> isize;
    fn mu_ofi_cas(
        e: *mut RawEp,
        desired: *mut u64,
        compare: *mut u64,
        result: *mut u64,
        dest: u64,
        offset: u64,
        key: u64,
        context: u64,
        flags: c_int,
    ) -> isize;
    fn mu_ofi_cq_read(e: *mut RawEp, out: *mut RawCompletion, max: usize) -> isize;
}

/// libfabric's error numbers the backend tells apart (positive, as in completions).
pub const FI_EAGAIN: i32 = 11;

/// The text of a libfabric error number (either sign).
pub fn strerror(rc: i64) -> String {
    // SAFETY: fi_strerror returns a pointer to a static, NUL-terminated string for any number.
    unsafe { CStr::from_ptr(mu_ofi_strerror(rc as c_int)) }.to_string_lossy().into_owned()
}

fn cstring(what: &str, s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what} {s:?} contains a NUL byte"))
}

fn err_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A fabric and a domain of one provider: what memory registrations and endpoints belong to.
pub struct Domain {
    raw: NonNull<RawDomain>,
}

// SAFETY: the domain is opened with FI_THREAD_SAFE, so libfabric serializes calls on it; the
// handle itself is only freed in `Drop`, once.
unsafe impl Send for Domain {}
// SAFETY: as above.
unsafe impl Sync for Domain {}

impl Domain {
    /// Opens `provider` (`"sockets"`, `"tcp;ofi_rxm"`) on the interface of `host`.
    pub fn open(provider: &str, host: &str, port: u16) -> Result<Domain, String> {
        let prov = cstring("provider", provider)?;
        let node = cstring("host", host)?;
        let service = cstring("port", &port.to_string())?;
        let mut raw = std::ptr::null_mut();
        let mut err = [0u8; 256];
        // SAFETY: the strings are NUL-terminated and live across the call; `err` is writable
        // for its length; `raw` receives the handle only on success.
        let rc = unsafe {
            mu_ofi_domain_open(
                prov.as_ptr(),
                node.as_ptr(),
                service.as_ptr(),
                &mut raw,
                err.as_mut_ptr().cast(),
                err.len(),
            )
        };
        match NonNull::new(raw) {
            Some(raw) if rc == 0 => Ok(Domain { raw }),
            _ => Err(err_text(&err)),
        }
    }

    /// The most bytes a write may carry inline (copied at post time).
    pub fn inject_bytes(&self) -> usize {
        // SAFETY: the handle is live for as long as `self`.
        unsafe { mu_ofi_domain_inject_bytes(self.raw.as_ptr()) }
    }

    /// Whether incoming operations are applied only while someone calls into the provider.
    pub fn manual_progress(&self) -> bool {
        // SAFETY: the handle is live for as long as `self`.
        unsafe { mu_ofi_domain_manual_progress(self.raw.as_ptr()) != 0 }
    }

    /// Registers `len` bytes at `buf` under `key`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay allocated until the returned registration is dropped.
    pub unsafe fn register(
        &self,
        buf: *mut u8,
        len: usize,
        remote_read: bool,
        remote_write: bool,
        key: u64,
    ) -> Result<MemoryRegistration, String> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: the domain is live; the caller keeps the memory allocated (see above).
        let rc = unsafe {
            mu_ofi_mr_reg(
                self.raw.as_ptr(),
                buf.cast(),
                len,
                remote_read as c_int,
                remote_write as c_int,
                key,
                &mut raw,
            )
        };
        match NonNull::new(raw) {
            Some(raw) if rc == 0 => Ok(MemoryRegistration { raw }),
            _ => Err(format!("fi_mr_reg (key {key:#x}): {}", strerror(rc as i64))),
        }
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: the handle came from mu_ofi_domain_open and is closed once; every endpoint and
        // registration of the domain holds an `Arc` to the node that owns it, so they are gone.
        unsafe { mu_ofi_domain_close(self.raw.as_ptr()) }
    }
}

/// A memory registration: peers holding its key may access its bytes until it is dropped.
pub struct MemoryRegistration {
    raw: NonNull<RawMr>,
}

// SAFETY: a registration is only closed, once, in `Drop`; the domain is thread safe.
unsafe impl Send for MemoryRegistration {}
// SAFETY: as above; `&MemoryRegistration` allows nothing.
unsafe impl Sync for MemoryRegistration {}

impl Drop for MemoryRegistration {
    fn drop(&mut self) {
        // SAFETY: closing the handle mu_ofi_mr_reg returned, once. After it returns the
        // provider refuses the key.
        unsafe { mu_ofi_mr_close(self.raw.as_ptr()) };
    }
}

/// A reliable-datagram endpoint bound to one local address, with its address table and
/// completion queue.
pub struct RawEndpoint {
    raw: NonNull<RawEp>,
}

// SAFETY: the domain is FI_THREAD_SAFE: libfabric serializes calls on the endpoint and its
// queue; the handle is freed only in `Drop`.
unsafe impl Send for RawEndpoint {}
// SAFETY: as above.
unsafe impl Sync for RawEndpoint {}

/// Why an operation could not be posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostFailure {
    /// The provider's queue is full (or a connection is still being set up): progress and retry.
    Again,
    /// Any other error, as a positive libfabric error number.
    Error(i32),
}

fn posted(rc: isize) -> Result<(), PostFailure> {
    match rc {
        0 => Ok(()),
        rc if -rc as i32 == FI_EAGAIN => Err(PostFailure::Again),
        rc => Err(PostFailure::Error(-rc as i32)),
    }
}

fn flags(signaled: bool, inject: bool) -> c_int {
    (if signaled { SIGNALED } else { 0 }) | (if inject { INJECT } else { 0 })
}

impl RawEndpoint {
    /// Opens an endpoint of `domain` listening on `host:port`, with a completion queue of
    /// `depth` entries.
    pub fn open(domain: &Domain, host: &str, port: u16, depth: usize) -> Result<Self, String> {
        let node = cstring("host", host)?;
        let service = cstring("port", &port.to_string())?;
        let mut raw = std::ptr::null_mut();
        let mut err = [0u8; 256];
        // SAFETY: the domain is live; strings are NUL-terminated; `err` is writable.
        let rc = unsafe {
            mu_ofi_ep_open(
                domain.raw.as_ptr(),
                node.as_ptr(),
                service.as_ptr(),
                depth,
                &mut raw,
                err.as_mut_ptr().cast(),
                err.len(),
            )
        };
        match NonNull::new(raw) {
            Some(raw) if rc == 0 => Ok(RawEndpoint { raw }),
            _ => Err(err_text(&err)),
        }
    }

    /// Resolves `host:port` into an address of this endpoint's table.
    pub fn insert_address(&self, host: &str, port: u16) -> Result<u64, String> {
        let node = cstring("host", host)?;
        let service = cstring("port", &port.to_string())?;
        let mut addr = 0u64;
        // SAFETY: the endpoint is live; strings are NUL-terminated; `addr` is writable.
        let rc = unsafe {
            mu_ofi_av_insert(self.raw.as_ptr(), node.as_ptr(), service.as_ptr(), &mut addr)
        };
        if rc == 0 {
            Ok(addr)
        } else {
            Err(format!("fi_av_insertsvc {host}:{port}: {}", strerror(rc as i64)))
        }
    }

    /// Posts a write of `len` bytes at `buf` to `offset` in the registration `key` of `dest`.
    ///
    /// # Safety
    /// Unless `inject`, `buf..buf+len` must stay readable until the operation completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn write(
        &self,
        buf: *const u8,
        len: usize,
        dest: u64,
        offset: u64,
        key: u64,
        context: u64,
        signaled: bool,
        inject: bool,
    ) -> Result<(), PostFailure> {
        // SAFETY: the endpoint is live; the caller keeps `buf` valid as required above.
        posted(unsafe {
            mu_ofi_write(
                self.raw.as_ptr(),
                buf.cast(),
                len,
                dest,
                offset,
                key,
                context,
                flags(signaled, inject),
            )
        })
    }

    /// Posts a read of `len` bytes at `offset` in the registration `key` of `dest` into `buf`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay writable until the operation completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn read(
        &self,
        buf: *mut u8,
        len: usize,
        dest: u64,
        offset: u64,
        key: u64,
        context: u64,
    ) -> Result<(), PostFailure> {
        // SAFETY: the endpoint is live; the caller keeps `buf` valid as required above.
        posted(unsafe {
            mu_ofi_read(self.raw.as_ptr(), buf.cast(), len, dest, offset, key, context, SIGNALED)
        })
    }

    /// Posts a 64-bit compare-and-swap; `words` is `[desired, expected, previous]`.
    ///
    /// # Safety
    /// `words` must stay allocated and untouched until the operation completes.
    pub unsafe fn compare_swap(
        &self,
        words: *mut [u64; 3],
        dest: u64,
        offset: u64,
        key: u64,
        context: u64,
    ) -> Result<(), PostFailure> {
        let w = words.cast::<u64>();
        // SAFETY: the endpoint is live; the three words are in one allocation the caller keeps
        // (see above).
        posted(unsafe {
            mu_ofi_cas(
                self.raw.as_ptr(),
                w,
                w.add(1),
                w.add(2),
                dest,
                offset,
                key,
                context,
                SIGNALED,
            )
        })
    }

    /// Reads completions into `out`; returns how many. Reading the queue is also what drives the
    /// provider's progress (incoming operations included) for this endpoint.
    pub fn read_completions(&self, out: &mut [RawCompletion]) -> Result<usize, String> {
        // SAFETY: the endpoint is live; `out` is writable for its length.
        let n = unsafe { mu_ofi_cq_read(self.raw.as_ptr(), out.as_mut_ptr(), out.len()) };
        if n < 0 {
            Err(format!("fi_cq_read: {}", strerror(n as i64)))
        } else {
            Ok(n as usize)
        }
    }
}

impl Drop for RawEndpoint {
    fn drop(&mut self) {
        // SAFETY: the handle came from mu_ofi_ep_open and is closed once. Closing the endpoint
        // closes its connections: nothing more arrives through it.
        unsafe { mu_ofi_ep_close(self.raw.as_ptr()) }
    }
}
