//! The crate without its `verbs` feature: the same names, no RDMA. [`VerbsFabric::open`] says so,
//! and since no `VerbsFabric` can exist, its trait methods are never called.

use crate::{VerbsConfig, VerbsError};
use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, FabricError, LocalRegion, NodeId, PermError,
    PostError, QpState, RegionId, RegionScope, WorkRequest,
};

/// No value of this type exists.
#[derive(Clone, Copy, Debug)]
enum Never {}

/// A node on the verbs fabric; this build has no RDMA code (feature `verbs` off).
#[derive(Clone, Debug)]
pub struct VerbsFabric {
    never: Never,
}

/// A completion queue and its connections; never exists in this build.
#[derive(Debug)]
pub struct VerbsEndpoint {
    never: Never,
}

/// A registered region; never exists in this build.
#[derive(Clone, Debug)]
pub struct VerbsRegion {
    never: Never,
}

/// The RDMA devices libibverbs lists; in this build, [`VerbsError::FeatureDisabled`].
pub fn device_names() -> Result<Vec<String>, VerbsError> {
    Err(VerbsError::FeatureDisabled)
}

impl VerbsFabric {
    /// Fails with [`VerbsError::FeatureDisabled`]: this build has no RDMA code.
    pub fn open(config: VerbsConfig) -> Result<VerbsFabric, VerbsError> {
        let _ = config;
        Err(VerbsError::FeatureDisabled)
    }

    pub fn incarnation(&self) -> u64 {
        match self.never {}
    }

    pub fn config(&self) -> &VerbsConfig {
        match self.never {}
    }

    pub fn region(&self, id: RegionId) -> Option<VerbsRegion> {
        let _ = id;
        match self.never {}
    }

    pub fn crash(&self) {
        match self.never {}
    }
}

impl Fabric for VerbsFabric {
    type Region = VerbsRegion;
    type Endpoint = VerbsEndpoint;

    fn backend_name(&self) -> &'static str {
        "verbs"
    }

    fn node(&self) -> NodeId {
        match self.never {}
    }

    fn max_inline_bytes(&self) -> usize {
        match self.never {}
    }

    fn register_region(
        &self,
        _: RegionId,
        _: usize,
        _: Access,
    ) -> Result<VerbsRegion, FabricError> {
        match self.never {}
    }

    fn scope_region(&self, _: RegionId, _: RegionScope) -> Result<(), FabricError> {
        match self.never {}
    }

    fn endpoint(&self, _: usize) -> Result<VerbsEndpoint, FabricError> {
        match self.never {}
    }

    fn qp_state(&self, _: ConnId) -> Result<QpState, FabricError> {
        match self.never {}
    }

    fn qp_access(&self, _: ConnId) -> Result<Access, FabricError> {
        match self.never {}
    }

    fn modify_qp(&self, _: ConnId, _: QpState, _: Access) -> Result<(), FabricError> {
        match self.never {}
    }

    fn set_access_fast(&self, _: ConnId, _: Access) -> Result<(), PermError> {
        match self.never {}
    }

    fn set_access_slow(&self, _: ConnId, _: Access) -> Result<(), FabricError> {
        match self.never {}
    }
}

impl Endpoint for VerbsEndpoint {
    fn attach(&mut self, _: ConnId) -> Result<(), FabricError> {
        match self.never {}
    }

    fn post(&mut self, _: ConnId, _: &WorkRequest<'_>) -> Result<(), PostError> {
        match self.never {}
    }

    fn poll(&mut self, _: &mut [Completion]) -> usize {
        match self.never {}
    }
}

impl LocalRegion for VerbsRegion {
    fn id(&self) -> RegionId {
        match self.never {}
    }

    fn len_bytes(&self) -> usize {
        match self.never {}
    }

    fn read(&self, _: usize, _: &mut [u8]) -> Result<(), FabricError> {
        match self.never {}
    }

    fn write(&self, _: usize, _: &[u8]) -> Result<(), FabricError> {
        match self.never {}
    }

    fn load_u64(&self, _: usize) -> Result<u64, FabricError> {
        match self.never {}
    }

    fn store_u64(&self, _: usize, _: u64) -> Result<(), FabricError> {
        match self.never {}
    }

    fn compare_swap_u64(&self, _: usize, _: u64, _: u64) -> Result<u64, FabricError> {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_says_the_feature_is_off() {
        let err = VerbsFabric::open(VerbsConfig::new("/nonexistent", 1, NodeId(0))).unwrap_err();
        assert_eq!(err, VerbsError::FeatureDisabled);
        assert!(err.to_string().contains("built without the `verbs` feature"));
        assert_eq!(device_names(), Err(VerbsError::FeatureDisabled));
    }
}
