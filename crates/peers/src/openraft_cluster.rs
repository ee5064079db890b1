//! openraft in a harness of our own: three Raft nodes in one process on a tokio runtime, an
//! in-process network whose RPCs call the target node's `Raft` handle directly, an in-memory log
//! and an in-memory key-value state machine.
//!
//! One operation is `client_write` on the leader, timed until it returns: the entry is in a
//! majority's log and applied to the leader's state machine. With no network and no disk, this is
//! what the library itself costs per replicated write (its tasks, channels and wake-ups), a floor
//! for any deployment of it.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::{self, Cursor};
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Config, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, Raft,
    RaftLogReader, RaftSnapshotBuilder, ServerState, SnapshotMeta, StorageError, StoredMembership,
    Vote,
};

use crate::workload;
use crate::{Options, PeerError, Samples, System};

const NODES_COUNT: u64 = 3;

/// How long the cluster may take to elect its first leader.
const LEADER_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the final check waits for followers to apply the last write (they learn it is
/// committed from the leader's next message).
const VERIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// One write to the key-value state machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KvWrite {
    key: String,
    value: Vec<u8>,
}

openraft::declare_raft_types!(
    /// The types this harness runs openraft with.
    pub(crate) TypeConfig:
        D = KvWrite,
        R = (),
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        Responder = openraft::impls::OneshotResponder<TypeConfig>,
        AsyncRuntime = openraft::TokioRuntime,
);

type NodeId = u64;
type Handles = Arc<RwLock<BTreeMap<NodeId, Raft<TypeConfig>>>>;

/// Locks `mutex`, also after another holder panicked: every critical section here is a plain
/// update of in-memory values, and a panic elsewhere must not turn into a second one here.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn handles_of(handles: &Handles) -> BTreeMap<NodeId, Raft<TypeConfig>> {
    handles.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
}

pub(crate) fn measure(opts: &Options, progress: &mut dyn FnMut(u64)) -> Result<Samples, PeerError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("mu-peers-openraft")
        .build()
        .map_err(|error| {
            PeerError::Start(format!("openraft: starting a tokio runtime: {error}"))
        })?;
    let handles: Handles = Arc::default();
    let result = run(&runtime, &handles, opts, progress);
    // Stop every node, whatever the run's outcome, before the runtime goes.
    runtime.block_on(async {
        for raft in handles_of(&handles).into_values() {
            // A node that fails to stop cleanly is stopped anyway when the runtime is dropped.
            let _ = raft.shutdown().await;
        }
    });
    result
}

fn run(
    runtime: &tokio::runtime::Runtime,
    handles: &Handles,
    opts: &Options,
    progress: &mut dyn FnMut(u64),
) -> Result<Samples, PeerError> {
    let state_machines = runtime.block_on(start(handles))?;
    let leader = runtime.block_on(wait_for_leader(handles))?;
    let leader_id = leader.metrics().borrow().id;

    let mut last_log_id = None;
    let latencies_ns = workload::run(opts, progress, |index| {
        let write = KvWrite {
            key: workload::key(index),
            value: workload::value(index, opts.payload_bytes),
        };
        runtime.block_on(async {
            let start = Instant::now();
            let response = leader.client_write(write).await;
            let latency = start.elapsed();
            let response = response
                .map_err(|error| PeerError::Failed(format!("openraft: client_write: {error}")))?;
            last_log_id = Some(response.log_id);
            Ok(latency)
        })
    })?;
    let last_log_id =
        last_log_id.ok_or_else(|| PeerError::Failed("openraft: no write was made".to_string()))?;

    let last_index = workload::last_index(opts);
    runtime.block_on(verify(
        handles,
        &state_machines,
        last_log_id,
        last_index,
        opts.payload_bytes,
    ))?;
    let notes = format!(
        "{NODES_COUNT} nodes in one process (tokio multi-thread runtime), in-process network \
         calling the target's Raft handle, in-memory log and state machine; one operation = \
         client_write on the leader (node {leader_id}), timed until it returns (committed by a \
         majority, applied on the leader); checked: all {NODES_COUNT} state machines applied up \
         to {last_log_id} and hold the same data, the last write included"
    );
    Ok(Samples {
        system: System::Openraft,
        latencies_ns,
        version: "openraft 0.9".to_string(),
        notes,
    })
}

