//! The conformance suite: one set of tests that every fabric backend instantiates.
//!
//! A backend provides a [`Harness`]: it makes nodes that live in the test process, lets time pass
//! (`tick`/`settle`: the simulator runs its event loop, real backends just wait), and runs
//! [`TaskSpec`]s as separate nodes — separate processes on shared memory, simulated nodes in the
//! simulator — that can be crashed, stopped in the middle of a write, and joined.
//!
//! Each test function below checks one semantic from `docs/fabric.md`; the
//! [`conformance_tests!`](crate::conformance_tests) macro turns all of them into `#[test]`s for a
//! harness constructor.

use crate::{
    Access, Completion, ConnId, Endpoint, Fabric, FabricError, LocalRegion, LocalSlice, NodeId,
    OpKind, PermError, PostError, QpState, RegionId, RegionScope, RemoteAddr, Source, Status,
    WorkRequest,
};
use std::io::BufRead;
use std::time::{Duration, Instant};

/// What a test needs from a backend.
pub trait Harness {
    type F: Fabric;
    /// A task running as its own node.
    type Task;

    /// The node `node`, living in the test process (created on first use).
    fn fabric(&mut self, node: NodeId) -> Self::F;

    /// Lets a little time pass: the simulator runs one event, real backends pause briefly.
    fn tick(&mut self);

    /// Lets time pass until nothing is in flight.
    fn settle(&mut self);

    /// Kills `node` (an in-process node or a task's node). Its memory stays where it was, but it
    /// can never acknowledge again.
    fn crash(&mut self, node: NodeId);

    /// Starts `spec` as its own node and returns once the node has registered its regions and
    /// brought its side of its connections to ready-to-send. The program itself waits for
    /// [`Harness::start`], so that the test can first bring up its side of those connections.
    fn spawn(&mut self, spec: TaskSpec) -> Self::Task;

    /// Lets the task's program run.
    fn start(&mut self, task: &Self::Task);

    /// Stops the task's node in the middle of copying a write into its target: after this returns,
    /// the task has a write in flight that has not finished and will not finish until
    /// [`Harness::release`]. Only meaningful for [`Program::WriteLoop`].
    fn hold_mid_write(&mut self, task: &Self::Task);

    /// Lets a held task go on (a fenced task stays dead).
    fn release(&mut self, task: &Self::Task);

    /// Waits for the task's program to end and returns what it reports; `None` if the task's node
    /// died (crashed or fenced) before reporting.
    fn join(&mut self, task: Self::Task) -> Option<TaskOutcome>;
}

/// A node that a test runs apart from the test process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskSpec {
    pub node: NodeId,
    /// Regions to register: id, length in bytes, access.
    pub regions: Vec<(RegionId, usize, Access)>,
    /// Connections to bring up on the task's side, with the access the task grants its peer.
    pub connect: Vec<(ConnId, Access)>,
    pub program: Program,
}

/// What a task does once started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Program {
    /// Nothing: it only hosts its regions until killed.
    Host,
    /// Writes `len` bytes from its region 0 to `remote` over `conn`, again and again, each write
    /// filled with the iteration number's low byte (never 0), until a write fails.
    WriteLoop { conn: ConnId, remote: RemoteAddr, len: u32 },
    /// Increments the word at `remote` by compare-and-swap `count` times.
    CasIncrements { conn: ConnId, remote: RemoteAddr, count: u64 },
}

/// What a task reports when its program ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskOutcome {
    /// Operations that succeeded (writes, or compare-and-swaps that swapped).
    pub ops_ok: u64,
    /// The status that ended the program, if one did.
    pub last_status: Option<Status>,
}

// What crosses a process boundary: harnesses that run tasks as child processes send the spec
// in an environment variable and read the outcome from a line of the child's output.

// A spec travels as `node;region,len,access|...;peer,channel,access|...;program,args...`.
pub fn encode_spec(spec: &TaskSpec) -> String {
    let regions: Vec<String> =
        spec.regions.iter().map(|(id, len, a)| format!("{},{},{}", id.0, len, a.bits())).collect();
    let conns: Vec<String> = spec
        .connect
        .iter()
        .map(|(c, a)| format!("{},{},{}", c.peer.0, c.channel, a.bits()))
        .collect();
    let program = match &spec.program {
        Program::Host => "host".to_string(),
        Program::WriteLoop { conn, remote, len } => format!(
            "write,{},{},{},{},{}",
            conn.peer.0, conn.channel, remote.region.0, remote.offset, len
        ),
        Program::CasIncrements { conn, remote, count } => format!(
            "cas,{},{},{},{},{}",
            conn.peer.0, conn.channel, remote.region.0, remote.offset, count
        ),
    };
    format!("{};{};{};{}", spec.node.0, regions.join("|"), conns.join("|"), program)
}

pub fn decode_spec(s: &str) -> TaskSpec {
    let fields: Vec<&str> = s.split(';').collect();
    let nums = |x: &str| -> Vec<u64> { x.split(',').map(|n| n.parse().expect("number")).collect() };
    let list =
        |x: &str| -> Vec<Vec<u64>> { x.split('|').filter(|p| !p.is_empty()).map(nums).collect() };
    let regions = list(fields[1])
        .into_iter()
        .map(|v| (RegionId(v[0] as u16), v[1] as usize, Access::from_bits_truncate(v[2] as u8)))
        .collect();
    let connect = list(fields[2])
        .into_iter()
        .map(|v| {
            (ConnId::new(NodeId(v[0] as u16), v[1] as u8), Access::from_bits_truncate(v[2] as u8))
        })
        .collect();
    let mut p = fields[3].splitn(2, ',');
    let kind = p.next().expect("program");
    let program = if kind == "host" {
        Program::Host
    } else {
        let v = nums(p.next().expect("program arguments"));
        let conn = ConnId::new(NodeId(v[0] as u16), v[1] as u8);
        let remote = RemoteAddr { region: RegionId(v[2] as u16), offset: v[3] };
        match kind {
            "write" => Program::WriteLoop { conn, remote, len: v[4] as u32 },
            "cas" => Program::CasIncrements { conn, remote, count: v[4] },
            _ => panic!("unknown program {kind}"),
        }
    };
    TaskSpec { node: NodeId(fields[0].parse().expect("node")), regions, connect, program }
}

