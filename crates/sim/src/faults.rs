//! Which faults a run injects. Each is switched on or off; when on, the seed decides when and
//! where it strikes.

/// The fault switches of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Faults {
    /// A replica's process dies: its node stops, its memory is gone (never more than a minority
    /// of the replicas crashed or recovering at once).
    pub crash: bool,
    /// A crashed replica starts again as a new process, its log lost: it recovers through a
    /// leader or a snapshot before it counts again.
    pub restart: bool,
    /// A replica's threads stop (a descheduled process) and later run again; its memory stays
    /// reachable, and its in-flight work requests land.
    pub pause: bool,
    /// A link gets an extra one-way delay and jitter (up to 20 µs and 5 µs): slow enough to
    /// make heartbeats look late.
    pub delay: bool,
    /// The link between two replicas is cut, both ways, until healed.
    pub partition: bool,
    /// Fast (access-flag) permission changes fail now and then, as the Mu paper saw on NICs with
    /// operations in flight: the permission manager must fall back to the slow path. And
    /// bindings and slow changes return "still under way" now and then, as a backend that keeps
    /// its calls short does (ofi in a replica): the caller must make them again later.
    pub perm_failure: bool,
    /// Writes land in shuffled chunks, not left to right, as on hardware without left-to-right
    /// visibility. Runs then use checksum integrity (canary integrity cannot be correct there).
    pub out_of_order: bool,
    /// Replicas are added and removed (§5.4): the cluster starts with some of its replicas as
    /// members, and the leader is asked, one change at a time, to add one from outside (started
    /// fresh, restarted, or replaced by a new process) or to remove a member, itself included.
    /// Not among the faults `all` names, so that seeds recorded before it replay as they did:
    /// `all,membership` asks for every fault.
    pub membership: bool,
}

/// The names on the command line, in [`Faults`] field order.
pub const FAULT_NAMES: [&str; 8] = [
    "crash",
    "restart",
    "pause",
    "delay",
    "partition",
    "perm-failure",
    "out-of-order",
    "membership",
];

/// How many of [`FAULT_NAMES`] `all` names: every one but `membership`.
const ALL_COUNT: usize = 7;

impl Faults {
    /// The faults `all` names: every one but `membership`.
    pub const ALL: Faults = Faults {
        crash: true,
        restart: true,
        pause: true,
        delay: true,
        partition: true,
        perm_failure: true,
        out_of_order: true,
        membership: false,
    };
    pub const NONE: Faults = Faults {
        crash: false,
        restart: false,
        pause: false,
        delay: false,
        partition: false,
        perm_failure: false,
        out_of_order: false,
        membership: false,
    };

    fn switches(&mut self) -> [&mut bool; 8] {
        [
            &mut self.crash,
            &mut self.restart,
            &mut self.pause,
            &mut self.delay,
            &mut self.partition,
            &mut self.perm_failure,
            &mut self.out_of_order,
            &mut self.membership,
        ]
    }

    /// `none`, or a comma-separated list of fault names (see [`FAULT_NAMES`]) and `all` (every
    /// fault but `membership`).
    pub fn parse(spec: &str) -> Result<Faults, String> {
        if spec.trim() == "none" {
            return Ok(Faults::NONE);
        }
        let mut faults = Faults::NONE;
        for name in spec.split(',').map(str::trim) {
            if name == "none" {
                return Err("none stands alone: it cannot be combined with other faults".into());
            }
            if name.is_empty() {
                return Err(format!(
                    "an empty fault name in {spec:?}: the faults are {} (or all, none)",
                    FAULT_NAMES.join(", ")
                ));
            }
            if name == "all" {
                for switch in faults.switches().into_iter().take(ALL_COUNT) {
                    *switch = true;
                }
                continue;
            }
            let Some(i) = FAULT_NAMES.iter().position(|&n| n == name) else {
                return Err(format!(
                    "unknown fault {name:?}: the faults are {} (or all, none)",
                    FAULT_NAMES.join(", ")
                ));
            };
            *faults.switches()[i] = true;
        }
        if faults.restart && !faults.crash {
            return Err("fault restart needs crash (only a crashed replica restarts)".into());
        }
        Ok(faults)
    }

    /// The faults that are on, as `parse` reads them.
    pub fn describe(mut self) -> String {
        let switches: Vec<bool> = self.switches().into_iter().map(|on| *on).collect();
        let mut on: Vec<&str> = Vec::new();
        if switches[..ALL_COUNT].iter().all(|&on| on) {
            on.push("all");
        }
        for (i, name) in FAULT_NAMES.iter().enumerate() {
            if switches[i] && (i >= ALL_COUNT || on.first() != Some(&"all")) {
                on.push(name);
            }
        }
        if on.is_empty() {
            "none".into()
        } else {
            on.join(",")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_it_describes() {
        for spec in [
            "all",
            "none",
            "crash",
            "crash,restart,out-of-order",
            "pause,delay",
            "all,membership",
            "crash,membership",
        ] {
            assert_eq!(Faults::parse(spec).unwrap().describe(), spec);
        }
        assert_eq!(Faults::parse("all").unwrap(), Faults::ALL);
        const { assert!(!Faults::ALL.membership, "seeds recorded with all replay as they did") };
        let every = Faults::parse("membership,all").unwrap();
        assert!(every.membership && every.crash && every.out_of_order);
        assert_eq!(every.describe(), "all,membership");
        assert!(Faults::parse("crash,meteor").unwrap_err().contains("unknown fault \"meteor\""));
        assert!(Faults::parse("restart").unwrap_err().contains("needs crash"));
    }
}
