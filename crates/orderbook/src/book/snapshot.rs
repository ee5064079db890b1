//! The book as bytes and back.
//!
//! Layout (little-endian), version 1: magic `"muob"` (4 bytes), version (1), the last
//! priority given (8), the last trade id (8), the last trade price (a flag byte, then 8 bytes
//! if 1), the number of orders (8), then each order in increasing id order: id (8), side (1:
//! 0 buy, 1 sell), kind (1: 0 limit, then its price (8); 1 market), time in force (1: 0 GTC,
//! 1 IOC, 2 FOK), stop (a flag, then 8 bytes if 1), quantity, open, filled, cancelled (8
//! each), status (1: 0 waiting, 1 resting, 2 done), priority (8).
//!
//! The price levels and the waiting stops are not written: they follow from the orders
//! (resting orders queue at their price in increasing priority). Restoring checks everything
//! the book relies on, so that garbage is refused rather than panicking later.

use super::{Book, Order, OrderStatus};
use crate::codec::{put_u64, side_code, Reader, RestoreError};
use crate::order::{OrderId, OrderKind, Price, TimeInForce};

const MAGIC: u32 = 0x626f_756d; // "muob" in little-endian bytes
const VERSION: u8 = 1;
/// The largest counter a snapshot may hold. A book counts at most a few priorities and trades
/// per command, so it could not get here in centuries; a snapshot that says otherwise is
/// garbage, and refusing it keeps the counters from overflowing after a restore.
const COUNTER_MAX: u64 = 1 << 62;

impl Book {
    /// Appends the book's state to `out`; [`Book::restore`] reads it back. Two books with the
    /// same state write the same bytes.
    pub fn snapshot(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.push(VERSION);
        put_u64(out, self.sequence);
        put_u64(out, self.trades);
        put_price(out, self.last_trade);
        put_u64(out, self.orders.len() as u64);
        for (id, o) in &self.orders {
            put_u64(out, id.0);
            out.push(side_code(o.side));
            match o.kind {
                OrderKind::Limit { price } => {
                    out.push(0);
                    put_u64(out, price.0);
                }
                OrderKind::Market => out.push(1),
            }
            out.push(tif_code(o.tif));
            put_price(out, o.stop);
            for v in [o.qty, o.open, o.filled, o.cancelled] {
                put_u64(out, v);
            }
            out.push(status_code(o.status));
            put_u64(out, o.priority);
        }
    }

    /// The book a snapshot holds; never panics, whatever the bytes.
    pub fn restore(bytes: &[u8]) -> Result<Book, RestoreError> {
        let mut r = Reader(bytes);
        let book = Book::read(&mut r)?;
        r.end()?;
        Ok(book)
    }

    pub(crate) fn read(r: &mut Reader) -> Result<Book, RestoreError> {
        if r.u32()? != MAGIC {
            return Err(RestoreError("not an order book snapshot"));
        }
        if r.u8()? != VERSION {
            return Err(RestoreError("unknown order book snapshot version"));
        }
        let mut book = Book::new();
        book.sequence = r.u64()?;
        book.trades = r.u64()?;
        if book.sequence > COUNTER_MAX || book.trades > COUNTER_MAX {
            return Err(RestoreError("a counter beyond what a book can reach"));
        }
        book.last_trade = read_price(r)?;
        let mut queued: Vec<(u64, OrderId)> = Vec::new();
        for _ in 0..r.u64()? {
            let id = OrderId(r.u64()?);
            if book.orders.last_key_value().is_some_and(|(last, _)| *last >= id) {
                return Err(RestoreError("orders out of id order"));
            }
            let order = read_order(r)?;
            check_order(&order, book.sequence)?;
            if order.status != OrderStatus::Done {
                queued.push((order.priority, id));
            }
            book.orders.insert(id, order);
        }
        queued.sort_unstable();
        if queued.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(RestoreError("two live orders share a priority"));
        }
        for (priority, id) in queued {
            book.relink(id, priority)?;
        }
        book.check_restored()?;
        Ok(book)
    }

    /// Puts a restored live order back into its level or among the stops.
    fn relink(&mut self, id: OrderId, priority: u64) -> Result<(), RestoreError> {
        let o = self.orders[&id];
        match (o.status, o.kind, o.stop) {
            (OrderStatus::Resting, OrderKind::Limit { price }, _) => {
                if !self.levels(o.side).fits(price, o.open) {
                    return Err(RestoreError("a price level's quantity overflows"));
                }
                self.levels_mut(o.side).push(price, id, o.open);
            }
            (OrderStatus::Waiting, _, Some(stop)) => self.stops.insert(o.side, stop, priority, id),
            _ => return Err(RestoreError("a live order that can be neither resting nor waiting")),
        }
        Ok(())
    }

    /// What holds after every command: the book is not crossed and no waiting stop is
    /// already triggered.
    fn check_restored(&self) -> Result<(), RestoreError> {
        if let (Some((bid, _)), Some((ask, _))) = (self.best_bid(), self.best_ask()) {
            if bid >= ask {
                return Err(RestoreError("the book is crossed"));
            }
        }
        let mut stops = self.stops.clone();
        if stops.pop_triggered(self.last_trade).is_some() {
            return Err(RestoreError("a waiting stop is already triggered"));
        }
        Ok(())
    }
}

