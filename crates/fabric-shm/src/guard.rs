//! The guard that makes revocation a barrier on shared memory.
//!
//! On RDMA the target's NIC checks every incoming packet against the queue pair's current flags,
//! so once `ibv_modify_qp` returns, nothing the new flags forbid lands. On shared memory the
//! *writer's* CPU does the copy, so the check and the copy must be fenced against the revoke.
//! Each side of a connection owns one [`Slot`] in its node's control segment, holding two words
//! on separate cache lines:
//!
//! * `acl` — written only by the slot's owner (the target): the state of its side of the
//!   connection, the access flags it grants the peer, and the peer incarnation it is bound to;
//! * `inflight` — written only by the peer (the writer): its incarnation (high 32 bits) and a
//!   sequence number (low 32 bits) that is odd while it has an operation in flight into this node.
//!   The incarnation tells the revoker *whose* operation it waits for: a writer that died in flight
//!   leaves an odd word behind, and the revoker must neither wait for the dead nor fence the
//!   node's next, innocent incarnation because of it.
//!
//! Writer, for each operation: store `inflight = odd` (SeqCst); load `acl` (SeqCst); if allowed,
//! copy; store `inflight = even` (release). Revoker: store the new `acl` (SeqCst); SeqCst fence;
//! load `inflight` (acquire); if it is odd, wait until it changes. This is Dekker's handshake: of
//! the writer's check and the revoker's check, at least one sees the other's store. Either the
//! writer sees the revocation and copies nothing, or the revoker sees the writer in flight and
//! waits for its copy to end. Any operation that starts later sees the new flags, so the revoker
//! waits only for the one it saw (a changed word), never for a writer that keeps trying.
//!
//! The writer's side is the hot path, so it uses a SeqCst store and a SeqCst load, which the
//! language orders in one total order (on x86 the store is one `xchg`), instead of a store, a
//! full fence (`mfence`) and a load; measured on the shared-memory fabric's post path, the fence
//! cost about as much as the rest of the guard. The revoker's side is the slow path and keeps its
//! explicit fence.
//!
//! A writer that stops in flight (SIGSTOP, descheduled for long) would make the revoker wait for
//! ever. The fabric bounds the wait and then fences the writer for good (it kills the writer's
//! process and waits for its death), the shared-memory analogue of cycling an RDMA queue pair.
//!
//! Only one thread ever writes a given `inflight` word: the connection is attached to one endpoint,
//! driven by one thread, and a node refuses to start while an earlier incarnation of it is alive.
//! `acl` is written by the owner's control plane and, to move the side to `Error` after a failed
//! operation, by the owner's own data-path thread, always by compare-and-swap from a value it saw.
//!
//! The protocol is written against [`MemoryModel`] so that `tests/guard_model.rs` runs this very
//! code under the shuttle model checker.
//!
//! Rejected: an asymmetric form in which writers enter with a compiler fence only and revokers
//! issue `membarrier(2)`; `docs/fabric.md` says what its hardware check found.

use mu_fabric::{Access, QpState};
use std::sync::atomic::Ordering;

/// The atomics the guard is written against.
pub trait MemoryModel {
    type Word: AtomicWord;
    /// A sequentially consistent fence.
    fn fence_seq_cst();
}

/// An atomic 64-bit word.
pub trait AtomicWord: Send + Sync {
    fn load(&self, order: Ordering) -> u64;
    fn store(&self, value: u64, order: Ordering);
    fn compare_exchange(&self, current: u64, new: u64) -> Result<u64, u64>;
}

/// The hardware's atomics.
pub struct Hardware;

impl MemoryModel for Hardware {
    type Word = std::sync::atomic::AtomicU64;
    fn fence_seq_cst() {
        std::sync::atomic::fence(Ordering::SeqCst);
    }
}

impl AtomicWord for std::sync::atomic::AtomicU64 {
    fn load(&self, order: Ordering) -> u64 {
        std::sync::atomic::AtomicU64::load(self, order)
    }
    fn store(&self, value: u64, order: Ordering) {
        std::sync::atomic::AtomicU64::store(self, value, order)
    }
    fn compare_exchange(&self, current: u64, new: u64) -> Result<u64, u64> {
        std::sync::atomic::AtomicU64::compare_exchange(
            self,
            current,
            new,
            Ordering::SeqCst,
            Ordering::SeqCst,
        )
    }
}

/// One side of a connection, as seen by both ends. `repr(C)` with each word on its own cache line:
/// the writer bounces `inflight` on every operation and must not drag `acl` along.
#[repr(C, align(64))]
pub struct Slot<M: MemoryModel = Hardware> {
    acl: M::Word,
    _pad_acl: [u8; 56],
    inflight: M::Word,
    _pad_inflight: [u8; 56],
}

const _: () = assert!(std::mem::size_of::<Slot>() == 128);
const _: () = assert!(std::mem::align_of::<Slot>() == 64);

