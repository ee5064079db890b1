//! A simulated node's state: its memory, the sides of its connections, and its completion
//! queues.

use mu_fabric::{Access, Completion, ConnId, NodeId, QpState, RegionId, RegionScope};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// One node: its memory, its connection sides, and what the fault injector did to it.
pub(crate) struct Node {
    /// Bumped by each restart; regions, endpoints and connections of an earlier incarnation are
    /// dead.
    pub(crate) incarnation: u32,
    pub(crate) crashed: bool,
    pub(crate) paused: bool,
    /// Until when the node's CPU is busy with synchronous control-plane calls that cost time on
    /// RDMA (permission changes, queue-pair transitions); a runtime may charge it.
    pub(crate) busy_until_ns: u64,
    /// When the node's CPU has finished its latest post ([`crate::SimConfig::post_cpu_ns`]).
    pub(crate) post_free_ns: u64,
    /// When the node's port has sent every byte of its earlier writes
    /// ([`crate::SimConfig::port_bandwidth`]).
    pub(crate) port_free_ns: u64,
    /// When the node last crashed (its peers are told [`crate::SimConfig::crash_notice_ns`]
    /// later).
    pub(crate) crashed_at_ns: u64,
    pub(crate) regions: BTreeMap<RegionId, Region>,
    pub(crate) conns: BTreeMap<ConnId, ConnSide>,
}

impl Node {
    pub(crate) fn new(incarnation: u32) -> Node {
        Node {
            incarnation,
            crashed: false,
            paused: false,
            busy_until_ns: 0,
            post_free_ns: 0,
            port_free_ns: 0,
            crashed_at_ns: 0,
            regions: BTreeMap::new(),
            conns: BTreeMap::new(),
        }
    }
}

pub(crate) struct Region {
    pub(crate) bytes: Vec<u8>,
    pub(crate) access: Access,
    /// Which connections may reach it (checked when an operation lands).
    pub(crate) scope: RegionScope,
}

/// One node's side of a connection.
pub(crate) struct ConnSide {
    pub(crate) state: QpState,
    /// What the peer may do to this node through this connection.
    pub(crate) access: Access,
    /// The peer incarnation bound when this side moved to ready-to-receive.
    pub(crate) peer_incarnation: Option<u32>,
    /// Bumped when this side goes to reset or error: operations it posted before are flushed.
    pub(crate) epoch: u64,
    /// An operation of this epoch failed at its target: those behind it are flushed (the
    /// responder would not accept them out of sequence), even before the failure's completion
    /// moves this side to the error state.
    pub(crate) broken: bool,
    /// The endpoint the send side is bound to.
    pub(crate) attached: Option<u64>,
    /// Operations posted on this side that have not finished landing, oldest first. Only the
    /// head has a scheduled landing: that is what keeps the connection FIFO even when landings
    /// are parked or delayed.
    pub(crate) flight: VecDeque<u64>,
    /// Operations posted on this side whose completion has not been generated yet: what an RDMA
    /// send queue holds ([`crate::SimConfig::connection_depth`] bounds it).
    pub(crate) unfinished: usize,
    /// When the last posted operation is due to finish landing, to clamp the next one after it.
    pub(crate) last_land_ns: u64,
    /// When the last completion on this side is due, so that completions stay in order.
    pub(crate) last_completion_ns: u64,
}

impl ConnSide {
    pub(crate) fn new() -> ConnSide {
        ConnSide {
            state: QpState::Reset,
            access: Access::NONE,
            peer_incarnation: None,
            epoch: 0,
            broken: false,
            attached: None,
            flight: VecDeque::new(),
            unfinished: 0,
            last_land_ns: 0,
            last_completion_ns: 0,
        }
    }
}

/// A completion queue and the connections bound to it.
pub(crate) struct CompletionQueue {
    pub(crate) node: NodeId,
    pub(crate) depth: usize,
    /// Posted operations whose completion (maybe none, if unsignaled) has not arrived.
    pub(crate) outstanding: usize,
    pub(crate) queue: VecDeque<Completion>,
    pub(crate) conns: BTreeSet<ConnId>,
}
