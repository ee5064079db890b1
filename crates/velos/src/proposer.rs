//! The proposer (Velos Algorithm 5, §5.1, §5.2, §5.4): one Paxos instance per log index, every
//! message a compare-and-swap on an acceptor's slot word, decided in index order with one accept
//! in flight and `prepare_ahead` indices prepared in advance.
//!
//! The engine owns no thread, clock or connection. It reads and changes this replica's own
//! region through [`Memory`] (this replica is one of the acceptors: its own CAS is a local
//! one), emits [`Action`]s for the remote acceptors, and takes their completions back.

use crate::layout::VelosLayout;
use crate::word::{lap_of, Proposals, SlotWord, View, LAPS};
use mu_log::{EntryKind, Slot};

/// This replica's own Velos region, as the proposer sees it.
pub trait Memory {
    /// Loads the 8-byte word at `offset`.
    fn load_word(&self, offset: u64) -> u64;
    /// Compare-and-swap on the word at `offset`, atomic with the remote ones; returns the
    /// previous value, or `None` if the swap could not be carried out (a fabric whose local
    /// swap goes through its own network card, and failed). The proposer then stops leading
    /// ([`StopReason::LocalSwapFailed`]).
    fn cas_word(&mut self, offset: u64, expected: u64, desired: u64) -> Option<u64>;
    /// Copies `out.len()` bytes at `offset` into `out`.
    fn read(&self, offset: u64, out: &mut [u8]);
    /// Copies `data` to `offset`.
    fn write(&mut self, offset: u64, data: &[u8]);
}

/// A remote operation for the runtime to post on the connection to acceptor `peer` (a position).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Write `len` bytes of this replica's region at `offset` to the same offset at `peer`,
    /// unsignaled: only a failure completes ([`Proposer::on_error`]).
    Write { peer: usize, offset: u64, len: u32 },
    /// Compare-and-swap on the word at `offset` at `peer`; completes with
    /// [`Proposer::on_cas`] (or [`Proposer::on_error`]), passing `op` back.
    Cas { peer: usize, offset: u64, expected: u64, desired: u64, op: u64 },
    /// Read `len` bytes at `remote` at `peer` into this replica's region at `local`; completes
    /// with [`Proposer::on_read`] (or [`Proposer::on_error`]), passing `op` back.
    Read { peer: usize, remote: u64, local: u64, len: u32, op: u64 },
}

/// What the proposer tells its runtime besides actions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `index` is decided; its value is the entry for `index` in this replica's own value log.
    /// `submitted`: the value is the one [`Proposer::submit`] was given (then nothing is
    /// pending any more).
    Decided { index: u64, submitted: bool },
    /// The proposer stopped leading for good (until started again).
    Stopped(StopReason),
    /// Acceptor `acceptor`'s word for `index` is one no proposer writes
    /// ([`crate::word::SlotWord::is_malformed`]): its memory is corrupted, or the peer is
    /// faulty. It takes no part in that index (the others decide it). Said once per acceptor
    /// each time the proposer starts.
    MalformedWord { index: u64, acceptor: usize },
}

/// Why a proposer stopped by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StopReason {
    /// An acceptor's word for `index` is already in a later lap: `index` was decided and
    /// recycled while this proposer was away. Its state is stale.
    #[error("index {index} was recycled by newer leaders: this proposer's view is stale")]
    Stale { index: u64 },
    /// Deciding `index` would need a proposal number above [`crate::PROPOSAL_MAX`]. Never
    /// wrapped.
    #[error(
        "proposal numbers for index {index} are exhausted (limit {}): the index cannot be \
         decided by compare-and-swap any more",
        crate::PROPOSAL_MAX
    )]
    ProposalsExhausted { index: u64 },
    /// A compare-and-swap on this replica's own word for `index` failed ([`Memory::cas_word`]):
    /// its acceptor cannot take part in its own proposals. Whether the swap took effect is
    /// unknown, as with a remote one that failed.
    #[error(
        "a compare-and-swap on this replica's own word for index {index} failed: it cannot \
         lead with its own acceptor"
    )]
    LocalSwapFailed { index: u64 },
}

/// Why a submission was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("not leading")]
    NotLeading,
    #[error("a value is already pending")]
    Busy,
    #[error("value of {len} bytes is larger than an entry holds ({max} bytes)")]
    TooLarge { len: usize, max: usize },
}

/// Where the proposer is with one index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Nothing posted (or the last attempt aborted): prepares next.
    Idle,
    Preparing,
    /// A majority promised; accepts once it has a value.
    Prepared,
    /// Reading the value it must adopt.
    Reading,
    Accepting,
}

/// Setup of a proposer.
#[derive(Clone, Debug)]
pub struct ProposerConfig {
    /// This replica's position.
    pub me: usize,
    pub layout: VelosLayout,
    /// The acceptors, as a mask of positions (this replica among them).
    pub members: u64,
    /// Indices prepared ahead of the one being accepted (§5.1), 0 to [`PREPARE_AHEAD_MAX`].
    pub prepare_ahead: usize,
}

