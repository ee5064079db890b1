//! A key-value map replicated by Mu: the state machine the simulator's clients drive, and the one
//! the key-value service applies.
//!
//! * [`Request`] is what a client proposes: its client id and sequence number, and one
//!   [`Op`] — get, put, delete or compare-and-set — encoded as bytes ([`Request::encode`],
//!   [`Request::decode`]). Every replica decodes the same bytes the same way; a malformed
//!   request changes nothing and gets [`Reply::Malformed`].
//! * [`Store`] applies requests in log order and remembers, per client, the last sequence number
//!   it applied and its reply, so that a request retried after an unknown outcome (an aborted
//!   proposal may still be committed by the next leader) takes effect once: the retry gets the
//!   first reply back.
//!
//! No threads, clocks or I/O: replicas that apply the same entries end in the same state, which
//! [`Store::digest`] summarizes.

#![forbid(unsafe_code)]

mod request;
mod store;

pub use request::{DecodeError, Op, Request, KEY_BYTES_MAX, PUT_BYTES_MIN, VALUE_BYTES_MAX};
pub use store::{Reply, RestoreError, Store};
