//! The node's own compare-and-swap through its NIC, for devices whose atomics are atomic only
//! among the NIC's own operations (`IBV_ATOMIC_HCA`): a CPU `lock cmpxchg` on a word a peer's
//! RDMA compare-and-swap also targets could interleave with the NIC's read-modify-write. A queue
//! pair connected to itself sends the node's compare-and-swap through the NIC like a peer's.

use super::device::{errno_text, Destination, PortAddress, RawQp, Retry};
use super::memory::Memory;
use mu_fabric::{Access, FabricError};
use sideway::ibverbs::completion::ExtendedCompletionQueue;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::queue_pair::{
    ExtendedQueuePair, PostSendGuard, QueuePair, SetScatterGatherEntry, WorkRequestFlags,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a loopback compare-and-swap may take before it is reported as failed (it is a round
/// trip through the local NIC: microseconds when healthy).
const LOOPBACK_WAIT: Duration = Duration::from_secs(5);

pub(crate) struct Loopback {
    qp: ExtendedQueuePair,
    raw: RawQp,
    cq: Arc<ExtendedCompletionQueue>,
    /// Registered before `result` is declared, so it is deregistered before the memory goes.
    result_mr: Arc<MemoryRegion>,
    result: Memory,
    local: PortAddress,
    destination: Destination,
    retry: Retry,
    next_wr_id: u64,
    /// Whether the queue pair must be cycled before the next use (a failed operation left it in
    /// error).
    broken: bool,
}

impl Loopback {
    /// Takes a queue pair (not yet connected) and connects it to itself.
    pub(crate) fn new(
        qp: ExtendedQueuePair,
        cq: Arc<ExtendedCompletionQueue>,
        result_mr: Arc<MemoryRegion>,
        result: Memory,
        local: PortAddress,
        psn: u32,
        retry: Retry,
    ) -> Result<Loopback, String> {
        // SAFETY: the pointer is used only while `qp`, stored beside it, is alive.
        let raw = RawQp(unsafe { qp.qp() });
        let destination = Destination {
            qp_number: qp.qp_number(),
            psn,
            lid: local.lid,
            gid: local.gid.map(|(_, g)| g),
            mtu: local.mtu,
        };
        let mut loopback = Loopback {
            qp,
            raw,
            cq,
            result_mr,
            result,
            local,
            destination,
            retry,
            next_wr_id: 0,
            broken: true,
        };
        loopback.connect()?;
        Ok(loopback)
    }

    fn connect(&mut self) -> Result<(), String> {
        let access = Access::ALL;
        let step = |what: &str, r: Result<(), i32>| {
            r.map_err(|e| format!("loopback queue pair to {what}: {}", errno_text(e)))
        };
        step("reset", self.raw.move_to_reset())?;
        step("init", self.raw.move_to_init(self.local.port, access))?;
        step("ready-to-receive", self.raw.move_to_rtr(&self.local, &self.destination, access))?;
        step("ready-to-send", self.raw.move_to_rts(self.destination.psn, self.retry, access))?;
        self.broken = false;
        Ok(())
    }

    /// Compare-and-swap of the word at `addr` (registered under `rkey` with remote atomic access)
    /// through the NIC; returns the word's previous value.
    pub(crate) fn compare_swap(
        &mut self,
        rkey: u32,
        addr: u64,
        expected: u64,
        desired: u64,
    ) -> Result<u64, FabricError> {
        let fail = |message: String| FabricError::Io {
            context: "compare-and-swap through the loopback queue pair".into(),
            message,
        };
        if self.broken {
            self.connect().map_err(fail)?;
        }
        self.next_wr_id += 1;
        let wr_id = self.next_wr_id;
        let mut guard = self.qp.start_post_send();
        let handle = guard.construct_wr(wr_id, WorkRequestFlags::Signaled);
        // SAFETY: the scatter entry names the 8 bytes at the start of `result`, registered as
        // `result_mr` with local write; both live in `self`, which this call borrows until the
        // completion is polled below (or the queue pair is moved to error, which stops the NIC).
        unsafe {
            handle.setup_atomic_compare_swap(rkey, addr, expected, desired).setup_sge(
                self.result_mr.lkey(),
                self.result.addr(),
                8,
            )
        };
        if let Err(e) = guard.post() {
            self.broken = true;
            return Err(fail(format!("posting: {e}")));
        }
        let deadline = Instant::now() + LOOPBACK_WAIT;
        loop {
            if let Ok(mut poller) = self.cq.start_poll() {
                if let Some(wc) = poller.next() {
                    let (id, status) = (wc.wr_id(), wc.status());
                    drop(poller);
                    if id != wr_id {
                        // A completion of an earlier call that gave up waiting: skip it.
                        continue;
                    }
                    if status != rdma_mummy_sys::ibv_wc_status::IBV_WC_SUCCESS {
                        self.broken = true;
                        return Err(fail(format!("completion status {status}")));
                    }
                    return Ok(self.result.u64_at(0).load(std::sync::atomic::Ordering::Acquire));
                }
            }
            if Instant::now() >= deadline {
                // Stop the NIC from writing the result later, then report.
                let _ = self.raw.move_to_error();
                self.broken = true;
                return Err(fail(format!("no completion within {LOOPBACK_WAIT:?}")));
            }
            std::hint::spin_loop();
        }
    }
}
