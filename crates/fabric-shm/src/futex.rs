//! Futex calls on words of shared mappings (no `FUTEX_PRIVATE_FLAG`: the kernel keys them by
//! the file's page, the same in every process that maps it).

use std::sync::atomic::AtomicU32;

/// Sleeps while `word` equals `expected`, at most `timeout_ns`. Returns on a wake, a timeout,
/// a signal, or at once if the word differs: callers read the word again.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let timeout = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `word` is a live, 4-byte-aligned word of a shared mapping that outlives the call;
    // FUTEX_WAIT reads it and sleeps while it equals `expected`, at most `timeout` (relative);
    // the other arguments are unused by this operation. Every outcome (woken, timed out, the
    // word already changed, a signal) is fine: the caller reads the count again.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &timeout as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every waiter on `word`.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: as in `futex_wait`; FUTEX_WAKE only reads the address to find its waiters.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}
