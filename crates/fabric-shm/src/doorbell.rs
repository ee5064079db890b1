//! The node's doorbell: a 32-bit count in its control segment that peers raise after a control
//! write, and a futex on it that the node's idle threads wait on, so that a permission request
//! wakes the thread that serves it rather than waiting out its sleep (`mu_fabric::Fabric::
//! wait_doorbell`). The count lives in a shared mapping, so the futex is a shared one (no
//! `FUTEX_PRIVATE_FLAG`): the kernel keys it by the file's page, the same in every process.

use crate::futex::{futex_wait, futex_wake};
use crate::layout::{H_DOORBELL, H_DOORBELL_WAITERS};
use crate::mapping::Mapping;
use std::sync::atomic::Ordering;

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
