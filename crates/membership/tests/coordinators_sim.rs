//! Coordinators on the simulated fabric: they connect, check each other's configuration,
//! decide the initial view, admit a node that writes a join request into the leader's inbox,
//! write each decided view to the boards, and go on when the leader crashes; one restarted
//! without its memory rejoins and takes part again.

mod common;

use common::{config, initial, Sim};
use mu_fabric::{Access, ConnId, Endpoint, Fabric, LocalRegion, NodeId, RemoteAddr, Source};
use mu_fabric::{Completion, WorkRequest};
use mu_fabric_sim::{SimFabric, SimWorld};
use mu_membership::layout::{board_channel, BoardLayout, BOARD_REGION, VIEW_BYTES, VIEW_OFFSET};
use mu_membership::{CoordinatorDriver, CoordinatorEvent, MembershipConfig};
use mu_ukharon::changes::uid_for;
use mu_ukharon::mailbox::{Kind, Outbox, Request};
use mu_ukharon::restart::Memory;
use mu_ukharon::view::{Member, View};

const NODE: u16 = 5;

/// A node that is not a coordinator: its board, and connections to the coordinators' boards.
struct Node {
    fabric: SimFabric,
    board: <SimFabric as Fabric>::Region,
    endpoint: <SimFabric as Fabric>::Endpoint,
    outbox: Outbox,
}

impl Node {
    fn new(world: &SimWorld, config: &MembershipConfig) -> Node {
        let fabric = world.node(NodeId(NODE));
        let layout = BoardLayout::new(config);
        let board =
            fabric.register_region(BOARD_REGION, layout.board_bytes(), Access::ALL).unwrap();
        let endpoint = fabric.endpoint(64).unwrap();
        Node { fabric, board, endpoint, outbox: Outbox::new(config.cluster, NODE, 42) }
    }

    fn connect(&mut self, coordinator: u16) -> bool {
        let (me, c) = (NodeId(NODE), NodeId(coordinator));
        let out = ConnId::new(c, board_channel(me, c));
        self.fabric.connect(ConnId::new(c, board_channel(c, me)), Access::READ_WRITE).is_ok()
            && self.fabric.connect(out, Access::NONE).is_ok()
            && self.endpoint.attach(out).is_ok()
    }

    /// Writes a join request into `coordinator`'s inbox.
    fn join(&mut self, coordinator: u16, config: &MembershipConfig) {
        self.join_as(42, coordinator, config)
    }

    /// Writes a join request of incarnation `incarnation` into `coordinator`'s inbox (a new
    /// incarnation is admitted under a new unique id: a new view).
    fn join_as(&mut self, incarnation: u64, coordinator: u16, config: &MembershipConfig) {
        let request = Request::Join { incarnation };
        let frame = self.outbox.next(request.kind(), &request.payload()).to_vec();
        let offset = BoardLayout::new(config).inbox_offset(NODE);
        let remote = RemoteAddr { region: BOARD_REGION, offset };
        let conn =
            ConnId::new(NodeId(coordinator), board_channel(NodeId(NODE), NodeId(coordinator)));
        let wr = WorkRequest::write(1, Source::Inline(&frame), remote);
        self.endpoint.post(conn, &wr).unwrap();
    }

    fn completions(&mut self) -> Vec<Completion> {
        let mut out = vec![Completion::EMPTY; 8];
        let n = self.endpoint.poll(&mut out);
        out.truncate(n);
        out
    }

    /// The view on this node's board, if one is there whole.
    fn view(&self) -> Option<View> {
        let mut bytes = vec![0u8; VIEW_BYTES as usize];
        self.board.read(VIEW_OFFSET as usize, &mut bytes).unwrap();
        View::decode(&bytes).ok()
    }
}

/// §3.2 and §5.3.1: the initial view is decided, a join written into the leader's mailbox is
/// answered with the next view on the joiner's board, and a crash of the leader hands over
/// to the next coordinator, which decides the next change.
#[test]
fn coordinators_admit_a_node_and_survive_their_leader() {
    let mut sim = Sim::new(3, vec![config(); 3]);
    sim.run_for(2_000_000, 1_000);
    assert_eq!(sim.decided.first(), Some(&initial()), "the initial view is decided");
    assert!(sim.coordinators[0].as_ref().unwrap().is_leading());

    let mut node = Node::new(&sim.world, &config());
    assert!((0..3).all(|c| node.connect(c)), "the node connects to every coordinator");
    node.join(0, &config());
    sim.run_for(500_000, 1_000);
    let done = node.completions();
    assert!(done.len() == 1 && done[0].status.is_success(), "the request was written: {done:?}");
    let view = node.view().expect("the view reached the node's board");
    assert_eq!(view.epoch, 1);
    assert_eq!(view.uid_of(NODE), Some(uid_for(1, NODE)));

    sim.world.crash(NodeId(0)).unwrap();
    sim.coordinators[0] = None;
    sim.run_for(3_000_000, 1_000);
    assert!(sim.coordinators[1].as_ref().unwrap().is_leading(), "coordinator 1 took over");
    let member = Member { node: NODE, uid: uid_for(1, NODE) };
    let leave = Request::Leave { member };
    let frame = node.outbox.next(Kind::Leave, &leave.payload()).to_vec();
    let offset = BoardLayout::new(&config()).inbox_offset(NODE);
    let conn = ConnId::new(NodeId(1), board_channel(NodeId(NODE), NodeId(1)));
    let remote = RemoteAddr { region: BOARD_REGION, offset };
    node.endpoint.post(conn, &WorkRequest::write(2, Source::Inline(&frame), remote)).unwrap();
    sim.run_for(1_000_000, 1_000);
    let view = node.view().unwrap();
    assert_eq!(view.epoch, 2, "the removed node is told of the view that removes it");
    assert_eq!(view.uid_of(NODE), None);
    assert_eq!(sim.decided.len(), 3);
}

