//! Bytes in and out, shared by snapshots and replies: a reader that never reads past its end,
//! little-endian writers, and events as bytes.
//!
//! An event is a tag byte and fixed-width fields (ids, prices, quantities and trade ids as 8
//! bytes; a side as 0 buy, 1 sell; a reject reason as its code; an optional best price as a
//! flag byte, then price and quantity when the flag is 1):
//!
//! | tag | event | fields |
//! | --- | --- | --- |
//! | 1 | accepted | id |
//! | 2 | rejected | id, reason |
//! | 3 | fill | trade id, maker, taker, price, qty, maker side |
//! | 4 | cancelled | id, remaining |
//! | 5 | replaced | id, price, qty |
//! | 6 | stop triggered | id |
//! | 7 | best changed | bid, ask |

use crate::event::{Event, RejectReason};
use crate::order::{OrderId, Price, Qty, Side};

/// Why a snapshot or a reply could not be read back.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed bytes: {0}")]
pub struct RestoreError(pub(crate) &'static str);

pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], RestoreError> {
        if self.0.len() < n {
            return Err(RestoreError("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, RestoreError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, RestoreError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, RestoreError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    pub(crate) fn flag(&mut self) -> Result<bool, RestoreError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(RestoreError("bad flag")),
        }
    }

    pub(crate) fn side(&mut self) -> Result<Side, RestoreError> {
        side_from(self.u8()?).ok_or(RestoreError("bad side"))
    }

    pub(crate) fn end(&self) -> Result<(), RestoreError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(RestoreError("bytes after the end"))
        }
    }

    pub(crate) fn event(&mut self) -> Result<Event, RestoreError> {
        let id = |r: &mut Reader| r.u64().map(OrderId);
        Ok(match self.u8()? {
            1 => Event::Accepted { id: id(self)? },
            2 => Event::Rejected {
                id: id(self)?,
                reason: RejectReason::from_code(self.u8()?)
                    .ok_or(RestoreError("unknown reject reason"))?,
            },
            3 => Event::Fill {
                trade_id: self.u64()?,
                maker: id(self)?,
                taker: id(self)?,
                price: Price(self.u64()?),
                qty: Qty(self.u64()?),
                maker_side: self.side()?,
            },
            4 => Event::Cancelled { id: id(self)?, remaining: Qty(self.u64()?) },
            5 => {
                Event::Replaced { id: id(self)?, price: Price(self.u64()?), qty: Qty(self.u64()?) }
            }
            6 => Event::StopTriggered { id: id(self)? },
            7 => Event::BestChanged { bid: self.best()?, ask: self.best()? },
            _ => return Err(RestoreError("unknown event tag")),
        })
    }

    fn best(&mut self) -> Result<Option<(Price, Qty)>, RestoreError> {
        Ok(if self.flag()? { Some((Price(self.u64()?), Qty(self.u64()?))) } else { None })
    }
}

pub(crate) fn side_code(side: Side) -> u8 {
    match side {
        Side::Buy => 0,
        Side::Sell => 1,
    }
}

pub(crate) fn side_from(code: u8) -> Option<Side> {
    match code {
        0 => Some(Side::Buy),
        1 => Some(Side::Sell),
        _ => None,
    }
}

pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_event(out: &mut Vec<u8>, event: &Event) {
    match *event {
        Event::Accepted { id } => {
            out.push(1);
            put_u64(out, id.0);
        }
        Event::Rejected { id, reason } => {
            out.push(2);
            put_u64(out, id.0);
            out.push(reason.code());
        }
        Event::Fill { trade_id, maker, taker, price, qty, maker_side } => {
            out.push(3);
            for v in [trade_id, maker.0, taker.0, price.0, qty.0] {
                put_u64(out, v);
            }
            out.push(side_code(maker_side));
        }
        Event::Cancelled { id, remaining } => {
            out.push(4);
            put_u64(out, id.0);
            put_u64(out, remaining.0);
        }
        Event::Replaced { id, price, qty } => {
            out.push(5);
            for v in [id.0, price.0, qty.0] {
                put_u64(out, v);
            }
        }
        Event::StopTriggered { id } => {
            out.push(6);
            put_u64(out, id.0);
        }
        Event::BestChanged { bid, ask } => {
            out.push(7);
            for best in [bid, ask] {
                match best {
                    None => out.push(0),
                    Some((price, qty)) => {
                        out.push(1);
                        put_u64(out, price.0);
                        put_u64(out, qty.0);
                    }
                }
            }
        }
    }
}