/// The proposal an entry carries when a new leader writes a decided value again (see
/// [`Proposer::start`]): above every proposal number, because a decided value is safe to adopt
/// at any proposal.
pub const REPUBLISHED_TAG: u64 = 1 << 32;

/// The most indices prepared ahead.
pub const PREPARE_AHEAD_MAX: usize = 63;

/// Bits of the operation ids the proposer hands out; the ones above are 0.
pub const OP_BITS: u32 = 62;

const NONE: u64 = u64::MAX;
const KIND_PREPARE: u64 = 0;
const KIND_ACCEPT: u64 = 1;
const KIND_READ: u64 = 2;

/// Serial numbers of operations count modulo 2^48 (days of operations at a billion a second):
/// only their order among the few in flight matters, which [`not_before`] compares across the
/// wrap.
const SERIAL_BITS: u32 = 48;
const SERIAL_MASK: u64 = (1 << SERIAL_BITS) - 1;

/// Operation ids: serial (48 bits) | kind (2) | window position (6) | peer (6). The top two
/// bits stay 0: a runtime may use them for operations of its own ([`OP_BITS`]).
fn op_id(serial: u64, kind: u64, ring: usize, peer: usize) -> u64 {
    debug_assert!(serial <= SERIAL_MASK && kind < 4 && ring < 64 && peer < 64);
    (serial << 14) | (kind << 12) | ((ring as u64) << 6) | peer as u64
}

/// The positions set in `mask`, lowest first.
fn bits(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let p = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            p
        })
    })
}

fn op_parts(op: u64) -> (u64, u64, usize, usize) {
    (op >> 14, (op >> 12) & 3, ((op >> 6) & 63) as usize, (op & 63) as usize)
}

/// Whether serial `s` was issued at or after serial `since` (both recent).
fn not_before(s: u64, since: u64) -> bool {
    s.wrapping_sub(since) & SERIAL_MASK < 1 << (SERIAL_BITS - 1)
}

/// The proposer's state for one index of its window.
#[derive(Clone, Debug)]
struct Track {
    index: u64,
    /// Operations with a serial below this were for an earlier index.
    first_serial: u64,
    /// Operations of the current attempt have a serial at least this.
    attempt_serial: u64,
    phase: Phase,
    proposal: u32,
    /// Per acceptor: the predicted word (Algorithm 5), the serial of the latest CAS posted,
    /// and the expected word of this attempt's CAS.
    predicted: Vec<u64>,
    latest: Vec<u64>,
    expected: Vec<u64>,
    /// Answers of the current attempt, as masks of positions.
    ok: u64,
    failed: u64,
    errored: u64,
    posted: u64,
    /// The highest accepted proposal the successful prepare answers reported, and who.
    highest: Option<(u32, usize)>,
    /// The value to accept, when it is not the submitted one (adopted).
    adopted: Option<(EntryKind, Vec<u8>)>,
    /// Per acceptor: the connection epoch the current accept's value write went out in.
    write_epoch: Vec<u64>,
}

impl Track {
    fn new(n: usize) -> Track {
        Track {
            index: NONE,
            first_serial: 0,
            attempt_serial: 0,
            phase: Phase::Idle,
            proposal: 0,
            predicted: vec![0; n],
            latest: vec![NONE; n],
            expected: vec![0; n],
            ok: 0,
            failed: 0,
            errored: 0,
            posted: 0,
            highest: None,
            adopted: None,
            write_epoch: vec![NONE; n],
        }
    }

    fn new_attempt(&mut self, serial: u64, phase: Phase) {
        self.attempt_serial = serial;
        self.phase = phase;
        self.ok = 0;
        self.failed = 0;
        self.errored = 0;
        self.posted = 0;
    }
}

/// The value submitted and not decided yet (its bytes are in `Proposer::pending_value`).
struct Pending {
    kind: EntryKind,
    /// The index it was first accepted at in this leadership and the proposal then: an entry
    /// of this proposer's at that index with a proposal at least this one carries it.
    at: Option<(u64, u32)>,
    /// Written into a value log at least once: another proposer may have adopted it since,
    /// so it may be decided whatever becomes of `at`.
    written: bool,
}

/// See the module docs.
pub struct Proposer {
    me: usize,
    layout: VelosLayout,
    proposals: Proposals,
    members: u64,
    majority: u32,
    leading: bool,
    /// The index accepted next (every index below is decided and applied here).
    next: u64,
    /// Indices from `next` to `next + ahead`, at `index % ring.len()`.
    ring: Vec<Track>,
    serial: u64,
    /// Positions whose connection failed and was not reconnected since.
    down: u64,
    /// The index of a local compare-and-swap that failed since the last poll: the next poll
    /// stops the proposer (stopping in the middle of a round of posts would leave half of it).
    local_swap_failed: Option<u64>,
    /// Acceptors whose malformed word was reported ([`Event::MalformedWord`]) since the
    /// proposer last started: a word that stays so would otherwise be reported at every
    /// prepare of its index.
    malformed_reported: u64,
    /// Per acceptor: bumped on each failure of its connection.
    epoch: Vec<u64>,
    /// Every live acceptor has applied the indices below this one.
    applied_floor: u64,
    /// The last index decided here; per acceptor, the epoch its final value write went out
    /// in is in `last_epochs` (for the piggybacked bit).
    last_decided: Option<u64>,
    last_epochs: Vec<u64>,
    pending: Option<Pending>,
    /// The bytes of the pending value; kept between values, so that a submission does not
    /// allocate.
    pending_value: Vec<u8>,
    actions: Vec<Action>,
    events: Vec<Event>,
    entry: Vec<u8>,
    slot_buf: Vec<u8>,
}

