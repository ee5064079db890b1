//! "The book is never crossed": after every command the best bid is below the best offer.

use mu_orderbook::Book;

pub fn check(book: &Book) -> Result<(), String> {
    match (book.best_bid(), book.best_ask()) {
        (Some((bid, _)), Some((ask, _))) if bid >= ask => {
            Err(format!("crossed book: bid {bid:?} >= ask {ask:?}"))
        }
        _ => Ok(()),
    }
}
