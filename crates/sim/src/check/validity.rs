//! Validity (Mu paper §3): a replica applies only values that were proposed. Catches an engine
//! that invents, tears or mixes up values — an entry assembled from two proposals, or a stale
//! slot of an earlier lap taken for a new entry. And a replica applies no request whose
//! proposal it answered with an error that says the request can never take effect ("not
//! leader", "log full"): a client told so may send something else instead, and the refused
//! request taking effect later would be silent data corruption. And no request handed over
//! once is applied at two indices: a leader that finds its own value accepted by another
//! (adopted in prepare) must take it as its own, not propose it again (Mu's Listing 2, line
//! 34, "if value == myValue"), or a request acknowledged once takes effect twice.

use super::Applied;
use std::collections::{BTreeSet, HashMap};

/// `applied`: what each replica's current process applied; `applied_ever`: every request any
/// process of any replica applied (a restart or a state transfer replaces a replica's sequence,
/// not this); `proposed`: every request handed to any replica to propose (membership changes
/// as the label the cluster records them with); `refused`: those of them a replica refused for
/// good; `retried`: those handed over more than once. Requests applied twice are looked for in
/// each process's sequence (a restarted replica applies everything again).
pub fn check(
    applied: &Applied,
    applied_ever: &BTreeSet<Vec<u8>>,
    proposed: &BTreeSet<Vec<u8>>,
    refused: &BTreeSet<Vec<u8>>,
    retried: &BTreeSet<Vec<u8>>,
) -> Result<(), String> {
    for (pos, seq) in applied.iter().enumerate() {
        let mut first_at: HashMap<&[u8], u64> = HashMap::new();
        for (index, requests) in seq {
            for r in requests {
                if let Some(earlier) = first_at.insert(r, *index) {
                    if !retried.contains(r) {
                        // What every replica holds at both indices, to tell a log that holds
                        // the request twice from one replica's mistake.
                        let held: Vec<String> = applied
                            .iter()
                            .enumerate()
                            .map(|(q, seq)| {
                                let at = |i: u64| {
                                    seq.iter().find(|(j, _)| *j == i).map(|(_, rs)| rs.len())
                                };
                                format!("replica {q}: {:?}/{:?} requests", at(earlier), at(*index))
                            })
                            .collect();
                        return Err(format!(
                            "replica {pos} applied {:?} at {earlier} and again at {index}, and it \
                             was handed over once ({})",
                            crate::describe::describe_request(r),
                            held.join(", ")
                        ));
                    }
                }
                if let Some(why) = not_to_apply(r, proposed, refused) {
                    return Err(format!(
                        "replica {pos} applied {:?} at {index}, {why}",
                        crate::describe::describe_request(r)
                    ));
                }
            }
        }
    }
    // What no current process holds any more: applied by a process that has since restarted,
    // or by one whose sequence a state transfer replaced.
    for r in applied_ever {
        if let Some(why) = not_to_apply(r, proposed, refused) {
            return Err(format!(
                "a replica applied {:?} before it restarted or took a snapshot, {why}",
                crate::describe::describe_request(r)
            ));
        }
    }
    Ok(())
}

/// Why no replica may apply `r`, if none may.
fn not_to_apply(
    r: &[u8],
    proposed: &BTreeSet<Vec<u8>>,
    refused: &BTreeSet<Vec<u8>>,
) -> Option<&'static str> {
    if !proposed.contains(r) {
        Some("which nobody proposed")
    } else if refused.contains(r) {
        Some("which its leader refused as never to take effect")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::Applied;
    use std::collections::BTreeSet;

    /// The check, with every process still holding what it applied.
    fn check(
        applied: &Applied,
        proposed: &BTreeSet<Vec<u8>>,
        refused: &BTreeSet<Vec<u8>>,
        retried: &BTreeSet<Vec<u8>>,
    ) -> Result<(), String> {
        let ever = applied.iter().flatten().flat_map(|(_, rs)| rs.iter().cloned()).collect();
        super::check(applied, &ever, proposed, refused, retried)
    }

    #[test]
    fn finds_a_refused_request_applied_by_a_process_since_restarted() {
        let proposed: BTreeSet<Vec<u8>> = [b"a".to_vec(), b"b".to_vec()].into();
        let refused: BTreeSet<Vec<u8>> = [b"b".to_vec()].into();
        let none = BTreeSet::new();
        // Replica 1 applied "b", then restarted and applied only "a" again.
        let applied = [vec![(0, vec![b"a".to_vec()])], vec![(0, vec![b"a".to_vec()])]];
        let ever: BTreeSet<Vec<u8>> = [b"a".to_vec(), b"b".to_vec()].into();
        let err = super::check(&applied, &ever, &proposed, &refused, &none).unwrap_err();
        assert!(err.contains("before it restarted or took a snapshot, which its leader"), "{err}");
        let invented: BTreeSet<Vec<u8>> = [b"a".to_vec(), b"c".to_vec()].into();
        let err = super::check(&applied, &invented, &proposed, &none, &none).unwrap_err();
        assert!(
            err.contains("\"c\" before it restarted or took a snapshot, which nobody"),
            "{err}"
        );
        assert_eq!(check(&applied, &proposed, &refused, &none), Ok(()));
    }

    #[test]
    fn finds_an_invented_value() {
        let proposed: BTreeSet<Vec<u8>> = [b"a".to_vec()].into();
        let none = BTreeSet::new();
        assert_eq!(check(&[vec![(0, vec![b"a".to_vec()])]], &proposed, &none, &none), Ok(()));
        let err =
            check(&[vec![], vec![(0, vec![b"ab".to_vec()])]], &proposed, &none, &none).unwrap_err();
        assert!(err.contains("replica 1 applied \"ab\" at 0, which nobody"), "{err}");
    }

    #[test]
    fn finds_a_refused_request_applied() {
        let proposed: BTreeSet<Vec<u8>> = [b"a".to_vec(), b"b".to_vec()].into();
        let refused: BTreeSet<Vec<u8>> = [b"b".to_vec()].into();
        let applied = [vec![(0, vec![b"a".to_vec()])], vec![(0, vec![b"a".to_vec()])]];
        assert_eq!(check(&applied, &proposed, &refused, &BTreeSet::new()), Ok(()));
        let applied = [vec![(0, vec![b"a".to_vec()]), (1, vec![b"b".to_vec()])]];
        let err = check(&applied, &proposed, &refused, &BTreeSet::new()).unwrap_err();
        assert!(err.contains("replica 0 applied \"b\" at 1, which its leader refused"), "{err}");
    }

    #[test]
    fn finds_a_request_applied_twice() {
        let proposed: BTreeSet<Vec<u8>> = [b"a".to_vec(), b"b".to_vec()].into();
        let none = BTreeSet::new();
        let applied = [vec![(0, vec![b"a".to_vec()]), (1, vec![b"b".to_vec(), b"a".to_vec()])]];
        let err = check(&applied, &proposed, &none, &none).unwrap_err();
        assert!(err.contains("applied \"a\" at 0 and again at 1"), "{err}");
        let retried: BTreeSet<Vec<u8>> = [b"a".to_vec()].into();
        assert_eq!(check(&applied, &proposed, &none, &retried), Ok(()));
    }
}