/// Asserts that a spec with two regions, a connection and `program` survives [`encode_spec`]
/// and [`decode_spec`].
pub fn assert_spec_round_trips(program: Program) {
    let spec = TaskSpec {
        node: NodeId(3),
        regions: vec![(RegionId(0), 4096, Access::ALL), (RegionId(2), 8, Access::READ)],
        connect: vec![(ConnId::new(NodeId(0), 1), Access::READ_WRITE)],
        program,
    };
    assert_eq!(decode_spec(&encode_spec(&spec)), spec);
}

/// What a child prints (after its marker) when its program ends:
/// `OUTCOME <ops_ok> <status>`, the status as `Status` displays it or `none`.
pub fn format_outcome(outcome: &TaskOutcome) -> String {
    let status = outcome.last_status.map_or("none".to_string(), |s| s.to_string());
    format!("OUTCOME {} {status}", outcome.ops_ok)
}

/// Reads a [`format_outcome`] line; `None` if a field is missing or `ops_ok` is not a number.
/// Panics if the line is not an outcome or names no status.
pub fn parse_outcome(line: &str) -> Option<TaskOutcome> {
    let mut parts = line.split_whitespace();
    assert_eq!(parts.next(), Some("OUTCOME"), "child said {line:?}");
    let ops_ok = parts.next()?.parse().ok()?;
    let last_status = match parts.next()? {
        "none" => None,
        s => Some(s.parse::<Status>().unwrap_or_else(|e| panic!("child said {line:?}: {e}"))),
    };
    Some(TaskOutcome { ops_ok, last_status })
}

/// What follows `marker` in a line of a child's stdout, if it holds the marker. libtest may have
/// printed "test child_main ... " before the child's first line, on the same line, so the
/// marker may be anywhere in a line.
pub fn marked<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|at| line[at + marker.len()..].trim_end())
}

/// The next line of `stdout` that holds `marker`, what follows the marker; `None` once stdout
/// closed (the child died) first.
pub fn read_marked(stdout: &mut impl BufRead, marker: &str) -> Option<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if stdout.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if let Some(said) = marked(&line, marker) {
            return Some(said.to_string());
        }
    }
}

/// What a task's process prints before each line meant for its harness.
pub const CHILD_MARKER: &str = "MU-CHILD ";

/// A task's process, once its node is open: registers and connects as `spec` says, prints
/// `MU-CHILD READY`, waits for a `START` line on stdin, runs the program and prints
/// `MU-CHILD OUTCOME ...` ([`format_outcome`]). With `yield_between_steps` it yields its CPU
/// between steps, for backends whose own threads carry the operations (a task that spins
/// without yielding starves them on a machine with few cores).
pub fn run_child<F: Fabric>(fabric: F, spec: &TaskSpec, yield_between_steps: bool) {
    let mut runner = ProgramRunner::new(fabric, spec).expect("child setup");
    println!("{CHILD_MARKER}READY");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("wait for START");
    assert_eq!(line.trim(), "START");
    loop {
        if let Some(outcome) = runner.step() {
            println!("{CHILD_MARKER}{}", format_outcome(&outcome));
            return;
        }
        if spec.program == Program::Host {
            std::thread::sleep(Duration::from_millis(1));
        } else if yield_between_steps {
            std::thread::yield_now();
        }
    }
}

/// Runs a [`Program`] one non-blocking step at a time, so that real backends can loop on it and
/// the simulator can interleave it with its events.
pub struct ProgramRunner<F: Fabric> {
    fabric: F,
    endpoint: F::Endpoint,
    source: Option<F::Region>,
    program: Program,
    outstanding: bool,
    iteration: u64,
    ops_ok: u64,
    cas_expected: u64,
    fill: Vec<u8>,
}

impl<F: Fabric> ProgramRunner<F> {
    /// Registers the spec's regions and brings up its connections.
    pub fn new(fabric: F, spec: &TaskSpec) -> Result<Self, FabricError> {
        let mut source = None;
        for &(id, len, access) in &spec.regions {
            let region = fabric.register_region(id, len, access)?;
            if id == RegionId(0) {
                source = Some(region);
            }
        }
        let mut endpoint = fabric.endpoint(64)?;
        for &(conn, access) in &spec.connect {
            fabric.connect(conn, access)?;
            endpoint.attach(conn)?;
        }
        let fill = match spec.program {
            Program::WriteLoop { len, .. } => vec![0; len as usize],
            _ => Vec::new(),
        };
        Ok(ProgramRunner {
            fabric,
            endpoint,
            source,
            program: spec.program.clone(),
            outstanding: false,
            iteration: 0,
            ops_ok: 0,
            cas_expected: 0,
            fill,
        })
    }

    /// The fabric of the task's node.
    pub fn fabric(&self) -> &F {
        &self.fabric
    }