fn read_order(r: &mut Reader) -> Result<Order, RestoreError> {
    let side = r.side()?;
    let kind = match r.u8()? {
        0 => OrderKind::Limit { price: Price(r.u64()?) },
        1 => OrderKind::Market,
        _ => return Err(RestoreError("bad order kind")),
    };
    let tif = tif_from(r.u8()?).ok_or(RestoreError("bad time in force"))?;
    let stop = read_price(r)?;
    let (qty, open, filled, cancelled) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
    let status = status_from(r.u8()?).ok_or(RestoreError("bad order status"))?;
    let priority = r.u64()?;
    Ok(Order { side, kind, tif, stop, qty, open, filled, cancelled, status, priority })
}

/// The rules every order keeps: quantities add up, a live order has something open and
/// nothing cancelled, prices are not zero, priorities were given before the snapshot.
fn check_order(o: &Order, sequence: u64) -> Result<(), RestoreError> {
    let total = o.open.checked_add(o.filled).and_then(|t| t.checked_add(o.cancelled));
    if total != Some(o.qty) || o.qty == 0 {
        return Err(RestoreError("an order's quantities do not add up"));
    }
    if o.kind.limit() == Some(Price(0)) || o.stop == Some(Price(0)) {
        return Err(RestoreError("a zero price"));
    }
    if o.priority == 0 || o.priority > sequence {
        return Err(RestoreError("a priority not yet given"));
    }
    let live_ok = o.open > 0 && o.cancelled == 0;
    let ok = match o.status {
        OrderStatus::Done => o.open == 0,
        OrderStatus::Resting => live_ok && o.tif == TimeInForce::Gtc,
        OrderStatus::Waiting => live_ok && o.stop.is_some(),
    };
    if !ok {
        return Err(RestoreError("an order's status does not match its quantities"));
    }
    Ok(())
}

fn put_price(out: &mut Vec<u8>, price: Option<Price>) {
    match price {
        None => out.push(0),
        Some(p) => {
            out.push(1);
            put_u64(out, p.0);
        }
    }
}

fn read_price(r: &mut Reader) -> Result<Option<Price>, RestoreError> {
    Ok(if r.flag()? { Some(Price(r.u64()?)) } else { None })
}

pub(crate) fn tif_code(tif: TimeInForce) -> u8 {
    match tif {
        TimeInForce::Gtc => 0,
        TimeInForce::Ioc => 1,
        TimeInForce::Fok => 2,
    }
}

pub(crate) fn tif_from(code: u8) -> Option<TimeInForce> {
    match code {
        0 => Some(TimeInForce::Gtc),
        1 => Some(TimeInForce::Ioc),
        2 => Some(TimeInForce::Fok),
        _ => None,
    }
}

fn status_code(status: OrderStatus) -> u8 {
    match status {
        OrderStatus::Waiting => 0,
        OrderStatus::Resting => 1,
        OrderStatus::Done => 2,
    }
}

fn status_from(code: u8) -> Option<OrderStatus> {
    match code {
        0 => Some(OrderStatus::Waiting),
        1 => Some(OrderStatus::Resting),
        2 => Some(OrderStatus::Done),
        _ => None,
    }
}
