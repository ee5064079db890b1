//! A channel: the endpoint every connection of one channel number goes through, its address
//! table, and the mailboxes its completions are sorted into (by poster: the control plane or
//! one of the node's endpoints).

use crate::config::OfiConfig;
use crate::ffi::{RawCompletion, RawEndpoint};
use crate::unreachable;
use mu_fabric::{FabricError, NodeId};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// The context of an operation: the token of whoever posted it (0: the control plane, else an
/// endpoint) and a number of the poster's own.
pub(crate) const TOKEN_SHIFT: u32 = 48;

pub(crate) const CONTROL_TOKEN: u16 = 0;

pub(crate) fn context(token: u16, number: u64) -> u64 {
    (token as u64) << TOKEN_SHIFT | (number & ((1 << TOKEN_SHIFT) - 1))
}

/// One channel: the endpoint listening on `base_port + channel`, through which every connection
/// of that channel goes (to each peer's endpoint of the same channel), and the mailboxes its
/// completions are sorted into.
pub(crate) struct Channel {
    pub(crate) ep: RawEndpoint,
    pub(crate) number: u8,
    pub(crate) mail: Mutex<Mail>,
    /// Peer address-table entries, by node.
    pub(crate) addresses: Mutex<HashMap<NodeId, u64>>,
}

#[derive(Default)]
pub(crate) struct Mail {
    /// Completions of each live endpoint, by token.
    boxes: HashMap<u16, VecDeque<RawCompletion>>,
    /// Buffers of control reads under way, by number: kept until the provider is done.
    pub(crate) pending: HashMap<u64, Box<[u8]>>,
    /// Control-plane completions by number, with their buffers.
    pub(crate) control: HashMap<u64, (RawCompletion, Box<[u8]>)>,
    /// Control reads nobody will collect: dropped when they complete.
    pub(crate) abandoned: std::collections::HashSet<u64>,
}

impl Channel {
    /// The peer's endpoint of this channel in the channel's address table.
    pub(crate) fn address(&self, config: &OfiConfig, peer: NodeId) -> Result<u64, FabricError> {
        let mut addresses = self.addresses.lock().expect("addresses");
        if let Some(&a) = addresses.get(&peer) {
            return Ok(a);
        }
        let addr = config.addr(peer)?;
        let a = self
            .ep
            .insert_address(&addr.host, addr.base_port + self.number as u16)
            .map_err(|e| unreachable(peer, e))?;
        addresses.insert(peer, a);
        Ok(a)
    }

    /// Reads what the completion queue holds (driving the provider's progress) and sorts it.
    pub(crate) fn pump(&self, mail: &mut Mail) {
        let mut raw = [RawCompletion::default(); 16];
        loop {
            let n = match self.ep.read_completions(&mut raw) {
                Ok(n) => n,
                Err(_) => return,
            };
            for c in &raw[..n] {
                let token = (c.context >> TOKEN_SHIFT) as u16;
                if token == CONTROL_TOKEN {
                    let number = c.context & ((1 << TOKEN_SHIFT) - 1);
                    let buf = mail.pending.remove(&number);
                    if !mail.abandoned.remove(&number) {
                        if let Some(buf) = buf {
                            mail.control.insert(number, (*c, buf));
                        }
                    }
                } else if let Some(q) = mail.boxes.get_mut(&token) {
                    q.push_back(*c);
                }
            }
            if n < raw.len() {
                return;
            }
        }
    }

    /// Drives progress and moves `token`'s completions into `out`.
    pub(crate) fn take(&self, token: u16, out: &mut VecDeque<RawCompletion>) {
        let mut mail = self.mail.lock().expect("channel mail");
        self.pump(&mut mail);
        if let Some(q) = mail.boxes.get_mut(&token) {
            out.extend(q.drain(..));
        }
    }

    /// Drives progress (the progress thread's call).
    pub(crate) fn progress(&self) {
        let mut mail = self.mail.lock().expect("channel mail");
        self.pump(&mut mail);
    }

    pub(crate) fn open_box(&self, token: u16) {
        self.mail.lock().expect("channel mail").boxes.entry(token).or_default();
    }

    pub(crate) fn close_box(&self, token: u16) {
        self.mail.lock().expect("channel mail").boxes.remove(&token);
    }
}