    /// Makes what progress it can without blocking; returns the outcome once the program ends.
    pub fn step(&mut self) -> Option<TaskOutcome> {
        let program = self.program.clone();
        match program {
            Program::Host => None,
            Program::WriteLoop { conn, remote, len } => {
                if !self.outstanding {
                    self.iteration += 1;
                    let byte = (self.iteration % 255) as u8 + 1;
                    self.fill.fill(byte);
                    let source = self.source.as_ref().expect("write loop needs region 0");
                    source.write(0, &self.fill).expect("fill source");
                    let slice = LocalSlice { region: RegionId(0), offset: 0, len };
                    let wr = WorkRequest::write(self.iteration, Source::Local(slice), remote);
                    match self.endpoint.post(conn, &wr) {
                        Ok(()) => self.outstanding = true,
                        Err(_) => return Some(self.outcome(Some(Status::Flushed))),
                    }
                }
                self.poll_one().and_then(|c| {
                    self.outstanding = false;
                    if c.status.is_success() {
                        self.ops_ok += 1;
                        None
                    } else {
                        Some(self.outcome(Some(c.status)))
                    }
                })
            }
            Program::CasIncrements { conn, remote, count } => {
                if self.ops_ok == count {
                    return Some(self.outcome(None));
                }
                if !self.outstanding {
                    let wr = WorkRequest::compare_swap(
                        self.ops_ok,
                        remote,
                        self.cas_expected,
                        self.cas_expected + 1,
                    );
                    if self.endpoint.post(conn, &wr).is_err() {
                        return Some(self.outcome(Some(Status::Flushed)));
                    }
                    self.outstanding = true;
                }
                let c = self.poll_one()?;
                self.outstanding = false;
                if !c.status.is_success() {
                    return Some(self.outcome(Some(c.status)));
                }
                if c.value == self.cas_expected {
                    self.ops_ok += 1;
                    self.cas_expected += 1;
                } else {
                    // Someone else won: retry from the value we saw.
                    self.cas_expected = c.value;
                }
                (self.ops_ok == count).then(|| self.outcome(None))
            }
        }
    }

    fn poll_one(&mut self) -> Option<Completion> {
        let mut out = [Completion::EMPTY; 1];
        (self.endpoint.poll(&mut out) == 1).then_some(out[0])
    }

    fn outcome(&self, last_status: Option<Status>) -> TaskOutcome {
        TaskOutcome { ops_ok: self.ops_ok, last_status }
    }
}

/// Region ids and sizes the tests use.
pub const DATA: RegionId = RegionId(0);
pub const DATA_BYTES: usize = 1 << 20;
/// The channel the tests connect on.
pub const CHANNEL: u8 = 0;

/// How long a test waits for a completion before failing.
const WAIT: Duration = Duration::from_secs(20);

fn conn(peer: NodeId) -> ConnId {
    ConnId::new(peer, CHANNEL)
}

/// Two in-process nodes `a` and `b` with a data region each, connected both ways with `access`
/// granted by each side. Returns their fabrics, regions, and an endpoint on `a`.
pub struct Pair<F: Fabric> {
    pub a: F,
    pub b: F,
    pub a_region: F::Region,
    pub b_region: F::Region,
    pub ep: F::Endpoint,
}

pub fn pair<H: Harness>(
    h: &mut H,
    a: NodeId,
    b: NodeId,
    region_access: Access,
    granted: Access,
) -> Pair<H::F> {
    let fa = h.fabric(a);
    let fb = h.fabric(b);
    let a_region = fa.register_region(DATA, DATA_BYTES, region_access).expect("register a");
    let b_region = fb.register_region(DATA, DATA_BYTES, region_access).expect("register b");
    fa.connect(conn(b), granted).expect("connect a->b");
    fb.connect(conn(a), granted).expect("connect b->a");
    let mut ep = fa.endpoint(256).expect("endpoint");
    ep.attach(conn(b)).expect("attach");
    Pair { a: fa, b: fb, a_region, b_region, ep }
}

/// Posts `wr` and waits for its completion.
pub fn run_one<H: Harness>(
    h: &mut H,
    ep: &mut <H::F as Fabric>::Endpoint,
    c: ConnId,
    wr: &WorkRequest<'_>,
) -> Completion {
    ep.post(c, wr).expect("post");
    wait_completion(h, ep)
}

/// Waits for the next completion on `ep`, letting the harness's time pass in between.
pub fn wait_completion<H: Harness>(h: &mut H, ep: &mut <H::F as Fabric>::Endpoint) -> Completion {
    wait_completion_with(ep, || h.tick())
}

/// Waits for the next completion on `ep`, calling `idle` between polls; fails the test after
/// 20 seconds.
pub fn wait_completion_with<E: Endpoint>(ep: &mut E, mut idle: impl FnMut()) -> Completion {
    let mut out = [Completion::EMPTY; 1];
    let start = Instant::now();
    loop {
        if ep.poll(&mut out) == 1 {
            return out[0];
        }
        assert!(start.elapsed() < WAIT, "no completion within {WAIT:?}");
        idle();
    }
}

fn remote(offset: u64) -> RemoteAddr {
    RemoteAddr { region: DATA, offset }
}

fn local(offset: u64, len: u32) -> LocalSlice {
    LocalSlice { region: DATA, offset, len }
}

fn read_back<R: LocalRegion>(region: &R, offset: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    region.read(offset, &mut out).expect("local read");
    out
}

// ---------------------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------------------

