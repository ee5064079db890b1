//! The shared conformance suite, run on the simulator: once with the default configuration, and
//! once more with faults the suite must tolerate (out-of-order landing within writes, a fast
//! permission path that always fails under load, heavier jitter).

use mu_fabric::conformance::{Harness, ProgramRunner, TaskOutcome, TaskSpec};
use mu_fabric::NodeId;
use mu_fabric_sim::{FaultConfig, SimConfig, SimFabric, SimWorld};

/// Virtual time a tick lets pass when no event is scheduled, so that loops that tick until a
/// real-time deadline still see virtual time move.
const IDLE_TICK_NS: u64 = 1_000;
/// Virtual time `settle` may run for: a task that writes for ever never lets the world go idle.
const SETTLE_LIMIT_NS: u64 = 10_000_000;
/// Virtual time `join` and `hold_mid_write` may run for before the harness gives up.
const WAIT_LIMIT_NS: u64 = 2_000_000_000;

/// Runs conformance tasks as simulated nodes, stepping their programs between world events.
pub struct SimHarness {
    world: SimWorld,
    tasks: Vec<Slot>,
}

struct Slot {
    node: NodeId,
    /// Dropped (with its endpoint) once joined.
    runner: Option<ProgramRunner<SimFabric>>,
    started: bool,
    outcome: Option<TaskOutcome>,
}

/// A task, by its index in the harness.
pub struct SimTask(usize);

impl SimHarness {
    pub fn new(seed: u64) -> SimHarness {
        SimHarness::with_config(SimConfig::default(), seed)
    }

    /// The harness with every fault the conformance suite is meant to survive switched on.
    pub fn with_faults(seed: u64) -> SimHarness {
        let config = SimConfig {
            jitter_ns: 400,
            faults: FaultConfig {
                out_of_order_landing: true,
                fast_perm_failure_probability: 0.0,
                fast_perm_busy_in_flight_probability: 1.0,
                ..FaultConfig::default()
            },
            ..SimConfig::default()
        };
        SimHarness::with_config(config, seed)
    }

    pub fn with_config(config: SimConfig, seed: u64) -> SimHarness {
        SimHarness { world: SimWorld::new(config, seed), tasks: Vec::new() }
    }

    /// Lets every started, live, running task make what progress it can.
    fn step_tasks(&mut self) {
        for slot in &mut self.tasks {
            if !slot.started || slot.outcome.is_some() {
                continue;
            }
            if self.world.is_crashed(slot.node) || self.world.is_paused(slot.node) {
                continue;
            }
            if let Some(runner) = slot.runner.as_mut() {
                slot.outcome = runner.step();
            }
        }
    }

    /// One event, or a little time if none is due.
    fn one_event(&mut self) {
        if !self.world.step() {
            self.world.advance(IDLE_TICK_NS);
        }
    }
}

impl Harness for SimHarness {
    type F = SimFabric;
    type Task = SimTask;

    fn fabric(&mut self, node: NodeId) -> SimFabric {
        self.world.node(node)
    }

    fn tick(&mut self) {
        self.step_tasks();
        self.one_event();
    }

    fn settle(&mut self) {
        let limit = self.world.now_ns().saturating_add(SETTLE_LIMIT_NS);
        loop {
            self.step_tasks();
            if !self.world.step() || self.world.now_ns() > limit {
                return;
            }
        }
    }

    fn crash(&mut self, node: NodeId) {
        // Crashing a node the world has never seen has nothing to kill.
        let _ = self.world.crash(node);
    }

    fn spawn(&mut self, spec: TaskSpec) -> SimTask {
        let fabric = self.world.node(spec.node);
        let runner = ProgramRunner::new(fabric, &spec)
            .unwrap_or_else(|e| panic!("setting up task on {}: {e}", spec.node));
        self.tasks.push(Slot {
            node: spec.node,
            runner: Some(runner),
            started: false,
            outcome: None,
        });
        SimTask(self.tasks.len() - 1)
    }

    fn start(&mut self, task: &SimTask) {
        self.tasks[task.0].started = true;
    }

    fn hold_mid_write(&mut self, task: &SimTask) {
        let node = self.tasks[task.0].node;
        self.tasks[task.0].started = true;
        let chunk_bytes = self.world.config().chunk_bytes.max(1) as u64;
        let limit = self.world.now_ns().saturating_add(WAIT_LIMIT_NS);
        loop {
            assert!(self.world.now_ns() < limit, "task on {node} never posted a write");
            match self.world.in_flight(node).first() {
                // Part of the write is in the target, the rest is not: freeze it there. (A
                // write of one chunk is frozen before it lands at all.)
                Some(op) if op.landed_bytes > 0 || op.len_bytes <= chunk_bytes => {
                    self.world.hold_outgoing(node);
                    return;
                }
                // Posted but not landing yet: let the world run up to its first chunk.
                Some(_) => self.one_event(),
                None => self.tick(),
            }
        }
    }

    fn release(&mut self, task: &SimTask) {
        self.world.release_outgoing(self.tasks[task.0].node);
    }

    fn join(&mut self, task: SimTask) -> Option<TaskOutcome> {
        let node = self.tasks[task.0].node;
        let limit = self.world.now_ns().saturating_add(WAIT_LIMIT_NS);
        let outcome = loop {
            if let Some(outcome) = self.tasks[task.0].outcome {
                break Some(outcome);
            }
            if self.world.is_crashed(node) {
                break None;
            }
            assert!(self.world.now_ns() < limit, "task on {node} never finished");
            self.tick();
        };
        self.tasks[task.0].runner = None;
        outcome
    }
}

mu_fabric::conformance_tests!(SimHarness::new(0x5EED_0001));

mod with_faults {
    use super::SimHarness;

    mu_fabric::conformance_tests!(SimHarness::with_faults(0x5EED_0002));
}
