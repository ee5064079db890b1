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
                if !same_run(a, b, views) {
                    let gap = self.spans[&b].0 as i64 - self.spans[&a].2 as i64;
                    slack = Some(slack.map_or(gap, |s: i64| s.min(gap)));
                }
            }
        }
        slack
    }

    /// A view after `epoch`, of another run, active somewhere at or before global time
    /// `at_ns`: its epoch, and when and where it first was. A node that answers for `epoch` at
    /// `at_ns` then answers for a view that is over.
    pub fn newer_active_by(
        &self,
        epoch: u64,
        at_ns: u64,
        views: &BTreeMap<u64, View>,
    ) -> Option<(u64, u64, u16)> {
        let later = self.spans.range(epoch + 1..);
        let mut newer = later.filter(|(_, span)| span.0 <= at_ns);
        newer
            .find(|(&b, _)| !same_run(epoch, b, views))
            .map(|(&b, &(first, node, _, _))| (b, first, node))
    }

    /// Checks the spans against the decided views (`views[e]` is the view of epoch `e`).
    pub fn check(&self, views: &BTreeMap<u64, View>) -> Result<(), String> {
        let epochs: Vec<u64> = self.spans.keys().copied().collect();
        for (i, &a) in epochs.iter().enumerate() {
            for &b in &epochs[i + 1..] {
                let (sa, sb) = (self.spans[&a], self.spans[&b]);
                if !same_run(a, b, views) && sa.2 >= sb.0 {
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

/// Whether the views from `a` to `b` are each a compatible successor of the one before (§6.3):
/// one run, whose views may be active at once.
fn same_run(a: u64, b: u64, views: &BTreeMap<u64, View>) -> bool {
    (a + 1..=b).all(|e| {
        let (prev, next) = (views.get(&(e - 1)), views.get(&e));
        prev.zip(next).is_some_and(|(p, n)| n.is_compatible_successor(p))
    })
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

    #[test]
    fn an_answer_after_a_newer_view_of_another_run_is_found() {
        let mut s = ActiveSpans::default();
        s.record(1, 0, 100);
        s.record(2, 1, 90);
        s.record(2, 2, 200);
        // View 1 is view 0's compatible successor: an answer for 0 at 150 is fine.
        assert_eq!(s.newer_active_by(0, 150, &views()), None);
        assert_eq!(s.newer_active_by(0, 199, &views()), None);
        assert_eq!(s.newer_active_by(0, 200, &views()), Some((2, 200, 2)));
        assert_eq!(s.newer_active_by(1, 250, &views()), Some((2, 200, 2)));
        assert_eq!(s.newer_active_by(2, 250, &views()), None);
    }
}
