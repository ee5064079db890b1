//! Views (the paper's memberships, §3.1–§3.2, §6.3): what the coordinators agree on, one per
//! epoch, and what `Active` is asked about.
//!
//! A view is decided at the consensus index equal to its epoch; view `k + 1` is proposed only
//! once view `k` is decided (Appendix B.2: no gaps), so `Active(view k)` asks whether anything
//! was accepted at index `k + 1`.
//!
//! Leases (§6.2–§6.3). A view carries the lease duration its holders use, and how long a node
//! waits, from the time it took before reading that the view is the latest, before its first
//! lease on the view starts. A view that differs from its predecessor only in its lease
//! duration is *compatible* with it (the paper's adaptive leases): a node that holds a lease on
//! the predecessor moves to it without waiting, because the two are the same membership and an
//! application cannot tell which one it ran an operation in. The precise rule and why it keeps
//! incompatible views from being active at overlapping times:
//!
//! * `V'` is a compatible successor of `V` when it has the same cluster, members (node and unique
//!   id) and primary, and epoch `V.epoch + 1` ([`View::is_compatible_successor`]).
//! * A *run* is a maximal sequence of views, each a compatible successor of the one before.
//!   `run_lease_ns` is the longest lease of the run up to this view.
//! * The first view `W` of a run waits `max(P.run_lease_ns, P.wait_ns)`, `P` the view before
//!   it: the longest lease of every earlier run. The other views of a run carry their run's
//!   wait, for nodes that hold no lease on their predecessor.
//!
//! Why: a lease on a view `V` is taken only after a read of index `V.epoch + 1` found it empty,
//! and it ends at most `V.lease_ns` after that read began. Take an earlier run `R` and the first
//! view `Y` of the run after it: once `Y` is decided, no lease on `R` is taken from a read that
//! begins later, so every lease on `R` ends at most `run_lease_ns(R)` after `Y` was decided. A
//! node's first lease on `W` (not moved from a compatible predecessor) starts `W.wait_ns` after
//! its own read began, which is after `W` was decided, which is no earlier than `Y`'s decision;
//! and `W.wait_ns` is at least `run_lease_ns(R)` for every earlier run `R`. So every lease on an
//! earlier run ends before any lease on `W` starts. A lease moved along a compatible run keeps a
//! start that already waited. Views of one run may be active at overlapping times: that is what
//! compatible means.
//!
//! Rejected: the previous run's longest lease alone as the wait. A long lease, then two
//! membership changes within a few microseconds: the second view waited only the short run's
//! lease while leases on the long one were still held (the randomized lease test catches it,
//! `tests/leases.rs`). Also rejected: waits that count the time since each earlier run ended —
//! shorter, but a coordinator would need to know when every earlier view was decided, which a
//! new leader does not. The cost of the rule kept: once a long lease was used, every later
//! membership change waits that long (the wait never shrinks again).

use thiserror::Error;

/// The most members a view holds: the catastrophic detector's exact clique search works on
/// 64-bit sets.
pub const MEMBERS_MAX: usize = 64;

/// The node id that stands for "no node" in a view's bytes.
const NO_NODE: u16 = u16::MAX;

const MAGIC: u32 = u32::from_le_bytes(*b"UKvw");
/// The version of a view's bytes.
pub const VIEW_VERSION: u16 = 1;
const HEADER_BYTES: usize = 56;
const MEMBER_BYTES: usize = 16;
const CHECKSUM_BYTES: usize = 8;
const CHECKSUM_SEED: u64 = 0x756b_6861_726f_6e56;

/// One member of a view: a node (an application node or a coordinator, by its fabric node id)
/// and the unique id the coordinators gave this join of it. A node that leaves or is removed
/// and comes back joins again under a new unique id; unique ids are never reused (§3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    pub node: u16,
    pub uid: u64,
}

