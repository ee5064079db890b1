//! What can go wrong before a node exists.

use mu_fabric::FabricError;

/// Why a verbs node could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    /// The crate was built without its `verbs` feature: there is no RDMA code in this binary.
    #[error(
        "built without the `verbs` feature: rebuild mu-fabric-verbs with `--features verbs` \
         (needs cmake and libclang, see scripts/install-verbs-deps.sh) to use RDMA"
    )]
    FeatureDisabled,
    /// libibverbs lists no device, or cannot list devices at all (no RDMA support in the kernel:
    /// `ENOSYS`; libibverbs not installed: `EOPNOTSUPP`), or the named device is not there.
    #[error("no RDMA device found: {why}")]
    NoDevice { why: String },
    /// A device is there but a verb on it failed.
    #[error("RDMA device {device}: {what}: {message}")]
    Device { device: String, what: String, message: String },
    #[error(transparent)]
    Fabric(#[from] FabricError),
}

impl VerbsError {
    /// Whether this says that there is no RDMA device to use (as opposed to a broken one).
    pub fn is_no_device(&self) -> bool {
        matches!(self, VerbsError::NoDevice { .. })
    }
}

impl From<VerbsError> for FabricError {
    fn from(e: VerbsError) -> FabricError {
        match e {
            VerbsError::Fabric(e) => e,
            other => FabricError::Config(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::VerbsError;
    use mu_fabric::FabricError;

    #[test]
    fn messages_say_what_is_missing() {
        assert!(VerbsError::FeatureDisabled
            .to_string()
            .starts_with("built without the `verbs` feature"));
        let none = VerbsError::NoDevice { why: "ibv_get_device_list failed: ENOSYS".into() };
        assert!(none.to_string().starts_with("no RDMA device found"));
        assert!(none.is_no_device());
        let as_fabric: FabricError = none.into();
        assert!(as_fabric.to_string().contains("no RDMA device found"));
    }
}
