//! The rules for the order book, one test each; every test names the rule it checks
//! (quoted from issue 51, "A replicated order matching engine").

use mu_orderbook::{
    Book, Command, Event, NewOrder, OrderId, OrderStatus, Price, Qty, RejectReason, Side,
    TimeInForce,
};
use Side::{Buy, Sell};

fn apply(book: &mut Book, command: Command) -> Vec<Event> {
    let mut events = Vec::new();
    book.apply(&command, &mut events);
    events
}

fn submit(book: &mut Book, order: NewOrder) -> Vec<Event> {
    apply(book, Command::Submit(order))
}

fn limit(book: &mut Book, id: u64, side: Side, price: u64, qty: u64) -> Vec<Event> {
    submit(book, NewOrder::limit(id, side, price, qty))
}

fn fills(events: &[Event]) -> Vec<(u64, u64, u64, u64)> {
    events
        .iter()
        .filter_map(|e| match *e {
            Event::Fill { maker, taker, price, qty, .. } => {
                Some((maker.0, taker.0, price.0, qty.0))
            }
            _ => None,
        })
        .collect()
}

fn rejected(events: &[Event]) -> Option<RejectReason> {
    match events {
        [Event::Rejected { reason, .. }] => Some(*reason),
        _ => None,
    }
}

fn cancelled(events: &[Event], id: u64) -> Option<u64> {
    events.iter().find_map(|e| match *e {
        Event::Cancelled { id: c, remaining } if c == OrderId(id) => Some(remaining.0),
        _ => None,
    })
}

/// "orders with id, side, integer price ticks and quantity lots, limit": a GTC limit order
/// that does not cross rests at its price, and the book reports it.
#[test]
fn a_gtc_limit_order_rests_at_its_price() {
    let mut book = Book::new();
    let events = limit(&mut book, 1, Buy, 100, 5);
    assert_eq!(events[0], Event::Accepted { id: OrderId(1) });
    assert_eq!(book.best_bid(), Some((Price(100), Qty(5))));
    assert_eq!(book.best_ask(), None);
    let view = book.order(OrderId(1)).unwrap();
    assert_eq!(
        (view.side, view.price, view.open, view.filled),
        (Buy, Some(Price(100)), Qty(5), Qty(0))
    );
    assert_eq!(view.status, OrderStatus::Resting);
    assert_eq!(book.orders_open(), 1);
}

/// "limit and market": a market order takes what there is, at any price, and its rest is
/// cancelled (a market order never rests).
#[test]
fn a_market_order_takes_what_there_is_and_cancels_the_rest() {
    let mut book = Book::new();
    limit(&mut book, 1, Sell, 101, 2);
    limit(&mut book, 2, Sell, 150, 3);
    let events = submit(&mut book, NewOrder::market(3, Buy, 10).with_tif(TimeInForce::Gtc));
    assert_eq!(fills(&events), vec![(1, 3, 101, 2), (2, 3, 150, 3)]);
    assert_eq!(cancelled(&events, 3), Some(5));
    assert_eq!(book.best_ask(), None);
    assert_eq!(book.best_bid(), None, "the market order's rest did not rest");
    let empty = submit(&mut Book::new(), NewOrder::market(1, Sell, 4));
    assert_eq!(cancelled(&empty, 1), Some(4), "against an empty book, all of it is cancelled");
}

/// "conditions GTC, IOC": what an IOC order does not trade at once is cancelled.
#[test]
fn an_ioc_remainder_is_cancelled() {
    let mut book = Book::new();
    limit(&mut book, 1, Sell, 100, 3);
    let ioc = NewOrder::limit(2, Buy, 100, 10).with_tif(TimeInForce::Ioc);
    let events = submit(&mut book, ioc);
    assert_eq!(fills(&events), vec![(1, 2, 100, 3)]);
    assert_eq!(cancelled(&events, 2), Some(7));
    assert_eq!(book.best_bid(), None);
    let view = book.order(OrderId(2)).unwrap();
    assert_eq!((view.filled, view.cancelled, view.status), (Qty(3), Qty(7), OrderStatus::Done));
}

