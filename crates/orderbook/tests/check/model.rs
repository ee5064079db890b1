//! A deliberately simple second order book, for a differential test: every order in one map,
//! the best maker found by scanning them all, stops scanned the same way. Slow and obviously
//! right; the book must give exactly its events, command by command. It catches what the
//! other checks cannot see: an order that should have traded and did not (an IOC or FOK
//! cancelled with liquidity there, a stop that never triggers), a wrong reject.

use mu_orderbook::{
    Command, Event, NewOrder, OrderId, OrderKind, Price, Qty, RejectReason, Side, TimeInForce,
};
use std::collections::BTreeMap;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Live {
    Waiting,
    Resting,
    /// Trading as the incoming order: not a maker.
    Entering,
    Done,
}

#[derive(Clone, Copy, Debug)]
struct Order {
    side: Side,
    limit: Option<Price>,
    tif: TimeInForce,
    stop: Option<Price>,
    qty: u64,
    open: u64,
    filled: u64,
    live: Live,
    place: u64,
}

#[derive(Default)]
pub struct Model {
    orders: BTreeMap<OrderId, Order>,
    counter: u64,
    trades: u64,
    last: Option<Price>,
}

type Top = (Option<(Price, Qty)>, Option<(Price, Qty)>);

impl Model {
    pub fn apply(&mut self, command: &Command) -> Vec<Event> {
        let mut events = Vec::new();
        let before = self.top();
        let result = match *command {
            Command::Submit(new) => self.submit(new, &mut events),
            Command::Cancel { id } => self.live(id).map(|_| self.cancel_rest(id, &mut events)),
            Command::Replace { id, price, qty } => self.replace(id, price, qty.0, &mut events),
        };
        if let Err((id, reason)) = result {
            events.push(Event::Rejected { id, reason });
        }
        let after = self.top();
        if after != before {
            events.push(Event::BestChanged { bid: after.0, ask: after.1 });
        }
        events
    }

    fn submit(
        &mut self,
        new: NewOrder,
        events: &mut Vec<Event>,
    ) -> Result<(), (OrderId, RejectReason)> {
        let reject = |reason| Err((new.id, reason));
        let qty = new.qty.0;
        if self.orders.contains_key(&new.id) {
            return reject(RejectReason::DuplicateId);
        }
        if qty == 0 {
            return reject(RejectReason::ZeroQuantity);
        }
        if let OrderKind::Limit { price } = new.kind {
            if price.0 == 0 {
                return reject(RejectReason::ZeroPrice);
            }
            let rests = new.stop.is_none() && new.tif == TimeInForce::Gtc;
            if too_big(price, qty) || (rests && !self.fits(new.side, price, qty)) {
                return reject(RejectReason::Overflow);
            }
        }
        if let Some(stop) = new.stop {
            if stop.0 == 0 {
                return reject(RejectReason::ZeroStopPrice);
            }
            if too_big(stop, qty) {
                return reject(RejectReason::Overflow);
            }
        }
        self.counter += 1;
        let order = Order {
            side: new.side,
            limit: new.kind.limit(),
            tif: new.tif,
            stop: new.stop,
            qty,
            open: qty,
            filled: 0,
            live: if new.stop.is_some() { Live::Waiting } else { Live::Entering },
            place: self.counter,
        };
        self.orders.insert(new.id, order);
        events.push(Event::Accepted { id: new.id });
        if new.stop.is_none() {
            self.enter(new.id, events);
        }
        self.trigger(events);
        Ok(())
    }

    fn replace(
        &mut self,
        id: OrderId,
        price: Price,
        qty: u64,
        events: &mut Vec<Event>,
    ) -> Result<(), (OrderId, RejectReason)> {
        let o = self.live(id)?;
        let Some(old) = o.limit else { return Err((id, RejectReason::MarketReplace)) };
        if price.0 == 0 {
            return Err((id, RejectReason::ZeroPrice));
        }
        if qty <= o.filled {
            self.cancel_rest(id, events);
            return Ok(());
        }
        let open = qty - o.filled;
        let level = if o.live == Live::Resting && price == old { o.open } else { 0 };
        let resting_fits = o.live != Live::Resting
            || u128::from(self.level(o.side, price)) - u128::from(level) + u128::from(open)
                <= u128::from(u64::MAX);
        if too_big(price, qty) || !resting_fits {
            return Err((id, RejectReason::Overflow));
        }
        events.push(Event::Replaced { id, price: Price(price.0), qty: Qty(qty) });
        let keeps = price == old && open <= o.open;
        let o = self.orders.get_mut(&id).unwrap();
        o.limit = Some(price);
        o.open = open;
        o.qty = qty;
        if keeps {
            return Ok(());
        }
        if o.live == Live::Waiting {
            self.counter += 1;
            o.place = self.counter;
        } else {
            o.live = Live::Entering;
            self.enter(id, events);
            self.trigger(events);
        }
        Ok(())
    }

