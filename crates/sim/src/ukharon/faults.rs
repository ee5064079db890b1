//! The faults a uKharon run injects; each switched on or off, the seed deciding when and where.

/// See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UkFaults {
    /// A node's process dies (the fabric's death signal tells its peers at once).
    pub crash: bool,
    /// A crashed node starts again as a new process: it joins under a new unique id.
    pub restart: bool,
    /// A node stops (its memory stays readable, as a stopped process's) and later runs again:
    /// the heartbeat ring's failure.
    pub pause: bool,
    /// A link gets an extra one-way delay (up to 20 µs).
    pub delay: bool,
    /// The link between two nodes is cut, both ways, until healed: the broadcast heartbeats'
    /// failure.
    pub partition: bool,
    /// Each node's clock runs at its own rate within the drift bound, from its own offset.
    pub drift: bool,
    /// Nodes ask for other lease durations: compatible views.
    pub lease: bool,
    /// A coordinator crashes or stops, and a stopped one resumes (at most a minority of them
    /// down at once), the leader included.
    pub coordinator: bool,
    /// A crashed coordinator starts again without its memory (a fresh node, zeroed regions)
    /// and rejoins (`mu_ukharon::restart`); with none crashed, one crashes. One at a time: no
    /// other coordinator crashes while a restarted one rejoins or still abstains in the next
    /// index.
    pub coordinator_restart: bool,
}

/// The names on the command line, in field order.
pub const UK_FAULT_NAMES: [&str; 9] = [
    "crash",
    "restart",
    "pause",
    "delay",
    "partition",
    "drift",
    "lease",
    "coordinator",
    "coordinator-restart",
];

impl UkFaults {
    pub const ALL: UkFaults = UkFaults {
        crash: true,
        restart: true,
        pause: true,
        delay: true,
        partition: true,
        drift: true,
        lease: true,
        coordinator: true,
        coordinator_restart: true,
    };

    pub const NONE: UkFaults = UkFaults {
        crash: false,
        restart: false,
        pause: false,
        delay: false,
        partition: false,
        drift: false,
        lease: false,
        coordinator: false,
        coordinator_restart: false,
    };

    /// `none`, `all`, or a comma-separated list of [`UK_FAULT_NAMES`].
    pub fn parse(text: &str) -> Result<UkFaults, String> {
        match text {
            "none" => return Ok(UkFaults::NONE),
            "all" => return Ok(UkFaults::ALL),
            _ => {}
        }
        let mut f = UkFaults::NONE;
        for name in text.split(',').map(str::trim) {
            let flag = match name {
                "crash" => &mut f.crash,
                "restart" => &mut f.restart,
                "pause" => &mut f.pause,
                "delay" => &mut f.delay,
                "partition" => &mut f.partition,
                "drift" => &mut f.drift,
                "lease" => &mut f.lease,
                "coordinator" => &mut f.coordinator,
                "coordinator-restart" => &mut f.coordinator_restart,
                other => {
                    return Err(format!(
                        "unknown fault {other:?}: none, all, or some of {}",
                        UK_FAULT_NAMES.join(", ")
                    ))
                }
            };
            *flag = true;
        }
        Ok(f)
    }
}

/// The faults as `--faults` names them.
pub fn describe_faults(f: UkFaults) -> String {
    let on = [
        f.crash,
        f.restart,
        f.pause,
        f.delay,
        f.partition,
        f.drift,
        f.lease,
        f.coordinator,
        f.coordinator_restart,
    ];
    let names: Vec<&str> =
        UK_FAULT_NAMES.iter().zip(on).filter_map(|(name, on)| on.then_some(*name)).collect();
    match names.len() {
        0 => "none".into(),
        n if n == on.len() => "all".into(),
        _ => names.join(","),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_by_name() {
        assert_eq!(UkFaults::parse("all"), Ok(UkFaults::ALL));
        let f = UkFaults::parse("crash, drift").unwrap();
        assert!(f.crash && f.drift && !f.pause);
        let f = UkFaults::parse("coordinator-restart").unwrap();
        assert!(f.coordinator_restart && !f.coordinator);
        assert!(UkFaults::parse("coordinator-reboot").unwrap_err().contains("coordinator-restart"));
        assert!(UkFaults::parse("crush").unwrap_err().contains("crash, restart"));
    }
}