/// "FOK (all or none at once)": a FOK order that the book cannot fill whole is cancelled
/// before anything trades; one that it can fill trades all of it.
#[test]
fn fok_fills_whole_or_not_at_all() {
    let mut book = Book::new();
    limit(&mut book, 1, Sell, 100, 3);
    limit(&mut book, 2, Sell, 101, 3);
    limit(&mut book, 3, Sell, 105, 10);
    let too_much = NewOrder::limit(4, Buy, 101, 7).with_tif(TimeInForce::Fok);
    let events = submit(&mut book, too_much);
    assert_eq!(
        events,
        vec![
            Event::Accepted { id: OrderId(4) },
            Event::Cancelled { id: OrderId(4), remaining: Qty(7) }
        ]
    );
    assert_eq!(book.best_ask(), Some((Price(100), Qty(3))), "nothing was touched");
    let exact = NewOrder::limit(5, Buy, 101, 6).with_tif(TimeInForce::Fok);
    let events = submit(&mut book, exact);
    assert_eq!(fills(&events), vec![(1, 5, 100, 3), (2, 5, 101, 3)]);
    assert_eq!(cancelled(&events, 5), None);
    let market = NewOrder::market(6, Buy, 11).with_tif(TimeInForce::Fok);
    assert_eq!(cancelled(&submit(&mut book, market), 6), Some(11), "only 10 left at any price");
}

/// "price-time priority with time as the log order (never a clock)": the better price trades
/// first, and at one price the order that came first.
#[test]
fn better_prices_then_earlier_orders_trade_first() {
    let mut book = Book::new();
    limit(&mut book, 1, Buy, 99, 1);
    limit(&mut book, 2, Buy, 100, 1);
    limit(&mut book, 3, Buy, 100, 1);
    limit(&mut book, 4, Buy, 101, 1);
    let events = submit(&mut book, NewOrder::market(5, Sell, 4));
    let makers: Vec<u64> = fills(&events).iter().map(|f| f.0).collect();
    assert_eq!(makers, vec![4, 2, 3, 1]);
}

/// "trades at the resting order's price": an aggressive limit order gets the better price.
#[test]
fn trades_happen_at_the_resting_orders_price() {
    let mut book = Book::new();
    limit(&mut book, 1, Sell, 100, 5);
    let events = limit(&mut book, 2, Buy, 110, 5);
    assert_eq!(fills(&events), vec![(1, 2, 100, 5)]);
    limit(&mut book, 3, Buy, 90, 5);
    let events = limit(&mut book, 4, Sell, 80, 5);
    assert_eq!(fills(&events), vec![(3, 4, 90, 5)]);
}

/// "partial fills": either side may fill in part; the resting rest keeps its place.
#[test]
fn partial_fills_leave_the_rest_in_place() {
    let mut book = Book::new();
    limit(&mut book, 1, Sell, 100, 10);
    limit(&mut book, 2, Sell, 100, 10);
    assert_eq!(fills(&limit(&mut book, 3, Buy, 100, 4)), vec![(1, 3, 100, 4)]);
    assert_eq!(fills(&limit(&mut book, 4, Buy, 100, 7)), vec![(1, 4, 100, 6), (2, 4, 100, 1)]);
    let one = book.order(OrderId(1)).unwrap();
    assert_eq!((one.filled, one.open, one.status), (Qty(10), Qty(0), OrderStatus::Done));
    assert_eq!(book.order(OrderId(2)).unwrap().open, Qty(9));
    assert_eq!(book.best_ask(), Some((Price(100), Qty(9))));
}

/// "sweeps across levels": one order trades through several prices up to its limit, and its
/// rest rests at its limit.
#[test]
fn an_order_sweeps_levels_up_to_its_limit() {
    let mut book = Book::new();
    for (id, price) in [(1, 100), (2, 101), (3, 102), (4, 103)] {
        limit(&mut book, id, Sell, price, 2);
    }
    let events = limit(&mut book, 5, Buy, 102, 9);
    assert_eq!(fills(&events), vec![(1, 5, 100, 2), (2, 5, 101, 2), (3, 5, 102, 2)]);
    assert_eq!(book.best_bid(), Some((Price(102), Qty(3))));
    assert_eq!(book.best_ask(), Some((Price(103), Qty(2))));
}

