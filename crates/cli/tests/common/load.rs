//! Clients of a cluster on threads of their own until stopped, each running the test's loop and
//! returning what it saw: the load the process tests put on a cluster while they break it.

use mu_service::{ClusterConfig, Endpoint};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A client's loop: its number, the cluster id, the replicas' endpoints, and the stop flag.
pub type ClientLoop<T> = fn(u64, u64, Vec<(u16, Endpoint)>, &AtomicBool) -> T;

pub struct Load<T> {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<T>>,
}

impl<T: Send + 'static> Load<T> {
    /// `clients` threads, each running `client_loop` against `config`'s cluster.
    pub fn start(clients: u64, config: &ClusterConfig, client_loop: ClientLoop<T>) -> Load<T> {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..clients)
            .map(|t| {
                let (stop, id, endpoints) = (stop.clone(), config.cluster_id, config.endpoints());
                std::thread::spawn(move || client_loop(t, id, endpoints, &stop))
            })
            .collect();
        Load { stop, threads }
    }

    /// The flag that stops the clients (other threads of the test may watch it too).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Stops every client and returns what each saw, in client order.
    pub fn finish(self) -> Vec<T> {
        self.stop.store(true, Ordering::Release);
        self.threads.into_iter().map(|t| t.join().expect("a client thread")).collect()
    }
}