/// Writes (inline and from a local region), reads and compare-and-swap do what they say, and a
/// write's completion means its bytes are already in the remote region.
pub fn one_sided_operations<H: Harness>(h: &mut H) {
    let (a, b) = (NodeId(0), NodeId(1));
    let mut p = pair(h, a, b, Access::ALL, Access::ALL);

    let c = run_one(
        h,
        &mut p.ep,
        conn(b),
        &WorkRequest::write(1, Source::Inline(b"hello"), remote(100)),
    );
    assert_eq!((c.wr_id, c.kind, c.status), (1, OpKind::Write, Status::Success));
    assert_eq!(read_back(&p.b_region, 100, 5), b"hello", "completion means the bytes are there");

    let payload: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    p.a_region.write(8192, &payload).unwrap();
    let c = run_one(
        h,
        &mut p.ep,
        conn(b),
        &WorkRequest::write(2, Source::Local(local(8192, 4096)), remote(4096)),
    );
    assert_eq!(c.status, Status::Success);
    assert_eq!(read_back(&p.b_region, 4096, 4096), payload);

    p.b_region.write(300, b"remote bytes").unwrap();
    let c = run_one(h, &mut p.ep, conn(b), &WorkRequest::read(3, local(0, 12), remote(300)));
    assert_eq!((c.kind, c.status), (OpKind::Read, Status::Success));
    assert_eq!(read_back(&p.a_region, 0, 12), b"remote bytes");

    p.b_region.store_u64(512, 41).unwrap();
    let c = run_one(h, &mut p.ep, conn(b), &WorkRequest::compare_swap(4, remote(512), 41, 42));
    assert_eq!((c.kind, c.status, c.value), (OpKind::CompareSwap, Status::Success, 41));
    assert_eq!(p.b_region.load_u64(512).unwrap(), 42);
    let c = run_one(h, &mut p.ep, conn(b), &WorkRequest::compare_swap(5, remote(512), 41, 99));
    assert_eq!(
        (c.status, c.value),
        (Status::Success, 42),
        "a failed compare returns the current value"
    );
    assert_eq!(p.b_region.load_u64(512).unwrap(), 42, "a failed compare changes nothing");

    // The target's own compare-and-swap on the word sees the peers' and the peers see its.
    assert_eq!(p.b_region.compare_swap_u64(512, 42, 43).unwrap(), 42);
    assert_eq!(p.b_region.compare_swap_u64(512, 42, 77).unwrap(), 43, "fails, changes nothing");
    let c = run_one(h, &mut p.ep, conn(b), &WorkRequest::compare_swap(6, remote(512), 43, 44));
    assert_eq!((c.status, c.value), (Status::Success, 43));
    assert_eq!(p.b_region.compare_swap_u64(512, 44, 45).unwrap(), 44);
    assert_eq!(p.b_region.load_u64(512).unwrap(), 45);
    assert!(p.b_region.compare_swap_u64(513, 0, 1).is_err(), "misaligned");
}

/// A successful unsignaled request produces no completion; a failed one always does.
pub fn unsignaled_requests<H: Harness>(h: &mut H) {
    let (a, b) = (NodeId(0), NodeId(1));
    let mut p = pair(h, a, b, Access::ALL, Access::ALL);
    p.ep.post(conn(b), &WorkRequest::write(1, Source::Inline(b"quiet"), remote(0)).unsignaled())
        .unwrap();
    let c =
        run_one(h, &mut p.ep, conn(b), &WorkRequest::write(2, Source::Inline(b"loud"), remote(8)));
    assert_eq!(c.wr_id, 2, "the unsignaled write must not complete visibly");
    assert_eq!(read_back(&p.b_region, 0, 5), b"quiet");

    let bad = WorkRequest::write(3, Source::Inline(b"x"), remote(DATA_BYTES as u64)).unsignaled();
    let c = run_one(h, &mut p.ep, conn(b), &bad);
    assert_eq!((c.wr_id, c.status), (3, Status::RemoteOutOfBounds), "failures are always reported");
}

/// Inline writes are limited to the backend's maximum; a larger one is refused at post time.
pub fn inline_limit<H: Harness>(h: &mut H) {
    let (a, b) = (NodeId(0), NodeId(1));
    let mut p = pair(h, a, b, Access::ALL, Access::ALL);
    let max = p.a.max_inline_bytes();
    assert!(max >= 64, "inline limit {max} is too small to be useful");
    let big = vec![7u8; max + 1];
    let err =
        p.ep.post(conn(b), &WorkRequest::write(1, Source::Inline(&big), remote(0))).unwrap_err();
    assert_eq!(err, PostError::InlineTooLarge { len: max + 1, max });
    let c = run_one(
        h,
        &mut p.ep,
        conn(b),
        &WorkRequest::write(2, Source::Inline(&big[..max]), remote(0)),
    );
    assert_eq!(c.status, Status::Success);
}

/// Every remote address is checked against its region: out of bounds (including offsets that
/// overflow) is an error completion and never a stray write, and the connection moves to the
/// error state, flushing what is posted after.
pub fn out_of_bounds_is_denied<H: Harness>(h: &mut H) {
    let (a, b) = (NodeId(0), NodeId(1));
    let mut p = pair(h, a, b, Access::ALL, Access::ALL);
    let end = DATA_BYTES as u64;
    let c = run_one(
        h,
        &mut p.ep,
        conn(b),
        &WorkRequest::write(1, Source::Inline(&[9; 16]), remote(end - 8)),
    );
    assert_eq!(c.status, Status::RemoteOutOfBounds);
    assert_eq!(read_back(&p.b_region, DATA_BYTES - 8, 8), [0; 8], "no partial write at the edge");
    assert_eq!(p.a.qp_state(conn(b)).unwrap(), QpState::Error);
    let c = run_one(h, &mut p.ep, conn(b), &WorkRequest::write(2, Source::Inline(b"x"), remote(0)));
    assert_eq!(c.status, Status::Flushed, "a connection in error flushes");
    assert_eq!(read_back(&p.b_region, 0, 1), [0]);

    // Cycling the connection makes it usable again; overflowing offsets are caught too.
    p.a.connect(conn(b), Access::ALL).unwrap();
    for (id, wr) in [
        (3, WorkRequest::write(3, Source::Inline(b"x"), remote(u64::MAX))),
        (4, WorkRequest::read(4, local(0, 16), remote(u64::MAX - 8))),
        (5, WorkRequest::compare_swap(5, remote(end), 0, 1)),
    ] {
        let c = run_one(h, &mut p.ep, conn(b), &wr);
        assert_eq!((c.wr_id, c.status), (id, Status::RemoteOutOfBounds));
        p.a.connect(conn(b), Access::ALL).unwrap();
    }
    let unknown = RemoteAddr { region: RegionId(77), offset: 0 };
    let c = run_one(h, &mut p.ep, conn(b), &WorkRequest::write(6, Source::Inline(b"x"), unknown));
    assert_eq!(c.status, Status::RemoteOutOfBounds, "an unknown region has no valid address");
    p.a.connect(conn(b), Access::ALL).unwrap();

    // A bad local slice is the initiator's own protection error.
    let c = run_one(h, &mut p.ep, conn(b), &WorkRequest::read(7, local(end - 4, 8), remote(0)));
    assert_eq!(c.status, Status::LocalProtection);
    p.a.connect(conn(b), Access::ALL).unwrap();

    // Compare-and-swap needs an 8-byte-aligned address.
    let c = run_one(h, &mut p.ep, conn(b), &WorkRequest::compare_swap(8, remote(4), 0, 1));
    assert_eq!(c.status, Status::RemoteInvalidRequest);
    assert_eq!(read_back(&p.b_region, 0, 16), [0; 16]);
}

