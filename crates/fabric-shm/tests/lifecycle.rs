//! Node lifecycle and bad input on the shared-memory fabric.
//!
//! Tests are numbered by class: `t1x` feed the backend bad input or configuration and expect a
//! clear [`FabricError`] (or an error completion), never a panic or a stray write; `t2x` follow a
//! node through its life: death, restart, being stopped, being fenced, the files it leaves.
//!
//! Every test works in its own private run directory under `/dev/shm` ([`RunDir`]), removed when
//! the test ends, pass or fail. Nodes that must be separate processes are this very test binary,
//! run again with `--ignored --exact child_main` and its orders in the environment ([`ChildNode`]):
//! it prints `MU-CHILD READY <incarnation>` once its node is up, waits for a `START` line, runs its
//! program, prints `MU-CHILD OUTCOME <ops_ok> <status>` and then keeps its node alive until its
//! stdin closes or it is killed.

mod common;

use common::{
    decode_spec, encode_spec, format_outcome, proc_state, read_back, wait_stopped, ChildNode,
    RunDir,
};
use mu_fabric::conformance::{Program, ProgramRunner, TaskSpec};
use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, FabricError, LocalRegion, LocalSlice, NodeId,
    PermError, PostError, QpState, RegionId, RemoteAddr, Source, Status, WorkRequest,
};
use mu_fabric_shm::layout::{self, CTL_BYTES, HEADER_BYTES, LAYOUT_VERSION};
use mu_fabric_shm::{ShmConfig, ShmEndpoint, ShmFabric, ShmRegion, DEFAULT_PROTOCOL};
use std::fmt::Display;
use std::fs::{File, OpenOptions, Permissions};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const CLUSTER: u64 = 0x6c69_6665_6379_636c;
const DATA: RegionId = RegionId(0);
/// How long to wait for a completion, a child's line, a child to stop or die.
const WAIT: Duration = Duration::from_secs(15);

// Header field offsets (see `layout.rs`): the same in control and region headers.
const H_MAGIC: u64 = 0;
const H_VERSION: u64 = 8;
const H_CLUSTER: u64 = 16;
const R_LEN: u64 = 32;

// ---------------------------------------------------------------------------------------------
// Fixtures.
// ---------------------------------------------------------------------------------------------

/// A fresh private (0700) directory of this binary's cluster for the test `tag`, removed on drop
/// even if the test panics.
fn run_dir(tag: &str) -> RunDir {
    RunDir::new(&format!("lifecycle-{tag}"), CLUSTER)
}

/// What only these tests do with a run directory.
impl RunDir {
    /// Drops `old` (the last handle of node `node`) and starts the node again in this process.
    ///
    /// A child forked while a node's lock file is open shares its flock until the child's exec
    /// has closed it (t29, a backend bug), so a restart can be refused for a moment while another
    /// test of this binary spawns a child. Other tests retry that refusal briefly; t29 shows the
    /// race itself.
    fn restart(&self, node: u16, old: ShmFabric) -> Result<ShmFabric, FabricError> {
        drop(old);
        let start = Instant::now();
        loop {
            match self.create(node) {
                Err(FabricError::Config(m))
                    if m.contains("already running")
                        && start.elapsed() < Duration::from_secs(2) =>
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                other => return other,
            }
        }
    }

    /// The names of the files in the run directory, sorted.
    fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path())
            .expect("list run dir")
            .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn chmod(&self, mode: u32) {
        std::fs::set_permissions(self.path(), Permissions::from_mode(mode)).expect("chmod run dir");
    }
}

fn conn(peer: u16) -> ConnId {
    ConnId::new(NodeId(peer), 0)
}

fn remote(offset: u64) -> RemoteAddr {
    RemoteAddr { region: DATA, offset }
}

fn write_inline(wr_id: u64, data: &[u8], to: RemoteAddr) -> WorkRequest<'_> {
    WorkRequest::write(wr_id, Source::Inline(data), to)
}

/// Posts `wr` and waits for its completion.
fn run_one(ep: &mut ShmEndpoint, c: ConnId, wr: &WorkRequest<'_>) -> Completion {
    ep.post(c, wr).unwrap_or_else(|e| panic!("post {wr:?}: {e}"));
    wait_completion(ep)
}

fn wait_completion(ep: &mut ShmEndpoint) -> Completion {
    mu_fabric::conformance::wait_completion_with(ep, std::thread::yield_now)
}

/// Asserts that an error's message names the problem.
fn assert_mentions(err: &impl Display, word: &str) {
    let text = err.to_string();
    assert!(
        text.to_lowercase().contains(&word.to_lowercase()),
        "the message {text:?} should mention {word:?}"
    );
}

/// Two in-process nodes with a region each (`len` bytes, all access), connected both ways on
/// channel 0 with all access granted, and an endpoint on `a` attached to `a -> b`.
struct Pair {
    a: ShmFabric,
    b: ShmFabric,
    a_region: ShmRegion,
    b_region: ShmRegion,
    ep: ShmEndpoint,
}

fn pair(dir: &RunDir, a: u16, b: u16, len: usize) -> Pair {
    let fa = dir.node(a);
    let fb = dir.node(b);
    let a_region = fa.register_region(DATA, len, Access::ALL).expect("register a");
    let b_region = fb.register_region(DATA, len, Access::ALL).expect("register b");
    fa.connect(conn(b), Access::ALL).expect("connect a->b");
    fb.connect(conn(a), Access::ALL).expect("connect b->a");
    let mut ep = fa.endpoint(64).expect("endpoint");
    ep.attach(conn(b)).expect("attach");
    Pair { a: fa, b: fb, a_region, b_region, ep }
}

/// Overwrites bytes of a file in place (as a hand edit would).
fn patch_file(path: &Path, offset: u64, bytes: &[u8]) {
    let f = OpenOptions::new().write(true).open(path).expect("open for patch");
    f.write_all_at(bytes, offset).expect("patch file");
}

fn read_file_at(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    File::open(path).expect("open").read_exact_at(&mut out, offset).expect("read file");
    out
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).expect("stat").permissions().mode() & 0o7777
}

// ---------------------------------------------------------------------------------------------
// Child processes.
// ---------------------------------------------------------------------------------------------

impl ChildNode {
    /// Runs `mode` (`run` or `try-create`) for `spec` in `dir`.
    fn spawn(dir: &RunDir, mode: &str, spec: &TaskSpec) -> ChildNode {
        let mut command = common::child_command();
        command
            .env("MU_LIFECYCLE_DIR", dir.path())
            .env("MU_LIFECYCLE_MODE", mode)
            .env("MU_LIFECYCLE_SPEC", encode_spec(spec));
        ChildNode::launch(command, "MU-CHILD ", WAIT)
    }

    /// Starts `spec` as a node and waits until it is up; returns it and its incarnation.
    fn run(dir: &RunDir, spec: &TaskSpec) -> (ChildNode, u32) {
        let mut c = ChildNode::spawn(dir, "run", spec);
        let inc = c.wait_ready();
        (c, inc)
    }
}

fn host_spec(node: u16, region_bytes: usize, connect: &[ConnId]) -> TaskSpec {
    TaskSpec {
        node: NodeId(node),
        regions: vec![(DATA, region_bytes, Access::ALL)],
        connect: connect.iter().map(|&c| (c, Access::ALL)).collect(),
        program: Program::Host,
    }
}

