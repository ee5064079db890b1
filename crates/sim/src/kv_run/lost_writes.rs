//! No acknowledged write lost, from a history's final reads: the check every key-value run
//! under uKharon's views makes at its end (uKharon-KV's and leased reads').

use crate::history::{History, Operation, Outcome};
use mu_kv::{Op, Reply};

/// What a write left in its key, if it wrote: a put or a compare-and-set that swapped leave
/// their value, a delete none. `None`: the operation did not write (or is not known to have).
fn written(op: &Operation) -> Option<(&[u8], Option<&[u8]>)> {
    match (&op.op, &op.outcome) {
        (Op::Put { key, value }, _) | (Op::Cas { key, value, .. }, _) => {
            let swapped =
                !matches!(op.outcome, Outcome::Returned { reply: Reply::Swapped(false), .. });
            swapped.then_some((key.as_slice(), Some(value.as_slice())))
        }
        (Op::Delete { key }, _) => Some((key.as_slice(), None)),
        (Op::Get { .. }, _) => None,
    }
}

/// No acknowledged write lost: each final read (`finals`, places in the history, answered
/// after everything else) finds what the last acknowledged write of its key left, or what a
/// write left that does not precede it (one that was not acknowledged before that write
/// began). A value from a write acknowledged before the last acknowledged one began means
/// the last one was lost.
pub fn no_acknowledged_write_lost(history: &History, finals: &[usize]) -> Result<(), String> {
    for &place in finals {
        let read = &history.operations[place];
        let Outcome::Returned { reply: Reply::Value(found), .. } = &read.outcome else {
            return Err(format!("the final read of {:?} was not answered", key_text(read)));
        };
        let key = read.op.key();
        let writes: Vec<&Operation> = history.operations[..place]
            .iter()
            .filter(|o| written(o).is_some_and(|(k, _)| k == key))
            .collect();
        let acked = writes.iter().filter(|o| matches!(o.outcome, Outcome::Returned { .. }));
        let last = acked.max_by_key(|o| returned_ns(o));
        let Some(last) = last else { continue };
        let leaves = |o: &Operation| written(o).is_some_and(|(_, v)| v == found.as_deref());
        let fine = writes
            .iter()
            .any(|o| leaves(o) && (std::ptr::eq(*o, *last) || returned_ns(o) >= last.invoke_ns));
        if !fine {
            return Err(format!(
                "acknowledged write lost: the final read of {} found {}, but {} (client {}, \
                 invoked at {} ns) was acknowledged at {} ns and no write of the value found \
                 came after it",
                key_text(read),
                found
                    .as_deref()
                    .map_or("nothing".to_string(), |v| String::from_utf8_lossy(v).into_owned()),
                describe(last),
                last.client,
                last.invoke_ns,
                returned_ns(last)
            ));
        }
    }
    Ok(())
}

/// When an operation returned; never, for one whose outcome is unknown.
fn returned_ns(op: &Operation) -> u64 {
    match op.outcome {
        Outcome::Returned { at_ns, .. } => at_ns,
        Outcome::Unknown => u64::MAX,
    }
}

fn key_text(op: &Operation) -> String {
    String::from_utf8_lossy(op.op.key()).into()
}

fn describe(op: &Operation) -> String {
    match &op.op {
        Op::Put { value, .. } => format!("put {}", String::from_utf8_lossy(value)),
        Op::Cas { value, .. } => format!("cas to {}", String::from_utf8_lossy(value)),
        Op::Delete { .. } => "delete".into(),
        Op::Get { .. } => "get".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(client: u64, op: Op, invoke_ns: u64, returned: Option<(u64, Reply)>) -> Operation {
        let outcome = match returned {
            Some((at_ns, reply)) => Outcome::Returned { at_ns, reply },
            None => Outcome::Unknown,
        };
        Operation { client, op, invoke_ns, outcome }
    }

    fn put(v: &str) -> Op {
        Op::Put { key: b"k".to_vec(), value: v.as_bytes().to_vec() }
    }

    fn read(found: Option<&str>, at: u64) -> Operation {
        let reply = Reply::Value(found.map(|v| v.as_bytes().to_vec()));
        op(9, Op::Get { key: b"k".to_vec() }, at, Some((at + 1, reply)))
    }

    #[test]
    fn a_lost_put_is_found_and_a_later_write_is_not_one() {
        let mut h = History::default();
        h.operations.push(op(1, put("a"), 10, Some((20, Reply::Stored))));
        h.operations.push(op(2, put("b"), 30, Some((40, Reply::Stored))));
        h.operations.push(op(3, put("c"), 35, None));
        h.operations.push(read(Some("a"), 100));
        let lost = no_acknowledged_write_lost(&h, &[3]).unwrap_err();
        assert!(lost.contains("put b"), "{lost}");
        h.operations[3] = read(Some("b"), 100);
        assert_eq!(no_acknowledged_write_lost(&h, &[3]), Ok(()));
        // A write whose outcome is unknown, concurrent with the last acknowledged one.
        h.operations[3] = read(Some("c"), 100);
        assert_eq!(no_acknowledged_write_lost(&h, &[3]), Ok(()));
        h.operations[3] = read(None, 100);
        assert!(no_acknowledged_write_lost(&h, &[3]).is_err());
    }
}
