//! Deterministic simulated fabric (being written).