/// Entry point of the child processes (see the module docs); does nothing in normal runs.
#[test]
#[ignore = "entry point for the child processes of the lifecycle tests"]
fn child_main() {
    let (Ok(dir), Ok(mode), Ok(spec)) = (
        std::env::var("MU_LIFECYCLE_DIR"),
        std::env::var("MU_LIFECYCLE_MODE"),
        std::env::var("MU_LIFECYCLE_SPEC"),
    ) else {
        return;
    };
    let spec = decode_spec(&spec);
    let created = ShmFabric::create(ShmConfig::new(dir, CLUSTER, spec.node));
    if mode == "try-create" {
        match created {
            Ok(f) => println!("MU-CHILD CREATED {}", f.incarnation()),
            Err(e) => println!("MU-CHILD ERROR {e:?}"),
        }
        return;
    }
    if let Some(depth) = mode.strip_prefix("try-endpoint ") {
        let fabric = created.expect("child node");
        match fabric.endpoint(depth.parse().expect("depth")) {
            Ok(_) => println!("MU-CHILD ENDPOINT OK"),
            Err(e) => println!("MU-CHILD ENDPOINT ERROR {e:?}"),
        }
        return;
    }
    let fabric = created.expect("child node");
    let incarnation = fabric.incarnation();
    let mut runner = ProgramRunner::new(fabric, &spec).expect("child setup");
    println!("MU-CHILD READY {incarnation}");
    let stdin = std::io::stdin();
    let mut line = String::new();
    stdin.read_line(&mut line).expect("wait for START");
    if line.trim() != "START" {
        return;
    }
    if spec.program != Program::Host {
        let outcome = loop {
            if let Some(outcome) = runner.step() {
                break outcome;
            }
        };
        println!("MU-CHILD {}", format_outcome(&outcome));
    }
    // Keep the node alive until the parent closes our stdin or kills us.
    while stdin.read_line(&mut line).is_ok_and(|n| n > 0) {}
}

#[test]
fn spec_encoding_round_trips() {
    common::assert_spec_round_trips(Program::WriteLoop {
        conn: ConnId::new(NodeId(0), 1),
        remote: RemoteAddr { region: RegionId(0), offset: 128 },
        len: 5,
    });
}

// ---------------------------------------------------------------------------------------------
// t1x: bad input and configuration.
// ---------------------------------------------------------------------------------------------

/// A run directory claimed by another cluster, another protocol or another build is refused
/// with a message naming what differs, and the refused node leaves no files behind.
#[test]
fn t10_run_dir_of_another_cluster_is_incompatible() {
    let dir = run_dir("t10");
    let _a = dir.node(0);
    let err = ShmFabric::create(ShmConfig::new(dir.path(), CLUSTER + 1, NodeId(1)))
        .err()
        .expect("a node of another cluster must be refused");
    assert!(matches!(err, FabricError::Incompatible(_)), "{err:?}");
    assert_mentions(&err, &format!("belongs to cluster {CLUSTER:#x}, not to cluster"));
    let cluster = std::fs::read_to_string(dir.path().join("cluster")).expect("cluster file");
    assert!(cluster.contains(&format!("{CLUSTER:#x}")), "cluster file was rewritten: {cluster:?}");
    assert!(!layout::ctl_file(dir.path(), NodeId(1)).exists(), "the refused node published itself");

    // The same cluster id with another protocol (or another version of it).
    let err =
        ShmFabric::create(ShmConfig::new(dir.path(), CLUSTER, NodeId(1)).with_protocol("mu/9"))
            .err()
            .expect("a node of another protocol must be refused");
    assert!(matches!(err, FabricError::Incompatible(_)), "{err:?}");
    assert_mentions(&err, &format!("runs protocol {DEFAULT_PROTOCOL}; this node speaks mu/9"));
    assert!(!layout::ctl_file(dir.path(), NodeId(1)).exists(), "the refused node published itself");

    // A build with another layout.
    let older = run_dir("t10c");
    let text =
        format!("mu-shm cluster {CLUSTER:#x} layout {} protocol fabric\n", LAYOUT_VERSION + 1);
    std::fs::write(older.path().join("cluster"), text).unwrap();
    let err = older.create(0).err().expect("another layout must be refused");
    assert_mentions(&err, &format!("layout {}", LAYOUT_VERSION + 1));

    // A cluster file that is not ours at all (garbage) is refused too.
    let other = run_dir("t10b");
    std::fs::write(other.path().join("cluster"), "something else entirely\n").unwrap();
    let err = other.create(0).err().expect("a foreign run directory must be refused");
    assert!(matches!(err, FabricError::Incompatible(_)), "{err:?}");
    assert_mentions(&err, "another cluster or build");

    // A protocol name that could not be read back is a configuration error.
    let err =
        ShmFabric::create(ShmConfig::new(dir.path(), CLUSTER, NodeId(2)).with_protocol("mu 1"))
            .err()
            .expect("a protocol name with a space must be refused");
    assert!(matches!(err, FabricError::Config(_)), "{err:?}");
}

/// A run directory that other users can reach is a configuration error, found before anything
/// is written in it.
#[test]
fn t11_accessible_run_dir_is_a_config_error() {
    let dir = run_dir("t11");
    for mode in [0o755, 0o770, 0o701] {
        dir.chmod(mode);
        let err = dir.create(0).err().unwrap_or_else(|| panic!("mode {mode:o} was accepted"));
        assert!(matches!(err, FabricError::Config(_)), "mode {mode:o}: {err:?}");
        assert_mentions(&err, "accessible");
        assert!(dir.files().is_empty(), "mode {mode:o}: files were created: {:?}", dir.files());
    }
    dir.chmod(0o700);
    let node = dir.create(0).expect("a private run directory is accepted");
    assert_eq!(node.incarnation(), 1);
}

/// Node ids go up to 63.
#[test]
fn t12_node_id_too_large_is_a_config_error() {
    let dir = run_dir("t12");
    for id in [64, 65, u16::MAX] {
        let err = dir.create(id).err().unwrap_or_else(|| panic!("node id {id} was accepted"));
        assert!(matches!(err, FabricError::Config(_)), "node {id}: {err:?}");
        assert_mentions(&err, "too large");
    }
    assert!(dir.files().is_empty(), "a refused node wrote files: {:?}", dir.files());
    let last = dir.create(63).expect("node 63 is the largest allowed");
    assert_eq!(last.node(), NodeId(63));
}

