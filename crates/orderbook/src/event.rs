//! What applying a command reports: acceptance or rejection, fills, cancellations,
//! replacements, triggered stops and changes of the best bid and offer.

use crate::order::{OrderId, Price, Qty, Side};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// A submitted order passed its checks; it now exists (and its id is used up).
    Accepted { id: OrderId },
    /// A command that changed nothing, and why. For a cancel or replace, `id` is the order it
    /// named.
    Rejected { id: OrderId, reason: RejectReason },
    /// One trade, both sides at once: the maker (resting) and the taker (incoming) each trade
    /// `qty` at `price`, the maker's price. `trade_id` counts trades from 1.
    Fill { trade_id: u64, maker: OrderId, taker: OrderId, price: Price, qty: Qty, maker_side: Side },
    /// What was open of an order is cancelled and the order is finished: by a cancel, by a
    /// replace to at most what filled, or because it could not rest (the rest of a market or
    /// IOC order, a FOK order that could not fill whole).
    Cancelled { id: OrderId, remaining: Qty },
    /// A replace took effect: the order's price and new total quantity.
    Replaced { id: OrderId, price: Price, qty: Qty },
    /// A stop order's condition held: it enters the book now, as a limit or market order.
    StopTriggered { id: OrderId },
    /// The best bid or offer (price and quantity at that price) differs from what it was
    /// before the command; emitted once, last, after a command that changed it.
    BestChanged { bid: Option<(Price, Qty)>, ask: Option<(Price, Qty)> },
}

/// Why a command was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum RejectReason {
    #[error("zero quantity")]
    ZeroQuantity,
    #[error("zero limit price")]
    ZeroPrice,
    #[error("zero stop price")]
    ZeroStopPrice,
    #[error("the order id was already used")]
    DuplicateId,
    #[error("no order has this id")]
    UnknownOrder,
    #[error("the order is finished (filled or cancelled)")]
    OrderFinished,
    /// Price × quantity (computed in 128 bits) does not fit in 64 bits, or the quantity at
    /// the order's price level would not.
    #[error("price times quantity, or the quantity at the price level, overflows 64 bits")]
    Overflow,
    /// A market order has no price to replace.
    #[error("a market order cannot be replaced")]
    MarketReplace,
}

impl RejectReason {
    pub const ALL: [RejectReason; 8] = [
        RejectReason::ZeroQuantity,
        RejectReason::ZeroPrice,
        RejectReason::ZeroStopPrice,
        RejectReason::DuplicateId,
        RejectReason::UnknownOrder,
        RejectReason::OrderFinished,
        RejectReason::Overflow,
        RejectReason::MarketReplace,
    ];

    /// The reason's byte in replies.
    pub fn code(self) -> u8 {
        match self {
            RejectReason::ZeroQuantity => 1,
            RejectReason::ZeroPrice => 2,
            RejectReason::ZeroStopPrice => 3,
            RejectReason::DuplicateId => 4,
            RejectReason::UnknownOrder => 5,
            RejectReason::OrderFinished => 6,
            RejectReason::Overflow => 7,
            RejectReason::MarketReplace => 8,
        }
    }

    pub fn from_code(code: u8) -> Option<RejectReason> {
        RejectReason::ALL.into_iter().find(|r| r.code() == code)
    }
}
