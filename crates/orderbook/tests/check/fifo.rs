//! "FIFO within a price": a resting order trades only once every order ahead of it at its
//! price, in the queues as they stood before the command, has traded all it had.

use super::Tracked;
use mu_orderbook::{Book, Command, Event, OrderId, Price, Side};
use std::collections::BTreeMap;

/// Each level's queue before the command: order ids and what each had left.
pub struct Queues(BTreeMap<(Side, Price), Vec<(OrderId, u64)>>);

impl Queues {
    /// The queues of `book`, less the order a replace names (it may leave its place).
    pub fn of(book: &Book, command: &Command) -> Queues {
        let moved = match command {
            Command::Replace { id, .. } => Some(*id),
            _ => None,
        };
        let mut levels: BTreeMap<(Side, Price), Vec<(OrderId, u64)>> = BTreeMap::new();
        for side in [Side::Buy, Side::Sell] {
            for o in book.resting(side).filter(|o| Some(o.id) != moved) {
                let price = o.price.expect("resting orders have a price");
                levels.entry((side, price)).or_default().push((o.id, o.open.0));
            }
        }
        Queues(levels)
    }

    pub fn fill(
        &mut self,
        orders: &BTreeMap<OrderId, Tracked>,
        fill: &Event,
    ) -> Result<(), String> {
        let Event::Fill { maker, qty, maker_side, .. } = *fill else { return Ok(()) };
        // The maker's own price, not the fill's: the fill's price is another check's.
        let Some(price) = orders.get(&maker).and_then(|m| m.limit) else { return Ok(()) };
        let Some(queue) = self.0.get_mut(&(maker_side, price)) else { return Ok(()) };
        let at = queue.iter().position(|(id, _)| *id == maker).unwrap_or(queue.len());
        if let Some((ahead, left)) = queue[..at].iter().find(|(_, left)| *left > 0) {
            return Err(format!("{maker:?} traded while {ahead:?}, ahead of it, had {left} left"));
        }
        if let Some(entry) = queue.get_mut(at) {
            entry.1 = entry.1.saturating_sub(qty.0);
        }
        Ok(())
    }
}