    fn enter(&mut self, id: OrderId, events: &mut Vec<Event>) {
        let o = self.orders[&id];
        let rests = o.limit.is_some() && o.tif == TimeInForce::Gtc;
        let fits = !rests || self.fits(o.side, o.limit.unwrap(), o.open);
        let reachable: u128 = self
            .orders
            .values()
            .filter(|m| m.live == Live::Resting && m.side != o.side)
            .filter(|m| o.limit.is_none_or(|l| o.side.accepts(l, m.limit.unwrap())))
            .map(|m| u128::from(m.open))
            .sum();
        if !fits || (o.tif == TimeInForce::Fok && reachable < u128::from(o.open)) {
            self.cancel_rest(id, events);
            return;
        }
        while self.orders[&id].open > 0 {
            let Some(maker) = self.best_maker(o.side, o.limit) else { break };
            let price = self.orders[&maker].limit.unwrap();
            let traded = self.orders[&maker].open.min(self.orders[&id].open);
            let m = self.orders.get_mut(&maker).unwrap();
            m.open -= traded;
            m.filled += traded;
            if m.open == 0 {
                m.live = Live::Done;
            }
            let t = self.orders.get_mut(&id).unwrap();
            t.open -= traded;
            t.filled += traded;
            self.trades += 1;
            self.last = Some(price);
            events.push(Event::Fill {
                trade_id: self.trades,
                maker,
                taker: id,
                price,
                qty: Qty(traded),
                maker_side: o.side.opposite(),
            });
        }
        let t = self.orders.get_mut(&id).unwrap();
        if t.open == 0 {
            t.live = Live::Done;
        } else if rests {
            self.counter += 1;
            t.live = Live::Resting;
            t.place = self.counter;
        } else {
            self.cancel_rest(id, events);
        }
    }

    fn trigger(&mut self, events: &mut Vec<Event>) {
        while let Some(last) = self.last {
            let waiting = self.orders.iter().filter(|(_, o)| o.live == Live::Waiting);
            let buy = waiting
                .clone()
                .filter(|(_, o)| o.side == Side::Buy && o.stop.unwrap() <= last)
                .min_by_key(|(_, o)| (o.stop.unwrap(), o.place));
            let sell = waiting
                .filter(|(_, o)| o.side == Side::Sell && o.stop.unwrap() >= last)
                .min_by_key(|(_, o)| (u64::MAX - o.stop.unwrap().0, o.place));
            let Some((&id, _)) = buy.or(sell) else { return };
            self.orders.get_mut(&id).unwrap().live = Live::Entering;
            events.push(Event::StopTriggered { id });
            self.enter(id, events);
        }
    }

    /// The resting order of the other side a taker trades with next: best price, then place.
    fn best_maker(&self, taker: Side, limit: Option<Price>) -> Option<OrderId> {
        self.orders
            .iter()
            .filter(|(_, m)| m.live == Live::Resting && m.side != taker)
            .filter(|(_, m)| limit.is_none_or(|l| taker.accepts(l, m.limit.unwrap())))
            .min_by_key(|(_, m)| {
                let p = m.limit.unwrap().0;
                (if taker == Side::Buy { p } else { u64::MAX - p }, m.place)
            })
            .map(|(id, _)| *id)
    }

    fn cancel_rest(&mut self, id: OrderId, events: &mut Vec<Event>) {
        let o = self.orders.get_mut(&id).unwrap();
        events.push(Event::Cancelled { id, remaining: Qty(o.open) });
        o.open = 0;
        o.live = Live::Done;
    }

    fn live(&self, id: OrderId) -> Result<Order, (OrderId, RejectReason)> {
        match self.orders.get(&id) {
            None => Err((id, RejectReason::UnknownOrder)),
            Some(o) if o.live == Live::Done => Err((id, RejectReason::OrderFinished)),
            Some(o) => Ok(*o),
        }
    }

    fn level(&self, side: Side, price: Price) -> u64 {
        let resting = self.orders.values().filter(|o| o.live == Live::Resting);
        resting.filter(|o| o.side == side && o.limit == Some(price)).map(|o| o.open).sum()
    }

    fn fits(&self, side: Side, price: Price, qty: u64) -> bool {
        self.level(side, price).checked_add(qty).is_some()
    }

    fn top(&self) -> Top {
        let best = |side: Side| {
            let prices = self.orders.values().filter(|o| o.live == Live::Resting && o.side == side);
            let price = match side {
                Side::Buy => prices.filter_map(|o| o.limit).max(),
                Side::Sell => prices.filter_map(|o| o.limit).min(),
            }?;
            Some((price, Qty(self.level(side, price))))
        };
        (best(Side::Buy), best(Side::Sell))
    }
}

fn too_big(price: Price, qty: u64) -> bool {
    u128::from(price.0) * u128::from(qty) > u128::from(u64::MAX)
}
