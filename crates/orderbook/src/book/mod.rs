//! The book: every order it has seen, the resting orders by side and price level, the stop
//! orders waiting for their trigger, the last trade price and the counters that stand in for
//! time.

mod amend;
mod levels;
mod matching;
mod snapshot;

pub(crate) use snapshot::tif_code;
mod stops;

use crate::command::Command;
use crate::event::Event;
#[cfg(feature = "mutations")]
use crate::mutation::Mutation;
use crate::order::{OrderId, OrderKind, Price, Qty, Side, TimeInForce};
use levels::Levels;
use std::collections::BTreeMap;
use stops::Stops;

/// Where an order is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OrderStatus {
    /// A stop order whose condition has not held yet; it is not in the book.
    Waiting,
    /// In the book at its limit price.
    Resting,
    /// Filled or cancelled; its id stays used.
    Done,
}

/// What the book knows of one order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OrderView {
    pub id: OrderId,
    pub side: Side,
    /// The limit price (`None`: a market order).
    pub price: Option<Price>,
    pub tif: TimeInForce,
    pub stop: Option<Price>,
    /// The order's quantity, as submitted or as last replaced: always `open + filled +
    /// cancelled`.
    pub qty: Qty,
    pub open: Qty,
    pub filled: Qty,
    pub cancelled: Qty,
    pub status: OrderStatus,
    /// Where the order stands in time: orders at one price trade in increasing priority (the
    /// count of arrivals, triggers and priority-losing replaces before it, never a clock).
    pub priority: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Order {
    side: Side,
    kind: OrderKind,
    tif: TimeInForce,
    stop: Option<Price>,
    qty: u64,
    open: u64,
    filled: u64,
    cancelled: u64,
    status: OrderStatus,
    priority: u64,
}

/// A deterministic limit order book: the same commands in the same order give the same events
/// and the same state, on any machine.
///
/// Every order ever accepted is remembered (finished ones too, so that ids are never reused and
/// a late cancel gets [`crate::RejectReason::OrderFinished`]): the book grows with the number of
/// orders, as the key-value store's sessions grow with clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Book {
    orders: BTreeMap<OrderId, Order>,
    bids: Levels,
    asks: Levels,
    stops: Stops,
    last_trade: Option<Price>,
    /// The id of the last trade (trade ids count from 1).
    trades: u64,
    /// The last priority given.
    sequence: u64,
    #[cfg(feature = "mutations")]
    mutation: Option<Mutation>,
}

impl Default for Book {
    fn default() -> Book {
        Book::new()
    }
}

impl Book {
    pub fn new() -> Book {
        Book {
            orders: BTreeMap::new(),
            bids: Levels::new(Side::Buy),
            asks: Levels::new(Side::Sell),
            stops: Stops::default(),
            last_trade: None,
            trades: 0,
            sequence: 0,
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }

    /// A book that breaks one matching rule on purpose, for the tests that show the property
    /// checks catch it.
    #[cfg(feature = "mutations")]
    pub fn with_mutation(mutation: Mutation) -> Book {
        Book { mutation: Some(mutation), ..Book::new() }
    }

    #[cfg(feature = "mutations")]
    fn mutated(&self, mutation: Mutation) -> bool {
        self.mutation == Some(mutation)
    }

    /// Applies one command, appending what happened to `events` (nothing is allocated but
    /// `events`' growth and the book's own). A rejected command changes nothing.
    pub fn apply(&mut self, command: &Command, events: &mut Vec<Event>) {
        let top_before = (self.best_bid(), self.best_ask());
        match *command {
            Command::Submit(order) => self.submit(&order, events),
            Command::Cancel { id } => self.cancel(id, events),
            Command::Replace { id, price, qty } => self.replace(id, price, qty, events),
        }
        let top = (self.best_bid(), self.best_ask());
        if top != top_before {
            events.push(Event::BestChanged { bid: top.0, ask: top.1 });
        }
    }

    /// The highest bid and the quantity open at it.
    pub fn best_bid(&self) -> Option<(Price, Qty)> {
        self.bids.top()
    }

    /// The lowest offer and the quantity open at it.
    pub fn best_ask(&self) -> Option<(Price, Qty)> {
        self.asks.top()
    }

    /// The price of the last trade, which stop orders watch.
    pub fn last_trade(&self) -> Option<Price> {
        self.last_trade
    }

    /// How many trades there have been (the last trade id).
    pub fn trades_count(&self) -> u64 {
        self.trades
    }

    pub fn order(&self, id: OrderId) -> Option<OrderView> {
        self.orders.get(&id).map(|o| view(id, o))
    }

    /// How many orders are live: resting in the book or waiting for their stop.
    pub fn orders_open(&self) -> usize {
        self.bids.orders_count() + self.asks.orders_count() + self.stops.len()
    }

    /// How many stop orders wait for their trigger.
    pub fn stops_waiting(&self) -> usize {
        self.stops.len()
    }

    /// How many orders the book has accepted, finished ones included.
    pub fn orders_count(&self) -> usize {
        self.orders.len()
    }

    /// The resting orders of one side, best price first and, within a price, in the order they
    /// trade.
    pub fn resting(&self, side: Side) -> impl Iterator<Item = OrderView> + '_ {
        let levels = match side {
            Side::Buy => &self.bids,
            Side::Sell => &self.asks,
        };
        levels
            .best_first()
            .flat_map(|(_, level)| level.queue.iter())
            .map(|id| view(*id, &self.orders[id]))
    }

    /// A digest of the whole state: books that applied the same commands have the same digest.
    pub fn digest(&self) -> u64 {
        let mut bytes = Vec::new();
        self.snapshot(&mut bytes);
        mu_log::digest(0x6d75_6f62_0000_0001, &bytes)
    }

    fn levels_mut(&mut self, side: Side) -> &mut Levels {
        match side {
            Side::Buy => &mut self.bids,
            Side::Sell => &mut self.asks,
        }
    }

    fn levels(&self, side: Side) -> &Levels {
        match side {
            Side::Buy => &self.bids,
            Side::Sell => &self.asks,
        }
    }

    fn next_priority(&mut self) -> u64 {
        self.sequence += 1;
        self.sequence
    }
}

fn view(id: OrderId, o: &Order) -> OrderView {
    OrderView {
        id,
        side: o.side,
        price: o.kind.limit(),
        tif: o.tif,
        stop: o.stop,
        qty: Qty(o.qty),
        open: Qty(o.open),
        filled: Qty(o.filled),
        cancelled: Qty(o.cancelled),
        status: o.status,
        priority: o.priority,
    }
}

/// Whether `price × qty`, computed in 128 bits, fits in 64: an order's notional value must.
fn notional_fits(price: Price, qty: u64) -> bool {
    u128::from(price.0) * u128::from(qty) <= u128::from(u64::MAX)
}
