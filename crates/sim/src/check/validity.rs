//! Validity (Mu paper §3): a replica applies only values that were proposed. Catches an engine
//! that invents, tears or mixes up values — an entry assembled from two proposals, or a stale
//! slot of an earlier lap taken for a new entry. And a replica applies no request whose
//! proposal it answered with an error that says the request can never take effect ("not
//! leader", "log full"): a client told so may send something else instead, and the refused
//! request taking effect later would be silent data corruption.

use super::Applied;
use std::collections::BTreeSet;

/// `proposed`: every request handed to any replica to propose (membership changes as the label
/// the cluster records them with); `refused`: those of them a replica refused for good.
pub fn check(
    applied: &Applied,
    proposed: &BTreeSet<Vec<u8>>,
    refused: &BTreeSet<Vec<u8>>,
) -> Result<(), String> {
    for (pos, seq) in applied.iter().enumerate() {
        for (index, requests) in seq {
            for r in requests {
                let why = if !proposed.contains(r) {
                    "which nobody proposed"
                } else if refused.contains(r) {
                    "which its leader refused as never to take effect"
                } else {
                    continue;
                };
                return Err(format!(
                    "replica {pos} applied {:?} at {index}, {why}",
                    crate::workload::describe_request(r)
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_an_invented_value() {
        let proposed: BTreeSet<Vec<u8>> = [b"a".to_vec()].into();
        let none = BTreeSet::new();
        assert_eq!(check(&[vec![(0, vec![b"a".to_vec()])]], &proposed, &none), Ok(()));
        let err = check(&[vec![], vec![(0, vec![b"ab".to_vec()])]], &proposed, &none).unwrap_err();
        assert!(err.contains("replica 1 applied \"ab\" at 0, which nobody"), "{err}");
    }

    #[test]
    fn finds_a_refused_request_applied() {
        let proposed: BTreeSet<Vec<u8>> = [b"a".to_vec(), b"b".to_vec()].into();
        let refused: BTreeSet<Vec<u8>> = [b"b".to_vec()].into();
        let applied = [vec![(0, vec![b"a".to_vec()])], vec![(0, vec![b"a".to_vec()])]];
        assert_eq!(check(&applied, &proposed, &refused), Ok(()));
        let applied = [vec![(0, vec![b"a".to_vec()]), (1, vec![b"b".to_vec()])]];
        let err = check(&applied, &proposed, &refused).unwrap_err();
        assert!(err.contains("replica 0 applied \"b\" at 1, which its leader refused"), "{err}");
    }
}
