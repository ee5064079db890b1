//! The property checks, one rule per file, run after every command of a stream: the book is
//! never crossed, quantities add up for every order, fills are well formed and at the resting
//! price, aggressors never trade beyond their limit, FIFO within a price, and the best bid and
//! offer reported is the book's.
//!
//! Then the book's events must be the simple model's (`model`), exactly.
//!
//! The checker keeps its own account of every order from the commands and the events alone
//! (what was accepted, replaced, filled and cancelled), and compares it with the book's.

mod best;
mod conservation;
mod crossed;
mod fifo;
mod fills;
mod model;

pub use model::Model;
use mu_orderbook::{Book, Command, Event, OrderId, Price, Side};
use std::collections::BTreeMap;

/// One order as the events told it.
#[derive(Clone, Copy, Debug)]
pub struct Tracked {
    pub side: Side,
    /// The limit price (`None`: a market order).
    pub limit: Option<Price>,
    pub qty: u64,
    pub filled: u64,
    pub cancelled: u64,
}

#[derive(Default)]
pub struct Checker {
    pub orders: BTreeMap<OrderId, Tracked>,
}

impl Checker {
    /// Checks one command: `before` is the book as it was, `after` as it is, `events` what the
    /// command reported.
    pub fn command(
        &mut self,
        before: &Book,
        command: &Command,
        events: &[Event],
        after: &Book,
    ) -> Result<(), String> {
        let mut queues = fifo::Queues::of(before, command);
        for event in events {
            match *event {
                Event::Accepted { id } => {
                    let Command::Submit(order) = command else {
                        return Err(format!("{id:?} accepted by {command:?}"));
                    };
                    if order.id != id || self.orders.contains_key(&id) {
                        return Err(format!("{id:?} accepted twice or by another id"));
                    }
                    let tracked = Tracked {
                        side: order.side,
                        limit: order.kind.limit(),
                        qty: order.qty.0,
                        filled: 0,
                        cancelled: 0,
                    };
                    self.orders.insert(id, tracked);
                }
                Event::Replaced { id, price, qty } => {
                    let o = self.known(id)?;
                    o.limit = Some(price);
                    o.qty = qty.0;
                }
                Event::Fill { maker, taker, qty, .. } => {
                    fills::check(&self.orders, event)?;
                    queues.fill(&self.orders, event)?;
                    self.known(maker)?.filled += qty.0;
                    self.known(taker)?.filled += qty.0;
                }
                Event::Cancelled { id, remaining } => self.known(id)?.cancelled += remaining.0,
                Event::Rejected { .. }
                | Event::StopTriggered { .. }
                | Event::BestChanged { .. } => {}
            }
        }
        crossed::check(after)?;
        best::check(before, events, after)?;
        conservation::check(&self.orders, after)
    }

    fn known(&mut self, id: OrderId) -> Result<&mut Tracked, String> {
        self.orders.get_mut(&id).ok_or_else(|| format!("an event names {id:?}, never accepted"))
    }
}

/// Applies `commands` to `book`, checking every one.
pub fn stream(mut book: Book, commands: &[Command]) -> Result<(), String> {
    let mut checker = Checker::default();
    let mut model = Model::default();
    let mut events = Vec::new();
    for (at, command) in commands.iter().enumerate() {
        let before = book.clone();
        events.clear();
        book.apply(command, &mut events);
        checker
            .command(&before, command, &events, &book)
            .map_err(|why| format!("command {at} {command:?}: {why}; events {events:?}"))?;
        let expected = model.apply(command);
        if expected != events {
            return Err(format!(
                "command {at} {command:?}: events {events:?}, the model's {expected:?}"
            ));
        }
    }
    Ok(())
}
