//! One active view at a time (Appendix B.1): on the simulator's one clock, no two views of
//! different runs (a run: views each a compatible successor of the one before, §6.3) are
//! active at overlapping times, on any nodes.

use mu_ukharon::view::View;
use std::collections::BTreeMap;

/// Per view, the first and last global time `Active` was true on any node, and where.
#[derive(Default, Debug)]
pub struct ActiveSpans {
    /// epoch → (first ns, node, last ns, node)
    spans: BTreeMap<u64, (u64, u16, u64, u16)>,
}

impl ActiveSpans {
    /// `node`'s published lease made the view of `epoch` active at global time `now_ns`.
    pub fn record(&mut self, node: u16, epoch: u64, now_ns: u64) {
        let span = self.spans.entry(epoch).or_insert((now_ns, node, now_ns, node));
        if now_ns < span.0 {
            (span.0, span.1) = (now_ns, node);
        }
        if now_ns >= span.2 {
            (span.2, span.3) = (now_ns, node);
        }
    }

    /// Views active at some time.
    pub fn epochs(&self) -> usize {
        self.spans.len()
    }

    /// The smallest gap between the end of a view's span and the start of a later view's of
    /// another run: how close the run came to an overlap.
    pub fn slack_ns(&self, views: &BTreeMap<u64, View>) -> Option<i64> {
        let epochs: Vec<u64> = self.spans.keys().copied().collect();
        let mut slack = None;
        for (i, &a) in epochs.iter().enumerate() {
            for &b in &epochs[i + 1..] {
                let same_run = (a + 1..=b).all(|e| {
                    let (prev, next) = (views.get(&(e - 1)), views.get(&e));
                    prev.zip(next).is_some_and(|(p, n)| n.is_compatible_successor(p))
                });
                if !same_run {
                    let gap = self.spans[&b].0 as i64 - self.spans[&a].2 as i64;
                    slack = Some(slack.map_or(gap, |s: i64| s.min(gap)));
                }
            }
        }
        slack
    }

    /// Checks the spans against the decided views (`views[e]` is the view of epoch `e`).
    pub fn check(&self, views: &BTreeMap<u64, View>) -> Result<(), String> {
        let epochs: Vec<u64> = self.spans.keys().copied().collect();
        for (i, &a) in epochs.iter().enumerate() {
            for &b in &epochs[i + 1..] {
                let same_run = (a + 1..=b).all(|e| {
                    let (prev, next) = (views.get(&(e - 1)), views.get(&e));
                    prev.zip(next).is_some_and(|(p, n)| n.is_compatible_successor(p))
                });
                let (sa, sb) = (self.spans[&a], self.spans[&b]);
                if !same_run && sa.2 >= sb.0 {
                    return Err(format!(
                        "view {a} active until {} ns (node {}), view {b} active from {} ns (node {})",
                        sa.2, sa.3, sb.0, sb.1
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mu_ukharon::view::Member;

    fn views() -> BTreeMap<u64, View> {
        let v0 = View::initial(1, vec![Member { node: 1, uid: 1 << 16 | 1 }], None, 10);
        let v1 = v0.successor(v0.members.clone(), None, 20); // compatible
        let v2 = v1.successor(Vec::new(), None, 20);
        [(0, v0), (1, v1), (2, v2)].into_iter().collect()
    }

    #[test]
    fn overlapping_views_of_different_runs_are_caught() {
        let mut s = ActiveSpans::default();
        s.record(1, 0, 100);
        s.record(2, 1, 90); // same run: may overlap
        s.record(1, 1, 150);
        s.record(2, 2, 200);
        assert_eq!(s.check(&views()), Ok(()));
        s.record(3, 2, 150);
        assert!(s.check(&views()).unwrap_err().contains("view 1 active until 150"));
    }
}