/// A view; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The cluster's id, from its configuration: a node never takes a view of another cluster.
    pub cluster: u64,
    pub epoch: u64,
    /// Sorted by node id, each node at most once, unique ids distinct and not 0.
    pub members: Vec<Member>,
    /// The node the application designates (its primary or leader), a member.
    pub primary: Option<u16>,
    /// How long a lease on this view lasts (δ).
    pub lease_ns: u64,
    /// How long a node waits before its first lease on this view starts, unless it moves a
    /// lease from a compatible predecessor: the longest lease of every earlier run.
    pub wait_ns: u64,
    /// The longest lease of the run of compatible views this one ends.
    pub run_lease_ns: u64,
}

/// Why bytes are not a view, or a view is not well formed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ViewError {
    #[error("{len} bytes are too few for a view ({needed} needed)")]
    TooShort { len: usize, needed: usize },
    #[error("not a view (magic {found:#010x})")]
    Magic { found: u32 },
    #[error("view version {found}, this build reads {VIEW_VERSION}")]
    Version { found: u16 },
    #[error("view checksum mismatch: torn or corrupted bytes")]
    Checksum,
    #[error("malformed view: {0}")]
    Malformed(String),
}

impl View {
    /// The initial view of a cluster (epoch 0): nothing before it to wait for.
    pub fn initial(
        cluster: u64,
        members: Vec<Member>,
        primary: Option<u16>,
        lease_ns: u64,
    ) -> View {
        View { cluster, epoch: 0, members, primary, lease_ns, wait_ns: 0, run_lease_ns: lease_ns }
    }

    /// The view after this one with `members`, `primary` and `lease_ns`, its waiting fields set
    /// by the rule of the module docs.
    pub fn successor(&self, members: Vec<Member>, primary: Option<u16>, lease_ns: u64) -> View {
        let mut next = View {
            cluster: self.cluster,
            epoch: self.epoch + 1,
            members,
            primary,
            lease_ns,
            wait_ns: 0,
            run_lease_ns: 0,
        };
        if next.is_compatible_successor(self) {
            next.wait_ns = self.wait_ns;
            next.run_lease_ns = self.run_lease_ns.max(lease_ns);
        } else {
            next.wait_ns = self.run_lease_ns.max(self.wait_ns);
            next.run_lease_ns = lease_ns;
        }
        next
    }

    /// Whether this view is a compatible successor of `prev` (module docs): only the lease
    /// duration may differ.
    pub fn is_compatible_successor(&self, prev: &View) -> bool {
        self.cluster == prev.cluster
            && self.epoch == prev.epoch.wrapping_add(1)
            && self.members == prev.members
            && self.primary == prev.primary
    }

    /// Whether this view follows `prev` with its waiting fields as the rule says (what a node
    /// that knows both checks before it trusts a shortcut).
    pub fn follows(&self, prev: &View) -> bool {
        let expected = prev.successor(self.members.clone(), self.primary, self.lease_ns);
        self.epoch == expected.epoch
            && self.cluster == expected.cluster
            && self.wait_ns == expected.wait_ns
            && self.run_lease_ns == expected.run_lease_ns
    }

    /// Whether `node` is a member, and under which unique id.
    pub fn uid_of(&self, node: u16) -> Option<u64> {
        self.members.binary_search_by_key(&node, |m| m.node).ok().map(|i| self.members[i].uid)
    }

    pub fn contains(&self, member: Member) -> bool {
        self.uid_of(member.node) == Some(member.uid)
    }

