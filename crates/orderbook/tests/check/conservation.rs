//! "For every order filled + open + cancelled = original": the book's account of each order
//! matches the events' (a replace sets a new original), and the three add up.

use super::Tracked;
use mu_orderbook::{Book, OrderId};
use std::collections::BTreeMap;

pub fn check(orders: &BTreeMap<OrderId, Tracked>, book: &Book) -> Result<(), String> {
    for (id, t) in orders {
        let Some(v) = book.order(*id) else {
            return Err(format!("{id:?} was accepted but the book does not know it"));
        };
        if (v.qty.0, v.filled.0, v.cancelled.0) != (t.qty, t.filled, t.cancelled) {
            return Err(format!("{id:?}: book {v:?}, events {t:?}"));
        }
        if v.filled.0 + v.open.0 + v.cancelled.0 != t.qty {
            return Err(format!("{id:?}: filled + open + cancelled != quantity: {v:?}"));
        }
    }
    if book.orders_count() != orders.len() {
        return Err(format!(
            "the book holds {} orders, {} accepted",
            book.orders_count(),
            orders.len()
        ));
    }
    Ok(())
}
