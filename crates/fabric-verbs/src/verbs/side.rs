//! One side of a connection: its queue pair, its completion queue, and the word that says its
//! state, flags and epoch.

use super::device::RawQp;
use crate::rundir::NodeInfo;
use mu_fabric::{Access, ConnId, QpState};
use sideway::ibverbs::completion::ExtendedCompletionQueue;
use sideway::ibverbs::queue_pair::ExtendedQueuePair;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A side's state, remote access flags and epoch, packed in one word so that the data path reads
/// them with one load and a failure can move the side to error only if nothing changed meanwhile.
/// The epoch grows at every reset and every binding to a peer: work requests posted under an
/// earlier epoch were discarded by the queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SideWord {
    pub(crate) state: QpState,
    pub(crate) access: Access,
    pub(crate) epoch: u64,
}

impl SideWord {
    fn pack(self) -> u64 {
        u64::from(self.state as u8) | u64::from(self.access.bits()) << 8 | self.epoch << 16
    }

    fn unpack(word: u64) -> SideWord {
        SideWord {
            // Only `pack` writes the word, so the state byte is always a valid one.
            state: QpState::from_u8(word as u8).unwrap_or(QpState::Error),
            access: Access::from_bits_truncate((word >> 8) as u8),
            epoch: word >> 16,
        }
    }
}

/// What a side was bound to when it moved to ready-to-receive: the peer's published information
/// (its queue pair for this connection and its regions).
pub(crate) struct Binding {
    pub(crate) peer: NodeInfo,
    pub(crate) qp_number: u32,
    pub(crate) psn: u32,
}

pub(crate) struct Side {
    pub(crate) conn: ConnId,
    /// Posted on only by the endpoint the connection is attached to (at most one: the node's
    /// `attached` set), through `&mut` formed for the duration of one post.
    qp: UnsafeCell<ExtendedQueuePair>,
    /// The same queue pair for `ibv_modify_qp` from the control plane.
    pub(crate) raw: RawQp,
    pub(crate) qp_number: u32,
    /// The first packet sequence number this side sends with (published).
    pub(crate) psn: u32,
    pub(crate) cq: Arc<ExtendedCompletionQueue>,
    word: AtomicU64,
    pub(crate) binding: Mutex<Option<Arc<Binding>>>,
}

// SAFETY: the sideway handles are `Send`; `raw` is a C handle libibverbs lets any thread use.
unsafe impl Send for Side {}
// SAFETY: `qp` is only dereferenced by the one endpoint attached to the connection (see its
// field docs and `Side::qp_for_posting`); everything else is atomics, mutexes and C handles that
// libibverbs makes safe to use from several threads (modifying a queue pair while posting on it).
unsafe impl Sync for Side {}

impl Side {
    pub(crate) fn new(
        conn: ConnId,
        qp: ExtendedQueuePair,
        raw: RawQp,
        qp_number: u32,
        psn: u32,
        cq: Arc<ExtendedCompletionQueue>,
    ) -> Side {
        Side {
            conn,
            qp: UnsafeCell::new(qp),
            raw,
            qp_number,
            psn,
            cq,
            word: AtomicU64::new(
                SideWord { state: QpState::Reset, access: Access::NONE, epoch: 0 }.pack(),
            ),
            binding: Mutex::new(None),
        }
    }

    pub(crate) fn load(&self) -> SideWord {
        SideWord::unpack(self.word.load(Ordering::Acquire))
    }

    /// Stores a new word. Only the control plane calls this, holding the node's control lock.
    pub(crate) fn store(&self, word: SideWord) {
        self.word.store(word.pack(), Ordering::Release);
    }

    #[allow(clippy::mut_from_ref)]
    /// The queue pair for posting.
    ///
    /// # Safety
    ///
    /// Only the endpoint the connection is attached to may call this, and it must not hold two
    /// of the returned references at once.
    pub(crate) unsafe fn qp_for_posting(&self) -> &mut ExtendedQueuePair {
        // SAFETY: exclusive by the caller's contract; the control plane never forms a reference
        // to the sideway object (it uses `raw`).
        unsafe { &mut *self.qp.get() }
    }
}

#[cfg(test)]
mod tests {
    use super::SideWord;
    use mu_fabric::{Access, QpState};

    #[test]
    fn side_word_round_trips() {
        for state in [QpState::Reset, QpState::ReadyToSend, QpState::Error] {
            let w = SideWord { state, access: Access::READ_WRITE, epoch: (1 << 40) + 3 };
            assert_eq!(SideWord::unpack(w.pack()), w);
        }
    }
}
