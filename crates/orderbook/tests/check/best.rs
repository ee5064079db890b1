//! "Best bid and offer changes": a command's last event is the new best bid and offer exactly
//! when they changed, and then they are the book's.

use mu_orderbook::{Book, Event};

pub fn check(before: &Book, events: &[Event], after: &Book) -> Result<(), String> {
    let changed = (before.best_bid(), before.best_ask()) != (after.best_bid(), after.best_ask());
    let reported: Vec<&Event> =
        events.iter().filter(|e| matches!(e, Event::BestChanged { .. })).collect();
    match (changed, reported.as_slice()) {
        (false, []) => Ok(()),
        (true, [Event::BestChanged { bid, ask }])
            if events.last() == Some(reported[0])
                && (*bid, *ask) == (after.best_bid(), after.best_ask()) =>
        {
            Ok(())
        }
        _ => Err(format!("top changed: {changed}, reported {reported:?}")),
    }
}