/// The decoded `acl` word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acl {
    /// The peer incarnation this side is bound to (0: none).
    pub peer_incarnation: u32,
    pub state: QpState,
    pub access: Access,
}

impl Acl {
    pub const RESET: Acl = Acl { peer_incarnation: 0, state: QpState::Reset, access: Access::NONE };

    pub fn pack(self) -> u64 {
        (u64::from(self.peer_incarnation) << 32)
            | (u64::from(self.state as u8) << 8)
            | u64::from(self.access.bits())
    }

    /// Whether a writer admitted under `before` might not be under `self`: access taken away,
    /// a state that admits nobody, or another peer incarnation. Only such a change has to be a
    /// barrier.
    pub fn takes_away_from(self, before: Acl) -> bool {
        self.access.revokes_from(before.access)
            || !self.state.accepts_remote()
            || self.peer_incarnation != before.peer_incarnation
    }

    pub fn unpack(word: u64) -> Acl {
        Acl {
            peer_incarnation: (word >> 32) as u32,
            // Only this module writes the word, always from a valid state.
            state: QpState::from_u8((word >> 8) as u8).unwrap_or(QpState::Error),
            access: Access::from_bits_truncate(word as u8),
        }
    }
}

/// Why the guard refused an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The target's side is bound to another incarnation of the writer (or to none): on RDMA the
    /// packets would be dropped and the writer would see retry exceeded.
    WrongIncarnation,
    /// The target's side is not ready to receive, or does not grant the access needed.
    Denied,
}

impl<M: MemoryModel> Slot<M> {
    /// A slot in the reset state. Real slots live in shared memory and start zeroed, which is the
    /// same bit pattern.
    pub fn new(acl: M::Word, inflight: M::Word) -> Self {
        Slot { acl, _pad_acl: [0; 56], inflight, _pad_inflight: [0; 56] }
    }

    // ---- owner (target) side -----------------------------------------------------------------

    /// The current `acl`.
    pub fn acl(&self) -> Acl {
        Acl::unpack(self.acl.load(Ordering::Acquire))
    }

    /// Publishes a new `acl` and, if the peer was in flight when it did, returns the in-flight
    /// word to wait on with [`Slot::still_in_flight`] ([`in_flight_incarnation`] says whose it
    /// is). Once this returns `None`, or the word has moved on, or its incarnation is dead, no
    /// operation that the new `acl` forbids can land.
    pub fn publish(&self, acl: Acl) -> Option<u64> {
        self.acl.store(acl.pack(), Ordering::SeqCst);
        M::fence_seq_cst();
        let word = self.inflight.load(Ordering::Acquire);
        (word % 2 == 1).then_some(word)
    }

    /// Like [`Slot::publish`], but only if the `acl` is still `before`; otherwise returns the
    /// `acl` found. The owner's data path may move the side to `Error` at any moment, and a control
    /// change decided from a stale `acl` must not silently undo that, nor base its barrier on it.
    pub fn replace(&self, before: Acl, acl: Acl) -> Result<Option<u64>, Acl> {
        self.acl.compare_exchange(before.pack(), acl.pack()).map_err(Acl::unpack)?;
        M::fence_seq_cst();
        let word = self.inflight.load(Ordering::Acquire);
        Ok((word % 2 == 1).then_some(word))
    }

    /// Whether the operation seen in flight as `word` is still in flight.
    pub fn still_in_flight(&self, word: u64) -> bool {
        self.inflight.load(Ordering::Acquire) == word
    }

    /// The peer's in-flight word (odd while it has an operation in flight here).
    pub fn inflight_seq(&self) -> u64 {
        self.inflight.load(Ordering::Acquire)
    }

    /// Moves the side to `Error` if its `acl` is still `seen`; returns whether it did. A failed
    /// operation on an old connection must not break a connection the owner has re-established
    /// (or changed) since. Not a barrier: it does not wait for an in-flight peer.
    pub fn move_to_error(&self, seen: Acl) -> bool {
        let error = Acl { state: QpState::Error, ..seen };
        self.acl.compare_exchange(seen.pack(), error.pack()).is_ok()
    }

    // ---- peer (writer) side -------------------------------------------------------------------

    /// The first sequence number a newly attached writer uses: even, so the parity stays
    /// meaningful whatever an earlier (dead) writer left behind.
    pub fn writer_start_seq(&self) -> u64 {
        let low = self.inflight.load(Ordering::Acquire) as u32;
        u64::from(low.wrapping_add(low % 2))
    }

    /// Enters the slot for an operation needing `needed`, as the writer incarnation
    /// `incarnation`. `seq` is the writer's own even sequence number. On success the caller
    /// copies, then calls [`Slot::exit`]; on refusal nothing is in flight any more.
    pub fn enter(&self, seq: &mut u64, incarnation: u32, needed: Access) -> Result<(), Refusal> {
        assert!(*seq % 2 == 0, "a writer enters only between operations");
        self.inflight.store(in_flight_word(incarnation, *seq + 1), Ordering::SeqCst);
        let acl = Acl::unpack(self.acl.load(Ordering::SeqCst));
        let refusal = if acl.peer_incarnation != incarnation {
            Some(Refusal::WrongIncarnation)
        } else if !acl.state.accepts_remote() || !acl.access.contains(needed) {
            Some(Refusal::Denied)
        } else {
            None
        };
        match refusal {
            None => Ok(()),
            Some(r) => {
                self.exit(seq, incarnation);
                Err(r)
            }
        }
    }

