//! Below its decided prefix a log holds no entry but the decided one (Mu paper §4.2, Listings 3
//! and 4). A log's decided prefix ends at its FUO or its head, whichever is further
//! (`Leader::decided_below`); a leader that catches up from a follower, or brings followers up
//! to date from its own log, copies every complete entry it finds there as the decided value.
//! So an entry for an index below that point which is not the decided one (a value the replica
//! accepted that then lost) is a wrong value one copy away from being applied, whether or not
//! anyone applies it yet. Holes (empty slots, torn ones, entries of another lap) are allowed:
//! those are taken for missing entries.
//!
//! The decided entry at an index is what the replicas applied there (the agreement checker
//! sees that they agree); indices nobody applied yet are not checked.

use super::{readable, Applied};

/// What one replica's log holds below its decided prefix: the prefix's end, and each complete
/// entry within a lap below it, as (index, its requests as the replicas record applied ones).
pub struct LogBelow {
    pub decided_below: u64,
    pub entries: Vec<(u64, Vec<Vec<u8>>)>,
}

/// `logs[pos]`: replica `pos`'s log (None for a replica that is down or runs no Mu log).
pub fn check(logs: &[Option<LogBelow>], applied: &Applied) -> Result<(), String> {
    for (pos, log) in logs.iter().enumerate() {
        let Some(log) = log else { continue };
        for (index, requests) in &log.entries {
            let Some(decided) = decided_at(applied, *index) else { continue };
            if requests != decided {
                return Err(format!(
                    "replica {pos} holds at index {index}, below its decided prefix {}, an entry \
                     that was not decided there: {:?}, decided {:?}",
                    log.decided_below,
                    readable(requests),
                    readable(decided)
                ));
            }
        }
    }
    Ok(())
}

/// What some replica applied at `index`.
fn decided_at(applied: &Applied, index: u64) -> Option<&Vec<Vec<u8>>> {
    applied.iter().find_map(|entries| {
        // Each replica applies from index 0 in order with no gaps (its snapshot carries them
        // all), so entry `index` is at position `index` when it is there at all.
        let (at, requests) = entries.get(usize::try_from(index).ok()?)?;
        (*at == index).then_some(requests)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reqs(r: &[&str]) -> Vec<Vec<u8>> {
        r.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn finds_an_undecided_entry_below_the_prefix_and_nothing_else() {
        let applied = vec![vec![(0, reqs(&["a"])), (1, reqs(&["b"]))], vec![(0, reqs(&["a"]))]];
        let good =
            LogBelow { decided_below: 3, entries: vec![(0, reqs(&["a"])), (1, reqs(&["b"]))] };
        // Index 2 was applied by nobody yet: not checked.
        let unknown = LogBelow { decided_below: 3, entries: vec![(2, reqs(&["z"]))] };
        assert_eq!(check(&[Some(good), None, Some(unknown)], &applied), Ok(()));
        let bad = LogBelow { decided_below: 2, entries: vec![(1, reqs(&["lost"]))] };
        let err = check(&[None, Some(bad)], &applied).unwrap_err();
        assert!(err.contains("replica 1 holds at index 1"), "{err}");
    }
}