/// A peer granted read only cannot write: its write is denied, and its connection moves to the
/// error state, as an RDMA RC queue pair does on a remote access error.
pub fn read_only_peer_is_denied<H: Harness>(h: &mut H) {
    let (a, b) = (NodeId(0), NodeId(1));
    let mut p = pair(h, a, b, Access::ALL, Access::READ);
    let c = run_one(h, &mut p.ep, conn(b), &WorkRequest::read(1, local(0, 8), remote(0)));
    assert_eq!(c.status, Status::Success, "reads are allowed");
    let c =
        run_one(h, &mut p.ep, conn(b), &WorkRequest::write(2, Source::Inline(b"no"), remote(0)));
    assert_eq!(c.status, Status::RemoteAccessDenied);
    assert_eq!(read_back(&p.b_region, 0, 2), [0, 0]);
    assert_eq!(p.a.qp_state(conn(b)).unwrap(), QpState::Error);
    let c = run_one(h, &mut p.ep, conn(b), &WorkRequest::read(3, local(0, 8), remote(0)));
    assert_eq!(c.status, Status::Flushed);

    p.a.connect(conn(b), Access::ALL).unwrap();
    let c = run_one(h, &mut p.ep, conn(b), &WorkRequest::compare_swap(4, remote(0), 0, 1));
    assert_eq!(c.status, Status::RemoteAccessDenied, "atomic needs its own flag");
    assert_eq!(p.b_region.load_u64(0).unwrap(), 0);
}

/// A region's registered access caps what any connection may grant.
pub fn region_access_caps_connection<H: Harness>(h: &mut H) {
    let (a, b) = (NodeId(0), NodeId(1));
    let mut p = pair(h, a, b, Access::READ, Access::ALL);
    let c =
        run_one(h, &mut p.ep, conn(b), &WorkRequest::write(1, Source::Inline(b"no"), remote(0)));
    assert_eq!(c.status, Status::RemoteAccessDenied);
    assert_eq!(read_back(&p.b_region, 0, 2), [0, 0]);
}

/// A region's scope keeps the connections it leaves out away from it, whatever their flags:
/// their writes, reads and compare-and-swaps are denied and touch nothing, while the scoped-in
/// connection goes on; a revoked connection scoped out stays out once reconnected.
pub fn region_scope_keeps_other_connections_out<H: Harness>(h: &mut H) {
    // The target is the highest node: some backends let only the lower node of a pair open
    // its stream, and all three nodes share this process.
    let (a, c, b) = (NodeId(0), NodeId(1), NodeId(2));
    let mut p = pair(h, a, b, Access::ALL, Access::ALL);
    let fc = h.fabric(c);
    fc.register_region(DATA, DATA_BYTES, Access::ALL).expect("register c");
    p.b.connect(conn(c), Access::ALL).expect("connect b->c");
    let mut ep_c = fc.endpoint(64).expect("endpoint c");
    ep_c.attach(conn(b)).expect("attach c");
    // Both initiators (re)bind after each change of scope: on verbs that is when they read keys.
    let rebind = |p: &Pair<H::F>| {
        p.a.connect(conn(b), Access::ALL).expect("reconnect a->b");
        fc.connect(conn(b), Access::ALL).expect("reconnect c->b");
    };
    let write = |id, at| WorkRequest::write(id, Source::Inline(&[0xab; 8]), remote(at));
    rebind(&p);
    let ok = run_one(h, &mut p.ep, conn(b), &write(1, 0));
    assert_eq!(ok.status, Status::Success, "every connection reaches a region at first");
    assert_eq!(run_one(h, &mut ep_c, conn(b), &write(2, 8)).status, Status::Success);

    p.b.scope_region(DATA, RegionScope::Only(conn(a))).expect("scope to a");
    rebind(&p);
    assert_eq!(run_one(h, &mut p.ep, conn(b), &write(3, 16)).status, Status::Success);
    let denied = run_one(h, &mut ep_c, conn(b), &write(4, 24));
    assert_eq!(denied.status, Status::RemoteAccessDenied, "c is outside the scope");
    assert_eq!(read_back(&p.b_region, 24, 8), [0; 8], "nothing of c's write landed");
    assert_eq!(fc.qp_state(conn(b)).unwrap(), QpState::Error);
    for wr in [
        WorkRequest::read(5, local(0, 8), remote(0)),
        WorkRequest::compare_swap(6, remote(32), 0, 7),
    ] {
        fc.connect(conn(b), Access::ALL).unwrap();
        let c = run_one(h, &mut ep_c, conn(b), &wr);
        assert_eq!(c.status, Status::RemoteAccessDenied, "{:?} of c", wr.op);
    }
    assert_eq!(p.b_region.load_u64(32).unwrap(), 0);

    // Hand the region from a to c the way the request rings hand a ring to the next client:
    // a's side is revoked (a barrier) first, then the scope moves.
    p.b.modify_qp(conn(a), QpState::Reset, Access::NONE).expect("revoke a");
    p.b.scope_region(DATA, RegionScope::Only(conn(c))).expect("scope to c");
    p.b.connect(conn(a), Access::ALL).expect("a may connect again");
    rebind(&p);
    let denied = run_one(h, &mut p.ep, conn(b), &write(7, 40));
    assert_eq!(denied.status, Status::RemoteAccessDenied, "a is outside the scope now");
    assert_eq!(read_back(&p.b_region, 40, 8), [0; 8]);
    assert_eq!(run_one(h, &mut ep_c, conn(b), &write(8, 48)).status, Status::Success);
    assert_eq!(read_back(&p.b_region, 48, 8), [0xab; 8]);

    p.b.scope_region(DATA, RegionScope::Nobody).expect("scope to nobody");
    rebind(&p);
    assert_eq!(run_one(h, &mut p.ep, conn(b), &write(9, 56)).status, Status::RemoteAccessDenied);
    assert_eq!(run_one(h, &mut ep_c, conn(b), &write(10, 56)).status, Status::RemoteAccessDenied);
    p.b_region.write(56, b"local").expect("the owner still writes its own region");

    p.b.scope_region(DATA, RegionScope::Every).expect("scope to every connection");
    rebind(&p);
    assert_eq!(run_one(h, &mut p.ep, conn(b), &write(11, 64)).status, Status::Success);
    assert_eq!(run_one(h, &mut ep_c, conn(b), &write(12, 72)).status, Status::Success);
    assert_eq!(read_back(&p.b_region, 64, 16), [0xab; 16]);

    let err = p.b.scope_region(RegionId(77), RegionScope::Every).unwrap_err();
    assert!(matches!(err, FabricError::UnknownRegion(RegionId(77))), "{err}");
}

