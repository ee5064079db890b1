//! Broken variants of the engines, chosen at run time, that the tests and the simulator must
//! catch (each breaks one rule of `docs/protocols/ukharon-kv.md`). `None` is the protocol.

/// Which rule a broken engine breaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mutation {
    #[default]
    None,
    /// The primary answers a write before every backup holds it (§7.3: "Upon completion of
    /// the RDMA WRITE, the primary checks ...").
    AnswerBeforeComplete,
    /// The primary answers without checking `Active(view)`, before or after (§7.3).
    AnswerWithoutActive,
    /// A get answered from the speculative store at once (item 1).
    GetFromSpeculativeState,
    /// A backup lets the new primary write before the old one's access is gone (item 2).
    FollowBeforeRevoke,
    /// A new primary serves what its last scan applied, without applying what the old primary
    /// left in its ring (§7.3: the backup "applies the buffered updates" before serving).
    ServeBeforeScan,
}

impl Mutation {
    pub const ALL: [Mutation; 5] = [
        Mutation::AnswerBeforeComplete,
        Mutation::AnswerWithoutActive,
        Mutation::GetFromSpeculativeState,
        Mutation::FollowBeforeRevoke,
        Mutation::ServeBeforeScan,
    ];
}
