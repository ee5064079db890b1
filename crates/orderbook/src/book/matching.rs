//! Submitting orders and matching them: the checks a new order passes, an order entering the
//! book (taking what it can at the resting orders' prices, then resting or being cancelled by
//! its type), and the stop orders that trades trigger.

use super::{notional_fits, Book, Order, OrderStatus};
use crate::event::{Event, RejectReason};
#[cfg(feature = "mutations")]
use crate::mutation::Mutation;
use crate::order::{NewOrder, OrderId, OrderKind, Price, Qty, Side, TimeInForce};

impl Book {
    pub(super) fn submit(&mut self, new: &NewOrder, events: &mut Vec<Event>) {
        if let Err(reason) = self.check_new(new) {
            events.push(Event::Rejected { id: new.id, reason });
            return;
        }
        let priority = self.next_priority();
        let order = Order {
            side: new.side,
            kind: new.kind,
            tif: new.tif,
            stop: new.stop,
            qty: new.qty.0,
            open: new.qty.0,
            filled: 0,
            cancelled: 0,
            status: OrderStatus::Waiting,
            priority,
        };
        events.push(Event::Accepted { id: new.id });
        match new.stop {
            // A stop whose condition already holds triggers below, in this same command.
            Some(stop) => {
                self.stops.insert(new.side, stop, priority, new.id);
                self.orders.insert(new.id, order);
            }
            None => {
                // The taker is not in `orders` while it trades: it is never its own maker.
                let order = self.enter_order(new.id, order, events);
                self.orders.insert(new.id, order);
            }
        }
        self.trigger_stops(events);
    }

    /// The checks of a new order, in this order: id, quantity, prices, overflow.
    fn check_new(&self, new: &NewOrder) -> Result<(), RejectReason> {
        if self.orders.contains_key(&new.id) {
            return Err(RejectReason::DuplicateId);
        }
        if new.qty.0 == 0 {
            return Err(RejectReason::ZeroQuantity);
        }
        if let OrderKind::Limit { price } = new.kind {
            if price.0 == 0 {
                return Err(RejectReason::ZeroPrice);
            }
            if !notional_fits(price, new.qty.0) {
                return Err(RejectReason::Overflow);
            }
            let rests_now = new.stop.is_none() && new.tif == TimeInForce::Gtc;
            if rests_now && !self.levels(new.side).fits(price, new.qty.0) {
                return Err(RejectReason::Overflow);
            }
        }
        if let Some(stop) = new.stop {
            if stop.0 == 0 {
                return Err(RejectReason::ZeroStopPrice);
            }
            if !notional_fits(stop, new.qty.0) {
                return Err(RejectReason::Overflow);
            }
        }
        Ok(())
    }

    /// An order of the book's (triggered or re-priced) enters the book: [`Book::enter_order`].
    pub(super) fn enter(&mut self, id: OrderId, events: &mut Vec<Event>) {
        let order = self.orders[&id];
        let order = self.enter_order(id, order, events);
        self.orders.insert(id, order);
    }

    /// An accepted order (new, triggered or re-priced) enters the book: a FOK order that cannot
    /// fill whole is cancelled untouched; otherwise it trades what it can, and its rest rests
    /// (a GTC limit order) or is cancelled (market, IOC, FOK). Returns the order as it ends.
    fn enter_order(&mut self, id: OrderId, mut order: Order, events: &mut Vec<Event>) -> Order {
        let limit = order.kind.limit();
        let rests = limit.is_some() && order.tif == TimeInForce::Gtc;
        // Checked when a new order was accepted; a triggered stop's level may have filled since
        // (only with quantities near 2^64): it is cancelled rather than overflow the level.
        let fits =
            limit.is_none_or(|price| !rests || self.levels(order.side).fits(price, order.open));
        let (.., fok_killed) = self.broken_rules();
        let fillable = order.tif != TimeInForce::Fok
            || (!fok_killed && self.levels(order.side.opposite()).can_fill(limit, order.open));
        if !fits || !fillable {
            cancel_rest(id, &mut order, events);
            return order;
        }
        let remaining = self.take(id, order.side, limit, order.open, events);
        order.filled += order.open - remaining;
        order.open = remaining;
        match limit {
            _ if remaining == 0 => order.status = OrderStatus::Done,
            Some(price) if rests => {
                order.status = OrderStatus::Resting;
                order.priority = self.next_priority();
                self.levels_mut(order.side).push(price, id, remaining);
            }
            _ => cancel_rest(id, &mut order, events),
        }
        order
    }

