//! The latency model, limits, and fault switches of a simulated fabric.
//!
//! The defaults are calibrated to the RDMA figures of the Mu paper (OSDI 2020) and the Velos paper;
//! see the crate docs for where each number comes from.

/// The latency model and limits of a [`crate::SimWorld`].
///
/// Timing of one operation posted at `t` on a connection from `a` to `b` (each "one way" is
/// [`SimConfig::one_way_ns`] plus jitter plus the link's extra delay):
///
/// * a **post** leaves its node at `t`, or [`SimConfig::post_cpu_ns`] after the node's previous
///   post if that is later (the CPU posts one request at a time);
/// * a **write** of `n` bytes starts landing at `t + one way` (plus
///   [`SimConfig::non_inline_extra_ns`] if its payload is not inline), lands chunk by chunk over
///   `n × per_byte_ps` (at least 1 ns per chunk), and completes one way after its last chunk;
/// * a **read** lands (snapshots the remote bytes) at `t + one way` and completes one way plus
///   `n × per_byte_ps` later, when the data is written into the local slice;
/// * a **compare-and-swap** lands at `t + one way + cas_extra_ns` and completes one way later.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// One-way latency of a request or an acknowledgement. Default 600 ns: half of the ≈ 1.2 µs
    /// write and read round trips measured in the Mu paper.
    pub one_way_ns: u64,
    /// Each one-way trip takes an extra delay drawn uniformly from `[0, jitter_ns]` with the
    /// world's seeded generator. Default 40 ns: small next to the round trip, but enough that no
    /// two runs with different seeds share a schedule.
    pub jitter_ns: u64,
    /// Serialization cost per payload byte, in picoseconds. Default 80 ps (12.5 GB/s, a
    /// 100 Gbit/s link): a 4 KiB write takes ≈ 0.33 µs longer than a 1-byte one.
    pub per_byte_ps: u64,
    /// Extra time a compare-and-swap spends at the target NIC (a PCIe read-modify-write).
    /// Default 700 ns, so that a CAS round trip is ≈ 1.9 µs as the Velos paper measures.
    pub cas_extra_ns: u64,
    /// A write lands as separate chunks of this many bytes, each its own event, so that a local
    /// reader between events sees a partly written buffer. Default 64 (a cache line, the unit a
    /// NIC's PCIe writes land in). A value of 0 is treated as 1.
    pub chunk_bytes: usize,
    /// The largest inline payload. Default 256 bytes (ConnectX NICs allow about 220–900
    /// depending on the queue pair; Mu inlines its up-to-128-byte entries).
    pub max_inline_bytes: usize,
    /// How long an operation to a crashed, restarted or partitioned peer takes to fail with
    /// `PeerUnreachable` (an RC queue pair's retry-exceeded error), counted from posting.
    /// Default 1 ms.
    pub retry_timeout_ns: u64,
    /// Time charged to a node for a fast (access-flags-only) permission change. Default 88 µs
    /// (Mu paper, Fig. 2, "QP Flags").
    pub fast_access_change_ns: u64,
    /// Time charged to a node for a slow permission change (cycling the queue pair through
    /// reset, init, ready-to-receive and ready-to-send). Default 1.2 ms (Mu paper, Fig. 2,
    /// "QP Restart", about ten times the fast path). Other `modify_qp` transitions are charged a
    /// quarter of this each.
    pub slow_access_change_ns: u64,
    /// The largest region the simulator registers; larger ones fail with `BadRegionSize` rather
    /// than exhausting memory. Default 1 GiB.
    pub max_region_bytes: usize,
    /// How many recent trace events the world keeps for [`crate::SimWorld::recent_trace`]
    /// (the running hash covers every event regardless). Default 1024.
    pub trace_capacity: usize,
    /// Requests one connection side may have posted that have not finished; a post past that
    /// is refused with `PostError::QueueFull` however much room its endpoint has, as with an
    /// RDMA queue pair's send queue (verbs' `send_queue_depth`). Default: no limit.
    pub connection_depth: usize,
    /// Extra time before a write whose payload is not inline (posted from a local region)
    /// starts landing: the NIC must DMA-read the payload from host memory over PCIe before it
    /// can send it. Default 0 (no step between inline and non-inline writes).
    pub non_inline_extra_ns: u64,
    /// CPU time one post costs its node (building the work request and ringing the doorbell):
    /// a node's posts leave one after another, each this long after the previous one, so an
    /// engine step that posts k requests sends its last one k × this later. Default 0.
    pub post_cpu_ns: u64,
    /// Whether a node posts nothing while its CPU is busy with a control-plane call that costs
    /// time on RDMA ([`crate::SimWorld::node_busy_until`]): `ibv_modify_qp` blocks the thread
    /// that calls it, so the acknowledgement a permission manager writes after changing access
    /// leaves only once the change is done. The node's threads are not told apart: every post
    /// of the node waits. Default false (control calls cost no time on the data path).
    pub control_blocks_posts: bool,
    /// Whether a node's writes share its port's bandwidth ([`SimConfig::per_byte_ps`]): a
    /// write's bytes leave only once the node's earlier writes, on any connection, have left,
    /// as on one NIC port. Default false: each connection serializes on its own (a connection's
    /// operations still land in order).
    pub port_bandwidth: bool,
    /// How long after a crash its peers are told ([`mu_fabric::Fabric::crash_notified`]): the
    /// delay of a kernel's crash broadcast (the Velos and uKharon papers' deadbeat). Default 0:
    /// at once, like the shared-memory fabric's death flag.
    pub crash_notice_ns: u64,
    /// Faults that apply to the whole world. Default: none.
    pub faults: FaultConfig,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            one_way_ns: 600,
            jitter_ns: 40,
            per_byte_ps: 80,
            cas_extra_ns: 700,
            chunk_bytes: 64,
            max_inline_bytes: 256,
            retry_timeout_ns: 1_000_000,
            fast_access_change_ns: 88_000,
            slow_access_change_ns: 1_200_000,
            max_region_bytes: 1 << 30,
            trace_capacity: 1024,
            connection_depth: usize::MAX,
            non_inline_extra_ns: 0,
            post_cpu_ns: 0,
            control_blocks_posts: false,
            port_bandwidth: false,
            crash_notice_ns: 0,
            faults: FaultConfig::default(),
        }
    }
}

