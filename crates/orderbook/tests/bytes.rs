//! Requests, replies and snapshots as bytes: sizes, round trips, one encoding per request,
//! and garbage refused without a panic; the engine's sessions (a retry applies once).

use mu_orderbook::{
    random_flow, Book, Command, DecodeError, Engine, Event, NewOrder, OrderId, Price, Qty,
    RejectReason, Reply, Request, Side, TimeInForce, LIMIT_SUBMIT_BYTES, REQUEST_BYTES_MAX,
};

fn request(command: Command) -> Request {
    Request { client: 7, seq: 3, command }
}

fn all_commands() -> Vec<Command> {
    let limit = NewOrder::limit(1, Side::Buy, 100, 5);
    vec![
        Command::Submit(limit),
        Command::Submit(NewOrder::limit(2, Side::Sell, u64::MAX, 1).with_tif(TimeInForce::Fok)),
        Command::Submit(NewOrder::market(3, Side::Sell, 9)),
        Command::Submit(NewOrder::market(4, Side::Buy, 9).with_stop(90)),
        Command::Submit(limit.with_stop(101).with_tif(TimeInForce::Ioc)),
        Command::Submit(NewOrder::limit(5, Side::Buy, 0, 0)),
        Command::Cancel { id: OrderId(9) },
        Command::Replace { id: OrderId(1), price: Price(99), qty: Qty(2) },
    ]
}

#[test]
fn request_sizes_are_as_documented() {
    let size = |c| request(c).encode().len();
    assert_eq!(size(Command::Submit(NewOrder::limit(1, Side::Buy, 100, 5))), LIMIT_SUBMIT_BYTES);
    assert_eq!(LIMIT_SUBMIT_BYTES, 43);
    assert_eq!(size(Command::Submit(NewOrder::market(1, Side::Buy, 5))), 35);
    assert_eq!(size(Command::Submit(NewOrder::limit(1, Side::Buy, 9, 5).with_stop(9))), 51);
    assert_eq!(REQUEST_BYTES_MAX, 51);
    assert_eq!(size(Command::Cancel { id: OrderId(1) }), 26);
    assert_eq!(size(Command::Replace { id: OrderId(1), price: Price(1), qty: Qty(1) }), 42);
}