/// Coordinators whose configurations differ refuse consensus with each other.
#[test]
fn a_coordinator_with_another_configuration_is_refused() {
    let mut other = config();
    other.nodes_max = 9;
    let mut sim = Sim::new(4, vec![config(), config(), other]);
    let events = sim.run_for(2_000_000, 1_000);
    let mismatches: Vec<u16> = events
        .iter()
        .filter_map(|e| match e {
            CoordinatorEvent::ConfigMismatch { peer } => Some(*peer),
            _ => None,
        })
        .collect();
    assert!(mismatches.contains(&2), "{events:?}");
    assert!(mismatches.contains(&0) || mismatches.contains(&1), "{events:?}");
    assert_eq!(sim.decided.first(), Some(&initial()), "0 and 1 are a majority");
}

/// Decides view 1 (the node joins), then restarts coordinator 2 without its memory and runs
/// until it rejoined. Returns the first index it answers in.
fn restart_without_memory(sim: &mut Sim, node: &mut Node) -> u64 {
    sim.run_for(2_000_000, 1_000);
    assert!((0..3).all(|c| node.connect(c)), "the node connects to every coordinator");
    node.join_as(1, 0, &config());
    sim.run_for(500_000, 1_000);
    assert_eq!(sim.decided.len(), 2);

    sim.world.crash(NodeId(2)).unwrap();
    sim.coordinators[2] = None;
    sim.run_for(200_000, 1_000);
    sim.world.restart(NodeId(2)).unwrap();
    let fabric = sim.world.node(NodeId(2));
    let driver = CoordinatorDriver::with_memory(fabric, config(), initial(), 9, Memory::Forgotten);
    sim.coordinators[2] = Some(driver.unwrap());
    let mut events = Vec::new();
    let deadline = sim.world.now_ns() + 3_000_000;
    while sim.coordinators[2].as_ref().unwrap().is_rejoining() {
        let restarted = sim.coordinators[2].as_ref().unwrap();
        assert!(sim.world.now_ns() < deadline, "never rejoined: {}", restarted.describe());
        assert!(restarted.describe().contains("rejoining"), "{}", restarted.describe());
        assert!(!restarted.is_leading());
        events.extend(sim.run_for(1_000, 1_000));
    }
    assert!(events.iter().any(|e| matches!(e, CoordinatorEvent::Rejoined { .. })), "{events:?}");
    let restarted = sim.coordinators[2].as_ref().unwrap();
    assert!(restarted.describe().contains("restarted without its memory"));
    assert_eq!(restarted.latest(), sim.decided.last(), "it learned the latest view");
    let answers_from = restarted.answers_from().expect("rejoined");
    assert!(answers_from > sim.decided.len() as u64, "it abstains in the next index");
    answers_from
}

/// A coordinator restarted without its memory (`mu_ukharon::restart`) reads the others' slot
/// words and rejoins; the leader, with nothing to change, decides views that change nothing
/// until the cluster is past the indices it abstains in; then the leader and it decide a view
/// without the third coordinator.
#[test]
fn a_coordinator_restarted_without_its_memory_rejoins_and_takes_part_again() {
    let mut sim = Sim::new(5, vec![config(); 3]);
    let mut node = Node::new(&sim.world, &config());
    let answers_from = restart_without_memory(&mut sim, &mut node);
    let members = sim.decided.last().unwrap().members.clone();
    sim.run_for(2_000_000, 1_000);
    assert_eq!(sim.decided.len() as u64, answers_from, "the leader went past its bound");
    assert!(sim.decided.iter().skip(2).all(|v| v.members == members), "{:?}", sim.decided);
    // Coordinator 1 crashes: 0 decides the next view with 2.
    sim.world.crash(NodeId(1)).unwrap();
    sim.coordinators[1] = None;
    let before = sim.decided.len();
    node.join_as(2, 0, &config());
    sim.run_for(3_000_000, 1_000);
    let leader = sim.coordinators[0].as_ref().unwrap();
    assert_eq!(sim.decided.len(), before + 1, "{}", leader.describe());
    let restarted = sim.coordinators[2].as_ref().unwrap();
    assert_eq!(restarted.latest(), sim.decided.last());
}

/// Right after its rejoin it abstains: with coordinator 1 crashed at that moment, the leader
/// and the restarted coordinator decide nothing (it may have accepted the next index before).
#[test]
fn a_coordinator_restarted_without_its_memory_abstains_in_the_next_index() {
    let mut sim = Sim::new(6, vec![config(); 3]);
    let mut node = Node::new(&sim.world, &config());
    restart_without_memory(&mut sim, &mut node);
    sim.world.crash(NodeId(1)).unwrap();
    sim.coordinators[1] = None;
    let before = sim.decided.len();
    node.join_as(2, 0, &config());
    sim.run_for(3_000_000, 1_000);
    assert_eq!(sim.decided.len(), before, "decided with a coordinator that forgot");
    assert!(sim.coordinators[0].as_ref().unwrap().is_leading());
}