/// Starting a node id that is already running in this process is refused and leaves the running
/// node alone; once the first is dropped the id starts again, with a higher incarnation.
#[test]
fn t13_second_start_in_process_is_refused() {
    let dir = run_dir("t13");
    let first = dir.node(1);
    let first_inc = first.incarnation();
    let ctl_before = std::fs::read(layout::ctl_file(dir.path(), NodeId(1))).unwrap();
    let err = dir.create(1).err().expect("a second node 1 must be refused");
    assert!(matches!(err, FabricError::Config(_)), "{err:?}");
    assert_mentions(&err, "already running");
    let ctl_after = std::fs::read(layout::ctl_file(dir.path(), NodeId(1))).unwrap();
    assert!(ctl_before == ctl_after, "the refused start touched the running node's control file");

    // The first node still works: a peer connects to it and writes.
    let peer = dir.node(0);
    let region = first.register_region(DATA, 4096, Access::ALL).unwrap();
    first.connect(conn(0), Access::ALL).unwrap();
    peer.connect(conn(1), Access::ALL).unwrap();
    let mut ep = peer.endpoint(4).unwrap();
    ep.attach(conn(1)).unwrap();
    assert_eq!(
        run_one(&mut ep, conn(1), &write_inline(1, b"ok", remote(0))).status,
        Status::Success
    );
    assert_eq!(read_back(&region, 0, 2), b"ok");

    let second = dir.restart(1, first).expect("node 1 starts again once the first is gone");
    assert!(
        second.incarnation() > first_inc,
        "incarnation {} after a dropped incarnation {first_inc}",
        second.incarnation()
    );
    assert!(layout::ctl_file(dir.path(), NodeId(1)).exists());
    // The running peer can connect to the new node 1.
    second.connect(conn(0), Access::ALL).unwrap();
    peer.connect(conn(1), Access::ALL).expect("connect to the restarted node");
}

/// The same, across processes: a child cannot start a node the parent runs, the parent cannot
/// start a node a child runs, and once the child is killed the parent takes over with a higher
/// incarnation.
#[test]
fn t14_second_start_across_processes_is_refused() {
    let dir = run_dir("t14");
    let _mine = dir.node(1);
    let child = ChildNode::spawn(&dir, "try-create", &host_spec(1, 4096, &[]));
    let line = child.line().expect("child died without a word");
    assert!(line.starts_with("ERROR Config("), "child said {line:?}");
    assert!(line.contains("already running"), "child said {line:?}");

    let (mut child, child_inc) = ChildNode::run(&dir, &host_spec(2, 4096, &[]));
    let err = dir.create(2).err().expect("node 2 runs in the child");
    assert!(matches!(err, FabricError::Config(_)), "{err:?}");
    assert_mentions(&err, "already running");
    child.kill();
    let after = dir.create(2).expect("node 2 starts once its process is dead");
    assert!(
        after.incarnation() > child_inc,
        "incarnation {} after a killed incarnation {child_inc}",
        after.incarnation()
    );
}

/// A peer's region file that is not what its header promises (wrong layout version, bad magic,
/// wrong size) is never written: every operation on it completes with an error.
#[test]
fn t15_corrupt_peer_region_files_fail_operations() {
    let dir = run_dir("t15");
    let p = pair(&dir, 0, 1, 4096);
    let mut ep = p.ep;
    let b = NodeId(1);
    const LEN: usize = 4096;
    let mut corrupt = Vec::new();
    for id in 1..=6u16 {
        corrupt.push(p.b.register_region(RegionId(id), LEN, Access::ALL).unwrap());
    }
    let path = |id: u16| layout::region_file(dir.path(), b, p.b.incarnation(), RegionId(id));
    // Sanity: the connection and an intact region work.
    assert_eq!(
        run_one(&mut ep, conn(1), &write_inline(1, b"fine", remote(0))).status,
        Status::Success
    );

    let cases: [(u16, &str); 6] = [
        (1, "layout version"),
        (2, "magic"),
        (3, "file longer than its header says"),
        (4, "file shorter than its header says"),
        (5, "header length larger than the file"),
        (6, "file shorter than a header"),
    ];
    patch_file(&path(1), H_VERSION, &(LAYOUT_VERSION + 1).to_le_bytes());
    patch_file(&path(2), H_MAGIC, b"NOTMUSHM");
    File::options()
        .write(true)
        .open(path(3))
        .unwrap()
        .set_len((HEADER_BYTES + 2 * LEN) as u64)
        .unwrap();
    File::options()
        .write(true)
        .open(path(4))
        .unwrap()
        .set_len((HEADER_BYTES + LEN / 2) as u64)
        .unwrap();
    patch_file(&path(5), R_LEN, &(2 * LEN as u64).to_le_bytes());
    File::options().write(true).open(path(6)).unwrap().set_len(64).unwrap();

    let mut wr_id = 10;
    for (id, what) in cases {
        let file_before = std::fs::read(path(id)).unwrap();
        let at = RemoteAddr { region: RegionId(id), offset: 0 };
        let payload = [0xee_u8; 16];
        let ops = [
            WorkRequest::write(wr_id, Source::Inline(&payload), at),
            WorkRequest::compare_swap(wr_id + 1, at, 0, 0xdead),
            WorkRequest::read(wr_id + 2, LocalSlice { region: DATA, offset: 0, len: 16 }, at),
        ];
        wr_id += 3;
        for wr in &ops {
            let c = run_one(&mut ep, conn(1), wr);
            assert!(
                matches!(c.status, Status::RemoteOutOfBounds | Status::RemoteAccessDenied),
                "region {id} ({what}): {:?} completed with {:?}",
                wr.op.kind(),
                c.status
            );
            assert_eq!(p.a.qp_state(conn(1)).unwrap(), QpState::Error);
            p.a.connect(conn(1), Access::ALL).expect("reconnect");
        }
        assert!(
            std::fs::read(path(id)).unwrap() == file_before,
            "region {id} ({what}) was written"
        );
    }
    // The local destination of the reads was not touched either.
    assert_eq!(read_back(&p.a_region, 0, 16), [0; 16]);
    // The connection still works against an intact region.
    assert_eq!(
        run_one(&mut ep, conn(1), &write_inline(99, b"still", remote(8))).status,
        Status::Success
    );
    assert_eq!(read_back(&p.b_region, 8, 5), b"still");
    drop(corrupt);
}

/// Binding a connection maps the regions the peer has registered by then, so that the first
/// operation into each (a new leader's first round) does not open and map a file on the data
/// path. Shown by taking a region's file away after the binding: the first write still lands. A
/// region registered after the binding is mapped by its first operation, or by the next binding.
#[test]
fn t15b_binding_maps_the_peers_registered_regions() {
    let dir = run_dir("t15b");
    let p = pair(&dir, 0, 1, 4096);
    let mut ep = p.ep;
    let b = NodeId(1);
    let path = |id: u16| layout::region_file(dir.path(), b, p.b.incarnation(), RegionId(id));
    let register = |id: u16| p.b.register_region(RegionId(id), 4096, Access::ALL).unwrap();
    let write = |ep: &mut ShmEndpoint, wr_id: u64, data: &[u8], id: u16| {
        let at = RemoteAddr { region: RegionId(id), offset: 16 };
        run_one(ep, conn(1), &write_inline(wr_id, data, at)).status
    };
    std::fs::remove_file(path(DATA.0)).expect("remove the bound peer's region file");
    assert_eq!(write(&mut ep, 1, b"bound", DATA.0), Status::Success);
    assert_eq!(read_back(&p.b_region, 16, 5), b"bound");

    // Registered after the binding: its first operation opens its file...
    let later = register(1);
    assert_eq!(write(&mut ep, 2, b"first", 1), Status::Success);
    assert_eq!(read_back(&later, 16, 5), b"first");
    // ... which must then still be there.
    let gone = register(2);
    std::fs::remove_file(path(2)).expect("remove a region file");
    assert_eq!(write(&mut ep, 3, b"nowhere", 2), Status::RemoteOutOfBounds);
    assert_eq!(read_back(&gone, 16, 7), [0; 7]);

    // The next binding maps what was registered since.
    let rebound = register(3);
    p.a.connect(conn(1), Access::ALL).expect("bind again");
    std::fs::remove_file(path(3)).expect("remove a region file");
    assert_eq!(write(&mut ep, 4, b"rebound", 3), Status::Success);
    assert_eq!(read_back(&rebound, 16, 7), b"rebound");
}

