//! Property tests over random command streams (submits of every kind, stops included, and
//! cancels and replaces of known and unknown ids): the checks of `check/` after every
//! command, the same events and digests on two engines and across a snapshot and restore,
//! and bytes that never make decoding panic. Then the broken books the checks must catch.

mod check;

use mu_orderbook::mutation::Mutation;
use mu_orderbook::{
    random_flow, Book, Command, Engine, NewOrder, OrderId, OrderKind, Price, Qty, Reply, Request,
    Side, TimeInForce,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};

fn side() -> impl Strategy<Value = Side> {
    prop_oneof![Just(Side::Buy), Just(Side::Sell)]
}

/// Prices in a narrow band, so that orders cross often; now and then zero, to be rejected.
fn price() -> impl Strategy<Value = u64> {
    prop_oneof![20 => 95..=105u64, 1 => Just(0u64)]
}

fn qty() -> impl Strategy<Value = u64> {
    prop_oneof![20 => 1..=12u64, 1 => Just(0u64)]
}

/// Ids from a small range: duplicates, and cancels and replaces of ids known, finished and
/// never used.
fn id() -> impl Strategy<Value = OrderId> {
    (1..=60u64).prop_map(OrderId)
}

fn new_order() -> impl Strategy<Value = NewOrder> {
    let kind = prop_oneof![
        4 => price().prop_map(|p| OrderKind::Limit { price: Price(p) }),
        1 => Just(OrderKind::Market),
    ];
    let tif = prop_oneof![6 => Just(TimeInForce::Gtc), 2 => Just(TimeInForce::Ioc), 2 => Just(TimeInForce::Fok)];
    let stop = prop_oneof![5 => Just(None), 1 => price().prop_map(|p| Some(Price(p)))];
    (id(), side(), kind, tif, qty(), stop).prop_map(|(id, side, kind, tif, qty, stop)| NewOrder {
        id,
        side,
        kind,
        tif,
        qty: Qty(qty),
        stop,
    })
}

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        6 => new_order().prop_map(Command::Submit),
        2 => id().prop_map(|id| Command::Cancel { id }),
        2 => (id(), price(), qty()).prop_map(|(id, p, q)| Command::Replace { id, price: Price(p), qty: Qty(q) }),
    ]
}

fn commands() -> impl Strategy<Value = Vec<Command>> {
    prop::collection::vec(command(), 1..200)
}

fn requests(commands: &[Command]) -> Vec<Request> {
    commands
        .iter()
        .enumerate()
        .map(|(i, c)| Request { client: 1 + (i % 3) as u64, seq: 1 + (i / 3) as u64, command: *c })
        .collect()
}

proptest! {
    #![proptest_config(Config { cases: 256, failure_persistence: None, ..Config::default() })]

    /// Never crossed, quantities add up, fills well formed at the resting price and within the
    /// aggressor's limit, FIFO within a price, best bid and offer reported when they change.
    #[test]
    fn every_command_keeps_the_book_rules(commands in commands()) {
        check::stream(Book::new(), &commands).map_err(TestCaseError::fail)?;
    }

    /// "The same commands give identical events and book digests on every replica and after
    /// snapshot and restore": two engines agree reply by reply; a third restored from the
    /// first's snapshot at a random point continues exactly as the first.
    #[test]
    fn replicas_and_restored_snapshots_agree(commands in commands(), cut in any::<prop::sample::Index>()) {
        let requests = requests(&commands);
        let cut = cut.index(requests.len() + 1);
        let (mut a, mut b) = (Engine::new(), Engine::new());
        let mut restored = None;
        for (i, request) in requests.iter().enumerate() {
            if i == cut {
                let mut bytes = Vec::new();
                a.snapshot(&mut bytes);
                let back = Engine::restore(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let mut again = Vec::new();
                back.snapshot(&mut again);
                prop_assert_eq!(&again, &bytes, "a restored engine writes the same snapshot");
                restored = Some(back);
            }
            let bytes = request.encode();
            let reply = a.apply_bytes(&bytes);
            prop_assert_eq!(&reply, &b.apply_bytes(&bytes));
            if let Some(r) = restored.as_mut() {
                prop_assert_eq!(&reply, &r.apply_bytes(&bytes));
            }
            prop_assert_eq!(a.digest(), b.digest());
        }
        if let Some(r) = restored {
            prop_assert_eq!(r.digest(), a.digest());
            prop_assert_eq!(r, a);
        }
    }

    /// Encode then decode gives the request back, and the reply too.
    #[test]
    fn requests_and_replies_round_trip(commands in commands()) {
        let mut engine = Engine::new();
        for request in requests(&commands) {
            let bytes = request.encode();
            prop_assert_eq!(Request::decode(&bytes), Ok(request));
            let reply = engine.apply(&request);
            let mut reply_bytes = Vec::new();
            reply.encode(&mut reply_bytes);
            prop_assert_eq!(Reply::decode(&reply_bytes), Ok(reply));
        }
    }

    /// Random bytes never make a request, a reply or a snapshot panic on decoding.
    #[test]
    fn decoding_random_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
        let _ = Request::decode(&bytes);
        let _ = Reply::decode(&bytes);
        let _ = Book::restore(&bytes);
        let _ = Engine::restore(&bytes);
        let mut engine = Engine::new();
        if let Reply::Malformed(_) = engine.apply_bytes(&bytes) {
            prop_assert_eq!(engine.digest(), Engine::new().digest(), "malformed bytes change nothing");
        }
    }
}

/// The realistic flow of `flow` (the benchmark's and the demo's) keeps the rules too, over
/// longer streams than the random ones.
#[test]
fn the_random_flow_keeps_the_book_rules() {
    for seed in 0..4 {
        let commands = random_flow(seed, 3_000);
        check::stream(Book::new(), &commands).unwrap_or_else(|why| panic!("seed {seed}: {why}"));
    }
}

/// "Show that the checker can fail": each broken book is caught from a fixed seed, by the check
/// of the rule it breaks, and proptest shrinks the stream to a few commands.
#[test]
fn the_checks_catch_every_broken_book() {
    for mutation in Mutation::ALL {
        let caught_by = match mutation {
            Mutation::TradeAtAggressorPrice => "not the resting order's price",
            Mutation::LifoWithinLevel => "ahead of it",
            Mutation::FokAlwaysKilled => "the model's",
        };
        let config = Config { cases: 256, failure_persistence: None, ..Config::default() };
        let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        let mut runner = TestRunner::new_with_rng(config, rng);
        let result = runner.run(&commands(), |commands| {
            check::stream(Book::with_mutation(mutation), &commands).map_err(TestCaseError::fail)
        });
        match result {
            Err(TestError::Fail(why, commands)) => {
                eprintln!("{mutation:?} caught in {} commands: {why}", commands.len());
                assert!(
                    why.message().contains(caught_by),
                    "{mutation:?} caught by another check: {why}"
                );
                assert!(
                    commands.len() <= 10,
                    "{mutation:?}: shrunk to {} commands",
                    commands.len()
                );
            }
            other => panic!("{mutation:?} was not caught: {other:?}"),
        }
    }
}
