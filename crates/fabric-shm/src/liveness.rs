//! A node's death flag, kept by the kernel.
//!
//! Each node holds a process-shared robust pthread mutex in its control segment, locked by a
//! dedicated thread for the node's whole life. When that thread dies — the process is killed, or
//! the node is dropped, which ends the thread without unlocking — the kernel walks the thread's
//! robust list and sets `FUTEX_OWNER_DIED` in the mutex's lock word. A peer reads that one word
//! after every operation (a shared cache line that is never written while the node lives, so the
//! read is cheap) to tell a live target from a dead one: a dead target cannot acknowledge.
//!
//! The lock word is the first 32-bit word of glibc's `pthread_mutex_t` on Linux and holds the
//! owner's thread id while locked.

use crate::layout::H_LIVENESS;
use crate::mapping::Mapping;
use mu_fabric::FabricError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

const FUTEX_OWNER_DIED: u32 = 0x4000_0000;
const FUTEX_TID_MASK: u32 = 0x3fff_ffff;
/// Set in the lock word by a thread that sleeps on it (`crate::crash_watch`): the kernel wakes
/// one such thread when it marks the owner dead.
pub(crate) const FUTEX_WAITERS: u32 = 0x8000_0000;

/// Whether the node whose control segment is `ctl` is alive.
pub fn is_alive(ctl: &Mapping) -> bool {
    owner_tid(ctl).is_some()
}

/// The id of the thread that holds the liveness lock of the node whose control segment is `ctl`,
/// if it is held.
pub fn owner_tid(ctl: &Mapping) -> Option<u32> {
    let word = ctl.u32_at(H_LIVENESS).load(Ordering::Acquire);
    word_alive(word).then_some(word & FUTEX_TID_MASK)
}

/// Whether a liveness lock word says its owner lives: held, and not marked dead by the kernel.
pub(crate) fn word_alive(word: u32) -> bool {
    word & FUTEX_OWNER_DIED == 0 && word & FUTEX_TID_MASK != 0
}

/// The thread that holds a node's liveness mutex. Dropping the holder ends the thread without
/// unlocking, so the node reads as dead from then on.
pub struct Holder {
    /// Set to end the thread.
    stopping: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Holder {
    /// Initializes the mutex in `ctl` (a new, zeroed control segment) and locks it from a new
    /// thread; returns once it is locked. With `spin`, that thread spins on a core instead of
    /// sleeping (see [`crate::ShmConfig::liveness_spin`]).
    pub fn start(ctl: Arc<Mapping>, spin: bool) -> Result<Holder, FabricError> {
        init_robust_mutex(&ctl)?;
        let (locked_tx, locked_rx) = mpsc::channel::<Result<(), String>>();
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = stopping.clone();
        let thread = std::thread::Builder::new()
            .name("mu-liveness".into())
            .spawn(move || {
                // Killed, this thread's exit is what marks the node dead: it should not wait
                // out the slice of a thread spinning on its CPU to get there.
                let _ = mu_cpu::request_slice_ns(mu_cpu::SLICE_NS_MIN);
                let mutex = ctl.raw_at(H_LIVENESS).cast::<libc::pthread_mutex_t>();
                // SAFETY: `mutex` points at the mutex initialized above, inside a mapping that
                // this thread keeps alive through its `Arc`.
                let rc = unsafe { libc::pthread_mutex_lock(mutex) };
                let _ = locked_tx.send(if rc == 0 {
                    Ok(())
                } else {
                    Err(format!("pthread_mutex_lock: {rc}"))
                });
                // Wait until told to stop, then exit still holding the lock. `park` may return
                // early, and returns at once if the holder unparked us first.
                while !stop.load(Ordering::Acquire) {
                    if spin {
                        std::hint::spin_loop();
                    } else {
                        std::thread::park();
                    }
                }
            })
            .map_err(|e| FabricError::io("starting the liveness thread", e))?;
        // Built first, so that on an error below dropping it ends the thread.
        let holder = Holder { stopping, thread: Some(thread) };
        match locked_rx.recv() {
            Ok(Ok(())) => Ok(holder),
            Ok(Err(e)) => {
                Err(FabricError::Io { context: "locking the liveness mutex".into(), message: e })
            }
            Err(_) => Err(FabricError::Io {
                context: "locking the liveness mutex".into(),
                message: "thread died".into(),
            }),
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn init_robust_mutex(ctl: &Mapping) -> Result<(), FabricError> {
    let mutex = ctl.raw_at(H_LIVENESS).cast::<libc::pthread_mutex_t>();
    // SAFETY: `attr` is initialized by pthread_mutexattr_init before use and destroyed after;
    // `mutex` points at LIVENESS_BYTES (>= size_of::<pthread_mutex_t>(), checked at compile time)
    // suitably aligned bytes of a fresh mapping that no other process uses yet.
    unsafe {
        let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
        let mut rc = libc::pthread_mutexattr_init(&mut attr);
        if rc == 0 {
            rc = libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED);
        }
        if rc == 0 {
            rc = libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST);
        }
        if rc == 0 {
            rc = libc::pthread_mutex_init(mutex, &attr);
        }
        libc::pthread_mutexattr_destroy(&mut attr);
        if rc != 0 {
            return Err(FabricError::Io {
                context: "initializing the liveness mutex".into(),
                message: std::io::Error::from_raw_os_error(rc).to_string(),
            });
        }
    }
    Ok(())
}
