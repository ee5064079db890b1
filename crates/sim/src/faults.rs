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
}

/// The names on the command line, in [`Faults`] field order.
pub const FAULT_NAMES: [&str; 7] =
    ["crash", "restart", "pause", "delay", "partition", "perm-failure", "out-of-order"];

impl Faults {
    pub const ALL: Faults = Faults {
        crash: true,
        restart: true,
        pause: true,
        delay: true,
        partition: true,
        perm_failure: true,
        out_of_order: true,
    };
    pub const NONE: Faults = Faults {
        crash: false,
        restart: false,
        pause: false,
        delay: false,
        partition: false,
        perm_failure: false,
        out_of_order: false,
    };

    fn switches(&mut self) -> [&mut bool; 7] {
        [
            &mut self.crash,
            &mut self.restart,
            &mut self.pause,
            &mut self.delay,
            &mut self.partition,
            &mut self.perm_failure,
            &mut self.out_of_order,
        ]
    }

    /// `all`, `none`, or a comma-separated list of fault names (see [`FAULT_NAMES`]).
    pub fn parse(spec: &str) -> Result<Faults, String> {
        match spec.trim() {
            "all" => return Ok(Faults::ALL),
            "none" | "" => return Ok(Faults::NONE),
            _ => {}
        }
        let mut faults = Faults::NONE;
        for name in spec.split(',').map(str::trim) {
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
        let on: Vec<&str> = self
            .switches()
            .into_iter()
            .zip(FAULT_NAMES)
            .filter(|(on, _)| **on)
            .map(|(_, name)| name)
            .collect();
        match on.len() {
            0 => "none".into(),
            7 => "all".into(),
            _ => on.join(","),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_it_describes() {
        for spec in ["all", "none", "crash", "crash,restart,out-of-order", "pause,delay"] {
            assert_eq!(Faults::parse(spec).unwrap().describe(), spec);
        }
        assert!(Faults::parse("crash,meteor").unwrap_err().contains("unknown fault \"meteor\""));
        assert!(Faults::parse("restart").unwrap_err().contains("needs crash"));
    }
}