/// Doorbells, on a backend that has them (not in [`conformance_tests!`]'s list: a backend
/// without them keeps the trait's defaults, which sleep): a node's own ring and a peer's raise
/// its count, a waiter in another thread is woken by a peer's ring long before its timeout,
/// and a wait nobody rings returns the count it was given.
pub fn doorbell_wakes_a_waiter<H: Harness>(h: &mut H) {
    let (a, b) = (NodeId(0), NodeId(1));
    let p = pair(h, a, b, Access::ALL, Access::ALL);
    let seen = p.b.doorbell();
    p.b.ring_doorbell(b);
    assert_ne!(p.b.wait_doorbell(seen, 0), seen, "a node's own ring is counted");

    let seen = p.b.doorbell();
    let fb = p.b.clone();
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        (fb.wait_doorbell(seen, 10_000_000_000), started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(50));
    p.a.ring_doorbell(b);
    let (count, waited) = waiter.join().expect("the waiter");
    assert_ne!(count, seen, "the peer's ring raised the count");
    assert!(waited < Duration::from_secs(5), "woken after {waited:?}, not at the ring");

    let seen = p.b.doorbell();
    assert_eq!(p.b.wait_doorbell(seen, 20_000_000), seen, "nobody rang");
}

/// Connections follow the RDMA RC state machine: illegal transitions are refused, posting needs
/// ready-to-send, and a side that is not ready to receive accepts nothing.
pub fn connection_state_machine<H: Harness>(h: &mut H) {
    let (a, b) = (NodeId(0), NodeId(1));
    let fa = h.fabric(a);
    let fb = h.fabric(b);
    fa.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    let b_region = fb.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    assert_eq!(fa.qp_state(conn(b)).unwrap(), QpState::Reset);
    let err = fa.modify_qp(conn(b), QpState::ReadyToSend, Access::ALL).unwrap_err();
    assert!(matches!(err, FabricError::InvalidTransition { .. }), "{err}");

    let mut ep = fa.endpoint(16).unwrap();
    ep.attach(conn(b)).unwrap();
    ep.attach(conn(b)).expect("attaching again to the same endpoint does nothing");
    let wr = WorkRequest::write(1, Source::Inline(b"x"), remote(0));
    assert!(matches!(ep.post(conn(b), &wr), Err(PostError::NotReadyToSend { .. })));
    fa.modify_qp(conn(b), QpState::Init, Access::ALL).unwrap();
    fa.modify_qp(conn(b), QpState::ReadyToReceive, Access::ALL).unwrap();
    assert!(matches!(ep.post(conn(b), &wr), Err(PostError::NotReadyToSend { .. })));
    fa.modify_qp(conn(b), QpState::ReadyToSend, Access::ALL).unwrap();

    // b's side is still in reset: it accepts nothing.
    let c = run_one(h, &mut ep, conn(b), &wr);
    assert!(matches!(c.status, Status::RemoteAccessDenied | Status::PeerUnreachable), "{c:?}");
    assert_eq!(read_back(&b_region, 0, 1), [0]);

    fb.connect(conn(a), Access::ALL).unwrap();
    fa.connect(conn(b), Access::ALL).unwrap();
    let c = run_one(h, &mut ep, conn(b), &wr);
    assert_eq!(c.status, Status::Success);
    let other = fa.endpoint(16).unwrap();
    let mut other = other;
    assert!(matches!(other.attach(conn(b)), Err(FabricError::AlreadyAttached { .. })));
    drop(ep);
    other.attach(conn(b)).expect("a dropped endpoint releases its connections");
}

/// Connecting to a node that does not exist fails with a clear error.
pub fn missing_peer_is_an_error<H: Harness>(h: &mut H) {
    let fa = h.fabric(NodeId(0));
    fa.modify_qp(conn(NodeId(9)), QpState::Init, Access::ALL).unwrap();
    let err = fa.modify_qp(conn(NodeId(9)), QpState::ReadyToReceive, Access::ALL).unwrap_err();
    assert!(matches!(err, FabricError::PeerUnreachable(NodeId(9), _)), "{err}");
}

