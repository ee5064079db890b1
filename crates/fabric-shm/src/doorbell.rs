//! The node's doorbell: a 32-bit count in its control segment that peers raise after a control
//! write, and a futex on it that the node's idle threads wait on, so that a permission request
//! wakes the thread that serves it rather than waiting out its sleep (`mu_fabric::Fabric::
//! wait_doorbell`). The count lives in a shared mapping, so the futex is a shared one (no
//! `FUTEX_PRIVATE_FLAG`): the kernel keys it by the file's page, the same in every process.

use crate::layout::{H_DOORBELL, H_DOORBELL_WAITERS};
use crate::mapping::Mapping;
use std::sync::atomic::{AtomicU32, Ordering};

/// The count now.
pub(crate) fn count(ctl: &Mapping) -> u64 {
    u64::from(ctl.u32_at(H_DOORBELL).load(Ordering::Acquire))
}

/// Waits until the count is no longer `seen` (compared as the 32-bit word it is) or
/// `timeout_ns` has passed; returns the count.
pub(crate) fn wait(ctl: &Mapping, seen: u64, timeout_ns: u64) -> u64 {
    let word = ctl.u32_at(H_DOORBELL);
    let waiters = ctl.u32_at(H_DOORBELL_WAITERS);
    // Counted as a waiter before the count is read again: a ringer that raises the count after
    // that read sees us and wakes us (both sides' orders are sequentially consistent).
    waiters.fetch_add(1, Ordering::SeqCst);
    if word.load(Ordering::SeqCst) == seen as u32 {
        futex_wait(word, seen as u32, timeout_ns);
    }
    waiters.fetch_sub(1, Ordering::SeqCst);
    count(ctl)
}

/// Raises the count and wakes every waiter, with a system call only when one waits.
pub(crate) fn ring(ctl: &Mapping) {
    let word = ctl.u32_at(H_DOORBELL);
    word.fetch_add(1, Ordering::SeqCst);
    if ctl.u32_at(H_DOORBELL_WAITERS).load(Ordering::SeqCst) != 0 {
        futex_wake(word);
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
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

fn futex_wake(word: &AtomicU32) {
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
