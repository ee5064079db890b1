//! Views: one decided view per epoch wherever it is decided or learnt (agreement), each
//! following the one before it (the wait rule of `mu_ukharon::view`), and no unique id
//! admitted again once a view removed it, or given to two nodes (§3.1).

use mu_ukharon::view::{Member, View};
use std::collections::{BTreeMap, BTreeSet};

/// Every view decided or learnt in a run, checked as they come.
#[derive(Default, Debug)]
pub struct ViewLog {
    pub views: BTreeMap<u64, View>,
    /// Unique ids given, with their node.
    uids: BTreeMap<u64, u16>,
    /// Members some view removed.
    removed: BTreeSet<Member>,
}

impl ViewLog {
    /// A view decided by a coordinator or learnt by a node (`who` says which, for messages).
    pub fn saw(&mut self, who: &str, view: &View) -> Result<(), String> {
        if let Some(known) = self.views.get(&view.epoch) {
            if known != view {
                return Err(format!("{who}: view {} differs from the one decided", view.epoch));
            }
            return Ok(());
        }
        self.views.insert(view.epoch, view.clone());
        if let Some(prev) = view.epoch.checked_sub(1).and_then(|e| self.views.get(&e)) {
            if !view.follows(prev) {
                return Err(format!("view {} does not follow view {}", view.epoch, prev.epoch));
            }
        }
        self.check_ids()
    }

    /// Walks the views in epoch order (those known without a gap before them).
    fn check_ids(&mut self) -> Result<(), String> {
        self.uids.clear();
        self.removed.clear();
        let mut prev: Option<&View> = None;
        for view in self.views.values() {
            for m in &view.members {
                if self.removed.contains(m) {
                    return Err(format!("view {} admits {m:?} again", view.epoch));
                }
                if let Some(&node) = self.uids.get(&m.uid) {
                    if node != m.node {
                        return Err(format!(
                            "unique id {} given to nodes {node} and {}",
                            m.uid, m.node
                        ));
                    }
                }
                self.uids.insert(m.uid, m.node);
            }
            if let Some(p) = prev.filter(|p| p.epoch + 1 == view.epoch) {
                self.removed.extend(p.members.iter().filter(|m| !view.contains(**m)));
            }
            prev = Some(view);
        }
        Ok(())
    }

    pub fn latest(&self) -> Option<&View> {
        self.views.values().next_back()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(node: u16, uid: u64) -> Member {
        Member { node, uid }
    }

    #[test]
    fn a_readmitted_id_and_a_second_view_are_caught() {
        let v0 = View::initial(1, vec![m(1, 11), m(2, 12)], None, 10);
        let v1 = v0.successor(vec![m(1, 11)], None, 10);
        let mut log = ViewLog::default();
        log.saw("c0", &v0).unwrap();
        log.saw("c0", &v1).unwrap();
        let mut other = v1.clone();
        other.members.clear();
        assert!(log.saw("n5", &other).unwrap_err().contains("differs"));
        let v2 = v1.successor(vec![m(1, 11), m(2, 12)], None, 10);
        assert!(log.saw("c0", &v2).unwrap_err().contains("admits"));
        let mut log = ViewLog::default();
        log.saw("c0", &v0).unwrap();
        let v1 = v0.successor(vec![m(1, 11), m(2, 12), m(3, 12)], None, 10);
        assert!(log.saw("c0", &v1).unwrap_err().contains("given to nodes 2 and 3"));
    }
}
