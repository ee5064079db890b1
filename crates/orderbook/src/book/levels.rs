//! One side of the book: its price levels, each a first-in first-out queue of resting orders
//! and the total quantity open at that price.

use crate::order::{OrderId, Price, Qty, Side};
use std::collections::btree_map::{Entry, OccupiedEntry};
use std::collections::{BTreeMap, VecDeque};

/// The orders resting at one price, oldest first, and their open quantity added up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Level {
    pub(crate) queue: VecDeque<OrderId>,
    pub(crate) open: u64,
}

/// The levels of one side. Bids are best at the highest price, asks at the lowest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Levels {
    side: Side,
    levels: BTreeMap<Price, Level>,
}

impl Levels {
    pub(crate) fn new(side: Side) -> Levels {
        Levels { side, levels: BTreeMap::new() }
    }

    /// The best price and the quantity open there.
    pub(crate) fn top(&self) -> Option<(Price, Qty)> {
        let best = match self.side {
            Side::Buy => self.levels.last_key_value(),
            Side::Sell => self.levels.first_key_value(),
        };
        best.map(|(price, level)| (*price, Qty(level.open)))
    }

    /// The best level, to trade against it (and remove it once empty).
    pub(crate) fn best_entry(&mut self) -> Option<OccupiedEntry<'_, Price, Level>> {
        match self.side {
            Side::Buy => self.levels.last_entry(),
            Side::Sell => self.levels.first_entry(),
        }
    }

    /// Levels from the best price outwards.
    pub(crate) fn best_first(&self) -> impl Iterator<Item = (&Price, &Level)> {
        let (forward, backward) = match self.side {
            Side::Sell => (Some(self.levels.iter()), None),
            Side::Buy => (None, Some(self.levels.iter().rev())),
        };
        forward.into_iter().flatten().chain(backward.into_iter().flatten())
    }

    /// Whether `qty` more fits at `price` without the level's total overflowing 64 bits.
    pub(crate) fn fits(&self, price: Price, qty: u64) -> bool {
        self.levels.get(&price).map_or(0, |l| l.open).checked_add(qty).is_some()
    }

    /// Whether an incoming order of the other side with `limit` (none: a market order) could
    /// trade `want` at once: the FOK check, made before anything changes.
    pub(crate) fn can_fill(&self, limit: Option<Price>, want: u64) -> bool {
        let taker = self.side.opposite();
        let mut available: u64 = 0;
        for (price, level) in self.best_first() {
            if limit.is_some_and(|limit| !taker.accepts(limit, *price)) {
                break;
            }
            available = available.saturating_add(level.open);
            if available >= want {
                return true;
            }
        }
        false
    }

    /// Queues `id` at the back of `price`'s level. The caller checked [`Levels::fits`].
    pub(crate) fn push(&mut self, price: Price, id: OrderId, qty: u64) {
        let level = self.levels.entry(price).or_default();
        level.open = level.open.checked_add(qty).expect("checked with fits before");
        level.queue.push_back(id);
    }

    /// Takes `id` and its `open` quantity out of `price`'s level, dropping the level if empty.
    pub(crate) fn remove(&mut self, price: Price, id: OrderId, open: u64) {
        if let Entry::Occupied(mut entry) = self.levels.entry(price) {
            let level = entry.get_mut();
            if let Some(at) = level.queue.iter().position(|&queued| queued == id) {
                level.queue.remove(at);
                level.open -= open;
            }
            if level.queue.is_empty() {
                entry.remove();
            }
        }
    }

    /// Lowers the open quantity at `price` by `by` (an order there shrank in place).
    pub(crate) fn shrink(&mut self, price: Price, by: u64) {
        if let Some(level) = self.levels.get_mut(&price) {
            level.open -= by;
        }
    }

    pub(crate) fn orders_count(&self) -> usize {
        self.levels.values().map(|l| l.queue.len()).sum()
    }
}
