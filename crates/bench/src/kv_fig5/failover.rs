//! Failovers as a client sees them (kill mode, shm): a fresh cluster per failover, one client
//! thread looping puts through the client library, the leader (uKharon-KV's primary) killed
//! with SIGKILL once it serves that client, and the time from the kill to the first put
//! answered by another replica — `mu demo`'s measure ([`mu_daemon::kv_failover`]).
//!
//! A fresh cluster each time rather than the killed replica restarted: a Mu or Velos cluster
//! that lost one of three replicas has no majority left after a second kill, and bringing the
//! killed one back (a state transfer) would put its catching up inside the next failover's
//! cluster. Every failover thus starts from three replicas that agree, as the first does.

use super::systems::System;
use crate::interrupt;
use mu_daemon::kv_failover::{leader_serving_clients, FailoverClock};
use mu_service::Client;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the client may wait for a put after a kill before the failover is given up on.
const FAILOVER_WAIT: Duration = Duration::from_secs(10);
/// How often the waiting thread looks at the clock (the client thread stamps the times).
const WAIT_POLL: Duration = Duration::from_millis(1);

/// Times one failover of `system` (see the module docs); nanoseconds.
pub fn once(system: System, payload: u32) -> Result<u64, String> {
    let mut cluster = system.start_cluster(payload)?;
    let clock = Arc::new(FailoverClock::new());
    let looping = PutLoop::start(cluster.client()?, clock.clone(), payload)?;
    let leader = leader_serving_clients(&clock, &cluster)?;
    clock.killing(leader);
    cluster.kill(leader)?;
    let deadline = Instant::now() + FAILOVER_WAIT;
    loop {
        if let Some(ns) = clock.failover_ns() {
            looping.stop();
            return Ok(ns);
        }
        interrupt::check()?;
        cluster.check_alive()?;
        if Instant::now() > deadline {
            let last = looping.stop();
            return Err(format!(
                "{}: no put answered within {} s of killing replica {leader} (last error: {})",
                system.name(),
                FAILOVER_WAIT.as_secs(),
                last.as_deref().unwrap_or("none")
            ));
        }
        std::thread::sleep(WAIT_POLL);
    }
}

/// A client thread putting values in a loop, stamping each answer on the clock; stopped (and
/// joined) by [`PutLoop::stop`] or when dropped.
struct PutLoop {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Option<String>>>,
}

impl PutLoop {
    fn start(
        mut client: Client,
        clock: Arc<FailoverClock>,
        payload: u32,
    ) -> Result<PutLoop, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let value = vec![b'f'; payload as usize];
        // Short enough that a stop is seen soon after a failed put, long enough for a failover.
        client.set_timeout(FAILOVER_WAIT / 2);
        let thread = std::thread::Builder::new()
            .name("mu-failover-client".into())
            .spawn(move || {
                let mut last_error = None;
                let mut n: u64 = 0;
                while !stopping.load(Ordering::Acquire) {
                    let key = format!("failover-{}", n % 64);
                    n += 1;
                    match client.put(key.as_bytes(), &value) {
                        Ok(()) => clock.answered(client.target(), clock.now_ns()),
                        Err(e) => last_error = Some(e.to_string()),
                    }
                }
                last_error
            })
            .map_err(|e| format!("starting the client thread: {e}"))?;
        Ok(PutLoop { stop, thread: Some(thread) })
    }

    /// Stops the thread; the last error its puts met, if any.
    fn stop(mut self) -> Option<String> {
        self.join()
    }

    fn join(&mut self) -> Option<String> {
        self.stop.store(true, Ordering::Release);
        self.thread.take().and_then(|t| t.join().ok().flatten())
    }
}

impl Drop for PutLoop {
    fn drop(&mut self) {
        self.join();
    }
}
