//! No acknowledged proposal is lost: every value a leader acknowledged at an index is in what a
//! replica applied there, once that replica applied so far (Mu paper §3: a committed value is
//! never undone, whatever leader comes next).

use super::{readable, Applied};

/// `acked`: every acknowledged proposal, (index, value). Checks replica `pos`, which must have
/// applied every acknowledged index (call it after the liveness phase, on the leader).
pub fn check(applied: &Applied, pos: usize, acked: &[(u64, Vec<u8>)]) -> Result<(), String> {
    let seq = &applied[pos];
    for (index, value) in acked {
        let got = seq.get(*index as usize).map(|(_, requests)| requests);
        if !got.is_some_and(|requests| requests.contains(value)) {
            return Err(format!(
                "acknowledged {:?} at {index} is not in what replica {pos} applied there: {:?}",
                crate::describe::describe_request(value),
                got.map(|r| readable(r))
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_lost_acknowledgement() {
        let applied = vec![vec![(0, vec![b"a".to_vec()]), (1, vec![b"b".to_vec(), b"c".to_vec()])]];
        assert_eq!(check(&applied, 0, &[(1, b"c".to_vec())]), Ok(()));
        assert!(check(&applied, 0, &[(1, b"x".to_vec())]).unwrap_err().contains("\"x\" at 1"));
        assert!(check(&applied, 0, &[(2, b"a".to_vec())]).is_err(), "not applied at all");
    }
}