/// Creates the nodes, registers their handles for the network, and initializes the cluster with
/// all of them as voters. Returns each node's state machine, for the final check.
async fn start(handles: &Handles) -> Result<BTreeMap<NodeId, StateMachineStore>, PeerError> {
    let config = Config { cluster_name: "mu-peers".to_string(), ..Config::default() }
        .validate()
        .map_err(|error| PeerError::Start(format!("openraft: configuration: {error}")))?;
    let config = Arc::new(config);
    let mut state_machines = BTreeMap::new();
    for id in 0..NODES_COUNT {
        let state_machine = StateMachineStore::default();
        let network = Network { handles: Arc::clone(handles) };
        let raft =
            Raft::new(id, Arc::clone(&config), network, LogStore::default(), state_machine.clone())
                .await
                .map_err(|error| {
                    PeerError::Start(format!("openraft: creating node {id}: {error}"))
                })?;
        handles.write().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(id, raft);
        state_machines.insert(id, state_machine);
    }
    let members: BTreeMap<NodeId, BasicNode> =
        (0..NODES_COUNT).map(|id| (id, BasicNode::new("in-process"))).collect();
    let first = handles_of(handles)
        .remove(&0)
        .ok_or_else(|| PeerError::Start("openraft: node 0 is missing".to_string()))?;
    first.initialize(members).await.map_err(|error| {
        PeerError::Start(format!("openraft: initializing the cluster: {error}"))
    })?;
    Ok(state_machines)
}