/// "fills for both sides with a trade id from a counter": one event per trade names maker and
/// taker, the same quantity, and trade ids 1, 2, 3, ...
#[test]
fn fills_name_both_sides_and_count_trade_ids() {
    let mut book = Book::new();
    limit(&mut book, 1, Sell, 100, 1);
    limit(&mut book, 2, Sell, 100, 1);
    let events = submit(&mut book, NewOrder::market(3, Buy, 2));
    let ids: Vec<(u64, Side)> = events
        .iter()
        .filter_map(|e| match *e {
            Event::Fill { trade_id, maker_side, .. } => Some((trade_id, maker_side)),
            _ => None,
        })
        .collect();
    assert_eq!(ids, vec![(1, Sell), (2, Sell)]);
    assert_eq!(book.trades_count(), 2);
}

/// "best bid and offer changes": emitted once, last, when the top changed, and not otherwise.
#[test]
fn best_changes_are_reported_when_the_top_changes() {
    let mut book = Book::new();
    let events = limit(&mut book, 1, Buy, 100, 5);
    assert_eq!(
        events.last(),
        Some(&Event::BestChanged { bid: Some((Price(100), Qty(5))), ask: None })
    );
    let deeper = limit(&mut book, 2, Buy, 90, 5);
    assert_eq!(deeper, vec![Event::Accepted { id: OrderId(2) }], "below the top: no change");
    let more = limit(&mut book, 3, Buy, 100, 1);
    assert_eq!(
        more.last(),
        Some(&Event::BestChanged { bid: Some((Price(100), Qty(6))), ask: None }),
        "quantity at the top changed"
    );
    let rejected = limit(&mut book, 3, Buy, 200, 1);
    assert_eq!(rejected.len(), 1, "a rejected command changes nothing");
}

/// "optional stop price": a buy stop waits until the last trade is at or above it, a sell
/// stop until it is at or below; then it enters the book as its order type.
#[test]
fn a_stop_waits_for_the_last_trade_price() {
    let mut book = Book::new();
    limit(&mut book, 1, Sell, 100, 1);
    limit(&mut book, 2, Sell, 105, 5);
    let stop = NewOrder::market(3, Buy, 2).with_stop(100);
    assert_eq!(submit(&mut book, stop), vec![Event::Accepted { id: OrderId(3) }]);
    assert_eq!(book.order(OrderId(3)).unwrap().status, OrderStatus::Waiting);
    assert_eq!(book.stops_waiting(), 1);
    let events = submit(&mut book, NewOrder::market(4, Buy, 1));
    let triggered = events.iter().position(|e| *e == Event::StopTriggered { id: OrderId(3) });
    assert!(triggered.is_some(), "last trade 100 >= stop 100: {events:?}");
    assert_eq!(fills(&events), vec![(1, 4, 100, 1), (2, 3, 105, 2)]);
    assert_eq!(book.last_trade(), Some(Price(105)));
    // A sell stop below the last price waits until a trade reaches it.
    limit(&mut book, 5, Buy, 104, 1);
    limit(&mut book, 6, Buy, 103, 1);
    let sell_stop = NewOrder::limit(7, Sell, 90, 1).with_stop(103);
    assert_eq!(submit(&mut book, sell_stop).len(), 1);
    let events = submit(&mut book, NewOrder::market(8, Sell, 1));
    assert!(!events.contains(&Event::StopTriggered { id: OrderId(7) }), "104 > 103");
    let events = submit(&mut book, NewOrder::market(9, Sell, 1));
    assert!(events.contains(&Event::StopTriggered { id: OrderId(7) }), "103 <= 103");
}

/// "stop orders triggered in a deterministic order": by stop price in the direction the price
/// moved (lowest buy stop first), then by arrival; each trades before the next triggers.
#[test]
fn stops_trigger_by_price_then_arrival() {
    let mut book = Book::new();
    limit(&mut book, 1, Sell, 110, 100);
    for (id, stop) in [(2, 103), (3, 101), (4, 103), (5, 102)] {
        submit(&mut book, NewOrder::market(id, Buy, 1).with_stop(stop));
    }
    limit(&mut book, 6, Sell, 105, 1);
    let events = limit(&mut book, 7, Buy, 105, 1);
    let order: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::StopTriggered { id } => Some(id.0),
            _ => None,
        })
        .collect();
    assert_eq!(order, vec![3, 5, 2, 4]);
    assert_eq!(book.stops_waiting(), 0);
}