/// The fast path changes flags in place; the slow path cycles the connection; both take effect
/// for the very next operation, and the slow path leaves the connection ready to send.
pub fn permission_changes<H: Harness>(h: &mut H) {
    let (a, b) = (NodeId(0), NodeId(1));
    let mut p = pair(h, a, b, Access::ALL, Access::READ);
    let write = |id, byte: &'static [u8]| WorkRequest::write(id, Source::Inline(byte), remote(0));

    p.b.set_access_fast(conn(a), Access::READ_WRITE).expect("granting never waits");
    assert_eq!(p.b.qp_access(conn(a)).unwrap(), Access::READ_WRITE);
    assert_eq!(run_one(h, &mut p.ep, conn(b), &write(1, b"1")).status, Status::Success);

    p.b.set_access_fast(conn(a), Access::READ).expect("nothing in flight");
    assert_eq!(run_one(h, &mut p.ep, conn(b), &write(2, b"2")).status, Status::RemoteAccessDenied);
    assert_eq!(read_back(&p.b_region, 0, 1), b"1");

    p.a.connect(conn(b), Access::ALL).unwrap();
    p.b.set_access_slow(conn(a), Access::READ_WRITE).unwrap();
    assert_eq!(p.b.qp_state(conn(a)).unwrap(), QpState::ReadyToSend);
    assert_eq!(run_one(h, &mut p.ep, conn(b), &write(3, b"3")).status, Status::Success);
    p.b.set_access_slow(conn(a), Access::READ).unwrap();
    assert_eq!(run_one(h, &mut p.ep, conn(b), &write(4, b"4")).status, Status::RemoteAccessDenied);
    assert_eq!(read_back(&p.b_region, 0, 1), b"3");
}

/// Reliable connections are FIFO: a write followed by a compare-and-swap on the same connection
/// never has the swap visible before the write's bytes (Velos and uKharon rely on this).
pub fn fifo_write_then_cas<H: Harness>(h: &mut H) {
    let (a, b) = (NodeId(0), NodeId(1));
    let mut p = pair(h, a, b, Access::ALL, Access::ALL);
    const FLAG: u64 = 0;
    const BODY: u64 = 4096;
    const BODY_BYTES: u32 = 16 * 1024;
    for round in 1..=50u64 {
        let byte = (round % 251) as u8 + 1;
        p.a_region.write(0, &vec![byte; BODY_BYTES as usize]).unwrap();
        let w = WorkRequest::write(round * 2, Source::Local(local(0, BODY_BYTES)), remote(BODY))
            .unsignaled();
        p.ep.post(conn(b), &w).unwrap();
        let cas = WorkRequest::compare_swap(round * 2 + 1, remote(FLAG), round - 1, round);
        p.ep.post(conn(b), &cas).unwrap();
        let mut out = [Completion::EMPTY; 1];
        let start = Instant::now();
        loop {
            if p.b_region.load_u64(FLAG as usize).unwrap() == round {
                let body = read_back(&p.b_region, BODY as usize, BODY_BYTES as usize);
                assert!(
                    body.iter().all(|&x| x == byte),
                    "round {round}: swap visible before the write"
                );
            }
            if p.ep.poll(&mut out) == 1 {
                assert_eq!(
                    (out[0].wr_id, out[0].status, out[0].value),
                    (round * 2 + 1, Status::Success, round - 1)
                );
                break;
            }
            assert!(start.elapsed() < WAIT);
            h.tick();
        }
    }
}

/// Starts node `t` hosting a `DATA` region, connected both ways with `fa` (node 0) with full
/// access.
fn start_host<H: Harness>(h: &mut H, fa: &H::F, t: NodeId) -> H::Task {
    let task = h.spawn(TaskSpec {
        node: t,
        regions: vec![(DATA, DATA_BYTES, Access::ALL)],
        connect: vec![(conn(fa.node()), Access::ALL)],
        program: Program::Host,
    });
    fa.connect(conn(t), Access::ALL).unwrap();
    h.start(&task);
    task
}

/// A write into a crashed target completes with an error: a dead peer cannot acknowledge.
pub fn dead_target_cannot_ack<H: Harness>(h: &mut H) {
    let (a, t) = (NodeId(0), NodeId(2));
    let fa = h.fabric(a);
    fa.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    let task = start_host(h, &fa, t);
    let mut ep = fa.endpoint(16).unwrap();
    ep.attach(conn(t)).unwrap();
    let wr = |id| WorkRequest::write(id, Source::Inline(b"alive?"), remote(0));
    assert_eq!(run_one(h, &mut ep, conn(t), &wr(1)).status, Status::Success);
    h.crash(t);
    let c = run_one(h, &mut ep, conn(t), &wr(2));
    assert_eq!(c.status, Status::PeerUnreachable, "a write to a dead target must not succeed");
    assert_eq!(fa.qp_state(conn(t)).unwrap(), QpState::Error);
    assert_eq!(run_one(h, &mut ep, conn(t), &wr(3)).status, Status::Flushed);
    let cas = WorkRequest::compare_swap(4, remote(0), 0, 1);
    fa.connect(conn(t), Access::ALL).ok();
    if fa.qp_state(conn(t)).unwrap() == QpState::ReadyToSend {
        assert_eq!(run_one(h, &mut ep, conn(t), &cas).status, Status::PeerUnreachable);
    }
    assert_eq!(h.join(task), None, "a crashed task reports nothing");
}

/// A crash is notified without a timeout: never for a live peer, and soon after it dies. (A
/// backend that cannot tell says `false` for ever: it fails here, and must say so in its docs
/// and keep timeouts.)
pub fn crash_is_notified<H: Harness>(h: &mut H) {
    let (a, t) = (NodeId(0), NodeId(2));
    let fa = h.fabric(a);
    fa.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    assert!(!fa.crash_notified(t), "a peer never reached is not known to have crashed");
    let task = start_host(h, &fa, t);
    for _ in 0..10 {
        h.tick();
        assert!(!fa.crash_notified(t), "a live peer is never notified as crashed");
    }
    h.crash(t);
    let start = Instant::now();
    while !fa.crash_notified(t) {
        assert!(start.elapsed() < WAIT, "no crash notification");
        h.tick();
    }
    assert_eq!(h.join(task), None);
}

