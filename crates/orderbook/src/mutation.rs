//! Deliberately broken variants of the book (feature `mutations`, for this crate's tests only):
//! the property checks must catch each, which shows they can find bugs. A variant is chosen per
//! book at run time ([`crate::Book::with_mutation`]); without the feature no book can hold one
//! and the checks compile away.

/// A broken variant of the matching rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// A limit order that takes liquidity trades at its own limit price instead of the
    /// resting order's price ("trades at the resting order's price").
    TradeAtAggressorPrice,
    /// Within a price level, the newest resting order trades first ("price-time priority").
    LifoWithinLevel,
    /// A FOK order is cancelled even when the book could fill it whole ("FOK (all or none at
    /// once)"): nothing the book shows is wrong, only what did not happen, which the
    /// differential model sees.
    FokAlwaysKilled,
}

impl Mutation {
    pub const ALL: [Mutation; 3] =
        [Mutation::TradeAtAggressorPrice, Mutation::LifoWithinLevel, Mutation::FokAlwaysKilled];
}
