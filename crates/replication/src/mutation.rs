//! Deliberately broken variants of the engines (feature `mutations`, for tests only): the
//! simulator must catch each within a bounded number of seeds, which shows it can find bugs.
//!
//! A mutation is chosen per thread at run time ([`set`]); with none chosen the engines are the
//! correct ones. The simulator drives a whole cluster from one thread, so one thread's choice
//! breaks every replica of its cluster and nothing else (tests of other clusters run on other
//! threads). Without the feature, [`active`] is a constant `false` and the variants compile away.

/// A broken variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The permission manager grants a new requester without revoking the previous holder
    /// (§5.2 revokes first): two leaders may then write one log.
    SkipRevoke,
    /// Prepare ignores the values it read at the first undecided index and proposes its own
    /// (Listing 2, lines 24–28 adopt the highest-numbered one): a new leader can overwrite a
    /// decided entry.
    SkipPrepareAdopt,
}

impl Mutation {
    pub const ALL: [Mutation; 2] = [Mutation::SkipRevoke, Mutation::SkipPrepareAdopt];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mutation::SkipRevoke => "skip-revoke",
            Mutation::SkipPrepareAdopt => "skip-prepare-adopt",
        }
    }

    pub fn parse(name: &str) -> Option<Mutation> {
        Mutation::ALL.into_iter().find(|m| m.name() == name)
    }
}

#[cfg(feature = "mutations")]
mod active_mutation {
    use super::Mutation;
    use std::cell::Cell;

    thread_local! {
        static ACTIVE: Cell<Option<Mutation>> = const { Cell::new(None) };
    }

    /// Chooses the broken variant the engines of this thread run (`None`: the correct ones).
    pub fn set(mutation: Option<Mutation>) {
        ACTIVE.with(|a| a.set(mutation));
    }

    pub(crate) fn active(mutation: Mutation) -> bool {
        ACTIVE.with(|a| a.get() == Some(mutation))
    }
}

#[cfg(feature = "mutations")]
pub(crate) use active_mutation::active;
#[cfg(feature = "mutations")]
pub use active_mutation::set;

#[cfg(not(feature = "mutations"))]
#[inline(always)]
pub(crate) fn active(_: Mutation) -> bool {
    false
}