/// Waits until a node is leader and has committed its first entry of its term (so it serves
/// writes at once), and returns its handle.
async fn wait_for_leader(handles: &Handles) -> Result<Raft<TypeConfig>, PeerError> {
    let deadline = Instant::now() + LEADER_TIMEOUT;
    loop {
        for raft in handles_of(handles).into_values() {
            let metrics = raft.metrics().borrow().clone();
            let term_committed = metrics
                .last_applied
                .is_some_and(|applied| applied.leader_id.term == metrics.current_term);
            if metrics.state == ServerState::Leader && term_committed {
                return Ok(raft);
            }
        }
        if Instant::now() >= deadline {
            return Err(PeerError::Start(format!(
                "openraft: no leader after {} s",
                LEADER_TIMEOUT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until every node applied `last_log_id`, then checks that all state machines stopped at
/// the same log id with the same data, and that the data has the last write.
async fn verify(
    handles: &Handles,
    state_machines: &BTreeMap<NodeId, StateMachineStore>,
    last_log_id: LogId<NodeId>,
    last_index: u64,
    payload_bytes: usize,
) -> Result<(), PeerError> {
    for (id, raft) in handles_of(handles) {
        raft.wait(Some(VERIFY_TIMEOUT))
            .applied_index_at_least(Some(last_log_id.index), "the last write")
            .await
            .map_err(|error| {
                PeerError::Failed(format!(
                    "openraft: node {id} did not apply {last_log_id}: {error}"
                ))
            })?;
    }
    let key = workload::key(last_index);
    let expected = workload::value(last_index, payload_bytes);
    let mut reference: Option<(NodeId, BTreeMap<String, Vec<u8>>)> = None;
    for (&id, state_machine) in state_machines {
        let (applied, data) = {
            let state = lock(&state_machine.inner);
            (state.last_applied, state.data.clone())
        };
        if applied != Some(last_log_id) {
            return Err(PeerError::Failed(format!(
                "openraft: node {id} applied up to {applied:?}, the last write is {last_log_id}"
            )));
        }
        if data.get(&key) != Some(&expected) {
            return Err(PeerError::Failed(format!(
                "openraft: node {id} does not have the last write to {key}"
            )));
        }
        match &reference {
            None => reference = Some((id, data)),
            Some((reference_id, reference_data)) if *reference_data != data => {
                return Err(PeerError::Failed(format!(
                    "openraft: nodes {reference_id} and {id} applied the same log but hold \
                     different data"
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The in-process network: one per node, handing out connections to any other node.
struct Network {
    handles: Handles,
}

/// A "connection" to one node: each RPC calls that node's `Raft` handle.
struct Connection {
    target: NodeId,
    handles: Handles,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Connection {
        Connection { target, handles: Arc::clone(&self.handles) }
    }
}

impl Connection {
    fn target_raft(&self) -> Result<Raft<TypeConfig>, Unreachable> {
        let handles = self.handles.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        handles.get(&self.target).cloned().ok_or_else(|| {
            let error = io::Error::new(io::ErrorKind::NotFound, "no such node in this process");
            Unreachable::new(&error)
        })
    }
}

type RpcResult<T, E = openraft::error::Infallible> =
    Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        request: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        let raft = self.target_raft()?;
        raft.append_entries(request)
            .await
            .map_err(|error| RPCError::RemoteError(RemoteError::new(self.target, error)))
    }

    async fn install_snapshot(
        &mut self,
        request: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        let raft = self.target_raft()?;
        raft.install_snapshot(request)
            .await
            .map_err(|error| RPCError::RemoteError(RemoteError::new(self.target, error)))
    }

    async fn vote(
        &mut self,
        request: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        let raft = self.target_raft()?;
        raft.vote(request)
            .await
            .map_err(|error| RPCError::RemoteError(RemoteError::new(self.target, error)))
    }
}

/// The in-memory log of one node. Clones share the log: openraft reads it through a clone while
/// the node appends to it.
#[derive(Clone, Default)]
struct LogStore {
    inner: Arc<Mutex<LogData>>,
}

#[derive(Default)]
struct LogData {
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
    entries: BTreeMap<u64, Entry<TypeConfig>>,
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let log = lock(&self.inner);
        Ok(log.entries.range(range).map(|(_, entry)| entry.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let log = lock(&self.inner);
        let last_log_id =
            log.entries.last_key_value().map(|(_, entry)| entry.log_id).or(log.last_purged);
        Ok(LogState { last_purged_log_id: log.last_purged, last_log_id })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        lock(&self.inner).vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(lock(&self.inner).vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        lock(&self.inner).committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(lock(&self.inner).committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        {
            let mut log = lock(&self.inner);
            for entry in entries {
                log.entries.insert(entry.log_id.index, entry);
            }
        }
        // Memory is this log's durable storage: the entries are "flushed" once inserted.
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut log = lock(&self.inner);
        let _removed = log.entries.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut log = lock(&self.inner);
        let kept = log.entries.split_off(&(log_id.index + 1));
        log.entries = kept;
        log.last_purged = Some(log_id);
        Ok(())
    }
}

/// The key-value state machine of one node. Clones share it: the harness keeps one to check the
/// data at the end.
#[derive(Clone, Default)]
struct StateMachineStore {
    inner: Arc<Mutex<StateMachineData>>,
}

#[derive(Default)]
struct StateMachineData {
    last_applied: Option<LogId<NodeId>>,
    last_membership: StoredMembership<NodeId, BasicNode>,
    data: BTreeMap<String, Vec<u8>>,
    snapshot: Option<StoredSnapshot>,
    snapshots_built_count: u64,
}

#[derive(Clone)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, BasicNode>,
    bytes: Vec<u8>,
}

impl StoredSnapshot {
    fn to_snapshot(&self) -> Snapshot<TypeConfig> {
        Snapshot { meta: self.meta.clone(), snapshot: Box::new(Cursor::new(self.bytes.clone())) }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = StateMachineStore;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let state = lock(&self.inner);
        Ok((state.last_applied, state.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut state = lock(&self.inner);
        let mut responses = Vec::new();
        for entry in entries {
            state.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(write) => {
                    state.data.insert(write.key, write.value);
                }
                EntryPayload::Membership(membership) => {
                    state.last_membership = StoredMembership::new(Some(entry.log_id), membership);
                }
            }
            responses.push(());
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> StateMachineStore {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let bytes = snapshot.into_inner();
        let data = decode_data(&bytes).ok_or_else(|| {
            StorageError::from_io_error(
                ErrorSubject::Snapshot(Some(meta.signature())),
                ErrorVerb::Read,
                io::Error::new(io::ErrorKind::InvalidData, "malformed snapshot"),
            )
        })?;
        let mut state = lock(&self.inner);
        state.data = data;
        state.last_applied = meta.last_log_id;
        state.last_membership = meta.last_membership.clone();
        state.snapshot = Some(StoredSnapshot { meta: meta.clone(), bytes });
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        Ok(lock(&self.inner).snapshot.as_ref().map(StoredSnapshot::to_snapshot))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let mut state = lock(&self.inner);
        state.snapshots_built_count += 1;
        let snapshot_id = match state.last_applied {
            Some(log_id) => format!("{}-{}", log_id, state.snapshots_built_count),
            None => format!("empty-{}", state.snapshots_built_count),
        };
        let meta = SnapshotMeta {
            last_log_id: state.last_applied,
            last_membership: state.last_membership.clone(),
            snapshot_id,
        };
        let stored = StoredSnapshot { meta, bytes: encode_data(&state.data) };
        let snapshot = stored.to_snapshot();
        state.snapshot = Some(stored);
        Ok(snapshot)
    }
}

/// The key-value data as bytes: a count, then each key and value with a length in front.
fn encode_data(data: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&(data.len() as u64).to_le_bytes());
    for (key, value) in data {
        for field in [key.as_bytes(), value.as_slice()] {
            bytes.extend_from_slice(&(field.len() as u64).to_le_bytes());
            bytes.extend_from_slice(field);
        }
    }
    bytes
}

/// The inverse of [`encode_data`]; `None` for bytes it did not produce.
fn decode_data(bytes: &[u8]) -> Option<BTreeMap<String, Vec<u8>>> {
    fn take<'a>(bytes: &mut &'a [u8], count: usize) -> Option<&'a [u8]> {
        if bytes.len() < count {
            return None;
        }
        let (taken, rest) = bytes.split_at(count);
        *bytes = rest;
        Some(taken)
    }
    fn take_length(bytes: &mut &[u8]) -> Option<usize> {
        let raw: [u8; 8] = take(bytes, 8)?.try_into().ok()?;
        usize::try_from(u64::from_le_bytes(raw)).ok()
    }
    let mut rest = bytes;
    let count = take_length(&mut rest)?;
    let mut data = BTreeMap::new();
    for _ in 0..count {
        let key_length = take_length(&mut rest)?;
        let key = String::from_utf8(take(&mut rest, key_length)?.to_vec()).ok()?;
        let value_length = take_length(&mut rest)?;
        let value = take(&mut rest, value_length)?.to_vec();
        data.insert(key, value);
    }
    rest.is_empty().then_some(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_data_round_trips_and_garbage_is_rejected() {
        let mut data = BTreeMap::new();
        data.insert("a".to_string(), b"1".to_vec());
        data.insert("bb".to_string(), Vec::new());
        let bytes = encode_data(&data);
        assert_eq!(decode_data(&bytes), Some(data));
        assert_eq!(decode_data(&bytes[..bytes.len() - 1]), None);
        assert_eq!(decode_data(&[0xff; 8]), None);
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert_eq!(decode_data(&trailing), None);
    }
}