/// World-wide fault switches. Can be changed while the world runs
/// ([`crate::SimWorld::set_faults`]).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct FaultConfig {
    /// Land each write's chunks in a shuffled order (still at distinct times within its flight,
    /// and still all before its completion and before any later operation on the connection).
    /// Off: chunks land left to right, which is what a canary at the end of an entry relies on.
    pub out_of_order_landing: bool,
    /// Probability that a fast permission change fails with `PermError::Busy` whatever the
    /// peer is doing. This is harsher than the API promises (it says `Busy` only with operations
    /// in flight): use it to exercise a caller's fallback to the slow path.
    pub fast_perm_failure_probability: f64,
    /// Probability that a fast permission change fails with `PermError::Busy` when the peer has
    /// operations in flight to this node on that connection, as the Mu paper saw on real NICs
    /// ("sometimes causes the QP to go into an error state"). 1.0 makes it fail every time.
    pub fast_perm_busy_in_flight_probability: f64,
    /// Probability that a binding (a move to ready-to-receive) or a slow permission change
    /// returns `FabricError::InProgress`, as a backend that keeps its calls short does while it
    /// waits on the network: a binding leaves the side as it was; a slow change has taken the
    /// rights away (the side went through reset) and leaves it in error. Exercises callers
    /// that make such a call again later.
    pub control_under_way_probability: f64,
}

/// Extra delay on the link between two nodes (both directions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LinkDelay {
    /// Added to every one-way trip on the link.
    pub extra_ns: u64,
    /// Each one-way trip on the link takes a further delay drawn from `[0, jitter_ns]`.
    pub jitter_ns: u64,
}
