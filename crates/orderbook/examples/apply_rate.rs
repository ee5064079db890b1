//! How long the book takes to apply the random order flow, per command, on one thread:
//! `cargo run --release -p mu-orderbook --example apply_rate [COMMANDS]` (default 1,000,000).
//! Figures are printed, not asserted; the flow is the benchmark's and the demo's.

use mu_orderbook::{random_flow, Book, Engine, Request};
use std::time::Instant;

fn main() {
    let commands_count: usize = match std::env::args().nth(1) {
        None => 1_000_000,
        Some(arg) => match arg.parse() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("apply_rate: COMMANDS must be a positive count, not {arg:?}");
                std::process::exit(2);
            }
        },
    };
    let flow = random_flow(1, commands_count);
    let mut book = Book::new();
    let mut events = Vec::new();
    let start = Instant::now();
    for command in &flow {
        events.clear();
        book.apply(command, &mut events);
    }
    let book_ns = start.elapsed().as_nanos() as f64 / commands_count as f64;
    println!(
        "Book::apply: {book_ns:.0} ns per command over {commands_count} commands \
         ({} orders accepted, {} open at the end, {} trades)",
        book.orders_count(),
        book.orders_open(),
        book.trades_count()
    );
    let requests: Vec<Vec<u8>> = flow
        .iter()
        .enumerate()
        .map(|(i, command)| {
            let request =
                Request { client: 1 + (i % 8) as u64, seq: 1 + i as u64, command: *command };
            request.encode()
        })
        .collect();
    let mut engine = Engine::new();
    let start = Instant::now();
    for bytes in &requests {
        std::hint::black_box(engine.apply_bytes(bytes));
    }
    let engine_ns = start.elapsed().as_nanos() as f64 / commands_count as f64;
    println!("Engine::apply_bytes (decode, sessions, reply): {engine_ns:.0} ns per request");
    let start = Instant::now();
    let mut snapshot = Vec::new();
    engine.snapshot(&mut snapshot);
    println!("Engine::snapshot: {} bytes in {:?}", snapshot.len(), start.elapsed());
}