#[test]
fn every_command_round_trips_and_every_cut_or_extra_byte_is_refused() {
    for command in all_commands() {
        let bytes = request(command).encode();
        assert_eq!(Request::decode(&bytes), Ok(request(command)));
        for len in 0..bytes.len() {
            assert!(Request::decode(&bytes[..len]).is_err(), "{command:?} cut at {len}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(Request::decode(&longer), Err(DecodeError::Trailing(1)));
    }
}

#[test]
fn reserved_values_are_refused() {
    let bytes = request(Command::Submit(NewOrder::limit(1, Side::Buy, 100, 5))).encode();
    let with = |at: usize, value: u8| {
        let mut b = bytes.clone();
        b[at] = value;
        Request::decode(&b)
    };
    assert_eq!(with(0, 2), Err(DecodeError::Version(2)));
    assert_eq!(with(1, 4), Err(DecodeError::Command(4)));
    assert_eq!(with(26, 0x20), Err(DecodeError::Flags(0x20)), "bits 5-7 are zero");
    assert_eq!(with(26, 3 << 2), Err(DecodeError::TimeInForce));
    let zero_seq = Request { client: 1, seq: 0, command: Command::Cancel { id: OrderId(1) } };
    assert_eq!(Request::decode(&zero_seq.encode()), Err(DecodeError::SeqZero));
}

fn every_event() -> Vec<Event> {
    let mut events = vec![
        Event::Accepted { id: OrderId(1) },
        Event::Fill {
            trade_id: 4,
            maker: OrderId(1),
            taker: OrderId(2),
            price: Price(100),
            qty: Qty(3),
            maker_side: Side::Sell,
        },
        Event::Cancelled { id: OrderId(2), remaining: Qty(1) },
        Event::Replaced { id: OrderId(3), price: Price(5), qty: Qty(6) },
        Event::StopTriggered { id: OrderId(4) },
        Event::BestChanged { bid: None, ask: Some((Price(7), Qty(8))) },
        Event::BestChanged { bid: Some((Price(1), Qty(2))), ask: None },
    ];
    for reason in RejectReason::ALL {
        events.push(Event::Rejected { id: OrderId(9), reason });
    }
    events
}

#[test]
fn replies_round_trip_and_cuts_are_refused() {
    let replies = [
        Reply::Events(every_event()),
        Reply::Events(Vec::new()),
        Reply::Malformed("why".into()),
        Reply::Stale { applied_seq: 7 },
    ];
    for reply in replies {
        let mut b = Vec::new();
        reply.encode(&mut b);
        assert_eq!(Reply::decode(&b), Ok(reply.clone()));
        for cut in 0..b.len() {
            assert!(Reply::decode(&b[..cut]).is_err(), "{reply:?} cut at {cut}");
        }
        b.push(0);
        assert!(Reply::decode(&b).is_err(), "trailing byte");
    }
    assert!(Reply::decode(&[0, 255, 255, 255, 255]).is_err(), "a huge count of nothing");
}

/// A retried request (same client and sequence number, after an aborted proposal that the
/// next leader committed anyway) takes effect once and gets its first reply again.
#[test]
fn a_retry_takes_effect_once() {
    let mut engine = Engine::new();
    let buy = Request {
        client: 5,
        seq: 1,
        command: Command::Submit(NewOrder::limit(1, Side::Buy, 100, 5)),
    };
    let first = engine.apply(&buy);
    assert!(matches!(&first, Reply::Events(e) if e[0] == Event::Accepted { id: OrderId(1) }));
    assert_eq!(engine.apply_bytes(&buy.encode()), first, "the first reply, not a duplicate id");
    assert_eq!(engine.reply(5, 1), Some(&first));
    assert_eq!(engine.book().best_bid(), Some((Price(100), Qty(5))), "applied once");
    let cancel = Request { client: 5, seq: 2, command: Command::Cancel { id: OrderId(1) } };
    engine.apply(&cancel);
    assert_eq!(engine.apply(&buy), Reply::Stale { applied_seq: 2 });
    assert_eq!(engine.book().best_bid(), None, "the stale retry changed nothing");
}

#[test]
fn malformed_bytes_change_nothing() {
    let mut engine = Engine::new();
    engine.apply(&request(all_commands()[0]));
    let before = engine.digest();
    assert!(matches!(engine.apply_bytes(b"garbage"), Reply::Malformed(_)));
    assert_eq!(engine.digest(), before);
}

fn busy_engine() -> Engine {
    let mut engine = Engine::new();
    for (i, command) in random_flow(3, 2_000).into_iter().enumerate() {
        let client = 1 + (i % 4) as u64;
        engine.apply(&Request { client, seq: 1 + i as u64, command });
    }
    engine
}

#[test]
fn snapshots_restore_the_same_state_and_refuse_cuts() {
    let engine = busy_engine();
    assert!(engine.book().orders_open() > 10 && engine.book().stops_waiting() > 0);
    let mut bytes = Vec::new();
    engine.snapshot(&mut bytes);
    let back = Engine::restore(&bytes).unwrap();
    assert_eq!(back, engine);
    assert_eq!(back.digest(), engine.digest());
    for len in (0..bytes.len()).step_by(7) {
        assert!(Engine::restore(&bytes[..len]).is_err(), "cut at {len}");
    }
    let mut book_bytes = Vec::new();
    engine.book().snapshot(&mut book_bytes);
    assert_eq!(Book::restore(&book_bytes).unwrap(), *engine.book());
    assert!(Engine::restore(&book_bytes).is_err(), "a book's snapshot is not an engine's");
}

/// Snapshots with bytes changed at random either are refused or restore a book that goes on
/// working: nothing panics, then or later.
#[test]
fn corrupted_snapshots_never_panic() {
    let mut bytes = Vec::new();
    let mut engine = Engine::new();
    for (i, command) in random_flow(4, 300).into_iter().enumerate() {
        engine.apply(&Request { client: 1, seq: 1 + i as u64, command });
    }
    engine.snapshot(&mut bytes);
    let flow = random_flow(5, 200);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut restored = 0;
    for _ in 0..3_000 {
        let mut b = bytes.clone();
        for _ in 0..1 + next() % 3 {
            let at = (next() % b.len() as u64) as usize;
            b[at] = next() as u8;
        }
        if let Ok(mut e) = Engine::restore(&b) {
            restored += 1;
            for (i, command) in flow.iter().enumerate() {
                e.apply(&Request { client: 99, seq: 1 + i as u64, command: *command });
            }
        }
    }
    assert!(restored > 0, "some changes (a quantity, an id) still make a valid book");
}
