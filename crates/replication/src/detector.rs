//! Leader election (Mu paper §5.1): the pull-score failure detector, the lowest-id rule, and fate
//! sharing between the heartbeat and the replication thread.
//!
//! The engines count reads and checks, not time: the runtime reads every peer's heartbeat counter
//! each `read_period_ns` and checks the replication thread each `fate_check_period_ns`, and
//! reports what it saw.

use crate::ReplicaSet;
use mu_fabric::NodeId;

/// How the failure detector scores its peers. The thresholds are the paper's, "chosen
/// experimentally ... so as to avoid false positives".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetectorConfig {
    /// The highest score a peer can reach (the lowest is 0). It bounds how long a crashed peer
    /// that had been timely for a while takes to be found failed: `score_max - failure_threshold
    /// + 1` stale reads.
    pub score_max: u8,
    /// An alive peer whose score drops below this is failed.
    pub failure_threshold: u8,
    /// A failed peer whose score rises above this is alive again. Kept above
    /// `failure_threshold` so that a peer on the edge does not flap between alive and failed.
    pub recovery_threshold: u8,
    /// How often the runtime reads each peer's heartbeat counter. A default the runtime may tune:
    /// it sets how fast failures are found (with the default thresholds, a peer at score 6 is
    /// found failed after 5 stale reads, one at score 15 after 14) against how much read traffic
    /// the background plane makes.
    pub read_period_ns: u64,
    /// How often fate sharing looks at the replication thread (the paper checks every 10,000
    /// iterations of the leader election thread).
    pub fate_check_period_ns: u64,
}

impl Default for DetectorConfig {
    fn default() -> DetectorConfig {
        DetectorConfig {
            score_max: 15,
            failure_threshold: 2,
            recovery_threshold: 6,
            read_period_ns: 100_000,
            fate_check_period_ns: 10_000_000,
        }
    }
}

impl DetectorConfig {
    pub fn validate(&self) -> Result<(), String> {
        /// The longest read and fate-check period: far above any useful one, and far enough
        /// below `u64::MAX` nanoseconds that deadlines computed from it never overflow.
        const PERIOD_NS_MAX: u64 = 1_000_000_000;
        let DetectorConfig {
            score_max,
            failure_threshold,
            recovery_threshold,
            read_period_ns,
            fate_check_period_ns,
        } = *self;
        if score_max == 0 {
            return Err("score_max is 0: scores could never move".into());
        }
        if failure_threshold == 0 {
            return Err("failure_threshold is 0: a score never drops below 0, so no replica \
                        would ever be found failed"
                .into());
        }
        if failure_threshold >= recovery_threshold {
            return Err(format!(
                "failure_threshold ({failure_threshold}) must be below recovery_threshold \
                 ({recovery_threshold}): the gap between them keeps a replica from flapping \
                 between alive and failed"
            ));
        }
        if recovery_threshold >= score_max {
            return Err(format!(
                "recovery_threshold ({recovery_threshold}) must be below score_max \
                 ({score_max}): a failed replica recovers only once its score rises above \
                 recovery_threshold"
            ));
        }
        if read_period_ns == 0 {
            return Err("read_period_ns is 0: heartbeats must be read at some period".into());
        }
        if fate_check_period_ns == 0 {
            return Err(
                "fate_check_period_ns is 0: the replication thread must be checked at some \
                 period"
                    .into(),
            );
        }
        for (name, value) in
            [("read_period_ns", read_period_ns), ("fate_check_period_ns", fate_check_period_ns)]
        {
            if value > PERIOD_NS_MAX {
                return Err(format!(
                    "{name} is {value}: at most {PERIOD_NS_MAX} (1 s); a failure detector that \
                     reads less often than that could not tell a failure for many seconds"
                ));
            }
        }
        Ok(())
    }
}

/// What the detector knows of one peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Peer {
    score: u8,
    alive: bool,
    /// The counter of the previous successful read; `None` before the first read and after the
    /// peer was unreachable (a restarted peer counts again from 0, so an old counter says
    /// nothing).
    counter_last: Option<u64>,
    /// Whether the peer may lead, as of the last read.
    eligible: bool,
}

/// The pull-score failure detector and the lowest-id leader rule (§5.1).
///
/// A read that returns a counter different from the previous read's raises the peer's score, a
/// read that returns the same counter lowers it; scores stay within `[0, score_max]`. A peer
/// starts alive at score `recovery_threshold`, as if it had just recovered.
///
/// The first read of a peer (and the first after it was unreachable) has nothing to be compared
/// with: it only records the counter and leaves the score alone. A counter seen once is no
/// evidence that the peer is running, and counting it as changed would give a peer whose
/// heartbeat never moves one undeserved read. So a peer whose counter never moves (never started,
/// or crashed before we first read it) is failed after that first read and then exactly
/// `recovery_threshold - failure_threshold + 1` stale reads.
///
/// A runtime whose read of a peer has not completed when the next one is due reports the counter
/// it last saw again (its read buffer still holds it): a slow peer loses score like a stopped one,
/// which is the small timeout of §5.1. The connection's own, longer timeout arrives as
/// [`Detector::on_unreachable`].
#[derive(Clone, Debug)]
pub struct Detector {
    config: DetectorConfig,
    replicas: ReplicaSet,
    me_pos: usize,
    /// By position in the replica set; our own entry is unused.
    peers: Vec<Peer>,
    self_eligible: bool,
}

