//! What a run's safety phase does: random faults (the default), or the edge of the drift margin,
//! a schedule built to put two incompatible leases as close together as drifting clocks allow.
//!
//! The drift edge (Algorithm 2 with Appendix C's ε): a node A renews its lease on view `V` with
//! a timestamp `t` taken before its reads; `W`, the next view, is decided just after; a node B
//! learns `W` at once and takes a first lease on it from a timestamp `t' > t`. A's lease lasts
//! `L − drift(L) − 2ε` on A's clock, B's starts `w + drift(w) + ε` after `t'` on B's clock.
//! The margins are what keep the two apart when A's clock runs slow (its lease lasts
//! `L / (1 − ρ)` of true time without them) and B's runs fast (its wait lasts `w / (1 + ρ)`):
//! without them, with `w = L`, the lease and the wait overlap whenever `t' − t` is below about
//! `2ρL` (8 µs for a 20 µs lease at 20 % drift), less what A's lease loses if A replaces it
//! before its end. Three things must hold at once, and random faults seldom give all three:
//!
//! * **Clocks at the bound:** the members are split into slow ones (rate `−ρ`) and fast ones
//!   (`+ρ`), not drawn within the bound.
//! * **Waits as long as leases, no longer:** no lease changes (every view leases δ and waits δ).
//! * **A slow node that learns a new view late:** a node that learns `W` replaces its lease on
//!   `V` with a first lease on `W` (which waits) a round trip later, long before the fast
//!   node's wait is over. The links from the leading coordinator to the slow members are
//!   delayed by [`BROADCAST_DELAY_NS`], more than a lease, so that a slow member learns each
//!   new view from its own next renewal instead (which finds the next index taken), a few
//!   microseconds before its lease would end. Without the delay, none of 40 seeds overlapped
//!   with the margins left out; with it, all 40 did.
//!
//! The views then change again and again, a fast member crashed and restarted in turn at
//! random intervals: each removal and each join is decided at a random moment of the slow
//! members' renewal period, and a decision that falls within a few microseconds after a
//! renewal gives the overlap if the margins are missing. Coordinators neither crash nor stop
//! (coordinator 0 leads throughout) and there are no lease caches.

/// How long a view broadcast from the leading coordinator takes to reach a slow member in the
/// drift-edge scenario: two of the default 20 µs leases.
pub const BROADCAST_DELAY_NS: u64 = 40_000;

/// See the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UkScenario {
    /// The faults of [`super::UkRunConfig::faults`], each chosen by the seed, on clocks drawn
    /// within the drift bound.
    #[default]
    Faults,
    /// The edge of the drift margin: slow and fast clocks at the bound, slow members that learn
    /// views late, views changed at random moments (see the module docs).
    DriftEdge,
}

/// The names on the command line.
pub const UK_SCENARIO_NAMES: [&str; 2] = ["faults", "drift-edge"];

impl UkScenario {
    pub fn parse(name: &str) -> Result<UkScenario, String> {
        match name {
            "faults" => Ok(UkScenario::Faults),
            "drift-edge" => Ok(UkScenario::DriftEdge),
            other => {
                Err(format!("unknown scenario {other:?}: one of {}", UK_SCENARIO_NAMES.join(", ")))
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            UkScenario::Faults => UK_SCENARIO_NAMES[0],
            UkScenario::DriftEdge => UK_SCENARIO_NAMES[1],
        }
    }
}

/// Which members run slow in the drift-edge scenario: the lower half of the member ids (the
/// member nodes come right after the coordinators).
pub fn slow_members(coordinators: u16, nodes: u16) -> std::ops::Range<u16> {
    coordinators..coordinators + nodes / 2
}

/// The fast members: the upper half, at least one.
pub fn fast_members(coordinators: u16, nodes: u16) -> std::ops::Range<u16> {
    coordinators + nodes / 2..coordinators + nodes
}

/// A node's clock rate in the drift-edge scenario, `bound` the drift bound in ppm: `−bound` for
/// a slow member, `+bound` for a fast one, none for coordinators and caches (drawn as with
/// drift faults).
pub fn edge_rate_ppm(coordinators: u16, nodes: u16, node: u16, bound: i64) -> Option<i64> {
    if slow_members(coordinators, nodes).contains(&node) {
        Some(-bound)
    } else if fast_members(coordinators, nodes).contains(&node) {
        Some(bound)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_parse_by_name() {
        for name in UK_SCENARIO_NAMES {
            assert_eq!(UkScenario::parse(name).unwrap().name(), name);
        }
        assert!(UkScenario::parse("drift").unwrap_err().contains("faults, drift-edge"));
    }

    #[test]
    fn members_split_into_slow_and_fast() {
        assert_eq!((slow_members(3, 6), fast_members(3, 6)), (3..6, 6..9));
        assert_eq!((slow_members(3, 3), fast_members(3, 3)), (3..4, 4..6));
        assert_eq!((slow_members(3, 2), fast_members(3, 2)), (3..4, 4..5));
        let rates: Vec<_> = (0..10).map(|node| edge_rate_ppm(3, 6, node, 7)).collect();
        assert_eq!(
            rates[2..].to_vec(),
            [None, Some(-7), Some(-7), Some(-7), Some(7), Some(7), Some(7), None]
        );
    }
}