/// A stop whose condition already holds when it arrives triggers in the same command.
#[test]
fn a_stop_already_reached_triggers_at_once() {
    let mut book = Book::new();
    limit(&mut book, 1, Sell, 100, 5);
    limit(&mut book, 2, Buy, 100, 1);
    let events = submit(&mut book, NewOrder::market(3, Buy, 2).with_stop(99));
    assert_eq!(
        events[..2],
        [Event::Accepted { id: OrderId(3) }, Event::StopTriggered { id: OrderId(3) }]
    );
    assert_eq!(fills(&events), vec![(1, 3, 100, 2)]);
}

/// "cancel": what is open is cancelled; a second cancel is of a finished order, and an id
/// never used is unknown.
#[test]
fn cancel_rejects_unknown_and_finished_orders() {
    let mut book = Book::new();
    limit(&mut book, 1, Buy, 100, 5);
    limit(&mut book, 2, Sell, 100, 2);
    let events = apply(&mut book, Command::Cancel { id: OrderId(1) });
    assert_eq!(events[0], Event::Cancelled { id: OrderId(1), remaining: Qty(3) });
    assert_eq!(book.best_bid(), None);
    let again = apply(&mut book, Command::Cancel { id: OrderId(1) });
    assert_eq!(rejected(&again), Some(RejectReason::OrderFinished));
    let filled = apply(&mut book, Command::Cancel { id: OrderId(2) });
    assert_eq!(rejected(&filled), Some(RejectReason::OrderFinished));
    let unknown = apply(&mut book, Command::Cancel { id: OrderId(9) });
    assert_eq!(rejected(&unknown), Some(RejectReason::UnknownOrder));
    let stop = NewOrder::market(3, Buy, 1).with_stop(200);
    submit(&mut book, stop);
    assert_eq!(
        apply(&mut book, Command::Cancel { id: OrderId(3) })[0],
        Event::Cancelled { id: OrderId(3), remaining: Qty(1) }
    );
    assert_eq!(book.stops_waiting(), 0);
}

fn replace(book: &mut Book, id: u64, price: u64, qty: u64) -> Vec<Event> {
    apply(book, Command::Replace { id: OrderId(id), price: Price(price), qty: Qty(qty) })
}

fn makers_of_market(book: &mut Book, id: u64, side: Side, qty: u64) -> Vec<u64> {
    fills(&submit(book, NewOrder::market(id, side, qty))).iter().map(|f| f.0).collect()
}

/// "replace (a price change ... loses time priority)".
#[test]
fn replace_to_a_new_price_loses_priority() {
    let mut book = Book::new();
    limit(&mut book, 1, Buy, 100, 1);
    limit(&mut book, 2, Buy, 99, 1);
    limit(&mut book, 3, Buy, 99, 1);
    assert_eq!(
        replace(&mut book, 1, 99, 1)[0],
        Event::Replaced { id: OrderId(1), price: Price(99), qty: Qty(1) }
    );
    assert_eq!(makers_of_market(&mut book, 4, Sell, 3), vec![2, 3, 1]);
}

/// "a ... size increase loses time priority".
#[test]
fn replace_to_a_larger_size_loses_priority() {
    let mut book = Book::new();
    limit(&mut book, 1, Sell, 100, 1);
    limit(&mut book, 2, Sell, 100, 1);
    replace(&mut book, 1, 100, 2);
    assert_eq!(book.best_ask(), Some((Price(100), Qty(3))));
    assert_eq!(makers_of_market(&mut book, 3, Buy, 3), vec![2, 1]);
}

/// "a size decrease keeps it": same price, smaller quantity, same place.
#[test]
fn replace_to_a_smaller_size_keeps_priority() {
    let mut book = Book::new();
    limit(&mut book, 1, Sell, 100, 5);
    limit(&mut book, 2, Sell, 100, 1);
    replace(&mut book, 1, 100, 2);
    assert_eq!(book.best_ask(), Some((Price(100), Qty(3))));
    assert_eq!(makers_of_market(&mut book, 3, Buy, 3), vec![1, 2]);
}

