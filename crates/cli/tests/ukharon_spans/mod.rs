//! Appendix B across processes, shared by the uKharon process tests: the spans in which
//! `Active` was true on each member, per view, from the members' statuses (on the one host
//! clock), and the check that no older view was active on any member after a newer one was on
//! any.

#![allow(dead_code)] // each test file uses its own part

use mu_daemon::ukharon::config::Role;
use mu_daemon::ukharon::status::{ActiveSpan, NodeStatus};
use std::collections::BTreeMap;

/// Every member's spans seen so far (a dead member's from its last status). Lease caches are
/// left out: a cache's lease is no application's `Active`, and a member's lease through a
/// cache may outlive a cache's wait (`mu_ukharon::cache`).
#[derive(Default)]
pub struct Spans(BTreeMap<u16, Vec<ActiveSpan>>);

impl Spans {
    pub fn take(&mut self, statuses: &BTreeMap<u16, NodeStatus>) {
        for (&id, s) in statuses.iter().filter(|(_, s)| s.role == Role::Member) {
            let known = self.0.entry(id).or_default();
            for span in &s.spans {
                match known.iter_mut().find(|k| k.epoch == span.epoch) {
                    Some(k) => {
                        k.from_ns = k.from_ns.min(span.from_ns);
                        k.until_ns = k.until_ns.max(span.until_ns);
                    }
                    None => known.push(*span),
                }
            }
        }
    }

    /// Appendix B: an older view's last `Active` on any node is before a newer view's first.
    pub fn check(&self) {
        let overlaps = self.overlaps(0);
        assert!(overlaps.is_empty(), "{}", overlaps.join("\n"));
    }

    /// Where Appendix B does not hold between views of epoch `from` or later, each said in a
    /// line.
    pub fn overlaps(&self, from: u64) -> Vec<String> {
        let all: Vec<(u16, ActiveSpan)> = self
            .0
            .iter()
            .flat_map(|(&id, s)| s.iter().map(move |&sp| (id, sp)))
            .filter(|(_, sp)| sp.epoch >= from)
            .collect();
        let mut found = Vec::new();
        for &(a, old) in &all {
            for &(b, new) in &all {
                if old.epoch < new.epoch && old.until_ns > new.from_ns {
                    found.push(format!(
                        "view {} active on member {a} until {} ns, view {} on member {b} from {} \
                         ns ({:.3} ms overlap)",
                        old.epoch,
                        old.until_ns,
                        new.epoch,
                        new.from_ns,
                        (old.until_ns - new.from_ns) as f64 / 1e6
                    ));
                }
            }
        }
        found
    }
}
