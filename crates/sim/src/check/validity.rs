//! Validity (Mu paper §3): a replica applies only values that were proposed. Catches an engine
//! that invents, tears or mixes up values — an entry assembled from two proposals, or a stale
//! slot of an earlier lap taken for a new entry.

use super::Applied;
use std::collections::BTreeSet;

/// `proposed`: every request handed to any replica to propose (membership changes as the label
/// the cluster records them with).
pub fn check(applied: &Applied, proposed: &BTreeSet<Vec<u8>>) -> Result<(), String> {
    for (pos, seq) in applied.iter().enumerate() {
        for (index, requests) in seq {
            if let Some(r) = requests.iter().find(|r| !proposed.contains(*r)) {
                return Err(format!(
                    "replica {pos} applied {:?} at {index}, which nobody proposed",
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
        assert_eq!(check(&[vec![(0, vec![b"a".to_vec()])]], &proposed), Ok(()));
        let err = check(&[vec![], vec![(0, vec![b"ab".to_vec()])]], &proposed).unwrap_err();
        assert!(err.contains("replica 1 applied \"ab\" at 0"), "{err}");
    }
}
