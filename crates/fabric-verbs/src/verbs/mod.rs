//! The RDMA backend proper (feature `verbs`).

mod control;
mod device;
mod endpoint;
mod handles;
mod loopback;
mod memory;
mod node;
mod region;
mod scope;
mod side;
mod window;

pub use device::device_names;
pub use endpoint::VerbsEndpoint;
pub use node::{VerbsFabric, MAX_ENDPOINT_DEPTH};
pub use region::VerbsRegion;