    /// The members' node ids, in order.
    pub fn nodes(&self) -> impl Iterator<Item = u16> + '_ {
        self.members.iter().map(|m| m.node)
    }

    /// Checks what every view must satisfy.
    pub fn check(&self) -> Result<(), ViewError> {
        let bad = |why: String| Err(ViewError::Malformed(why));
        if self.members.len() > MEMBERS_MAX {
            return bad(format!("{} members, at most {MEMBERS_MAX}", self.members.len()));
        }
        for pair in self.members.windows(2) {
            if pair[0].node >= pair[1].node {
                return bad(format!("members not sorted by node, or node {} twice", pair[1].node));
            }
        }
        for (i, m) in self.members.iter().enumerate() {
            if m.node == NO_NODE {
                return bad(format!("node id {NO_NODE} is reserved"));
            }
            if m.uid == 0 {
                return bad(format!("node {} has unique id 0", m.node));
            }
            if self.members[..i].iter().any(|o| o.uid == m.uid) {
                return bad(format!("unique id {} given twice", m.uid));
            }
        }
        if let Some(p) = self.primary {
            if self.uid_of(p).is_none() {
                return bad(format!("primary {p} is not a member"));
            }
        }
        if self.run_lease_ns < self.lease_ns {
            return bad(format!(
                "run lease {} ns shorter than the lease {} ns",
                self.run_lease_ns, self.lease_ns
            ));
        }
        Ok(())
    }

    /// Bytes of the encoded view.
    pub fn encoded_len(&self) -> usize {
        Self::encoded_len_of(self.members.len())
    }

    /// Bytes of an encoded view of `members_count` members.
    pub const fn encoded_len_of(members_count: usize) -> usize {
        HEADER_BYTES + members_count * MEMBER_BYTES + CHECKSUM_BYTES
    }

    /// Appends the view's bytes (little endian, checksum last) to `out`. The view must be well
    /// formed ([`View::check`]): encoding a malformed one is a bug in the caller.
    pub fn encode(&self, out: &mut Vec<u8>) {
        if let Err(e) = self.check() {
            panic!("encoding a malformed view: {e}");
        }
        let start = out.len();
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&VIEW_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.members.len() as u16).to_le_bytes());
        for word in [self.cluster, self.epoch, self.lease_ns, self.wait_ns, self.run_lease_ns] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.extend_from_slice(&u64::from(self.primary.unwrap_or(NO_NODE)).to_le_bytes());
        for m in &self.members {
            out.extend_from_slice(&u64::from(m.node).to_le_bytes());
            out.extend_from_slice(&m.uid.to_le_bytes());
        }
        let sum = mu_log::digest(CHECKSUM_SEED, &out[start..]);
        out.extend_from_slice(&sum.to_le_bytes());
        debug_assert_eq!(out.len() - start, self.encoded_len());
    }

    /// The view whose bytes start `bytes` (bytes after it are ignored), checked: checksum, then
    /// [`View::check`].
    pub fn decode(bytes: &[u8]) -> Result<View, ViewError> {
        let short = |needed: usize| ViewError::TooShort { len: bytes.len(), needed };
        if bytes.len() < HEADER_BYTES + CHECKSUM_BYTES {
            return Err(short(HEADER_BYTES + CHECKSUM_BYTES));
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let magic = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        if magic != MAGIC {
            return Err(ViewError::Magic { found: magic });
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        if version != VIEW_VERSION {
            return Err(ViewError::Version { found: version });
        }
        let count = usize::from(u16::from_le_bytes([bytes[6], bytes[7]]));
        if count > MEMBERS_MAX {
            return Err(ViewError::Malformed(format!("{count} members, at most {MEMBERS_MAX}")));
        }
        let len = Self::encoded_len_of(count);
        if bytes.len() < len {
            return Err(short(len));
        }
        if mu_log::digest(CHECKSUM_SEED, &bytes[..len - CHECKSUM_BYTES]) != word(len - 8) {
            return Err(ViewError::Checksum);
        }
        let primary = word(48);
        if primary > u64::from(NO_NODE) {
            return Err(ViewError::Malformed(format!("primary field {primary:#x}")));
        }
        let mut members = Vec::with_capacity(count);
        for i in 0..count {
            let at = HEADER_BYTES + i * MEMBER_BYTES;
            let node = word(at);
            if node >= u64::from(NO_NODE) {
                return Err(ViewError::Malformed(format!("node field {node:#x}")));
            }
            members.push(Member { node: node as u16, uid: word(at + 8) });
        }
        let view = View {
            cluster: word(8),
            epoch: word(16),
            lease_ns: word(24),
            wait_ns: word(32),
            run_lease_ns: word(40),
            primary: (primary != u64::from(NO_NODE)).then_some(primary as u16),
            members,
        };
        view.check()?;
        Ok(view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(nodes: &[(u16, u64)]) -> Vec<Member> {
        nodes.iter().map(|&(node, uid)| Member { node, uid }).collect()
    }

    fn sample() -> View {
        View::initial(7, members(&[(0, 1), (1, 2), (5, 3)]), Some(1), 20_000)
    }

    #[test]
    fn views_round_trip_through_their_bytes() {
        let v = sample().successor(members(&[(0, 1), (5, 3)]), Some(5), 30_000);
        let mut bytes = Vec::new();
        v.encode(&mut bytes);
        assert_eq!(bytes.len(), v.encoded_len());
        bytes.extend_from_slice(&[0xAB; 5]);
        assert_eq!(View::decode(&bytes).unwrap(), v);
        let empty = View::initial(1, Vec::new(), None, 0);
        let mut bytes = Vec::new();
        empty.encode(&mut bytes);
        assert_eq!(View::decode(&bytes).unwrap(), empty);
    }

    /// Every single-bit change of a view's bytes is refused (checksum, or the fields it
    /// guards), never read as another view.
    #[test]
    fn a_flipped_bit_is_never_a_view() {
        let mut bytes = Vec::new();
        sample().encode(&mut bytes);
        for bit in 0..bytes.len() * 8 {
            let mut torn = bytes.clone();
            torn[bit / 8] ^= 1 << (bit % 8);
            assert!(View::decode(&torn).is_err(), "bit {bit} flipped still decodes");
        }
        assert!(matches!(View::decode(&bytes[..30]), Err(ViewError::TooShort { .. })));
        assert!(matches!(View::decode(&bytes[..bytes.len() - 1]), Err(ViewError::TooShort { .. })));
        assert!(matches!(View::decode(&[0u8; 128]), Err(ViewError::Magic { found: 0 })));
    }

    #[test]
    fn malformed_views_are_refused_with_their_reason() {
        let bad = |v: View| v.check().unwrap_err().to_string();
        let mut v = sample();
        v.members.swap(0, 1);
        assert!(bad(v).contains("sorted"));
        let mut v = sample();
        v.members[2].uid = 1;
        assert!(bad(v).contains("unique id 1 given twice"));
        let mut v = sample();
        v.primary = Some(4);
        assert!(bad(v).contains("primary 4"));
        let mut v = sample();
        v.members[0].uid = 0;
        assert!(bad(v).contains("unique id 0"));
        let mut v = sample();
        v.run_lease_ns = 1;
        assert!(bad(v).contains("run lease"));
    }

    /// §6.3 adaptive leases: a view that changes only the lease duration is compatible and
    /// carries its run's wait; the first incompatible one waits the longest lease of every
    /// earlier run, not only of the run right before it.
    #[test]
    fn a_new_run_waits_for_every_earlier_run() {
        let v0 = sample();
        let v1 = v0.successor(v0.members.clone(), v0.primary, 50_000);
        assert!(v1.is_compatible_successor(&v0));
        assert_eq!((v1.wait_ns, v1.run_lease_ns), (0, 50_000));
        let v2 = v1.successor(v1.members.clone(), v1.primary, 10_000);
        assert_eq!((v2.wait_ns, v2.run_lease_ns), (0, 50_000));
        let v3 = v2.successor(members(&[(0, 1), (1, 2)]), Some(1), 10_000);
        assert!(!v3.is_compatible_successor(&v2));
        assert_eq!((v3.wait_ns, v3.run_lease_ns), (50_000, 10_000));
        // A second change right after: leases on v0..v2 (50 µs) may still be held.
        let v4 = v3.successor(members(&[(0, 1)]), Some(0), 10_000);
        assert_eq!((v4.wait_ns, v4.run_lease_ns), (50_000, 10_000));
        let v5 = v4.successor(v4.members.clone(), v4.primary, 5_000);
        assert!(v5.is_compatible_successor(&v4));
        assert_eq!((v5.wait_ns, v5.run_lease_ns), (50_000, 10_000), "carries the run's wait");
        assert!(v5.follows(&v4) && v4.follows(&v3) && v3.follows(&v2));
        let mut shortcut = v4.clone();
        shortcut.wait_ns = 10_000;
        assert!(!shortcut.follows(&v3), "a view may not wait less than the rule says");
        let other_primary = v0.successor(v0.members.clone(), Some(0), 20_000);
        assert!(!other_primary.is_compatible_successor(&v0));
    }
}
