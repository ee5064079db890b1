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
//! * `inflight` — written only by the peer (the writer): a sequence number that is odd while the
//!   peer has an operation in flight into this node.
//!
//! Writer, for each operation: store `inflight = odd`; SeqCst fence; load `acl`; if allowed, copy;
//! store `inflight = even` (release). Revoker: store the new `acl`; SeqCst fence; load `inflight`;
//! if it is odd, wait until it changes. This is Dekker's handshake: of the writer's check and the
//! revoker's check, at least one sees the other's store. Either the writer sees the revocation and
//! copies nothing, or the revoker sees the writer in flight and waits for its copy to end. Any
//! operation that starts later sees the new flags, so the revoker waits only for the one it saw
//! (a changed sequence number), never for a writer that keeps trying.
//!
//! A writer that stops in flight (SIGSTOP, descheduled for long) would make the revoker wait for
//! ever. The fabric bounds the wait and then fences the writer for good (it kills the writer's
//! process and waits for its death), the shared-memory analogue of cycling an RDMA queue pair.
//!
//! Only one thread ever writes a given `inflight` word: the connection is attached to one endpoint,
//! driven by one thread, and a node refuses to start while an earlier incarnation of it is alive.
//!
//! The protocol is written against [`MemoryModel`] so that `tests/guard_model.rs` runs this very
//! code under the shuttle model checker.

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
    /// sequence number to wait on with [`Slot::still_in_flight`]. Once this returns `None`, or the
    /// sequence has moved on, no operation that the new `acl` forbids can land.
    pub fn publish(&self, acl: Acl) -> Option<u64> {
        self.acl.store(acl.pack(), Ordering::SeqCst);
        M::fence_seq_cst();
        let seq = self.inflight.load(Ordering::Acquire);
        (seq % 2 == 1).then_some(seq)
    }

    /// Whether the operation seen in flight as `seq` is still in flight.
    pub fn still_in_flight(&self, seq: u64) -> bool {
        self.inflight.load(Ordering::Acquire) == seq
    }

    /// The peer's in-flight sequence number (odd while it has an operation in flight here).
    pub fn inflight_seq(&self) -> u64 {
        self.inflight.load(Ordering::Acquire)
    }

    /// Moves the side to `Error` unless its state changed in the meantime (the writer's own side
    /// uses this after a failed operation; the owner uses it when a fast change fails).
    pub fn move_to_error(&self) {
        let mut word = self.acl.load(Ordering::Acquire);
        loop {
            let acl = Acl::unpack(word);
            let error = Acl { state: QpState::Error, ..acl };
            match self.acl.compare_exchange(word, error.pack()) {
                Ok(_) => return,
                Err(now) => word = now,
            }
        }
    }

    // ---- peer (writer) side -------------------------------------------------------------------

    /// The first even sequence number a newly attached writer may use: above anything an earlier
    /// (dead) incarnation left, so the parity stays meaningful.
    pub fn writer_start_seq(&self) -> u64 {
        let seq = self.inflight.load(Ordering::Acquire);
        seq + 2 - seq % 2
    }

    /// Enters the slot for an operation needing `needed`, as the writer incarnation
    /// `incarnation`. `seq` is the writer's own even sequence number. On success the caller
    /// copies, then calls [`Slot::exit`]; on refusal nothing is in flight any more.
    pub fn enter(&self, seq: &mut u64, incarnation: u32, needed: Access) -> Result<(), Refusal> {
        debug_assert!(*seq % 2 == 0);
        self.inflight.store(*seq + 1, Ordering::Relaxed);
        M::fence_seq_cst();
        let acl = Acl::unpack(self.acl.load(Ordering::Relaxed));
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
                self.exit(seq);
                Err(r)
            }
        }
    }

    /// Leaves the slot after the copy: the copy's stores are ordered before this release store.
    pub fn exit(&self, seq: &mut u64) {
        *seq += 2;
        self.inflight.store(*seq, Ordering::Release);
    }
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
        s.exit(&mut seq);
        assert!(!s.still_in_flight(seen));
        assert_eq!(s.publish(s.acl()), None);
    }

    #[test]
    fn a_new_writer_starts_above_a_dead_one() {
        let s = slot();
        let mut dead = 4;
        s.publish(Acl { peer_incarnation: 1, state: QpState::ReadyToSend, access: Access::ALL });
        s.enter(&mut dead, 1, Access::WRITE).unwrap(); // and never exits
        assert_eq!(s.writer_start_seq(), 6);
        s.move_to_error();
        assert_eq!(s.acl().state, QpState::Error);
        assert_eq!(s.acl().peer_incarnation, 1);
    }
}
