//! At most one writer per log at any time (Mu paper §5.2): a replica's permission manager
//! revokes the previous holder's write access before it grants the next, so that a deposed
//! leader's writes cannot land among the new leader's. Checked from what the fabric says — the
//! access flags of each replica's replication connections, and its own-log guard — not from
//! what the permission manager believes.

use mu_fabric::NodeId;

/// `writers[pos]`: who may write replica `pos`'s log now (None for a replica that is not running),
/// as [`mu_replica::BackgroundDriver::log_writers`] says.
pub fn check(writers: &[Option<Vec<NodeId>>]) -> Result<(), String> {
    for (pos, w) in writers.iter().enumerate() {
        if let Some(w) = w.as_ref().filter(|w| w.len() > 1) {
            return Err(format!("the log of replica {pos} has {} writers: {w:?}", w.len()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_two_writers() {
        assert_eq!(check(&[Some(vec![NodeId(1)]), None, Some(vec![])]), Ok(()));
        let err = check(&[Some(vec![]), Some(vec![NodeId(0), NodeId(2)])]).unwrap_err();
        assert!(err.contains("replica 1 has 2 writers"), "{err}");
    }
}
