//! Agreement (Mu paper §3, the consensus property): no two replicas apply different entries at
//! one index. Also that each replica applies indexes in order, from 0, with no gap — the
//! replayer's contract, without which "the same index" would not mean the same place.

use super::{readable, Applied};

pub fn check(applied: &Applied) -> Result<(), String> {
    for (pos, seq) in applied.iter().enumerate() {
        for (k, (index, _)) in seq.iter().enumerate() {
            if *index != k as u64 {
                return Err(format!("replica {pos} applied index {index} at place {k}"));
            }
        }
    }
    for a in 0..applied.len() {
        for b in a + 1..applied.len() {
            let (x, y) = (&applied[a], &applied[b]);
            if let Some(i) = (0..x.len().min(y.len())).find(|&i| x[i] != y[i]) {
                return Err(format!(
                    "replicas {a} and {b} disagree at index {i}: {:?} vs {:?}",
                    readable(&x[i].1),
                    readable(&y[i].1)
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, v: &str) -> (u64, Vec<Vec<u8>>) {
        (index, vec![v.as_bytes().to_vec()])
    }

    #[test]
    fn finds_a_disagreement_and_a_gap() {
        let same = vec![vec![entry(0, "a"), entry(1, "b")], vec![entry(0, "a")]];
        assert_eq!(check(&same), Ok(()));
        let differ = vec![vec![entry(0, "a"), entry(1, "b")], vec![entry(0, "a"), entry(1, "c")]];
        let err = check(&differ).unwrap_err();
        assert!(err.contains("replicas 0 and 1 disagree at index 1"), "{err}");
        let gap = vec![vec![entry(0, "a"), entry(2, "b")]];
        assert!(check(&gap).unwrap_err().contains("applied index 2 at place 1"));
    }
}