/// Binding again to a peer whose incarnation we reached and which is still alive opens none of
/// its files (a binding is part of a permission switch): shown by moving its control file
/// away. Once that incarnation is dead, a binding looks for the current one in the files.
#[test]
fn t15c_binding_again_to_a_live_peer_reads_no_file() {
    let dir = run_dir("t15c");
    let p = pair(&dir, 0, 1, 4096);
    let mut ep = p.ep;
    let ctl = layout::ctl_file(dir.path(), NodeId(1));
    let aside = dir.path().join("n1.ctl.aside");
    std::fs::rename(&ctl, &aside).expect("move the control file away");
    p.a.connect(conn(1), Access::ALL).expect("binding again to the live peer");
    assert_eq!(
        run_one(&mut ep, conn(1), &write_inline(1, b"again", remote(0))).status,
        Status::Success
    );
    assert_eq!(read_back(&p.b_region, 0, 5), b"again");
    std::fs::rename(&aside, &ctl).expect("put the control file back");
    drop(p.b);
    let err = p.a.connect(conn(1), Access::ALL).expect_err("the peer is gone");
    assert!(matches!(err, FabricError::PeerUnreachable(..)), "{err}");
}

/// Connecting to a peer whose control file is corrupted is refused with a message that says
/// what is wrong; with the file repaired, connecting works.
#[test]
fn t16_corrupt_peer_control_file_is_incompatible() {
    let dir = run_dir("t16");
    let a = dir.node(0);
    let b = dir.node(1);
    let b_region = b.register_region(DATA, 4096, Access::ALL).unwrap();
    b.connect(conn(0), Access::ALL).unwrap();
    let ctl = layout::ctl_file(dir.path(), NodeId(1));
    let pristine = read_file_at(&ctl, 0, 64);

    let cases: [(u64, &[u8], &str); 3] = [
        (H_MAGIC, b"garbage!", "magic"),
        (H_VERSION, &(LAYOUT_VERSION + 7).to_le_bytes(), "layout version"),
        (H_CLUSTER, &(CLUSTER ^ 1).to_le_bytes(), "cluster"),
    ];
    for (offset, bytes, word) in cases {
        patch_file(&ctl, offset, bytes);
        let err = a.connect(conn(1), Access::ALL).expect_err(word);
        assert!(matches!(err, FabricError::Incompatible(_)), "{word}: {err:?}");
        assert_mentions(&err, word);
        assert_ne!(a.qp_state(conn(1)).unwrap(), QpState::ReadyToSend);
        patch_file(&ctl, 0, &pristine);
    }

    // Hand-made control files of nodes that never ran: garbage of the right size, and a file too
    // short to hold a header.
    std::fs::write(layout::ctl_file(dir.path(), NodeId(5)), vec![0x5a_u8; CTL_BYTES]).unwrap();
    let err = a.connect(conn(5), Access::ALL).expect_err("garbage control file");
    assert!(matches!(err, FabricError::Incompatible(_)), "{err:?}");
    assert_mentions(&err, "magic");
    std::fs::write(layout::ctl_file(dir.path(), NodeId(6)), b"short").unwrap();
    let err = a.connect(conn(6), Access::ALL).expect_err("short control file");
    assert!(matches!(err, FabricError::Incompatible(_)), "{err:?}");
    assert_mentions(&err, "bytes");

    // Repaired: the connection comes up and works.
    a.connect(conn(1), Access::ALL).expect("connect to the repaired peer");
    let mut ep = a.endpoint(4).unwrap();
    ep.attach(conn(1)).unwrap();
    assert_eq!(
        run_one(&mut ep, conn(1), &write_inline(1, b"ok", remote(0))).status,
        Status::Success
    );
    assert_eq!(read_back(&b_region, 0, 2), b"ok");
}

/// Connecting to a peer that is gone — dropped, crashed, or its process killed — fails with
/// `PeerUnreachable`.
#[test]
fn t17_connecting_to_a_gone_peer_is_unreachable() {
    let dir = run_dir("t17");
    let a = dir.node(0);

    let b = dir.node(1);
    drop(b);
    let err = a.connect(conn(1), Access::ALL).expect_err("dropped peer");
    assert!(matches!(err, FabricError::PeerUnreachable(NodeId(1), _)), "{err:?}");
    assert_mentions(&err, "n1");

    let c = dir.node(3);
    c.crash();
    let err = a.connect(conn(3), Access::ALL).expect_err("crashed peer");
    assert!(matches!(err, FabricError::PeerUnreachable(NodeId(3), _)), "{err:?}");
    assert_mentions(&err, "dead");

    let (mut child, _) = ChildNode::run(&dir, &host_spec(2, 4096, &[]));
    a.connect(conn(2), Access::ALL).expect("the child's node is up");
    child.kill();
    let err = a.connect(conn(2), Access::ALL).expect_err("killed peer");
    assert!(matches!(err, FabricError::PeerUnreachable(NodeId(2), _)), "{err:?}");
    assert_mentions(&err, "dead");
    assert_ne!(a.qp_state(conn(2)).unwrap(), QpState::ReadyToSend);
}