fn actions_per_round(window: usize, positions: usize) -> usize {
    window * positions * 2
}

impl Proposer {
    pub fn new(config: ProposerConfig) -> Result<Proposer, String> {
        let n = config.layout.positions();
        if config.me >= n {
            return Err(format!("position {} is not one of {n}", config.me));
        }
        if config.members == 0 || (n < 64 && config.members >> n != 0) {
            return Err(format!("members {:#x} is not a set of the {n} positions", config.members));
        }
        if config.prepare_ahead > PREPARE_AHEAD_MAX {
            return Err(format!(
                "prepare_ahead is {}, at most {PREPARE_AHEAD_MAX}",
                config.prepare_ahead
            ));
        }
        if config.prepare_ahead as u64 >= config.layout.slots_count() {
            return Err(format!(
                "prepare_ahead ({}) must be below slots_count ({})",
                config.prepare_ahead,
                config.layout.slots_count()
            ));
        }
        let slot = config.layout.slot_bytes() as usize;
        let window = config.prepare_ahead + 1;
        Ok(Proposer {
            me: config.me,
            layout: config.layout,
            proposals: Proposals::new(n),
            members: config.members,
            majority: config.members.count_ones() / 2 + 1,
            leading: false,
            local_swap_failed: None,
            malformed_reported: 0,
            next: 0,
            ring: (0..window).map(|_| Track::new(n)).collect(),
            serial: 1,
            down: 0,
            epoch: vec![0; n],
            applied_floor: 0,
            last_decided: None,
            last_epochs: vec![NONE; n],
            pending: None,
            pending_value: mu_log::written_room(config.layout.max_value_bytes()),
            // Sized for a round of the whole window, so that a new leader's first rounds do not
            // allocate (a follower never fills them).
            actions: Vec::with_capacity(actions_per_round(window, n)),
            events: Vec::with_capacity(window + 1),
            entry: mu_log::written_buffer(slot),
            slot_buf: mu_log::written_buffer(slot),
        })
    }

    /// The indices the proposer works on at once: the one accepted next and those prepared
    /// ahead.
    pub fn window(&self) -> usize {
        self.ring.len()
    }

    /// Room for the actions of a round of the whole window: for each index, an operation to
    /// every acceptor and the write of a value before it (a capacity, not a limit).
    pub fn actions_per_round(&self) -> usize {
        actions_per_round(self.window(), self.layout.positions())
    }

    pub fn is_leading(&self) -> bool {
        self.leading
    }

    /// The index accepted next.
    pub fn next_index(&self) -> u64 {
        self.next
    }

    /// The phase of the index accepted next, when leading.
    pub fn phase(&self) -> Option<Phase> {
        self.leading.then(|| self.ring[self.ring_pos(self.next)].phase)
    }

    /// The largest value an entry holds.
    pub fn max_value_bytes(&self) -> usize {
        self.layout.max_value_bytes()
    }