/// A peer's crash wakes a thread waiting on the node's doorbell (on a backend whose crash
/// notices wake; not in [`conformance_tests!`]'s list): a waiter with a long timeout returns
/// soon after the peer dies, and the crash is notified by then.
pub fn crash_rings_the_doorbell<H: Harness>(h: &mut H) {
    let (a, t) = (NodeId(0), NodeId(2));
    let fa = h.fabric(a);
    fa.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    let task = start_host(h, &fa, t);
    let seen = fa.doorbell();
    let waiter = {
        let fa = fa.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let count = fa.wait_doorbell(seen, 20_000_000_000);
            (count, started.elapsed(), fa.crash_notified(t))
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    h.crash(t);
    let (count, waited, notified) = waiter.join().expect("the waiter");
    assert_ne!(count, seen, "the crash rang the doorbell");
    assert!(waited < Duration::from_secs(5), "woken after {waited:?}, not at the crash");
    assert!(notified, "woken by the crash, which is notified by then");
    assert_eq!(h.join(task), None);
}

/// Revocation is a barrier: a writer stopped in the middle of a copy while the target revokes its
/// write access lands nothing after the revoke returns, even once it is let go.
pub fn revoke_is_a_barrier_for_a_stopped_writer<H: Harness>(h: &mut H) {
    let (t, w) = (NodeId(0), NodeId(2));
    let ft = h.fabric(t);
    let region = ft.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    let len = DATA_BYTES as u32;
    let task = h.spawn(TaskSpec {
        node: w,
        regions: vec![(DATA, DATA_BYTES, Access::ALL)],
        connect: vec![(conn(t), Access::NONE)],
        program: Program::WriteLoop { conn: conn(t), remote: remote(0), len },
    });
    ft.connect(conn(w), Access::READ_WRITE).unwrap();
    h.start(&task);
    h.hold_mid_write(&task);

    match ft.set_access_fast(conn(w), Access::READ) {
        Ok(()) => {}
        Err(PermError::Busy(_)) => ft.set_access_slow(conn(w), Access::READ).expect("slow path"),
        Err(e) => panic!("revoke failed: {e}"),
    }
    let after_revoke = read_back(&region, 0, DATA_BYTES);
    h.release(&task);
    let deadline = Instant::now() + Duration::from_millis(200);
    while Instant::now() < deadline {
        h.tick();
    }
    h.settle();
    assert!(
        read_back(&region, 0, DATA_BYTES) == after_revoke,
        "bytes landed after the revoke returned"
    );
    if let Some(outcome) = h.join(task) {
        assert!(outcome.last_status.is_some_and(|s| !s.is_success()), "{outcome:?}");
    }
}

/// Revocation is a barrier under load: a writer writing as fast as it can gets nothing in after
/// the revoke returns, and its next write fails.
pub fn revoke_is_a_barrier_under_load<H: Harness>(h: &mut H) {
    let (t, w) = (NodeId(0), NodeId(3));
    let ft = h.fabric(t);
    let region = ft.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    let task = h.spawn(TaskSpec {
        node: w,
        regions: vec![(DATA, DATA_BYTES, Access::ALL)],
        connect: vec![(conn(t), Access::NONE)],
        program: Program::WriteLoop { conn: conn(t), remote: remote(64), len: 4096 },
    });
    ft.connect(conn(w), Access::READ_WRITE).unwrap();
    h.start(&task);
    // Wait until the writer is visibly writing.
    let start = Instant::now();
    while read_back(&region, 64, 1)[0] == 0 {
        assert!(start.elapsed() < WAIT, "writer never wrote");
        h.tick();
    }
    for _ in 0..100 {
        h.tick();
    }
    match ft.set_access_fast(conn(w), Access::READ) {
        Ok(()) => {}
        Err(PermError::Busy(_)) => ft.set_access_slow(conn(w), Access::READ).expect("slow path"),
        Err(e) => panic!("revoke failed: {e}"),
    }
    let after_revoke = read_back(&region, 0, 8192);
    let outcome = h.join(task);
    h.settle();
    assert!(read_back(&region, 0, 8192) == after_revoke, "bytes landed after the revoke returned");
    if let Some(outcome) = outcome {
        assert!(outcome.ops_ok > 0);
        assert!(
            matches!(
                outcome.last_status,
                Some(Status::RemoteAccessDenied | Status::PeerUnreachable | Status::Flushed)
            ),
            "{outcome:?}"
        );
    }
}

/// Compare-and-swap is atomic under contention from several nodes: no increment is lost.
pub fn cas_is_atomic_under_contention<H: Harness>(h: &mut H) {
    let t = NodeId(0);
    let ft = h.fabric(t);
    let region = ft.register_region(DATA, DATA_BYTES, Access::ALL).unwrap();
    const WORD: u64 = 128;
    const EACH: u64 = 2000;
    let nodes = [NodeId(4), NodeId(5), NodeId(6)];
    let mut tasks = Vec::new();
    for &n in &nodes {
        tasks.push(h.spawn(TaskSpec {
            node: n,
            regions: vec![(DATA, 4096, Access::ALL)],
            connect: vec![(conn(t), Access::NONE)],
            program: Program::CasIncrements { conn: conn(t), remote: remote(WORD), count: EACH },
        }));
        ft.connect(conn(n), Access::ALL).unwrap();
    }
    for task in &tasks {
        h.start(task);
    }
    for task in tasks {
        let outcome = h.join(task).expect("contender died");
        assert_eq!(outcome, TaskOutcome { ops_ok: EACH, last_status: None });
    }
    assert_eq!(
        region.load_u64(WORD as usize).unwrap(),
        EACH * nodes.len() as u64,
        "an increment was lost"
    );
}

/// Instantiates every conformance test for a harness: `conformance_tests!(MyHarness::new());`
/// where the expression makes a fresh harness for each test.
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@each $make;
            one_sided_operations, unsignaled_requests, inline_limit, out_of_bounds_is_denied,
            read_only_peer_is_denied, region_access_caps_connection,
            region_scope_keeps_other_connections_out, connection_state_machine,
            missing_peer_is_an_error, permission_changes, fifo_write_then_cas,
            dead_target_cannot_ack, crash_is_notified, revoke_is_a_barrier_for_a_stopped_writer,
            revoke_is_a_barrier_under_load, cas_is_atomic_under_contention);
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let mut harness = $make;
                $crate::conformance::$name(&mut harness);
            }
        )*
    };
}
