//! The application's state (the key-value store or the order book) as the replica's state
//! machine, shared with the server that answers clients.

use crate::app::{App, AppReply, AppState};
use mu_replica::StateMachine;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The state and what the server needs from it, behind one lock: the replication thread applies
/// committed requests, the server takes the replies of the ones it proposed.
#[derive(Default)]
pub struct Machine {
    pub state: AppState,
    /// The index after the last entry applied.
    pub applied: u64,
    /// Requests this replica proposed and waits for, by (client, sequence number): their
    /// replies once applied.
    waiting: HashMap<(u64, u64), Option<AppReply>>,
}

impl Machine {
    /// Expects the request `(client, seq)`: its reply is kept when it is applied.
    pub fn expect(&mut self, client: u64, seq: u64) {
        self.waiting.insert((client, seq), None);
    }

    /// The reply of an expected request, once applied; stops expecting it.
    pub fn take(&mut self, client: u64, seq: u64) -> Option<AppReply> {
        self.waiting.remove(&(client, seq)).flatten()
    }
}

/// A [`Machine`] shared between the replica (which applies) and the server (which reads).
#[derive(Clone, Default)]
pub struct SharedMachine {
    machine: Arc<Mutex<Machine>>,
    /// The application, fixed for the machine's life (a restore keeps it): asked for every
    /// request, so kept outside the lock.
    app: App,
}

impl SharedMachine {
    /// The key-value store's.
    pub fn new() -> SharedMachine {
        SharedMachine::default()
    }

    /// `app`'s, empty.
    pub fn for_app(app: App) -> SharedMachine {
        let machine = Machine { state: AppState::new(app), ..Machine::default() };
        SharedMachine { machine: Arc::new(Mutex::new(machine)), app }
    }

    /// The application whose state this is, without taking the lock.
    pub fn app(&self) -> App {
        self.app
    }

    pub fn lock(&self) -> MutexGuard<'_, Machine> {
        self.machine.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl StateMachine for SharedMachine {
    fn apply(&mut self, index: u64, request: &[u8]) {
        let mut m = self.lock();
        // Malformed bytes are malformed at every replica: nothing changes anywhere.
        if let Some((client, seq, reply)) = m.state.apply(request) {
            if let Some(slot) = m.waiting.get_mut(&(client, seq)) {
                *slot = Some(reply);
            }
        }
        m.applied = index + 1;
    }

    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        let m = self.lock();
        out.extend_from_slice(&m.applied.to_le_bytes());
        m.state.snapshot(out);
        Ok(())
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let (applied, rest) =
            snapshot.split_first_chunk::<8>().ok_or_else(|| "snapshot: truncated".to_string())?;
        let mut m = self.lock();
        m.state = AppState::restore(m.state.app(), rest)?;
        m.applied = u64::from_le_bytes(*applied);
        Ok(())
    }
}
