//! "Both sides of a fill carry the same quantity", at the resting order's price, and "an
//! aggressor never trades worse than its limit".
//!
//! A fill is one event for both sides, so the same quantity is its structure; what can go
//! wrong is its content: a zero quantity, a maker and taker on the same side, a price other
//! than the maker's, a price beyond the taker's limit.

use super::Tracked;
use mu_orderbook::{Event, OrderId};
use std::collections::BTreeMap;

pub fn check(orders: &BTreeMap<OrderId, Tracked>, fill: &Event) -> Result<(), String> {
    let Event::Fill { maker, taker, price, qty, maker_side, .. } = *fill else {
        return Ok(());
    };
    let (Some(m), Some(t)) = (orders.get(&maker), orders.get(&taker)) else {
        return Err("a fill names an order never accepted".into());
    };
    if qty.0 == 0 || maker == taker {
        return Err("an empty fill, or an order trading with itself".into());
    }
    if m.side != maker_side || t.side != maker_side.opposite() {
        return Err(format!(
            "sides: maker {:?}, taker {:?}, fill says maker {maker_side:?}",
            m.side, t.side
        ));
    }
    if m.limit != Some(price) {
        return Err(format!("traded at {price:?}, not the resting order's price {:?}", m.limit));
    }
    if let Some(limit) = t.limit {
        if !t.side.accepts(limit, price) {
            return Err(format!("the aggressor's limit {limit:?} is worse than {price:?}"));
        }
    }
    if m.filled + qty.0 > m.qty || t.filled + qty.0 > t.qty {
        return Err("a fill beyond an order's quantity".into());
    }
    Ok(())
}
