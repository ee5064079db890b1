//! A ring server in a thread of its own on any fabric, and clients' round trips against it:
//! what the shm and ofi tests share.

#![allow(dead_code)]

use mu_fabric::{Fabric, NodeId};
use mu_request_rings::{
    ClientLayout, Echo, Grant, Released, Reply, RingClient, RingServer, ServerConfig,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const WAIT: Duration = Duration::from_secs(30);

/// What the server thread is asked through its out-of-band channel (the service's socket).
pub enum Ask {
    Join { node: u16, grant: mpsc::Sender<Result<Vec<u8>, String>> },
}

/// The server in a thread of its own: admits, echoes, and reports releases, until stopped.
pub struct ServerThread {
    pub asks: mpsc::Sender<Ask>,
    /// What a client registers before it asks (as the service's socket would tell it).
    pub layout: ClientLayout,
    released: mpsc::Receiver<Released>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ServerThread {
    pub fn start<F: Fabric>(fabric: F) -> ServerThread {
        let config = ServerConfig {
            clients_max: 8,
            crash_check_interval_ns: 50_000,
            ..ServerConfig::default()
        };
        let mut server = RingServer::new(fabric, config).expect("server");
        let layout = server.client_layout();
        let (asks, inbox) = mpsc::channel::<Ask>();
        let (report, released) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let clock = Instant::now();
            let mut echo = Echo::default();
            while !stopping.load(Ordering::Relaxed) {
                while let Ok(Ask::Join { node, grant }) = inbox.try_recv() {
                    let answer = server.admit(NodeId(node));
                    let _ = grant
                        .send(answer.map(|g| g.to_bytes().to_vec()).map_err(|e| e.to_string()));
                }
                let served =
                    echo.poll(&mut server, clock.elapsed().as_nanos() as u64).expect("echo");
                for r in server.drain_released() {
                    let _ = report.send(r);
                }
                if served == 0 {
                    std::thread::yield_now();
                }
            }
        });
        ServerThread { asks, layout, released, stop, thread: Some(thread) }
    }

    /// The client's side of the handshake: its node is up; prepare, ask, and connect.
    pub fn join<F: Fabric>(
        asks: &mpsc::Sender<Ask>,
        layout: &ClientLayout,
        fabric: F,
        node: u16,
    ) -> RingClient<F> {
        let prepared = RingClient::prepare(fabric, layout).expect("prepare");
        let (tx, rx) = mpsc::channel();
        asks.send(Ask::Join { node, grant: tx }).expect("server thread gone");
        let bytes = rx.recv_timeout(WAIT).expect("no grant").expect("admit");
        let grant = Grant::from_bytes(&bytes).expect("grant");
        prepared.connect(&grant).map_err(|(_, e)| e).expect("connect")
    }

    /// Waits for the release of `node`.
    pub fn wait_release(&self, node: u16) -> Released {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let r = self.released.recv_timeout(left).expect("no release in time");
            if r.client == NodeId(node) {
                return r;
            }
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Round trips of `payload`s `{node}:{i}` for i in `rounds`, each answer checked.
pub fn round_trips<F: Fabric>(client: &mut RingClient<F>, node: u16, rounds: std::ops::Range<u32>) {
    for i in rounds {
        let payload = format!("{node}:{i}").into_bytes();
        let seq = client.send(&payload).expect("send");
        let deadline = Instant::now() + WAIT;
        let mut answered = false;
        while !answered {
            client
                .poll(|s, reply| {
                    assert_eq!((s, reply), (seq, Reply::Data(&payload)));
                    answered = true;
                })
                .expect("poll");
            assert!(Instant::now() < deadline, "node {node}: request {i} not answered");
            std::thread::yield_now();
        }
    }
}
