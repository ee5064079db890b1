//! Shared-memory fabric (being written).
pub mod guard;