/// Bad arguments to the control plane and to local regions are the documented errors.
#[test]
fn t18_bad_arguments_are_documented_errors() {
    let dir = run_dir("t18");
    let a = dir.node(0);
    let me = ConnId::new(NodeId(0), 0);

    // A connection to itself.
    let err = a.modify_qp(me, QpState::Init, Access::ALL).expect_err("self connection");
    assert!(matches!(err, FabricError::UnknownConnection(c, _) if c == me), "{err:?}");
    assert_mentions(&err, "itself");
    assert!(matches!(a.connect(me, Access::ALL), Err(FabricError::UnknownConnection(..))));
    assert!(matches!(a.qp_state(me), Err(FabricError::UnknownConnection(..))));
    let mut ep = a.endpoint(4).unwrap();
    assert!(matches!(ep.attach(me), Err(FabricError::UnknownConnection(..))));
    assert!(matches!(
        ep.post(me, &write_inline(1, b"x", remote(0))),
        Err(PostError::NotAttached(c)) if c == me
    ));

    // Channels go up to 3, peers up to 63.
    for bad in [ConnId::new(NodeId(1), 4), ConnId::new(NodeId(1), 255)] {
        let err = a.modify_qp(bad, QpState::Init, Access::ALL).expect_err("channel");
        assert!(matches!(err, FabricError::UnknownConnection(c, _) if c == bad), "{err:?}");
        assert_mentions(&err, "channel");
        assert!(matches!(ep.attach(bad), Err(FabricError::UnknownConnection(..))));
        assert!(matches!(a.qp_access(bad), Err(FabricError::UnknownConnection(..))));
        assert!(matches!(a.set_access_fast(bad, Access::NONE), Err(PermError::Fabric(_))));
        assert!(matches!(
            a.set_access_slow(bad, Access::NONE),
            Err(FabricError::UnknownConnection(..))
        ));
        assert!(matches!(a.peer_inflight_seq(bad), Err(FabricError::UnknownConnection(..))));
    }
    let far = ConnId::new(NodeId(64), 0);
    let err = a.modify_qp(far, QpState::Init, Access::ALL).expect_err("peer id");
    assert!(matches!(err, FabricError::UnknownConnection(..)), "{err:?}");
    assert_mentions(&err, "peer");
    assert!(matches!(ep.attach(far), Err(FabricError::UnknownConnection(..))));

    // Regions: empty, too large, registered twice.
    let err = a.register_region(DATA, 0, Access::ALL).err().expect("empty region");
    assert!(matches!(err, FabricError::BadRegionSize { len_bytes: 0, .. }), "{err:?}");
    let err = a.register_region(DATA, (1 << 40) + 1, Access::ALL).err().expect("huge region");
    assert!(matches!(err, FabricError::BadRegionSize { .. }), "{err:?}");
    assert!(dir.files().iter().all(|f| !f.contains(".r")), "a refused region left a file");
    let region = a.register_region(DATA, 100, Access::ALL).unwrap();
    region.write(0, b"keep").unwrap();
    let err = a.register_region(DATA, 4096, Access::READ).err().expect("duplicate region");
    assert_eq!(err, FabricError::RegionExists(DATA));
    assert_mentions(&err, "already registered");
    assert_eq!(read_back(&region, 0, 4), b"keep", "a refused duplicate clobbered the region");
    assert_eq!(region.len_bytes(), 100);

    // Completion queues need a depth.
    let err = a.endpoint(0).err().expect("depth 0");
    assert!(matches!(err, FabricError::Config(_)), "{err:?}");
    assert_mentions(&err, "depth");

    // Local region accesses: bounds (including overflow) and alignment.
    let oob = |r: Result<(), FabricError>| matches!(r, Err(FabricError::OutOfBounds { .. }));
    let mut buf = [0u8; 8];
    assert!(oob(region.read(96, &mut buf)));
    assert!(oob(region.write(99, b"xy")));
    assert!(oob(region.write(101, b"")));
    assert!(oob(region.read(usize::MAX, &mut buf)));
    assert!(oob(region.store_u64(96, 1)));
    assert!(matches!(region.load_u64(96 + 8), Err(FabricError::OutOfBounds { .. })));
    assert!(matches!(region.load_u64(usize::MAX - 7), Err(FabricError::OutOfBounds { .. })));
    assert_eq!(region.load_u64(4), Err(FabricError::Misaligned(4)));
    assert_eq!(region.store_u64(12, 1), Err(FabricError::Misaligned(12)));
    let err = region.load_u64(3).unwrap_err();
    assert_mentions(&err, "aligned");
    let err = region.read(96, &mut buf).unwrap_err();
    assert_mentions(&err, "outside");
    assert_eq!(read_back(&region, 0, 4), b"keep");
    region.store_u64(88, 7).expect("the last aligned word is in bounds");
    assert_eq!(region.load_u64(88), Ok(7));

    // Fast and slow permission changes on a connection that was never brought up.
    let never = ConnId::new(NodeId(9), 0);
    assert!(matches!(
        a.set_access_fast(never, Access::READ),
        Err(PermError::Fabric(FabricError::InvalidTransition { .. }))
    ));
    assert!(matches!(
        a.set_access_slow(never, Access::READ),
        Err(FabricError::InvalidTransition { .. })
    ));
}

/// A completion queue deeper than memory can hold is bad input too: an error, not a panic or an
/// abort of the whole process (as `ibv_create_cq` fails beyond the device's `max_cqe`). Each
/// depth is tried in a child process, which dies if the backend panics or aborts.
#[test]
fn t18b_huge_endpoint_depth_is_an_error() {
    let dir = run_dir("t18b");
    for (node, depth) in [(1u16, usize::MAX), (2, 1 << 40)] {
        let child =
            ChildNode::spawn(&dir, &format!("try-endpoint {depth}"), &host_spec(node, 64, &[]));
        let line = child.line();
        assert!(
            line.as_deref().is_some_and(|l| l.starts_with("ENDPOINT ERROR Config(")),
            "endpoint({depth}): the child said {line:?} (None: it panicked or aborted)"
        );
    }
}

/// A completion queue holds `depth` unpolled completions; posting more is refused (and posts
/// nothing) until some are polled.
#[test]
fn t19_queue_full_until_polled() {
    let dir = run_dir("t19");
    let p = pair(&dir, 0, 1, 4096);
    let mut ep = p.a.endpoint(4).unwrap();
    drop(p.ep); // frees the connection for the new endpoint
    ep.attach(conn(1)).unwrap();
    for i in 0..4u64 {
        ep.post(conn(1), &write_inline(i + 1, &[i as u8 + 1], remote(i))).unwrap();
    }
    let refused = write_inline(5, b"\x55", remote(100));
    assert_eq!(ep.post(conn(1), &refused), Err(PostError::QueueFull));
    assert_eq!(ep.post(conn(1), &refused.unsignaled()), Err(PostError::QueueFull));
    assert_mentions(&PostError::QueueFull, "full");
    assert_eq!(read_back(&p.b_region, 100, 1), [0], "a refused post executed");

    let mut out = [Completion::EMPTY; 8];
    assert_eq!(ep.poll(&mut out[..1]), 1);
    assert_eq!((out[0].wr_id, out[0].status), (1, Status::Success));
    ep.post(conn(1), &write_inline(6, b"\x66", remote(101))).expect("room after polling");
    assert_eq!(ep.post(conn(1), &refused), Err(PostError::QueueFull));
    let n = ep.poll(&mut out);
    let ids: Vec<u64> = out[..n].iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [2, 3, 4, 6]);
    assert!(out[..n].iter().all(|c| c.status == Status::Success));
    assert_eq!(read_back(&p.b_region, 0, 4), [1, 2, 3, 4]);
    assert_eq!(read_back(&p.b_region, 100, 2), [0, 0x66]);
    assert_eq!(run_one(&mut ep, conn(1), &refused).status, Status::Success);
}

// ---------------------------------------------------------------------------------------------
// t2x: lifecycle.
// ---------------------------------------------------------------------------------------------

