//! Shared-memory fabric (being written).
