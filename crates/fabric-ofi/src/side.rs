//! One side of a connection: its state and rights as the fabric API sees them, what binding
//! learned about the peer (its incarnation and its regions' lengths), and the registrations and
//! fence that let the peer in and shut it out.

use crate::ffi::MemoryRegistration;
use mu_fabric::{Access, ConnId, QpState, RegionId};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// What binding a connection learned about the peer (moving to ready-to-receive).
#[derive(Clone, Debug)]
pub(crate) struct Binding {
    pub(crate) peer_incarnation: u32,
    pub(crate) peer_regions: HashMap<RegionId, usize>,
}

/// One side of a connection: what the fabric API says about it, and the registrations that let
/// the peer in.
pub(crate) struct Side {
    pub(crate) conn: ConnId,
    pub(crate) st: Mutex<SideState>,
}

impl Side {
    /// A side never connected: reset, no access, no binding.
    pub(crate) fn new(conn: ConnId) -> Side {
        Side {
            conn,
            st: Mutex::new(SideState {
                state: QpState::Reset,
                access: Access::NONE,
                binding: None,
                epoch: 0,
                attached: false,
                unfenced: false,
                fence: None,
                fence_refused_since: None,
                cut: Vec::new(),
                registrations: Vec::new(),
            }),
        }
    }
}

pub(crate) struct SideState {
    pub(crate) state: QpState,
    pub(crate) access: Access,
    pub(crate) binding: Option<Binding>,
    /// Bumped whenever the side leaves ready-to-send, so that an error completing late for an
    /// operation posted before does not break the side as it is now.
    pub(crate) epoch: u64,
    pub(crate) attached: bool,
    /// A right was taken away and no fence has completed since: until one does, bytes the
    /// peer sent before may still land.
    pub(crate) unfenced: bool,
    /// The fence read under way for the latest right taken away, if any, and when it was
    /// posted: a revocation that gave up waiting leaves it running, and the next one waits for
    /// the same read, so that a peer that answers late (or whose connection breaks) ends the
    /// wait without a new post.
    pub(crate) fence: Option<(u64, Instant)>,
    /// Since when the provider has refused to take a fence read (`tcp;ofi_rxm` while it
    /// cannot open a connection): the calls that try to post one share one budget (`fence`).
    pub(crate) fence_refused_since: Option<Instant>,
    /// The streams with the peer that this side shut down (by socket inode) because the fence
    /// for the right taken away went unanswered for its whole budget: the revocation holds once
    /// the provider has closed every one of them (`fence`).
    pub(crate) cut: Vec<u64>,
    pub(crate) registrations: Vec<(u64, MemoryRegistration)>,
}