/// A dropped node reads as dead to its peers (a write to it cannot succeed) and its control and
/// region files leave the run directory (its lock file stays: unlinking a flock file would let
/// two processes hold "the" lock).
#[test]
fn t20_dropped_node_reads_dead_and_removes_its_files() {
    let dir = run_dir("t20");
    let p = pair(&dir, 0, 1, 4096);
    let mut ep = p.ep;
    let b_region_path = layout::region_file(dir.path(), NodeId(1), p.b.incarnation(), DATA);
    let b_ctl_path = layout::ctl_file(dir.path(), NodeId(1));
    assert!(b_region_path.exists() && b_ctl_path.exists());
    assert_eq!(
        run_one(&mut ep, conn(1), &write_inline(1, b"alive", remote(0))).status,
        Status::Success
    );

    let b_region = p.b_region;
    drop(p.b);
    assert!(!b_ctl_path.exists(), "the control file of a dropped node is still there");
    assert!(!b_region_path.exists(), "the region file of a dropped node is still there");
    let left: Vec<String> = dir.files().into_iter().filter(|f| f.starts_with("n1.")).collect();
    assert_eq!(left, ["n1.lock"]);

    let c = run_one(&mut ep, conn(1), &write_inline(2, b"dead?", remote(0)));
    assert_eq!(c.status, Status::PeerUnreachable, "a dropped node acknowledged a write");
    assert_eq!(p.a.qp_state(conn(1)).unwrap(), QpState::Error);
    assert_eq!(
        run_one(&mut ep, conn(1), &write_inline(3, b"x", remote(0))).status,
        Status::Flushed
    );
    assert_eq!(read_back(&b_region, 0, 5), b"alive");
    drop(p.a_region);
}

/// With `liveness_spin`, the liveness mutex is held by a spinning thread: the node reads alive
/// while it lives, and dropping it ends that thread, so it reads dead (and the drop returns).
#[test]
fn t20b_a_spinning_liveness_holder_ends_with_its_node() {
    let dir = run_dir("t20b");
    let fa = dir.node(0);
    let mut config = dir.config(1);
    config.liveness_spin = true;
    let fb = ShmFabric::create(config).expect("node 1 with a spinning liveness holder");
    let a_region = fa.register_region(DATA, 4096, Access::ALL).expect("register a");
    let b_region = fb.register_region(DATA, 4096, Access::ALL).expect("register b");
    fa.connect(conn(1), Access::ALL).expect("connect a->b");
    fb.connect(conn(0), Access::ALL).expect("connect b->a");
    let mut ep = fa.endpoint(64).expect("endpoint");
    ep.attach(conn(1)).expect("attach");
    let c = run_one(&mut ep, conn(1), &write_inline(1, b"alive", remote(0)));
    assert_eq!(c.status, Status::Success);
    drop(fb);
    let c = run_one(&mut ep, conn(1), &write_inline(2, b"dead?", remote(0)));
    assert_eq!(c.status, Status::PeerUnreachable, "a dropped node acknowledged a write");
    assert_eq!(read_back(&b_region, 0, 5), b"alive");
    drop(a_region);
}

