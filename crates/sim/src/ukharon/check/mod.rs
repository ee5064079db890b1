//! The uKharon run's checkers, one per file: one active view at a time ([`active`]), view
//! agreement, the wait rule and unique ids ([`views`]). Convergence is checked by the runner
//! at the end of the liveness phase.

pub mod active;
pub mod views;