/// Replace quantities are totals: at or below what already filled, the rest is cancelled.
#[test]
fn replace_to_at_most_the_filled_quantity_cancels_the_rest() {
    let mut book = Book::new();
    limit(&mut book, 1, Sell, 100, 10);
    submit(&mut book, NewOrder::market(2, Buy, 4));
    let events = replace(&mut book, 1, 100, 4);
    assert_eq!(events[0], Event::Cancelled { id: OrderId(1), remaining: Qty(6) });
    let view = book.order(OrderId(1)).unwrap();
    assert_eq!((view.qty, view.filled, view.cancelled), (Qty(10), Qty(4), Qty(6)));
    limit(&mut book, 3, Sell, 100, 10);
    submit(&mut book, NewOrder::market(4, Buy, 4));
    replace(&mut book, 3, 101, 7);
    let view = book.order(OrderId(3)).unwrap();
    assert_eq!((view.qty, view.open, view.filled), (Qty(7), Qty(3), Qty(4)), "7 in all, 4 filled");
}

/// A replace whose new price crosses the book trades at once, at the resting orders' prices.
#[test]
fn replace_across_the_book_trades() {
    let mut book = Book::new();
    limit(&mut book, 1, Sell, 100, 2);
    limit(&mut book, 2, Buy, 95, 5);
    let events = replace(&mut book, 2, 100, 5);
    assert_eq!(fills(&events), vec![(1, 2, 100, 2)]);
    assert_eq!(book.best_bid(), Some((Price(100), Qty(3))));
}

/// "rejects: zero quantity, zero limit price, duplicate id, cancel or replace of an unknown or
/// finished order; checked or 128-bit arithmetic for price × quantity".
#[test]
fn bad_commands_are_rejected_with_their_reason() {
    let mut book = Book::new();
    let reason = |book: &mut Book, order| rejected(&submit(book, order));
    assert_eq!(
        reason(&mut book, NewOrder::limit(1, Buy, 100, 0)),
        Some(RejectReason::ZeroQuantity)
    );
    assert_eq!(reason(&mut book, NewOrder::limit(1, Buy, 0, 1)), Some(RejectReason::ZeroPrice));
    let stop0 = NewOrder::market(1, Buy, 1).with_stop(0);
    assert_eq!(reason(&mut book, stop0), Some(RejectReason::ZeroStopPrice));
    let huge = NewOrder::limit(1, Buy, 1 << 32, 1 << 32);
    assert_eq!(reason(&mut book, huge), Some(RejectReason::Overflow), "2^64 does not fit");
    assert_eq!(book.orders_count(), 0, "rejected orders leave no trace");
    assert_eq!(limit(&mut book, 1, Buy, 1, u64::MAX - 1)[0], Event::Accepted { id: OrderId(1) });
    let level_full = NewOrder::limit(2, Buy, 1, 2);
    assert_eq!(reason(&mut book, level_full), Some(RejectReason::Overflow), "the level's total");
    assert_eq!(reason(&mut book, NewOrder::limit(1, Sell, 5, 1)), Some(RejectReason::DuplicateId));
    apply(&mut book, Command::Cancel { id: OrderId(1) });
    let finished = NewOrder::limit(1, Sell, 5, 1);
    assert_eq!(
        reason(&mut book, finished),
        Some(RejectReason::DuplicateId),
        "finished ids stay used"
    );
    limit(&mut book, 3, Buy, 10, 1);
    assert_eq!(rejected(&replace(&mut book, 3, 0, 1)), Some(RejectReason::ZeroPrice));
    assert_eq!(rejected(&replace(&mut book, 3, 1 << 40, 1 << 30)), Some(RejectReason::Overflow));
    assert_eq!(rejected(&replace(&mut book, 1, 10, 1)), Some(RejectReason::OrderFinished));
    assert_eq!(rejected(&replace(&mut book, 4, 10, 1)), Some(RejectReason::UnknownOrder));
    submit(&mut book, NewOrder::market(5, Buy, 1).with_stop(500));
    assert_eq!(rejected(&replace(&mut book, 5, 10, 1)), Some(RejectReason::MarketReplace));
    assert_eq!(book.order(OrderId(3)).unwrap().open, Qty(1), "rejected replaces changed nothing");
}