/// A death watch from outside the fabric (a client of a replica on this host): a live node
/// keeps it asleep for its whole wait. When the node is killed in another process, the kernel
/// wakes one waiter of its liveness word, a node's crash watcher (here node 0's, connected to
/// it), which wakes every death watch at once: they sleep on another word, with a recheck far
/// longer than the test's patience, so only that wake ends their sleep in time. Without a node
/// watching, a death watch sees the death at its next recheck.
#[test]
fn t20c_death_watches_are_woken_by_a_nodes_crash_watcher() {
    let dir = run_dir("t20c");
    let a = dir.node(0);
    let (mut child, _) = ChildNode::run(&dir, &host_spec(1, 4096, &[]));
    a.connect(conn(1), Access::ALL).expect("connect a->b: a's crash watcher watches b");
    let watch = |node, recheck| {
        mu_fabric_shm::DeathWatch::open(dir.path(), NodeId(node), CLUSTER, recheck).unwrap()
    };
    assert!(!watch(1, WAIT).wait_dead(Duration::from_millis(50)), "a live node read as dead");
    let asleep: Vec<_> = (0..3)
        .map(|_| {
            let watch = watch(1, WAIT * 4);
            std::thread::spawn(move || {
                let started = Instant::now();
                (watch.wait_dead(WAIT * 4), started.elapsed())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    child.kill();
    for watcher in asleep {
        let (dead, took) = watcher.join().unwrap();
        assert!(dead && took < WAIT, "a watcher was not woken: dead {dead} after {took:?}");
    }
    let never = mu_fabric_shm::DeathWatch::open(dir.path(), NodeId(7), CLUSTER, WAIT);
    assert!(never.is_err(), "a node that never started has nothing to watch");

    // Nobody watches node 2: its death is seen at the watch's next look.
    let b = dir.node(2);
    let watch = watch(2, Duration::from_millis(10));
    let asleep = std::thread::spawn(move || watch.wait_dead(WAIT * 4));
    std::thread::sleep(Duration::from_millis(50));
    drop(b);
    assert!(asleep.join().unwrap());
    drop(a);
}

/// A node that is dropped and started again takes a higher incarnation number, as one that was
/// killed does (t14).
#[test]
fn t21_clean_restart_takes_a_higher_incarnation() {
    let dir = run_dir("t21");
    let first = dir.node(1);
    let inc = first.incarnation();
    let second = dir.restart(1, first).expect("restart node 1");
    assert!(
        second.incarnation() > inc,
        "restarted node has incarnation {} after {inc}",
        second.incarnation()
    );
}

/// The lock file keeps the last incarnation number, written in place at a fixed width (it was
/// truncated first: a start killed in between left it empty, and the next start took
/// incarnation 1 again, which peers still bound to the first one let in). A lock file that
/// holds something else is refused rather than read as 0, and region files left behind by
/// an incarnation count too.
#[test]
fn t21b_incarnation_numbers_are_not_reused_from_a_damaged_lock_file() {
    let dir = run_dir("t21b");
    let first = dir.node(1);
    let inc = first.incarnation();
    drop(first);
    let lock = dir.path().join("n1.lock");
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), format!("{inc:010}\n"));

    for garbled in [&b"not a number\n"[..], &[0xff, 0xfe, b'\n']] {
        std::fs::write(&lock, garbled).unwrap();
        let err = dir.create(1).err().expect("a garbled lock file is refused");
        assert!(err.to_string().contains("not an incarnation number"), "{err}");
    }

    // Emptied, with a region file of incarnation 40 left behind.
    std::fs::write(&lock, "").unwrap();
    std::fs::write(dir.path().join("n1.i40.r0"), b"").unwrap();
    let again = dir.node(1);
    assert_eq!(again.incarnation(), 41);
}

/// In-process restart: a peer that is dropped and created again is unreachable through the old
/// connection until it is brought up again, and then operations reach the new incarnation's
/// memory. The restarted peer cannot use the access granted to its predecessor either.
#[test]
fn t22_restarted_peer_in_process_needs_reconnect() {
    let dir = run_dir("t22");
    let ch1 = |peer| ConnId::new(NodeId(peer), 1);
    let a = dir.node(0);
    let a_region = a.register_region(DATA, 4096, Access::ALL).unwrap();
    let b = dir.node(1);
    let b_old = b.register_region(DATA, 4096, Access::ALL).unwrap();
    for c in [conn(0), ch1(0)] {
        b.connect(c, Access::ALL).unwrap();
    }
    for c in [conn(1), ch1(1)] {
        a.connect(c, Access::ALL).unwrap();
    }
    let mut ep = a.endpoint(8).unwrap();
    ep.attach(conn(1)).unwrap();
    assert_eq!(
        run_one(&mut ep, conn(1), &write_inline(1, b"old", remote(0))).status,
        Status::Success
    );
    let old_inc = b.incarnation();
    let b = dir.restart(1, b).expect("restart node 1");
    assert!(b.incarnation() > old_inc, "incarnation {} after {old_inc}", b.incarnation());
    let b_new = b.register_region(DATA, 4096, Access::ALL).unwrap();
    for c in [conn(0), ch1(0)] {
        b.connect(c, Access::ALL).unwrap();
    }
    // Through the connection bound to the old incarnation: unreachable.
    let c = run_one(&mut ep, conn(1), &write_inline(2, b"lost", remote(0)));
    assert_eq!(c.status, Status::PeerUnreachable);
    // The new incarnation cannot write through a's side that still grants the old one.
    let mut b_ep = b.endpoint(8).unwrap();
    b_ep.attach(ch1(0)).unwrap();
    let c = run_one(&mut b_ep, ch1(0), &write_inline(3, b"sneak", remote(64)));
    assert_eq!(c.status, Status::PeerUnreachable, "a new incarnation used its predecessor's grant");
    assert_eq!(read_back(&a_region, 64, 5), [0; 5]);

    // Brought up again, the connection reaches the new incarnation's memory, not the old.
    a.connect(conn(1), Access::ALL).unwrap();
    assert_eq!(
        run_one(&mut ep, conn(1), &write_inline(4, b"new", remote(0))).status,
        Status::Success
    );
    assert_eq!(read_back(&b_new, 0, 3), b"new");
    assert_eq!(read_back(&b_old, 0, 3), b"old");
    a.connect(ch1(1), Access::ALL).unwrap();
    b.connect(ch1(0), Access::ALL).unwrap();
    assert_eq!(
        run_one(&mut b_ep, ch1(0), &write_inline(5, b"hello", remote(64))).status,
        Status::Success
    );
    assert_eq!(read_back(&a_region, 64, 5), b"hello");
}

/// Restart across processes: the peer's process is killed and a new one starts the same node.
/// The old connection is unreachable until brought up again, then operations land in the new
/// incarnation's region (not the old one); the new incarnation cannot write through a grant made
/// to the old one.
#[test]
fn t23_restarted_child_peer_needs_reconnect() {
    let dir = run_dir("t23");
    let ch1 = |peer| ConnId::new(NodeId(peer), 1);
    let a = dir.node(0);
    let a_region = a.register_region(DATA, 4096, Access::ALL).unwrap();
    let (mut old, old_inc) = ChildNode::run(&dir, &host_spec(1, 4096, &[conn(0), ch1(0)]));
    for c in [conn(1), ch1(1)] {
        a.connect(c, Access::ALL).unwrap();
    }
    let mut ep = a.endpoint(8).unwrap();
    ep.attach(conn(1)).unwrap();
    assert_eq!(
        run_one(&mut ep, conn(1), &write_inline(1, b"old", remote(0))).status,
        Status::Success
    );
    // Keep the old region's file open: the new incarnation unlinks it.
    let old_file = File::open(layout::region_file(dir.path(), NodeId(1), old_inc, DATA)).unwrap();
    old.kill();
    // Dead and not started again (its control file is still there): binding fails, saying so.
    let err = a.connect(ConnId::new(NodeId(1), 2), Access::ALL).expect_err("a dead peer");
    assert!(matches!(err, FabricError::PeerUnreachable(..)), "{err}");
    assert_mentions(&err, &format!("incarnation {old_inc}) is dead"));

    let spec = TaskSpec {
        node: NodeId(1),
        regions: vec![(DATA, 4096, Access::ALL)],
        connect: vec![(conn(0), Access::ALL), (ch1(0), Access::ALL)],
        program: Program::WriteLoop { conn: ch1(0), remote: remote(64), len: 16 },
    };
    let (mut new, new_inc) = ChildNode::run(&dir, &spec);
    assert!(new_inc > old_inc, "incarnation {new_inc} after {old_inc}");

    // Through the connection bound to the old incarnation: unreachable, and nothing lands.
    let c = run_one(&mut ep, conn(1), &write_inline(2, b"lost", remote(0)));
    assert_eq!(c.status, Status::PeerUnreachable);
    let new_path = layout::region_file(dir.path(), NodeId(1), new_inc, DATA);
    assert_eq!(read_file_at(&new_path, HEADER_BYTES as u64, 4), [0; 4]);

    // The new incarnation's writes through a's side granted to the old one are refused.
    new.say("START");
    let (ops_ok, status) = new.outcome();
    assert_eq!((ops_ok, status), (0, Some(Status::PeerUnreachable)));
    assert_eq!(read_back(&a_region, 64, 16), [0; 16], "a new incarnation used an old grant");

    // Brought up again, the connection reaches the new incarnation's memory, not the old.
    a.connect(conn(1), Access::ALL).unwrap();
    assert_eq!(
        run_one(&mut ep, conn(1), &write_inline(3, b"new", remote(0))).status,
        Status::Success
    );
    assert_eq!(read_file_at(&new_path, HEADER_BYTES as u64, 3), b"new");
    let mut old_bytes = [0u8; 3];
    old_file.read_exact_at(&mut old_bytes, HEADER_BYTES as u64).unwrap();
    assert_eq!(&old_bytes, b"old");
    let mut read_back_buf = [0u8; 3];
    let wr = WorkRequest::read(4, LocalSlice { region: DATA, offset: 200, len: 3 }, remote(0));
    assert_eq!(run_one(&mut ep, conn(1), &wr).status, Status::Success);
    a_region.read(200, &mut read_back_buf).unwrap();
    assert_eq!(&read_back_buf, b"new");
}

/// Revoking a writer that is stopped (SIGSTOP) but not in the middle of an operation succeeds on
/// the fast path at once, without fencing it; once let go, its next write is denied.
#[test]
fn t24_fast_revoke_of_an_idle_stopped_writer() {
    let dir = run_dir("t24");
    let t = dir.node(0);
    let region = t.register_region(DATA, 4096, Access::ALL).unwrap();
    let spec = TaskSpec {
        node: NodeId(1),
        regions: vec![(DATA, 4096, Access::ALL)],
        connect: vec![(conn(0), Access::NONE)],
        program: Program::WriteLoop { conn: conn(0), remote: remote(0), len: 64 },
    };
    let (mut w, _) = ChildNode::run(&dir, &spec);
    t.connect(conn(1), Access::READ_WRITE).unwrap();
    w.say("START");
    let start = Instant::now();
    while read_back(&region, 0, 1)[0] == 0 {
        assert!(start.elapsed() < WAIT, "the writer never wrote");
        std::thread::yield_now();
    }
    // Stop the writer between two operations.
    let pid = w.pid();
    loop {
        assert!(start.elapsed() < WAIT, "never caught the writer outside an operation");
        w.signal(libc::SIGSTOP);
        wait_stopped(pid, WAIT);
        if t.peer_inflight_seq(conn(1)).unwrap() % 2 == 0 {
            break;
        }
        w.signal(libc::SIGCONT);
        std::thread::sleep(Duration::from_micros(200));
    }
    let revoke = Instant::now();
    t.set_access_fast(conn(1), Access::READ)
        .expect("an idle writer does not make the fast path busy");
    let took = revoke.elapsed();
    // Generous for a loaded machine; a fast path that waited for the stopped writer would hang.
    assert!(took < Duration::from_secs(1), "the fast revoke took {took:?}");
    assert_eq!(proc_state(pid), Some('T'), "the idle writer was fenced or woken");
    assert!(w.try_reap().is_none(), "the idle writer died");
    assert_eq!(t.qp_state(conn(1)).unwrap(), QpState::ReadyToSend);
    assert_eq!(t.qp_access(conn(1)).unwrap(), Access::READ);
    let after_revoke = read_back(&region, 0, 64);

    w.signal(libc::SIGCONT);
    let (ops_ok, status) = w.outcome();
    assert!(ops_ok > 0);
    assert_eq!(status, Some(Status::RemoteAccessDenied), "the writer's next write was not denied");
    assert_eq!(read_back(&region, 0, 64), after_revoke, "bytes landed after the revoke returned");
}

/// A writer stopped in the middle of a copy makes the fast path give up (`Busy`, the side moves
/// to error); the slow path then fences it: when `set_access_slow` returns the writer's process
/// is dead, and nothing of it lands afterwards.
#[test]
fn t25_slow_path_fences_a_writer_stopped_mid_copy() {
    const MIB: usize = 1 << 20;
    let dir = run_dir("t25");
    let t = dir.node(0);
    let region = t.register_region(DATA, MIB, Access::ALL).unwrap();
    let w_conn = conn(2);
    let spec = TaskSpec {
        node: NodeId(2),
        regions: vec![(DATA, MIB, Access::ALL)],
        connect: vec![(conn(0), Access::NONE)],
        program: Program::WriteLoop { conn: conn(0), remote: remote(0), len: MIB as u32 },
    };
    let (mut w, _) = ChildNode::run(&dir, &spec);
    t.connect(w_conn, Access::READ_WRITE).unwrap();
    w.say("START");

    // Stop the writer with a write in flight (the technique of the conformance harness too).
    w.hold_mid_write(&t, w_conn);

    let fast = t.set_access_fast(w_conn, Access::READ);
    assert_eq!(fast, Err(PermError::Busy(w_conn)), "the fast path must give up on a stuck writer");
    assert_eq!(t.qp_state(w_conn).unwrap(), QpState::Error, "Busy must leave the side in error");
    assert!(w.try_reap().is_none(), "the fast path must not fence");

    t.set_access_slow(w_conn, Access::READ).expect("the slow path always succeeds");
    let status = w.try_reap().expect("the stuck writer is still alive after the slow path");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the writer ended with {status:?}");
    assert_eq!(t.qp_state(w_conn).unwrap(), QpState::ReadyToSend);
    assert_eq!(t.qp_access(w_conn).unwrap(), Access::READ);
    let after_revoke = read_back(&region, 0, MIB);
    std::thread::sleep(Duration::from_millis(50));
    assert!(read_back(&region, 0, MIB) == after_revoke, "bytes landed after the revoke returned");
    assert_eq!(w.line(), None, "a fenced writer reported an outcome");
}

/// Everything a node writes in its run directory is owner-only: the directory it creates is
/// 0700 and its lock, control and region files are 0600.
#[test]
fn t26_node_files_are_owner_only() {
    let base = run_dir("t26");
    let run = base.path().join("run");
    let a = ShmFabric::create(ShmConfig::new(&run, CLUSTER, NodeId(0))).expect("node 0");
    let b = ShmFabric::create(ShmConfig::new(&run, CLUSTER, NodeId(1))).expect("node 1");
    let _ra = a.register_region(DATA, 4096, Access::ALL).unwrap();
    let _rb = b.register_region(RegionId(3), 100, Access::READ).unwrap();
    a.connect(conn(1), Access::ALL).unwrap();
    assert_eq!(mode_of(&run), 0o700, "the run directory is not private");
    let expected = ["n0.ctl", "n0.i1.r0", "n0.lock", "n1.ctl", "n1.i1.r3", "n1.lock"];
    for name in expected {
        let path = run.join(name);
        assert!(path.exists(), "{name} is missing");
        assert_eq!(mode_of(&path), 0o600, "{name} has mode {:o}", mode_of(&path));
    }
}

/// The cluster file too: every file of the run directory is owner-only, whatever the umask.
#[test]
fn t27_every_run_dir_file_is_owner_only() {
    // SAFETY: umask has no preconditions. 022 is the common default; the backend must not
    // depend on a stricter one.
    let old = unsafe { libc::umask(0o022) };
    let base = run_dir("t27");
    let run = base.path().join("run");
    let created = ShmFabric::create(ShmConfig::new(&run, CLUSTER, NodeId(0)));
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let a = created.expect("node 0");
    let _r = a.register_region(DATA, 4096, Access::ALL).unwrap();
    assert_eq!(mode_of(&run), 0o700);
    let mut loose = Vec::new();
    for entry in std::fs::read_dir(&run).unwrap() {
        let entry = entry.unwrap();
        let mode = mode_of(&entry.path());
        if mode != 0o600 {
            loose.push(format!("{} {mode:o}", entry.file_name().to_string_lossy()));
        }
    }
    assert!(loose.is_empty(), "files that are not 0600: {loose:?}");
}

/// Nodes of one cluster that start at the same moment in a fresh run directory all start: none
/// is refused for reading the cluster file while another is still writing it.
#[test]
fn t28_concurrent_first_start_in_a_fresh_run_dir() {
    use std::sync::{Arc, Barrier};
    let mut refused = Vec::new();
    for round in 0..400 {
        let dir = run_dir("t28");
        let barrier = Arc::new(Barrier::new(3));
        let starters: Vec<_> = (0..3u16)
            .map(|n| {
                let config = dir.config(n);
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    ShmFabric::create(config).map(|f| f.incarnation())
                })
            })
            .collect();
        for (n, s) in starters.into_iter().enumerate() {
            match s.join().expect("starter panicked") {
                Ok(inc) => assert_eq!(inc, 1, "round {round}: node {n}"),
                Err(e) => refused.push(format!("round {round}, node {n}: {e}")),
            }
        }
        if !refused.is_empty() {
            break;
        }
    }
    assert!(refused.is_empty(), "a node of the same cluster was refused: {refused:?}");
}

/// A node dropped and started again in one process starts, even while another thread of the
/// process spawns programs (a replica that runs helpers, a test harness).
#[test]
fn t29_restart_while_another_thread_spawns_processes() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let dir = run_dir("t29");
    let stop = Arc::new(AtomicBool::new(false));
    let spawner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut spawned = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let status = Command::new("true")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .status()
                    .expect("spawn true");
                assert!(status.success());
                spawned += 1;
            }
            spawned
        })
    };
    let mut refused = 0;
    let mut first_error = None;
    let mut node = Some(dir.node(1));
    for _ in 0..1000 {
        drop(node.take());
        match dir.create(1) {
            Ok(f) => node = Some(f),
            Err(e) => {
                refused += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let spawned = spawner.join().expect("spawner");
    assert!(spawned > 0, "nothing was spawned during the restarts");
    assert_eq!(
        refused, 0,
        "{refused} of 1000 restarts were refused, the first with {first_error:?}"
    );
}
