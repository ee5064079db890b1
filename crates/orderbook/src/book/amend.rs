//! Cancels and replaces of live orders.

use super::{notional_fits, Book, OrderStatus};
use crate::event::{Event, RejectReason};
use crate::order::{OrderId, OrderKind, Price, Qty};

impl Book {
    pub(super) fn cancel(&mut self, id: OrderId, events: &mut Vec<Event>) {
        if let Err(reason) = self.check_live(id) {
            events.push(Event::Rejected { id, reason });
            return;
        }
        self.unlink(id);
        self.finish_cancelled(id, events);
    }

    /// Replace semantics: `qty` is the new total, filled quantity included. At or below what
    /// filled, the rest is cancelled. Otherwise the order keeps its place if the price is the
    /// same and the open quantity does not grow; else it goes to the back of its new price and,
    /// if that price crosses the book, trades at once as an incoming order would. A waiting
    /// stop order keeps its stop price and stays waiting (with a new place among the stops of
    /// its price under the same rule).
    pub(super) fn replace(&mut self, id: OrderId, price: Price, qty: Qty, events: &mut Vec<Event>) {
        if let Err(reason) = self.check_replace(id, price, qty) {
            events.push(Event::Rejected { id, reason });
            return;
        }
        let order = self.orders[&id];
        if qty.0 <= order.filled {
            self.unlink(id);
            self.finish_cancelled(id, events);
            return;
        }
        let open = qty.0 - order.filled;
        let keeps_place = order.kind.limit() == Some(price) && open <= order.open;
        events.push(Event::Replaced { id, price, qty });
        if keeps_place {
            let shrink = order.open - open;
            if order.status == OrderStatus::Resting {
                self.levels_mut(order.side).shrink(price, shrink);
            }
            let order = self.orders.get_mut(&id).expect("checked live");
            order.open = open;
            order.qty = qty.0;
            return;
        }
        self.unlink(id);
        let order = self.orders.get_mut(&id).expect("checked live");
        order.kind = OrderKind::Limit { price };
        order.open = open;
        order.qty = qty.0;
        match (order.status, order.stop) {
            (OrderStatus::Waiting, Some(stop)) => {
                let side = order.side;
                let priority = self.next_priority();
                self.orders.get_mut(&id).expect("checked live").priority = priority;
                self.stops.insert(side, stop, priority, id);
            }
            // A resting order gets its new place when it rests again (if anything is left).
            _ => {
                self.enter(id, events);
                self.trigger_stops(events);
            }
        }
    }

    /// The order exists and is not finished.
    fn check_live(&self, id: OrderId) -> Result<(), RejectReason> {
        match self.orders.get(&id) {
            None => Err(RejectReason::UnknownOrder),
            Some(o) if o.status == OrderStatus::Done => Err(RejectReason::OrderFinished),
            Some(_) => Ok(()),
        }
    }

    /// The checks of a replace, in this order: the order, its kind, the price, overflow.
    fn check_replace(&self, id: OrderId, price: Price, qty: Qty) -> Result<(), RejectReason> {
        self.check_live(id)?;
        let order = &self.orders[&id];
        let Some(old_price) = order.kind.limit() else {
            return Err(RejectReason::MarketReplace);
        };
        if price.0 == 0 {
            return Err(RejectReason::ZeroPrice);
        }
        if qty.0 <= order.filled {
            return Ok(()); // cancels the rest: nothing to overflow
        }
        if !notional_fits(price, qty.0) {
            return Err(RejectReason::Overflow);
        }
        let open = qty.0 - order.filled;
        if order.status == OrderStatus::Resting {
            // What the new level would hold once the order has left its old one.
            let levels = self.levels(order.side);
            let fits = if price == old_price {
                open <= order.open || levels.fits(price, open - order.open)
            } else {
                levels.fits(price, open)
            };
            if !fits {
                return Err(RejectReason::Overflow);
            }
        }
        Ok(())
    }

    /// Takes a live order out of its level or out of the waiting stops.
    fn unlink(&mut self, id: OrderId) {
        let order = self.orders[&id];
        match (order.status, order.kind, order.stop) {
            (OrderStatus::Resting, OrderKind::Limit { price }, _) => {
                self.levels_mut(order.side).remove(price, id, order.open)
            }
            (OrderStatus::Waiting, _, Some(stop)) => {
                self.stops.remove(order.side, stop, order.priority)
            }
            _ => {}
        }
    }
}
