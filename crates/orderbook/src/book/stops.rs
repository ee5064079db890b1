//! Stop orders waiting for their trigger, in the order they trigger: buy stops by lowest stop
//! price, sell stops by highest, each then by arrival.

use crate::order::{OrderId, Price, Side};
use std::cmp::Reverse;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stops {
    /// Key: stop price, then priority (arrival).
    buys: BTreeMap<(Price, u64), OrderId>,
    sells: BTreeMap<(Reverse<Price>, u64), OrderId>,
}

impl Stops {
    pub(crate) fn insert(&mut self, side: Side, stop: Price, priority: u64, id: OrderId) {
        match side {
            Side::Buy => self.buys.insert((stop, priority), id),
            Side::Sell => self.sells.insert((Reverse(stop), priority), id),
        };
    }

    pub(crate) fn remove(&mut self, side: Side, stop: Price, priority: u64) {
        match side {
            Side::Buy => self.buys.remove(&(stop, priority)),
            Side::Sell => self.sells.remove(&(Reverse(stop), priority)),
        };
    }

    /// Takes out the next stop whose condition `last` (the last trade price) meets: a buy stop
    /// at or below it, else a sell stop at or above it. Both sides cannot be met at once: after
    /// every step the waiting buy stops lie above the last price and the sell stops below.
    pub(crate) fn pop_triggered(&mut self, last: Option<Price>) -> Option<OrderId> {
        let last = last?;
        if let Some(entry) = self.buys.first_entry() {
            if entry.key().0 <= last {
                return Some(entry.remove());
            }
        }
        if let Some(entry) = self.sells.first_entry() {
            if entry.key().0 .0 >= last {
                return Some(entry.remove());
            }
        }
        None
    }

    pub(crate) fn len(&self) -> usize {
        self.buys.len() + self.sells.len()
    }
}
