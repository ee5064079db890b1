//! The control plane's own operations on a channel (identity reads, hello writes): posting them
//! one at a time per peer, and waiting for or abandoning their completions.

use crate::channel::{context, Channel, CONTROL_TOKEN};
use crate::ffi::PostFailure;
use crate::keys::{IDENTITY_BYTES, IDENTITY_KEY};
use crate::node::Node;
use mu_fabric::NodeId;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Node {
    /// Posts a read of the peer's identity through `channel` (the binding handshake, and the
    /// fence of a revocation); returns its number, for `wait_control`. `Err(None)` when the
    /// provider kept refusing it until `deadline`.
    pub(crate) fn post_identity_read(
        &self,
        channel: &Channel,
        peer: NodeId,
        dest: u64,
        deadline: Instant,
    ) -> Result<u64, Option<String>> {
        let buf: Box<[u8]> = vec![0u8; IDENTITY_BYTES].into_boxed_slice();
        self.post_control(channel, peer, buf, deadline, |ptr, ctx| {
            // SAFETY: `ptr` is the control buffer, parked until the read completes (see
            // `post_control`).
            unsafe { channel.ep.read(ptr, IDENTITY_BYTES, dest, 0, IDENTITY_KEY, ctx) }
        })
    }

    /// Posts a control operation to `peer` on `channel` with `buf` as its buffer, which is
    /// parked (in `pending`) until the provider is done with it; returns its number.
    /// `Err(None)` when the provider kept refusing it until `deadline`.
    ///
    /// Control posts to one peer on one channel go one at a time: the provider opens a stream
    /// inside the post that finds none, and two posts that find none at the same moment (a
    /// binding and a hello asked for, on two threads) would each open one.
    pub(crate) fn post_control(
        &self,
        channel: &Channel,
        peer: NodeId,
        mut buf: Box<[u8]>,
        deadline: Instant,
        post: impl Fn(*mut u8, u64) -> Result<(), PostFailure>,
    ) -> Result<u64, Option<String>> {
        let one_at_a_time = self
            .posting
            .lock()
            .expect("posting")
            .entry((channel.number, peer))
            .or_default()
            .clone();
        let _turn = one_at_a_time.lock().expect("posting turn");
        let number = self.next_control.fetch_add(1, Ordering::Relaxed);
        let ptr = buf.as_mut_ptr();
        let ctx = context(CONTROL_TOKEN, number);
        // Parked before posting: the completion may come before the post returns. Moving the
        // box does not move the heap buffer `ptr` points into, which is dropped only once the
        // operation completed or never went out.
        channel.mail.lock().expect("channel mail").pending.insert(number, buf);
        loop {
            match post(ptr, ctx) {
                Ok(()) => return Ok(number),
                Err(PostFailure::Again) if Instant::now() < deadline => {
                    channel.progress();
                    std::thread::yield_now();
                }
                Err(failure) => {
                    channel.mail.lock().expect("channel mail").pending.remove(&number);
                    return Err(match failure {
                        PostFailure::Again => None,
                        PostFailure::Error(e) => Some(crate::ffi::strerror(e as i64)),
                    });
                }
            }
        }
    }

    /// Waits until control read `number` completes or `deadline` passes (`None`); a failed
    /// read gives the provider's error number.
    pub(crate) fn wait_control(
        &self,
        channel: &Channel,
        number: u64,
        deadline: Instant,
    ) -> Option<Result<Box<[u8]>, i32>> {
        loop {
            {
                let mut mail = channel.mail.lock().expect("channel mail");
                channel.pump(&mut mail);
                if let Some((c, buf)) = mail.control.remove(&number) {
                    return Some(if c.err == 0 { Ok(buf) } else { Err(c.err) });
                }
                if Instant::now() >= deadline {
                    return None;
                }
            }
            std::thread::yield_now();
        }
    }

    /// Nobody will collect control read `number`: its completion is dropped when it comes.
    pub(crate) fn abandon_control(&self, channel: &Channel, number: u64) {
        let mut mail = channel.mail.lock().expect("channel mail");
        if mail.control.remove(&number).is_none() && mail.pending.contains_key(&number) {
            mail.abandoned.insert(number);
        }
    }

    /// When a call that would wait until `full` stops waiting: then, or sooner where calls
    /// are kept short (`OfiConfig::call_wait_us`).
    pub(crate) fn call_deadline(&self, now: Instant, full: Instant) -> Instant {
        match self.config.call_wait_us {
            Some(us) => full.min(now + Duration::from_micros(us)),
            None => full,
        }
    }
}