    /// Leaves the slot after the copy: the copy's stores are ordered before this release store.
    pub fn exit(&self, seq: &mut u64, incarnation: u32) {
        *seq += 2;
        self.inflight.store(in_flight_word(incarnation, *seq), Ordering::Release);
    }
}

/// The `inflight` word for a writer incarnation and sequence number (its low 32 bits: wrapping
/// keeps the parity).
fn in_flight_word(incarnation: u32, seq: u64) -> u64 {
    (u64::from(incarnation) << 32) | (seq & 0xffff_ffff)
}

/// The writer incarnation an `inflight` word belongs to.
pub fn in_flight_incarnation(word: u64) -> u32 {
    (word >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn slot() -> Slot {
        Slot::new(AtomicU64::new(0), AtomicU64::new(0))
    }

    #[test]
    fn acl_round_trips() {
        let acl =
            Acl { peer_incarnation: 0xdead_beef, state: QpState::ReadyToSend, access: Access::ALL };
        assert_eq!(Acl::unpack(acl.pack()), acl);
        assert_eq!(Acl::unpack(0), Acl::RESET);
    }

    #[test]
    fn writer_is_refused_unless_granted_and_bound() {
        let s = slot();
        let mut seq = s.writer_start_seq();
        assert_eq!(s.enter(&mut seq, 7, Access::WRITE), Err(Refusal::WrongIncarnation));
        s.publish(Acl { peer_incarnation: 7, state: QpState::ReadyToSend, access: Access::READ });
        assert_eq!(s.enter(&mut seq, 7, Access::WRITE), Err(Refusal::Denied));
        s.publish(Acl { peer_incarnation: 7, state: QpState::Init, access: Access::WRITE });
        assert_eq!(s.enter(&mut seq, 7, Access::WRITE), Err(Refusal::Denied));
        s.publish(Acl {
            peer_incarnation: 7,
            state: QpState::ReadyToReceive,
            access: Access::WRITE,
        });
        assert_eq!(s.enter(&mut seq, 7, Access::WRITE), Ok(()));
        // While the writer is in flight, a revoke sees it and must wait.
        let seen = s.publish(Acl { access: Access::READ, ..s.acl() }).expect("in flight");
        assert!(s.still_in_flight(seen));
        assert_eq!(in_flight_incarnation(seen), 7);
        s.exit(&mut seq, 7);
        assert!(!s.still_in_flight(seen));
        assert_eq!(s.publish(s.acl()), None);
    }

    #[test]
    fn a_dead_writers_word_names_its_incarnation() {
        let s = slot();
        let mut dead = 4;
        let bound = Acl { peer_incarnation: 1, state: QpState::ReadyToSend, access: Access::ALL };
        s.publish(bound);
        s.enter(&mut dead, 1, Access::WRITE).unwrap(); // and never exits
        let left = s.publish(bound).expect("odd word left behind");
        assert_eq!(in_flight_incarnation(left), 1, "the revoker can tell whose operation it is");
        let mut seq = s.writer_start_seq();
        assert_eq!(seq % 2, 0);
        assert_eq!(s.enter(&mut seq, 2, Access::WRITE), Err(Refusal::WrongIncarnation));
        assert_eq!(s.publish(bound), None, "the successor's refusal cleared the stale word");
    }

    #[test]
    fn replace_changes_only_what_it_saw() {
        let s = slot();
        let seen = Acl { peer_incarnation: 1, state: QpState::ReadyToSend, access: Access::ALL };
        s.publish(seen);
        assert!(s.move_to_error(seen), "the data path breaks the side");
        let read_only = Acl { access: Access::READ, ..seen };
        let found = s.replace(seen, read_only).expect_err("a stale change must not land");
        assert_eq!(found.state, QpState::Error);
        assert_eq!(s.replace(found, Acl { access: Access::READ, ..found }), Ok(None));
        assert_eq!(s.acl().state, QpState::Error, "the error stays");
    }

    #[test]
    fn move_to_error_backs_off_when_the_acl_changed() {
        let s = slot();
        let old = Acl { peer_incarnation: 1, state: QpState::ReadyToSend, access: Access::ALL };
        let new = Acl { peer_incarnation: 2, ..old };
        s.publish(old);
        s.publish(new);
        assert!(!s.move_to_error(old), "a newer binding is left alone");
        assert_eq!(s.acl(), new);
        assert!(s.move_to_error(new));
        assert_eq!(s.acl(), Acl { state: QpState::Error, ..new });
    }
}
