//! `mu demo --app orderbook`: traders send a random order flow to a replicated order book, the
//! leader is killed, and afterwards every order whose acceptance a trader saw is shown to be
//! known to the book: submitting its id again is rejected as a duplicate (which changes no
//! order), whichever replica now leads.

use crate::demo_shared::Shared;
use hdrhistogram::Histogram;
use mu_orderbook::flow::Flow;
use mu_orderbook::{Command, Event, NewOrder, OrderId, RejectReason, Reply, Side};
use mu_service::{Client, ClientError, ClusterConfig};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Bits of an order id below a trader's number: each trader's flow numbers its orders from
/// `(trader + 1) << TRADER_SHIFT`.
const TRADER_SHIFT: u32 = 40;

/// One trader thread: submits, cancels and replaces orders until told to stop, and records
/// every order id whose acceptance it saw.
pub fn trader_loop(t: usize, config: &ClusterConfig, shared: &Shared) {
    let Ok(mut client) = config.client() else { return };
    client.set_timeout(Duration::from_secs(5));
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
    let mut acked: Vec<u64> = Vec::new();
    let mut trades = 0u64;
    let mut flow = Flow::new(0x0b00_c000 ^ t as u64, (t as u64 + 1) << TRADER_SHIFT);
    let mut n: u64 = 0;
    while !shared.stop.load(Ordering::Acquire) {
        n += 1;
        let command = flow.next_command();
        let began = Instant::now();
        let outcome = client.order(command);
        let done = shared.clock.now_ns();
        match outcome {
            Ok(Reply::Events(events)) => {
                h.saturating_record(began.elapsed().as_nanos() as u64);
                shared.ops.fetch_add(1, Ordering::Relaxed);
                shared.clock.answered(client.target(), done);
                for e in &events {
                    match e {
                        Event::Accepted { id } => acked.push(id.0),
                        Event::Fill { .. } => trades += 1,
                        _ => {}
                    }
                }
            }
            Ok(other) => {
                shared.errors.fetch_add(1, Ordering::Relaxed);
                note!("mu demo: trader {t}: unexpected answer {other:?}");
            }
            Err(ClientError::Refused(why)) => {
                shared.errors.fetch_add(1, Ordering::Relaxed);
                note!("mu demo: trader {t}: refused: {why}");
            }
            Err(_) => {
                shared.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        if n % 64 == 0 {
            shared.latency.lock().unwrap_or_else(|p| p.into_inner()).add(&h).ok();
            h.reset();
        }
    }
    shared.latency.lock().unwrap_or_else(|p| p.into_inner()).add(&h).ok();
    shared.trades.fetch_add(trades, Ordering::Relaxed);
    shared.orders.lock().unwrap_or_else(|p| p.into_inner()).extend(acked);
}

/// Submits every acknowledged order's id again: each must be rejected as a duplicate (the
/// book knows it; nothing changes). Fails on the first that is not; how many it checked.
pub fn check_acknowledged(shared: &Shared, config: &ClusterConfig) -> Result<usize, String> {
    let orders = shared.orders.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut checker =
        Client::new(config.cluster_id, config.endpoints()).map_err(|e| e.to_string())?;
    for &id in &orders {
        let probe = Command::Submit(NewOrder::limit(id, Side::Buy, 1, 1));
        let reply = checker.order(probe).map_err(|e| format!("checking order {id:#x}: {e}"))?;
        let duplicate = Event::Rejected { id: OrderId(id), reason: RejectReason::DuplicateId };
        match reply {
            Reply::Events(events) if events == [duplicate] => {}
            other => {
                return Err(format!(
                    "LOST ORDER: order {id:#x} was acknowledged, but submitting its id again \
                     answered {other:?}"
                ))
            }
        }
    }
    Ok(orders.len())
}