impl Detector {
    pub fn new(
        config: DetectorConfig,
        replicas: &ReplicaSet,
        me: NodeId,
    ) -> Result<Detector, String> {
        config.validate()?;
        let me_pos = replicas
            .position(me)
            .ok_or_else(|| format!("replica {me} is not in the replica set"))?;
        let peer = Peer {
            score: config.recovery_threshold,
            alive: true,
            counter_last: None,
            eligible: true,
        };
        Ok(Detector {
            peers: vec![peer; replicas.len()],
            config,
            replicas: replicas.clone(),
            me_pos,
            self_eligible: true,
        })
    }

    /// A heartbeat read of `peer` returned `counter` and the peer's `eligible` flag (whether it
    /// may lead: a replica that restarted with an empty log may not, until it had a state
    /// transfer). Reads of ourselves or of a replica outside the set are ignored.
    pub fn on_heartbeat(&mut self, peer: NodeId, counter: u64, eligible: bool) {
        let Some(pos) = self.peer_position(peer) else { return };
        let score_max = self.config.score_max;
        let p = &mut self.peers[pos];
        p.eligible = eligible;
        match p.counter_last.replace(counter) {
            None => {} // the first read: nothing to compare with
            Some(last) if last != counter => p.score = p.score.saturating_add(1).min(score_max),
            Some(_) => p.score = p.score.saturating_sub(1),
        }
        self.update_liveness(pos);
    }

    /// The read failed at the connection level (peer dead, connection timed out): the second,
    /// longer timeout of §5.1 "Large network delays". The peer is failed at once (score 0) and
    /// climbs back only through changed counters; its next counter is a fresh start, not compared
    /// with the old one.
    pub fn on_unreachable(&mut self, peer: NodeId) {
        let Some(pos) = self.peer_position(peer) else { return };
        let p = &mut self.peers[pos];
        p.score = 0;
        p.alive = false;
        p.counter_last = None;
        self.update_liveness(pos);
    }

    /// `peer`'s score; `None` for ourselves (we do not read our own heartbeat) and for a replica
    /// outside the set.
    pub fn score(&self, peer: NodeId) -> Option<u8> {
        self.peer_position(peer).map(|pos| self.peers[pos].score)
    }

    /// Whether we consider `peer` alive. We are always alive to ourselves.
    pub fn is_alive(&self, peer: NodeId) -> bool {
        match self.replicas.position(peer) {
            Some(pos) => pos == self.me_pos || self.peers[pos].alive,
            None => false,
        }
    }

    /// The replicas we consider alive, ourselves included, in id order.
    pub fn alive(&self) -> Vec<NodeId> {
        self.replicas.ids().iter().copied().filter(|&id| self.is_alive(id)).collect()
    }

    /// The replica we consider leader: the lowest id among those alive and eligible (§5.1: "replica
    /// i decides that j is leader if j is the replica with the lowest id, among those that i
    /// considers to be alive"). `None` when no one qualifies, which happens only while we are
    /// not eligible ourselves.
    pub fn leader(&self) -> Option<NodeId> {
        self.replicas.ids().iter().enumerate().find_map(|(pos, &id)| {
            let eligible = if pos == self.me_pos {
                self.self_eligible
            } else {
                self.peers[pos].alive && self.peers[pos].eligible
            };
            eligible.then_some(id)
        })
    }

    /// Whether we may lead ourselves (true at first). The runtime clears it while our log is
    /// empty after a restart and sets it again after a state transfer.
    pub fn set_self_eligible(&mut self, eligible: bool) {
        self.self_eligible = eligible;
    }

    /// Whether we stand for election, as last set: what peers should know of us.
    pub fn self_eligible(&self) -> bool {
        self.self_eligible
    }

    fn peer_position(&self, peer: NodeId) -> Option<usize> {
        self.replicas.position(peer).filter(|&pos| pos != self.me_pos)
    }

    /// Moves `pos` between alive and failed after its score changed (hysteresis: failed below
    /// the failure threshold, alive again only above the recovery threshold).
    fn update_liveness(&mut self, pos: usize) {
        let DetectorConfig { score_max, failure_threshold, recovery_threshold, .. } = self.config;
        let p = &mut self.peers[pos];
        if p.alive && p.score < failure_threshold {
            p.alive = false;
        } else if !p.alive && p.score > recovery_threshold {
            p.alive = true;
        }
        assert!(p.score <= score_max);
        assert!(!p.alive || p.score >= failure_threshold, "an alive peer is above failure");
        assert!(p.alive || p.score <= recovery_threshold, "a failed peer is below recovery");
    }
}

/// Fate sharing (§5.1): the heartbeat stops while the replication thread is stuck inside
/// propose, so that a leader whose replication is stuck is not kept leader by a timely heartbeat
/// thread ("the leader cannot commit new entries, and no other leader can be elected").
///
/// Stuck means: inside propose at this check, and the replication thread's loop counter did not
/// move since the previous check. Once stuck, the heartbeat stays stopped until the loop counter
/// moves again, whether or not the thread is still inside propose.
#[derive(Clone, Debug, Default)]
pub struct FateSharing {
    /// The loop counter at the previous check; `None` before the first.
    loop_count_last: Option<u64>,
    stuck: bool,
}

impl FateSharing {
    pub fn new() -> FateSharing {
        FateSharing::default()
    }

    /// Called every `fate_check_period_ns` by the background plane with the replication thread's
    /// loop counter and whether it is inside propose; returns whether the heartbeat may keep
    /// going. The first check has nothing to compare with and never finds the thread stuck.
    pub fn check(&mut self, loop_count: u64, in_propose: bool) -> bool {
        let moved = self.loop_count_last.replace(loop_count).is_none_or(|last| last != loop_count);
        if self.stuck {
            self.stuck = !moved;
        } else {
            self.stuck = in_propose && !moved;
        }
        !self.stuck
    }
}
