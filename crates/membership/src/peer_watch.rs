//! How a coordinator tells a stopped peer coordinator from a live one (§5.3.1: the lowest
//! coordinator *considered alive* leads). The fabric's death signal covers a process that
//! died; a stopped one (a SIGSTOPped process, a hung kernel: §4.2's kernel failures) keeps its
//! memory readable and never dies, and as the lowest it would keep the lead and decide
//! nothing. So each coordinator bumps a heartbeat on its board at every poll, and its peers
//! read it every `read_gap_ns`: one whose counter has not moved for `timeout_ns` is taken for
//! dead until it moves again. Being wrong costs only liveness (two leaders duel and back
//! off); safety never rests on it.

/// One peer's heartbeat, as this coordinator last read it.
#[derive(Clone, Copy, Debug)]
pub struct PeerWatch {
    last: Option<u64>,
    /// When the counter last moved (or when watching began).
    changed_ns: u64,
    reading: bool,
    next_read_ns: u64,
}

impl PeerWatch {
    /// Watching from `now_ns`: a peer not read yet counts as alive for a timeout.
    pub fn new(now_ns: u64) -> PeerWatch {
        PeerWatch { last: None, changed_ns: now_ns, reading: false, next_read_ns: now_ns }
    }

    /// Whether to post a read of the peer's heartbeat now (one at a time).
    pub fn read_due(&mut self, now_ns: u64) -> bool {
        let due = !self.reading && now_ns >= self.next_read_ns;
        self.reading |= due;
        due
    }

    /// The read completed with `value` (`None`: it failed; the fabric's signals and the
    /// links say more about a peer that cannot be reached).
    pub fn on_read(&mut self, value: Option<u64>, now_ns: u64, read_gap_ns: u64) {
        self.reading = false;
        self.next_read_ns = now_ns.saturating_add(read_gap_ns);
        if let Some(v) = value {
            if self.last != Some(v) {
                self.last = Some(v);
                self.changed_ns = now_ns;
            }
        }
    }

    /// Whether the peer's counter has not moved for `timeout_ns`.
    pub fn silent(&self, now_ns: u64, timeout_ns: u64) -> bool {
        now_ns.saturating_sub(self.changed_ns) > timeout_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_that_stops_is_silent_until_it_moves() {
        let mut w = PeerWatch::new(0);
        assert!(w.read_due(0) && !w.read_due(1), "one read at a time");
        w.on_read(Some(5), 10, 100);
        assert!(!w.read_due(50) && w.read_due(110));
        w.on_read(Some(5), 120, 100);
        assert!(!w.silent(500, 1_000), "unchanged for 490 ns of 1000");
        assert!(w.silent(1_011, 1_000));
        assert!(w.read_due(1_011));
        w.on_read(Some(6), 1_020, 100);
        assert!(!w.silent(1_030, 1_000), "it moved again");
        assert!(w.read_due(1_120));
        w.on_read(None, 1_130, 100);
        assert!(!w.silent(1_200, 1_000), "a failed read says nothing");
    }
}
