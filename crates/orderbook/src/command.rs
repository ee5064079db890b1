//! What a client asks the book to do: submit, cancel or replace an order.

use crate::order::{NewOrder, OrderId, Price, Qty};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    Submit(NewOrder),
    /// Cancels what is still open of an order, resting or waiting for its stop.
    Cancel {
        id: OrderId,
    },
    /// Gives a live limit order a new price and a new quantity. `qty` is the order's new
    /// total: what already filled counts towards it, and what is open becomes `qty` minus the
    /// filled quantity. Keeping the price and lowering the quantity keeps the order's place in
    /// its queue; a new price or a larger quantity sends it to the back (and a new price that
    /// crosses the book trades at once, as an incoming order would). A `qty` at or below what
    /// already filled cancels the rest.
    Replace {
        id: OrderId,
        price: Price,
        qty: Qty,
    },
}