    /// Takes back the submitted value if it was never written anywhere (so it will never be
    /// decided); false if it may have been.
    pub fn withdraw(&mut self) -> bool {
        match &self.pending {
            Some(p) if !p.written => {
                self.pending = None;
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// Whether a submitted value waits to be decided.
    pub fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Starts leading from `first`, the first index not applied here; `last` is the entry of
    /// `first - 1` as applied here (none when `first` is 0). Every acceptor's word is predicted
    /// to be this replica's own word for the same index (§5.1: the previous leader CASed every
    /// acceptor alike), so re-preparing usually takes one round.
    ///
    /// The entry of `first - 1` is first written again into this proposer's own value log on
    /// every acceptor (under [`REPUBLISHED_TAG`]), so that its accept of `first` may carry the
    /// piggybacked bit (§5.4): an accept of `first` without it would erase what followers learn
    /// `first - 1` from.
    pub fn start(&mut self, first: u64, last: Option<(EntryKind, &[u8])>, mem: &mut dyn Memory) {
        assert_eq!(first == 0, last.is_none(), "the entry before the first index is given");
        assert!(self.is_member(), "only a member of the configuration leads");
        assert!(self.events.is_empty(), "the runtime takes every event before starting again");
        self.leading = true;
        self.local_swap_failed = None;
        self.malformed_reported = 0;
        self.next = first;
        self.pending = None;
        self.last_decided = None;
        for i in 0..self.ring.len() {
            self.assign(first + i as u64, mem);
        }
        if let Some((kind, value)) = last {
            let index = first - 1;
            let len = self
                .layout
                .log()
                .encode(index, REPUBLISHED_TAG, kind, value, &mut self.entry)
                .expect("an applied entry fits a slot");
            let offset = self.layout.value_slot_offset(self.me, index);
            mem.write(offset, &self.entry[..len]);
            self.last_epochs.fill(NONE);
            for p in bits(self.members) {
                if p != self.me && self.down & (1 << p) == 0 {
                    self.actions.push(Action::Write { peer: p, offset, len: len as u32 });
                    self.last_epochs[p] = self.epoch[p];
                }
            }
            self.last_decided = Some(index);
        }
    }

    /// Whether this replica is one of the acceptors.
    pub fn is_member(&self) -> bool {
        self.members >> self.me & 1 != 0
    }

    /// The configuration it asks (a mask of positions): the one [`Proposer::set_members`] set
    /// last, or the initial one.
    pub fn members(&self) -> u64 {
        self.members
    }

    /// The configuration changed (a membership entry was decided and applied, the Mu paper's
    /// §5.4): `members` are the acceptors of every index after the last one decided. Called by
    /// the runtime as it applies that entry, before the proposer moves on (the next accept
    /// comes from [`Proposer::poll`] or a completion of an adopting read, both after the
    /// runtime took the decision's event).
    ///
    /// The indices prepared ahead were prepared with a majority of the old configuration:
    /// each goes back to idle and is prepared again with a majority of the new one, so that
    /// every phase of an index runs in that index's configuration (what the old configuration
    /// promised is not counted, and answers still in flight belong to an old attempt and are
    /// ignored). A membership change is rare: the cost is one prepare round. A proposer
    /// removed from the configuration goes on leading (a proposer need not be an acceptor:
    /// it asks the members only, its own acceptor among them no more), so that its runtime can
    /// decide one entry more, from whose word the others learn that the removal was decided
    /// (§5.4's piggybacked decision); the runtime stops it then. Without that entry, followers
    /// that had not learned the removal could be left with a configuration whose live members
    /// are no majority, and no leader to tell them.
    pub fn set_members(&mut self, members: u64) {
        let n = self.layout.positions();
        assert!(
            members != 0 && (n >= 64 || members >> n == 0),
            "members {members:#x} is not a set of the {n} positions"
        );
        if members == self.members {
            return;
        }
        self.members = members;
        self.majority = members.count_ones() / 2 + 1;
        if !self.leading {
            return;
        }
        for i in 0..self.ring.len() {
            if self.ring[i].index == NONE || self.ring[i].index < self.next {
                continue;
            }
            let serial = self.next_serial();
            let t = &mut self.ring[i];
            t.highest = None;
            t.adopted = None;
            t.new_attempt(serial, Phase::Idle);
        }
    }

    /// Stops leading. A pending value may or may not be decided later, by another leader.
    /// Actions not yet drained are dropped: posted at a later start, they would rest on words
    /// read long before.
    pub fn stop(&mut self) {
        self.leading = false;
        self.pending = None;
        self.actions.clear();
        for t in &mut self.ring {
            t.index = NONE;
            t.phase = Phase::Idle;
            t.adopted = None;
        }
    }

    /// Every live acceptor has applied the indices below `floor`: indices up to
    /// `floor + slots_count - 1` may be prepared (their slot's previous lap is done with).
    pub fn set_applied_floor(&mut self, floor: u64) {
        self.applied_floor = self.applied_floor.max(floor);
    }

    /// Whether the index accepted next waits for acceptors to apply the previous lap.
    pub fn waits_for_room(&self) -> bool {
        self.leading && !self.fits(self.next)
    }

    /// The connection to `peer` was set up again: operations to it may go out.
    pub fn reconnected(&mut self, peer: usize) {
        self.down &= !(1 << peer);
    }

    /// Positions whose connection failed and was not set up again.
    pub fn down(&self) -> u64 {
        self.down
    }

    /// Proposes a value: it is decided at the first index this leader can give it.
    pub fn submit(&mut self, kind: EntryKind, value: &[u8]) -> Result<(), SubmitError> {
        if !self.leading {
            return Err(SubmitError::NotLeading);
        }
        if self.pending.is_some() {
            return Err(SubmitError::Busy);
        }
        let max = self.layout.max_value_bytes();
        if value.len() > max {
            return Err(SubmitError::TooLarge { len: value.len(), max });
        }
        self.pending_value.clear();
        self.pending_value.extend_from_slice(value);
        self.pending = Some(Pending { kind, at: None, written: false });
        Ok(())
    }

    /// Actions to carry out, oldest first.
    pub fn drain_actions(&mut self) -> std::vec::Drain<'_, Action> {
        self.actions.drain(..)
    }

    /// Events since the last call, oldest first.
    pub fn drain_events(&mut self) -> std::vec::Drain<'_, Event> {
        self.events.drain(..)
    }

    /// [`Proposer::drain_actions`] into `into`, which must be empty, by swapping the two
    /// vectors: nothing is copied, and neither allocates once both have their capacity (a
    /// runtime hands back the same vector, emptied, each time).
    pub fn take_actions(&mut self, into: &mut Vec<Action>) {
        assert!(into.is_empty(), "actions taken into a vector that holds some");
        std::mem::swap(&mut self.actions, into);
    }

    /// [`Proposer::drain_events`] into `into`, which must be empty, as
    /// [`Proposer::take_actions`] does.
    pub fn take_events(&mut self, into: &mut Vec<Event>) {
        assert!(into.is_empty(), "events taken into a vector that holds some");
        std::mem::swap(&mut self.events, into);
    }

    fn next_serial(&mut self) -> u64 {
        let s = self.serial;
        self.serial = (self.serial + 1) & SERIAL_MASK;
        s
    }

    fn ring_pos(&self, index: u64) -> usize {
        (index % self.ring.len() as u64) as usize
    }

    fn fits(&self, index: u64) -> bool {
        index < self.applied_floor.saturating_add(self.layout.slots_count())
    }

    fn lap(&self, index: u64) -> u16 {
        lap_of(index, self.layout.slots_count())
    }

    /// Gives the window position of `index` to it, predicting every acceptor's word as the
    /// local one.
    fn assign(&mut self, index: u64, mem: &dyn Memory) {
        let local = mem.load_word(self.layout.word_offset(index));
        // This replica restarted and abstains in the slot (`crate::recovery`): its word says
        // nothing of the others', which are guessed fresh (a wrong guess costs a round).
        // (As abstaining counts a malformed word too, `SlotWord::view`: predicted for every
        // acceptor, it left none to ask, and the index was never prepared.)
        let others = if SlotWord::unpack(local).view(self.lap(index)) == View::Abstains {
            let before = (u64::from(self.lap(index)) + LAPS - 1) % LAPS;
            SlotWord { lap: before as u16, ..SlotWord::default() }.pack()
        } else {
            local
        };
        let pos = self.ring_pos(index);
        let serial = self.serial;
        let me = self.me;
        let t = &mut self.ring[pos];
        t.index = index;
        t.first_serial = serial;
        t.proposal = 0;
        t.highest = None;
        t.adopted = None;
        t.predicted.fill(others);
        t.predicted[me] = local;
        t.latest.fill(NONE);
        t.write_epoch.fill(NONE);
        t.new_attempt(serial, Phase::Idle);
    }

    /// Moves the proposer on: accepts (or adopts) at the next index once it is prepared, then
    /// prepares the window's idle indices when they are due.
    ///
    /// Batch pre-preparation (§5.1, and the batch the paper's §5.2 wishes off the critical
    /// path): the indices ahead are prepared together, once none of them is left prepared, or
    /// whenever no submitted value waits (an idle leader's time), or when the next index itself
    /// needs preparing (a new leader, an aborted round). Preparing each index as it enters the
    /// window instead put a whole prepare round (a CAS per acceptor) before every accept; on a
    /// fabric that executes operations as they are posted (shared memory) that round was paid
    /// on every proposal's path. With `prepare_ahead` indices ahead, a leader proposing back
    /// to back now pays for their prepares once per `prepare_ahead` values, after an accept.
    pub fn poll(&mut self, mem: &mut dyn Memory) {
        if !self.leading {
            return;
        }
        if let Some(index) = self.local_swap_failed.take() {
            return self.stop_with(StopReason::LocalSwapFailed { index });
        }
        self.refill(mem);
        let reachable = (self.members & !self.down).count_ones();
        if reachable < self.majority {
            return;
        }
        let next_pos = self.ring_pos(self.next);
        if self.ring[next_pos].phase == Phase::Prepared {
            self.adopt_or_accept(mem);
            if !self.leading {
                return;
            }
        }
        let next_idle = self.ring[next_pos].phase == Phase::Idle;
        let ahead_ready = (1..self.ring.len() as u64)
            .filter(|&i| self.ring[self.ring_pos(self.next + i)].phase != Phase::Idle)
            .count();
        if !(next_idle || ahead_ready == 0 || self.pending.is_none()) {
            return;
        }
        for i in 0..self.ring.len() as u64 {
            let index = self.next + i;
            if !self.leading || !self.fits(index) {
                break;
            }
            if self.ring[self.ring_pos(index)].phase == Phase::Idle {
                self.prepare(index, mem);
            }
        }
    }

    fn stop_with(&mut self, reason: StopReason) {
        self.stop();
        self.events.push(Event::Stopped(reason));
    }

    /// Algorithm 5, lines 14–24: raise the proposal above every predicted min proposal, then
    /// CAS each acceptor's word to promise it, keeping what it accepted.
    fn prepare(&mut self, index: u64, mem: &mut dyn Memory) {
        let pos = self.ring_pos(index);
        let lap = self.lap(index);
        let mut floor = 0;
        let mut stale = false;
        let mut abstaining = 0;
        for p in bits(self.members) {
            let word = SlotWord::unpack(self.ring[pos].predicted[p]);
            match word.view(lap) {
                View::Current(s) => floor = floor.max(s.min),
                View::Fresh => {}
                View::Newer => stale = true,
                View::Abstains => {
                    abstaining |= 1 << p;
                    if word.is_malformed() {
                        self.report_malformed(index, p);
                    }
                }
            }
        }
        if stale {
            return self.stop_with(StopReason::Stale { index });
        }
        if (self.members & !self.down & !abstaining).count_ones() < self.majority {
            // Too few acceptors take part in this index now: wait, as with too few reachable.
            return;
        }
        let t = &self.ring[pos];
        let proposal = if t.proposal > floor {
            t.proposal
        } else {
            match self.proposals.above(floor.max(t.proposal), self.me) {
                Some(b) => b,
                None => return self.stop_with(StopReason::ProposalsExhausted { index }),
            }
        };
        let serial = self.serial;
        let t = &mut self.ring[pos];
        t.proposal = proposal;
        t.highest = None;
        t.adopted = None;
        t.new_attempt(serial, Phase::Preparing);
        // An acceptor that abstains in this index is asked nothing: it cannot answer.
        t.errored = abstaining;
        for p in bits(self.members & !abstaining) {
            let predicted = self.ring[pos].predicted[p];
            let desired = match SlotWord::unpack(predicted).view(lap) {
                View::Current(s) => SlotWord { min: proposal, ..s },
                _ => SlotWord { min: proposal, accepted: 0, lap, prev_decided: false },
            };
            self.cas(pos, p, KIND_PREPARE, predicted, desired.pack(), mem);
        }
    }

    /// Posts (or, on this replica's own acceptor, performs) a CAS, predicting it succeeds
    /// (Algorithm 5, lines 28–29).
    fn cas(
        &mut self,
        pos: usize,
        p: usize,
        kind: u64,
        expected: u64,
        desired: u64,
        mem: &mut dyn Memory,
    ) {
        let serial = self.next_serial();
        let offset = self.layout.word_offset(self.ring[pos].index);
        let t = &mut self.ring[pos];
        t.expected[p] = expected;
        t.latest[p] = serial;
        t.predicted[p] = desired;
        t.posted |= 1 << p;
        let op = op_id(serial, kind, pos, p);
        if p == self.me {
            let old = match self.local_swap_failed {
                None => mem.cas_word(offset, expected, desired),
                Some(_) => None,
            };
            match old {
                Some(old) => self.on_cas(op, old),
                None => {
                    // No answer from our own acceptor, and the next poll stops us. Not marked
                    // down as a peer would be (`on_error`): nothing would take that back if we
                    // were stopped before that poll and started again.
                    self.local_swap_failed.get_or_insert(self.ring[pos].index);
                    self.ring[pos].errored |= 1 << p;
                    self.settle(pos);
                }
            }
        } else if self.down & (1 << p) != 0 {
            self.on_error(op);
        } else {
            self.actions.push(Action::Cas { peer: p, offset, expected, desired, op });
        }
    }

    /// Says that acceptor `acceptor`'s word for `index` is malformed, once per acceptor since
    /// the proposer started, and only while it leads (the runtime takes every event before it
    /// starts it again).
    fn report_malformed(&mut self, index: u64, acceptor: usize) {
        if self.leading && self.malformed_reported & (1 << acceptor) == 0 {
            self.malformed_reported |= 1 << acceptor;
            self.events.push(Event::MalformedWord { index, acceptor });
        }
    }

    /// A CAS completed, with the word's previous value.
    pub fn on_cas(&mut self, op: u64, old: u64) {
        let (serial, kind, pos, p) = op_parts(op);
        let Some(t) = self.ring.get_mut(pos) else { return };
        if t.index == NONE || !not_before(serial, t.first_serial) {
            return;
        }
        let latest = t.latest[p] == serial;
        let current = not_before(serial, t.attempt_serial);
        let success = current && old == t.expected[p];
        if latest && old != t.expected[p] {
            // Algorithm 5, line 31: a failed CAS returns the acceptor's state.
            t.predicted[p] = old;
        }
        if !current {
            return;
        }
        let (index, lap) = (t.index, lap_of(t.index, self.layout.slots_count()));
        if !success && SlotWord::unpack(old).view(lap) == View::Abstains {
            // A restarted acceptor that takes no part in this index: no answer, not a refusal
            // (an abort would only find it abstaining again). Or a malformed word, read so.
            t.errored |= 1 << p;
            if SlotWord::unpack(old).is_malformed() {
                self.report_malformed(index, p);
            }
        } else if success {
            t.ok |= 1 << p;
            if kind == KIND_PREPARE {
                if let View::Current(s) = SlotWord::unpack(old).view(lap) {
                    if s.accepted != 0 && t.highest.is_none_or(|(b, _)| s.accepted > b) {
                        t.highest = Some((s.accepted, p));
                    }
                }
            }
        } else {
            t.failed |= 1 << p;
        }
        self.settle(pos);
    }

    /// An operation failed without executing (connection broken, peer unreachable).
    pub fn on_error(&mut self, op: u64) {
        let (serial, kind, pos, p) = op_parts(op);
        if p < self.epoch.len() && self.down & (1 << p) == 0 {
            self.down |= 1 << p;
            self.epoch[p] += 1;
        }
        let Some(t) = self.ring.get_mut(pos) else { return };
        if t.index == NONE || !not_before(serial, t.attempt_serial) {
            return;
        }
        if kind == KIND_READ {
            if t.phase == Phase::Reading {
                // Another acceptor that accepted it may still be read: prepare again.
                t.phase = Phase::Idle;
            }
            return;
        }
        t.errored |= 1 << p;
        self.settle(pos);
    }

    /// An unsignaled write to `peer` failed: its connection is broken.
    pub fn on_write_error(&mut self, peer: usize) {
        self.exclude(peer);
    }

    /// Takes `peer` out of use, as if its connection had failed, until
    /// [`Proposer::reconnected`]: nothing more goes to it and majorities are formed without it.
    /// The driver does so with an acceptor whose slot words it cannot read rightly (one that
    /// came back after the log went round without it many times: laps count modulo
    /// [`crate::word::LAPS`]).
    pub fn exclude(&mut self, peer: usize) {
        if peer < self.epoch.len() && self.down & (1 << peer) == 0 {
            self.down |= 1 << peer;
            self.epoch[peer] += 1;
        }
    }

    /// Ends the current phase of the index at `pos` once a majority answered, or once too many
    /// failed to answer at all.
    fn settle(&mut self, pos: usize) {
        let majority = self.majority;
        let members = self.members;
        let t = &mut self.ring[pos];
        if !matches!(t.phase, Phase::Preparing | Phase::Accepting) {
            return;
        }
        let answered = (t.ok | t.failed).count_ones();
        let unanswerable = (t.errored & members).count_ones();
        if answered < majority {
            if members.count_ones() - unanswerable < majority {
                t.phase = Phase::Idle; // too many acceptors out of reach: try again later
            }
            return;
        }
        if t.failed != 0 {
            // Algorithm 5, lines 33–35 and 46–53: abort; prepare again with what we learned.
            t.phase = Phase::Idle;
            return;
        }
        match t.phase {
            Phase::Preparing => t.phase = Phase::Prepared,
            Phase::Accepting => self.decided(pos),
            _ => unreachable!(),
        }
    }

    /// Line 37: adopt the value with the highest accepted proposal, reading it where it was
    /// accepted; then accept.
    fn adopt_or_accept(&mut self, mem: &mut dyn Memory) {
        let pos = self.ring_pos(self.next);
        let index = self.next;
        let Some((accepted, from)) = self.ring[pos].highest else {
            if self.pending.is_some() {
                self.accept(pos, mem);
            }
            return;
        };
        if self.ring[pos].adopted.is_some() {
            return self.accept(pos, mem);
        }
        let q = self.proposals.proposer(accepted);
        let remote = self.layout.value_slot_offset(q, index);
        if from == self.me {
            let mut buf = std::mem::take(&mut self.slot_buf);
            mem.read(remote, &mut buf);
            let ok = self.take_adopted(pos, &buf);
            self.slot_buf = buf;
            if ok {
                self.accept(pos, mem);
            }
        } else {
            let serial = self.next_serial();
            let t = &mut self.ring[pos];
            t.attempt_serial = serial;
            t.phase = Phase::Reading;
            let op = op_id(serial, KIND_READ, pos, from);
            let local = self.layout.scratch_offset();
            let len = self.layout.slot_bytes();
            if self.down & (1 << from) != 0 {
                self.on_error(op);
            } else {
                self.actions.push(Action::Read { peer: from, remote, local, len, op });
            }
        }
    }

    /// A read of a value to adopt completed into the scratch slot.
    pub fn on_read(&mut self, op: u64, mem: &mut dyn Memory) {
        let (serial, _, pos, _) = op_parts(op);
        let Some(t) = self.ring.get(pos) else { return };
        if t.index == NONE || !not_before(serial, t.attempt_serial) || t.phase != Phase::Reading {
            return;
        }
        let mut buf = std::mem::take(&mut self.slot_buf);
        mem.read(self.layout.scratch_offset(), &mut buf);
        let ok = self.take_adopted(pos, &buf);
        self.slot_buf = buf;
        if ok && self.leading {
            self.accept(pos, mem);
        }
    }

    /// Checks the entry read for adoption: one for this index whose proposal is at least the
    /// accepted one (a later entry of the same proposer also carries a safe value: it wrote it
    /// only after a successful prepare). Anything else aborts to a new prepare.
    fn take_adopted(&mut self, pos: usize, slot: &[u8]) -> bool {
        let t = &self.ring[pos];
        let (accepted, _) = t.highest.expect("adopting needs an accepted proposal");
        let adopted = match self.layout.log().decode(t.index, slot) {
            Slot::Entry(e) if e.proposal >= u64::from(accepted) => {
                Some((e.kind, e.value.to_vec(), e.proposal))
            }
            _ => None,
        };
        let index = t.index;
        let t = &mut self.ring[pos];
        match adopted {
            Some((kind, value, proposal)) => {
                let q = self.proposals.proposer(accepted);
                let ours = q == self.me
                    && self.pending.as_ref().is_some_and(|p| {
                        p.at.is_some_and(|(i, first)| i == index && proposal >= u64::from(first))
                    });
                // Or the submitted value as another proposer adopted it (its copy is in that
                // proposer's value log): decided here, it must not be proposed again at the
                // next index, where it would be decided twice (the Mu paper's Listing 2, line
                // 34, "if value == myValue"; simulator seed 120109, two leaders at once).
                let ours = ours
                    || self.pending.as_ref().is_some_and(|p| {
                        p.written && p.kind == kind && self.pending_value[..] == value[..]
                    });
                if ours {
                    // Our own earlier attempt at this index: it is the submitted value.
                    t.adopted = None;
                    t.highest = None;
                } else {
                    t.adopted = Some((kind, value));
                    if let Some(p) = &mut self.pending {
                        if p.at.is_some_and(|(i, _)| i == index) {
                            p.at = None;
                        }
                    }
                }
                t.phase = Phase::Prepared;
                true
            }
            None => {
                t.phase = Phase::Idle;
                false
            }
        }
    }

    /// Lines 40–44 with value indirection (§5.2): the value into this proposer's value log on
    /// every acceptor, then on the same connection the CAS to (proposal, proposal).
    fn accept(&mut self, pos: usize, mem: &mut dyn Memory) {
        let index = self.ring[pos].index;
        let proposal = self.ring[pos].proposal;
        let (kind, value): (EntryKind, &[u8]) = match &self.ring[pos].adopted {
            Some((k, v)) => (*k, v),
            None => {
                let p = self.pending.as_ref().expect("accept needs a value");
                (p.kind, &self.pending_value)
            }
        };
        let len = self
            .layout
            .log()
            .encode(index, u64::from(proposal), kind, value, &mut self.entry)
            .expect("values are checked on submit and on adoption");
        if self.ring[pos].adopted.is_none() {
            let p = self.pending.as_mut().expect("checked above");
            p.written = true;
            if p.at.is_none_or(|(i, _)| i != index) {
                p.at = Some((index, proposal));
            }
        }
        let offset = self.layout.value_slot_offset(self.me, index);
        mem.write(offset, &self.entry[..len]);
        let serial = self.serial;
        let lap = self.lap(index);
        self.ring[pos].new_attempt(serial, Phase::Accepting);
        for p in bits(self.members) {
            let flag = self.piggyback(p, index);
            if p != self.me && self.down & (1 << p) == 0 {
                self.actions.push(Action::Write { peer: p, offset, len: len as u32 });
                self.ring[pos].write_epoch[p] = self.epoch[p];
            }
            let desired =
                SlotWord { min: proposal, accepted: proposal, lap, prev_decided: flag }.pack();
            let expected = self.ring[pos].predicted[p];
            // Algorithm 4, line 47: an acceptor accepts only at or above its promise. Algorithm 5
            // leaves the check out because its predictions are the proposer's own words when
            // it accepts; ours also take in answers that came after the majority (a late,
            // failed prepare), and such a word may hold a higher promise: the CAS would succeed
            // and lower it. So the check stays: such an acceptor counts as a failed answer.
            let allowed = match SlotWord::unpack(expected).view(lap) {
                View::Current(s) => Some(s.min <= proposal),
                View::Fresh => Some(true),
                View::Newer => Some(false),
                View::Abstains => None,
            };
            match allowed {
                Some(true) => self.cas(pos, p, KIND_ACCEPT, expected, desired, mem),
                Some(false) => {
                    self.ring[pos].failed |= 1 << p;
                    self.settle(pos);
                }
                // Abstaining here: no answer (it still got the value write, so that the
                // piggybacked bit of the next index stays true for it).
                None => {
                    self.ring[pos].errored |= 1 << p;
                    self.settle(pos);
                }
            }
        }
    }

    /// §5.4: whether the accept of `index` at `p` may say that `index - 1` is decided, with its
    /// value in this proposer's value log there: we decided it, and the deciding value write
    /// went to `p` on the connection as it is now.
    fn piggyback(&self, p: usize, index: u64) -> bool {
        match self.last_decided {
            Some(i) if i + 1 == index => {
                let epoch = self.last_epochs[p];
                p == self.me || (epoch != NONE && epoch == self.epoch[p])
            }
            _ => false,
        }
    }

    fn decided(&mut self, pos: usize) {
        let t = &mut self.ring[pos];
        let index = t.index;
        debug_assert_eq!(index, self.next);
        let submitted = t.adopted.is_none();
        self.last_decided = Some(index);
        self.last_epochs.copy_from_slice(&t.write_epoch);
        if submitted {
            self.pending = None;
        }
        self.events.push(Event::Decided { index, submitted });
        self.next += 1;
        // The freed window position takes the index `ahead + 1` further on at the next poll.
        t.index = NONE;
        t.phase = Phase::Idle;
    }

    /// Gives free window positions their indices, predicting each acceptor's word for a new
    /// index as the local one (usually the previous lap's final state, alike everywhere).
    fn refill(&mut self, mem: &dyn Memory) {
        if !self.leading {
            return;
        }
        for i in 0..self.ring.len() as u64 {
            let index = self.next + i;
            let pos = self.ring_pos(index);
            if self.ring[pos].index != index {
                self.assign(index, mem);
            }
        }
    }
}
impl std::fmt::Debug for Proposer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proposer")
            .field("me", &self.me)
            .field("leading", &self.leading)
            .field("next", &self.next)
            .field("down", &self.down)
            .field("serial", &self.serial)
            .field("ring", &self.ring)
            .finish()
    }
}
