//! The conformance suite (filled in below).
