//! An operation in flight, from posting until its completion is delivered.

use mu_fabric::{ConnId, LocalSlice, NodeId, Op, OpKind, RemoteAddr, Source, Status};

pub(crate) enum WriteSource {
    /// Copied at post time.
    Inline(Vec<u8>),
    /// Read from the initiator's region as each chunk lands, as a NIC DMA-reads it.
    Local(LocalSlice),
}

pub(crate) enum Body {
    Write {
        source: WriteSource,
        remote: RemoteAddr,
        len_bytes: u64,
    },
    Read {
        local: LocalSlice,
        remote: RemoteAddr,
    },
    CompareSwap {
        remote: RemoteAddr,
        expected: u64,
        desired: u64,
    },
    /// Posted on a connection in the error state: never executed.
    Flush(OpKind),
}

impl Body {
    /// The body of operation `op`, posted on a side ready to send.
    pub(crate) fn of(op: Op<'_>) -> Body {
        match op {
            Op::Write { source, remote } => Body::write(source, remote),
            Op::Read { local, remote } => Body::Read { local, remote },
            Op::CompareSwap { remote, expected, desired } => {
                Body::CompareSwap { remote, expected, desired }
            }
        }
    }

    /// A write's body: inline data is copied now, a local slice is read as each chunk lands.
    fn write(source: Source<'_>, remote: RemoteAddr) -> Body {
        let len_bytes = source.len() as u64;
        let source = match source {
            Source::Inline(data) => WriteSource::Inline(data.to_vec()),
            Source::Local(slice) => WriteSource::Local(slice),
        };
        Body::Write { source, remote, len_bytes }
    }

    pub(crate) fn kind(&self) -> OpKind {
        match self {
            Body::Write { .. } => OpKind::Write,
            Body::Read { .. } => OpKind::Read,
            Body::CompareSwap { .. } => OpKind::CompareSwap,
            Body::Flush(kind) => *kind,
        }
    }

    pub(crate) fn len_bytes(&self) -> u64 {
        match self {
            Body::Write { len_bytes, .. } => *len_bytes,
            Body::Read { local, .. } => u64::from(local.len),
            Body::CompareSwap { .. } => 8,
            Body::Flush(_) => 0,
        }
    }
}

/// A posted operation, from posting until its completion is delivered.
pub(crate) struct PendingOp {
    pub(crate) from: NodeId,
    pub(crate) from_incarnation: u32,
    pub(crate) conn: ConnId,
    /// The initiator side's epoch when posted.
    pub(crate) epoch: u64,
    pub(crate) endpoint: u64,
    pub(crate) wr_id: u64,
    pub(crate) signaled: bool,
    pub(crate) posted_ns: u64,
    pub(crate) body: Body,
    /// When the first chunk is due, and over how long the rest follow.
    pub(crate) land_start_ns: u64,
    pub(crate) land_span_ns: u64,
    pub(crate) chunks: u32,
    pub(crate) next_chunk: u32,
    /// Landing order of the chunks when out-of-order landing was on at post time.
    pub(crate) order: Option<Vec<u32>>,
    pub(crate) landed_bytes: u64,
    /// Decided when the operation stops landing.
    pub(crate) status: Option<Status>,
    /// A CAS's previous value.
    pub(crate) value: u64,
    /// A read's bytes, snapshotted when it lands, written locally when it completes.
    pub(crate) read_data: Vec<u8>,
}

impl PendingOp {
    /// When the `k`-th landing of this operation is due.
    pub(crate) fn chunk_time_ns(&self, k: u32) -> u64 {
        if self.chunks <= 1 {
            return self.land_start_ns;
        }
        let offset = u128::from(self.land_span_ns) * u128::from(k) / u128::from(self.chunks - 1);
        self.land_start_ns.saturating_add(u64::try_from(offset).unwrap_or(u64::MAX))
    }
}
