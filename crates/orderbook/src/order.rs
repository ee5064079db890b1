//! What an order is made of: its id, side, price in ticks, quantity in lots, kind, time in
//! force and optional stop price.

/// A client-chosen order id, unique for the life of the book (a finished order's id is never
/// reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OrderId(pub u64);

/// A price in integer ticks (never a float: every replica must compare prices the same way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Price(pub u64);

/// A quantity in lots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Qty(pub u64);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    Buy,
    Sell,
}

impl Side {
    pub fn opposite(self) -> Side {
        match self {
            Side::Buy => Side::Sell,
            Side::Sell => Side::Buy,
        }
    }

    /// Whether an order on this side with limit `limit` may trade at `price`: a buy at or
    /// below its limit, a sell at or above.
    pub fn accepts(self, limit: Price, price: Price) -> bool {
        match self {
            Side::Buy => price <= limit,
            Side::Sell => price >= limit,
        }
    }
}

/// How long an order's unfilled rest lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeInForce {
    /// Good till cancelled: the rest of a limit order rests in the book.
    Gtc,
    /// Immediate or cancel: what does not trade at once is cancelled.
    Ioc,
    /// Fill or kill: all of it trades at once, or none of it does.
    Fok,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OrderKind {
    /// Trades at `price` or better; a GTC rest rests at `price`.
    Limit { price: Price },
    /// Trades at whatever prices the other side offers and never rests.
    Market,
}

impl OrderKind {
    pub fn limit(self) -> Option<Price> {
        match self {
            OrderKind::Limit { price } => Some(price),
            OrderKind::Market => None,
        }
    }
}

/// An order as a client submits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NewOrder {
    pub id: OrderId,
    pub side: Side,
    pub kind: OrderKind,
    pub tif: TimeInForce,
    pub qty: Qty,
    /// A stop order waits, untriggered and outside the book, until the last trade price
    /// reaches its stop: a buy stop when the last price is at or above it, a sell stop at or
    /// below.
    pub stop: Option<Price>,
}

impl NewOrder {
    /// A good-till-cancelled limit order.
    pub fn limit(id: u64, side: Side, price: u64, qty: u64) -> NewOrder {
        NewOrder {
            id: OrderId(id),
            side,
            kind: OrderKind::Limit { price: Price(price) },
            tif: TimeInForce::Gtc,
            qty: Qty(qty),
            stop: None,
        }
    }

    /// A market order (its time in force only matters for FOK: a market order never rests).
    pub fn market(id: u64, side: Side, qty: u64) -> NewOrder {
        NewOrder {
            id: OrderId(id),
            side,
            kind: OrderKind::Market,
            tif: TimeInForce::Ioc,
            qty: Qty(qty),
            stop: None,
        }
    }

    pub fn with_tif(self, tif: TimeInForce) -> NewOrder {
        NewOrder { tif, ..self }
    }

    pub fn with_stop(self, stop: u64) -> NewOrder {
        NewOrder { stop: Some(Price(stop)), ..self }
    }
}