    /// Cancels what is open of an order no longer in the book or among the stops.
    pub(super) fn finish_cancelled(&mut self, id: OrderId, events: &mut Vec<Event>) {
        let order = self.orders.get_mut(&id).expect("cancelled orders are known");
        cancel_rest(id, order, events);
    }

    /// Trades `taker` against the other side, best price first and oldest order first within
    /// a price, until `qty` is gone or the best price is beyond `limit`; each trade at the
    /// resting order's price. Returns what is left.
    fn take(
        &mut self,
        taker: OrderId,
        side: Side,
        limit: Option<Price>,
        qty: u64,
        events: &mut Vec<Event>,
    ) -> u64 {
        let (at_taker_price, lifo, _) = self.broken_rules();
        let makers = match side {
            Side::Buy => &mut self.asks,
            Side::Sell => &mut self.bids,
        };
        let mut remaining = qty;
        while remaining > 0 {
            let Some(mut entry) = makers.best_entry() else { break };
            let level_price = *entry.key();
            if limit.is_some_and(|limit| !side.accepts(limit, level_price)) {
                break;
            }
            let price = match limit {
                Some(limit) if at_taker_price => limit,
                _ => level_price,
            };
            let level = entry.get_mut();
            while remaining > 0 {
                let next = if lifo { level.queue.back() } else { level.queue.front() };
                let Some(&maker) = next else { break };
                let resting = self.orders.get_mut(&maker).expect("queued orders are known");
                let traded = remaining.min(resting.open);
                resting.open -= traded;
                resting.filled += traded;
                level.open -= traded;
                remaining -= traded;
                if resting.open == 0 {
                    resting.status = OrderStatus::Done;
                    if lifo {
                        level.queue.pop_back()
                    } else {
                        level.queue.pop_front()
                    };
                }
                self.trades += 1;
                self.last_trade = Some(price);
                events.push(Event::Fill {
                    trade_id: self.trades,
                    maker,
                    taker,
                    price,
                    qty: Qty(traded),
                    maker_side: side.opposite(),
                });
            }
            if level.queue.is_empty() {
                entry.remove();
            }
        }
        remaining
    }

    /// Triggers, one at a time, the stop orders the last trade price has reached; each enters
    /// the book (and may trade, moving the last price) before the next is chosen.
    pub(super) fn trigger_stops(&mut self, events: &mut Vec<Event>) {
        while let Some(id) = self.stops.pop_triggered(self.last_trade) {
            events.push(Event::StopTriggered { id });
            self.enter(id, events);
        }
    }

    /// Which broken rules this book follows: trading at the taker's price, last in first out,
    /// killing every FOK order.
    #[cfg(feature = "mutations")]
    fn broken_rules(&self) -> (bool, bool, bool) {
        (
            self.mutated(Mutation::TradeAtAggressorPrice),
            self.mutated(Mutation::LifoWithinLevel),
            self.mutated(Mutation::FokAlwaysKilled),
        )
    }

    #[cfg(not(feature = "mutations"))]
    #[inline(always)]
    fn broken_rules(&self) -> (bool, bool, bool) {
        (false, false, false)
    }
}

/// Cancels what is open of `order` and finishes it.
fn cancel_rest(id: OrderId, order: &mut Order, events: &mut Vec<Event>) {
    let remaining = order.open;
    order.cancelled += remaining;
    order.open = 0;
    order.status = OrderStatus::Done;
    events.push(Event::Cancelled { id, remaining: Qty(remaining) });
}
