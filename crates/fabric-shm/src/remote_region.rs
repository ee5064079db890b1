//! A peer's region as this node maps it: what the data path writes into and reads from.

use crate::mapping::Mapping;
use mu_fabric::Access;

/// A region of a peer incarnation, mapped here, with the length and rights its header gives.
pub(crate) struct RemoteRegion {
    pub(crate) map: Mapping,
    pub(crate) len_bytes: u64,
    pub(crate) access: Access,
}
