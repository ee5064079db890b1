//! A deterministic limit order book replicated by Mu: the paper's financial application
//! (Liquibook, §7), written for this project.
//!
//! * [`Book`] matches orders by price-time priority, time being the order of commands (never a
//!   clock): limit and market orders, GTC, IOC and FOK, stop orders, cancels and replaces; it
//!   reports what happened as [`Event`]s and rejects bad commands with a [`RejectReason`].
//! * [`Request`] is what a client proposes (its id, its sequence number and one [`Command`]),
//!   as bytes; [`Engine`] is the book with per-client sessions that apply each request once,
//!   the state machine a replica runs, with snapshots and a digest.
//! * [`flow`] makes a realistic random order flow for benchmarks and demos.
//!
//! No threads, clocks, I/O or randomness, and no hash maps: replicas that apply the same
//! requests end with the same book, which [`Engine::digest`] summarizes. The rules and choices
//! are in `docs/apps/orderbook.md`.

#![forbid(unsafe_code)]

mod book;
mod codec;
mod command;
mod engine;
mod event;
pub mod flow;
pub mod mutation;
mod order;
mod request;

pub use book::{Book, OrderStatus, OrderView};
pub use codec::RestoreError;
pub use command::Command;
pub use engine::{Engine, Reply};
pub use event::{Event, RejectReason};
pub use flow::{random_flow, Flow};
pub use mutation::Mutation;
pub use order::{NewOrder, OrderId, OrderKind, Price, Qty, Side, TimeInForce};
pub use request::{DecodeError, Request, LIMIT_SUBMIT_BYTES, REQUEST_BYTES_MAX};
