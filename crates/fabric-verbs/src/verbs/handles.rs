//! The device objects that keep a region's scope (`window` has what is done with them): a type
//! 2 memory window, the window of a region scoped to one connection, and a region's scoping. A
//! leaf module: the device, the regions and the scope logic all use these types.

use mu_fabric::{ConnId, RegionScope};
use rdma_mummy_sys::{ibv_alloc_mw, ibv_dealloc_mw, ibv_mw, ibv_mw_type};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use std::ptr::NonNull;
use std::sync::Arc;

/// A type 2 memory window, deallocated on drop (which invalidates its key at once, bound or
/// not: no work request is needed to take a connection out of a region's scope).
pub(crate) struct MemoryWindow {
    mw: NonNull<ibv_mw>,
    /// The key it was allocated with (the index part every bound key keeps).
    allocated_rkey: u32,
    /// Keeps the protection domain (and the device context) alive as long as the window.
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: a C handle; the provider serializes what must be serialized, and this value is only
// read (the pointer) after allocation, and deallocated once, on drop.
unsafe impl Send for MemoryWindow {}
// SAFETY: as above: `&MemoryWindow` gives out only the pointer and a copied key.
unsafe impl Sync for MemoryWindow {}

impl MemoryWindow {
    pub(crate) fn alloc(pd: &Arc<ProtectionDomain>) -> Result<MemoryWindow, String> {
        // SAFETY: `pd` is a live protection domain (the Arc keeps it); the result is checked
        // before use, and the window's key read once, right after allocation, before anyone
        // else sees the window.
        unsafe {
            let mw = ibv_alloc_mw(pd.pd().as_ptr(), ibv_mw_type::IBV_MW_TYPE_2);
            let Some(mw) = NonNull::new(mw) else {
                let err = std::io::Error::last_os_error();
                return Err(format!("allocating a type 2 memory window: {err}"));
            };
            let allocated_rkey = (*mw.as_ptr()).rkey;
            Ok(MemoryWindow { mw, allocated_rkey, _pd: Arc::clone(pd) })
        }
    }

    pub(crate) fn allocated_rkey(&self) -> u32 {
        self.allocated_rkey
    }

    pub(crate) fn as_ptr(&self) -> *mut ibv_mw {
        self.mw.as_ptr()
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        // SAFETY: deallocates the window `alloc` allocated, once; its protection domain and
        // device context are alive (`_pd` drops after this). The binding unwraps the provider's
        // `dealloc_mw`, so it is called only where the provider has one (every provider that
        // allocates windows does; otherwise the window would be leaked, not a panic in a drop).
        unsafe {
            let context = (*self.mw.as_ptr()).context;
            if (*context).ops.dealloc_mw.is_some() {
                ibv_dealloc_mw(self.mw.as_ptr());
            }
        }
    }
}

/// The window of a region scoped to one connection.
pub(crate) struct Window {
    pub(crate) conn: ConnId,
    /// The key it has once bound (published from the moment it is allocated).
    pub(crate) rkey: u32,
    /// Whether its bind was posted.
    pub(crate) bound: bool,
    pub(crate) window: MemoryWindow,
}

/// A region's scope and the device objects that keep it: a shared registration exactly while the
/// scope is `Every`, a window exactly while it is `Only` (see `scope::plan`).
pub(crate) struct Scoping {
    pub(crate) scope: RegionScope,
    pub(crate) shared_mr: Option<Arc<MemoryRegion>>,
    pub(crate) window: Option<Window>,
}
