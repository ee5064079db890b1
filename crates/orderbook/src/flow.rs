//! A realistic random order flow for benchmarks, demos and tests: deterministic from a seed,
//! with its own small generator (no dependency, the same stream on every machine).
//!
//! Prices wander around a mid price (a random walk from [`MID_TICKS`]); of every 100 commands
//! about 55 are GTC limit orders near the touch, 7 IOC and 3 FOK limit orders that reach a
//! little across it, 5 market orders, 4 stop orders a few ticks away from the mid, 16 cancels
//! and 10 replaces of recent GTC limit and stop orders (some of them filled by then, and one
//! cancel in 20 names an id never used: the book rejects those, as it would a real client's).

use crate::command::Command;
use crate::order::{NewOrder, OrderId, Price, Qty, Side, TimeInForce};
use std::collections::VecDeque;

/// Where the mid price starts, in ticks.
pub const MID_TICKS: u64 = 10_000;
const RECENT_IDS: usize = 64;

/// An endless order flow; order ids count up from the first one given.
#[derive(Clone, Debug)]
pub struct Flow {
    state: u64,
    next_id: u64,
    mid_ticks: u64,
    recent: VecDeque<u64>,
}

/// `count` commands of the flow seeded with `seed`, order ids from 1.
pub fn random_flow(seed: u64, count: usize) -> Vec<Command> {
    let mut flow = Flow::new(seed, 1);
    (0..count).map(|_| flow.next_command()).collect()
}

impl Flow {
    /// A flow whose order ids start at `first_id` (give each trader its own range).
    pub fn new(seed: u64, first_id: u64) -> Flow {
        Flow { state: seed, next_id: first_id, mid_ticks: MID_TICKS, recent: VecDeque::new() }
    }

    pub fn next_command(&mut self) -> Command {
        if self.below(5) == 0 {
            self.mid_ticks =
                if self.below(2) == 0 { self.mid_ticks + 1 } else { self.mid_ticks - 1 };
            self.mid_ticks = self.mid_ticks.max(100);
        }
        let roll = self.below(100);
        let side = if self.below(2) == 0 { Side::Buy } else { Side::Sell };
        match roll {
            0..=54 => self.limit(side, -10, 2, TimeInForce::Gtc),
            55..=61 => self.limit(side, -2, 5, TimeInForce::Ioc),
            62..=64 => self.limit(side, -2, 5, TimeInForce::Fok),
            65..=69 => {
                let tif = if self.below(5) == 0 { TimeInForce::Fok } else { TimeInForce::Ioc };
                let qty = self.qty();
                Command::Submit(NewOrder::market(self.fresh_id(), side, qty).with_tif(tif))
            }
            70..=73 => self.stop(side),
            74..=89 => {
                let id = match self.recent_id() {
                    Some(id) if self.below(20) != 0 => id,
                    _ => self.next_id + 1_000_000_000,
                };
                Command::Cancel { id: OrderId(id) }
            }
            _ => match self.recent_id() {
                Some(id) => {
                    let price = self.price(side, -5, 5);
                    Command::Replace { id: OrderId(id), price: Price(price), qty: Qty(self.qty()) }
                }
                None => self.limit(side, -10, 2, TimeInForce::Gtc),
            },
        }
    }

    /// A limit order `from..=to` ticks from the mid towards the other side (negative: away).
    fn limit(&mut self, side: Side, from: i64, to: i64, tif: TimeInForce) -> Command {
        let price = self.price(side, from, to);
        let qty = self.qty();
        let id = self.fresh_id();
        if tif == TimeInForce::Gtc {
            self.remember(id);
        }
        Command::Submit(NewOrder::limit(id, side, price, qty).with_tif(tif))
    }

    /// A stop 3 to 10 ticks from the mid on the side the price must move to (above for a
    /// buy, below for a sell), half of them market orders once triggered.
    fn stop(&mut self, side: Side) -> Command {
        let away = 3 + self.below(8);
        let stop = match side {
            Side::Buy => self.mid_ticks + away,
            Side::Sell => self.mid_ticks - away,
        };
        let qty = self.qty();
        let id = self.fresh_id();
        self.remember(id);
        let order = if self.below(2) == 0 {
            NewOrder::market(id, side, qty)
        } else {
            let limit = match side {
                Side::Buy => stop + 2,
                Side::Sell => stop - 2,
            };
            NewOrder::limit(id, side, limit, qty)
        };
        Command::Submit(order.with_stop(stop))
    }

    fn price(&mut self, side: Side, from: i64, to: i64) -> u64 {
        let offset = from + self.below((to - from + 1) as u64) as i64;
        let price = match side {
            Side::Buy => self.mid_ticks as i64 + offset,
            Side::Sell => self.mid_ticks as i64 - offset,
        };
        price.max(1) as u64
    }

    /// 1 to 100 lots, small sizes more likely.
    fn qty(&mut self) -> u64 {
        let a = 1 + self.below(10);
        let b = 1 + self.below(10);
        a * b
    }

    fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Keeps `id` as one a cancel or replace may name: orders that may still be live (GTC
    /// limit and stop orders; the others are finished once submitted).
    fn remember(&mut self, id: u64) {
        if self.recent.len() == RECENT_IDS {
            self.recent.pop_front();
        }
        self.recent.push_back(id);
    }

    fn recent_id(&mut self) -> Option<u64> {
        if self.recent.is_empty() {
            return None;
        }
        let at = self.below(self.recent.len() as u64) as usize;
        Some(self.recent[at])
    }

    /// A number below `n` (n > 0), from splitmix64.
    fn below(&mut self, n: u64) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Book, Event, RejectReason};
    use std::collections::BTreeMap;

    #[test]
    fn the_same_seed_gives_the_same_flow() {
        assert_eq!(random_flow(7, 500), random_flow(7, 500));
        assert_ne!(random_flow(7, 500), random_flow(8, 500));
    }

    /// The flow reaches every event and the rejects a real client meets, so that benchmarks
    /// and demos run the whole book, not only its resting path.
    #[test]
    fn the_flow_exercises_every_event() {
        let mut book = Book::new();
        let mut events = Vec::new();
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for command in random_flow(1, 20_000) {
            events.clear();
            book.apply(&command, &mut events);
            for e in &events {
                let kind = match e {
                    Event::Accepted { .. } => "accepted",
                    Event::Rejected { reason: RejectReason::UnknownOrder, .. } => "unknown",
                    Event::Rejected { reason: RejectReason::OrderFinished, .. } => "finished",
                    Event::Rejected { .. } => "rejected",
                    Event::Fill { .. } => "fill",
                    Event::Cancelled { .. } => "cancelled",
                    Event::Replaced { .. } => "replaced",
                    Event::StopTriggered { .. } => "triggered",
                    Event::BestChanged { .. } => "best",
                };
                *kinds.entry(kind).or_default() += 1;
            }
        }
        for kind in [
            "accepted",
            "unknown",
            "finished",
            "fill",
            "cancelled",
            "replaced",
            "triggered",
            "best",
        ] {
            assert!(kinds.get(kind).copied().unwrap_or(0) > 20, "{kind}: {kinds:?}");
        }
        assert!(book.orders_open() > 0 && book.orders_open() < 5_000, "{}", book.orders_open());
    }
}
