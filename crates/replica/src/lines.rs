//! Data kept on cache lines of its own, apart from every other word (`shared.rs` says why).

use std::ops::Deref;
use std::sync::atomic::AtomicBool;

/// Holds `T` on cache lines no other data uses: 128 bytes, because x86 cores fetch lines in
/// adjacent pairs (the spatial prefetcher), so words 64 bytes apart can still bounce together.
#[repr(align(128))]
pub(crate) struct OwnLines<T>(pub T);

impl<T> Deref for OwnLines<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

const _: () = assert!(std::mem::align_of::<OwnLines<AtomicBool>>() == 128);
